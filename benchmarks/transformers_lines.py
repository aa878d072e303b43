"""Which transformers 4.x lines train on this image: one row per minor line, each a real job through `train` whose
requirements.txt pins the line as AWS's Training Compiler folders pinned theirs (`transformers==4.N.*` and
`datasets`), installed as the toolkit installs it (the Hugging Face stack re-resolved with it, torch held,
`pip check`), then AWS's own run_clm.py (the GPT-2 notebook's, byte for byte) training a tiny GPT-2 for a few steps.

    python benchmarks/transformers_lines.py [--lines 11-57] [--backend eager|xla] [--json FILE]

Each job runs in an overlay Python over the test venv (tests/overlay.py), so nothing here changes the venv. Needs
PyPI. Prints a table (line, the release pip chose, the huggingface-hub, tokenizers, datasets and accelerate it came
with, the outcome and the first line of the failure), and writes the rows as JSON.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests"))

from overlay import era_tokenizer, overlay_python  # noqa: E402

from conftest import SAMPLE_JOB, new_job, run_train  # noqa: E402

AWS = REPO / "tests" / "third_party" / "amazon-sagemaker-examples" / "sagemaker-training-compiler" / "huggingface"
GPT2_FOLDER = AWS / "pytorch_multiple_gpu_single_node" / "language-modeling" / "scripts"
FAMILY = ("transformers", "huggingface-hub", "tokenizers", "datasets", "accelerate")


def job_for(line: int, root: Path, backend: str):
    job = new_job(root / "job")
    shutil.rmtree(job.root / "code")
    (job.root / "code").mkdir()
    shutil.copy(GPT2_FOLDER / "run_clm.py", job.root / "code" / "run_clm.py")
    (job.root / "code" / "requirements.txt").write_text(f"transformers==4.{line}.*\ndatasets\n")
    data = job.root / "input" / "data"
    shutil.rmtree(data)
    text = (SAMPLE_JOB / "input" / "data" / "train" / "notes.txt").read_text() * 8
    (data / "train").mkdir(parents=True)
    (data / "train" / "train.txt").write_text(text)
    era_tokenizer(text, data / "tokenizer")
    base = str(job.root)
    compiled = backend == "xla"
    hyperparameters = {
        "model_type": "gpt2", "tokenizer_name": f"{base}/input/data/tokenizer",
        "train_file": f"{base}/input/data/train/train.txt", "do_train": True, "block_size": 64,
        "config_overrides": "n_layer=2,n_head=2,n_embd=64,n_positions=64", "max_steps": 4, "logging_steps": 2,
        "overwrite_output_dir": True, "save_strategy": "no", "output_dir": f"{base}/model",
        "per_device_train_batch_size": 8, "learning_rate": 0.003, "report_to": "none", "seed": 0,
        "sagemaker_program": "run_clm.py", "sagemaker_job_name": f"transformers-4-{line}",
        "sagemaker_training_compiler_enabled": compiled, "sagemaker_pytorch_xla_multi_worker_enabled": compiled}
    (job.config / "hyperparameters.json").write_text(json.dumps({k: json.dumps(v) for k, v in hyperparameters.items()}))
    return job


def versions(train: Path) -> dict[str, str]:
    python = train.parent / "python"
    code = f"import json, importlib.metadata as m; print(json.dumps({{n: m.version(n) for n in {FAMILY!r}}}))"
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120)
    return json.loads(done.stdout) if done.returncode == 0 else {}


def probe(line: int, backend: str, work: Path) -> dict:
    root = work / f"4.{line}"
    root.mkdir()
    train = overlay_python(root)
    job = job_for(line, root, backend)
    started = time.monotonic()
    result = run_train(job, timeout=1800, command=train)
    failure = job.root / "output" / "failure"
    lines = [line.strip() for line in failure.read_text().splitlines() if line.strip()] if failure.exists() else []
    # The failure's first line, and the cause after it (the exception, or what pip had to build).
    first = " ".join(lines[:2]).replace(str(root), "...")
    return {"line": f"4.{line}", "backend": backend, "exit_code": result.returncode,
            "seconds": round(time.monotonic() - started, 1), **versions(train), "failure": first[:400]}


def table(rows: list[dict]) -> str:
    lines = ["| line | transformers | huggingface-hub | tokenizers | datasets | accelerate | outcome | seconds |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        outcome = "trains" if r["exit_code"] == 0 else f"exit {r['exit_code']}: {r['failure']}"
        if "could not be installed" in r["failure"]:   # the overlay still shows the venv's own: nothing to list
            r = {"line": r["line"], "seconds": r["seconds"]}
        lines.append(f"| {r['line']} | {r.get('transformers', '-')} | {r.get('huggingface-hub', '-')} | "
                     f"{r.get('tokenizers', '-')} | {r.get('datasets', '-')} | {r.get('accelerate', '-')} | "
                     f"{outcome.replace('|', '/')} | {r['seconds']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", default="11-57", help="minor lines of transformers 4: 11-57, or 25,38")
    parser.add_argument("--backend", choices=("eager", "xla"), default="eager")
    parser.add_argument("--json", default=str(HERE / "results" / "transformers-lines.json"))
    args = parser.parse_args()
    if "-" in args.lines:
        first, last = map(int, args.lines.split("-"))
        lines = list(range(first, last + 1))
    else:
        lines = [int(n) for n in args.lines.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="opentc-transformers-lines-") as work:
        for line in lines:
            rows.append(probe(line, args.backend, Path(work)))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
            Path(args.json).write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "rows": rows}, indent=1))
    print(table(rows))


if __name__ == "__main__":
    main()

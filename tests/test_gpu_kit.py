"""The GPU kit (dev/gpu-kit): what a lent GPU machine with its own torch and no package index needs, packed here and
carried within the device tool's 64 MiB; its dry run shows the budget and every step in order with its expected
seconds; its install step works offline, from the kit alone, into a fresh venv (on this machine's Python, without
torch: the wheels are pure Python or abi3, and sagemaker-training's sdist is built as the GPU machine builds it); its
rehearsal runs the seeds' job through it on the CPU within its budget, leaving in --out only what the device tool
brings back; and without a GPU `run` measures nothing.

No GPU here, so `run` itself is not exercised beyond its refusal: `rehearse` runs the same steps on the CPU.
Needs PyPI (the pack step downloads), as dev/setup does.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, clean_env

pytestmark = [pytest.mark.slow]

KIT = REPO / "dev" / "gpu-kit"


def kit(*args, timeout=600):
    return subprocess.run([str(KIT), *map(str, args)], cwd=str(REPO), env=clean_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def packed():
    done = kit("pack")
    assert done.returncode == 0, done.stdout[-3000:]
    return done.stdout


def test_the_kit_fits_in_what_the_device_tool_carries(packed):
    summary = next(line for line in packed.splitlines() if line.startswith("dev/gpu-kit plan (2 GPU(s)): carried"))
    carried = float(summary.split(" files, ")[1].split(" MiB")[0])
    assert carried <= 64, summary
    for wheel in ("botocore-", "boto3-", "psutil-", "setuptools-", "tlparse-", "sagemaker_training-5.1.4.tar.gz"):
        assert f".work/gpu-kit/wheels/{wheel}" in packed, wheel
    assert "dev/gpu-kit plan: ready" in packed


def test_the_dry_run_shows_the_budget_and_every_step_in_order(packed):
    four = kit("plan", "--gpus", "4", "--budget", "480")
    assert four.returncode == 0, four.stdout
    assert "The budget: 480 s (gpu scale)" in four.stdout
    listed = [line for line in four.stdout.splitlines() if line.startswith("- [")]
    names = [re.match(r"- \[\w+\] (.*?) \(\d+ s, bound \d+ s; \d+ s\)", line)[1] for line in listed]
    assert names == [
        "make a fresh venv", "let it see the machine's packages (a .pth file)", "put the kit's pip into it",
        "install from the kit what the machine lacks",
        "install the launcher, compare and toolkit over the machine's torch",
        "GPT-2 small, eager", "GPT-2 small, Inductor cold", "GPT-2 small, Inductor warm",
        "run_clm (the seeds' job), compiler off", "run_clm (the seeds' job), Inductor",
        "run_clm (the seeds' job), side by side",
        "GPT-2 small, largest batch that fits, eager", "GPT-2 small, largest batch that fits, inductor",
        "the sample, compiler off", "the sample, Inductor cold", "the sample, Inductor warm",
        "the sample, side by side", "nested compile regions: gradients against eager",
        "DDP over NCCL, 4 GPUs, eager", "DDP over NCCL, 4 GPUs, inductor"], names
    # each with its expected seconds, its bound and the running total, marked where the budget would run out
    assert "- [1] GPT-2 small, eager (40 s, bound 100 s; 90 s): " in four.stdout
    assert "[past the budget if all before it take their expected time]" in listed[-1]
    assert "--config gpt2 --seq 512 --batch 8 --dtype bf16" in four.stdout
    assert "--nproc-per-node 4 --backend inductor --device cuda" in four.stdout
    assert "$OUT receives only gpu-figures.json, gpu-figures.md, gpu-kit.log" in four.stdout
    # the rehearsal shares this machine with the test suite: its bounds are four times what a quiet machine takes
    rehearsal = kit("plan", "--gpus", "1", "--scale", "cpu")
    assert "- [2] run_clm (the seeds' job), Inductor (60 s, bound 240 s; " in rehearsal.stdout, rehearsal.stdout
    one = kit("plan", "--gpus", "1")
    assert one.returncode == 0 and "- DDP over NCCL: skipped, one GPU" in one.stdout
    assert "DDP over NCCL, 1 GPUs" not in one.stdout
    for count in ("0", "-3"):
        none = kit("plan", "--gpus", count)
        assert none.returncode == 2 and f"--gpus {count}: the machine's GPU count, 1 or more" in none.stdout


def test_a_budget_or_gpu_count_no_machine_has_is_refused():
    """Issue 51: --budget 99999999999999999999 was accepted and planned against."""
    for args, said in ((("--budget", "99999999999999999999"), "--budget 99999999999999999999: seconds, 1 or more, "
                                                               "at most 86400 (a day)"),
                       (("--budget", "0"), "--budget 0: seconds, 1 or more"),
                       (("--gpus", str(2**31)), f"--gpus {2**31}: the machine's GPU count, 1 or more")):
        done = kit("plan", *args)
        assert done.returncode == 2 and said in done.stdout, done.stdout


def test_the_install_step_works_offline_from_the_kit_alone(packed, tmp_path):
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    venv = tmp_path / "venv"
    done = kit("install", "--venv", tmp_path, "--python", base, "--out", tmp_path / "out")
    assert done.returncode == 0, (done.stdout + (tmp_path / "out" / "gpu-kit.log").read_text())[-5000:]
    imported = subprocess.run([str(venv / "bin" / "python"), "-c", "import opentc_toolkit.entry, opentc_launcher.run, "
                               "opentc_compare.cli, sagemaker_training.environment, boto3, psutil; print('ok')"],
                              capture_output=True, text=True, timeout=300)
    assert imported.stdout.strip() == "ok", imported.stderr[-3000:]
    assert (venv / "bin" / "opentc-train").exists() and (venv / "bin" / "tlparse").exists()


def test_without_a_gpu_run_measures_nothing_and_says_why(tmp_path):
    done = kit("run", "--out", tmp_path / "out", "--python", sys.executable)
    assert done.returncode == 2, done.stdout[-3000:]
    assert "no GPU visible to" in done.stdout and "dev/gpu-kit plan" in done.stdout
    assert not (tmp_path / "out").exists()


def test_the_rehearsal_runs_the_seeds_job_through_the_kit_within_its_budget(packed, tmp_path):
    """The run_clm figure, rehearsed on the CPU over this machine's torch: the kit's offline install into a fresh
    venv, both jobs through `train` and opentc-compare's table, within the budget, and --out as the device tool
    would bring it back."""
    out = tmp_path / "out"
    done = kit("rehearse", "--figures", "2", "--budget", "400", "--out", out, timeout=900)
    results = json.loads((out / "gpu-figures.json").read_text())
    failed = [s for s in results["steps"] if s["status"] != "ok"]
    assert done.returncode == 0, "\n".join([*(f"{s['key']}: {s['status']} after {s.get('seconds')} s\n"
                                               f"{s.get('output_tail', '')}" for s in failed), done.stdout[-2000:]])
    assert [(s["key"], s["status"]) for s in results["steps"]] == [(key, "ok") for key in (
        "venv", "link", "pip", "missing", "ours", "clm-off", "clm-inductor", "clm-table")]
    assert results["elapsed_s"] <= 400
    table = results["steps"][-1]["table"]
    assert "| | eager (run-clm-off) | inductor (run-clm-inductor) |" in table
    assert "| optimizer steps | 10 | 10 |" in table
    assert sorted(p.name for p in out.iterdir()) == ["gpu-figures.json", "gpu-figures.md", "gpu-kit.log"]
    assert "| run_clm (the seeds' job), side by side | ok |" in (out / "gpu-figures.md").read_text()

"""Does torch 2.14's own cross-process cache of Dynamo's work (TORCH_CACHING_PRECOMPILE=1, its DynamoCache) cut a
warm job's start, measured before adopting it: a GPT-2 compiled whole and compiled per block (regional), each cold
and then warm twice, with and without it, every run a fresh process on its own cache folder.

    .venv-inductor/bin/python benchmarks/precompile_probe.py [--json FILE]

With it on, torch saves Dynamo's compiled code only when the process calls torch.compiler.save_cache_artifacts(),
which each run here does after its last step (the worker would have to, after the script). Prints a markdown table
and writes JSON. CPU figures (2 cores here); a failed run is a row with its error.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from compiler_benchmark import publish, table

HERE = Path(__file__).resolve().parent

RUN = r'''
import json, os, sys, time
started = float(os.environ["PROBE_T0"])
import torch
from torch._dynamo import callback
spent, opened = [], []
callback.on_compile_start(lambda *a: opened.append(time.perf_counter()))
callback.on_compile_end(lambda *a: spent.append(time.perf_counter() - opened.pop()))
from transformers import GPT2Config, GPT2LMHeadModel
torch.manual_seed(0)
config = GPT2Config(n_layer=4, n_head=4, n_embd=256, n_inner=1024, vocab_size=400, n_positions=128,
                    use_cache=False, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
model = GPT2LMHeadModel(config).train()
if os.environ["PROBE_HOW"] == "regional":
    for block in model.transformer.h:
        block.compile()
    step_model = model
else:
    step_model = torch.compile(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
generator = torch.Generator().manual_seed(0)
first = None
for _ in range(3):
    batch = torch.randint(0, 400, (8, 128), generator=generator)
    loss = step_model(input_ids=batch, labels=batch).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    first = first or time.time()
from torch._dynamo.utils import counters
saved = None
if os.environ.get("TORCH_CACHING_PRECOMPILE") == "1":
    torch.compiler.save_cache_artifacts()
    saved = os.path.isdir(os.path.join(os.environ["TORCHINDUCTOR_CACHE_DIR"], "dynamo"))
print("PROBE " + json.dumps({"first_step_s": first - started, "compile_s": sum(spent),
      "graphs_traced": int(counters["stats"]["unique_graphs"]), "saved": saved, "loss": loss.item()}))
'''


def run(how: str, precompile: bool, cache: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH", "TRITON_"))}
    env.update(TORCHINDUCTOR_CACHE_DIR=str(cache), TORCHINDUCTOR_VEC_ISA_OK="1", PROBE_HOW=how,
               PROBE_T0=repr(__import__("time").time()))
    if precompile:
        env["TORCH_CACHING_PRECOMPILE"] = "1"
    proc = subprocess.run([sys.executable, "-c", RUN], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=1800)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("PROBE ")), None)
    if proc.returncode != 0 or line is None:
        error = [ln for ln in proc.stdout.splitlines() if "Error" in ln]
        return {"error": (error[-1] if error else proc.stdout[-300:]).strip()[:300]}
    return json.loads(line[len("PROBE "):])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", default=str(HERE / "results" / "precompile.json"))
    args = p.parse_args()
    import torch

    rows = []
    work = Path(tempfile.mkdtemp(prefix="opentc-precompile-"))
    try:
        for how in ("whole", "regional"):
            for precompile in (False, True):
                cache = work / f"{how}-{precompile}"
                for run_name in ("cold", "warm 1", "warm 2"):
                    print(f"{how}, precompile {precompile}, {run_name} ...", file=sys.stderr, flush=True)
                    rows.append({"how": how, "precompile": precompile, "run": run_name, **run(how, precompile, cache)})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
               "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, torch {torch.__version__}",
               "command": " ".join([Path(sys.executable).name, *sys.argv]), "rows": rows}
    body = [[r["how"], "on" if r["precompile"] else "off", r["run"],
             *(["-", "-", "-", "-", r["error"]] if "error" in r else
               [f"{r['first_step_s']:.1f}", f"{r['compile_s']:.1f}", r["graphs_traced"], f"{r['loss']:.5f}", ""])]
            for r in rows]
    text = (f"Machine: {results['machine']}. GPT-2 4 layers 256 wide, batch 8 x 128, CPU.\n\n"
            + table(["compiled", "TORCH_CACHING_PRECOMPILE", "run", "first step after (s)", "compile (s)",
                     "graphs Dynamo traced", "loss after 3 steps", "error"], body))
    publish(results, text, args.json)


if __name__ == "__main__":
    main()

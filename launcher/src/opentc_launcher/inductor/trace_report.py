"""Debug mode for torch.compile: the switches each worker sets in its own process before torch is imported (its
session reads --debug-mode), and the report of what it did: tlparse (PyPI's `tlparse`) run over each TORCH_TRACE
file the workers wrote, one HTML report per process (index.html), beside the trace in the compiler folder.

The commands are only described here; the launcher runs them after the workers ended, under its stop handling
and time bound (a large trace can take tlparse minutes).
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from collections.abc import Mapping

from ..backend import FollowUp

log = logging.getLogger("opentc_launcher")

# What debug mode writes (under the compiler folder, output/data/compiler/ in a SageMaker job).
TRACE_FOLDER = "torch_trace"          # TORCH_TRACE: torch's structured trace, one file per rank (tlparse reads it)
LOGS_FILE = "torch_logs.txt"          # TORCH_LOGS_OUT: the graph-break and recompile logs (.rank<N> per worker)
# Another tlparse than the one installed beside Python (a newer build, say).
TLPARSE_VARIABLE = "OPENTC_TLPARSE"


def debug_environment(folder: str) -> dict[str, str]:
    """torch's debug switches, with their artefacts under `folder`."""
    return {"TORCH_TRACE": os.path.join(folder, TRACE_FOLDER), "TORCH_LOGS": "graph_breaks,recompiles",
            "TORCH_LOGS_OUT": os.path.join(folder, LOGS_FILE)}


def tlparse_command(env: Mapping[str, str] = os.environ) -> str | None:
    """$OPENTC_TLPARSE, else tlparse beside this Python (the venv's), else on PATH; None when it is not installed."""
    chosen = env.get(TLPARSE_VARIABLE, "").strip()
    if chosen:
        return chosen
    beside = os.path.join(os.path.dirname(sys.executable), "tlparse")
    return beside if os.access(beside, os.X_OK) else shutil.which("tlparse")


def render_commands(trace_dir: str, out_dir: str) -> list[FollowUp]:
    """tlparse's report of every trace file in `trace_dir`, into `out_dir`/<file>/index.html. Logs why there is
    nothing to run (no trace, no tlparse): a missing report is no reason for a job to fail."""
    try:
        traces = sorted(name for name in os.listdir(trace_dir) if name.endswith(".log"))
    except OSError:
        log.warning("debug mode: no torch.compile trace in %s (nothing was compiled?)", trace_dir)
        return []
    command = tlparse_command()
    if command is None:
        log.warning("debug mode: tlparse is not installed, so the traces in %s stay unrendered "
                    "(pip install tlparse, then: tlparse <trace>.log)", trace_dir)
        return []
    commands = []
    for name in traces:
        target = os.path.join(out_dir, name[:-len(".log")])
        commands.append(FollowUp(
            argv=(command, os.path.join(trace_dir, name), "-o", target, "--overwrite", "--no-browser"),
            what=f"tlparse's report of {name}", product=os.path.join(target, "index.html")))
    return commands

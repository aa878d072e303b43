"""Debug mode's report of what torch.compile did: tlparse (PyPI's `tlparse`) run over each TORCH_TRACE file the
workers wrote, one HTML report per process (index.html), beside the trace in the compiler folder."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys

log = logging.getLogger("opentc_launcher")

TIMEOUT = 300.0


def tlparse_command() -> str | None:
    """tlparse beside this Python (the venv's), else on PATH; None when it is not installed."""
    beside = os.path.join(os.path.dirname(sys.executable), "tlparse")
    return beside if os.access(beside, os.X_OK) else shutil.which("tlparse")


def render_trace_reports(trace_dir: str, out_dir: str) -> list[str]:
    """tlparse's report of every trace file in `trace_dir`, into `out_dir`/<file>/; the reports written. Logs what
    it could not do, and never raises: a missing report is no reason for a job to fail."""
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
    written = []
    for name in traces:
        target = os.path.join(out_dir, name[:-len(".log")])
        try:
            proc = subprocess.run([command, os.path.join(trace_dir, name), "-o", target, "--overwrite",
                                   "--no-browser"], capture_output=True, text=True, timeout=TIMEOUT)
        except (OSError, subprocess.SubprocessError) as e:
            log.warning("debug mode: tlparse could not render %s: %s", name, e)
            continue
        index = os.path.join(target, "index.html")
        if proc.returncode == 0 and os.path.isfile(index):
            written.append(index)
            log.info("debug mode: tlparse's report of %s is %s", name, index)
        else:
            log.warning("debug mode: tlparse could not render %s (exit code %d): %s", name, proc.returncode,
                        (proc.stderr or proc.stdout).strip()[-500:])
    return written

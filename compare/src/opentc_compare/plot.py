"""The comparison as a picture: throughput, step time and peak memory as bars, and the loss curves on one axis,
each job labelled by its backend and name (what AWS's notebook drew by hand)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from .inputs import Job
from .table import unique_labels

SIZE_INCHES = (12, 8)
DPI = 100          # 1200 x 800 pixels
COLOURS = {"eager": "#7f7f7f", "xla": "#1f77b4", "inductor": "#d62728"}
DEFAULT_EXTENSION = "png"


class BadPlotPath(ValueError):
    """A --plot file that cannot be written; the message names it and what is accepted."""


def target(path: str) -> str:
    """The file --plot will write, checked before any job is read: `path`, or `path`.png when it has no extension
    (matplotlib would add that itself, and the command must say which file it wrote)."""
    if not path.strip():
        raise BadPlotPath("--plot needs a file name, such as compare.png.")
    if os.path.isdir(path):
        raise BadPlotPath(f"--plot {path} is a folder: pass a file name, such as {os.path.join(path, 'compare.png')}.")
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        raise BadPlotPath(f"--plot {path}: the folder {folder} does not exist: create it, or pass a file in an "
                          f"existing folder.")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise BadPlotPath(f"--plot {path}: the folder {folder} is not writable: pass a file in a folder you can write.")
    extension = os.path.splitext(path)[1][1:].lower()
    if not extension:
        return f"{path.rstrip('.')}.{DEFAULT_EXTENSION}"
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    supported = FigureCanvasAgg.get_supported_filetypes()   # what savefig can write without a screen
    if extension not in supported:
        raise BadPlotPath(f"--plot {path}: matplotlib cannot write .{extension} files; name the file with one of: "
                          f"{', '.join('.' + e for e in sorted(supported))} (.png by default).")
    return path


def draw(jobs: Sequence[Job], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")   # no screen needed
    import matplotlib.pyplot as plt

    labels = [label.replace("$", r"\$") for label in unique_labels(jobs)]   # a $ would start TeX math
    colours = [COLOURS.get(str(job.summary.get("backend")), "#2ca02c") for job in jobs]
    summaries = [job.summary for job in jobs]
    fig, axes = plt.subplots(2, 2, figsize=SIZE_INCHES, dpi=DPI)
    fig.suptitle("Did the compiler pay? " + " vs ".join(labels), fontsize=11)

    samples = [(s.get("throughput") or {}).get("samples_per_second") for s in summaries]
    steps = [(s.get("step_seconds") or {}).get("median") for s in summaries]
    if all(v is not None for v in samples):
        throughput, unit = samples, "samples/s"
    else:   # without batch shapes: optimizer steps per second, from the median step
        throughput, unit = [1 / v if v else 0.0 for v in steps], "optimizer steps/s"
    _bars(axes[0][0], labels, [v or 0.0 for v in throughput], colours, f"Throughput ({unit}, higher is better)")
    _bars(axes[0][1], labels, [(v or 0.0) * 1000 for v in steps], colours, "Median step (ms, lower is better)")
    _bars(axes[1][0], labels, [s.get("peak_memory_mb") or 0.0 for s in summaries], colours,
          "Peak memory (MB, lower is better)")
    ax = axes[1][1]
    for label, colour, summary in zip(labels, colours, summaries, strict=True):
        points = (summary.get("loss") or {}).get("points") or []
        if points:
            ax.plot([p["step"] for p in points], [p["loss"] for p in points], marker=".", label=label, color=colour)
    ax.set_title("Loss", fontsize=10)
    ax.set_xlabel("step")
    if ax.lines:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no loss logged", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def _bars(ax: Any, labels: list[str], values: list[float], colours: list[str], title: str) -> None:
    positions = range(len(labels))
    ax.bar(positions, values, color=colours)
    ax.set_xticks(list(positions), labels, fontsize=8, rotation=10)
    ax.set_title(title, fontsize=10)
    for x, value in zip(positions, values, strict=True):
        ax.annotate(f"{value:,.1f}", (x, value), ha="center", va="bottom", fontsize=8)

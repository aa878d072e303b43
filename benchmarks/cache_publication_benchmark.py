"""What the compilation cache's working copy costs a job, the part issue 31 A changed: open() (the copy a warm job
makes, checked against the manifest) and publish() (the copy back, the claim a publication now carries, the renames),
on a made-up cache of N files, each timed over several runs in this process.

    .venv/bin/python benchmarks/cache_publication_benchmark.py [--files 2000 8000] [--runs 5]

Prints a table: files, size, median and best open() and publish() seconds. Run it on two checkouts (before and after
a change) to put them side by side; RESULTS.md has the figures for the publication claim.
"""

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from opentc_launcher.published_cache import WorkingCopy


def fill(folder: Path, files: int) -> int:
    size = 0
    for i in range(files):
        path = folder / f"sub{i % 50}" / f"entry{i}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        data = (f"{i}:" * 300).encode()   # about 1.5 KB, as Inductor's small entries
        path.write_bytes(data)
        size += len(data)
    return size


def measure(files: int, runs: int) -> tuple[int, list[float], list[float]]:
    opens, publishes = [], []
    size = 0
    for _ in range(runs):
        root = Path(tempfile.mkdtemp(prefix="opentc-cache-bench-"))
        try:
            first = WorkingCopy(published=str(root / "cache" / "inductor"), working=str(root / "w0"))
            first.open()
            size = fill(root / "w0", files)
            first.publish()                                    # a cold job published
            warm = WorkingCopy(published=str(root / "cache" / "inductor"), working=str(root / "w1"))
            started = time.perf_counter()
            warm.open()                                        # a warm job's copy, checked
            opens.append(time.perf_counter() - started)
            started = time.perf_counter()
            warm.publish()                                     # and its publication
            publishes.append(time.perf_counter() - started)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return size, opens, publishes


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--files", type=int, nargs="+", default=[2000, 8000])
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args()
    print("| files | size (MB) | open() median (s) | open() best (s) | publish() median (s) | publish() best (s) |")
    print("|---|---|---|---|---|---|")
    for files in args.files:
        size, opens, publishes = measure(files, args.runs)
        print(f"| {files} | {size / 1e6:.1f} | {statistics.median(opens):.3f} | {min(opens):.3f} | "
              f"{statistics.median(publishes):.3f} | {min(publishes):.3f} |", flush=True)


if __name__ == "__main__":
    main()

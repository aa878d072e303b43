"""`opentc-compare JOB... [--plot FILE.png]`: did the compiler pay? The jobs' summaries side by side.

    opentc-compare .work/eager .work/xla .work/inductor --plot compare.png
    opentc-compare s3://bucket/jobs/gpt2-eager/output/output.tar.gz s3://bucket/jobs/gpt2-inductor/output/output.tar.gz

Each JOB is a job folder (its output/data/job-summary.json), an output folder, an output.tar.gz (what SageMaker
keeps in S3), or an s3:// URI of one. The first job is the reference for the ratios. Exit code 2 when a job
cannot be read, naming it.
"""

from __future__ import annotations

import argparse
import sys

from .inputs import InputError, read_job
from .table import render


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="opentc-compare", description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    parser.add_argument("jobs", nargs="+", metavar="JOB",
                        help="job folder, output folder, output.tar.gz, or s3:// URI of an output.tar.gz")
    parser.add_argument("--plot", metavar="FILE.png", help="also draw the comparison into this PNG file")
    args = parser.parse_args(argv)
    try:
        jobs = [read_job(argument) for argument in args.jobs]
    except InputError as e:
        print(f"opentc-compare: {e}", file=sys.stderr)
        return 2
    print(render(jobs))
    if args.plot:
        from .plot import draw

        draw(jobs, args.plot)
        print(f"\nwrote {args.plot}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

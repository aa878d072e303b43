"""`opentc-compare JOB... [--price-per-hour USD] [--plot FILE.png]`: did the compiler pay? The jobs' summaries side
by side.

    opentc-compare .work/eager .work/xla .work/inductor --plot compare.png
    opentc-compare s3://bucket/jobs/gpt2-eager/output/output.tar.gz s3://bucket/jobs/gpt2-inductor/output/output.tar.gz
    opentc-compare .work/eager gpt2-2-hosts/algo-1 gpt2-2-hosts/algo-2     # a job's two hosts: one column
    opentc-compare .work/native .work/compiled --price-per-hour 32.77      # cost, saving and break-even too

Each JOB is a job folder (its output/data/job-summary.json), an output folder, an output.tar.gz (what SageMaker
keeps in S3), or an s3:// URI of one. The first job is the reference for the ratios. Every input is treated as
someone else's file: a summary is read only up to 16 MiB, must be UTF-8 JSON of format opentc-job-summary/1, and
each field it has must hold the type the format gives it (fields this version does not know are ignored).

A multi-host job writes one summary per host. Summaries with the same job_name and the same list of hosts (more
than one), each from another of those hosts, are one job's (SageMaker's job names are unique) and make one column,
where the first of them was given: throughput summed over the hosts (when every host measured its own workers'),
the longest wall time and time to the first step, the highest peak memory, the loss, steps and compile from the
leader (the first host), succeeded only if every host did. A job with hosts missing is still shown, its label
saying which ("2 of 3 hosts: algo-2 missing"), its throughput not summed; the same host of a job twice is bad input.

--price-per-hour USD adds each job's cost (its wall time x the price of one instance-hour x its hosts) and its saving
against the first. Where an eager job and a compiled one are compared (the first and another), a row says after how
many optimizer steps the compiled job's longer wait for its first step is paid back by its faster steps. The jobs'
findings (what the workers and their compile reports found) are listed under the table.

--plot FILE draws the comparison into FILE, in the format its extension names (any matplotlib writes without a
screen: .png, .pdf, .svg, ...); a name without an extension gets .png. The file's folder and extension are checked
before any job is read.

s3:// URIs are read with boto3 (AWS_ENDPOINT_URL, AWS_DEFAULT_REGION and the credentials as the AWS CLI reads them).
OPENTC_COMPARE_S3_TIMEOUT: seconds to wait for S3 to connect and for each answer, per attempt, of 2 (default 5,
at most 3600): an endpoint that does not answer fails in seconds, not minutes.

Exit codes: 0 the table (and the plot) written; 2 bad input, named with what is accepted: a job that cannot be
read or is not a valid summary, a host of a job given twice, a --plot file that cannot be written, a --price-per-hour
that is not a number above 0, a bad OPENTC_COMPARE_S3_TIMEOUT; 1 the plot could not be drawn or saved (the table was
printed). Errors are one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import math
import sys

from .hosts import merge_hosts
from .inputs import S3_ATTEMPTS, S3_TIMEOUT_SECONDS, S3_TIMEOUT_VARIABLE, InputError, read_job
from .plot import BadPlotPath, draw, target
from .table import render

EPILOG = (f"{S3_TIMEOUT_VARIABLE}: seconds s3:// reads wait to connect and for each answer, per attempt, of "
          f"{S3_ATTEMPTS} (default {S3_TIMEOUT_SECONDS:g}). The hosts of one multi-host job (same job_name and "
          f"hosts) are one column. Exit codes: 0 done; 2 bad input (a job, a host given twice, "
          f"--price-per-hour, --plot, {S3_TIMEOUT_VARIABLE}), named; 1 the plot could not be drawn.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="opentc-compare", description=__doc__.split("\n\n")[0].split(": ", 1)[1],
                                     epilog=EPILOG)
    parser.add_argument("jobs", nargs="+", metavar="JOB",
                        help="job folder, output folder, output.tar.gz, or s3:// URI of an output.tar.gz "
                             "(a multi-host job: one per host)")
    parser.add_argument("--price-per-hour", metavar="USD",
                        help="the price of one instance-hour: adds each job's cost (wall time x price x hosts) and "
                             "its saving against the first")
    parser.add_argument("--plot", metavar="FILE.png",
                        help="also draw the comparison into this file (.png, .pdf, .svg, ...; no extension: .png)")
    args = parser.parse_args(argv)
    try:
        # The plot's file first: a bad one fails at once, not after the table.
        plot = target(args.plot) if args.plot is not None else None
        price = price_per_hour(args.price_per_hour) if args.price_per_hour is not None else None
        jobs = merge_hosts([read_job(argument) for argument in args.jobs])   # a multi-host job: one Job
    except (InputError, BadPlotPath) as e:
        print(f"opentc-compare: {_one_line(e)}", file=sys.stderr)
        return 2
    print(render(jobs, price))
    if plot:
        try:
            draw(jobs, plot)
        except Exception as e:  # noqa: BLE001  (the table is out; a failed plot is one line, not a traceback)
            print(f"opentc-compare: --plot {plot} could not be drawn: {type(e).__name__}: {_one_line(e)}",
                  file=sys.stderr)
            return 1
        added = f" (--plot {args.plot} has no extension: PNG)" if plot != args.plot else ""
        print(f"\nwrote {plot}{added}", file=sys.stderr)
    return 0


# No instance costs near this; a bound keeps a job's cost (wall time x price x hosts) a finite figure.
MAX_PRICE = 1_000_000


def price_per_hour(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= MAX_PRICE):
        raise InputError(f"--price-per-hour {text[:40]!r} is not accepted: give the USD price of one instance-hour, a "
                         f"number above 0 and at most {MAX_PRICE:,.0f} (e.g. 1.515 for an ml.g5.2xlarge)")
    return value


def _one_line(error: Exception) -> str:
    """An error as one line: messages quote others' text (tarfile's, botocore's), which can hold line breaks."""
    return " ".join(str(error).split())


if __name__ == "__main__":
    sys.exit(main())

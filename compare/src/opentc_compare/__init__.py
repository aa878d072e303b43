"""opentc_compare: did the compiler pay? Each job's summary (output/data/job-summary.json, written by the
toolkit for every job) side by side: `opentc-compare JOB...` prints a table, one column per job, with ratios to the
first job, and `--plot FILE.png` draws throughput, step time and peak memory as bars and the loss curves on one
axis. Inputs: job folders, output.tar.gz files (what SageMaker keeps), or s3:// URIs of them.
"""

__version__ = "0.1.0"

"""`opentc-train JOB_DIR`: run a job folder here exactly as the image's `train` runs /opt/ml.

It executes sagemaker-training's `train` with SAGEMAKER_BASE_DIR=JOB_DIR and
SAGEMAKER_TRAINING_MODULE=opentc_toolkit.entry:main, the two variables the image sets.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from typing import NoReturn, Optional

TRAINING_MODULE = "opentc_toolkit.entry:main"


def train_command() -> str:
    here = os.path.dirname(sys.executable)
    found = shutil.which("train", path=here) or shutil.which("train")
    if not found:
        sys.exit("opentc-train: sagemaker-training's `train` command is not installed "
                 "(pip install -c constraints.txt ./launcher ./toolkit)")
    return found


def main(argv: Optional[list[str]] = None) -> NoReturn:
    parser = argparse.ArgumentParser(prog="opentc-train", description=__doc__.splitlines()[0])
    parser.add_argument("job_dir", help="a folder laid out like /opt/ml (input/config/*.json, code/, ...)")
    args = parser.parse_args(argv)
    job_dir = os.path.abspath(args.job_dir)
    if not os.path.isfile(os.path.join(job_dir, "input", "config", "hyperparameters.json")):
        parser.error(f"{job_dir} is not a job folder: input/config/hyperparameters.json is missing")
    command = train_command()
    env = {**os.environ, "SAGEMAKER_BASE_DIR": job_dir, "SAGEMAKER_TRAINING_MODULE": TRAINING_MODULE}
    os.execve(command, [command], env)


if __name__ == "__main__":
    main()

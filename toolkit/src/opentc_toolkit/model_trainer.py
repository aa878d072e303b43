"""Jobs the SageMaker Python SDK v3 starts with `ModelTrainer(source_code=SourceCode(...))`.

The SDK ships its own drivers to the container as the input channel `sm_drivers` (with `sourcecode.json` and
`distributed.json`), the code as the channel `code`, and replaces the image's entrypoint with
`/bin/bash -c "... sm_train.sh"`, which would run the entry script with the image's `python3`, with every
hyperparameter (the `sagemaker_*` ones too) as arguments, bypassing `train`: the compiler silently off. The
image's BASH_ENV hook (container/bash_env.sh) hands such a job to `train` instead; this module is what
`train` reads of the SDK's layout: the entry script, the code folder, the requirements file and the
distribution, translated exactly, or refused with the recipe that works.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, replace
from types import MappingProxyType

from opentc_launcher.common import whole_number

from .distributions import Distribution
from .job import MAX_JOB_FILE_BYTES, AdaptedJob, TrainingJob
from .job_files import read_regular
from .job_settings import JobSettings
from .not_started import BadInput

TORCHRUN = "ModelTrainer(distributed=Torchrun())"
# The entrypoint the SDK gives the container (sagemaker/train/constants.py, sagemaker-train 1.27).
SDK_ENTRYPOINT = ("chmod +x /opt/ml/input/data/sm_drivers/sm_train.sh && "
                  "/opt/ml/input/data/sm_drivers/sm_train.sh")
RECIPE = ("SourceCode(source_dir=..., entry_script=\"train.py\") with the hyperparameter "
          "sagemaker_training_compiler_enabled (and distributed=Torchrun() for several workers), or "
          "SourceCode(source_dir=..., command=\"exec train\") with the hyperparameters "
          "sagemaker_program=\"train.py\" and sagemaker_submit_directory=\"/opt/ml/input/data/code\"")


@dataclass(frozen=True)
class ModelTrainerSource:
    """What the SDK's sourcecode.json and distributed.json ask for, as `train` runs it."""

    code_dir: str                        # the `code` channel
    entry_script: str | None
    command: str | None
    requirements: str                    # a file in code_dir; requirements.txt when the SDK names none
    torchrun: bool
    workers_per_host: int | None         # Torchrun(process_count_per_node=...)


def drivers_dir(base: str) -> str:
    return os.path.join(base, "input", "data", "sm_drivers")


def _read(path: str) -> dict:
    try:
        data = json.loads(read_regular(path, f"the SageMaker SDK's {path}", MAX_JOB_FILE_BYTES,
                                       "a JSON object, as the SDK writes it").decode("utf-8"))
    except FileNotFoundError:
        return {}
    except (UnicodeDecodeError, ValueError) as e:
        raise BadInput(f"the SageMaker SDK's {path} cannot be read ({type(e).__name__}: {e})") from None
    if not isinstance(data, dict):
        raise BadInput(f"the SageMaker SDK's {path} holds a JSON {type(data).__name__}, not an object")
    return data


def read_model_trainer_source(base: str) -> ModelTrainerSource | None:
    """The SDK v3's SourceCode and distribution, when the job under `base` came from ModelTrainer (else None)."""
    folder = drivers_dir(base)
    source_file = os.path.join(folder, "sourcecode.json")
    if not os.path.isfile(source_file):
        return None
    source = _read(source_file)
    distributed = _read(os.path.join(folder, "distributed.json"))
    if "mpi_additional_options" in distributed:
        raise BadInput(f"ModelTrainer(distributed=MPI(...)) is not supported by this image: its workers run "
                             f"through torchrun. Use {RECIPE}.")
    if distributed.get("smp"):
        raise BadInput(f"ModelTrainer(distributed=Torchrun(smp=SMP(...))) asks for SageMaker model "
                             f"parallelism, which this image does not have. Use {RECIPE}.")
    entry_script = source.get("entry_script") or None
    if entry_script and not str(entry_script).endswith(".py"):
        raise BadInput(f"SourceCode(entry_script={entry_script!r}) is not accepted: this image runs Python "
                             f"scripts. Use {RECIPE}.")
    workers = distributed.get("process_count_per_node")
    count = None if workers is None or isinstance(workers, bool) else whole_number(str(workers))
    if workers is not None and not count:
        raise BadInput(f"Torchrun(process_count_per_node={workers!r}) is not accepted: use a whole number >= 1 "
                             f"(workers per host), or leave it out for one worker per GPU.")
    return ModelTrainerSource(
        code_dir=os.path.join(base, "input", "data", "code"),
        entry_script=entry_script,
        command=source.get("command") or None,
        requirements=source.get("requirements") or "requirements.txt",
        # The SDK writes Torchrun's every field (smp among them); a hand-written one may leave smp out, and a worker
        # count still asks for Torchrun's workers (MPI, which also has one, is refused above).
        torchrun="smp" in distributed or "process_count_per_node" in distributed,
        workers_per_host=count,
    )


def adapt_model_trainer(job: TrainingJob, settings: JobSettings) -> AdaptedJob | None:
    """The job as the SDK v3's SourceCode describes it (None for a job the SDK v3 did not lay out), where the
    hyperparameters do not say otherwise: the entry script and the code channel, the requirements file, the
    workers per host, and the SM_* variables its drivers would set that sagemaker-training does not."""
    source = read_model_trainer_source(job.paths.base)
    if source is None:
        return None
    if source.torchrun and not settings.multi_worker:
        # Torchrun asks for several workers per host: this image's launcher starts them (torchrun's rendezvous and
        # environment), with the compiler's settings in every worker.
        settings = replace(settings, distribution=Distribution.DATA_PARALLEL, multi_worker_asked_by=(TORCHRUN,))
    entry_point = job.entry_point or source.entry_script
    extra = {
        "SM_SOURCE_DIR": source.code_dir,
        "SM_ENTRY_SCRIPT": entry_point or "",
        "SM_HOST_COUNT": str(len(job.hosts)),
        "SM_CURRENT_HOST_RANK": str(job.host_index),
        "SM_MASTER_ADDR": job.hosts[0],
    }
    adapted = replace(job, entry_point=entry_point,
                      submit_directory=job.submit_directory if job.code_submitted else source.code_dir,
                      requirements_file=source.requirements, workers_per_host=source.workers_per_host,
                      workers_asked_by="Torchrun(process_count_per_node)" if source.workers_per_host else "",
                      script_env=MappingProxyType({**extra, **job.script_env}))
    return AdaptedJob(job=adapted, settings=settings, summary=(
        f"SageMaker SDK v3 ModelTrainer job: entry script {entry_point}, code in "
        f"{adapted.submit_directory}, requirements {source.requirements}"
        + (f", {source.workers_per_host} worker(s) per host" if source.workers_per_host else "")))


def takes_over(base: str, execution_string: str, pid: int) -> bool:
    """Whether the image runs this container's job through `train` (the BASH_ENV hook asks, as PID 1): only
    for exactly the SDK's entrypoint, and only when SourceCode names an entry_script and no command (a
    command is the user's own, and runs as given)."""
    if pid != 1 or execution_string != SDK_ENTRYPOINT:
        return False
    try:
        source = _read(os.path.join(drivers_dir(base), "sourcecode.json"))
    except BadInput:
        return True   # train reads it again and reports what is wrong with it
    return bool(source) and not source.get("command")


def main() -> None:
    """`python -m opentc_toolkit.model_trainer`, from the BASH_ENV hook: exit 0 to hand the job to `train`."""
    base = os.environ.get("SAGEMAKER_BASE_DIR") or "/opt/ml"
    if takes_over(base, os.environ.get("OPENTC_BASH_EXECUTION_STRING", ""), os.getppid()):
        print("opentc: a SageMaker SDK v3 ModelTrainer job with SourceCode(entry_script=...): running it through "
              "the image's train (the toolkit), so its compiler hyperparameters apply", file=sys.stderr, flush=True)
        sys.exit(0)
    sys.exit(1)


if __name__ == "__main__":
    main()

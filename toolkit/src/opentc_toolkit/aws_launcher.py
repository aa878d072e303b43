"""Jobs written for AWS's Training Compiler images that start their workers through torch_xla.distributed.sm_dist.

AWS's guide had distributed jobs on PyTorch 1.10 and before use as entry point a small launcher script that
runs `python -m torch_xla.distributed.sm_dist <its arguments>`, with the real script named in the
hyperparameter `training_script`. That module existed only in AWS's fork of torch-xla; upstream torch-xla has
none, so in this image such a launcher fails. sm_dist read `training_script`, `num_gpus` (workers per host),
and the XRT settings `resource_config`, `mesh_service_port` and `worker_port`, then started one worker per GPU
running `training_script` with the other arguments taken as `--name value` pairs, the value True becoming the
bare flag `--name` and the value False dropping the pair.

`adapt_aws_launcher` turns such a job into the job sm_dist would have run, for this image's own launcher. A pure
function (it only reads the code folder); any entry script that does not mention sm_dist is left untouched.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace

from opentc_launcher.common import whole_number

from .distributions import Distribution
from .job import AdaptedJob, TrainingJob
from .job_files import MiB, read_regular
from .job_settings import MULTI_WORKER, JobSettings
from .not_started import BadInput
from .quoted import quoted

SM_DIST = "torch_xla.distributed.sm_dist"
TRAINING_SCRIPT = "training_script"
NUM_GPUS = "num_gpus"
# XRT's mesh and worker addresses: PJRT and the image's launcher need none of them.
XRT_SETTINGS = ("resource_config", "mesh_service_port", "worker_port")
# The options sm_dist parsed itself; they never reached the training script.
CONSUMED = (TRAINING_SCRIPT, NUM_GPUS, *XRT_SETTINGS)
MAX_LISTED = 20
MAX_LAUNCHER_BYTES = MiB   # AWS's launcher scripts are a few lines


def calls_sm_dist(path: str) -> bool:
    """Whether the file's source text mentions torch_xla.distributed.sm_dist. A file that is missing, cannot be
    read, is not a regular file (a FIFO would block for ever) or is larger than any launcher script: no, and the
    entry point's own check names what is wrong with it."""
    try:
        text = read_regular(path, path, MAX_LAUNCHER_BYTES, "a launcher script").decode("utf-8", errors="replace")
    except (OSError, BadInput):
        return False
    return SM_DIST in text


def convert_arguments(user_args: Sequence[str]) -> tuple[tuple[str, ...], dict[str, str]]:
    """sm_dist's reading of its argv (`--key value` pairs, keys sorted): the training script's arguments, in
    the same order, and the values of the options sm_dist consumed itself (by hyperparameter name).

    The value "True" (a JSON true, as the SDK writes True) becomes the bare flag, "False" drops the pair; any
    other value, "true" included, is passed on as it is, as sm_dist did."""
    script_args: list[str] = []
    consumed: dict[str, str] = {}
    pairs = len(user_args) // 2 * 2
    for i in range(0, pairs, 2):
        name, value = user_args[i], user_args[i + 1]
        if name.startswith("--") and name[2:] in CONSUMED:
            consumed[name[2:]] = value
        elif value == "True":
            script_args.append(name)
        elif value != "False":
            script_args += [name, value]
    script_args += user_args[pairs:]
    return tuple(script_args), consumed


def python_files(code: str) -> list[str]:
    """The .py files under the code folder, relative to it, sorted (caches and hidden folders left out)."""
    found = []
    for folder, subfolders, files in os.walk(code):
        subfolders[:] = sorted(d for d in subfolders if not d.startswith(".") and d != "__pycache__")
        found += [os.path.relpath(os.path.join(folder, name), code) for name in files if name.endswith(".py")]
    return sorted(found)


def _listing(code: str) -> str:
    files = python_files(code)
    if not files:
        return "it holds no .py file"
    more = f" and {len(files) - MAX_LISTED} more" if len(files) > MAX_LISTED else ""
    return "its .py files: " + ", ".join(files[:MAX_LISTED]) + more


def _training_script(value: str | None, code: str, entry: str) -> str:
    """The script sm_dist would have run, relative to the code folder; BadInput saying what to change."""
    launcher = (f"{entry} is an AWS-era distributed launcher: it calls {SM_DIST}, which upstream torch-xla "
                f"does not have, so this image runs the script it names itself")
    if value is None or not value.strip():
        raise BadInput(
            f"{launcher}, but the job has no hyperparameter {TRAINING_SCRIPT}: add hyperparameter "
            f"{TRAINING_SCRIPT}=<your script> (a .py file in the code folder, e.g. \"train.py\"), or make your "
            f"script the entry point and set distribution pytorchxla enabled (hyperparameter {MULTI_WORKER}=true).")
    relative = os.path.relpath(os.path.normpath(os.path.join(code, value)), code)
    if relative == os.curdir or relative.split(os.sep, 1)[0] == os.pardir:
        raise BadInput(f"{launcher}; hyperparameter {TRAINING_SCRIPT}={quoted(value)} is outside the code folder "
                             f"{code}: name a .py file in it, relative to it ({_listing(code)}).")
    path = os.path.join(code, relative)
    if not os.path.isfile(path):
        raise BadInput(f"{launcher}; hyperparameter {TRAINING_SCRIPT}={quoted(value)} names no file in the code "
                             f"folder {code} ({_listing(code)}): set {TRAINING_SCRIPT} to one of them.")
    if not relative.endswith(".py"):
        raise BadInput(f"{launcher}; hyperparameter {TRAINING_SCRIPT}={quoted(value)} is not a .py file: "
                             f"set it to your Python training script ({_listing(code)}).")
    if calls_sm_dist(path):
        raise BadInput(
            f"{launcher}; hyperparameter {TRAINING_SCRIPT}={quoted(value)} is such a launcher too (it calls "
            f"{SM_DIST}): set {TRAINING_SCRIPT} to your training script itself ({_listing(code)}).")
    return relative


def _workers_per_host(value: str | None, job: TrainingJob, entry: str) -> int | None:
    """sm_dist's --num_gpus: the workers per host (None: one per GPU)."""
    if value is None:
        return None
    number = whole_number(value) or 0
    if number >= 1 and (job.num_gpus == 0 or number <= job.num_gpus):
        return number
    accepted = (f"a whole number from 1 to {job.num_gpus} (the GPUs on this host)" if job.num_gpus
                else "a whole number >= 1")
    raise BadInput(
        f"hyperparameter {NUM_GPUS} has the value {quoted(value)}, which is not accepted: with the AWS-era launcher "
        f"{entry} ({SM_DIST}) it is the number of workers per host, {accepted}; or remove it for one worker "
        f"per GPU.")


def adapt_aws_launcher(job: TrainingJob, settings: JobSettings, code: str) -> AdaptedJob | None:
    """The job as it must really run when its entry script is an AWS-era launcher (None for any other job):
    entry point = the `training_script` hyperparameter, its arguments converted as sm_dist converted them, and
    several workers (one per GPU, or `num_gpus` per host), as sm_dist always started, on XLA (what sm_dist ran) unless
    the job named another backend."""
    entry = job.entry_point
    if not entry or not calls_sm_dist(os.path.join(code, entry)):
        return None
    script_args, consumed = convert_arguments(job.user_args)
    script = _training_script(consumed.get(TRAINING_SCRIPT), code, entry)
    workers = _workers_per_host(consumed.get(NUM_GPUS), job, entry)
    adapted = replace(job, entry_point=script, user_args=script_args, workers_per_host=workers,
                      workers_asked_by=f"the hyperparameter {NUM_GPUS}" if workers else job.workers_asked_by)
    how_many = "one worker per GPU" if workers is None else f"{workers} worker(s) per host ({NUM_GPUS}={workers})"
    notes = []
    if not settings.multi_worker:
        notes.append(f"{MULTI_WORKER} taken as true")
    if not settings.compiler_named and settings.compiler_name != "xla":
        notes.append("on XLA, which its script was written for")
    ignored = [key for key in XRT_SETTINGS if key in consumed]
    if ignored:
        notes.append(f"{', '.join(ignored)} ignored (XRT settings; PJRT needs none)")
    summary = (f"AWS-era launcher {entry} calls {SM_DIST}, which upstream torch-xla does not have: running "
               f"{TRAINING_SCRIPT}={script} directly, {how_many}, with arguments {list(script_args)}"
               + (f" ({'; '.join(notes)})" if notes else ""))
    compiler = settings.compiler_name if settings.compiler_named else "xla"
    settings = replace(settings, distribution=Distribution.XLA_MULTI_WORKER, compiler_name=compiler)
    return AdaptedJob(job=adapted, settings=settings, summary=summary)

"""requirements.txt through the real `train`, offline: pip resolves from wheels beside the script (`--no-index
--find-links`), written by hand, and installs into an overlay Python over the test venv (tests/overlay.py), so the
venv itself never changes. Stand-ins for a family move: a huggingface-hub 0.20.3, and the transformers 4.40, accelerate
0.32 and datasets 2.18 pip then picks to go with it, whose imports need what that hub lacks (as the real ones do)."""

import hashlib
import json
import os
import subprocess

import pytest
from overlay import overlay_python
from test_dry_run import dry_run
from test_source import DEP, make_wheel

from conftest import BIN, run_train
from opentc_launcher import exit_codes

LACKS = "from huggingface_hub import split_torch_state_dict_into_shards\n"
FAMILY_MOVE = [("huggingface-hub", "0.20.3", "__version__ = '0.20.3'\n", ()),
               ("transformers", "4.40.2", LACKS, ("huggingface-hub<1.0,>=0.19.3",)),
               ("accelerate", "0.32.1", LACKS, ()),
               ("datasets", "2.18.0", "", ("huggingface-hub>=0.19.4",))]
FAMILY = ("transformers", "accelerate", "datasets", "huggingface-hub", "tokenizers")


def versions(python) -> dict[str, str]:
    code = f"import importlib.metadata as m, json; print(json.dumps({{n: m.version(n) for n in {FAMILY!r}}}))"
    return json.loads(subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout)


def offline_job(make_job, wheels, requirements, **files):
    job = make_job(script="argv_echo.py", sagemaker_training_compiler_enabled=False)
    code = job.root / "code"
    (code / "wheels").mkdir()
    for name, version, init, requires in wheels:
        make_wheel(code / "wheels", name, version, init, requires)
    (code / "requirements.txt").write_text(f"--no-index\n--find-links ./wheels\n{requirements}")
    for name, text in files.items():
        (code / name).write_text(text)
    return job


def run_in(train, job, **env):
    return run_train(job, command=train, PATH=f"{train.parent}{os.pathsep}{BIN}{os.pathsep}{os.environ['PATH']}",
                     PIP_FIND_LINKS="", PIP_CONFIG_FILE=os.devnull, **env)


@pytest.mark.slow
def test_a_family_move_however_written_is_resolved_with_the_family_and_a_stack_that_does_not_import_is_undone(
        make_job, tmp_path):
    """Issue 51 (1, 2): a pin in a file requirements.txt includes, after a tab and a comment, with pip-compile's
    hash, moves huggingface-hub; pip's dry run says so, the rest of the family is resolved again with it (pip picks
    transformers 4.40, accelerate 0.32, datasets 2.18; in hash-checking mode each pinned with the hash pip's
    resolution gives), pip check passes, and importing them fails: the install is a failed one, named with the pin
    to change, before the script, with the environment put back as it was."""
    train = overlay_python(tmp_path / "overlay")
    before = versions(train.parent / "python")
    job = offline_job(make_job, FAMILY_MOVE, "-r pins.txt\n")
    hub = (job.root / "code" / "wheels" / "huggingface_hub-0.20.3-py3-none-any.whl").read_bytes()
    (job.root / "code" / "pins.txt").write_text(
        f"huggingface-hub==0.20.3 \\\n    --hash=sha256:{hashlib.sha256(hub).hexdigest()}\t# ours\n")
    result = run_in(train, job)
    assert result.returncode == exit_codes.FAILED, result.output[-5000:]
    assert ("requirements.txt asks for huggingface-hub==0.20.3: the image's transformers, accelerate, datasets, "
            "tokenizers, evaluate, safetensors are resolved again with it (not pinned)") in result.output
    assert ("in hash-checking mode (--hash), what that adds is pinned with the hashes of pip's own resolution: "
            "accelerate==0.32.1, datasets==2.18.0, transformers==4.40.2") in result.output, result.output[-5000:]
    moves = ("accelerate 1.15.0 -> 0.32.1, datasets 5.2.0 -> 2.18.0, huggingface-hub 2.4.0 -> 0.20.3, transformers "
             "5.20.2 -> 4.40.2")
    assert f"(torch, torch-xla and the CUDA libraries held at the installed versions): {moves}" in result.output
    failure = job.failure
    assert failure.startswith("Training not started: requirements.txt in "), failure
    assert "installed, but the Hugging Face packages it leaves do not work together (imported in a fresh Python, " \
           "after pip check passed):\n" in failure, failure
    assert ("  import transformers, from transformers import Trainer, import accelerate: ImportError: cannot import "
            "name 'split_torch_state_dict_into_shards' from 'huggingface_hub'\n") in failure, failure
    assert "The pins to change: huggingface-hub==0.20.3 (pins.txt line 1 (from requirements.txt line 3))" in failure
    assert failure.endswith("What it changed was put back as it was (accelerate, datasets, huggingface-hub, "
                            "transformers). The script did not run."), failure
    assert versions(train.parent / "python") == before
    assert not (job.model / "argv.json").exists()


def test_the_dry_run_says_what_the_install_would_move(make_job):
    """The same move, asked for through a constraint, through `train --dry-run` (pip's own dry run, which installs
    nothing: no overlay needed)."""
    job = offline_job(make_job, FAMILY_MOVE, "huggingface-hub\n-c pins.txt\n",
                      **{"pins.txt": "huggingface-hub==0.20.3\n"})
    done = dry_run(job, PIP_FIND_LINKS="", PIP_CONFIG_FILE=os.devnull)
    assert done.returncode == 0, done.stderr[-3000:]
    assert ("installed first: requirements.txt from the code folder (pip, under the stack's pins): accelerate 1.15.0 "
            "-> 0.32.1, datasets 5.2.0 -> 2.18.0, huggingface-hub 2.4.0 -> 0.20.3, transformers 5.20.2 -> 4.40.2; "
            "requirements.txt asks for huggingface-hub==0.20.3: the image's transformers") in done.stdout, done.stdout


@pytest.mark.slow
def test_what_was_broken_before_the_install_is_the_images_and_fails_nothing(make_job, tmp_path):
    """Issue 51 (3): an image with one inconsistency of its own (a derived image's install, an earlier job's): pip
    check after the install finds it, as it did before, and says so; the install passes. An empty requirements.txt
    installs nothing and checks nothing."""
    train = overlay_python(tmp_path / "overlay")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    broken = make_wheel(wheels, "opentc-broken", "1.0", "", ("opentc-absent>=1",))
    subprocess.run([str(train.parent / "python"), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                    str(broken)], check=True)
    job = offline_job(make_job, [(DEP, "1.0", "", ())], f"{DEP}==1.0\n")
    result = run_in(train, job)
    assert result.returncode == exit_codes.OK, result.output[-5000:]
    assert ("pip check: this was already broken before requirements.txt was installed (the image's own packages, or "
            "an earlier install's), so it is not held against requirements.txt:\n  opentc-broken 1.0 requires "
            "opentc-absent, which is not installed.") in result.output, result.output[-5000:]
    assert "requirements.txt installed: opentc-testdep 1.0 (new)" in result.output
    (job.root / "code" / "requirements.txt").write_text("")
    result = run_in(train, job)
    assert result.returncode == exit_codes.OK, result.output[-5000:]
    assert "requirements.txt: pip installs nothing, everything it asks for is installed already" in result.output

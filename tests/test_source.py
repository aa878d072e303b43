"""Where the user's code comes from: sagemaker_submit_directory as a folder, a file:// or s3:// tarball,
with requirements.txt installed before the script runs.

S3 is the one thing that cannot exist here: a moto S3 server on 127.0.0.1 stands in for it
(sagemaker-training honours S3_ENDPOINT_URL).
"""

import base64
import hashlib
import signal
import subprocess
import tarfile
import zipfile

import pytest

from conftest import BIN, SilentServer, free_port, run_train, start_train
from opentc_toolkit.not_started import BadInput, CodeNotFetched
from opentc_toolkit.source import fetch_failure

DEP = "opentc_testdep"


def make_wheel(folder, name=DEP, version="1.0", init="GREETING = 'installed from requirements.txt'\n",
               requires=()):
    """A real (tiny) wheel, written by hand so that no build backend or network is needed: the package `name`
    (its module the name with underscores) whose __init__.py is `init`, needing `requires`."""
    module = name.replace("-", "_")
    info = f"{module}-{version}.dist-info"
    files = {
        f"{module}/__init__.py": init.encode(),
        f"{info}/METADATA": (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                             + "".join(f"Requires-Dist: {r}\n" for r in requires)).encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = ""
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{path},sha256={digest},{len(data)}\n"
    record += f"{info}/RECORD,,\n"
    files[f"{info}/RECORD"] = record.encode()
    path = folder / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as whl:
        for member, data in files.items():
            whl.writestr(member, data)
    return path


@pytest.fixture
def source_dir(tmp_path):
    """A source folder as a user would upload it: the script, requirements.txt and a vendored wheel."""
    src = tmp_path / "sourcedir"
    (src / "wheels").mkdir(parents=True)
    make_wheel(src / "wheels")
    (src / "requirements.txt").write_text(f"./wheels/{DEP}-1.0-py3-none-any.whl\n")
    (src / "entry.py").write_text(
        "import os, opentc_testdep\n"
        "open(os.path.join(os.environ['SM_MODEL_DIR'], 'dep.txt'), 'w').write(opentc_testdep.GREETING)\n")
    yield src
    subprocess.run([str(BIN / "python"), "-m", "pip", "uninstall", "-q", "-y", DEP], check=False)


def tarball(src, path):
    with tarfile.open(path, "w:gz") as tar:
        for item in src.iterdir():
            tar.add(item, arcname=item.name)
    return path


def job_with_source(make_job, submit_directory):
    job = make_job()
    for item in (job.root / "code").iterdir():   # SageMaker's code folder starts empty
        item.unlink()
    job.drop_script_hyperparameters()
    job.set_hyperparameters(sagemaker_program="entry.py", sagemaker_submit_directory=submit_directory,
                            sagemaker_training_compiler_enabled=False)
    return job


def assert_ran_with_dependency(job, result):
    assert result.returncode == 0, result.output[-4000:]
    assert (job.model / "dep.txt").read_text() == "installed from requirements.txt"
    assert (job.root / "code" / "entry.py").exists()


def test_file_uri_tarball(make_job, source_dir, tmp_path):
    archive = tarball(source_dir, tmp_path / "sourcedir.tar.gz")
    job = job_with_source(make_job, f"file://{archive}")
    assert_ran_with_dependency(job, run_train(job))


def test_local_folder(make_job, source_dir):
    job = job_with_source(make_job, str(source_dir))
    assert_ran_with_dependency(job, run_train(job))


@pytest.mark.slow
def test_s3_tarball(make_job, source_dir, tmp_path):
    boto3 = pytest.importorskip("boto3")
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{port}"
        creds = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region_name": "us-east-1"}
        s3 = boto3.client("s3", endpoint_url=endpoint, **creds)
        s3.create_bucket(Bucket="jobs")
        archive = tarball(source_dir, tmp_path / "sourcedir.tar.gz")
        s3.upload_file(str(archive), "jobs", "prefix/source/sourcedir.tar.gz")
        job = job_with_source(make_job, "s3://jobs/prefix/source/sourcedir.tar.gz")
        result = run_train(job, S3_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="testing",
                           AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
        assert_ran_with_dependency(job, result)
        job = job_with_source(make_job, "s3://jobs/prefix/missing.tar.gz")
        result = run_train(job, S3_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="testing",
                           AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
        assert result.returncode == 2
        assert job.failure.startswith("Training not started: sagemaker_submit_directory "
                                      "'s3://jobs/prefix/missing.tar.gz' could not be fetched")
    finally:
        server.stop()


def test_a_stop_while_s3_does_not_answer_ends_the_job_at_once(make_job, tmp_path):
    """An S3 that accepts the connection and never answers held the code's download in a socket read (botocore's
    60 s timeouts, retried), so a stop waited for it, past the 120 s SageMaker gives before SIGKILL, and no verdict was
    written. The download now runs beside the stop handling: a stop ends the job at once, as stopped."""
    s3 = SilentServer()
    try:
        job = job_with_source(make_job, "s3://jobs/prefix/source/sourcedir.tar.gz")
        log = tmp_path / "train.log"
        train = start_train(job, log, S3_ENDPOINT_URL=f"http://127.0.0.1:{s3.port}", AWS_ACCESS_KEY_ID="testing",
                            AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
        try:
            assert s3.connected.wait(120), log.read_text()[-3000:]
            train.send_signal(signal.SIGTERM)
            assert train.wait(timeout=30) == 143, log.read_text()[-3000:]
        finally:
            if train.poll() is None:
                train.kill()
    finally:
        s3.close()
    assert job.failure == ("Training stopped: SIGTERM received while the job's code was being fetched from "
                           "s3://jobs/prefix/source/sourcedir.tar.gz (StopTrainingJob, a spot interruption, MaxRuntime "
                           "or docker stop), before any training script ran."), job.failure
    assert "job summary: eager on a device never chosen, workers unknown;" in log.read_text()
    assert not list((job.root / "code").iterdir())


def test_requirements_that_cannot_install(make_job, source_dir):
    (source_dir / "requirements.txt").write_text("./wheels/does-not-exist-1.0-py3-none-any.whl\n")
    job = job_with_source(make_job, str(source_dir))
    result = run_train(job)
    assert result.returncode == 1
    assert job.failure.startswith("Training not started: requirements.txt in ")
    assert "could not be installed" in job.failure
    assert not (job.model / "dep.txt").exists()


def test_missing_submit_directory(make_job, tmp_path):
    job = job_with_source(make_job, f"file://{tmp_path}/nothing-here.tar.gz")
    result = run_train(job)
    assert result.returncode == 2
    assert "does not exist" in job.failure and "nothing-here.tar.gz" in job.failure


def test_a_file_uri_is_percent_decoded(make_job, source_dir, tmp_path):
    folder = tmp_path / "with space"
    folder.mkdir()
    archive = tarball(source_dir, folder / "src.tar.gz")
    job = job_with_source(make_job, f"file://{str(archive).replace(' ', '%20')}")
    assert_ran_with_dependency(job, run_train(job))


def test_submitted_code_wins_over_files_already_in_the_code_folder(make_job, source_dir, tmp_path):
    """Code baked into /opt/ml/code (docs/image.md, "Extend it") or left by an earlier run, plus a job that submits
    other code: the submitted code runs, the log says so and from where, and the code folder is left as it was."""
    job = job_with_source(make_job, "")
    stale = "open(__import__('os').environ['SM_MODEL_DIR'] + '/dep.txt', 'w').write('the old code ran')\n"
    (job.root / "code" / "entry.py").write_text(stale)
    (job.root / "code" / "helper.py").write_text("# baked into the image\n")
    for submitted in (str(source_dir), f"file://{tarball(source_dir, tmp_path / 'sourcedir.tar.gz')}"):
        job.set_hyperparameters(sagemaker_submit_directory=submitted)
        result = run_train(job)
        assert result.returncode == 0, result.output[-4000:]
        assert (job.model / "dep.txt").read_text() == "installed from requirements.txt"   # the new code ran
        assert f"the code folder {job.root / 'code'} already holds files (entry.py, helper.py)" in result.output
        assert f"sagemaker_submit_directory names other code ({submitted}): the submitted code runs" in result.output
        assert (job.root / "code" / "entry.py").read_text() == stale                     # nothing overwritten
        assert sorted(p.name for p in (job.root / "code").iterdir()) == ["entry.py", "helper.py"]


@pytest.mark.slow
def test_an_updated_tarball_reruns_the_update_in_a_job_folder_used_twice(make_job, source_dir, tmp_path):
    job = job_with_source(make_job, f"file://{tarball(source_dir, tmp_path / 'v1.tar.gz')}")
    assert_ran_with_dependency(job, run_train(job))                  # extracted into the empty code folder
    (source_dir / "entry.py").write_text(
        "import os\nopen(os.path.join(os.environ['SM_MODEL_DIR'], 'dep.txt'), 'w').write('version 2')\n")
    job.set_hyperparameters(sagemaker_submit_directory=f"file://{tarball(source_dir, tmp_path / 'v2.tar.gz')}")
    result = run_train(job)
    assert result.returncode == 0, result.output[-4000:]
    assert (job.model / "dep.txt").read_text() == "version 2"
    assert "the submitted code runs" in result.output


# --- issue 40 (design review): a fetch outage is not bad input ---

@pytest.mark.parametrize(("error", "refusal"), [
    ("no such key", BadInput), ("no such bucket", BadInput), ("access denied", BadInput), ("malformed", BadInput),
    ("throttled", CodeNotFetched), ("s3 down", CodeNotFetched), ("no connection", CodeNotFetched),
    ("timeout", CodeNotFetched), ("no credentials", CodeNotFetched), ("disk full", CodeNotFetched),
])
def test_a_fetch_is_bad_input_only_when_the_job_named_what_cannot_be_fetched(error, refusal):
    from botocore.exceptions import (
        ClientError,
        EndpointConnectionError,
        NoCredentialsError,
        ParamValidationError,
        ReadTimeoutError,
    )

    def answered(code, status):
        return ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "GetObject")

    errors = {"no such key": answered("404", 404), "no such bucket": answered("NoSuchBucket", 404),
              "access denied": answered("403", 403), "malformed": ParamValidationError(report="bad bucket name"),
              "throttled": answered("SlowDown", 503), "s3 down": answered("InternalError", 500),
              "no connection": EndpointConnectionError(endpoint_url="https://s3.amazonaws.com"),
              "timeout": ReadTimeoutError(endpoint_url="https://s3.amazonaws.com"),
              "no credentials": NoCredentialsError(), "disk full": OSError(28, "No space left on device")}
    found = fetch_failure(errors[error], "it could not be fetched")
    assert type(found) is refusal and found.exit_code == (2 if refusal is BadInput else 1)
    assert str(found).startswith("it could not be fetched. ")
    if refusal is CodeNotFetched:
        assert "not the job's fault" in str(found) and "run the job again" in str(found)


def test_an_s3_endpoint_that_does_not_answer_fails_the_job_without_blaming_it(make_job):
    job = job_with_source(make_job, "s3://jobs/prefix/source/sourcedir.tar.gz")
    result = run_train(job, timeout=300, S3_ENDPOINT_URL=f"http://127.0.0.1:{free_port()}", AWS_ACCESS_KEY_ID="x",
                       AWS_SECRET_ACCESS_KEY="x", AWS_DEFAULT_REGION="us-east-1")
    assert result.returncode == 1, result.output[-3000:]
    assert job.failure.startswith("Training not started: sagemaker_submit_directory "
                                  "'s3://jobs/prefix/source/sourcedir.tar.gz' could not be fetched"), job.failure
    assert "This is not the job's fault" in job.failure

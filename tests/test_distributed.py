"""Several workers and several hosts: what reaches the script, and a real gloo all-reduce between them.

The hosts are two `train` processes on this machine, each with its own job folder and resourceconfig.json,
named 127.0.0.1 and localhost so that both names resolve here, as algo-1 and algo-2 do on SageMaker.
"""

import os
import signal
import subprocess
import time

import pytest

from conftest import TRAIN, SilentServer, free_port, run_train, start_train, stop, train_env, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.xla]


def distributed_job(make_job, name="", compiler=True, **hyperparameters):
    return make_job(name, script="report_env.py", sagemaker_pytorch_xla_multi_worker_enabled=True,
                    sagemaker_training_compiler_enabled=compiler, tag="x y", **hyperparameters)


def reports(job, world):
    return [job.read_json(f"model/env-rank{rank}.json") for rank in range(world)]


def test_two_workers_on_one_host_plain_pytorch(make_job):
    job = distributed_job(make_job, compiler=False)
    result = run_train(job, OPENTC_WORKERS_PER_HOST="2")
    assert result.returncode == 0, result.output[-5000:]
    found = reports(job, 2)
    assert [(r["RANK"], r["LOCAL_RANK"], r["WORLD_SIZE"], r["LOCAL_WORLD_SIZE"]) for r in found] == [
        ("0", "0", "2", "2"), ("1", "1", "2", "2")]
    assert all(r["all_reduce_sum"] == 3.0 for r in found)      # 1 + 2: the workers really talked
    assert all(r["argv"] == ["--tag", "x y"] for r in found)
    assert all(r["torch_xla_imported"] is False and r["USE_TORCH_XLA"] == "0" for r in found)
    assert all(r["SM_CURRENT_HOST"] == "algo-1" for r in found)  # a single host never resolves algo-1
    assert job.succeeded


def test_xla_cpu_multi_worker_is_refused_by_default(make_job):
    job = distributed_job(make_job)
    result = run_train(job, OPENTC_WORKERS_PER_HOST="2")
    assert result.returncode == 2
    assert job.failure.startswith("Training not started: 2 workers on PJRT_DEVICE=CPU: torch-xla's CPU "
                                  "runtime has no cross-process collectives")
    assert "sagemaker_training_compiler_cpu_multi_worker" in job.failure
    assert not (job.model / "env-rank0.json").exists()


def test_xla_cpu_multi_worker_unsynchronized_runs_with_a_loud_warning(make_job):
    job = distributed_job(make_job, sagemaker_training_compiler_cpu_multi_worker="unsynchronized")
    result = run_train(job, OPENTC_WORKERS_PER_HOST="2")
    assert result.returncode == 0, result.output[-5000:]
    assert result.output.count("replicas' weights WILL diverge") >= 3   # the launcher and each worker
    found = reports(job, 2)
    assert [(r["RANK"], r["PJRT_DEVICE"], r["PJRT_LOCAL_PROCESS_RANK"]) for r in found] == [
        ("0", "CPU", "0"), ("1", "CPU", "1")]
    assert all(r["torch_xla_imported"] and r["all_reduce_sum"] == 3.0 for r in found)


def test_two_hosts_two_workers_each_rendezvous_on_the_first_host(make_job, tmp_path):
    hosts = ["127.0.0.1", "localhost"]
    port = str(free_port())
    jobs = []
    for host in hosts:
        job = distributed_job(make_job, name=f"host-{host}",
                              sagemaker_training_compiler_cpu_multi_worker="unsynchronized")
        job.set_hosts(hosts, current=host)
        jobs.append(job)
    procs = [start_train(job, tmp_path / f"{i}.log", OPENTC_WORKERS_PER_HOST="2", MASTER_PORT=port,
                         OPENTC_PEER_TIMEOUT="60")
             for i, job in enumerate(jobs)]
    try:
        for proc in procs:
            proc.wait(timeout=300)
    except subprocess.TimeoutExpired:
        raise AssertionError("hosts did not finish: " + (tmp_path / "0.log").read_text()[-3000:]) from None
    finally:
        for proc in procs:
            stop(proc)
    logs = [(tmp_path / f"{i}.log").read_text() for i in range(2)]
    assert [p.returncode for p in procs] == [0, 0], logs[0][-3000:] + logs[1][-3000:]
    found = {}
    for node, job in enumerate(jobs):
        for local in range(2):
            rank = node * 2 + local
            report = job.read_json(f"model/env-rank{rank}.json")
            found[rank] = report
            assert (report["RANK"], report["LOCAL_RANK"], report["WORLD_SIZE"], report["GROUP_RANK"]) == (
                str(rank), str(local), "4", str(node))
            assert (report["MASTER_ADDR"], report["MASTER_PORT"]) == ("127.0.0.1", port)
            assert report["SM_CURRENT_HOST"] == hosts[node]
    assert sorted(found) == [0, 1, 2, 3]
    assert all(r["all_reduce_sum"] == 10.0 for r in found.values())   # 1 + 2 + 3 + 4
    assert all(job.succeeded for job in jobs)


def test_the_hosts_end_together_so_that_a_local_mode_compose_cannot_cut_one_short(make_job, tmp_path):
    """Issue 31 J: the SageMaker SDK's local mode stops every container as soon as the first one exits, and a host
    still in its wrap-up lost its verdict. Here the harness does what compose does (SIGTERM to the other host the
    moment one `train` exits) while the second host takes seconds longer to end (its script left a process behind
    that ignores SIGTERM): both hosts' verdicts are written before either exits, and both succeed."""
    hosts = ["127.0.0.1", "localhost"]
    port = str(free_port())
    jobs = []
    for host in hosts:
        job = make_job(f"end-{host}", script="stubborn_orphan.py", sagemaker_torch_distributed_enabled=True,
                       sagemaker_training_compiler_enabled=False, orphan="yes" if host == "localhost" else "no")
        job.set_hosts(hosts, current=host)
        jobs.append(job)
    procs = [start_train(job, tmp_path / f"{i}.log", MASTER_PORT=port, OPENTC_PEER_TIMEOUT="60")
             for i, job in enumerate(jobs)]
    try:
        wait_for(lambda: any(p.poll() is not None for p in procs), 300, "a host to end", log_path=tmp_path / "0.log")
        ended = next(i for i, p in enumerate(procs) if p.poll() is not None)
        verdicts = [job.succeeded or job.failure is not None for job in jobs]
        procs[1 - ended].send_signal(signal.SIGTERM)        # compose stops the rest at once
        for proc in procs:
            proc.wait(timeout=120)
    finally:
        for proc in procs:
            stop(proc)
    logs = [(tmp_path / f"{i}.log").read_text() for i in range(2)]
    assert verdicts == [True, True], f"host {ended} ended before the other's verdict:\n" + logs[1 - ended][-3000:]
    assert [p.returncode for p in procs] == [0, 0], logs[0][-3000:] + logs[1][-3000:]
    assert all(job.succeeded for job in jobs)
    assert "waiting for the other hosts to write their verdicts too" in logs[0]
    assert all(job.read_json(f"model/sum-rank{rank}.txt") == 2.0 for rank, job in enumerate(jobs))


def test_unreachable_peer_fails_naming_it(make_job):
    job = distributed_job(make_job, compiler=False)
    job.set_hosts(["127.0.0.1", "algo-2.invalid"], current="127.0.0.1")
    result = run_train(job, OPENTC_PEER_TIMEOUT="1")
    assert result.returncode == 3
    # Issue 40: the hosts' end waited its default 60 s for a verdict from a host that was never met.
    assert result.seconds < 40 and "waiting for the other hosts" not in result.output, result.seconds
    assert job.failure.startswith("Training not started: host algo-2.invalid could not be reached: its "
                                  "name did not resolve within 1 s")
    assert "OPENTC_PEER_TIMEOUT" in job.failure


# What a Kubernetes pod or a wrapper may leave in the container's environment: another job's world.
STALE_WORLD = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "1",
               "MASTER_ADDR": "10.255.255.1", "MASTER_PORT": "1234", "PET_NNODES": "4",
               "TORCHELASTIC_RUN_ID": "someone-elses"}


@pytest.mark.parametrize("workers", [1, 2])
def test_the_toolkit_decides_the_world_whatever_the_container_had(make_job, workers):
    """A stale world (and stale SM_* variables) never reaches the workers: one worker gets no rank or world size (as
    `python train.py` would), only the job's master as SageMaker's PyTorch images give every job (hosts[0], and the
    container's MASTER_PORT, read as the job's port); several get the world opentc-run makes; the log names each
    variable it replaced."""
    job = make_job(script="world_of_one.py",
                   sagemaker_training_compiler_enabled=False, sagemaker_pytorch_xla_multi_worker_enabled=workers > 1)
    result = run_train(job, timeout=180, OPENTC_WORKERS_PER_HOST=str(workers), SM_MODEL_DIR="/tmp/elsewhere",
                       SM_CHANNEL_TRAIN="/nowhere", **STALE_WORLD)
    assert result.returncode == 0, result.output[-4000:]
    for rank in range(workers):
        found = job.read_json(f"model/world-rank{rank}.json")   # in the job's model folder, not /tmp/elsewhere
        assert found["SM_CHANNEL_TRAIN"] == str(job.root / "input" / "data" / "train"), found
        assert found["PET_NNODES"] is None and found["TORCHELASTIC_RUN_ID"] != "someone-elses", found
        if workers == 1:
            assert {k: v for k, v in found.items() if k in STALE_WORLD and v is not None} == {
                "MASTER_ADDR": "algo-1", "MASTER_PORT": "1234"}, found
            continue
        assert (found["RANK"], found["WORLD_SIZE"], found["world"]) == (str(rank), str(workers), workers), found
        assert found["all_reduce_sum"] == sum(range(1, workers + 1))
        assert found["MASTER_ADDR"] == "127.0.0.1" and found["MASTER_PORT"] != "1234", found
    assert "Found pre-existing RANK=3: " in result.output
    assert f"Found pre-existing SM_MODEL_DIR=/tmp/elsewhere: replaced by SM_MODEL_DIR={job.model}" in result.output


def test_a_single_xla_worker_ignores_a_stale_world(make_job):
    """One XLA all-reduce (tests/scripts/xla_all_reduce.py): a world of one, whatever the stale variables say."""
    job = make_job(script="xla_all_reduce.py")
    result = run_train(job, **STALE_WORLD)
    assert result.returncode == 0, result.output[-4000:]
    assert "rank 0/1: PyTorch/XLA ready" in result.output
    reduced = job.read_json("model/all-reduce-rank0.json")
    assert reduced["world"] == 1 and reduced["sum"] == 1.0, reduced
    assert "unsynchronized" not in result.output and "rank1" not in result.output
    assert (job.compiler_output / "compile-report-rank0.json").exists()


@pytest.mark.parametrize("current", ["127.0.0.1", "localhost"], ids=["first-host", "second-host"])
def test_a_rendezvous_port_held_by_another_program_ends_with_exit_3_naming_it(make_job, current):
    """The first host cannot listen (the port is in use); the second connects to the other program, which never
    answers: both end, bounded by OPENTC_PEER_TIMEOUT, with exit code 3 and the host and port named."""
    service = SilentServer()   # another program on the rendezvous port
    try:
        job = distributed_job(make_job, compiler=False)
        job.set_hosts(["127.0.0.1", "localhost"], current=current)
        result = run_train(job, timeout=180, MASTER_PORT=str(service.port), OPENTC_PEER_TIMEOUT="3")
    finally:
        service.close()
    assert result.returncode == 3, result.output[-4000:]
    # Bounded by OPENTC_PEER_TIMEOUT (3 s, and the launcher's 15 s margin), not by its default (300 s); the hosts'
    # end does not wait (its 60 s by default) for hosts that were never met (issue 40).
    assert result.seconds < 60 and "waiting for the other hosts" not in result.output, result.seconds
    lines = job.failure.splitlines()
    assert lines[0] == ("Training failed before any training script ran: the launcher ended with exit code 3 on "
                        f"host {current}."), job.failure
    endpoint = f"127.0.0.1:{service.port}"
    if current == "127.0.0.1":
        assert lines[1].startswith(f"the operating system refused the rendezvous port: {endpoint} is already in "
                                   f"use by another program"), job.failure
    else:
        assert lines[1].startswith(f"the hosts never met: no rendezvous with {endpoint} within 18 s"), job.failure
    assert not (job.model / "env-rank0.json").exists()


@pytest.fixture
def process_limit():
    """A pids cgroup (v1) of at most 20 tasks to run a command in: a fork beyond it fails with EAGAIN, as under a
    container's or a user's process limit. Needs root and the pids controller (CI has both)."""
    root = "/sys/fs/cgroup/pids"
    if os.getuid() != 0 or not os.path.isdir(root):
        pytest.skip("a pids cgroup needs root and the cgroup v1 pids controller")
    folder = os.path.join(root, f"opentc-test-{os.getpid()}")
    os.mkdir(folder)
    try:
        with open(os.path.join(folder, "pids.max"), "w") as f:
            # Tasks are threads too: the toolkit and its launcher need about ten before the first worker (6 fail
            # there, 12 do not); each task more lets another worker start importing torch before a fork fails (60
            # took 24 s here, 20 takes 6 s).
            f.write("20")
        yield os.path.join(folder, "cgroup.procs")
    finally:
        for _ in range(50):
            try:
                os.rmdir(folder)
                break
            except OSError:   # its last processes are still exiting
                time.sleep(0.2)


def test_a_fork_the_os_refuses_is_named_as_such(make_job, process_limit):
    job = distributed_job(make_job, compiler=False)

    def join_cgroup():
        with open(process_limit, "w") as f:
            f.write(str(os.getpid()))

    proc = subprocess.run([str(TRAIN)], env=train_env(job, OPENTC_WORKERS_PER_HOST="100"), cwd=str(job.root),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300,
                          preexec_fn=join_cgroup)
    assert proc.returncode == 2, proc.stdout[-4000:]
    assert job.failure.startswith("Training not started: the operating system refused to start the workers "
                                  "(100 worker(s) on this host): BlockingIOError"), job.failure
    assert "OPENTC_WORKERS_PER_HOST" in job.failure and "rendezvous" not in job.failure
    assert "training script ended" not in job.failure

"""A two-host job: two containers on a user-defined docker network, reachable as algo-1 and algo-2 (network
aliases and hostnames, which Docker's DNS resolves as SageMaker's resolves its hosts; unique container names
let runs share an engine), each with its own /opt/ml and resourceconfig.json. Multi-worker on, compiler on:
the launch path of a real XLA job (torchrun rendezvous on hosts[0], PJRT variables). XLA:CPU has no
cross-process collectives, so sagemaker_training_compiler_cpu_multi_worker="unsynchronized" lets it start,
and the script's own gloo all-reduce proves that the hosts really talk."""

import pytest

from .conftest import docker, logs, start_job, wait_container

pytestmark = pytest.mark.container

HOSTS = ["algo-1", "algo-2"]


def test_two_hosts_rendezvous_and_both_finish(image, make_job, containers):
    network = containers("network", "opentc-test-net")
    created = docker("network", "create", network)
    assert created.returncode == 0, created.stdout
    jobs, names = [], []
    for host in HOSTS:
        job = make_job(host, script="report_env.py", sagemaker_pytorch_xla_multi_worker_enabled=True,
                       sagemaker_training_compiler_enabled=True,
                       sagemaker_training_compiler_cpu_multi_worker="unsynchronized", tag="x y")
        job.set_hosts(HOSTS, current=host)
        jobs.append(job)
        names.append(containers(prefix=f"opentc-test-{host}"))
    for host, job, name in zip(HOSTS, jobs, names, strict=True):
        start_job(image, job, name, "--hostname", host, "--network-alias", host,
                  "-e", "OPENTC_PEER_TIMEOUT=120", network=network)
    codes = [wait_container(name, 400) for name in names]
    assert codes == [0, 0], "\n".join(logs(name)[-3000:] for name in names)
    for node, (host, job) in enumerate(zip(HOSTS, jobs, strict=True)):
        report = job.read_json(f"model/env-rank{node}.json")
        assert (report["RANK"], report["LOCAL_RANK"], report["WORLD_SIZE"], report["GROUP_RANK"]) == (
            str(node), "0", "2", str(node))
        assert (report["MASTER_ADDR"], report["SM_CURRENT_HOST"]) == ("algo-1", host)
        assert report["PJRT_DEVICE"] == "CPU" and report["argv"] == ["--tag", "x y"]
        assert report["all_reduce_sum"] == 3.0            # 1 + 2: one worker on each host, and they talked
        assert job.succeeded

"""Several workers and several hosts: what reaches the script, and a real gloo all-reduce between them.

The hosts are two `train` processes on this machine, each with its own job folder and resourceconfig.json,
named 127.0.0.1 and localhost so that both names resolve here, as algo-1 and algo-2 do on SageMaker.
"""

import subprocess

from conftest import free_port, run_train, start_train, stop


def distributed_job(make_job, name="", compiler=True, **hyperparameters):
    job = make_job(name)
    job.use_script("report_env.py")
    job.drop_script_hyperparameters()
    job.set_hyperparameters(sagemaker_pytorch_xla_multi_worker_enabled=True,
                            sagemaker_training_compiler_enabled=compiler, tag="x y", **hyperparameters)
    return job


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


def test_unreachable_peer_fails_naming_it(make_job):
    job = distributed_job(make_job, compiler=False)
    job.set_hosts(["127.0.0.1", "algo-2.invalid"], current="127.0.0.1")
    result = run_train(job, OPENTC_PEER_TIMEOUT="1")
    assert result.returncode == 3
    assert job.failure.startswith("Training not started: host algo-2.invalid could not be reached: its "
                                  "name did not resolve within 1 s")
    assert "OPENTC_PEER_TIMEOUT" in job.failure

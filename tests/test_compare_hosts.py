"""One job, one column: a multi-host job writes a summary per host, and `opentc-compare` given its hosts' summaries
shows the job once (compare/src/opentc_compare/hosts.py). Real summary files in job folders and a tarball, the
installed command run on them."""

from __future__ import annotations

import json
import subprocess
import tarfile

from conftest import BIN, clean_env
from opentc_compare.hosts import BATCHES
from opentc_compare.summary import FORMAT

JOB = "gpt2-inductor-2026-11-30-10-00-00-123"
TRAINER = "the Trainer's train_samples_per_second, whole run"


def summary(host, hosts=("algo-1", "algo-2"), job=JOB, **fields):
    """A host's summary as the toolkit writes it (job_summary.build_summary's fields), this host's figures."""
    number = int(host.rsplit("-", 1)[1])
    return {
        "format": FORMAT, "job_name": job,
        "outcome": {"exit_code": 0, "succeeded": True, "stopped": False, "headline": None},
        "backend": "inductor", "device": "cuda", "workers": 8 * len(hosts), "workers_on_this_host": 8,
        "hosts": list(hosts), "current_host": host,
        "versions": {"torch": "2.5.1", "torch-xla": None, "transformers": "4.46.3", "opentc": "0.1.0"},
        "wall_seconds": 100.0 + number, "first_step_seconds": 30.0 + number, "optimizer_steps": 50 + number,
        "step_seconds": {"median": 0.1 * number, "p90": 0.2 * number, "measured_steps": 45, "warmup_steps": 5},
        "throughput": {"samples_per_second": 100.0 * number, "tokens_per_second": 1000.0 * number,
                       "source": BATCHES, "trainer_samples_per_second": None, "trainer_tokens_per_second": None},
        "loss": {"source": "the script's own loss lines",
                 "points": [{"step": 1, "loss": 5.0 + number}, {"step": 50, "loss": 1.0 + number}]},
        "peak_memory_mb": 1000.0 * number,
        "compile": {"seconds": 20.0 + number, "graphs_compiled": 2, "cache_hits": 0},
        "processes": [{"rank": 8 * (number - 1) + i, "peak_memory_mb": 1000.0 * number} for i in range(8)],
        **fields,
    }


def job_folder(folder, content):
    (folder / "output" / "data").mkdir(parents=True)
    (folder / "output" / "data" / "job-summary.json").write_text(json.dumps(content))
    return folder


def tarball(path, content):
    """What SageMaker keeps in S3: output/data as output.tar.gz."""
    staged = job_folder(path.parent / "staging", content) / "output" / "data" / "job-summary.json"
    with tarfile.open(path, "w:gz") as tar:
        tar.add(staged, arcname="job-summary.json")
    return path


def compare(*args):
    return subprocess.run([str(BIN / "opentc-compare"), *map(str, args)], env=clean_env(), capture_output=True,
                          text=True, timeout=120)


def table(result):
    """The table's rows by name, each a list of its cells; the header's under ''."""
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {}
    for line in result.stdout.splitlines():
        if line.startswith("| "):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            rows[cells[0]] = cells[1:]
    return rows


def test_two_hosts_are_one_column_with_summed_throughput_and_the_leaders_loss(tmp_path):
    """algo-2 given first, algo-1 as a tarball: the column is where the job's first summary was, and what one
    process measured is the leader's (algo-1, hosts[0]), not the first given's."""
    reference = job_folder(tmp_path / "eager", summary("algo-1", hosts=("algo-1",), job="gpt2-eager",
                                                       backend="eager"))
    second = job_folder(tmp_path / "algo-2", summary("algo-2"))
    leader = tarball(tmp_path / "algo-1" / "output.tar.gz", summary("algo-1"))
    rows = table(compare(reference, second, leader))
    assert rows[""] == ["eager (gpt2-eager)", f"inductor ({JOB}, all 2 hosts)"]
    assert rows["samples/s"] == ["100.0", "300.0"] and rows["tokens/s"] == ["1,000", "3,000"]
    assert rows["samples/s vs first"] == ["1.00x", "3.00x"]               # the first job stays the reference
    assert rows["throughput measured from"] == [BATCHES, f"{BATCHES}, all hosts"]
    assert rows["final loss"] == ["2.0000", "2.0000"]                     # the leader's 1.0 + 1, not algo-2's 3.0
    assert rows["optimizer steps"] == ["51", "51"] and rows["median step (ms)"] == ["100.0", "100.0"]
    assert rows["compile (s)"] == ["21.0", "21.0"]
    assert rows["wall time (s)"] == ["101.0", "102.0"]                   # the job ends with its last host
    assert rows["first optimizer step after (s)"] == ["31.0", "32.0"]    # the job stepped when its last host did
    assert rows["peak memory (MB)"] == ["1,000", "2,000"]
    assert rows["workers (hosts)"] == ["8 (1)", "16 (2)"] and rows["outcome"] == ["succeeded", "succeeded"]


def test_a_merged_job_first_is_the_reference(tmp_path):
    hosts = [job_folder(tmp_path / host, summary(host)) for host in ("algo-1", "algo-2")]
    other = job_folder(tmp_path / "other", summary("algo-1", hosts=("algo-1",), job="gpt2-eager", backend="eager"))
    rows = table(compare(*hosts, other))
    assert rows[""] == [f"inductor ({JOB}, all 2 hosts)", "eager (gpt2-eager)"]
    assert rows["samples/s vs first"] == ["1.00x", "0.33x"] and rows["tokens/s vs first"] == ["1.00x", "0.33x"]


def test_a_job_with_a_host_missing_says_so_and_does_not_sum_its_throughput(tmp_path):
    hosts = ("algo-1", "algo-2", "algo-3")
    given = [job_folder(tmp_path / host, summary(host, hosts=hosts)) for host in ("algo-3", "algo-1")]
    rows = table(compare(*given))
    assert rows[""] == [f"inductor ({JOB}, 2 of 3 hosts: algo-2 missing)"]
    assert rows["workers (hosts)"] == ["24 (3)"]
    assert "samples/s" not in rows and "tokens/s" not in rows       # a sum over 2 of 3 hosts is not the job's
    assert rows["throughput measured from"] == [f"{BATCHES}: not summed, only 2 of 3 hosts given"]
    assert rows["final loss"] == ["2.0000"] and rows["peak memory (MB)"] == ["3,000"]


def test_the_same_host_of_a_job_twice_is_refused_naming_both(tmp_path):
    folder = job_folder(tmp_path / "algo-1", summary("algo-1"))
    again = tarball(tmp_path / "copy" / "output.tar.gz", summary("algo-1"))
    result = compare(folder, job_folder(tmp_path / "algo-2", summary("algo-2")), again)
    assert result.returncode == 2 and result.stdout == "" and "Traceback" not in result.stderr, result.stderr
    assert result.stderr == (f'opentc-compare: {folder} and {again} are the same host, "algo-1", of job "{JOB}": '
                             f"pass each host's summary once.\n")


def test_different_jobs_stay_different_columns(tmp_path):
    """Another job's host (another name, or the same name with other hosts) is not merged; a single-host job given
    twice stays two columns, as before."""
    first = job_folder(tmp_path / "a1", summary("algo-1"))
    other_name = job_folder(tmp_path / "b2", summary("algo-2", job="gpt2-eager-2026-11-30", backend="eager"))
    other_hosts = job_folder(tmp_path / "c2", summary("algo-2", hosts=("algo-1", "algo-2", "algo-3")))
    rows = table(compare(first, other_name, other_hosts))
    assert rows[""] == [f"inductor ({JOB}, 1 of 2 hosts: algo-2 missing)",
                        "eager (gpt2-eager-2026-11-30, 1 of 2 hosts: algo-1 missing)",
                        f"inductor ({JOB}, 1 of 3 hosts: algo-1, algo-3 missing)"]
    single = job_folder(tmp_path / "single", summary("algo-1", hosts=("algo-1",)))
    rows = table(compare(single, single))
    assert rows[""] == [f"inductor ({JOB}) #1", f"inductor ({JOB}) #2"]
    assert rows["samples/s"] == ["100.0", "100.0"]


def test_a_job_failed_when_one_host_failed_with_that_hosts_exit_code(tmp_path):
    failed = {"exit_code": 3, "succeeded": False, "stopped": False, "headline": "Training failed: out of memory"}
    hosts = [job_folder(tmp_path / "algo-1", summary("algo-1")),
             job_folder(tmp_path / "algo-2", summary("algo-2", outcome=failed))]
    rows = table(compare(*hosts))
    assert rows["outcome"] == ["failed (exit code 3)"]          # an older summary: no kind, the flags say it


def test_hosts_are_summed_by_the_throughputs_code_whatever_its_words(tmp_path):
    """Issue 41: a newer summary says where its throughput came from as a code; its words may change. An older one
    (the helper's: words only) is read by its words, as above."""
    def host(name, code, words):
        rate = {"samples_per_second": 100.0, "tokens_per_second": 1000.0, "source": words, "source_code": code}
        return job_folder(tmp_path / code / name, summary(name, throughput=rate))

    batches = table(compare(host("algo-1", "batches", "the batches"), host("algo-2", "batches", "the batches")))
    assert batches["samples/s"] == ["200.0"] and batches["throughput measured from"] == [f"{BATCHES}, all hosts"]
    trainer = table(compare(host("algo-1", "trainer", BATCHES), host("algo-2", "trainer", BATCHES)))
    assert trainer["samples/s"] == ["100.0"] and trainer["throughput measured from"] == [BATCHES]   # not summed


def test_the_outcome_is_shown_by_its_code_with_its_words(tmp_path):
    """Issue 41: a summary keeps the outcome's kind as a code; the table words it (a code it does not know, as is)."""
    shown = []
    for kind, code in (("not_started", 2), ("launch_failed", 3), ("toolkit_failed", 1), ("a_new_kind", 9)):
        outcome = {"exit_code": code, "succeeded": False, "stopped": False, "headline": "...", "kind": kind}
        shown += table(compare(job_folder(tmp_path / kind, summary("algo-1", outcome=outcome))))["outcome"]
    assert shown == ["not started (exit code 2)", "launch failed (exit code 3)", "toolkit failed (exit code 1)",
                     "a_new_kind (exit code 9)"]


def test_the_trainers_rate_is_the_leaders_not_summed(tmp_path):
    """The Trainer's train_samples_per_second counts the whole job's samples (batch size x world size), and only
    the leader's rank 0 prints it: summing hosts' would count the job twice, and the other host has none."""
    rate = {"samples_per_second": 500.0, "tokens_per_second": None, "source": TRAINER,
            "trainer_samples_per_second": 500.0, "trainer_tokens_per_second": None}
    none = {"samples_per_second": None, "tokens_per_second": None, "source": None,
            "trainer_samples_per_second": None, "trainer_tokens_per_second": None}
    hosts = [job_folder(tmp_path / "algo-2", summary("algo-2", throughput=none)),
             job_folder(tmp_path / "algo-1", summary("algo-1", throughput=rate))]
    rows = table(compare(*hosts))
    assert rows["samples/s"] == ["500.0"] and rows["throughput measured from"] == [TRAINER]


def test_the_batch_source_is_the_one_the_toolkit_writes():
    from opentc_toolkit import job_summary

    assert BATCHES == job_summary.BATCHES


def test_the_merge_keeps_every_worker_and_leaves_the_inputs_as_read():
    from opentc_compare.hosts import merge_hosts
    from opentc_compare.inputs import Job

    given = [Job(name=JOB, source=host, summary=summary(host)) for host in ("algo-2", "algo-1")]
    before = json.dumps([job.summary for job in given])
    [job] = merge_hosts(given)
    assert [p["rank"] for p in job.summary["processes"]] == list(range(16))     # the leader's workers first
    assert job.source == "algo-2 + algo-1" and job.summary["current_host"] is None
    assert json.dumps([job.summary for job in given]) == before

"""The pure rules, without a job: how the workers' run becomes a verdict (outcome.judge), how an exception becomes the
line a user reads first (failure_records.summarize_exception), and how a worker's error record is read back. Each
rule is also exercised end to end by the job tests; here every branch is named, and runs in milliseconds."""

import json
import signal
import time
import types

import pytest

from opentc_launcher import exit_codes
from opentc_launcher.failure_records import (
    LAUNCH,
    FailureRecord,
    read_error_file,
    read_error_record,
    summarize_exception,
)
from opentc_launcher.options import WorkerOptions
from opentc_toolkit.outcome import LauncherFailureReport, OutcomeKind, WorkerErrorFile, judge
from opentc_toolkit.supervisor import ProcessResult


# -- judge ---------------------------------------------------------------------------------------------------------
def worker_error(tmp_path, summary="", traceback="", code=1):
    path = tmp_path / "error.json"
    path.write_text(json.dumps({"message": {"message": summary, "extraInfo": {"py_callstack": traceback,
                                                                               "exitcode": code}}}))
    return WorkerErrorFile(str(path))


def launcher_report(tmp_path, **fields):
    path = tmp_path / "failure.json"
    path.write_text(FailureRecord(**fields).to_json())
    return LauncherFailureReport(str(path))


def test_a_run_that_ended_well_succeeds_and_reads_no_record(tmp_path):
    outcome = judge(ProcessResult(0, "noise"), WorkerErrorFile(str(tmp_path / "never-written.json")), "algo-1", 1)
    assert outcome.succeeded and outcome.message == "" and not outcome.stopped
    assert outcome.kind is OutcomeKind.SUCCEEDED and outcome.rank is None and outcome.host is None


def test_a_failed_worker_is_told_in_its_own_words_first(tmp_path):
    source = worker_error(tmp_path, "ValueError: batch 7 has 3 columns", "Traceback ...\nValueError: batch 7")
    outcome = judge(ProcessResult(1, "stderr tail"), source, "algo-1", 1)
    lines = outcome.message.splitlines()
    assert outcome.exit_code == 1 and not outcome.stopped
    # Issue 41: the outcome is facts; the text is rendered from them where it is written
    assert (outcome.kind, outcome.rank, outcome.host) == (OutcomeKind.SCRIPT_FAILED, 0, "algo-1")
    assert outcome.headline == lines[0] and outcome.summary == lines[1] and outcome.details.startswith("Traceback")
    assert lines[:2] == ["Training failed: the training script ended with exit code 1 on host algo-1.",
                         "ValueError: batch 7 has 3 columns"]
    assert "Traceback ..." in outcome.message


def test_without_a_record_the_end_of_stderr_comes_first(tmp_path):
    outcome = judge(ProcessResult(139, "loading data\nSegmentation fault (core dumped)"),
                    WorkerErrorFile(str(tmp_path / "none.json")), "algo-1", 1)
    assert outcome.message.splitlines()[1:3] == ["loading data", "Segmentation fault (core dumped)"]
    assert "exit code 139, i.e. killed by SIGSEGV" in outcome.message


def test_a_kill_by_sigkill_says_what_it_usually_means(tmp_path):
    outcome = judge(ProcessResult(137, ""), WorkerErrorFile(str(tmp_path / "none.json")), "algo-1", 1)
    assert "killed by SIGKILL; on SageMaker this usually means the instance ran out of memory" in outcome.message


def test_with_several_workers_the_failed_rank_is_named(tmp_path):
    source = launcher_report(tmp_path, exit_code=3, rank=5, summary="RuntimeError: NCCL timeout")
    outcome = judge(ProcessResult(3, ""), source, "algo-2", 8)
    assert outcome.message.startswith("Training failed: the training script ended with exit code 3 on rank 5 of 8, "
                                      "host algo-2.")
    assert (outcome.kind, outcome.rank, outcome.host) == (OutcomeKind.SCRIPT_FAILED, 5, "algo-2")


def test_a_launch_that_failed_before_any_script_is_said_so(tmp_path):
    refused = launcher_report(tmp_path, exit_code=2, summary="--nproc-per-node 0 is not accepted", stage=LAUNCH)
    outcome = judge(ProcessResult(2, ""), refused, "algo-1", 1)
    assert outcome.message.startswith("Training not started: --nproc-per-node 0 is not accepted")
    assert outcome.kind is OutcomeKind.NOT_STARTED
    other = launcher_report(tmp_path, exit_code=3, summary="no rendezvous with algo-1:29500", stage=LAUNCH)
    outcome = judge(ProcessResult(3, ""), other, "algo-2", 2)
    assert outcome.message.startswith("Training failed before any training script ran: the launcher ended with exit "
                                      "code 3 on host algo-2.")
    assert (outcome.kind, outcome.rank, outcome.host, outcome.hosts_never_met) == (
        OutcomeKind.LAUNCH_FAILED, None, "algo-2", True)


def test_a_stop_is_a_stop_whatever_the_workers_exit_code(tmp_path):
    for code in (0, 143, 1):
        outcome = judge(ProcessResult(code, "", stopped_by=signal.SIGTERM, grace=30.0),
                        WorkerErrorFile(str(tmp_path / "none.json")), "algo-1", 1)
        assert outcome.stopped and outcome.message.startswith("Training stopped: SIGTERM received"), outcome
        assert outcome.kind is OutcomeKind.STOPPED
        assert "the workers were given 30 s to finish" in outcome.message


def test_every_outcome_kind_is_a_code_the_summary_format_knows():
    from opentc_compare.summary import OUTCOME_KINDS

    assert {kind.value for kind in OutcomeKind} == set(OUTCOME_KINDS)


# -- summarize_exception ----------------------------------------------------------------------------------------
def raised(make):
    try:
        make()
    except BaseException as e:  # noqa: BLE001  (the exception under test, whatever it is)
        return e
    raise AssertionError("nothing raised")


def test_an_exception_is_its_own_line():
    assert summarize_exception(raised(lambda: int("x"))) == "ValueError: invalid literal for int() with base 10: 'x'"


def test_a_chained_exception_shows_the_original_error_first():
    def chained():
        try:
            {}["missing"]
        except KeyError as e:
            raise RuntimeError("loading the dataset failed") from e
    assert summarize_exception(raised(chained)) == ("KeyError: 'missing'\n"
                                                    "(which led to RuntimeError: loading the dataset failed)")


def test_an_error_re_raised_by_a_dataloader_worker_shows_the_original_line_first():
    message = ("Caught ValueError in DataLoader worker process 0.\nOriginal Traceback (most recent call last):\n"
               '  File "train.py", line 9, in __getitem__\nValueError: sample 7 is empty\n')
    assert summarize_exception(ValueError(message)) == (
        "ValueError: sample 7 is empty\n(ValueError: Caught ValueError in DataLoader worker process 0.)")


def test_an_error_from_a_process_pool_shows_the_workers_error_first():
    """multiprocess (datasets.map(num_proc=N)) re-raises a pool worker's error from a RemoteTraceback whose text is
    the worker's traceback between triple quotes: the worker's error is the line, not the closing quotes."""
    class RemoteTraceback(Exception):
        pass

    def pooled():
        try:
            raise RemoteTraceback('\n"""\nTraceback (most recent call last):\n  File "x.py", line 3, in f\n'
                                  'ValueError: block_size of 64 is too big - use a value <=35\n"""')
        except RemoteTraceback as e:
            raise ValueError("block_size of 64 is too big - use a value <=35") from e
    assert summarize_exception(raised(pooled)) == (
        "ValueError: block_size of 64 is too big - use a value <=35\n"
        "(which led to ValueError: block_size of 64 is too big - use a value <=35)")


def test_an_exception_whose_str_raises_is_named_by_its_type():
    class ShardError(Exception):
        def __str__(self):
            raise RuntimeError("no")
    assert summarize_exception(ShardError()).endswith(".ShardError: <exception str() failed>")   # module-qualified


# -- error records --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("content", "expected"), [
    ({"message": {"message": "ValueError: x", "extraInfo": {"py_callstack": "tb", "exitcode": 1}}},
     ("ValueError: x", "tb", 1)),
    ({"message": {"message": "stopped", "extraInfo": {"exitcode": "143"}}}, ("stopped", "", 143)),
    ({"message": "a plain message"}, ("a plain message", "", None)),
    ({"message": {"message": "no code", "extraInfo": "not an object"}}, ("no code", "", None)),
])
def test_an_error_record_is_read_in_each_of_its_forms(tmp_path, content, expected):
    path = tmp_path / "error.json"
    path.write_text(json.dumps(content))
    record = read_error_record(str(path))
    assert (record.summary, record.traceback, record.exit_code) == expected
    assert read_error_file(str(path)) == expected[:2]


@pytest.mark.parametrize("content", [None, "not json", "[1, 2]"])
def test_a_missing_or_broken_error_record_is_none(tmp_path, content):
    path = tmp_path / "error.json"
    if content is not None:
        path.write_text(content)
    assert read_error_record(str(path)) is None and read_error_file(str(path)) == ("", "")
    assert read_error_record(None) is None and exit_codes.OK == 0


# -- what a user can do about a graph break, and about a library this image does not have -------------------------
@pytest.mark.parametrize(("wheres", "expected"), [
    (["/opt/ml/code/train.py:42"], "move or rewrite the line named"),
    (["/opt/venv/lib/python3.11/site-packages/transformers/models/bert/modeling_bert.py:321",
      "/usr/lib/python3/dist-packages/huggingface_hub/dataclasses.py:88"],
     "the break is in the code of huggingface_hub, transformers, not the script's, so no line of the script moves "
     "it: try newer versions of them"),
    (["/opt/ml/code/train.py:42", "/x/site-packages/six.py:10"], "; for those in six: the break is in six's code"),
])
def test_graph_break_advice_names_the_library_when_the_line_is_not_the_users(wheres, expected):
    from opentc_launcher.inductor.session import GRAPH_BREAK_FIX, break_fix

    fix = break_fix([{"where": where, "reason": "r", "count": 1} for where in wheres])
    assert expected in fix, fix
    assert fix.startswith(GRAPH_BREAK_FIX) is any("site-packages" not in w and "dist-packages" not in w for w in wheres)


def test_a_script_that_reaches_for_smdistributed_is_told_what_to_use_instead():
    def imports():
        import smdistributed.dataparallel.torch.distributed  # noqa: F401

    summary = summarize_exception(raised(imports))
    first, second = summary.split("\n")
    assert first.startswith("the script imports smdistributed, SageMaker's distributed training libraries"), first
    assert 'Use torch.distributed with backend="nccl"' in first
    assert second == "(ModuleNotFoundError: No module named 'smdistributed')"
    smddp = summarize_exception(AssertionError("Unknown backend type smddp"))
    assert smddp.startswith('the script asks torch.distributed for backend="smddp", from SageMaker') and \
        smddp.endswith("(AssertionError: Unknown backend type smddp)")
    assert summarize_exception(ModuleNotFoundError("No module named 'x'", name="x")) == \
        "ModuleNotFoundError: No module named 'x'"


@pytest.mark.parametrize(("error", "said"), [
    (ValueError("ProcessGroupNCCL is only supported with GPUs, no GPUs found!"),
     'the script asks torch.distributed for backend="nccl", which needs GPUs, and this host has none'),
    (RuntimeError("No backend type associated with device type cpu"),
     "the script's process group has no backend for CPU tensors: nccl reduces CUDA tensors only"),
    (RuntimeError("Distributed package doesn't have NCCL built in"),
     'the script asks torch.distributed for backend="nccl", and this torch was built without NCCL'),
    (RuntimeError("Distributed package doesn't have Gloo built in"),
     'the script asks torch.distributed for backend="gloo", and this torch was built without gloo')],
    ids=["nccl-without-gpu", "nccl-with-cpu-tensors", "torch-without-nccl", "torch-without-gloo"])
def test_a_backend_the_host_or_torch_lacks_is_named_first_with_what_to_use(error, said):
    """Issue 52: the peer toolkit's nccl-on-CPU job failed with torch's words alone; the backend, what is missing
    and what to use instead come first, torch's own line after them (also when it caused another error)."""
    first, second = summarize_exception(error).split("\n")
    assert first.startswith(said), first
    assert second == f"({type(error).__name__}: {error})"
    chained = RuntimeError("training failed")
    chained.__cause__ = error
    assert summarize_exception(chained).startswith(said)


# -- what a stop after the workers says -----------------------------------------------------------------------------
class StopAfter:
    """A supervisor whose stop arrives once `stop_requested` has been read `reads` times: a SIGTERM at a known moment
    of the wrap-up (wrap_up reads it before and after the publication, settle once more)."""

    def __init__(self, reads):
        self.reads = reads

    @property
    def stop_requested(self):
        self.reads -= 1
        return signal.SIGTERM if self.reads < 0 else None


class Published:
    published = "/opt/ml/checkpoints/compile-cache/inductor-torch-2.7.0-cpu"

    def publish(self):
        return "published 3 files"


@pytest.mark.parametrize(("reads", "said"), [
    (2, "after the training script had ended with exit code 0, once the compilation cache was published "
        "(StopTrainingJob, a spot interruption, MaxRuntime or docker stop). What the script wrote is kept, and so "
        "is what was done after it."),
    (1, "after the training script had ended with exit code 0, while the compilation cache was being published to "
        "/opt/ml/checkpoints/compile-cache/inductor-torch-2.7.0-cpu (StopTrainingJob, a spot interruption, MaxRuntime "
        "or docker stop). What the script wrote is kept; what was being done then was cut short."),
])
def test_a_stop_after_the_cache_was_published_does_not_say_the_publication_was_cut_short(reads, said):
    """Issue 31 I: a SIGTERM after the publication had completed said it 'was cut short'."""
    from opentc_toolkit.job_summary import JobRecorder
    from opentc_toolkit.outcome import Outcome
    from opentc_toolkit.wrap_up import wrap_up

    recorder = JobRecorder()
    recorder.plan = types.SimpleNamespace(options=WorkerOptions(backend="eager"))   # no debug reports to make
    recorder.cache = Published()
    outcome = wrap_up(Outcome(exit_codes.OK), recorder, StopAfter(reads), {}, 30)
    assert outcome.stopped and outcome.exit_code == 143
    assert outcome.message == f"Training stopped: SIGTERM received {said}"


# -- the job summary's times (job_summary.run_times) -----------------------------------------------------------------
def test_a_clock_set_during_the_job_gives_no_negative_time():
    """The job's length is the monotonic clock's; the time to the first step compares the workers' wall clock with
    the job's, so a clock set back (NTP) after the start would give a figure nobody measured: said as unknown."""
    from opentc_toolkit.job_summary import JobRecorder, run_times

    now = time.time()
    recorder = JobRecorder(started=now - 5, started_monotonic=time.monotonic() - 5)
    wall, first = run_times(recorder, [now - 3, now - 2])
    assert 5 <= wall < 65 and first == pytest.approx(2, abs=0.01)
    assert run_times(recorder, [])[1] is None                                             # no step taken
    recorder = JobRecorder(started=now + 3600, started_monotonic=time.monotonic() - 5)   # set back an hour since
    wall, first = run_times(recorder, [now])
    assert 5 <= wall < 65 and first is None
    recorder = JobRecorder(started=now - 3600, started_monotonic=time.monotonic() - 5)   # set forward an hour
    assert run_times(recorder, [now])[1] is None                                         # longer than the job


# -- the XLA compile report's host-read finding (xla/diagnostics._findings) ------------------------------------------
def host_read_findings(optimizer_steps: int, syncs: int, evaluations: int, host_checks: dict[str, int]):
    from opentc_launcher.compile_report import CompileTimeline
    from opentc_launcher.steps import StepCounter
    from opentc_launcher.xla.diagnostics import StepActivity, _findings
    from opentc_launcher.xla.loss_scaling import LossScalingWatch

    steps, activity, watch = StepCounter(), StepActivity(), LossScalingWatch()
    steps.steps, activity.steps_with_host_reads = optimizer_steps, max(0, optimizer_steps - 1)
    watch.host_checks.update(host_checks)
    return _findings(CompileTimeline(warmup_steps=5), {}, evaluations, syncs, steps, activity, {}, watch)


def test_fp16_that_overflowed_every_step_keeps_its_cause_and_its_fix():
    """Issue 40 J: every step overflowed, so the scaler skipped every optimizer step (0 counted) and the reads were
    counted by sync: the finding said "log less often", without the cause the report had counted ({AdamW: 6})."""
    from opentc_launcher.xla.loss_scaling import FIX

    [finding] = host_read_findings(optimizer_steps=0, syncs=6, evaluations=6, host_checks={"AdamW": 6})
    assert finding.problem == (
        "6 explicit evaluation(s) (a tensor read back to the host) in 6 sync(s). fp16 loss scaling reads them: "
        "GradScaler.step checked for overflow on the host before stepping AdamW (6 steps), an optimizer that cannot "
        "take that check as a tensor. It found inf or nan gradients in every one of the 6 and skipped them: the "
        "optimizer stepped 0 time(s).")
    assert finding.fix == FIX


def test_fp16_that_overflowed_some_steps_says_how_many_were_skipped():
    [finding] = host_read_findings(optimizer_steps=9, syncs=12, evaluations=12, host_checks={"AdamW": 12})
    assert finding.problem.endswith("It found inf or nan gradients in 3 of the 12 and skipped them: the optimizer "
                                    "stepped 9 time(s).")
    [finding] = host_read_findings(optimizer_steps=12, syncs=12, evaluations=12, host_checks={"AdamW": 12})
    assert finding.problem.endswith("as a tensor.")                      # none skipped: nothing more said


def test_host_reads_of_the_scripts_own_are_told_to_log_less_often():
    from opentc_launcher.xla.diagnostics import EVALUATION_FIX

    [finding] = host_read_findings(optimizer_steps=0, syncs=6, evaluations=6, host_checks={})
    assert finding.problem == "6 explicit evaluation(s) (a tensor read back to the host) in 6 sync(s)."
    assert finding.fix == EVALUATION_FIX


# -- XLA's recompilation finding: one unit per timeline (xla/diagnostics.StepOrSyncTimelines) -------------------------
def test_graphs_compiled_before_the_first_optimizer_step_are_warm_up_not_recompilation():
    """Issue 52: a 6-step DPO job's report said graphs compiled "at steps 6, 7, 8, 9, 11, 13, 14, 15": sync counts
    (its reference model's syncs before the first optimizer step) compared with a warm-up of 5 optimizer steps."""
    from opentc_launcher.xla.diagnostics import StepOrSyncTimelines

    timelines, compiles = StepOrSyncTimelines(warmup_steps=5), 0
    for sync in range(1, 16):   # before the first optimizer step: new graphs at these syncs
        compiles += sync in (1, 6, 7, 8, 9, 11, 13, 14, 15)
        timelines.observe(0, sync, compiles)
    for step in range(1, 7):    # then 6 optimizer steps, one sync each, nothing new
        timelines.observe(step, 15 + step, compiles)
    chosen = timelines.chosen(6)
    assert chosen.unit == "optimizer step" and chosen.recompilation_finding() is None
    assert timelines.by_sync.recompilation_finding() is not None   # what the mixed count said


def test_a_script_without_optimizer_steps_is_judged_by_syncs_and_the_finding_says_so():
    from opentc_launcher.compile_report import recompilation_warning
    from opentc_launcher.xla.diagnostics import StepOrSyncTimelines

    timelines = StepOrSyncTimelines(warmup_steps=5)
    for sync in range(1, 11):
        timelines.observe(0, sync, sync)   # a new graph at every sync
    chosen = timelines.chosen(0)
    finding = chosen.recompilation_finding()
    assert finding is not None and finding.problem.startswith(
        "5 graph(s) were compiled after warm-up (sync 5: no optimizer step was taken, so syncs count), at 5 different "
        "syncs (6, 7, 8, 9, 10, ...)"), finding.problem
    assert "at 5 different syncs, the last at sync 10: no optimizer step was taken" in \
        recompilation_warning("rank0", chosen, 10)


def test_optimizer_steps_keep_their_words():
    from opentc_launcher.compile_report import CompileTimeline

    timeline = CompileTimeline(warmup_steps=2)
    for step in range(1, 7):
        timeline.observe(step, step)
    finding = timeline.recompilation_finding()
    assert finding is not None and finding.problem.startswith(
        "4 graph(s) were compiled after warm-up (optimizer step 2), at 4 different optimizer steps (3, 4, 5, 6, ...)")


# -- nothing compiled: the same words on every backend ---------------------------------------------------------------
def test_every_backend_says_nothing_was_compiled_in_the_same_words():
    from opentc_launcher.compile_report import NOTHING_COMPILED, NOTHING_COMPILED_PROBLEM
    from opentc_launcher.inductor.session import NOTHING_COMPILED_FINDING as INDUCTOR
    from opentc_launcher.xla.diagnostics import NOTHING_COMPILED_FINDING as XLA

    for backend, finding in (("xla", XLA), ("inductor", INDUCTOR)):
        assert finding.kind == NOTHING_COMPILED
        assert finding.problem.startswith(NOTHING_COMPILED_PROBLEM.format(backend=backend) + " (")
        assert finding.problem.endswith("), so it ran eagerly, uncompiled.")
    assert "torch_xla.device()" in XLA.fix and "model = torch.compile(model)" in INDUCTOR.fix


# -- workers that never met (job_summary.never_met) ------------------------------------------------------------------
def record(steps=8, group=None, **more):
    return {"process": "rank0", "optimizer_steps": steps, "process_group": group, **more}


@pytest.mark.parametrize(("records", "workers", "said"), [
    ([record(), record()], 2, True),                                         # two workers, never a group
    ([record(group={"backend": "gloo", "world_size": 1})] * 2, 2, True),     # each a world of its own
    ([record()], 2, True),                                                   # one of two hosts, one process each
    ([record(group={"backend": "gloo", "world_size": 2})] * 2, 2, False),    # they met
    ([record(group={"backend": "gloo", "world_size": 2}), record()], 2, False),   # met at some time
    ([record()], 1, False),                                                  # one worker: nobody to meet
    ([record(steps=0), record(steps=0)], 2, False),                          # nothing trained
    ([{"process": "rank0", "optimizer_steps": 8}] * 2, 2, False),            # an older record does not say
    ([], 2, False)])
def test_workers_that_trained_without_ever_meeting_are_a_finding(records, workers, said):
    from opentc_toolkit.job_summary import never_met

    found = never_met(records, workers)
    assert (found is not None) == said, found
    if said:
        assert found.startswith(f"{workers} workers, no process group: each trained its own copy. This host's "), found
        assert "To fix: have the script form one process group" in found

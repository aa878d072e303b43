"""The launcher on its own, outside SageMaker: opentc-run like torchrun, and the worker bootstrap."""

import fcntl
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BIN, SCRIPTS, clean_env, free_port, no_torch_xla, wait_for
from opentc_launcher.commands import run_command, worker_command
from opentc_launcher.inductor.session import cache_folder_for
from opentc_launcher.published_cache import LOCK, MANIFEST


def run(argv, tmp_path, timeout=180, **env):
    return subprocess.run([str(a) for a in argv], env=clean_env(SM_MODEL_DIR=str(tmp_path), **env),
                          cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)


def report(tmp_path, rank):
    return json.loads((tmp_path / f"env-rank{rank}.json").read_text())


def test_commands_are_the_installed_console_scripts():
    assert worker_command(sys.executable) == (str(BIN / "opentc-worker"),)
    assert run_command(sys.executable) == (str(BIN / "opentc-run"),)
    assert worker_command("/nowhere/python") == ("/nowhere/python", "-m", "opentc_launcher.worker")


@pytest.mark.slow
def test_opentc_run_like_torchrun_with_plain_pytorch(tmp_path):
    result = run([BIN / "opentc-run", "--standalone", "--nproc-per-node", "2", "--backend", "eager",
                  SCRIPTS / "report_env.py", "--lr", "0.1"], tmp_path)
    assert result.returncode == 0, result.stdout[-4000:]
    found = [report(tmp_path, r) for r in range(2)]
    assert [(r["RANK"], r["LOCAL_RANK"], r["WORLD_SIZE"]) for r in found] == [("0", "0", "2"), ("1", "1", "2")]
    assert all(r["all_reduce_sum"] == 3.0 and r["argv"] == ["--lr", "0.1"] for r in found)


@pytest.mark.slow
def test_opentc_run_honours_master_addr_and_port(tmp_path):
    port = str(free_port())
    result = run([BIN / "opentc-run", "--nnodes", "1", "--nproc-per-node", "2", "--backend", "eager",
                  SCRIPTS / "report_env.py"], tmp_path, MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    assert result.returncode == 0, result.stdout[-4000:]
    assert {report(tmp_path, r)["MASTER_PORT"] for r in range(2)} == {port}


def test_opentc_run_refuses_xla_cpu_workers_before_starting_any(tmp_path):
    report_file = tmp_path / "failure.json"
    result = run([BIN / "opentc-run", "--standalone", "--nproc-per-node", "2", "--device", "cpu",
                  "--failure-report", report_file, SCRIPTS / "report_env.py"], tmp_path)
    assert result.returncode == 2
    assert "no cross-process collectives" in result.stdout
    assert json.loads(report_file.read_text())["exit_code"] == 2
    assert not (tmp_path / "env-rank0.json").exists()


def test_opentc_run_exits_with_the_failed_workers_code_and_reports_it(tmp_path):
    report_file = tmp_path / "failure.json"
    script = tmp_path / "rank1_fails.py"
    script.write_text("import os, sys\n"
                      "if os.environ['RANK'] == '1':\n"
                      "    print('rank 1: cannot open shard', file=sys.stderr)\n"
                      "    raise SystemExit(7)\n")
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    result = run([BIN / "opentc-run", "--standalone", "--nproc-per-node", "2", "--backend", "eager",
                  "--failure-report", report_file, script], tmp_path, TMPDIR=str(temporary))
    assert result.returncode == 7, result.stdout[-4000:]
    failure = json.loads(report_file.read_text())
    assert (failure["rank"], failure["exit_code"]) == (1, 7)
    assert "rank 1: cannot open shard" in failure["stderr_tail"]    # read from the workers' stderr copies, which
    assert not list(temporary.glob("opentc-run-*"))                  # the folder opentc-run made kept, then removed


@pytest.mark.slow
def test_worker_honours_torchrun_variables_set_by_someone_else(tmp_path):
    """One process per pod, as a Kubernetes operator starts them: RANK, WORLD_SIZE, MASTER_* are given."""
    port = str(free_port())
    procs = [subprocess.Popen([str(BIN / "opentc-worker"), "--backend", "eager", str(SCRIPTS / "report_env.py")],
                              env=clean_env(SM_MODEL_DIR=str(tmp_path), RANK=str(rank), WORLD_SIZE="2",
                                            LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=port),
                              cwd=str(tmp_path))
             for rank in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    assert [report(tmp_path, r)["all_reduce_sum"] for r in range(2)] == [3.0, 3.0]


@pytest.mark.slow
def test_xla_spawn_style_script_gets_mp_fn_called(tmp_path):
    result = run([BIN / "opentc-worker", "--device", "cpu", SCRIPTS / "mp_fn_only.py", "--a", "1"], tmp_path)
    assert result.returncode == 0, result.stdout[-4000:]
    assert json.loads((tmp_path / "mp_fn.json").read_text()) == {"index": 0, "argv": ["--a", "1"]}


def test_script_with_main_guard_and_mp_fn_runs_once(tmp_path):
    script = tmp_path / "both.py"
    script.write_text("import os\n"
                      "def main():\n"
                      "    open(os.path.join(os.environ['SM_MODEL_DIR'], 'runs.txt'), 'a').write('run\\n')\n"
                      "def _mp_fn(index):\n"
                      "    main()\n"
                      "if __name__ == '__main__':\n"
                      "    main()\n")
    result = run([BIN / "opentc-worker", "--backend", "eager", script], tmp_path)
    assert result.returncode == 0, result.stdout
    assert (tmp_path / "runs.txt").read_text() == "run\n"


def test_user_files_cannot_shadow_the_launcher(tmp_path):
    """The code folder is the workers' working directory; packages there named like ours must not win."""
    for package in ("opentc_launcher", "opentc_toolkit"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("raise ImportError('shadowed by user code')\n")
    (tmp_path / "helpers.py").write_text("VALUE = 'the user helper'\n")
    script = tmp_path / "train.py"
    script.write_text("import os, sys\n"
                      "assert sys.path[0] == os.path.dirname(os.path.abspath(__file__))\n"
                      "import helpers\n"
                      "open('ran.txt', 'w').write(helpers.VALUE)\n")
    result = run([BIN / "opentc-run", "--standalone", "--nproc-per-node", "1", "--backend", "eager", script],
                 tmp_path)
    assert result.returncode == 0, result.stdout[-3000:]
    assert (tmp_path / "ran.txt").read_text() == "the user helper"


def test_missing_script_is_named(tmp_path):
    result = run([BIN / "opentc-worker", "--backend", "eager", tmp_path / "nope.py"], tmp_path)
    assert result.returncode == 2
    assert f"training script {tmp_path / 'nope.py'} does not exist" in result.stdout
    (tmp_path / "folder.py").mkdir()
    result = run([BIN / "opentc-worker", "--backend", "eager", tmp_path / "folder.py"], tmp_path)
    assert result.returncode == 2
    assert f"training script {tmp_path / 'folder.py'} is a folder, not a Python file" in result.stdout


@pytest.mark.parametrize(("options", "env", "expected"), [
    (["--standalone", "--nproc-per-node", "0"], {},
     "--nproc-per-node '0' is not accepted: use a whole number >= 1"),
    (["--nnodes", "1", "--nproc-per-node", "1"], {"MASTER_PORT": "70000"},
     "MASTER_PORT='70000' is not accepted: use a whole number from 1 to 65535"),
    (["--nnodes", "1", "--nproc-per-node", "1", "--master-port", "0"], {},
     "--master-port 0 is not accepted: use a TCP port from 1 to 65535"),
    (["--nnodes", "2", "--node-rank", "2", "--nproc-per-node", "1"], {},
     "--node-rank (or NODE_RANK) 2 is not accepted: use 0 to 1 for --nnodes 2"),
    (["--standalone", "--nproc-per-node", "²"], {}, "--nproc-per-node '²' is not accepted: use a whole number >= 1"),
    (["--nnodes", "1:²", "--nproc-per-node", "1"], {}, "--nnodes '1:²' is not accepted"),
    (["--nnodes", "2", "--nproc-per-node", "1"], {"NODE_RANK": "²"}, "NODE_RANK='²' is not accepted"),
    (["--nnodes", "2", "--nproc-per-node", "1"], {"NODE_RANK": "1" * 5000}, "is not accepted: use a whole number >= 0"),
    (["--standalone", "--nproc-per-node", "100000"], {}, "--nproc-per-node 100000 asks for 100000 workers on this "
                                                         "host, more than any host can run"),
    (["--standalone", "--nproc-per-node", "1", "--compile-cache-dir", "cache", "--compile-cache-work-dir", "./cache"],
     {}, "--compile-cache-work-dir './cache' is not accepted: it is --compile-cache-dir itself"),
    (["--standalone", "--nproc-per-node", "1", "--debug-mode", "true", "--debug-dir", "/dev/null/debug"], {},
     "--debug-dir /dev/null/debug cannot be used: NotADirectoryError: Not a directory. Name a folder the workers can "
     "create and write in"),
], ids=["nproc-0", "master-port-variable", "master-port-option", "node-rank", "nproc-superscript",
        "nnodes-superscript", "node-rank-variable-superscript", "node-rank-variable-5000-digits", "nproc-100000",
        "cache-work-dir-is-the-cache", "debug-dir-under-a-file"])
def test_a_bad_launch_value_is_exit_2_naming_it_not_a_rendezvous_failure(tmp_path, options, env, expected):
    result = run([BIN / "opentc-run", *options, "--backend", "eager", "--failure-report", tmp_path / "failure.json",
                  SCRIPTS / "report_env.py"], tmp_path, timeout=60, **env)
    assert result.returncode == 2, result.stdout[-3000:]
    assert expected in result.stdout and "rendezvous" not in result.stdout, result.stdout[-3000:]
    record = json.loads((tmp_path / "failure.json").read_text())
    assert record["stage"] == "launch" and record["exit_code"] == 2 and expected in record["summary"]
    assert not (tmp_path / "env-rank0.json").exists()


@pytest.mark.parametrize("launcher", ["opentc-worker", "opentc-run"])
def test_the_scripts_own_arguments_are_never_read_as_launcher_options(tmp_path, launcher):
    """`--compile` would be an ambiguous abbreviation of --compile-report-dir and --compile-cache-dir, `--dev` one of
    --device, `--max-comp` of --max-compilations: they are the script's, whatever they look like."""
    script_args = ["--compile", "no", "--dev", "cuda", "--max-comp", "3", "--device", "tpu", "--backend", "x"]
    prefix = [BIN / "opentc-run", "--standalone", "--nproc-per-node", "1"] if launcher == "opentc-run" else \
        [BIN / "opentc-worker"]
    result = run([*prefix, "--backend", "eager", SCRIPTS / "argv_echo.py", *script_args], tmp_path)
    assert result.returncode == 0, result.stdout[-3000:]
    assert json.loads((tmp_path / "argv.json").read_text()) == script_args


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_nothing_of_torch_is_imported_before_the_script(tmp_path, backend):
    """The eager and Inductor workers hook torch when the script imports it, never before: a script that sets
    OMP_NUM_THREADS (or CUDA_VISIBLE_DEVICES) before `import torch` gets its way."""
    result = run([BIN / "opentc-worker", "--backend", backend, "--device", "cpu", "--compile-report-dir",
                  tmp_path / "report", SCRIPTS / "imports_at_start.py"], tmp_path)
    assert result.returncode == 0, result.stdout[-3000:]
    found = json.loads((tmp_path / "imports.json").read_text())
    assert found["before"] == {"torch": False, "torch._dynamo": False, "torch_xla": False}, found
    assert found["threads"] == 1


@pytest.mark.slow
def test_the_inductor_backend_runs_where_torch_xla_is_not_installed(tmp_path):
    """As on a GPU machine with a newer torch and no torch-xla: `import torch_xla` fails in every process (a
    sitecustomize stands in for the missing package), and the Inductor worker compiles and reports anyway."""
    blocker = no_torch_xla(tmp_path / "no_torch_xla")
    result = run([BIN / "opentc-worker", "--backend", "inductor", "--device", "cpu", "--compile-report-dir",
                  tmp_path / "report", SCRIPTS / "compile" / "inductor_loop.py", "--steps", "2"], tmp_path,
                 PYTHONPATH=blocker, SM_OUTPUT_DATA_DIR=str(tmp_path))
    assert result.returncode == 0, result.stdout[-3000:]
    report = json.loads((tmp_path / "report" / "compile-report-rank0.json").read_text())
    assert report["backend"] == "inductor" and report["graphs_captured"] == 1, report
    assert json.loads((tmp_path / "loop_metrics.json").read_text())["torch_xla_imported"] is False
    failed = run([BIN / "opentc-worker", "--backend", "xla", "--device", "cpu", SCRIPTS / "argv_echo.py"], tmp_path,
                 PYTHONPATH=blocker)
    # The blocker works, and a backend that is not installed is refused before the script, naming what is missing.
    assert failed.returncode == 2 and "PyTorch/XLA (the torch-xla package) is not installed here" in failed.stdout
    assert not (tmp_path / "argv.json").exists()


@pytest.mark.slow
def test_opentc_run_given_a_working_folder_for_the_cache_publishes_it_and_removes_its_copy(tmp_path):
    """Issue 40 I: with --compile-cache-work-dir, opentc-run took the copy for its caller's and never published it
    (while the worker logged that it would be), so the next run was cold; a failed run left its copy behind. Now
    opentc-run given the folder alone owns the copy there (the toolkit says --compile-cache-copy-opened)."""
    cache, work = tmp_path / "cache", tmp_path / "work"
    argv = [BIN / "opentc-run", "--standalone", "--nproc-per-node", "1", "--backend", "inductor", "--device", "cpu",
            "--compile-cache-dir", cache, "--compile-cache-work-dir", work]
    stale = cache_folder_for(str(work), "cpu") + "/stale-from-a-killed-run.bin"
    os.makedirs(os.path.dirname(stale))
    Path(stale).write_bytes(b"x")
    result = run([*argv, SCRIPTS / "argv_echo.py"], tmp_path)
    assert result.returncode == 0, result.stdout[-3000:]
    published = Path(cache_folder_for(str(cache), "cpu"))
    assert (published / MANIFEST).exists(), result.stdout[-3000:]
    assert "stale-from-a-killed-run.bin" not in (published / MANIFEST).read_text()
    assert "compilation cache: published " in result.stdout
    assert not os.path.exists(cache_folder_for(str(work), "cpu")), "the copy is removed once published"
    failed = run([*argv, SCRIPTS / "crash.py"], tmp_path)
    assert failed.returncode != 0
    assert not os.path.exists(cache_folder_for(str(work), "cpu")), "a failed run's copy is removed too"


def test_a_stop_while_opentc_run_publishes_the_cache_ends_with_the_stops_exit_code(tmp_path):
    """torch's stop handlers stay installed after the workers: a SIGTERM while the cache was being published ended
    opentc-run with a traceback and exit code 1. The test holds the publication lock (as another job publishing the
    same cache would), so the stop comes while opentc-run waits for it, whatever the machine's speed."""
    cache = tmp_path / "cache"
    cache.mkdir()
    argv = [BIN / "opentc-run", "--standalone", "--nproc-per-node", "1", "--backend", "inductor", "--device", "cpu",
            "--compile-cache-dir", cache, SCRIPTS / "waits_for_go.py"]
    log = tmp_path / "run.log"
    with open(log, "w") as out:
        launcher = subprocess.Popen([str(a) for a in argv], env=clean_env(SM_MODEL_DIR=str(tmp_path)),
                                    cwd=str(tmp_path), stdout=out, stderr=subprocess.STDOUT)
    lock = os.open(cache / LOCK, os.O_CREAT | os.O_RDONLY)
    try:
        wait_for(lambda: (tmp_path / "ready").exists(), 120, "the script", launcher, log)
        fcntl.flock(lock, fcntl.LOCK_EX)   # the worker's copy was opened: now hold the publication
        (tmp_path / "go").touch()
        wait_for(lambda: "compilation cache: another job holds" in log.read_text(), 60, "the publication", launcher,
                 log)
        launcher.send_signal(signal.SIGTERM)
        assert launcher.wait(timeout=60) == 143, log.read_text()[-3000:]
    finally:
        if launcher.poll() is None:
            launcher.kill()
        os.close(lock)
    said = log.read_text()
    assert "Traceback" not in said, said[-3000:]
    assert ("stopped by SIGTERM after every worker succeeded, while the compilation cache was being published to "
            f"{cache_folder_for(str(cache), 'cpu')}: the published cache is left as it was") in said, said[-3000:]
    assert sorted(os.listdir(cache)) == [LOCK]   # nothing published, nothing half-written


def test_a_report_that_cannot_be_made_never_fails_a_script_that_succeeded(tmp_path):
    """Issue 40 (design review): session.finish was not guarded, so a failure while making the compile report or the
    measurements turned a script that succeeded into exit 1, with no failure record."""
    result = run([BIN / "opentc-worker", "--backend", "eager", "--summary-dir", tmp_path / "records",
                  SCRIPTS / "breaks_the_report.py"], tmp_path, timeout=120,
                 TORCHELASTIC_ERROR_FILE=str(tmp_path / "error.json"))
    assert result.returncode == 0, result.stdout[-3000:]
    assert "trained" in result.stdout
    assert ("the compile report and this worker's measurements could not be made: RuntimeError: the step "
            "statistics are broken") in result.stdout
    assert not (tmp_path / "error.json").exists()


@pytest.mark.slow
def test_every_folder_an_option_names_is_made_before_the_workers_start(tmp_path):
    """Issue 51 (10): a --debug-dir that did not exist ended the worker in torch's import (FileNotFoundError:
    .../torch_logs.txt, exit 1); the folders the options name are made first (or refused, naming the option)."""
    from opentc_launcher.option_folders import folder_problem, named_folders
    from opentc_launcher.options import WorkerOptions

    folders = {"debug_dir": tmp_path / "d" / "debug", "compile_report_dir": tmp_path / "r" / "report",
               "summary_dir": tmp_path / "s" / "summary"}
    options = WorkerOptions(debug_mode=True, **{k: str(v) for k, v in folders.items()})
    assert named_folders(options) == {"--debug-dir": str(folders["debug_dir"]),
                                      "--compile-report-dir": str(folders["compile_report_dir"]),
                                      "--summary-dir": str(folders["summary_dir"])}
    assert folder_problem(options) is None and all(folder.is_dir() for folder in folders.values())
    assert "--debug-dir" not in named_folders(WorkerOptions(debug_dir=str(tmp_path / "off")))   # debug mode off
    (tmp_path / "a-file").write_text("")
    assert folder_problem(WorkerOptions(summary_dir=str(tmp_path / "a-file" / "summary"))).startswith(
        f"--summary-dir {tmp_path / 'a-file' / 'summary'} cannot be used: NotADirectoryError")


@pytest.mark.slow
@pytest.mark.inductor
def test_opentc_run_with_a_new_debug_dir_makes_it(tmp_path):
    debug = tmp_path / "new" / "debug"
    result = run([BIN / "opentc-run", "--standalone", "--nproc-per-node", "1", "--backend", "inductor", "--device",
                  "cpu", "--debug-mode", "true", "--debug-dir", debug, SCRIPTS / "imports_at_start.py"], tmp_path)
    assert result.returncode == 0, result.stdout[-4000:]
    assert (debug / "torch_logs.txt").exists(), sorted(p.name for p in debug.iterdir())


def test_opentc_run_alone_has_debug_mode_and_gives_its_worker_the_environment_train_would(tmp_path):
    """Issue 41: debug mode is a worker option, so opentc-run alone has it; the worker sets the backend's
    environment that no launcher above set (the same function train's plan calls), before torch_xla imports."""
    script = tmp_path / "xla_steps.py"
    script.write_text(
        "import json, os, sys\n"
        "import torch, torch_xla\n"
        "device = torch_xla.device()\n"
        "model = torch.nn.Linear(8, 1).to(device)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for _ in range(3):\n"
        "    optimizer.zero_grad(); model(torch.randn(4, 8, device=device)).pow(2).mean().backward()\n"
        "    optimizer.step(); torch_xla.sync()\n"
        "keys = ('USE_TORCH_XLA', 'XLA_IR_DEBUG', 'XLA_FLAGS', 'PT_XLA_DEBUG_LEVEL')\n"
        "json.dump({k: os.environ.get(k) for k in keys}, open(sys.argv[1], 'w'))\n")
    debug = tmp_path / "debug"
    result = run([BIN / "opentc-run", "--standalone", "--nproc-per-node", "1", "--backend", "xla", "--device", "cpu",
                  "--debug-mode", "true", "--debug-dir", debug, script, tmp_path / "env.json"], tmp_path,
                 XLA_FLAGS="--xla_cpu_enable_fast_math=false")
    assert result.returncode == 0, result.stdout[-4000:]
    assert "the PyTorch/XLA environment this worker sets for itself" in result.stdout, result.stdout[-4000:]
    env = json.loads((tmp_path / "env.json").read_text())
    assert env["USE_TORCH_XLA"] == "1" and env["XLA_IR_DEBUG"] == "1" and env["PT_XLA_DEBUG_LEVEL"] == "1"
    # the caller's own flags stay, and debug mode's dump joins them, as in a train job (test_train_jobs)
    # (torch_xla appends flags of its own at import)
    assert env["XLA_FLAGS"].startswith(f"--xla_cpu_enable_fast_math=false --xla_dump_to={debug}/xla_dump"), env
    assert list(debug.glob("XLA_METRICS_FILE*")), sorted(p.name for p in debug.iterdir())
    assert any(name.endswith(".txt") for name in os.listdir(debug / "xla_dump"))


def test_opentc_run_dry_run_decides_the_launch_and_lists_the_ledger_without_starting_anything(tmp_path):
    """Issue 53: what a launch would change in the libraries, known before it runs (nothing started, no folder made)."""
    result = run([BIN / "opentc-run", "--dry-run", "--standalone", "--nproc-per-node", "2", "--backend", "inductor",
                  "--defaults-off", "head", tmp_path / "never_run.py", "--epochs", "1"], tmp_path, TMPDIR=str(tmp_path))
    assert result.returncode == 0, result.stdout[-3000:]
    assert "backend inductor on cpu, worker options: --backend inductor --device cpu" in result.stdout, result.stdout
    assert f"script: {tmp_path / 'never_run.py'} --epochs 1" in result.stdout
    assert ("  compile-time default trunk-behind-a-region-boundary (torch.nn.Module.forward): off (--defaults-off "
            "head)") in result.stdout, result.stdout
    assert "  compile-time default torch-compile-regional (torch.compile): applies (torch " in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "a dry run writes nothing"

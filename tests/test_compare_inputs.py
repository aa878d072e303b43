"""`opentc-compare` reads someone else's output.tar.gz: every input is untrusted. Whatever a job argument holds (a
summary of the wrong shape, nested 100,000 deep, not UTF-8, a gzip bomb, an S3 endpoint that never answers) and
whatever --plot names, the answer is one line naming the argument and what is accepted, exit 2, never a traceback.

The installed command runs as a subprocess on real files, a real tarball and real sockets: a silent server and a
port where nothing listens stand in for S3 endpoints that fail."""

from __future__ import annotations

import gzip
import io
import json
import random
import socket
import subprocess
import sys
import tarfile
import time

import pytest

from conftest import BIN, SilentServer, clean_env, free_port
from opentc_compare.summary import FORMAT, MAX_BYTES, NotASummary, load
from opentc_compare.table import _ratio

# Generous: the point is seconds, not the 3 minutes botocore's defaults take, on a busy 2-core machine too.
SECONDS = 30
AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def compare(*args, timeout=120, **env):
    started = time.monotonic()
    result = subprocess.run([str(BIN / "opentc-compare"), *map(str, args)], env=clean_env(**env),
                            capture_output=True, text=True, timeout=timeout)
    result.seconds = time.monotonic() - started
    return result


def refused(result, *words):
    """Exit 2 and one line on stderr holding each of `words`; nothing printed on stdout."""
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1, result.stderr[-3000:]
    for word in words:
        assert word in result.stderr, (word, result.stderr)
    assert result.stdout == ""


def job_with(folder, raw: bytes):
    """A job folder whose output/data/job-summary.json holds `raw`."""
    (folder / "output" / "data").mkdir(parents=True)
    (folder / "output" / "data" / "job-summary.json").write_bytes(raw)
    return folder


def summary_job(folder, **fields):
    return job_with(folder, json.dumps({"format": FORMAT, **fields}).encode())


# --- J: the summary's shape, checked in one place against the format ---

WRONG_TYPES = [
    ({"hosts": 5}, "field hosts is 5, not a list of host names"),
    ({"hosts": ["algo-1", 2]}, "field hosts[1] is 2, not text"),
    ({"step_seconds": {"median": "fast"}}, 'field step_seconds.median is "fast", not a number'),
    ({"step_seconds": [0.1]}, "field step_seconds is a list, not an object"),
    ({"loss": {"points": [{"step": 1, "loss": 2.0}, {"step": 2}]}}, "field loss.points[1] has no 'loss'"),
    ({"loss": {"points": "x"}}, 'field loss.points is "x", not a list of loss points'),
    ({"loss": {"points": [{"step": "one", "loss": 2.0}]}}, 'field loss.points[0].step is "one", not a whole number'),
    ({"loss": [1.0, 2.0]}, "field loss is a list, not an object"),
    ({"outcome": []}, "field outcome is a list, not an object"),
    ({"outcome": {"succeeded": "yes"}}, 'field outcome.succeeded is "yes", not true or false'),
    ({"versions": ["2.5.1"]}, "field versions is a list, not an object"),
    ({"versions": {"torch": 2.5}}, "field versions.torch is 2.5, not text"),
    ({"wall_seconds": True}, "field wall_seconds is true, not a number"),
    ({"optimizer_steps": False}, "field optimizer_steps is false, not a whole number"),
    ({"optimizer_steps": 1.5}, "field optimizer_steps is 1.5, not a whole number"),
    ({"optimizer_steps": 10**400}, "field optimizer_steps is a whole number of 401 digits (too large)"),
    ({"throughput": {"samples_per_second": "12/s"}}, 'field throughput.samples_per_second is "12/s", not a number'),
    ({"compile": {"graphs_compiled": [3]}}, "field compile.graphs_compiled is a list, not a whole number"),
    ({"processes": [{"rank": 0}, 1]}, "field processes[1] is 1, not an object"),
    ({"job_name": {"name": "x"}}, "field job_name is an object, not text"),
]


@pytest.mark.parametrize(("fields", "message"), WRONG_TYPES, ids=[m.split(" is ")[0][6:] for _, m in WRONG_TYPES])
def test_a_field_of_the_wrong_type_is_named_with_what_was_found_and_what_is_accepted(tmp_path, fields, message):
    job = summary_job(tmp_path / "job", **fields)
    refused(compare(job), f"{job}: {message}")


# --- issue 40 B: figures the check accepted broke the analysis (a wall time of -100 saved "+1100%") ---

OUT_OF_RANGE = [
    ({"wall_seconds": -100}, "field wall_seconds is -100, not a number of seconds from 0 to 1e9"),
    ({"wall_seconds": 1.7e308}, "field wall_seconds is 1.7e+308, not a number of seconds from 0 to 1e9"),
    ({"first_step_seconds": 1e300}, "field first_step_seconds is 1e+300, not a number of seconds from 0 to 1e9"),
    ({"step_seconds": {"median": -0.01}}, "field step_seconds.median is -0.01, not a number of seconds from 0 to "
                                          "1e9"),
    ({"compile": {"seconds": -1}}, "field compile.seconds is -1, not a number of seconds from 0 to 1e9"),
    ({"optimizer_steps": -3}, "field optimizer_steps is -3, not a whole number from 0"),
    ({"step_seconds": {"measured_steps": -1}}, "field step_seconds.measured_steps is -1, not a whole number from 0"),
    ({"workers": -2}, "field workers is -2, not a whole number from 0"),
    ({"peak_memory_mb": -5.0}, "field peak_memory_mb is -5.0, not a number from 0 to 1e18"),
    ({"throughput": {"samples_per_second": 1e300}}, "field throughput.samples_per_second is 1e+300, not a number "
                                                    "from 0 to 1e18"),
    ({"utilisation": {"mfu": -0.5}}, "field utilisation.mfu is -0.5, not a number from 0 to 1e18"),
]


@pytest.mark.parametrize(("fields", "message"), OUT_OF_RANGE, ids=[m.split(" is ")[0][6:] for _, m in OUT_OF_RANGE])
def test_a_figure_no_job_measures_is_refused_naming_what_is_accepted(fields, message):
    with pytest.raises(NotASummary) as refusal:
        load(json.dumps({"format": FORMAT, **fields}).encode(), "job")
    assert str(refusal.value) == f"job: {message} or null"


def test_the_bounds_themselves_and_a_negative_loss_are_accepted():
    load(json.dumps({"format": FORMAT, "wall_seconds": 1e9, "first_step_seconds": 0, "optimizer_steps": 0,
                     "step_seconds": {"median": 0.0, "p90": 1e-300}, "peak_memory_mb": 1e18,
                     "loss": {"points": [{"step": 1, "loss": -3.5}]}}).encode(), "job")


def test_a_ratio_past_a_million_is_a_bound_never_a_300_digit_figure():
    assert _ratio(1e9, 1e-300, faster_when_lower=True) == ">1,000,000x"
    assert _ratio(0.5, 0.25, faster_when_lower=True) == "2.00x"
    assert _ratio(0.5, 0.25, faster_when_lower=False) == "0.50x"


@pytest.mark.parametrize("value", ["[" * 100_000 + "]" * 100_000, '{"a": ' * 100_000 + "1" + "}" * 100_000],
                         ids=["lists", "objects"])
@pytest.mark.parametrize("field", ["loss", "something_new"])
def test_a_summary_nested_100000_deep_is_refused(tmp_path, field, value):
    job = job_with(tmp_path / "job", f'{{"format": "{FORMAT}", "{field}": {value}}}'.encode())
    refused(compare(job), f"{job}: job-summary.json is nested too deeply")


@pytest.mark.parametrize("encoding", ["latin-1", "utf-16", "utf-32"])
def test_a_summary_that_is_not_utf8_is_refused_saying_so(tmp_path, encoding):
    text = json.dumps({"format": FORMAT, "job_name": "café-ü", "backend": "eager"}, ensure_ascii=False)
    job = job_with(tmp_path / "job", text.encode(encoding))
    refused(compare(job), f"{job}: job-summary.json is not UTF-8 text")


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_nan_and_infinity_are_refused(tmp_path, constant):
    """JSON has neither (the toolkit writes null); Python's reader would take them and print 'nan' as a time."""
    job = job_with(tmp_path / "job", f'{{"format": "{FORMAT}", "wall_seconds": {constant}}}'.encode())
    refused(compare(job), f"{job}: job-summary.json holds ", constant)


def test_unknown_fields_missing_fields_and_nulls_are_accepted(tmp_path):
    """A newer toolkit's summary (fields this version does not know) and an older or failed job's (fields
    missing, figures null, a loss that was not a number) are read, table and plot."""
    job = summary_job(tmp_path / "job", backend="inductor", optimizer_steps=3, step_seconds={"median": None},
                      loss={"points": [{"step": 1, "loss": None}, {"step": 2, "loss": 2.5}]},
                      hosts=["algo-1"], energy_joules={"gpu": [[1.5]]}, processes=[{"rank": 0, "future": [1]}])
    plot = tmp_path / "compare.png"
    result = compare(job, summary_job(tmp_path / "old", backend="eager"), "--plot", plot)
    assert result.returncode == 0, result.stderr
    assert "| optimizer steps | 3 | - |" in result.stdout and "| final loss | 2.5000 | - |" in result.stdout
    assert plot.stat().st_size > 10_000


def test_text_from_a_summary_cannot_drive_the_terminal_or_split_the_table(tmp_path):
    job = summary_job(tmp_path / "job", backend="\x1b[2J\x1b[31mred", device="cpu | gpu\nnext line")
    result = compare(job)
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout and "\\u001b[2J\\u001b[31mred" in result.stdout
    assert "| device | cpu \\| gpu\\nnext line |" in result.stdout


# --- K: --plot, checked before anything is read ---

def test_a_plot_in_a_missing_folder_is_refused_before_any_job_is_read(tmp_path):
    job = summary_job(tmp_path / "job", backend="eager")
    refused(compare(job, "--plot", tmp_path / "missing" / "compare.png"),
            f"--plot {tmp_path / 'missing' / 'compare.png'}: the folder {tmp_path / 'missing'} does not exist")
    # Checked first: with a job that cannot be read either, it is the plot that is named.
    refused(compare(tmp_path / "nowhere", "--plot", tmp_path / "missing" / "compare.png"), "--plot ")


@pytest.mark.parametrize("name", ["compare.txt", "compare.tar.gz"])
def test_a_plot_extension_matplotlib_cannot_write_is_refused_naming_those_it_can(tmp_path, name):
    job = summary_job(tmp_path / "job", backend="eager")
    refused(compare(job, "--plot", tmp_path / name), f"--plot {tmp_path / name}: matplotlib cannot write",
            ".png", ".pdf", ".svg")
    assert not (tmp_path / name).exists()


def test_a_plot_name_without_an_extension_is_written_as_png_and_the_real_file_is_named(tmp_path):
    job = summary_job(tmp_path / "job", backend="eager", step_seconds={"median": 0.1})
    result = compare(job, "--plot", tmp_path / "compare")
    assert result.returncode == 0, result.stderr
    written = result.stderr.split("wrote ", 1)[1].split(" (", 1)[0]
    assert written == str(tmp_path / "compare.png") and "no extension" in result.stderr
    from PIL import Image

    with Image.open(written) as image:
        assert image.format == "PNG"


def test_a_plot_that_cannot_be_saved_is_one_line_and_exit_1_after_the_table(tmp_path):
    """The folder exists and the extension is known, and still the file cannot be made (a name longer than the
    file system allows): the table is out, the plot's failure is one line."""
    job = summary_job(tmp_path / "job", backend="eager")
    plot = tmp_path / ("x" * 300 + ".png")
    result = compare(job, "--plot", plot)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.count("\n") == 1 and "could not be drawn: OSError" in result.stderr, result.stderr
    assert "| | eager (job) |" in result.stdout


# --- L: how much of a file is read ---

class _Padded:
    """`head` then spaces, `size` bytes in all, made as they are read: a big member without holding it."""

    def __init__(self, head: bytes, size: int):
        self.head, self.left = head, size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        chunk, self.head = self.head[:n], self.head[n:]
        self.left -= n
        return chunk + b" " * (n - len(chunk))


def _bomb(path, size: int):
    """An output.tar.gz whose job-summary.json is a valid summary padded with spaces to `size` bytes: a few hundred
    KB of gzip."""
    info = tarfile.TarInfo("job-summary.json")
    info.size = size
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        tar.addfile(info, _Padded(json.dumps({"format": FORMAT, "backend": "eager"}).encode(), size))
    return path


# Runs the command and prints its peak resident memory (KiB): this wrapper's only child is the command.
_PEAK = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
         "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); print(r.stderr, end='')")


@pytest.mark.parametrize("size", [MAX_BYTES + 1, 8 * MAX_BYTES], ids=["just-over", "8x"])
def test_a_tarball_member_past_the_limit_is_refused_unread(tmp_path, size):
    tarball = _bomb(tmp_path / "output.tar.gz", size)
    assert tarball.stat().st_size < size // 100
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-c", _PEAK, str(BIN / "opentc-compare"), str(tarball)],
                         env=clean_env(), capture_output=True, text=True, timeout=120)
    status, stderr = run.stdout.split("\n", 1)
    code, peak_kib = map(int, status.split())
    assert code == 2 and "Traceback" not in stderr, stderr[-3000:]
    assert f"{tarball}: its job-summary.json is larger than {MAX_BYTES // 2**20} MiB" in stderr
    assert peak_kib < 100 * 1024, f"peak RSS {peak_kib // 1024} MiB"      # read whole: 2x the member and more
    assert time.monotonic() - started < SECONDS


def test_a_tarball_member_at_the_limit_is_read(tmp_path):
    result = compare(_bomb(tmp_path / "output.tar.gz", MAX_BYTES))
    assert result.returncode == 0 and "| | eager (" in result.stdout, result.stderr[-3000:]


def test_a_summary_file_past_the_limit_in_a_folder_is_refused(tmp_path):
    head = json.dumps({"format": FORMAT, "backend": "eager"}).encode()
    at_limit = job_with(tmp_path / "at", head + b" " * (MAX_BYTES - len(head)))
    assert compare(at_limit).returncode == 0
    over = job_with(tmp_path / "over", head + b" " * (MAX_BYTES + 1 - len(head)))
    refused(compare(over), f"{over}: its job-summary.json is larger than {MAX_BYTES // 2**20} MiB")


def test_a_gzip_that_is_not_a_tarball_is_refused(tmp_path):
    path = tmp_path / "output.tar.gz"
    path.write_bytes(gzip.compress(b'{"format": "opentc-job-summary/1"}'))
    refused(compare(path), f"{path} cannot be read as a tar archive")


@pytest.mark.parametrize("mode", ["bz2", "xz"])
def test_a_tarball_damaged_midway_is_refused(tmp_path, mode):
    """Damage past the first header shows only as the archive is read, as the decompressor's error (xz's
    LZMAError is no OSError), or as tarfile's message of several lines. (A gzip damaged before the summary is
    read as far as the summary: its checksum is at the end, and the summary is intact.)"""
    data = random.Random(0).randbytes(200_000)      # stored as it is: the damage lands in a data block
    path = tmp_path / f"output.tar.{mode}"
    with tarfile.open(path, f"w:{mode}") as tar:
        for name, content in (("metrics.bin", data), ("job-summary.json", json.dumps({"format": FORMAT}).encode())):
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    damaged = bytearray(path.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    path.write_bytes(bytes(damaged))
    refused(compare(path), f"{path} cannot be read as a tar archive")


# --- M: S3 endpoints that fail fail fast ---

def _s3(port: int, **env):
    pytest.importorskip("boto3")
    return {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", **AWS, **env}


URI = "s3://jobs/gpt2-eager/output/output.tar.gz"


@pytest.mark.slow
def test_an_s3_endpoint_that_never_answers_fails_within_seconds():
    server = SilentServer()
    try:
        result = compare(URI, timeout=300, **_s3(server.port))
        assert server.connected.is_set()
    finally:
        server.close()
    refused(result, f"{URI} could not be downloaded: http://127.0.0.1:{server.port} did not answer in time",
            "OPENTC_COMPARE_S3_TIMEOUT")
    assert result.seconds < SECONDS, f"took {result.seconds:.0f} s"


@pytest.mark.slow
def test_an_s3_endpoint_that_drops_connections_times_out_as_the_variable_says():
    """A black hole: a listener whose queue is full and who never accepts, so that Linux drops the SYNs and connect
    never completes. OPENTC_COMPARE_S3_TIMEOUT sets how long each attempt waits."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    sockets = [listener]
    try:
        for _ in range(4):
            sockets.append(socket.socket())
            sockets[-1].setblocking(False)
            sockets[-1].connect_ex(("127.0.0.1", port))
        sockets.append(socket.socket())
        sockets[-1].settimeout(1)
        try:
            sockets[-1].connect(("127.0.0.1", port))
            pytest.skip("this kernel completes connections past a full listen queue: no black hole to test with")
        except TimeoutError:
            pass
        result = compare(URI, timeout=300, **_s3(port, OPENTC_COMPARE_S3_TIMEOUT="1"))
    finally:
        for s in sockets:
            s.close()
    refused(result, f"{URI} could not be downloaded: connecting to http://127.0.0.1:{port} timed out (1 s, 2 attempts")
    assert result.seconds < SECONDS, f"took {result.seconds:.0f} s"


def test_an_s3_endpoint_where_nothing_listens_is_named():
    port = free_port()
    result = compare(URI, timeout=300, **_s3(port))
    refused(result, f"{URI} could not be downloaded: could not connect to http://127.0.0.1:{port}")
    assert result.seconds < SECONDS, f"took {result.seconds:.0f} s"


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e999", "fast", "3601"])
def test_a_bad_s3_timeout_is_refused_naming_the_variable(value):
    result = compare(URI, **_s3(free_port(), OPENTC_COMPARE_S3_TIMEOUT=value))
    refused(result, f"environment variable OPENTC_COMPARE_S3_TIMEOUT='{value}' is not accepted", "seconds above 0")


def test_missing_values_are_said_to_be_unknown_never_printed_as_none(tmp_path):
    """Issue 31 I: a summary with nulls (a job that failed before it knew its backend, workers or exit code) printed
    "None (job)", "failed (exit code None)" and "None (0)"."""
    job = summary_job(tmp_path / "job", job_name="job", backend=None, workers=None, hosts=[],
                      outcome={"succeeded": False, "exit_code": None})
    result = compare(job)
    assert result.returncode == 0, result.stderr
    assert "None" not in result.stdout, result.stdout
    assert "| | unknown backend (job) |" in result.stdout
    assert "| outcome | failed (exit code unknown) |" in result.stdout
    assert "workers (hosts)" not in result.stdout   # nothing known: no row
    partial = summary_job(tmp_path / "partial", job_name="partial", workers=None, hosts=["algo-1"])
    assert "| workers (hosts) | - (1) |" in compare(partial).stdout

"""g++ with a memo, for the test suite's Inductor jobs (conftest points CXX at it; OPENTC_TEST_GXX_MEMO=off does not).

Most of an Inductor job's time on a CPU is g++ building its kernels (26 s of a 32 s sample job here), and the suite's
jobs compile the same tiny models' kernels over and over. Inductor hands g++ one generated .cpp and asks for one .so;
this answers a call it has answered before, in this test run, with the same .so, and runs the real g++ otherwise.
Inductor itself runs as it would (it generates, caches and loads its kernels, and counts its graphs); only a
repeated g++ build is skipped. Anything other than one .cpp to one .so goes straight to g++.

The key is the call with the job's own cache folder taken out: the compiler, its arguments, the .cpp and every
header it includes from that folder (Inductor names the .cpp and its headers after their content, under a cache
folder each job has to itself).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile

MEMO = "GXX_MEMO_DIR"      # the memo's folder (one per test run, shared by its pytest workers)
REAL = "GXX_MEMO_REAL"     # the compiler it stands in front of (default: g++ on PATH)
_INCLUDE = re.compile(rb'#include\s+"([^"]+)"')


def _one_build(argv: list[str]) -> tuple[str, str] | None:
    """(source, output) for a call that builds one .cpp into one .so, else None."""
    sources = [a for a in argv if a.endswith(".cpp")]
    if len(sources) != 1 or argv.count("-o") != 1:
        return None
    at = argv.index("-o")
    output = argv[at + 1] if at + 1 < len(argv) else ""
    return (sources[0], output) if output.endswith(".so") else None


def _key(compiler: str, argv: list[str], source: str, output: str) -> str:
    folder = os.path.dirname(os.path.dirname(os.path.abspath(source)))   # <cache>/<two letters>/<name>.cpp
    digest = hashlib.sha256()
    compiler_path = shutil.which(compiler) or compiler
    stat = os.stat(compiler_path)
    digest.update(f"{compiler_path}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    # The source's and the output's names are hashes of the source as written, job folder included: the source's
    # text stands for both.
    for arg in argv:
        arg = {source: "<source>", output: "<output>"}.get(arg, arg)
        digest.update(arg.replace(folder, "<cache>").encode() + b"\0")
    with open(source, "rb") as f:
        text = f.read()
    digest.update(text.replace(folder.encode(), b"<cache>"))
    for included in _INCLUDE.findall(text):
        path = os.fsdecode(included)
        if path.startswith(folder + os.sep):
            with open(path, "rb") as f:
                digest.update(b"\0" + f.read().replace(folder.encode(), b"<cache>"))
    return digest.hexdigest()


def _copy_atomically(source: str, target: str) -> None:
    handle, temporary = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".gxx-memo-")
    os.close(handle)
    try:
        shutil.copyfile(source, temporary)
        os.chmod(temporary, 0o755)
        os.replace(temporary, target)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def main(argv: list[str]) -> int:
    compiler = os.environ.get(REAL, "g++")
    memo = os.environ.get(MEMO)
    build = _one_build(argv)
    if not memo or build is None:
        os.execvp(compiler, [compiler, *argv])
    source, output = build
    stored = os.path.join(memo, _key(compiler, argv, source, output) + ".so")
    if os.path.exists(stored):
        _copy_atomically(stored, output)
        return 0
    code = subprocess.run([compiler, *argv]).returncode
    if code == 0 and os.path.exists(output):
        os.makedirs(memo, exist_ok=True)
        _copy_atomically(output, stored)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""g++ with a memo, for the test suite's Inductor jobs (conftest points CXX at it; OPENTC_TEST_GXX_MEMO=off does not).

Most of an Inductor job's time on a CPU is g++ building its kernels (26 s of a 32 s sample job here), and the suite's
jobs compile the same tiny models' kernels over and over. Inductor hands g++ one generated .cpp and asks for one .so;
this answers a call it has answered before, in this test run, with the same .so, and runs the real g++ otherwise.
Inductor itself runs as it would (it generates, caches and loads its kernels, and counts its graphs); only a
repeated g++ build is skipped. Anything other than one .cpp to one .so goes straight to g++.

The key is the call with the job's own cache folder taken out: the compiler, its arguments, the .cpp and every
header it includes from that folder (Inductor names the .cpp and its headers after their content, under a cache
folder each job has to itself).

A build it has not seen is g++'s, with the prefix header precompiled: every kernel's .cpp opens with an include of
Inductor's prefix header (ATen's vectorized types: about 1.4 s of g++'s 1.6 s on a small kernel is reading it). The
memo keeps one copy of that header with a .gch built beside it, once per header and set of flags, and g++ builds a
copy of the .cpp whose include names that copy: 1.6 s -> 0.6 s a kernel, the same .so byte for byte (checked by
hand with cmp). A header that cannot be precompiled, or a build that fails with it, falls back to g++ on the call as
given.
"""

from __future__ import annotations

import fcntl
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
_LINKING = ("-shared", "-l", "-L", "-Wl,")       # arguments for the link, which a header's build must not have


def _one_build(argv: list[str]) -> tuple[str, str] | None:
    """(source, output) for a call that builds one .cpp into one .so, else None."""
    sources = [a for a in argv if a.endswith(".cpp")]
    if len(sources) != 1 or argv.count("-o") != 1:
        return None
    at = argv.index("-o")
    output = argv[at + 1] if at + 1 < len(argv) else ""
    return (sources[0], output) if output.endswith(".so") else None


def _cache_folder(source: str) -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(source)))     # <cache>/<two letters>/<name>.cpp


def _compiler_digest(compiler: str):     # -> hashlib._Hash (a name typeshed has, hashlib does not)
    digest = hashlib.sha256()
    compiler_path = shutil.which(compiler) or compiler
    stat = os.stat(compiler_path)
    digest.update(f"{compiler_path}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    return digest


def _key(compiler: str, argv: list[str], source: str, output: str) -> str:
    folder = _cache_folder(source)
    digest = _compiler_digest(compiler)
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


def _prefix_header(source: str) -> str | None:
    """The header the .cpp includes first, before any C token, from its job's cache folder, when that header
    includes nothing more of the folder (Inductor's prefix header); else None."""
    folder = _cache_folder(source)
    with open(source, "rb") as f:
        opening = _INCLUDE.match(f.read().lstrip())
    if opening is None or not os.fsdecode(opening.group(1)).startswith(folder + os.sep):
        return None
    header = os.fsdecode(opening.group(1))
    with open(header, "rb") as f:
        return None if folder.encode() in f.read() else header


def _precompiled(compiler: str, flags: list[str], header: str, memo: str) -> str | None:
    """The memo's copy of `header` with a .gch beside it, built for `flags` the first time any process asks (the
    others wait on a lock rather than build it twice); None when g++ could not precompile it."""
    digest = _compiler_digest(compiler)
    for flag in flags:
        digest.update(flag.encode() + b"\0")
    with open(header, "rb") as f:
        digest.update(f.read())
    place = os.path.join(memo, "pch", digest.hexdigest())
    copy = os.path.join(place, os.path.basename(header))
    built, failed = copy + ".gch", os.path.join(place, "failed")
    os.makedirs(place, exist_ok=True)
    with open(os.path.join(place, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(built) and not os.path.exists(failed):
            shutil.copyfile(header, copy)
            writing = f"{built}.{os.getpid()}"
            done = subprocess.run([compiler, *flags, "-x", "c++-header", copy, "-o", writing],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if done.returncode == 0:
                os.replace(writing, built)
            else:
                open(failed, "w").close()
                if os.path.exists(writing):
                    os.unlink(writing)
    return copy if os.path.exists(built) else None


def _build_with_precompiled_header(compiler: str, argv: list[str], source: str, output: str, memo: str) -> int | None:
    """g++ on a copy of the .cpp that includes the memo's precompiled copy of its prefix header; None when there is
    no such header or the build failed with it (the caller then runs the call as given)."""
    header = _prefix_header(source)
    if header is None:
        return None
    flags = [a for i, a in enumerate(argv)
             if a not in (source, output) and not (a == "-o" and argv[i + 1:i + 2] == [output])
             and not a.startswith(_LINKING)]
    copy = _precompiled(compiler, flags, header, memo)
    if copy is None:
        return None
    with open(source, "rb") as f:
        text = f.read().replace(os.fsencode(header), os.fsencode(copy), 1)
    with tempfile.TemporaryDirectory(dir=memo, prefix=".source-") as place:
        rewritten = os.path.join(place, os.path.basename(source))
        with open(rewritten, "wb") as f:
            f.write(text)
        code = subprocess.run([compiler, *[rewritten if a == source else a for a in argv]]).returncode
    return code if code == 0 else None


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
    os.makedirs(memo, exist_ok=True)
    code = _build_with_precompiled_header(compiler, argv, source, output, memo)
    if code is None:
        code = subprocess.run([compiler, *argv]).returncode
    if code == 0 and os.path.exists(output):
        _copy_atomically(output, stored)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

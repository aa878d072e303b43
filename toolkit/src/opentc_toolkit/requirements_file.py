"""A requirements file read as pip reads it (pip's req_file.py, its "Requirements File Format"), so that what the
toolkit decides from it is what pip will install: the files it includes (`-r other.txt`) and the constraints files
(`-c`), continuation lines (a trailing backslash), comments after a blank or a tab, `${VARIABLE}`s, options after a
requirement (`--hash=...`, as pip-compile writes them), environment markers, and a wheel or source archive named by
its file. Only the reading: what pip will install is pip's own answer (requirements_install.py asks it).

Each file is decoded as pip decodes it (a byte-order mark, else a PEP 263 `coding:` declaration on one of its first two
lines, else UTF-8), but strictly: a byte that is not of that encoding is refused here, naming the file, the byte and
its offset, where pip would fall back to the locale's encoding or end in a traceback. A file pip would fetch
(`-r https://...`) is not read: pip resolves it under the stack's constraints, which refuse a move of the stack.
"""

from __future__ import annotations

import codecs
import optparse
import os
import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename

from opentc_launcher.common import printable

from .job_files import MiB, read_regular
from .not_started import BadInput
from .stack import canonical

MAX_REQUIREMENTS_BYTES = MiB   # a requirements file is a few hundred bytes; past this, not one
MAX_FILES = 100                # files included by one another: a chain longer than this is no one's requirements
WHAT = "pip requirements, one per line"

# pip's own patterns (pip/_internal/req/req_file.py).
_COMMENT = re.compile(r"(^|\s+)#.*$")
_VARIABLE = re.compile(r"(?P<var>\$\{(?P<name>[A-Z0-9_]+)\})")
_SCHEME = re.compile(r"^(http|https|file):", re.I)
_PEP263 = re.compile(rb"coding[:=]\s*([-\w.]+)")
# Order matters: UTF-16 LE's mark is the start of UTF-32 LE's.
_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF32, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32-be"),
         (codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF16, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16-be"),
         (codecs.BOM_UTF16_LE, "utf-16-le"))
_EGG = re.compile(r"[#&]egg=([A-Za-z0-9_.\-]+)")


@dataclass(frozen=True)
class Entry:
    """One requirement (or constraint) of the files, as pip will read it."""

    words: str                 # as written, options left out: "transformers==4.38.2", "./wheels/x-1.0-py3-none-any.whl"
    where: str                 # "requirements.txt line 3", "base.txt line 2 (from requirements.txt line 1)"
    name: str | None           # the project, canonical; None for a path or URL that only pip can name
    specifier: str             # what versions it accepts ("==4.38.2", "<5", "" for any)
    direct: bool               # a URL or file whose version is not known from its name: whatever it holds
    constraint: bool           # from a constraints file (-c): limits a version, installs nothing

    def accepts(self, version: str) -> bool:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet

        if self.direct:
            return False
        try:
            return SpecifierSet(self.specifier).contains(version, prereleases=True)
        except InvalidSpecifier:
            return False


@dataclass(frozen=True)
class Reading:
    entries: tuple[Entry, ...]
    hashes: bool               # hash-checking mode: a requirement with --hash, or --require-hashes
    remote: tuple[str, ...]    # files pip fetches itself (-r https://...), not read here
    index_options: tuple[str, ...] = ()   # where the files send pip (--index-url, --find-links...), as pip's argv

    def as_arguments(self) -> tuple[str, ...]:
        """The requirements as pip's command line (no hashes, no constraints): where pip looks, and what it installs."""
        words: list[str] = list(self.index_options)
        for entry in self.entries:
            if not entry.constraint:
                words += entry.words.split(" ", 1) if entry.words.startswith("-e ") else [entry.words]
        return tuple(words)

    def named(self) -> set[str]:
        """The projects the files ask for (constraints only limit them)."""
        return {e.name for e in self.entries if e.name and not e.constraint}

    def pinning(self, names: set[str]) -> list[Entry]:
        """The requirements and constraints that ask for a version of one of `names` (a specifier, a file or a URL),
        in the files' order: what a user changes to move it."""
        return [e for e in self.entries if e.name in names and (e.specifier or e.direct)]


def decoded(data: bytes, where: str) -> str:
    """The text of a requirements file as pip decodes it, strictly: BadInput naming the byte that is not of the
    encoding, and its offset."""
    encoding, start = "utf-8", 0
    bom = next(((mark, name) for mark, name in _BOMS if data.startswith(mark)), None)
    if bom is not None:
        encoding, start = bom[1], len(bom[0])
    else:
        for line in data.split(b"\n")[:2]:
            declared = _PEP263.search(line) if line[:1] == b"#" else None
            if declared is not None:
                encoding = declared[1].decode("ascii")
                break
    try:
        return data[start:].decode(encoding)
    except LookupError:
        raise BadInput(f"{where} declares the encoding {encoding!r}, which Python does not know: declare one it "
                       f"does (utf-8, latin-1), or none, and save it as UTF-8.") from None
    except UnicodeDecodeError as e:
        offset = start + e.start
        number = data.count(b"\n", 0, offset) + 1
        how = ("UTF-8 (pip reads it as UTF-8: it has no byte-order mark and declares no other encoding on its first "
               "two lines)" if encoding == "utf-8" and bom is None else f"{encoding}, which it "
               f"{'starts with the byte-order mark of' if bom else 'declares'}")
        raise BadInput(f"{where} is not {how}: byte 0x{data[offset]:02x} at offset {offset} (line {number}) cannot be "
                       f"decoded. Save it as UTF-8: it must hold {WHAT}.") from None


def _logical_lines(text: str, env: Mapping[str, str]) -> Iterator[tuple[int, str]]:
    """pip's preprocessing: continuation lines joined, comments and blank lines dropped, ${VARIABLE}s replaced."""
    joined: list[str] = []
    first = 0
    lines: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.endswith("\\") or _COMMENT.match(line):
            if _COMMENT.match(line):
                line = " " + line
            if joined:
                lines.append((first, "".join([*joined, line])))
                joined = []
            else:
                lines.append((number, line))
        else:
            if not joined:
                first = number
            joined.append(line.strip("\\"))
    if joined:
        lines.append((first, "".join(joined)))
    for number, line in lines:
        line = _COMMENT.sub("", line).strip()
        if not line:
            continue
        for variable, name in _VARIABLE.findall(line):
            if env.get(name):
                line = line.replace(variable, env[name])
        yield number, line


def _split(line: str) -> tuple[str, str]:
    """pip's break_args_options: the requirement, then its options from the first word that starts with '-'."""
    tokens = line.split(" ")
    for i, token in enumerate(tokens):
        if token.startswith("-"):
            return " ".join(tokens[:i]), " ".join(tokens[i:])
    return line, ""


class _Refused(Exception):
    pass


class _Parser(optparse.OptionParser):
    def error(self, msg: str) -> None:   # type: ignore[override]   # pip's own reading names a bad option
        raise _Refused(msg)


def _parser() -> optparse.OptionParser:
    """pip's options of a requirements file (pip/_internal/req/req_file.py, SUPPORTED_OPTIONS and
    SUPPORTED_OPTIONS_REQ), with their long names, so that optparse reads an abbreviation as pip does."""
    parser = _Parser(add_help_option=False)
    for short, long, dest in (("-i", "--index-url", "index_url"), ("", "--extra-index-url", "extra"),
                              ("-c", "--constraint", "constraints"), ("-r", "--requirement", "requirements"),
                              ("-e", "--editable", "editables"), ("-f", "--find-links", "find_links"),
                              ("", "--no-binary", "no_binary"), ("", "--only-binary", "only_binary"),
                              ("", "--all-releases", "all_releases"), ("", "--only-final", "only_final"),
                              ("", "--trusted-host", "trusted_hosts"), ("", "--use-feature", "features"),
                              ("", "--hash", "hashes"), ("-C", "--config-settings", "config_settings")):
        parser.add_option(*[flag for flag in (short, long) if flag], dest=dest, action="append", default=[])
    parser.add_option("--pypi-url", dest="index_url", action="append")
    for long in ("--no-index", "--prefer-binary", "--require-hashes", "--no-require-hashes", "--pre"):
        parser.add_option(long, dest=long[2:].replace("-", "_"), action="store_true", default=False)
    return parser


def _options(text: str) -> optparse.Values | None:
    """The options of a line, None where pip itself would refuse them (pip names the problem then)."""
    try:
        values, _ = _parser().parse_args(shlex.split(text))
    except (ValueError, _Refused):
        return None
    return values


def _index_options(options: optparse.Values, folder: str) -> list[str]:
    """An option line's options on where pip looks, as its command line takes them: a --find-links path relative to
    the file's folder where one is there, as pip reads it."""
    found: list[str] = []
    for url in options.index_url or []:
        found += ["--index-url", url]
    for url in options.extra:
        found += ["--extra-index-url", url]
    for link in options.find_links:
        beside = os.path.join(folder, link)
        found += ["--find-links", beside if os.path.exists(beside) else link]
    for host in options.trusted_hosts:
        found += ["--trusted-host", host]
    for flag in ("no_index", "pre", "prefer_binary"):
        if getattr(options, flag):
            found.append(f"--{flag.replace('_', '-')}")
    for dest, flag in (("only_binary", "--only-binary"), ("no_binary", "--no-binary"),
                       ("all_releases", "--all-releases"), ("only_final", "--only-final")):
        for value in getattr(options, dest):
            found += [flag, value]
    return found


def _named(words: str) -> tuple[str | None, str, bool] | None:
    """(project, specifier, direct) of a requirement's words: a name with a specifier, a URL or file whose name (and
    version) its file name or #egg= says, or (None, "", True) for a path or URL only pip can name; None for one whose
    environment marker does not hold here (pip skips it)."""
    try:
        requirement = Requirement(words)
    except InvalidRequirement:
        requirement = None
    if requirement is not None:
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            return None
        if not requirement.url:
            return canonical(requirement.name), str(requirement.specifier), False
        known = _from_file_name(requirement.url)
        if known is not None and canonical(known[0]) == canonical(requirement.name):
            return canonical(requirement.name), f"=={known[1]}", False
        return canonical(requirement.name), "", True
    location = words.split(";", 1)[0].strip()
    known = _from_file_name(location)
    if known is not None:
        return canonical(known[0]), f"=={known[1]}", False
    egg = _EGG.search(location)
    return (canonical(egg[1]), "", True) if egg else (None, "", True)


def _from_file_name(location: str) -> tuple[str, str] | None:
    """(project, version) a wheel's or source archive's file name says."""
    name = os.path.basename(unquote(urlparse(location).path) if "://" in location else location)
    try:
        if name.endswith(".whl"):
            project, version, _, _ = parse_wheel_filename(name)
            return project, str(version)
        if name.endswith((".tar.gz", ".zip")):
            project, sdist_version = parse_sdist_filename(name)
            return project, str(sdist_version)
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None
    return None


def read_requirements(path: str, name: str, env: Mapping[str, str]) -> Reading:
    """The requirements of the file at `path` (`name`: how the job calls it) and of every local file it includes, as
    pip reads them with the environment `env`. BadInput for a file that is not a readable regular file of at most
    MAX_REQUIREMENTS_BYTES, is not of its encoding, or includes itself."""
    entries: list[Entry] = []
    remote: list[str] = []
    index_options: list[str] = []
    hashes = False
    read: set[str] = set()

    def parse(file: str, where: str, constraint: bool, chain: tuple[str, ...]) -> None:
        nonlocal hashes
        try:
            data = read_regular(file, where, MAX_REQUIREMENTS_BYTES, WHAT)
        except FileNotFoundError:
            target = f"a symbolic link to {printable(os.readlink(file))!r}, which does not exist" \
                if os.path.islink(file) else "missing"
            raise BadInput(f"{where} is {target}: it must be a regular file holding {WHAT}.") from None
        read.add(file)
        if len(read) > MAX_FILES:
            raise BadInput(f"{where}: more than {MAX_FILES} requirements files include one another; pip reads at "
                           f"most a few.")
        label = where.split(" (", 1)[0].removesuffix(" in the code folder")
        for number, line in _logical_lines(decoded(data, where), env):
            at = f"{label} line {number}" + (f" (from {chain[-1]})" if chain else "")
            words, options_text = _split(line)
            words = words.strip()
            options = _options(options_text)
            if words:
                if options is not None and options.hashes:
                    hashes = True
                named = _named(words)
                if named is not None:
                    entries.append(Entry(words, at, *named, constraint))
                continue
            if options is None:
                continue
            index_options.extend(_index_options(options, os.path.dirname(file)))
            if options.require_hashes:
                hashes = True
            if options.editables:   # whatever the checkout or folder holds
                named = _named(options.editables[0])
                if named is not None:
                    entries.append(Entry(f"-e {options.editables[0]}", at, named[0], "", True, constraint))
                continue
            nested, nested_constraint = (options.requirements[0], False) if options.requirements else \
                (options.constraints[0], True) if options.constraints else (None, False)
            if nested is None:
                continue
            if nested.lower().startswith("file:"):
                nested = unquote(urlparse(nested).path)
            elif _SCHEME.match(nested):
                remote.append(nested)
                continue
            included = os.path.abspath(os.path.join(os.path.dirname(file), nested))
            if included in (file, *chain_files):
                raise BadInput(f"{at} includes {nested!r}, which includes itself (pip would refuse it): a "
                               f"requirements file may include others, never itself.")
            chain_files.append(included)
            # As pip: what an included file holds is a constraint when the line that includes it is -c, whatever
            # the including file is.
            parse(included, f"{nested} ({'-c' if nested_constraint else '-r'} at {at})", nested_constraint,
                  (*chain, at))
            chain_files.pop()

    chain_files: list[str] = []
    top = os.path.abspath(path)
    chain_files.append(top)
    parse(top, f"{name} in the code folder", False, ())
    return Reading(tuple(entries), hashes, tuple(remote), tuple(index_options))

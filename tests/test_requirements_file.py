"""requirements.txt read as pip reads it (toolkit requirements_file.py), value by value: the files it includes, its
constraints, continuation lines, comments after a tab, options after a requirement, wheels named by their file; the
encoding decided as pip decides it, and refused strictly; and a pin of the stack refused however it is written
(requirements_install.check_requirements). The reading is compared with pip's own on the same files."""

import codecs

import pytest

from opentc_toolkit.not_started import BadInput
from opentc_toolkit.requirements_file import read_requirements
from opentc_toolkit.requirements_install import check_requirements

PINS = {"torch": "2.7.0", "torch-xla": "2.7.0", "nvidia-nccl-cu12": "2.26.2"}

# Each case: the files (the first is requirements.txt) and what pip installs from them, (name, specifier, constraint).
CASES = {
    "plain": ({"requirements.txt": "transformers==4.38.2\ndatasets\n"},
              [("transformers", "==4.38.2", False), ("datasets", "", False)]),
    "a tab and a comment": ({"requirements.txt": "transformers==4.38.2\t# the notebook's\n"},
                            [("transformers", "==4.38.2", False)]),
    "an included file": ({"requirements.txt": "-r more.txt\n", "more.txt": "transformers==4.38.2\n"},
                         [("transformers", "==4.38.2", False)]),
    "included, long option": ({"requirements.txt": "--requirement=more.txt\n", "more.txt": "accelerate<1\n"},
                              [("accelerate", "<1", False)]),
    "a constraints file": ({"requirements.txt": "datasets\n-c pins.txt\n", "pins.txt": "transformers==4.38.2\n"},
                           [("datasets", "", False), ("transformers", "==4.38.2", True)]),
    "pip-compile's hashes": ({"requirements.txt": "transformers==4.38.2 \\\n    --hash=sha256:c4029cb9\n"
                                                  "    # via -r requirements.in\n"},
                             [("transformers", "==4.38.2", False)]),
    "a continuation": ({"requirements.txt": "transformers\\\n==4.38.2\n"}, [("transformers", "==4.38.2", False)]),
    "a marker that does not hold": ({"requirements.txt": 'transformers==4.0; python_version < "3"\nsix\n'},
                                    [("six", "", False)]),
    "a variable": ({"requirements.txt": "${OPENTC_TEST_PIN}\n"}, [("transformers", "==4.38.2", False)]),
    "a wheel by its file": ({"requirements.txt": "./wheels/torch-2.0.0-cp311-cp311-linux_x86_64.whl\n"},
                            [("torch", "==2.0.0", False)]),
    "a URL with its name": ({"requirements.txt": "torch @ https://example.invalid/torch-1.0.0-py3-none-any.whl\n"},
                            [("torch", "==1.0.0", False)]),
    "an editable checkout": ({"requirements.txt": "-e git+https://example.invalid/x.git#egg=Torch_XLA\n"},
                             [("torch-xla", "", False)]),
    "a comment that is not a continuation": ({"requirements.txt": "# a note \\\nsix\n"}, [("six", "", False)]),
    "index options": ({"requirements.txt": "--index-url https://example.invalid/simple\n--no-index\n-f ./w\nsix\n"},
                      [("six", "", False)]),
}


def write(folder, files):
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder / "requirements.txt"


def as_pip_reads(path):
    """pip's own reading (pip._internal, the venv's pinned pip): (name, specifier, constraint) of each requirement,
    the specifier empty where pip takes a file or URL for whatever version it holds."""
    from packaging.utils import canonicalize_name
    from pip._internal.network.session import PipSession
    from pip._internal.req.constructors import install_req_from_parsed_requirement
    from pip._internal.req.req_file import parse_requirements

    found = []
    for parsed in parse_requirements(str(path), PipSession()):
        req = install_req_from_parsed_requirement(parsed)
        if req.markers is not None and not req.markers.evaluate({"extra": ""}):
            continue
        specifier = str(req.specifier) if req.req is not None and req.req.url is None else ""
        found.append((canonicalize_name(req.name) if req.name else None, specifier, parsed.constraint))
    return found


@pytest.mark.parametrize("case", CASES)
def test_requirements_are_read_as_pip_reads_them(tmp_path, monkeypatch, case):
    files, expected = CASES[case]
    path = write(tmp_path, files)
    reading = read_requirements(str(path), "requirements.txt", {"OPENTC_TEST_PIN": "transformers==4.38.2"})
    assert [(e.name, e.specifier, e.constraint) for e in reading.entries] == expected
    monkeypatch.setenv("OPENTC_TEST_PIN", "transformers==4.38.2")   # pip reads its own process's environment
    pip = as_pip_reads(path)
    assert [(name, constraint) for name, _, constraint in pip] == [(name, c) for name, _, c in expected]
    assert all(theirs == ours for (_, theirs, _), (_, ours, _) in zip(pip, expected, strict=True) if theirs)


def test_hash_checking_mode_is_known_from_a_hash_or_the_option(tmp_path):
    hashed = write(tmp_path, {"requirements.txt": "six==1.17.0 --hash=sha256:00\n"})
    assert read_requirements(str(hashed), "requirements.txt", {}).hashes
    (tmp_path / "requirements.txt").write_text("--require-hashes\nsix==1.17.0\n")
    assert read_requirements(str(hashed), "requirements.txt", {}).hashes
    (tmp_path / "requirements.txt").write_text("six==1.17.0\n")
    assert not read_requirements(str(hashed), "requirements.txt", {}).hashes


def test_where_each_requirement_is_is_named(tmp_path):
    path = write(tmp_path, {"requirements.txt": "# ours\n-r more.txt\n", "more.txt": "\nsix\n"})
    (entry,) = read_requirements(str(path), "requirements.txt", {}).entries
    assert entry.where == "more.txt line 2 (from requirements.txt line 2)"


def refusal(path, pins=PINS) -> str:
    with pytest.raises(BadInput) as refused:
        check_requirements(str(path), "requirements.txt", pins, {})
    return str(refused.value)


@pytest.mark.parametrize(("files", "named"), [
    ({"requirements.txt": "-r more.txt\n", "more.txt": "torch==1.0\n"},
     "'torch==1.0' (more.txt line 1 (from requirements.txt line 1); this image pins torch==2.7.0)"),
    ({"requirements.txt": "six\n-c pins.txt\n", "pins.txt": "torch<2\n"},
     "'torch<2' (pins.txt line 1 (from requirements.txt line 2); this image pins torch==2.7.0)"),
    ({"requirements.txt": "torch==1.0\t# old\n"}, "'torch==1.0' (requirements.txt line 1;"),
    ({"requirements.txt": "torch==1.0 \\\n  --hash=sha256:00\n"}, "'torch==1.0' (requirements.txt line 1;"),
    ({"requirements.txt": "torch\\\n==1.0\n"}, "'torch==1.0' (requirements.txt line 1;"),
    ({"requirements.txt": "./torch-2.0.0-cp311-cp311-linux_x86_64.whl\n"}, "'./torch-2.0.0-cp311-cp311-linux_x86_64"),
    ({"requirements.txt": "Torch_XLA @ https://example.invalid/t.whl\n"}, "'Torch_XLA @ https://example.invalid/t.whl'"),
    ({"requirements.txt": "nvidia-nccl-cu12>2.26.2\n"}, "this image pins nvidia-nccl-cu12==2.26.2"),
], ids=["included", "constraint", "tab comment", "hash", "continuation", "wheel file", "url", "cuda library"])
def test_a_pin_of_the_stack_is_refused_however_it_is_written(tmp_path, files, named):
    message = refusal(write(tmp_path, files))
    assert message.startswith("requirements.txt asks for "), message
    assert named in message, message


@pytest.mark.parametrize("text", ["torch\n", "torch==2.7.0\n", "torch>=2,<3\n",
                                  "./torch-2.7.0-cp311-cp311-linux_x86_64.whl\n", "# torch==1.0\n",
                                  'torch==1.0; python_version < "3"\n'])
def test_what_the_pinned_stack_satisfies_is_accepted(tmp_path, text):
    path = write(tmp_path, {"requirements.txt": text})
    check_requirements(str(path), "requirements.txt", PINS, {})


@pytest.mark.parametrize(("data", "expected"), [
    (b"six\ntransformers==4.38.2  # caf\xe9\n",
     "requirements.txt in the code folder is not UTF-8 (pip reads it as UTF-8: it has no byte-order mark and declares "
     "no other encoding on its first two lines): byte 0xe9 at offset 31 (line 2) cannot be decoded. Save it as UTF-8"),
    (codecs.BOM_UTF8 + b"six\n\xff\n",
     "is not utf-8, which it starts with the byte-order mark of: byte 0xff at offset 7 (line 2)"),
    (b"# -*- coding: ascii -*-\nsix # caf\xc3\xa9\n", "is not ascii, which it declares: byte 0xc3 at offset 33"),
    (b"# coding: no-such-codec\nsix\n", "declares the encoding 'no-such-codec', which Python does not know"),
], ids=["utf-8", "bom", "declared", "unknown"])
def test_a_file_that_is_not_of_its_encoding_is_refused_naming_the_byte(tmp_path, data, expected):
    path = tmp_path / "requirements.txt"
    path.write_bytes(data)
    assert expected in refusal(path)


def test_an_encoding_pip_would_honour_is_honoured(tmp_path):
    path = tmp_path / "requirements.txt"
    path.write_bytes(b"# -*- coding: latin-1 -*-\nsix  # caf\xe9\n")
    assert [e.name for e in read_requirements(str(path), "requirements.txt", {}).entries] == ["six"]
    path.write_bytes(codecs.BOM_UTF16_LE + "six\n".encode("utf-16-le"))
    assert [e.name for e in read_requirements(str(path), "requirements.txt", {}).entries] == ["six"]


def test_an_included_file_is_held_to_the_same_rules(tmp_path):
    path = write(tmp_path, {"requirements.txt": "six\n-r more.txt\n"})
    (tmp_path / "more.txt").write_bytes(b"caf\xe9\n")
    assert refusal(path).startswith("more.txt (-r at requirements.txt line 2) is not UTF-8")
    (tmp_path / "more.txt").unlink()
    assert refusal(path) == ("more.txt (-r at requirements.txt line 2) is missing: it must be a regular file holding "
                             "pip requirements, one per line.")
    (tmp_path / "more.txt").write_text("-r requirements.txt\n")
    assert "more.txt line 1 (from requirements.txt line 2) includes 'requirements.txt', which includes itself" in \
        refusal(path)


def test_the_requirements_without_their_hashes_are_pips_command_line(tmp_path):
    """What hash-checking mode's resolution of the family runs on: where the files send pip (a --find-links folder
    beside the file that names it, as pip reads it), and each requirement, constraints left to their own file."""
    (tmp_path / "wheels").mkdir()
    path = write(tmp_path, {"requirements.txt": "--index-url https://example.invalid/simple\n-f ./wheels\n--no-index\n"
                                                "-r more.txt\n-c pins.txt\n",
                            "more.txt": "six==1.17.0 --hash=sha256:00\n-e ./local\n", "pins.txt": "numpy<3\n"})
    reading = read_requirements(str(path), "requirements.txt", {})
    assert reading.hashes
    assert reading.as_arguments() == ("--index-url", "https://example.invalid/simple", "--find-links",
                                      f"{tmp_path}/./wheels", "--no-index", "six==1.17.0", "-e", "./local")

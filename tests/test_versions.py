"""What the documentation says against what the code and the pins say (constraints.txt and the stack files): the
version tables (docs/versions.md), the exit codes (docs/failures-and-exit-codes.md)."""

import re

from conftest import REPO
from opentc_launcher import exit_codes
from opentc_launcher.xla.cuda import PJRT_C_API

VERSIONS = (REPO / "docs" / "versions.md").read_text()
FAILURES = (REPO / "docs" / "failures-and-exit-codes.md").read_text()


def pins(flavour: str = "xla") -> dict[str, str]:
    lines = [*(REPO / "constraints.txt").read_text().splitlines(),
             *(REPO / "stacks" / f"{flavour}.txt").read_text().splitlines()]
    return dict(line.split("==") for line in lines if "==" in line and not line.startswith("#"))


def table(heading: str, text: str = VERSIONS) -> dict[str, str]:
    """The first two columns of the markdown table under `heading` in `text`."""
    lines = text.split(heading, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return {cells[0]: cells[1] for cells in (
        [c.strip().strip("`") for c in row.strip("|").split("|")] for row in rows[2:])}


def test_the_version_table_is_the_xla_stack():
    versions, pinned = table("# Versions"), pins()
    for package in ("torch", "torch-xla", "jax-cuda12-pjrt", "nvidia-cuda-nvcc-cu12"):
        assert versions[package] == pinned[package], package
    assert pinned["nvidia-cuda-nvcc-cu12"].startswith(versions["CUDA"] + ".")
    # the plugin pinned is the one that speaks the PJRT C API of the torch-xla pinned
    release = ".".join(pinned["torch-xla"].split(".")[:2])
    api, plugin = PJRT_C_API[release]
    assert pinned["jax-cuda12-pjrt"] == plugin
    assert f"PJRT C API {api[0]}.{api[1]}" in VERSIONS


def test_the_inductor_version_table_is_the_inductor_stack():
    versions = table("The inductor image (`stacks/inductor.txt`):")
    flavour = (REPO / "stacks" / "inductor.txt").read_text()
    assert versions["torch"] == pins("inductor")["torch"]
    assert f"# cuda: {versions['CUDA']}" in flavour
    assert not {"torch-xla", "jax-cuda12-pjrt", "nvidia-cuda-nvcc-cu12"} & set(pins("inductor"))


def test_the_exit_code_table_is_exit_codes_py():
    documented = table("## Exit codes", FAILURES)
    assert documented.pop("128 + N").startswith("killed by, or stopped on, signal N")
    named = {str(code): text for code, text in exit_codes.TABLE.items() if code != exit_codes.SIGNAL_BASE}
    assert {code: re.sub(r"`", "", text) for code, text in documented.items()} == named

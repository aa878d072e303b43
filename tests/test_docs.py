"""The documentation in step with the code: the README is a front door under 250 lines, every link in it and in
docs/ resolves (to a file, and to a heading where it names one), and the hyperparameters and OPENTC_* variables the
docs list are exactly those the code reads. The version and exit-code tables are checked in test_versions.py."""

import re
from pathlib import Path

import pytest

from conftest import REPO
from opentc_toolkit.distributions import INSTANCE_TYPE, REFUSED, SEVERAL_WORKERS
from opentc_toolkit.job_settings import COMPILER_KEYS

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "benchmarks" / "RESULTS.md"]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
SOURCES = [REPO / "launcher" / "src", REPO / "toolkit" / "src", REPO / "compare" / "src"]
VARIABLES_PAGE = REPO / "docs" / "hyperparameters-and-variables.md"


def anchors(page: Path) -> set[str]:
    """The heading anchors GitHub makes for a page: lower case, punctuation dropped, blanks as hyphens."""
    found, in_code = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def test_the_readme_is_a_front_door():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) < 250, len(lines)
    for section in ("## Two commands", "## Which image, which compiler", "## On SageMaker", "## Documentation"):
        assert section in lines, section


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_resolves(page):
    broken = []
    for target in LINK.findall(page.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no {resolved.relative_to(REPO) if resolved.is_relative_to(REPO) else resolved}")
        elif anchor and (resolved.suffix != ".md" or anchor not in anchors(resolved)):
            broken.append(f"{target}: no heading #{anchor} in {resolved.name}")
    assert not broken, broken


def test_every_docs_page_is_linked_from_the_readme():
    readme = (REPO / "README.md").read_text()
    assert sorted(p.name for p in (REPO / "docs").glob("*.md") if f"(docs/{p.name})" not in readme) == []


def table_names(page: Path, prefix: str) -> set[str]:
    """Names in the first column of the page's tables that start with `prefix` (a cell may list several)."""
    names = set()
    for line in page.read_text().splitlines():
        if line.startswith("| `"):
            names |= {name for name in re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", line.split("|")[1])
                      if name.startswith(prefix)}
    return names


def test_the_hyperparameters_documented_are_the_ones_the_toolkit_reads():
    documented = table_names(VARIABLES_PAGE, "sagemaker_") - {"sagemaker_program", "sagemaker_submit_directory"}
    assert documented == {*COMPILER_KEYS, *SEVERAL_WORKERS, INSTANCE_TYPE, *REFUSED}


def test_the_opentc_variables_documented_are_the_ones_the_code_reads():
    in_code = {name for folder in SOURCES for path in folder.rglob("*.py")
               for name in re.findall(r"\bOPENTC_[A-Z0-9_]+\b", path.read_text())}
    assert table_names(VARIABLES_PAGE, "OPENTC_") == in_code


def test_the_worker_settings_rows_are_made_from_their_declaration():
    """Each worker setting's row is its declaration's (opentc_launcher.options); after a change there, rewrite them with
    `.venv/bin/python -m opentc_toolkit.settings_table docs/hyperparameters-and-variables.md`."""
    from opentc_toolkit.settings_table import with_worker_setting_rows, worker_setting_rows

    page = VARIABLES_PAGE.read_text()
    assert len(worker_setting_rows()) >= 4
    assert with_worker_setting_rows(page) == page, "the rows differ from the declaration: rewrite them (docstring)"
    changed = page.replace("`0` (no limit)", "`0`", 1)
    assert with_worker_setting_rows(changed) == page   # the rows a hand edit changed are put back

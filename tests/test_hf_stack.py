"""A requirements.txt that moves the Hugging Face stack (toolkit hf_stack.py and requirements_install.py), value by
value: what an install changes, read from pip's dry run, what is resolved again with it, the table's bounds, pip
check's verdict against the one before the install, what the Trainer needs beyond it, and pip's account of a build
from source that failed. The real installs run in test_source.py (offline) and test_aws_examples.py (PyPI)."""

import json

import pytest

from opentc_toolkit import hf_stack
from opentc_toolkit.requirements_install import _pip_reason, changes, described, this_install_broke

IMAGE = {"transformers": "5.20.2", "accelerate": "1.15.0", "datasets": "5.2.0", "huggingface-hub": "2.4.0",
         "tokenizers": "0.23.3", "evaluate": "0.4.6", "safetensors": "0.8.0"}


def test_what_an_install_changes_is_read_from_pips_report_the_family_first():
    report = json.dumps({"install": [
        {"metadata": {"name": "numpy", "version": "1.26.4"}},
        {"metadata": {"name": "Transformers", "version": "4.57.6"}},
        {"metadata": {"name": "multiprocess", "version": "0.70.16"}},
        {"metadata": {"name": "huggingface_hub", "version": "0.36.2"}}]})
    installed = {**IMAGE, "numpy": "2.2.6"}
    found = changes(hf_stack.reported(report), installed.get)
    assert [str(c) for c in found] == ["huggingface-hub 2.4.0 -> 0.36.2", "transformers 5.20.2 -> 4.57.6",
                                       "multiprocess 0.70.16 (new)", "numpy 2.2.6 -> 1.26.4"]
    assert described(found) == ("huggingface-hub 2.4.0 -> 0.36.2, transformers 5.20.2 -> 4.57.6, multiprocess "
                                "0.70.16 (new), numpy 2.2.6 -> 1.26.4")
    assert hf_stack.reported("not json") == {} and hf_stack.reported('{"install": [{}]}') == {}


def test_the_rest_of_the_family_is_resolved_again_with_the_users_pins():
    assert hf_stack.companions({"transformers", "datasets", "six"}, IMAGE) == [
        "accelerate", "huggingface-hub", "tokenizers", "evaluate", "safetensors"]


def test_pip_check_holds_against_an_install_only_what_it_broke():
    before = {"opentc-broken 1.0 requires opentc-absent, which is not installed."}
    after = ["datasets 5.2.0 has requirement huggingface-hub>=1.31, but you have huggingface-hub 0.36.2.",
             "opentc-broken 1.0 requires opentc-absent, which is not installed."]
    assert this_install_broke(after, before) == (after[1:], after[:1])
    assert this_install_broke(after[1:], before) == (after[1:], [])


def fake_distribution(folder, name, version, requires=()):
    info = folder / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                   + "".join(f"Requires-Dist: {r}\n" for r in requires))


def test_an_extra_the_trainer_needs_is_judged_where_pip_check_is_silent(tmp_path, monkeypatch):
    """transformers 5 declares accelerate>=1.1 only for its `torch` extra, which pip check never reads; its Trainer
    refuses an older one when its arguments are made. Packages stand in for the installed ones, first on sys.path."""
    monkeypatch.syspath_prepend(str(tmp_path))
    fake_distribution(tmp_path, "transformers", "5.20.2", [
        "huggingface-hub>=1.31", 'accelerate>=1.1.0; extra == "torch"', 'torch>=2.6; extra == "torch"',
        'opentc-never-installed; extra == "torch"', 'pytest>=99; extra == "testing"'])
    fake_distribution(tmp_path, "accelerate", "0.30.1")
    assert hf_stack.unmet_extras() == ["transformers 5.20.2 needs accelerate>=1.1.0 for its Trainer "
                                       "(transformers[torch]), but accelerate 0.30.1 is installed"]
    (tmp_path / "accelerate-0.30.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: accelerate\nVersion: 1.1.0\n")
    assert hf_stack.unmet_extras() == []


def test_the_family_is_imported_after_an_install_that_moves_what_it_needs(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    fake_distribution(tmp_path, "opentc-fake-family", "1.0", [
        "opentc-fake-needed>=1", 'opentc-fake-extra; extra == "x"', 'opentc-fake-never; python_version < "3"'])
    fake_distribution(tmp_path, "opentc-fake-needed", "1.0", ["opentc-fake-deeper"])
    assert hf_stack.dependencies(["opentc_fake_family"]) == {"opentc-fake-family", "opentc-fake-needed",
                                                            "opentc-fake-deeper"}
    assert hf_stack.imports({"transformers": "5.20.2", "datasets": "5.2.0"}) == [
        "transformers", "transformers:Trainer", "datasets"]


@pytest.mark.parametrize(("version", "bounds"), [("4.34.1", ["accelerate<0.32"]), ("4.34.0", ["accelerate<0.32"]),
                                                 ("4.33.3", []), ("4.35.0", []), ("5.20.2", []), (None, []),
                                                 ("not-a-version", [])])
def test_the_tables_bounds_are_those_of_the_line_pip_chose(version, bounds):
    assert [c for rule in hf_stack.rules_for(version) for c in rule.constraints] == bounds
    assert all(rule.why for rule in hf_stack.rules_for(version))


def test_the_version_pip_would_install_is_read_from_its_dry_runs_report():
    report = json.dumps({"install": [{"metadata": {"name": "huggingface_hub", "version": "0.36.2"}},
                                     {"metadata": {"name": "Transformers", "version": "4.38.0"}}]})
    assert hf_stack.chosen(report, "transformers", IMAGE) == "4.38.0"
    assert hf_stack.chosen(report, "huggingface-hub", IMAGE) == "0.36.2"
    assert hf_stack.chosen(report, "datasets", IMAGE) == "5.2.0"          # not installed anew: the image's
    assert hf_stack.chosen("not json", "transformers", IMAGE) == "5.20.2"


def test_pip_checks_verdict_lines_are_the_broken_requirements():
    output = ("trl 1.9.0 has requirement transformers>=4.56.2, but you have transformers 4.38.0.\n"
              "datasets 5.2.0 has requirement huggingface-hub>=1.31, but you have huggingface-hub 0.36.2.\n")
    assert hf_stack.check_failures(output) == output.strip().splitlines()
    assert hf_stack.check_failures("No broken requirements found.\n") == []


def test_a_build_from_source_that_failed_is_named_first_with_what_to_pin():
    stderr = ("  error: `cargo metadata --manifest-path Cargo.toml --format-version 1` failed with code 101\n"
              "  ERROR: Failed building wheel for tokenizers\n"
              "error: failed-wheel-build-for-install\n"
              "\u00d7 Failed to build installable wheels for some pyproject.toml based projects\n"
              "\u2570\u2500> tokenizers\n")
    reason = _pip_reason(stderr)
    assert reason.startswith("tokenizers had to be built from source, since no release the requirements allow has "
                             "a wheel for this image's Python 3."), reason
    assert "pin transformers 4.23 or later" in reason and "ERROR: Failed building wheel for tokenizers" in reason
    other = _pip_reason("ERROR: Failed building wheel for fancy-ext\n")
    assert other.startswith("fancy-ext had to be built from source") and "transformers" not in other
    assert _pip_reason("ERROR: No matching distribution found for nothing-here\n") == (
        "ERROR: No matching distribution found for nothing-here")


def test_what_an_install_replaced_is_put_back_from_its_kept_files(tmp_path, monkeypatch):
    """package_backup: the files of a package an install replaces are kept in the job's scratch folder; after pip has
    removed what the install brought (and whatever it left half done), they are put back, byte for byte, with the
    package's metadata, and a package the install added is known as added. The real undo runs in
    test_requirements_install.py, over an overlay whose own packages pip never removes: this one removes them."""
    from opentc_toolkit import package_backup

    site = tmp_path / "site"
    monkeypatch.syspath_prepend(str(site))
    module, info = site / "opentc_kept", site / "opentc_kept-1.0.dist-info"
    module.mkdir(parents=True)
    info.mkdir()
    (module / "__init__.py").write_text("VERSION = 1\n")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: opentc-kept\nVersion: 1.0\n")
    (info / "RECORD").write_text("opentc_kept/__init__.py,,\nopentc_kept-1.0.dist-info/METADATA,,\n"
                                 "opentc_kept-1.0.dist-info/RECORD,,\n")
    backup = package_backup.keep(["opentc_kept", "opentc-added"], str(tmp_path / "kept"))
    assert backup.versions == {"opentc-kept": "1.0", "opentc-added": None} and backup.missing == ()
    # the install: version 2 over version 1 (pip unlinks a file before it writes it), and a new package
    (module / "__init__.py").unlink()
    (module / "__init__.py").write_text("VERSION = 2\n")
    for path in info.iterdir():
        path.unlink()
    info.rmdir()
    fake_distribution(site, "opentc-kept", "2.0")
    fake_distribution(site, "opentc-added", "0.1")
    assert sorted(backup.changed()) == ["opentc-added", "opentc-kept"]
    # pip uninstall: what the install brought goes
    for path in (site / "opentc_kept-2.0.dist-info", site / "opentc_added-0.1.dist-info"):
        for item in path.iterdir():
            item.unlink()
        path.rmdir()
    (module / "__init__.py").unlink()
    backup.put_back()
    assert (module / "__init__.py").read_text() == "VERSION = 1\n"
    assert package_backup.installed_version("opentc-kept") == "1.0" and backup.changed() == []

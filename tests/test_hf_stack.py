"""A requirements.txt that moves the Hugging Face stack (toolkit hf_stack.py and source.py), value by value: which
requirements move it, what is resolved again with them, the table's bounds, a pip dry run's report, pip check's
verdict, and pip's account of a build from source that failed. The real installs run in test_aws_examples.py."""

import json

import pytest

from opentc_toolkit import hf_stack
from opentc_toolkit.source import _pip_reason

IMAGE = {"transformers": "5.20.2", "accelerate": "1.15.0", "datasets": "5.2.0", "huggingface-hub": "2.4.0",
         "tokenizers": "0.23.3", "evaluate": "0.4.6", "safetensors": "0.8.0"}


@pytest.mark.parametrize(("lines", "moves"), [
    (["transformers==4.38.0", "datasets"], ["transformers==4.38.0"]),          # the GPT-2 notebook's
    (["transformers == 4.25.1", "datasets"], ["transformers==4.25.1"]),        # the single-GPU notebooks'
    (["transformers<5"], ["transformers<5"]),
    (["transformers>=5", "datasets>=5"], []),                                  # the image's own satisfy them
    (["accelerate==0.34.2  # an old one"], ["accelerate==0.34.2"]),
    (["Transformers==4.38.0"], ["Transformers==4.38.0"]),                      # names as pip reads them
    (["transformers @ https://example.invalid/t.whl"], ["transformers @ https://example.invalid/t.whl"]),
    (["scikit-learn==1.0", "-r other.txt", "./wheels/x.whl", "# transformers==4.0"], []),   # not the family's
])
def test_a_requirement_moves_the_stack_when_the_installed_version_does_not_satisfy_it(lines, moves):
    assert hf_stack.moved(lines, IMAGE) == moves


def test_the_rest_of_the_family_is_resolved_again_with_the_users_pins():
    assert hf_stack.companions(["transformers==4.38.0", "datasets"], IMAGE) == [
        "accelerate", "huggingface-hub", "tokenizers", "evaluate", "safetensors"]


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

"""The one writer of the project's files (opentc_launcher.files): atomic, never through a planted link, nothing half
done left behind, and strict JSON. Real files in a temporary folder."""

import json
import os

import pytest

from opentc_launcher.files import strict_json, write_atomically, write_json


def strict_load(text):
    def refuse(constant):
        raise AssertionError(f"not strict JSON: {constant}")
    return json.loads(text, parse_constant=refuse)


def test_a_link_planted_at_a_predictable_temporary_name_is_not_followed(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("someone else's file")
    folder = tmp_path / "output" / "data"
    folder.mkdir(parents=True)
    target = folder / "job-summary.json"
    for name in (f"{target.name}.tmp{os.getpid()}", f".{target.name}.tmp", f"{target.name}.tmp"):
        (folder / name).symlink_to(outside)
    write_atomically(str(target), "the summary")
    assert target.read_text() == "the summary"
    assert outside.read_text() == "someone else's file"
    assert not target.is_symlink()


def test_a_failed_rename_leaves_no_temporary_file_behind(tmp_path):
    folder = tmp_path / "data"
    (folder / "job-summary.json").mkdir(parents=True)        # the target is a folder: the rename fails
    with pytest.raises(IsADirectoryError):
        write_atomically(str(folder / "job-summary.json"), "the whole summary")
    assert sorted(p.name for p in folder.iterdir()) == ["job-summary.json"]


def test_a_written_file_is_readable_by_others_as_open_would_make_it(tmp_path):
    path = tmp_path / "report.json"
    write_atomically(str(path), "{}")
    assert path.stat().st_mode & 0o777 == 0o644


def test_numbers_that_are_not_numbers_become_null(tmp_path):
    value = {"rate": float("inf"), "loss": [1.5, float("nan"), float("-inf")], "nested": ({"x": float("nan")},),
             "fine": 2, "text": "nan"}
    text = strict_json(value, indent=2)
    assert strict_load(text) == {"rate": None, "loss": [1.5, None, None], "nested": [{"x": None}], "fine": 2,
                                 "text": "nan"}
    write_json(str(tmp_path / "x.json"), value)
    assert strict_load((tmp_path / "x.json").read_text())["rate"] is None

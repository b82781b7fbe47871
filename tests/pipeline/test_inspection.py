"""Reading a lake for ``status`` and ``dead-letters`` (``pipeline/inspection.py``); through the CLI in
``tests/cli/test_status.py``."""

from __future__ import annotations

import pytest

from cdclake.pipeline import inspection
from cdclake.pipeline.inspection import _reason_class


def test_dead_letters_group_by_reason_without_the_file_and_line_a_reader_names():
    assert _reason_class("/data/in/0001.jsonl:5: not a captured record: Expecting value") == "not a captured record"
    assert _reason_class("invalid JSON: unexpected character: line 1 column 2") == "invalid JSON"
    # A URL is no file and line, and a colon without a space (a port, a time of day) ends no reason.
    assert _reason_class("http://registry:8081: schema 7 not found") == "http://registry:8081"
    assert _reason_class("value '2021-10-31 02:30:00' does not fit: datetime(0)") == (
        "value '2021-10-31 02:30:00' does not fit")
    assert _reason_class(None) == "unknown"


def test_a_lake_is_a_directory_a_run_made_one_and_each_refusal_says_why(tmp_path):
    with pytest.raises(ValueError, match=f"^{tmp_path / 'nolake'}: no such lake directory$"):
        inspection.check_lake(str(tmp_path / "nolake"))
    with pytest.raises(ValueError, match=r"not a cdclake lake \(no _cdclake directory: no run has written to it\)"):
        inspection.check_lake(str(tmp_path))
    (tmp_path / "_cdclake").mkdir()
    inspection.check_lake(str(tmp_path))
    with pytest.raises(ValueError, match=r"has no pipeline 'shop' \(its pipelines: none yet\)"):
        inspection.check_pipeline(str(tmp_path), "shop")
    assert inspection.dead_letters(str(tmp_path)).num_rows == 0

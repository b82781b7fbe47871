"""cdclake status groups dead letters by what went wrong."""

from __future__ import annotations

from cdclake.status import _reason_class


def test_dead_letters_group_by_reason_without_the_file_and_line_a_reader_names():
    assert _reason_class("/data/in/0001.jsonl:5: not a captured record: Expecting value") == "not a captured record"
    assert _reason_class("invalid JSON: unexpected character: line 1 column 2") == "invalid JSON"
    # A URL is no file and line, and a colon without a space (a port, a time of day) ends no reason.
    assert _reason_class("http://registry:8081: schema 7 not found") == "http://registry:8081"
    assert _reason_class("value '2021-10-31 02:30:00' does not fit: datetime(0)") == (
        "value '2021-10-31 02:30:00' does not fit")
    assert _reason_class(None) == "unknown"

"""The C reader of captured-records lines (cdclake.native._records) against the Python path it stands in for: the same
batch, or None and the Python path reads the lines, whatever the lines hold."""

from __future__ import annotations

import base64

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdclake.model.records import Record, captured_line, parse_captured_lines
from cdclake.native import _records
from cdclake.sources import files

# msgspec writes these characters as escapes, which the C reader leaves to the Python path.
_PLAIN = st.characters(exclude_categories=("Cs", "Cc"), exclude_characters='"\\')
_TEXT = st.characters(exclude_categories=("Cs",))


def _records_of(text: st.SearchStrategy[str]) -> st.SearchStrategy[Record]:
    data = st.none() | st.binary(max_size=40)
    return st.builds(
        Record, topic=st.text(text, max_size=12), partition=st.integers(-(2**31), 2**31 - 1),
        offset=st.integers(-(2**63), 2**63 - 1) | st.integers(0, 1000),
        timestamp=st.none() | st.integers(-(2**63) // 1000 + 1, (2**63 - 1) // 1000), key=data, value=data,
        headers=st.lists(st.tuples(st.text(text, max_size=6), data), max_size=3))


def _python(lines: list[bytes]) -> object:
    """The Python path's batch for the lines, None where it reads them one by one, or the error it raises."""
    stripped = [line.rstrip(b"\r\n") for line in lines if line.strip()]
    parsed = parse_captured_lines(stripped)
    return None if parsed is None else files.records_to_arrow(parsed)


def _same_or_left_to_python(lines: list[bytes]) -> pa.RecordBatch | None:
    batch = files.captured_to_arrow(lines)
    if batch is not None:
        batch.validate(full=True)
        expected = _python(lines)
        assert expected is not None and batch.equals(expected)
    return batch


def test_the_reader_is_the_compiled_one():
    assert files._records is _records


@settings(max_examples=300, deadline=None)
@given(st.lists(_records_of(_PLAIN), min_size=1, max_size=8), st.lists(st.sampled_from([b"\n", b"\r\n", b" \t\n"])))
def test_records_msgspec_writes_without_escapes_are_read_by_c_exactly(records, ends):
    lines = [captured_line(r) + (ends[i] if i < len(ends) else b"") for i, r in enumerate(records)]
    lines.insert(len(lines) // 2, b" \r\n")  # a blank line: no record, as in the Python path
    assert _same_or_left_to_python(lines) is not None


@settings(max_examples=200, deadline=None)
@given(st.lists(_records_of(_TEXT), min_size=1, max_size=8))
def test_any_records_are_read_by_c_exactly_or_left_to_python(records):
    _same_or_left_to_python([captured_line(r) for r in records])


_GOOD = b'{"topic":"t","partition":1,"offset":2,"timestamp":3,"key":null,"value":"QUJD","headers":[["h",null]]}'


@pytest.mark.parametrize("line", [
    _GOOD,
    b' \t{ "value" : "QR==" , "offset":-0,"partition":-2147483648,"topic":"t\x7f\xc3\xa9"}\r',
    b'{"topic":"","partition":2147483647,"offset":9223372036854775807,"value":"","timestamp":null,"headers":[]}',
    b'{"topic":"t","partition":0,"offset":-9223372036854775808,"value":"QUI=","timestamp":-9223372036854775}',
])
def test_forms_msgspec_reads_are_read_by_c(line):
    assert _same_or_left_to_python([line]) is not None


@pytest.mark.parametrize("line", [
    _GOOD.replace(b'"QUJD"', b'"QUJ\\u0044"'),  # an escape
    _GOOD.replace(b'"t"', b'"\\u0074"'),
    _GOOD.replace(b'"key"', b'"other"'),  # an unknown member
    _GOOD.replace(b'"key":null', b'"value":"QQ=="'),  # a duplicate (msgspec keeps the last)
    _GOOD.replace(b'"partition":1', b'"partition":2147483648'),  # out of the column's range
    _GOOD.replace(b'"timestamp":3', b'"timestamp":9223372036854776'),  # out of range once in microseconds
    _GOOD.replace(b'"offset":2', b'"offset":9223372036854775808'),
    _GOOD.replace(b'"offset":2', b'"offset":2.0'),
    _GOOD.replace(b'"offset":2', b'"offset":02'),
    _GOOD.replace(b'"QUJD"', b'"QQ"'),
    _GOOD.replace(b'"QUJD"', b'"Q==="'),
    _GOOD.replace(b'"QUJD"', b'"QQ=A"'),
    _GOOD.replace(b'"QUJD"', b'"Q-_A"'),
    _GOOD.replace(b'"t"', b'"t\xff"'),
    _GOOD.replace(b'"h"', b'"\xed\xa0\x80"'),  # a surrogate
    _GOOD.replace(b'"t"', b'"t\x01"'),
    _GOOD.replace(b'[["h",null]]', b'[["h"]]'),
    _GOOD.replace(b'[["h",null]]', b'null'),
    _GOOD.replace(b'"key":null,', b""),  # all optional members may go...
    _GOOD.replace(b'"topic":"t",', b""),  # ...the required ones may not
    _GOOD + b" x",
    _GOOD + _GOOD,
    b"\xef\xbb\xbf" + _GOOD,
    b"\x0c" + _GOOD,
    _GOOD[:-1] + b",}",
])
def test_c_reads_exactly_or_leaves_to_python(line):
    _same_or_left_to_python([line])


def _corrupt(line: bytes, how: str, data: st.DataObject) -> bytes:
    if how == "truncate":
        return line[:data.draw(st.integers(0, len(line) - 1))]
    if how == "flip":
        at = data.draw(st.integers(0, len(line) - 1))
        return line[:at] + bytes([data.draw(st.integers(0, 255))]) + line[at + 1:]
    if how == "type":
        member = data.draw(st.sampled_from([b'"partition":', b'"offset":', b'"topic":', b'"headers":']))
        return line.replace(member, member + data.draw(st.sampled_from([b'"1",', b"true,", b"1.5,", b"[],"])) + b'"x":')
    if how == "base64":
        return line.replace(b'"value":"', b'"value":"' + data.draw(st.sampled_from([b"=", b"A", b"AA==", b"*"])), 1)
    return line.replace(b"{", b"{" + data.draw(st.sampled_from([b'"offset":1,', b'"value":null,', b'"x":1,'])), 1)


@settings(max_examples=400, deadline=None)
@given(st.lists(_records_of(_PLAIN), min_size=1, max_size=5), st.data(),
       st.sampled_from(["truncate", "flip", "type", "base64", "member"]))
def test_corrupted_lines_are_read_by_c_exactly_or_left_to_python(records, data, how):
    lines = [captured_line(r) for r in records]
    at = data.draw(st.integers(0, len(lines) - 1))
    lines[at] = _corrupt(lines[at], how, data)
    _same_or_left_to_python(lines)


# Beside the alphabet in ASCII, outside it, padding, the URL-safe alphabet's two, bytes that are not UTF-8.
_NEAR_ALPHABET = b"+/09AZaz=-_.:@[`{\x00\x7f\x80\xff*, "


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.data())
def test_long_values_are_read_exactly_and_a_character_outside_the_alphabet_anywhere_is_caught(value, data):
    line = captured_line(Record(topic="t", offset=1, value=value))
    assert _same_or_left_to_python([line]) is not None
    encoded = base64.b64encode(value)
    if encoded:
        at = data.draw(st.integers(0, len(encoded) - 1))
        replaced = encoded[:at] + bytes([data.draw(st.sampled_from(_NEAR_ALPHABET))]) + encoded[at + 1:]
        _same_or_left_to_python([line.replace(b'"' + encoded + b'"', b'"' + replaced + b'"')])


def _batches(path: str, total: int, complete_only: bool) -> list:
    try:
        return list(files.read_segment(path, 0, total, complete_only))
    except ValueError as exc:
        return [type(exc)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_records_of(_PLAIN), min_size=1, max_size=9), st.data(),
       st.sampled_from(["truncate", "flip", "type", "base64", "member"]), st.booleans())
def test_read_segment_gives_the_batches_of_the_python_path(tmp_path, records, data, how, complete_only):
    lines = [captured_line(r) for r in records]
    if data.draw(st.booleans()):
        at = data.draw(st.integers(0, len(lines) - 1))
        lines[at] = _corrupt(lines[at], how, data)
    lines.insert(data.draw(st.integers(0, len(lines))), b"")
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\n".join(lines) + data.draw(st.sampled_from([b"", b"\n"])))
    total = files.LineCounter(complete_only).count(str(path))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(files, "BATCH_ROWS", 3)
        fast = _batches(str(path), total, complete_only)
        patch.setattr(files, "_records", None)
        assert fast == _batches(str(path), total, complete_only)  # unreadable lines included, with their reason


def test_a_line_whose_topic_is_not_utf8_becomes_an_unreadable_record(tmp_path):
    good = captured_line(Record(topic="t", offset=1, value=b"v"))
    bad = captured_line(Record(topic="\u00e9", offset=2, value=b"v")).replace("\u00e9".encode(), b"\xe9")
    path = tmp_path / "t.jsonl"
    path.write_bytes(good + b"\n" + bad + b"\n")
    batches = list(files.read_segment(str(path), 0, 2))
    rows = pa.Table.from_batches(batches).to_pylist()
    assert [r["offset"] for r in rows] == [1, 1]  # the unreadable line keeps its place, at its line index
    assert rows[1]["headers"][0]["key"] == files.UNREADABLE_HEADER
    assert b"not a captured record" in rows[1]["headers"][0]["value"]

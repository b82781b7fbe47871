from __future__ import annotations

import io
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdclake.formats.avro.names import lookup, register, sanitize
from cdclake.formats.avro.reader import block_count, compile_reader, read_bytes, read_long, read_varint, zigzag

LONGS = st.integers(-(2**63), 2**63 - 1)

SCHEMA: dict[str, Any] = {"type": "record", "name": "R", "namespace": "n", "fields": [
    {"name": "i", "type": "int"}, {"name": "l", "type": ["null", "long"]}, {"name": "s", "type": "string"},
    {"name": "b", "type": "bytes"}, {"name": "f", "type": "float"}, {"name": "d", "type": "double"},
    {"name": "t", "type": "boolean"}, {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
    {"name": "x", "type": {"type": "fixed", "name": "F", "size": 3}},
    {"name": "r", "type": ["null", {"type": "record", "name": "Inner", "fields": [{"name": "v", "type": "E"}]}]},
]}  # fmt: skip


def _datums() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({
        "i": st.integers(-(2**31), 2**31 - 1), "l": st.none() | LONGS, "s": st.text(max_size=300),
        "b": st.binary(max_size=300), "f": st.just(1.5), "d": st.floats(allow_nan=False), "t": st.booleans(),
        "e": st.sampled_from(["A", "B"]), "x": st.binary(min_size=3, max_size=3),
        "r": st.none() | st.fixed_dictionaries({"v": st.sampled_from(["A", "B"])}),
    })  # fmt: skip


def _written(schema: Any, datum: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema, named_schemas={}), datum)
    return out.getvalue()


@given(LONGS)
def test_a_long_reads_back_from_its_encoding(number):
    data = zigzag(number) + b"\x7f"
    assert read_long(data, 0) == (number, len(data) - 1)
    raw, end = read_varint(data, 0)
    assert ((raw >> 1) ^ -(raw & 1), end) == (number, len(data) - 1)


def test_a_varint_longer_than_ten_bytes_is_refused():
    with pytest.raises(ValueError, match="longer than 10 bytes"):
        read_long(b"\xff" * 11, 0)
    with pytest.raises(ValueError, match="longer than 10 bytes"):
        read_varint(b"\xff" * 11, 0)


def test_bytes_and_blocks():
    assert read_bytes(zigzag(3) + b"abcd", 0) == (b"abc", 4)
    with pytest.raises(IndexError):
        read_bytes(zigzag(5) + b"abc", 0)
    with pytest.raises(ValueError, match="negative length"):
        read_bytes(zigzag(-1), 0)
    assert block_count(zigzag(-2) + zigzag(9), 0) == (2, 2)  # a negative count is followed by the byte size


@settings(max_examples=200, deadline=None)
@given(_datums())
def test_the_generated_reader_reads_what_fastavro_reads(datum):
    reader = compile_reader(SCHEMA)
    assert reader is not None
    data = bytes(5) + _written(SCHEMA, datum)
    expected = fastavro.schemaless_reader(io.BytesIO(data[5:]), fastavro.parse_schema(SCHEMA, named_schemas={}), None)
    assert reader(data) == expected
    for cut in (1, len(data) - 6):  # truncated anywhere: an exception, never a value
        with pytest.raises(Exception):  # noqa: B017 — any exception sends the record to fastavro
            reader(data[: len(data) - cut])
    with pytest.raises(ValueError, match="length"):
        reader(data + b"\x00")


def test_a_schema_of_another_shape_has_no_generated_reader():
    assert compile_reader({"type": "array", "items": "long"}) is None
    assert compile_reader({"type": "record", "name": "R", "fields": [{"name": "a", "type": "Unknown"}]}) is None


def test_names_resolve_in_the_enclosing_namespace_first():
    names: dict[str, Any] = {}
    inner = {"type": "enum", "name": "E", "symbols": ["A"]}
    assert register({"type": "record", "name": "R", "namespace": "a.b"}, names, "") == "a.b"
    assert register(inner, names, "a.b") == "a.b"
    assert lookup(names, "E", "a.b") is inner and lookup(names, "a.b.E", "") is inner
    assert lookup(names, "E", "c") is None


def test_sanitize_follows_ticdc():
    assert [sanitize(n) for n in ("id", "9a", "中文", "a-b", "_x")] == ["id", "_9a", "__", "a_b", "_x"]

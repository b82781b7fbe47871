"""The short fuzz run, and the bugs the fuzzer found, each as its smallest record."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pyarrow as pa
import pytest

from cdclake import formats
from cdclake.formats.base import Format
from cdclake.model.records import Record
from tests.fuzz.harness import check, mutate, unintended

ROOT = Path(__file__).resolve().parents[2]


def test_short_fuzz_run_of_every_format():
    """A few hundred mutants per format in a subprocess (a crash of a C path would kill it, not pytest), its
    address space capped at 1 GiB, so that a decoder allocating a declared 2 GiB length fails the run."""
    run = subprocess.run([sys.executable, "-m", "tests.fuzz.run", "--count", "600", "--seed", "1",
                          "--memory-mb", "1024"], check=False, cwd=ROOT, capture_output=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    reports = [msgspec.json.decode(line) for line in run.stdout.splitlines()]
    assert {r["format"] for r in reports} == set(formats.names()), run.stderr.decode()[-3000:]
    assert all(r["records"] == 600 for r in reports)
    assert [r for r in reports if r["findings"]] == [] and run.returncode == 0


def test_the_harness_flags_what_base_reason_calls_unexpected():
    fmt = formats.create("canal-json")
    assert unintended(KeyError("data"), fmt) is not None
    assert unintended(TypeError("unhashable type: 'dict'"), fmt) is not None
    assert unintended(ValueError("Exceeds the limit (4300 digits)"), fmt) is not None
    assert unintended(formats.DecodeError("not a Canal-JSON message"), fmt) is None
    assert unintended(RecursionError("maximum recursion depth exceeded"), fmt) is None  # see base.reason
    wrapped = formats.DecodeError("column 'c': bad value")
    wrapped.__cause__ = MemoryError()
    assert unintended(wrapped, fmt) is not None


def test_mutants_differ_from_their_seed():
    import random

    r = random.Random(0)
    seed = Record(key=b"k", value=b'{"a": [1, 2], "b": "x"}')
    assert sum(mutate(seed, r) != seed for _ in range(100)) > 90


# ------------------------------------------------------------------------------------------ findings

CANAL = (b'{"data":[{"id":"1","c":VALUE}],"database":"d","table":"t","pkNames":["id"],"isDdl":false,'
         b'"type":"INSERT","es":1,"ts":2,"mysqlType":{"id":"int","c":"TYPE"},"sqlType":{"id":4,"c":12},"old":null,'
         b'"id":0,"sql":""EXTRA}')


def canal(value: bytes = b'"v"', type_: bytes = b"varchar(10)", extra: bytes = b"", name: bytes = b"c") -> bytes:
    return (CANAL.replace(b"VALUE", value).replace(b"TYPE", type_).replace(b"EXTRA", extra)
            .replace(b'"c":', b'"' + name + b'":'))


def compiled_and_python(fmt: Format, value: bytes) -> tuple[int, list[str], int]:
    """Events the C path took for the record, the Python path's failures, and its events."""
    compiled = fmt.decode_arrow(pa.array([value], pa.binary()), pa.array([0], pa.int64()))
    decoded = fmt.decode([Record(value=value)])
    return (0 if compiled is None else len(compiled.records), [f.reason for f in decoded.failures],
            len(decoded.events))


def test_canal_type_length_of_thousands_of_digits_does_not_fail_the_compiled_batch():
    fmt = formats.create("canal-json")
    taken, failures, events = compiled_and_python(fmt, canal(type_=b"varchar(" + b"9" * 5000 + b")"))
    assert check(fmt, Record(value=canal(type_=b"varchar(" + b"9" * 5000 + b")"))) is None
    assert (taken, failures, events) == (1, [], 1)


@pytest.mark.parametrize("bad", [rb"a\x", rb"\uZZZZ", rb"\ud800", rb"\udc00", rb"\ud800\u0041"])
def test_canal_compiled_path_leaves_a_message_msgspec_refuses(bad):
    fmt = formats.create("canal-json")
    taken, failures, events = compiled_and_python(fmt, canal(extra=b',"extra":"' + bad + b'"'))
    assert (taken, events, len(failures)) == (0, 0, 1) and "invalid JSON" in failures[0]


def test_canal_compiled_path_leaves_integers_longer_than_any_column():
    fmt = formats.create("canal-json")
    taken, failures, events = compiled_and_python(fmt, canal(value=b'"' + b"9" * 5000 + b'"', type_=b"int"))
    assert taken == 0 and events == 0 and "does not fit type int" in failures[0]
    assert compiled_and_python(fmt, canal(value=b'"-12345678901234567890"', type_=b"bigint"))[0] == 1


@pytest.mark.parametrize("name", [b'a\\"b', b"a\\tb", b"a\\\\b"])
def test_column_names_a_struct_cannot_hold_are_read(name):
    fmt = formats.create("canal-json")
    _, failures, events = compiled_and_python(fmt, canal(name=name))
    assert failures == [] and events == 1
    text = msgspec.json.decode(b'"' + name + b'"')
    schema = {"type": "struct", "fields": [
        {"type": "struct", "optional": True, "field": "after",
         "fields": [{"type": "int32", "optional": False, "field": text}]},
        {"type": "string", "optional": False, "field": "op"}]}
    message = msgspec.json.encode({"schema": schema, "payload": {"after": {text: 7}, "op": "c",
                                                                 "source": {"db": "d", "table": "t"}}})
    decoded = formats.create("debezium-json").decode([Record(value=message)])
    assert not decoded.failures and decoded.events[0].after == {text: 7}


def test_canal_table_name_with_a_nul_is_read():
    fmt = formats.create("canal-json")
    value = canal().replace(b'"table":"t"', b'"table":"t\\u0000x"')
    assert compiled_and_python(fmt, value) == (1, [], 1)
    assert fmt.decode([Record(value=value)]).events[0].table == "t\0x"


def debezium(fields: list, after: dict | None = None) -> Record:
    schema = {"type": "struct", "fields": [{"type": "struct", "optional": True, "field": "after", "fields": fields},
                                           {"type": "string", "optional": False, "field": "op"}]}
    return Record(value=msgspec.json.encode({"schema": schema, "payload": {
        "after": after or {}, "op": "c", "source": {"db": "d", "table": "t"}}}))


@pytest.mark.parametrize(("record", "expected"), [
    (debezium([{"type": {"x": 1}, "field": "a"}]), "unknown Connect type"),
    (debezium([{"type": "int32", "field": "a"}, {"type": "int32", "field": "a"}]), "names a field twice"),
    (debezium([{"type": "bytes", "field": "a", "name": "org.apache.kafka.connect.data.Decimal",
                "parameters": {"scale": "9" * 5000}}]), "Decimal scale"),
    (debezium([{"type": "bytes", "field": "a", "name": "org.apache.kafka.connect.data.Decimal",
                "parameters": {"scale": "x"}}]), "Decimal scale"),
    (debezium([{"type": "int64", "field": "a", "name": "io.debezium.time.MicroTimestamp", "parameters": {
        "__debezium.source.column.type": "TIMESTAMP", "__debezium.source.column.length": "9" * 5000}}], {"a": 0}),
     None),
    (Record(key=b'{"a": 1e99999999999999999999}', value=debezium([{"type": "int32", "field": "a"}], {"a": 1}).value),
     "key is not JSON"),
    (Record(value=b'{"payload": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"), "nests deeper"),
])
def test_debezium_json_findings_fail_with_their_reason(record, expected):
    fmt = formats.create("debezium-json")
    assert check(fmt, record) is None
    failures = fmt.decode([record]).failures
    assert [expected in f.reason for f in failures] == ([] if expected is None else [True])


def test_shareplex_scn_of_thousands_of_digits():
    fmt = formats.create("shareplex-json")
    value = (b'{"meta":{"time":"2024-05-01T00:00:00","op":"ins","scn":"' + b"1" * 5000 +
             b'","trans":"1.1.1","seq":1,"table":"S.T","rowid":"A"},"data":{"ID":"1"}}')
    assert check(fmt, Record(value=value)) is None
    assert len(fmt.decode([Record(value=value)]).events) == 1  # ordered by meta.time, as any SCN that is no number


@pytest.mark.parametrize("meta", [b'"idx":"' + b"1" * 5000 + b'/2"', b'"seq":"' + b"1" * 5000 + b'"',
                                  '"seq":"\u00b2"'.encode()])
def test_shareplex_meta_numbers_that_are_no_numbers_fail_with_their_reason(meta):
    fmt = formats.create("shareplex-json")
    value = (b'{"meta":{"time":"2024-05-01T00:00:00","op":"ins","trans":"1.1.1","table":"S.T","rowid":"A",'
             + meta + b'},"data":{"ID":"1"}}')
    assert check(fmt, Record(value=value)) is None
    assert len(fmt.decode([Record(value=value)]).failures) == 1


def test_type_text_with_unicode_digits_is_no_length():
    from cdclake.model.types import parse_type

    assert parse_type("varchar(\u00b2)").length is None and parse_type("decimal(10,\u00b2)").scale is None


"""debezium-json: spec examples and worked values, every corpus file, round trips, bad input."""

from __future__ import annotations

import base64
import json
import math
import pickle
import re
import struct
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdclake import formats
from cdclake.formats.debezium.json import DebeziumJson
from cdclake.model.events import ChangeEvent, Column, pad_position
from cdclake.model.records import Record
from tests.helpers.strategies import columns_of, rows

SOURCE_FIELDS = [
    {"type": "string", "optional": False, "field": "version"},
    {"type": "string", "optional": False, "field": "connector"},
    {"type": "string", "optional": False, "field": "name"},
    {"type": "int64", "optional": False, "field": "ts_ms"},
    {"type": "string", "optional": True, "name": "io.debezium.data.Enum", "version": 1,
     "parameters": {"allowed": "true,last,false,incremental"}, "default": "false", "field": "snapshot"},
    {"type": "string", "optional": False, "field": "db"},
    {"type": "string", "optional": True, "field": "sequence"},
    {"type": "string", "optional": True, "field": "table"},
    {"type": "int64", "optional": False, "field": "server_id"},
    {"type": "string", "optional": True, "field": "gtid"},
    {"type": "string", "optional": False, "field": "file"},
    {"type": "int64", "optional": False, "field": "pos"},
    {"type": "int32", "optional": False, "field": "row"},
    {"type": "int64", "optional": True, "field": "thread"},
    {"type": "string", "optional": True, "field": "query"},
]


def mysql_source(**overrides: Any) -> dict[str, Any]:
    source = {"version": "2.5.0.Final", "connector": "mysql", "name": "dbserver1", "ts_ms": 1700000000000,
              "snapshot": "false", "db": "inventory", "sequence": None, "table": "orders", "server_id": 223344,
              "gtid": None, "file": "mysql-bin.000003", "pos": 805, "row": 0, "thread": 7, "query": None}
    source.update(overrides)
    return source


def envelope_schema(row_fields: list[dict[str, Any]], table: str = "orders") -> dict[str, Any]:
    row = {"type": "struct", "optional": True, "name": f"dbserver1.inventory.{table}.Value", "fields": row_fields}
    return {"type": "struct", "name": f"dbserver1.inventory.{table}.Envelope", "version": 1, "optional": False,
            "fields": [{**row, "field": "before"}, {**row, "field": "after"},
                       {"type": "struct", "optional": False, "name": "io.debezium.connector.mysql.Source",
                        "fields": SOURCE_FIELDS, "field": "source"},
                       {"type": "string", "optional": False, "field": "op"},
                       {"type": "int64", "optional": True, "field": "ts_ms"}]}


def message(row_fields: list[dict[str, Any]] | None, *, op: str = "c", before: Any = None, after: Any = None,
            source: dict[str, Any] | None = None) -> bytes:
    payload = {"before": before, "after": after, "source": source or mysql_source(), "op": op,
               "ts_ms": 1700000000123, "transaction": None}
    if row_fields is None:
        return json.dumps(payload).encode()
    return json.dumps({"schema": envelope_schema(row_fields), "payload": payload}).encode()


def decode_one(value: bytes | None, key: bytes | None = None, fmt: DebeziumJson | None = None,
               headers: list[tuple[str, bytes | None]] | None = None) -> ChangeEvent:
    result = (fmt or DebeziumJson()).decode([Record(value=value, key=key, headers=headers or [])])
    assert not result.failures, result.failures[0].describe()
    assert len(result.events) == 1
    return result.events[0]


def failure_of(value: bytes | None, key: bytes | None = None) -> str:
    result = DebeziumJson().decode([Record(value=value, key=key, topic="t", offset=7)])
    assert not result.events and len(result.failures) == 1
    failure = result.failures[0]
    assert failure.format == "debezium-json" and "t[0]@7" in failure.describe()
    return failure.reason


def field(name: str, kind: str, semantic: str | None = None, optional: bool = True,
          **params: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": kind, "optional": optional, "field": name}
    if semantic:
        spec["name"], spec["version"] = semantic, 1
    if params:
        spec["parameters"] = {k.replace("__", "."): v for k, v in params.items()}
    return spec


def source_typed(name: str, kind: str, declared: str, semantic: str | None = None, length: str | None = None,
                 scale: str | None = None, original_name: str | None = None, **params: str) -> dict[str, Any]:
    spec = field(name, kind, semantic, **params)
    spec.setdefault("parameters", {})["__debezium.source.column.type"] = declared
    if original_name is not None:
        spec["parameters"]["__debezium.source.column.name"] = original_name
    if length is not None:
        spec["parameters"]["__debezium.source.column.length"] = length
    if scale is not None:
        spec["parameters"]["__debezium.source.column.scale"] = scale
    return spec


# ------------------------------------------------------------------------------------ spec examples

def test_spec_10_1_create_with_schema() -> None:
    fields = [field("id", "int32", optional=False),
              field("price", "bytes", "org.apache.kafka.connect.data.Decimal", scale="2",
                    connect__decimal__precision="10")]
    event = decode_one(message(fields, after={"id": 1, "price": "BNI="}))
    assert (event.kind, event.op, event.database, event.table) == ("row", "c", "inventory", "orders")
    assert event.before is None and event.after == {"id": 1, "price": "12.34"}
    assert event.columns == [Column("id", "int", False, False), Column("price", "decimal(10,2)", False, True)]
    assert event.commit_ts == event.ts_ms == 1700000000000
    assert event.position == pad_position("mysql-bin.000003", 805, 0)
    assert event.source is not None and event.source.format == "debezium-json"


def test_spec_10_2_update_without_schema() -> None:
    value = b"""{"before": {"id": 1004, "first_name": "Anne", "last_name": "Kretchmar", "email": "annek@noanswer.org"},
     "after":  {"id": 1004, "first_name": "Anne Marie", "last_name": "Kretchmar", "email": "annek@noanswer.org"},
     "source": {"version": "2.7.0.Final", "connector": "mysql", "name": "mysql-server-1", "ts_ms": 1465581029000,
                "snapshot": "false", "db": "inventory", "sequence": null, "ts_us": 1465581029000000,
                "ts_ns": 1465581029000000000, "table": "customers", "server_id": 223344, "gtid": null,
                "file": "mysql-bin.000003", "pos": 484, "row": 0, "thread": 7, "query": null},
     "op": "u", "ts_ms": 1465581029523, "ts_us": 1465581029523468, "ts_ns": 1465581029523468471,
     "transaction": null}"""
    event = decode_one(value, key=b'{"id": 1004}')
    assert (event.op, event.database, event.table) == ("u", "inventory", "customers")
    assert event.before == {"id": 1004, "first_name": "Anne", "last_name": "Kretchmar",
                            "email": "annek@noanswer.org"}
    assert event.after is not None and event.after["first_name"] == "Anne Marie"
    assert event.key == {"id": 1004}
    assert [(c.name, c.type, c.key) for c in event.columns or []] == [
        ("id", "unknown", True), ("first_name", "unknown", False), ("last_name", "unknown", False),
        ("email", "unknown", False)]
    assert event.commit_ts == 1465581029000
    assert event.position == pad_position("mysql-bin.000003", 484, 0)


def test_spec_6_key_with_schema_gives_the_event_key() -> None:
    key = b"""{"schema": {"type": "struct", "name": "mysql-server-1.inventory.customers.Key", "optional": false,
                          "fields": [{"field": "id", "type": "int32", "optional": false}]},
               "payload": {"id": 1001}}"""
    event = decode_one(message([field("id", "int32", optional=False), field("name", "string")],
                               after={"id": 1001, "name": "x"}), key=key)
    assert event.key == {"id": 1001}
    assert [c.key for c in event.columns or []] == [True, False]
    assert event.key_of() == {"id": 1001}


@pytest.mark.parametrize(("spec", "wire", "expected"), [
    (field("d", "int32", "io.debezium.time.Date"), 17702, "2018-06-20"),
    (field("t", "int64", "io.debezium.time.MicroTime"), 36930500000, "10:15:30.500000"),
    (source_typed("t", "int64", "TIME", "io.debezium.time.MicroTime", length="1"), 36930500000, "10:15:30.5"),
    (field("dt", "int64", "io.debezium.time.Timestamp"), 1529476623000, "2018-06-20 06:37:03"),
    (source_typed("dt", "int64", "DATETIME", "io.debezium.time.Timestamp", length="3"), 1529476623123,
     "2018-06-20 06:37:03.123"),
    (field("dt", "int64", "io.debezium.time.MicroTimestamp"), 1529476623123456, "2018-06-20 06:37:03.123456"),
    (field("p", "bytes", "org.apache.kafka.connect.data.Decimal", scale="2"), "BNI=", "12.34"),
    (field("p", "bytes", "org.apache.kafka.connect.data.Decimal", scale="2"), "+w==", "-0.05"),
    (field("p", "bytes", "org.apache.kafka.connect.data.Decimal", scale="2"), "AA==", "0.00"),
    (field("b", "bytes", "io.debezium.data.Bits", length="10"), "AQI=", 513),
    (source_typed("u", "int64", "BIGINT UNSIGNED"), -1, 18446744073709551615),
    (source_typed("u", "bytes", "BIGINT UNSIGNED", "org.apache.kafka.connect.data.Decimal", scale="0",
                  connect__decimal__precision="20"), "AP//////////", 18446744073709551615),
])
def test_spec_9_worked_values(spec: dict[str, Any], wire: Any, expected: Any) -> None:
    event = decode_one(message([spec], after={spec["field"]: wire}))
    assert event.after == {spec["field"]: expected}


def test_semantic_types_without_source_types() -> None:
    wkb_point = base64.b64encode(bytes.fromhex("0101000000000000000000f03f0000000000000040")).decode()
    fields = [
        (field("bigu", "bytes", "org.apache.kafka.connect.data.Decimal", scale="0",
               connect__decimal__precision="20"), "AP//////////", "decimal(20,0)", "18446744073709551615"),
        (field("d", "int32", "org.apache.kafka.connect.data.Date"), -1, "date", "1969-12-31"),
        (field("t", "int32", "org.apache.kafka.connect.data.Time"), 3723004, "time", "01:02:03.004000"),
        (field("ts", "int64", "org.apache.kafka.connect.data.Timestamp"), -1, "datetime",
         "1969-12-31 23:59:59.999000"),
        (field("ms", "int32", "io.debezium.time.Time"), 1000, "time", "00:00:01"),
        (field("nt", "int64", "io.debezium.time.NanoTime"), 1_000_001_000, "time", "00:00:01.000001"),
        (field("nts", "int64", "io.debezium.time.NanoTimestamp"), 1_500, "datetime(6)",
         "1970-01-01 00:00:00.000001"),
        (field("long_t", "int64", "io.debezium.time.MicroTime"), 3020399000000, "time", "838:59:59"),
        (field("neg_t", "int64", "io.debezium.time.MicroTime"), -3020399000000, "time", "-838:59:59"),
        (field("z", "string", "io.debezium.time.ZonedTimestamp"), "2018-06-20T21:37:03.1234567+08:00",
         "timestamp", "2018-06-20T13:37:03.123456Z"),
        (field("z2", "string", "io.debezium.time.ZonedTimestamp"), "2018-06-20T13:37:03Z", "timestamp",
         "2018-06-20T13:37:03Z"),
        (field("zt", "string", "io.debezium.time.ZonedTime"), "10:15:30.5Z", "time", "10:15:30.5"),
        (field("iso_d", "string", "io.debezium.time.IsoDate"), "2017-09-15Z", "date", "2017-09-15"),
        (field("iso_ts", "string", "io.debezium.time.IsoTimestamp"), "2019-07-09T02:28:57.123456Z", "datetime",
         "2019-07-09 02:28:57.123456"),
        (field("y", "int32", "io.debezium.time.Year"), 2024, "year", 2024),
        (field("vsd", "struct", "io.debezium.data.VariableScaleDecimal") | {"fields": [
            field("scale", "int32", optional=False), field("value", "bytes", optional=False)]},
         {"scale": 3, "value": "BNI="}, "decimal", "1.234"),
        (field("j", "string", "io.debezium.data.Json"), '{"a": [1, 2]}', "json", '{"a": [1, 2]}'),
        (field("e", "string", "io.debezium.data.Enum", allowed="a,b,c d"), "c d", "enum('a','b','c d')", "c d"),
        (field("s", "string", "io.debezium.data.EnumSet", allowed="x,y"), "x,y", "set('x','y')", "x,y"),
        (field("g", "struct", "io.debezium.data.geometry.Geometry") | {"fields": [
            field("wkb", "bytes", optional=False), field("srid", "int32")]},
         {"wkb": wkb_point, "srid": 4326}, "geometry", wkb_point),
        (field("pt", "struct", "io.debezium.data.geometry.Point") | {"fields": [
            field("x", "double", optional=False), field("y", "double", optional=False), field("wkb", "bytes"),
            field("srid", "int32")]}, {"x": 1.0, "y": 2.0, "wkb": None, "srid": None}, "point", wkb_point),
        (field("i8", "int8"), -5, "tinyint", -5),
        (field("bool", "boolean"), True, "boolean", True),
        (field("blob", "bytes"), "AAEC", "blob", "AAEC"),
        (field("arr", "array") | {"items": {"type": "int32", "optional": False}}, [1, 2], "json", "[1,2]"),
    ]
    event = decode_one(message([f for f, *_ in fields], after={f["field"]: wire for f, wire, *_ in fields}))
    assert [(c.name, c.type) for c in event.columns or []] == [(f["field"], t) for f, _, t, _ in fields]
    assert event.after == {f["field"]: value for f, _, _, value in fields}


def test_source_types_refine_values() -> None:
    fields = [
        (source_typed("bit1", "boolean", "BIT", length="1"), True, "bit(1)", 1),
        (source_typed("tiny1", "boolean", "TINYINT", length="1"), False, "tinyint(1)", 0),
        (source_typed("bool_snapshot", "int16", "BOOLEAN"), 2, "tinyint(1)", 2),
        (source_typed("dec_double", "double", "DECIMAL", length="10", scale="3"), 12.5, "decimal(10,3)", "12.500"),
        (source_typed("dec_string", "string", "DECIMAL", length="10", scale="3"), "12.5", "decimal(10,3)",
         "12.500"),
        (source_typed("ts3", "string", "TIMESTAMP", "io.debezium.time.ZonedTimestamp", length="3"),
         "2023-01-02T03:04:05.1Z", "timestamp(3)", "2023-01-02T03:04:05.100Z"),
        (source_typed("pg_ts", "int64", "TIMESTAMP", "io.debezium.time.MicroTimestamp", length="29", scale="6"),
         1_000_000, "datetime(6)", "1970-01-01 00:00:01.000000"),
        (source_typed("bin_b64", "string", "VARBINARY", length="8"), "AAEC", "varbinary(8)", "AAEC"),
        (source_typed("renamed", "string", "VARCHAR", length="5", original_name="a-b"), "x", "varchar(5)", "x"),
        (source_typed("weird", "string", "INTERVAL"), "P1D", "text", "P1D"),
    ]
    event = decode_one(message([f for f, *_ in fields], after={f["field"]: wire for f, wire, *_ in fields}))
    names = [f["field"] if f["field"] != "renamed" else "a-b" for f, *_ in fields]
    assert [(c.name, c.type) for c in event.columns or []] == [(n, t) for n, (_, _, t, _) in
                                                              zip(names, fields, strict=True)]
    assert event.after == {n: v for n, (_, _, _, v) in zip(names, fields, strict=True)}


def test_binary_handling_modes_for_string_binary_columns() -> None:
    fields = [source_typed("b", "string", "VARBINARY", length="8")]
    for mode, wire in (("hex", "000102ff"), ("base64-url-safe", "AAEC_w"), ("base64", "AAEC/w==")):
        fmt = DebeziumJson(**{"binary-handling-mode": mode})
        assert decode_one(message(fields, after={"b": wire}), fmt=fmt).after == {"b": "AAEC/w=="}


def test_float32_values_are_the_float32_number() -> None:
    # JsonConverter writes a Connect FLOAT32 as Java's shortest float text (tiflow's col_float: 12345.123). The
    # column holds the float32 nearest to that text, which is also what the Avro converter carries.
    event = decode_one(message([field("f", "float"), field("d", "double")], after={"f": 12345.123, "d": 12345.123}))
    assert event.after == {"f": struct.unpack("<f", struct.pack("<f", 12345.123))[0], "d": 12345.123}


def test_vector_items_are_floats_as_the_avro_converter_gives_them() -> None:
    # MySQL 9 VECTOR (spec 9.1: ARRAY(FLOAT32), io.debezium.data.FloatVector); before, the JSON reader's Decimals
    # reached the lake as text.
    vectors = [{**field("f", "array", "io.debezium.data.FloatVector"), "items": {"type": "float", "optional": False}},
               {**field("d", "array", "io.debezium.data.DoubleVector"), "items": {"type": "double", "optional": False}}]
    event = decode_one(message(vectors, after={"f": [12345.123, -1.5], "d": [12345.123, 0.1]}))
    assert event.after == {"f": [struct.unpack("<f", struct.pack("<f", 12345.123))[0], -1.5], "d": [12345.123, 0.1]}
    assert all(type(x) is float for x in [*event.after["f"], *event.after["d"]])


def test_nan_and_the_infinities_are_read_from_the_strings_jsonconverter_writes_for_them() -> None:
    # A PostgreSQL (or Oracle BINARY_DOUBLE) NaN or infinity: JSON has no number for it, and Jackson writes Java's
    # name for it as a string. Any other string where a number belongs is no value of the column.
    fields = [field("d", "double"), field("f", "float"), field("i", "double")]
    event = decode_one(message(fields, after={"d": "NaN", "f": "-Infinity", "i": "Infinity"}))
    assert math.isnan(event.after["d"]) and event.after["f"] == -math.inf and event.after["i"] == math.inf
    assert "floating-point value '1.5'" in failure_of(message(fields, after={"d": "1.5", "f": 1.0, "i": 1.0}))
    assert "floating-point value 'nan'" in failure_of(message(fields, after={"d": "nan", "f": 1.0, "i": 1.0}))


def test_zoned_time_offset_is_applied() -> None:
    # §9.3: ZonedTime is an ISO time *with offset*; Debezium's ZonedTime formats whatever offset it is given.
    fields = [field(n, "string", "io.debezium.time.ZonedTime") for n in ("east", "west", "utc")]
    event = decode_one(message(fields, after={"east": "10:15:30.5+08:00", "west": "23:30:00-01:00",
                                              "utc": "10:15:30Z"}))
    assert event.after == {"east": "02:15:30.5", "west": "00:30:00", "utc": "10:15:30"}


def test_numeric_decimal_key_is_read_exactly() -> None:
    # §2.1 decimal.format=NUMERIC: a DECIMAL key column is a JSON number in the key as in the value (§6).
    number = b"2222222222222222300000001111.1234567890"
    pk = field("d", "bytes", "org.apache.kafka.connect.data.Decimal", optional=False, scale="10",
               connect__decimal__precision="38")
    fields = [pk, field("f", "double")]
    value = message(fields, after=None).replace(b'"after": null', b'"after": {"d": ' + number + b', "f": 1.5}')
    key_schema = json.dumps({"type": "struct", "name": "dbserver1.inventory.orders.Key", "optional": False,
                             "fields": [pk, fields[1]]}).encode()
    exact = {"d": "2222222222222222300000001111.1234567890", "f": 1.5}
    for key in (b'{"d": ' + number + b', "f": 1.5}',
                b'{"schema": ' + key_schema + b', "payload": {"d": ' + number + b', "f": 1.5}}'):
        event = decode_one(value, key=key)
        assert event.after == event.key == exact
        assert type(event.key["f"]) is float
    schemaless = decode_one(json.dumps({"after": {"d": 1}, "source": mysql_source(), "op": "c"}).encode(),
                            key=b'{"d": 1.5}')
    assert schemaless.key == {"d": 1.5} and type(schemaless.key["d"]) is float


def test_decimal_numbers_are_read_exactly() -> None:
    # decimal.format=NUMERIC (Flink CDC): a JSON number where the schema says Decimal bytes
    value = message([field("d", "bytes", "org.apache.kafka.connect.data.Decimal", scale="10",
                           connect__decimal__precision="38")], after=None)
    value = value.replace(b'"after": null', b'"after": {"d": 2222222222222222300000001111.1234567890}')
    assert decode_one(value).after == {"d": "2222222222222222300000001111.1234567890"}


# ---------------------------------------------------------------------------------- envelope rules

def test_snapshot_forms() -> None:
    fields = [field("id", "int32", optional=False)]
    for flag in ("true", "first", "last", "first_in_data_collection", "last_in_data_collection", True):
        event = decode_one(message(fields, op="r", after={"id": 1}, source=mysql_source(snapshot=flag)))
        assert (event.op, event.commit_ts, event.ts_ms) == ("r", 0, 1700000000000)
    legacy = decode_one(message(fields, op="c", after={"id": 1}, source=mysql_source(snapshot=True)))
    assert (legacy.op, legacy.commit_ts) == ("r", 0)
    incremental = decode_one(message(fields, op="r", after={"id": 1}, source=mysql_source(snapshot="incremental")))
    assert (incremental.op, incremental.commit_ts) == ("r", 1700000000000)
    streaming = decode_one(message(fields, op="c", after={"id": 1}, source=mysql_source(snapshot=False)))
    assert (streaming.op, streaming.commit_ts) == ("c", 1700000000000)


def test_delete_truncate_tombstone_message_heartbeat() -> None:
    fields = [field("id", "int32", optional=False)]
    delete = decode_one(message(fields, op="d", before={"id": 3}), key=b'{"id": 3}')
    assert (delete.op, delete.before, delete.after, delete.key) == ("d", {"id": 3}, None, {"id": 3})
    truncate = decode_one(message(fields, op="t"))
    assert (truncate.kind, truncate.op, truncate.table, truncate.key) == ("truncate", None, "orders", None)
    assert truncate.position == pad_position("mysql-bin.000003", 805, 0)
    result = DebeziumJson().decode([
        Record(value=None, key=b'{"id": 3}'),
        Record(value=b'{"schema": null, "payload": null}'),
        Record(value=message(None, op="m")),
        Record(value=b'{"ts_ms": 1700000000000}'),
        Record(value=b'{"status": "BEGIN", "id": "gtid:1", "event_count": null, "data_collections": null, '
                     b'"ts_ms": 1}'),
    ])
    assert (result.events, result.failures, result.skipped) == ([], [], 5)


def test_schema_change_topic_value_is_a_ddl_event() -> None:
    value = json.dumps({"source": mysql_source(table="orders"), "ts_ms": 1, "databaseName": "inventory",
                        "schemaName": None, "ddl": "ALTER TABLE orders ADD c INT", "tableChanges": []}).encode()
    event = decode_one(value)
    assert (event.kind, event.database, event.table, event.ddl) == ("ddl", "inventory", "orders",
                                                                    "ALTER TABLE orders ADD c INT")
    assert event.commit_ts == 1700000000000


def test_primary_key_change_is_a_plain_delete_and_create() -> None:
    fields = [field("id", "int32", optional=False), field("v", "string")]
    result = DebeziumJson().decode([
        Record(key=b'{"id": 1}', value=message(fields, op="d", before={"id": 1, "v": "a"}),
               headers=[("__debezium.newkey", b'{"id":2}')]),
        Record(key=b'{"id": 1}', value=None),
        Record(key=b'{"id": 2}', value=message(fields, op="c", after={"id": 2, "v": "a"}),
               headers=[("__debezium.oldkey", b'{"id":1}')]),
    ])
    assert not result.failures and result.skipped == 1
    assert [(e.op, e.key, e.before, e.after) for e in result.events] == [
        ("d", {"id": 1}, {"id": 1, "v": "a"}, None), ("c", {"id": 2}, None, {"id": 2, "v": "a"})]


def test_postgres_identity_and_position() -> None:
    source = {"version": "1.2.1.Final", "connector": "postgresql", "name": "s", "ts_ms": 1596010889629,
              "snapshot": "false", "db": "postgres", "schema": "inventory", "table": "products", "txId": 602,
              "lsn": 34131104, "xmin": None}
    event = decode_one(message(None, op="u", before=None, after={"id": 1}, source=source))
    assert (event.database, event.table, event.position) == ("inventory", "products", pad_position(34131104))
    assert event.before is None and event.after == {"id": 1}


# ------------------------------------------------------------------------------------------ corpus

def corpus_lines(path: Path) -> list[bytes]:
    return [line for line in path.read_bytes().split(b"\n") if line.startswith(b"{")]


def payloads(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in corpus_lines(path):
        doc = json.loads(line)
        out.append(doc["payload"] if "schema" in doc else doc)
    return out


def test_corpus_flink_mysql_schema_include(corpus: Path) -> None:
    path = corpus / "flink/debezium-data-schema-include.txt"
    result = DebeziumJson().decode([Record(value=line) for line in corpus_lines(path)])
    assert not result.failures and len(result.events) == 16
    expected = payloads(path)
    for event, raw in zip(result.events, expected, strict=True):
        # No column of this table needs a semantic conversion, so the payload's JSON values are the answer.
        assert (event.before, event.after) == (raw["before"] if raw["op"] in ("u", "d") else None,
                                               raw["after"])
        assert (event.database, event.table) == ("inventory", "products")
        assert event.position == pad_position("mysql-bin.000003", raw["source"]["pos"], 0)
        assert [(c.name, c.type, c.nullable) for c in event.columns or []] == [
            ("id", "int", False), ("name", "text", False), ("description", "text", True), ("weight", "double", True)]
    assert [e.op for e in result.events] == ["r"] * 9 + ["u", "u", "c", "c", "u", "u", "d"]
    assert all(e.commit_ts == 0 for e in result.events[:9])  # snapshot rows (legacy op=c + snapshot=true)
    streamed = result.events[9:]
    assert [e.commit_ts for e in streamed] == [p["source"]["ts_ms"] for p in expected[9:]]
    assert [e.position for e in streamed] == sorted(e.position or "" for e in streamed)


@pytest.mark.parametrize("name", ["debezium-postgres-data-schema-include.txt",
                                  "debezium-postgres-data-schema-exclude.txt"])
def test_corpus_flink_postgres(corpus: Path, name: str) -> None:
    path = corpus / "flink" / name
    result = DebeziumJson().decode([Record(value=line) for line in corpus_lines(path)])
    assert not result.failures and len(result.events) == 16
    for event, raw in zip(result.events, payloads(path), strict=True):
        assert (event.database, event.table) == ("inventory", "products")
        assert event.after == raw["after"]
        assert event.position == pad_position(raw["source"]["lsn"])
        assert event.ts_ms == raw["source"]["ts_ms"]
        assert event.commit_ts == (0 if raw["op"] == "r" else raw["source"]["ts_ms"])
    types = {c.type for e in result.events for c in e.columns or []}
    assert types == ({"int", "text", "double"} if "include" in name else {"unknown"})
    assert [e.op for e in result.events] == ["r"] * 9 + ["u", "u", "c", "c", "u", "u", "d"]


def test_corpus_flink_postgres_replica_identity(corpus: Path) -> None:
    lines = corpus_lines(corpus / "flink/debezium-postgres-data-replica-identity.txt")
    result = DebeziumJson().decode([Record(value=line, offset=i) for i, line in enumerate(lines)])
    assert len(result.events) == 15 and len(result.failures) == 1
    assert result.failures[0].record.offset == 15
    assert "neither a before image nor a Kafka key" in result.failures[0].reason
    updates = [e for e in result.events if e.op == "u"]
    assert updates and all(e.before is None and e.after is not None for e in updates)
    with_key = decode_one(lines[15], key=b'{"id": 111}')
    assert (with_key.op, with_key.key, with_key.before, with_key.after) == ("d", {"id": 111}, None, None)


def test_corpus_tiflow_datatype(corpus: Path) -> None:
    base = corpus / "tiflow/debezium-testdata"
    event = decode_one((base / "datatype.dbz.json").read_bytes(), key=(base / "datatype.dbz.key.json").read_bytes())
    assert (event.op, event.database, event.table, event.key) == ("c", "test", "foo", {"pk": 1})
    assert event.commit_ts == 1701673705000 and event.position == pad_position("mysql-bin.000005", 10394, 0)
    # The values the MySQL rows hold, per the column names of TiCDC's datatype test table.
    expected = {
        "pk": 1, "col_d_2023": "2023-11-30", "col_d_1000": "1000-01-01", "col_d_9999": "9999-12-31",
        "col_d_0000": None, "col_dt": "2023-11-30 12:34:56", "col_dt_fsp_0": "2023-11-30 12:34:56",
        "col_dt_fsp_1": "2023-11-30 12:34:56.100000", "col_dt_fsp_4": "2023-11-30 12:34:56.123500",
        "col_dt_fsp_6": "2023-11-30 12:34:56.123456", "col_dt_0000": None, "col_t": "12:34:56",
        "col_t_fsp_0": "12:34:56", "col_t_fsp_1": "12:34:56.100000", "col_t_fsp_4": "12:34:56.123500",
        "col_t_fsp_6": "12:34:56.123456", "col_t_neg": "-12:34:56.123456", "col_ts": "2023-11-30T12:34:56Z",
        "col_ts_fsp_0": "2023-11-30T12:34:56Z", "col_ts_fsp_1": "2023-11-30T12:34:56.1Z",
        "col_ts_fsp_5": "2023-11-30T12:34:56.12346Z", "col_ts_fsp_6": "2023-11-30T12:34:56.123456Z",
        "col_y": 2023, "col_bit_1": True, "col_bit_5": 0b10000, "col_bit_6": 0b10000, "col_bit_60": 0b10000,
        "col_varchar": "foo", "col_char": "foo", "col_varbinary": "Zm9v",
        "col_binary": base64.b64encode(b"foo" + bytes(97)).decode(), "col_blob": "Zm9v",
        "col_decimal": 12345.12345, "col_numeric": 12345.12345, "col_float": 12345.123046875, "col_double": 12345.12345,
        "col_int": -2147483648, "col_int_unsigned": 4294967295, "col_tinyint": -128, "col_tinyint_unsigned": 255,
        "col_smallint": -32768, "col_smallint_unsigned": 65535, "col_mediumint": -8388608,
        "col_mediumint_unsigned": 16777215, "col_bigint": -9223372036854775808,
        "col_bigint_unsigned": -1,  # long mode, and no source type says the column is unsigned
        "col_enum": "a", "col_enum_invalid": "", "col_set": "a,b", "col_set_invalid": "", "col_json": '["foo"]',
    }
    assert event.after == expected
    types = {c.name: c.type for c in event.columns or []}
    assert types["col_dt_fsp_4"] == "datetime(6)" and types["col_ts"] == "timestamp"
    assert types["col_bit_60"] == "bit(60)" and types["col_enum"] == "enum('a','b','c')"
    assert types["col_set"] == "set('a','b','c')" and types["col_y"] == "year" and types["col_json"] == "json"
    assert [c.name for c in event.columns or [] if c.key] == ["pk"]


def test_corpus_paimon_alltype_flink_cdc(corpus: Path) -> None:
    (line,) = corpus_lines(corpus / "paimon/debezium_table_schema_alltype_debezium-data-1.txt")
    event = decode_one(line)
    assert (event.op, event.database, event.table, event.commit_ts) == ("r", "paimon_sync_table",
                                                                        "all_types_table", 0)
    after, types = event.after or {}, {c.name: c.type for c in event.columns or []}
    assert after["pt"] == "1.1" and types["pt"] == "decimal(2,1)"
    assert after["_fixed"] == "123456789876543212345678987654321.110"
    assert after["_big_decimal"] == "2222222222222222300000001111.1234567890"
    assert after["_decimal"] == "11111" and types["_decimal"] == "decimal(8,0)"
    assert after["_bit"] == 0x07C7 and types["_bit"] == "bit(64)"
    assert after["_bigint_unsigned"] == "20000000000" and types["_bigint_unsigned"] == "decimal(65,0)"
    assert after["_datetime3"] == "2023-03-23 14:30:05.123000" and after["_datetime6"] == "2023-03-23 14:30:05.123456"
    assert after["_timestamp"] == "2023-03-23T22:00:10.123456Z" and after["_time"] == "10:13:23"
    assert after["_date"] == "2023-03-23" and after["_year"] == 2023 and after["_set"] == "a,b"
    assert after["_point"] == "AQEAAAAAAAAAAADwPwAAAAAAAPA/" and types["_point"] == "point"
    assert types["_linestring"] == "geometry" and after["_linestring"].startswith("AQIAAAAD")
    assert after["_bin"] == "Ynl0ZXMAAAAAAA==" and types["_bin"] == "blob"


def test_corpus_paimon_key_value_pairs_with_source_types(corpus: Path) -> None:
    lines = corpus_lines(corpus / "paimon/debezium-avro_table_schema_alltype_debezium-avro-data-1.txt")
    records = [Record(key=lines[i], value=lines[i + 1], offset=i) for i in range(0, len(lines), 2)]
    result = DebeziumJson().decode(records)
    assert not result.failures and len(result.events) == 2
    first, second = result.events
    assert (first.key, second.key) == ({"_id": 1}, {"_id": 2})
    assert first.position == pad_position("mysql-bin.000074", 13593, 0) and first.commit_ts == 1695606891000
    types = {c.name: c.type for c in first.columns or []}
    after = first.after or {}
    assert types["_tinyint1"] == "tinyint(1)" and after["_tinyint1"] == 1
    assert types["_boolean"] == "boolean" and after["_boolean"] is True
    assert types["_bigint_unsigned"] == "bigint unsigned" and after["_bigint_unsigned"] == 20000000000
    assert types["_tinyint_unsigned_zerofill"] == "tinyint(2) unsigned zerofill"
    assert types["_fixed"] == "fixed(40,3)" and after["_fixed"] == "123456789876543212345678987654321.110"
    assert types["_datetime3"] == "datetime(3)" and after["_datetime3"] == "2023-03-23 14:30:05.123"
    assert types["_datetime_p2"] == "datetime(2)" and after["_datetime_p2"] == "2023-03-24 14:30:05.12"
    assert types["_timestamp"] == "timestamp(6)" and after["_timestamp"] == "2023-03-23T07:00:10.123456Z"
    assert types["_enum"] == "enum('value1','value2','value3')" and types["_set"] == "set('a','b','c','d')"
    assert types["_bin"] == "binary(10)" and types["_multiline"] == "multilinestring"
    assert [c.name for c in first.columns or [] if c.key] == ["_id"]
    nulls = {name for name, value in (second.after or {}).items() if value is None}
    assert nulls == set(types) - {"_id", "pt", "_serial"}
    assert (second.after or {})["_serial"] == 50000000000


def test_corpus_paimon_include_matches_flink_line(corpus: Path) -> None:
    (paimon,) = corpus_lines(corpus / "paimon/debezium_table_schema_include_debezium-data-1.txt")
    flink = corpus_lines(corpus / "flink/debezium-data-schema-include.txt")[0]
    assert decode_one(paimon) == decode_one(flink)


# ------------------------------------------------------------------------------------- round trips

@st.composite
def change_events(draw: st.DrawFn, columns: list[Column]) -> list[ChangeEvent]:
    """A short history of one table: snapshot read, insert, updates, delete; key kept stable."""
    events: list[ChangeEvent] = []
    first = draw(rows(columns))
    key = {"id": first["id"]}
    ts = draw(st.integers(1_000_000_000_000, 2_000_000_000_000)) // 1000 * 1000

    def event(op: str, n: int, before: dict[str, Any] | None, after: dict[str, Any] | None) -> ChangeEvent:
        return ChangeEvent(kind="row", op=op, database="db", table="t", key=key, before=before, after=after,
                           columns=columns, commit_ts=0 if op == "r" else ts + n * 1000, ts_ms=ts + n * 1000,
                           position=pad_position("mysql-bin.000001", 100 + n, 0))

    events.append(event(draw(st.sampled_from(["r", "c"])), 0, None, first))
    current = first
    for n in range(1, draw(st.integers(1, 3)) + 1):
        nxt = {**draw(rows(columns)), "id": first["id"]}
        events.append(event("u", n, current, nxt))
        current = nxt
    events.append(event("d", 9, current, None))
    return events


def decoded(fmt: DebeziumJson, events: list[ChangeEvent]) -> list[ChangeEvent]:
    result = fmt.decode(fmt.encode(events))
    assert not result.failures, result.failures[0].describe()
    for event in result.events:
        event.source = None
    return result.events


ALL_COLUMNS = columns_of()


@settings(max_examples=120, deadline=None)
@given(change_events(ALL_COLUMNS))
def test_round_trip_every_type(events: list[ChangeEvent]) -> None:
    fmt = DebeziumJson()
    assert decoded(fmt, events) == events
    records = fmt.encode(events)
    assert [r.value is None for r in records] == [False] * len(events) + [True]  # tombstone after the delete
    assert all(r.topic == "cdclake.db.t" and json.loads(r.key or b"null")["payload"] == {"id": events[0].key["id"]}
               for r in records if r.key is not None)


@settings(max_examples=60, deadline=None)
@given(change_events(columns_of(("bigint unsigned", "decimal(65,0)", "decimal(38,10)", "decimal(10,2)",
                                 "datetime(3)", "date", "bit(1)", "bit(64)"))))
def test_round_trip_string_and_precise_modes(events: list[ChangeEvent]) -> None:
    fmt = DebeziumJson(**{"decimal-handling-mode": "string", "bigint-unsigned-handling-mode": "precise",
                          "time-precision-mode": "connect", "tombstones-on-delete": "false"})
    assert decoded(fmt, events) == events
    assert len(fmt.encode(events)) == len(events)


TEXTUAL = ("int", "bigint", "double", "varchar(20)", "json", "timestamp(6)", "enum('a','b')", "blob")


@settings(max_examples=60, deadline=None)
@given(change_events(columns_of(TEXTUAL)))
def test_round_trip_without_schemas(events: list[ChangeEvent]) -> None:
    # Without schemas the decoder keeps values as JSON gives them and column types are unknown. These
    # types' wire values are their canonical values, so the rows survive; types do not.
    fmt = DebeziumJson(**{"schemas-enable": "false"})
    records = fmt.encode(events)
    assert all(not (r.value or b"").startswith(b'{"schema"') for r in records)
    result = decoded(fmt, events)
    assert [(e.op, e.key, e.before, e.after, e.commit_ts, e.position) for e in result] == [
        (e.op, e.key, e.before, e.after, e.commit_ts, e.position) for e in events]
    assert all(c.type == "unknown" for e in result for c in e.columns or [])
    assert [c.key for c in result[0].columns or []] == [c.name == "id" for c in result[0].columns or []]


def stated(columns: list[Column]) -> str:
    return json.dumps({"db.t": {c.name: c.type for c in columns}})


@settings(max_examples=60, deadline=None)
@given(change_events(ALL_COLUMNS), st.sampled_from([
    {},
    {"decimal-handling-mode": "string", "bigint-unsigned-handling-mode": "precise"},
    {"decimal-handling-mode": "double", "binary-handling-mode": "hex"},
]))
def test_round_trip_without_schemas_with_the_column_types_stated(events: list[ChangeEvent], modes: dict) -> None:
    # spec §2.1, §12 item 3: without schemas, configured column types drive the conversions. Every type then
    # decodes as it does with the connector's schema; only NOT NULL is not stated, so every column may be null.
    records = DebeziumJson(**{**modes, "schemas-enable": "false"}).encode(events)
    assert all(not (r.value or b"").startswith(b'{"schema"') for r in records)
    with_schemas = DebeziumJson(**modes)
    expected = with_schemas.decode(with_schemas.encode(events))
    result = DebeziumJson(**{**modes, "column-types": stated(ALL_COLUMNS)}).decode(records)
    assert not result.failures, result.failures[0].describe()
    for event in expected.events:
        event.columns = [msgspec.structs.replace(c, nullable=True) for c in event.columns or []]
    for event in (*result.events, *expected.events):
        event.source = None
    assert result.events == expected.events and result.skipped == expected.skipped


def test_stated_column_types_from_a_file_and_what_they_must_hold(tmp_path: Path) -> None:
    columns = [Column("id", "int", True, False), Column("day", "date")]
    event = ChangeEvent(kind="row", op="c", database="db", table="t", columns=columns, key={"id": 1},
                        after={"id": 1, "day": "2024-01-02"}, commit_ts=1, ts_ms=1)
    records = DebeziumJson(**{"schemas-enable": "false"}).encode([event])
    (tmp_path / "types.json").write_text(stated(columns))
    (got,) = DebeziumJson(**{"column-types": str(tmp_path / "types.json")}).decode(records).events
    assert (got.after, [(c.name, c.type, c.key) for c in got.columns]) == (
        {"id": 1, "day": "2024-01-02"}, [("id", "int", True), ("day", "date", False)])
    # a table the option does not name is read as JSON gives it
    (other,) = DebeziumJson(**{"column-types": '{"db.other": {"id": "int"}}'}).decode(records).events
    assert other.after == {"id": 1, "day": 19724} and other.columns[1].type == "unknown"
    # a column of a stated table that has no type is a dead letter that says so, not a guess
    result = DebeziumJson(**{"column-types": '{"db.t": {"id": "int"}}'}).decode(records)
    assert result.failures[0].reason == "column(s) day of db.t have no type in column-types"
    # a payload that does not fit the stated types is a dead letter too
    result = DebeziumJson(**{"column-types": '{"db.t": {"id": "int", "day": "varchar(10)"}}'}).decode(records)
    assert "payload does not fit the column-types" in result.failures[0].reason


def test_stated_messages_in_a_row_keep_their_own_column_lists() -> None:
    # A message is first read with the layout of the one before it: one of another column list or table must not
    # read as that layout (a dropped column as NULL, an added one lost).
    full = [Column("id", "int", True, False), Column("day", "date")]
    narrow, wide = full[:1], [*full, Column("note", "varchar(9)")]
    events = [ChangeEvent(kind="row", op="c", database="db", table=table, columns=columns, key={"id": i},
                          after={"id": i, "day": "2024-01-02", "note": "x"}, commit_ts=i, ts_ms=i)
              for i, (table, columns) in enumerate([("t", full), ("t", narrow), ("t", full), ("other", full),
                                                    ("t", wide)], 1)]
    for event in events:
        event.after = {c.name: event.after[c.name] for c in event.columns}
    records = [r for r in DebeziumJson(**{"schemas-enable": "false"}).encode(events) if r.value is not None]
    result = DebeziumJson(**{"column-types": stated(full)}).decode(records)
    assert [(e.table, e.after) for e in result.events] == [
        ("t", {"id": 1, "day": "2024-01-02"}), ("t", {"id": 2}), ("t", {"id": 3, "day": "2024-01-02"}),
        ("other", {"id": 4, "day": 19724})]
    assert [f.reason for f in result.failures] == ["column(s) note of db.t have no type in column-types"]


@pytest.mark.parametrize(("value", "error"), [
    ("{not json", "column-types is not JSON"),
    ('{"db.t": ["int"]}', 'column-types must be {"database.table"'),
    ('{"db.t": {}}', 'column-types must be {"database.table"'),
    ('{"db.t": {"c": "no such type"}}', "column-types: db.t.c: unknown type 'no such type'"),
    ('{"db.t": {"c": "decimal"}}', "scale"),
    ("/no/such/file.json", "column-types: cannot read '/no/such/file.json'"),
])
def test_bad_column_types_fail_when_the_format_is_made(value: str, error: str) -> None:
    with pytest.raises(ValueError, match=re.escape(error)):
        DebeziumJson(**{"column-types": value})


@settings(max_examples=60, deadline=None)
@given(rows(ALL_COLUMNS), st.integers(0, 2**63 - 1))
def test_round_trip_primary_key_change(row: dict[str, Any], new_id: int) -> None:
    new_row = {**row, "id": new_id if new_id != row["id"] else new_id + 1}
    update = ChangeEvent(kind="row", op="u", database="db", table="t", key={"id": row["id"]}, before=row,
                         after=new_row, columns=ALL_COLUMNS, commit_ts=5000, ts_ms=5000,
                         position=pad_position("mysql-bin.000002", 7, 1))
    fmt = DebeziumJson()
    records = fmt.encode([update])
    assert [r.value is None for r in records] == [False, True, False]
    assert json.loads(dict(records[0].headers)["__debezium.newkey"]) == {"id": new_row["id"]}
    assert json.loads(dict(records[2].headers)["__debezium.oldkey"]) == {"id": row["id"]}
    delete, create = decoded(fmt, [update])
    assert (delete.op, delete.key, delete.before, delete.after) == ("d", {"id": row["id"]}, row, None)
    assert (create.op, create.key, create.before, create.after) == ("c", {"id": new_row["id"]}, None, new_row)
    assert delete.position == create.position == update.position


def test_a_decimal_without_a_scale_keeps_its_digits_when_written_again() -> None:
    # A column typed "decimal" states no scale: string mode keeps each value's digits (before, scale 0 cut them),
    # and precise mode, whose bytes need the scale, says so instead of writing 2021 for 2021.1208.
    columns = [Column("id", "bigint", True, False), Column("d", "decimal", False, True)]
    event = ChangeEvent(kind="row", op="c", database="db", table="t", key={"id": 1}, after={"id": 1, "d": "2021.1208"},
                        columns=columns, commit_ts=5000, ts_ms=5000, position=pad_position("mysql-bin.000002", 7, 1))
    fmt = DebeziumJson(**{"decimal-handling-mode": "string"})
    (back,) = decoded(fmt, [event])
    assert back.after == {"id": 1, "d": "2021.1208"}
    with pytest.raises(ValueError, match="column d has type 'decimal' without a scale"):
        DebeziumJson().encode([event])


def test_truncate_round_trip_and_encoder_skips_ddl() -> None:
    truncate = ChangeEvent(kind="truncate", database="db", table="t", commit_ts=5000, ts_ms=5000,
                           position=pad_position("mysql-bin.000002", 7, 0))
    ddl = ChangeEvent(kind="ddl", database="db", table="t", ddl="DROP TABLE t")
    fmt = DebeziumJson()
    records = fmt.encode([truncate, ddl])
    assert len(records) == 1 and records[0].key is None
    assert decoded(fmt, [truncate, ddl]) == [truncate]


def test_registered_and_picklable() -> None:
    fmt = formats.create("debezium-json", {"decimal-handling-mode": "double"})
    assert isinstance(fmt, DebeziumJson)
    event = decode_one(message([field("id", "int32")], after={"id": 1}), fmt=fmt)
    clone = pickle.loads(pickle.dumps(fmt))
    assert clone.settings == fmt.settings
    assert decode_one(message([field("id", "int32")], after={"id": 1}), fmt=clone) == event


# ------------------------------------------------------------------------------------------ bad input

@pytest.mark.parametrize(("value", "key", "expected"), [
    (message([field("id", "int32")], after={"id": 1})[:-9], None, "truncated"),
    (b"[1, 2]", None, "Expected `object`, got `array`"),
    (message([field("id", "int32")], after={"id": "x"}), None, "Expected `int | null`, got `str` - at `$.after.id`"),
    (message([field("id", "int32")], op="x", after={"id": 1}), None, "unknown op 'x'"),
    (message([field("id", "int32")], op="c", after=None), None, "op c without an after image"),
    (message([field("id", "int32")], op="u", before={"id": 1}), None, "op u without an after image"),
    (message(None, op="d", before=None), None, "neither a before image nor a Kafka key"),
    (b'{"before": null, "after": {"id": 1}, "source": null, "op": "c"}', None, "no source block"),
    (json.dumps({"after": {"id": 1}, "source": mysql_source(table=None), "op": "c"}).encode(), None,
     "source.table is missing"),
    (b'{"after": {"id": 1}, "source": {"db": "x", "table": "t"}}', None, "no op"),
    (b'{"after": {"id": 1}, "source": {"db": "x", "table": "t", "pos": "12"}, "op": "c"}', None,
     "Expected `int | null`, got `str` - at `$.source.pos`"),
    (message([field("id", "decimal128")], after={"id": 1}), None, "unknown Connect type 'decimal128'"),
    (message([field("p", "bytes", "org.apache.kafka.connect.data.Decimal", scale="2")], after={"p": "!!"}), None,
     "column 'p': bad value '!!': invalid base64"),
    (message([field("d", "int32", "io.debezium.time.Date")], after={"d": 10**12}), None, "column 'd'"),
    (message([field("z", "string", "io.debezium.time.ZonedTimestamp")], after={"z": "yesterday"}), None,
     "column 'z'"),
    (message([field("id", "int32")], after={"id": 1}), b"not json", "key is not JSON"),
    (message([field("id", "int32")], after={"id": 1}), b"[1]", "key is not a JSON object but an array"),
    (message([field("id", "int32")], after={"id": 1}), b"12.5", "key is not a JSON object but a number"),
    (b'{"schema": {"type": "struct"}, "payload": {"op": "c"}}', None, "struct '<root>' has no fields list"),
])
def test_bad_input_is_a_failure_naming_the_problem(value: bytes, key: bytes | None, expected: str) -> None:
    assert expected in failure_of(value, key)


def test_cli_decodes_a_corpus_file(corpus: Path) -> None:
    from typer.testing import CliRunner

    from cdclake.cli.main import app

    result = CliRunner().invoke(app, ["decode", "-f", "debezium-json",
                                      str(corpus / "flink/debezium-data-schema-include.txt")])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 16 and lines[-1]["op"] == "d"


def test_same_schema_in_another_layout_still_decodes() -> None:
    # Consecutive compact messages of one schema take a fast path; other layouts of the same schema must not.
    fields = [field("id", "int32", optional=False)]
    schema = envelope_schema(fields)
    payload = {"before": None, "after": {"id": 1}, "source": mysql_source(), "op": "c", "ts_ms": 1}
    compact = json.dumps({"schema": schema, "payload": payload}, separators=(",", ":")).encode()
    spaced = json.dumps({"schema": schema, "payload": {**payload, "after": {"id": 2}}}).encode()
    extra = compact[:-1] + b',"extra":{"id":9}}'
    wrong = compact.replace(b'"after":{"id":1}', b'"after":{"id":"x"}')
    result = DebeziumJson().decode([Record(value=v) for v in (compact, compact, spaced, extra, wrong)])
    assert [e.after for e in result.events] == [{"id": 1}, {"id": 1}, {"id": 2}, {"id": 1}]
    assert len(result.failures) == 1 and "$.after.id" in result.failures[0].reason


def test_connect_time_precision_mode() -> None:
    columns = [Column("id", "int", True, False), Column("t", "time(3)", False, True),
               Column("dt", "datetime(6)", False, True)]
    fmt = DebeziumJson(**{"time-precision-mode": "connect"})
    event = ChangeEvent(kind="row", op="c", database="db", table="t", key={"id": 1},
                        after={"id": 1, "t": "23:59:59.999", "dt": "2020-01-02 03:04:05.123456"}, columns=columns,
                        commit_ts=5, ts_ms=5, position=pad_position("mysql-bin.000001", 4, 0))
    (record,) = fmt.encode([event])
    doc = json.loads(record.value or b"")
    names = {f["field"]: f.get("name") for f in doc["schema"]["fields"][1]["fields"]}
    assert names["t"] == "org.apache.kafka.connect.data.Time"
    assert names["dt"] == "org.apache.kafka.connect.data.Timestamp"
    assert doc["payload"]["after"]["t"] == 86399999
    (decoded,) = fmt.decode([record]).events
    assert decoded.after == {"id": 1, "t": "23:59:59.999", "dt": "2020-01-02 03:04:05.123000"}  # Connect keeps ms
    too_long = msgspec.structs.replace(event, after={"id": 1, "t": "24:00:00", "dt": None})
    with pytest.raises(ValueError, match=r"time\.precision\.mode=connect cannot carry"):
        fmt.encode([too_long])


def _struct(name: str, fields: dict[str, str], field: str, parameters: dict[str, str] | None = None) -> dict:
    schema = {"type": "struct", "optional": True, "name": name, "version": 1, "field": field,
              "fields": [{"type": kind, "optional": True, "field": member} for member, kind in fields.items()]}
    return {**schema, "parameters": parameters} if parameters else schema


_CLOCK = {"year": "int32", "month": "int8", "day": "int8", "hour": "int8", "minute": "int8", "second": "int8"}


def test_structured_time_precision_mode_as_debezium_writes_it() -> None:
    # time.precision.mode=structured (Debezium 3.x): the parts of each value by name. Older builds give "nanos", newer
    # "picoseconds"; names may carry "Precision<n>" and "SourceColumn<hex of the column>".
    fields = [
        {"type": "int32", "optional": False, "field": "id"},
        _struct("io.debezium.time.StructuredDate", {"year": "int32", "month": "int8", "day": "int8"}, "d"),
        _struct("io.debezium.time.StructuredTimestampPrecision3", {**_CLOCK, "nanos": "int32"}, "dt"),
        _struct("io.debezium.time.StructuredZonedTimestampSourceColumn7473",
                {**_CLOCK, "picoseconds": "int64", "offsetSeconds": "int32", "zoneId": "string",
                 "specialValue": "string"}, "ts", {"io.debezium.time.precision": "6"}),
        _struct("io.debezium.time.StructuredDuration",
                {"years": "int32", "months": "int32", "days": "int32", "hours": "int32", "minutes": "int32",
                 "seconds": "int64", "picoseconds": "int64"}, "t",
                {"io.debezium.time.precision": "1", "io.debezium.time.duration.kind": "elapsed-time"}),
        _struct("io.debezium.time.StructuredZonedTimePrecision0",
                {"hour": "int8", "minute": "int8", "second": "int8", "offsetSeconds": "int32"}, "zt"),
        _struct("io.debezium.time.StructuredTime", {"hour": "int8", "minute": "int8", "second": "int8",
                                                    "picoseconds": "int64"}, "lt"),
        _struct("io.debezium.time.StructuredDuration", {"years": "int32", "months": "int32", "days": "int32"}, "iv",
                {"io.debezium.time.duration.kind": "year-month"}),
    ]
    after = {"id": 1, "d": {"year": 2024, "month": 2, "day": 29},
             "dt": {"year": 2021, "month": 10, "day": 31, "hour": 2, "minute": 30, "second": 0, "nanos": 123456789},
             # 02:30:00.000000123 at +09:00 is 17:30 the day before in UTC; picoseconds finer than a micro are cut.
             "ts": {"year": 2021, "month": 1, "day": 1, "hour": 2, "minute": 30, "second": 0, "picoseconds": 123,
                    "offsetSeconds": 32400, "zoneId": "Asia/Tokyo", "specialValue": None},
             "t": {"years": 0, "months": 0, "days": 1, "hours": -2, "minutes": 0, "seconds": 0,
                   "picoseconds": -500_000_000_000},  # signed parts add up: 24 h - 2 h - 0.5 s
             "zt": {"hour": 1, "minute": 0, "second": 5, "offsetSeconds": 7200},
             "lt": {"hour": 23, "minute": 59, "second": 59, "picoseconds": 999_999_999_999},
             "iv": {"years": 1, "months": 2, "days": 0}}
    schema = envelope_schema(fields)
    message = {"schema": schema, "payload": {"before": None, "after": after, "source": mysql_source(), "op": "c"}}
    (event,) = DebeziumJson().decode([Record(value=json.dumps(message).encode())]).events
    assert event.after == {"id": 1, "d": "2024-02-29", "dt": "2021-10-31 02:30:00.123",
                           "ts": "2020-12-31T17:30:00.000000Z", "t": "21:59:59.5", "zt": "23:00:05",
                           "lt": "23:59:59.999999", "iv": '{"years":1,"months":2,"days":0}'}
    assert {c.name: c.type for c in event.columns or []} == {
        "id": "int", "d": "date", "dt": "datetime(3)", "ts": "timestamp(6)", "t": "time(1)", "zt": "time(0)",
        "lt": "time(6)", "iv": "json"}

    def one(column: str, value: dict) -> Record:
        body = {**message, "payload": {**message["payload"], "after": {**after, column: value}}}
        return Record(value=json.dumps(body).encode())

    zero = {"year": 0, "month": 0, "day": 0, "hour": 0, "minute": 0, "second": 0, "nanos": 0}
    result = DebeziumJson().decode([
        one("d", {"year": 0, "month": 0, "day": 0}), one("dt", zero),
        one("ts", {"specialValue": "POSITIVE_INFINITY"}), one("d", {"year": 2023, "month": 2, "day": 29}),
        one("t", {"years": 1, "months": 0, "days": 0}),
        one("ts", {**after["ts"], "offsetSeconds": None, "zoneId": "Europe/Berlin"})])
    assert [e.after and (e.after["d"], e.after["dt"]) for e in result.events] == [
        ("0000-00-00", "2021-10-31 02:30:00.123"), ("2024-02-29", "0000-00-00 00:00:00.000")]
    reasons = [f.reason for f in result.failures]
    assert len(reasons) == 4
    assert "POSITIVE_INFINITY has no value in the lake" in reasons[0] and "'ts'" in reasons[0]
    assert "day is out of range" in reasons[1]
    assert "years or months is no TIME" in reasons[2]
    assert "'Europe/Berlin' without offsetSeconds" in reasons[3]


@settings(max_examples=60, deadline=None)
@given(change_events(columns_of(("date", "datetime", "datetime(3)", "datetime(6)", "timestamp", "timestamp(6)",
                                 "time", "time(4)", "time(6)"))))
def test_round_trip_structured_time_precision_mode(events: list[ChangeEvent]) -> None:
    fmt = DebeziumJson(**{"time-precision-mode": "structured"})
    assert decoded(fmt, events) == events
    doc = json.loads(fmt.encode(events[:1])[0].value or b"")
    names = [f.get("name", "") for f in doc["schema"]["fields"][1]["fields"]]
    assert all(n.startswith("io.debezium.time.Structured") for n in names[1:]), names


@pytest.mark.parametrize("options", [{}, {"schemas-enable": "false"}])
def test_simulated_workload_reaches_the_expected_state(options: dict[str, str]) -> None:
    # The simulator's own oracle: key changes, deletes with tombstones, 3 partitions and redelivered records.
    from cdclake import simulator as workload

    generated = workload.generate("debezium-json", events=600, tables=2, seed=11, partitions=3, replays=0.05,
                                  options=options)
    result = DebeziumJson(**options).decode(generated.records)
    assert not result.failures and result.skipped > 0
    assert workload.diff_states(generated.expected, workload.fold(result.events)) == []


def test_array_and_map_items_take_their_canonical_form() -> None:
    """PostgreSQL arrays of temporal and decimal items (Debezium names their items' schemas): each item as the
    column of that type would hold it, not as its day/microsecond count."""
    def items(name: str, item: dict[str, Any]) -> dict[str, Any]:
        return field(name, "array") | {"items": item}

    date, micro_ts = field("", "int32", "io.debezium.time.Date"), field("", "int64", "io.debezium.time.MicroTimestamp")
    fields = [
        (items("dates", date), [19000, None, -1], '["2022-01-08",null,"1969-12-31"]'),
        (items("mts", micro_ts), [1_000_000, 1_700_000_000_123_456],
         '["1970-01-01 00:00:01.000000","2023-11-14 22:13:20.123456"]'),
        (items("mt", field("", "int64", "io.debezium.time.MicroTime")), [3_723_000_001], '["01:02:03.000001"]'),
        (items("ts", field("", "int64", "io.debezium.time.Timestamp")), [1_500], '["1970-01-01 00:00:01.500000"]'),
        (items("nts", field("", "int64", "io.debezium.time.NanoTimestamp")), [1_500_000_123],
         '["1970-01-01 00:00:01.500000"]'),
        (items("zts", field("", "string", "io.debezium.time.ZonedTimestamp")), ["2018-06-20T21:37:03+08:00"],
         '["2018-06-20T13:37:03Z"]'),
        (items("t", field("", "int32", "io.debezium.time.Time")), [36_930_500], '["10:15:30.500000"]'),
        (items("nt", field("", "int64", "io.debezium.time.NanoTime")), [1_000], '["00:00:00.000001"]'),
        (items("dec", field("", "bytes", "org.apache.kafka.connect.data.Decimal", scale="2")), ["BNI=", "+w=="],
         '["12.34","-0.05"]'),
        (items("vsd", field("", "struct", "io.debezium.data.VariableScaleDecimal") | {"fields": [
            field("scale", "int32", optional=False), field("value", "bytes", optional=False)]}),
         [{"scale": 3, "value": "BNI="}], '["1.234"]'),
        (items("nested", items("", date)), [[0, 1], []], '[["1970-01-01","1970-01-02"],[]]'),
        (field("m", "map") | {"keys": {"type": "string"}, "values": micro_ts}, {"a": 0, "b": None},
         '{"a":"1970-01-01 00:00:00.000000","b":null}'),
        (items("ints", field("", "int32")), [1, 2], "[1,2]"),
    ]
    event = decode_one(message([f for f, *_ in fields], after={f["field"]: wire for f, wire, _ in fields}))
    assert event.after == {f["field"]: text for f, _, text in fields}
    assert {c.type for c in event.columns or []} == {"json"}

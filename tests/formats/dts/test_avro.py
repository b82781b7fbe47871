"""DTS Avro: the schema against the official .avsc set, the spec's worked example, every value type, every
operation, round trips over every column type (fastavro writes, our reader reads), and bad input."""

from __future__ import annotations

import io
import json
import logging
import pickle
import struct
from typing import Any

import msgspec
import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import fingerprint, to_parsing_canonical_form
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdclake import formats
from cdclake.formats.dts.avro import PLACEHOLDER_BYTES
from cdclake.formats.dts.schema import RECORD_SCHEMA, RECORD_SCHEMA_R1
from cdclake.model import values as V
from cdclake.model.events import ChangeEvent, Column, pad_position
from cdclake.model.records import Record
from cdclake.model.types import parse_type
from tests.helpers.strategies import ALL_TYPES, columns_of, rows

NS = "com.alibaba.dts.formats.avro"
SCHEMA_R2 = parse_schema(RECORD_SCHEMA)
SCHEMA_R1 = parse_schema(RECORD_SCHEMA_R1)


# ---------------------------------------------------------------------------------------------------------
# The embedded schema is the official one


def _inline(node: Any, definitions: dict[str, Any], seen: set[str], namespace: str) -> Any:
    """A self-contained schema from the per-type files: each named type is defined at its first use."""
    if isinstance(node, str):
        full = node if "." in node else f"{namespace}.{node}"
        if full in definitions and full not in seen:
            seen.add(full)
            return _inline(definitions[full], definitions, seen, namespace)
        return node
    if isinstance(node, list):
        return [_inline(item, definitions, seen, namespace) for item in node]
    if isinstance(node, dict):
        if "name" in node and node.get("type") in ("record", "enum", "fixed"):
            seen.add(node["name"] if "." in node["name"] else f"{node.get('namespace', namespace)}.{node['name']}")
        out = dict(node)
        if "fields" in node:
            out["fields"] = [{**f, "type": _inline(f["type"], definitions, seen, namespace)} for f in node["fields"]]
        for key in ("items", "values"):
            if key in node:
                out[key] = _inline(node[key], definitions, seen, namespace)
        if node.get("type") in ("array", "map") or isinstance(node.get("type"), dict | list):
            out["type"] = _inline(node["type"], definitions, seen, namespace)
        return out
    return node


def test_embedded_schema_equals_the_official_avsc_set(corpus):
    files = sorted((corpus / "aliyun-dts" / "dts_record_avsc").glob("*.avsc"))
    assert len(files) == 14
    definitions = {}
    for path in files:
        schema = json.loads(path.read_text())
        definitions[f"{schema.get('namespace', NS)}.{schema['name']}"] = schema
    record = definitions.pop(f"{NS}.Record")
    official = parse_schema(_inline(record, definitions, {f"{NS}.Record"}, NS))
    ours = to_parsing_canonical_form(SCHEMA_R2)
    assert to_parsing_canonical_form(official) == ours
    assert fingerprint(ours, "CRC-64-AVRO") == "78c4c4796716ebae"  # dts-avro.md §3.1
    assert [f["name"] for f in RECORD_SCHEMA_R1["fields"]] == [f["name"] for f in RECORD_SCHEMA["fields"]][:-1]


# ---------------------------------------------------------------------------------------------------------
# §7 the worked example

WORKED_EXAMPLE = bytes.fromhex("""
00 bc c8 cf 01 b0 b5 af d2 0c 10 37 32 34 36 39
40 37 38 10 37 32 33 34 37 40 37 38 02 30 00 0c
38 2e 30 2e 32 38 00 02 0e 6d 79 64 62 2e 74 31
00 02 14 70 6b 5f 75 6b 5f 69 6e 66 6f 22 7b 22
50 52 49 4d 41 52 59 22 3a 5b 22 61 22 5d 7d 00
04 04 02 61 10 02 62 fa 03 00 00 04 04 02 10 12
31 32 33 34 35 36 37 38 39 04 0e 75 74 66 38 6d
62 34 04 68 69 00 b0 b5 af d2 0c""")  # dts-avro.md §7, as printed there


def test_worked_example_bytes():
    assert len(WORKED_EXAMPLE) == 123
    # The bytes are what the spec's table says they are, read by an independent Avro implementation.
    assert schemaless_reader(io.BytesIO(WORKED_EXAMPLE), SCHEMA_R2, None)["bornTimestamp"] == 1696984408
    for data in (WORKED_EXAMPLE, WORKED_EXAMPLE[:-5]):  # R2, and the same record as R1
        (event,) = formats.create("dts-avro").decode([Record(value=data)]).events
        assert (event.kind, event.op, event.database, event.table) == ("row", "c", "mydb", "t1")
        assert event.after == {"a": 123456789, "b": "hi"}
        assert event.before is None
        assert event.key == {"a": 123456789}
        assert event.columns == [Column("a", "bigint", key=True), Column("b", "varchar")]
        assert event.commit_ts == event.ts_ms == 1696984408000
        assert event.position == pad_position(78, 72469, 1700382)


# ---------------------------------------------------------------------------------------------------------
# Building records with fastavro


def datum(**overrides: Any) -> dict[str, Any]:
    base = {
        "version": 0, "id": 1700382, "sourceTimestamp": 1696984408, "sourcePosition": "72469@78",
        "safeSourcePosition": "72347@78", "sourceTxid": "0", "source": {"sourceType": "MySQL", "version": "8.0.28"},
        "operation": "INSERT", "objectName": "mydb.t1", "processTimestamps": None, "tags": {}, "fields": None,
        "beforeImages": None, "afterImages": None, "bornTimestamp": 1696984408,
    }
    return base | overrides


def avro(data: dict[str, Any], revision: str = "r2") -> bytes:
    out = io.BytesIO()
    if revision == "r1":
        data = {k: v for k, v in data.items() if k != "bornTimestamp"}
    schemaless_writer(out, SCHEMA_R2 if revision == "r2" else SCHEMA_R1, data)
    return out.getvalue()


def v(kind: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    return (f"{NS}.{kind}", fields)


def dt_(year=None, month=None, day=None, hour=None, minute=None, second=None, millis=None):
    return v("DateTime", year=year, month=month, day=day, hour=hour, minute=minute, second=second, millis=millis)


NONE = "NONE"  # fastavro writes an enum symbol in a union as the bare symbol
EMPTY_NULL = "NULL"

# (name, MySQL dataTypeNumber, wire value, canonical value, reported type)
MYSQL_VALUES = [
    ("id", 8, v("Integer", precision=8, value="1"), 1, "bigint"),
    ("big", 8, v("Integer", precision=20, value="18446744073709551615"), 18446744073709551615, "bigint"),
    ("bits", 16, v("Integer", precision=7, value="81"), 81, "bit"),
    ("name", 253, v("Character", charset="utf8mb4", value="测试".encode()), "测试", "varchar"),
    ("gbk_name", 254, v("Character", charset="gbk", value="中文".encode("gbk")), "中文", "char"),
    ("latin", 15, v("Character", charset="latin1", value=b"caf\xe9 \x80"), "café €", "varchar"),
    # MySQL's latin1 keeps the five bytes cp1252 leaves undefined, as the control characters of the same number.
    ("latin_c1", 253, v("Character", charset="latin1", value=b"\x81\x8d\x8f\x90\x9d"), "\x81\x8d\x8f\x90\x9d",
     "varchar"),
    ("vb", 253, v("Character", charset="binary", value=b"\x00\x01\xff"), "AAH/", "varbinary"),
    ("bin", 254, v("Character", charset="binary", value=b"ab"), "YWI=", "binary"),
    ("price", 246, v("Decimal", value="129012.1230000", precision=20, scale=7), "129012.1230000", "decimal(20,7)"),
    ("short", 246, v("Decimal", value="1.5", precision=10, scale=2), "1.50", "decimal(10,2)"),
    ("neg", 0, v("Decimal", value="-0.05", precision=5, scale=2), "-0.05", "decimal(5,2)"),
    ("f", 4, v("Float", value=153.1230010986328, precision=12, scale=0), 153.1230010986328, "float"),
    ("d", 5, v("Float", value=-1.5e300, precision=22, scale=0), -1.5e300, "double"),
    ("ts", 17, v("Timestamp", timestamp=1696984408, millis=120), "2023-10-11T00:33:28.000120Z", "timestamp"),
    ("ts0", 7, v("Timestamp", timestamp=0, millis=0), "1970-01-01T00:00:00Z", "timestamp"),
    ("day", 10, dt_(2024, 1, 2), "2024-01-02", "date"),
    ("newdate", 14, dt_(999, 12, 31), "0999-12-31", "date"),
    ("t_neg", 19, dt_(hour=-838, minute=-59, second=-59), "-838:59:59", "time"),
    ("t_frac", 11, dt_(hour=1, minute=2, second=3, millis=4500), "01:02:03.004500", "time"),
    ("t_neg_frac", 19, dt_(hour=0, minute=0, second=0, millis=-500000), "-00:00:00.500000", "time"),
    ("dtm", 18, dt_(2015, 12, 20, 23, 58, 58, 123456), "2015-12-20 23:58:58.123456", "datetime"),
    ("dtm0", 12, dt_(2015, 12, 20, 23, 58, 58, 0), "2015-12-20 23:58:58", "datetime"),
    ("zero", 12, dt_(0, 0, 0, 0, 0, 0), "0000-00-00 00:00:00", "datetime"),
    ("yr", 13, dt_(year=1970), 1970, "year"),
    ("geo", 255, v("BinaryGeometry", type="POINT", value=b"\x01\x01\x00"), "AQEA", "geometry"),
    ("geo_txt", 255, v("TextGeometry", type="POINT", value="POINT(1 2)"), "POINT(1 2)", "text"),
    ("blob", 252, v("BinaryObject", type="BLOB", value=b"%PDF-1.4"), "JVBERi0xLjQ=", "blob"),
    ("tblob", 249, v("BinaryObject", type="BLOB", value=b"\x89PNG"), "iVBORw==", "tinyblob"),
    ("txt", 252, v("BinaryObject", type="TEXT", value="测试".encode()), "测试", "text"),
    ("ltxt", 251, v("Character", charset="utf8mb4", value=b"long"), "long", "longtext"),
    ("js", 245, v("TextObject", type="JSON", value='{"a": 1}'), '{"a": 1}', "json"),
    ("en", 247, v("TextObject", type="ENUM", value="b"), "b", "enum"),
    ("st", 248, v("TextObject", type="SET", value="a,c"), "a,c", "set"),
    ("nul", 3, None, None, "int"),
    ("empty_null", 3, EMPTY_NULL, None, "int"),
    ("tz", 999, v("TimestampWithTimeZone", value=dt_(2020, 1, 1, 8, 0, 0)[1], timezone="+08:00"),
     "2020-01-01T00:00:00Z", "timestamp"),
    ("tz_region", 999, v("TimestampWithTimeZone", value=dt_(2020, 1, 2, 3, 4, 5, 7)[1], timezone="Asia/Shanghai"),
     "2020-01-01T19:04:05.000007Z", "timestamp"),
    ("unknown_int", 999, v("Integer", precision=1, value="-7"), -7, "bigint"),
]


def mysql_record(operation: str = "INSERT", **overrides: Any) -> dict[str, Any]:
    fields = [{"name": name, "dataTypeNumber": code} for name, code, *_ in MYSQL_VALUES]
    image = [wire for _, _, wire, _, _ in MYSQL_VALUES]
    return datum(operation=operation, fields=fields, afterImages=image,
                 tags={"pk_uk_info": '{"PRIMARY":["id"]}', "readerThroughoutTime": "1696984408123"}) | overrides


def decode(*values: bytes | None, **options: Any) -> formats.Decoded:
    return formats.create("dts-avro", options).decode([Record(value=value, offset=i) for i, value in
                                                       enumerate(values)])


def one(value: bytes) -> ChangeEvent:
    out = decode(value)
    assert not out.failures, out.failures[0].reason
    (event,) = out.events
    return event


def test_every_value_type():
    event = one(avro(mysql_record()))
    assert event.after == {name: value for name, _, _, value, _ in MYSQL_VALUES}
    types = {c.name: c.type for c in event.columns}
    assert types == {name: type_text for name, *_, type_text in MYSQL_VALUES}
    assert [c.name for c in event.columns if c.key] == ["id"]
    assert event.key == {"id": 1}


def test_null_values_report_the_text_variant_of_their_type():
    fields = [{"name": "vb", "dataTypeNumber": 253}, {"name": "price", "dataTypeNumber": 246},
              {"name": "b", "dataTypeNumber": 252}]
    event = one(avro(datum(fields=fields, afterImages=[None, None, None])))
    assert [c.type for c in event.columns] == ["varchar", "decimal", "text"]


def test_both_schema_revisions_decode_alike():
    record = mysql_record()
    r2, r1 = avro(record, "r2"), avro(record, "r1")
    assert r2.startswith(r1) and len(r2) > len(r1)
    assert one(r1).after == one(r2).after


def test_trailing_bytes_are_logged_and_ignored(caplog):
    value = avro(mysql_record()) + b"\x02\x04"
    fmt = formats.create("dts-avro")
    with caplog.at_level(logging.WARNING, logger="cdclake.formats.dts.avro"):
        out = fmt.decode([Record(value=value), Record(value=value)])
    assert [e.after["id"] for e in out.events] == [1, 1]
    assert len([r for r in caplog.records if "trailing" in r.getMessage()]) == 1


# ---------------------------------------------------------------------------------------------------------
# Operations


def test_update_delete_ddl_and_init():
    fields = [{"name": "a", "dataTypeNumber": 8}, {"name": "b", "dataTypeNumber": 253}]
    tags = {"pk_uk_info": '{"PRIMARY":["a"]}'}
    old = [v("Integer", precision=8, value="1"), v("Character", charset="utf8", value=b"x")]
    new = [v("Integer", precision=8, value="1"), v("Character", charset="utf8", value=b"y")]
    update = one(avro(datum(operation="UPDATE", fields=fields, tags=tags, beforeImages=old, afterImages=new)))
    assert (update.op, update.before, update.after, update.key) == ("u", {"a": 1, "b": "x"}, {"a": 1, "b": "y"},
                                                                     {"a": 1})
    delete = one(avro(datum(operation="DELETE", fields=fields, tags=tags, beforeImages=old)))
    assert (delete.op, delete.before, delete.after) == ("d", {"a": 1, "b": "x"}, None)
    init = one(avro(datum(operation="INIT", fields=fields, tags=tags, afterImages=new)))
    assert (init.op, init.after) == ("r", {"a": 1, "b": "y"})
    ddl = one(avro(datum(operation="DDL", objectName="mydb",
                         afterImages="create table t1(a bigint primary key, b varchar(100))",
                         tags={"GTID": "x:1", "commitTimestamp": "1696984408"})))
    assert (ddl.kind, ddl.database, ddl.table, ddl.ddl, ddl.commit_ts) == (
        "ddl", "mydb", "t1", "create table t1(a bigint primary key, b varchar(100))", 1696984408000)
    assert ddl.position == pad_position(78, 72469, 1700382)


@pytest.mark.parametrize(("sql", "kind", "database", "table"), [
    ("TRUNCATE TABLE t1", "truncate", "mydb", "t1"),
    ("truncate `other`.`t 2`", "truncate", "other", "t 2"),
    ("TRUNCATE mydb.t1;", "truncate", "mydb", "t1"),
    ("ALTER TABLE t1 ADD COLUMN c int", "ddl", "mydb", "t1"),
    ("/* by DTS */ DROP TABLE IF EXISTS `mydb`.`t1`", "ddl", "mydb", "t1"),
    ("CREATE INDEX i ON t1 (a)", "ddl", "mydb", "t1"),
    ("RENAME TABLE t1 TO t2", "ddl", "mydb", "t1"),
    ("CREATE DATABASE mydb", "ddl", "mydb", None),
])
def test_ddl_table_comes_from_the_statement(sql, kind, database, table):
    event = one(avro(datum(operation="DDL", objectName="mydb", afterImages=sql)))
    assert (event.kind, event.database, event.table, event.ddl) == (kind, database, table, sql)


@pytest.mark.parametrize("operation", ["BEGIN", "COMMIT", "ROLLBACK", "ABORT", "HEARTBEAT", "CHECKPOINT", "COMMAND",
                                       "FILL", "FINISH", "CONTROL", "RDB", "NOOP"])
def test_control_operations_are_skipped(operation):
    out = decode(avro(datum(operation=operation, objectName=None)))
    assert (out.events, out.failures, out.skipped) == ([], [], 1)


def test_placeholders_and_null_values_are_skipped():
    out = decode(None, b"\x00" * 48, b"\xff" * 30)
    assert (out.events, out.failures, out.skipped) == ([], [], 3)


def test_update_with_values_not_captured():
    fields = [{"name": "a", "dataTypeNumber": 8}, {"name": "lob", "dataTypeNumber": 252},
              {"name": "c", "dataTypeNumber": 3}]
    before = [v("Integer", precision=8, value="1"), v("BinaryObject", type="TEXT", value=b"big"), NONE]
    after = [v("Integer", precision=8, value="1"), NONE, v("Integer", precision=4, value="5")]
    event = one(avro(datum(operation="UPDATE", fields=fields, beforeImages=before, afterImages=after)))
    assert event.before == {"a": 1, "lob": "big", "c": 5}
    assert event.after == {"a": 1, "lob": "big", "c": 5}
    assert list(event.after) == ["a", "lob", "c"]


def test_keys_from_pk_uk_info():
    fields = [{"name": "a", "dataTypeNumber": 8}, {"name": "b", "dataTypeNumber": 8}]
    image = [v("Integer", precision=8, value="1"), v("Integer", precision=8, value="2")]

    def key_of(tags):
        return one(avro(datum(fields=fields, afterImages=image, tags=tags))).key

    assert key_of({"pk_uk_info": '{"PRIMARY":["b","a"]}'}) == {"b": 2, "a": 1}
    assert key_of({"pk_uk_info": '{"uk_b":["b"]}'}) == {"b": 2}
    assert key_of({"pk_uk_info": '{"uk_x":["x"],"uk_a":["a"]}'}) == {"a": 1}  # an index naming absent columns
    assert key_of({}) is None


@pytest.mark.parametrize(("name", "database", "table"), [
    ("mydb.t1", "mydb", "t1"),
    ("my\\u002Edb.t\\u002E1", "my.db", "t.1"),
    ("db.public.orders", "db", "public.orders"),
])
def test_object_names(name, database, table):
    fields = [{"name": "a", "dataTypeNumber": 3}]
    event = one(avro(datum(objectName=name, fields=fields, afterImages=[v("Integer", precision=4, value="1")])))
    assert (event.database, event.table) == (database, table)


@pytest.mark.parametrize(("source_position", "position"), [
    ("72469@78", pad_position(78, 72469, 5)),
    ("123456", pad_position(123456, 5)),
    ("scn:77/seq:3", pad_position("scn:77/seq:3", 5)),
])
def test_positions(source_position, position):
    fields = [{"name": "a", "dataTypeNumber": 3}]
    event = one(avro(datum(sourcePosition=source_position, id=5, fields=fields,
                           afterImages=[v("Integer", precision=4, value="1")])))
    assert event.position == position


def test_binlog_positions_order_as_text():
    fields = [{"name": "a", "dataTypeNumber": 3}]
    image = [v("Integer", precision=4, value="1")]
    positions = [one(avro(datum(sourcePosition=p, id=i, fields=fields, afterImages=image))).position
                 for i, p in enumerate(["999@9", "4@10", "120@10", "120@10"])]
    assert positions == sorted(positions) and len(set(positions)) == 4


def test_postgresql_source():
    fields = [{"name": "id", "dataTypeNumber": 20}, {"name": "flag", "dataTypeNumber": 16},
              {"name": "at", "dataTypeNumber": 1184}, {"name": "doc", "dataTypeNumber": 3802},
              {"name": "raw", "dataTypeNumber": 17}, {"name": "amount", "dataTypeNumber": 1700},
              {"name": "local", "dataTypeNumber": 1114}]
    image = [v("Integer", precision=8, value="9"), v("TextObject", type="BOOL", value="true"),
             v("TimestampWithTimeZone", value=dt_(2020, 1, 1, 8, 0, 0, 500000)[1], timezone="+08"),
             v("BinaryObject", type="JSONB", value=b'{"k": 1}'), v("BinaryObject", type="BYTEA", value=b"\x00"),
             v("Decimal", value="NaN", precision=0, scale=0), dt_(2020, 1, 1, 8, 0, 0, 5)]
    event = one(avro(datum(source={"sourceType": "PostgreSQL", "version": "14"}, objectName="db.public.t",
                           fields=fields, afterImages=image)))
    assert event.after == {"id": 9, "flag": True, "at": "2020-01-01T00:00:00.500000Z", "doc": '{"k": 1}',
                           "raw": "AA==", "amount": "NaN", "local": "2020-01-01 08:00:00.000005"}
    assert [c.type for c in event.columns] == ["bigint", "boolean", "timestamp", "jsonb", "bytea", "decimal",
                                               "datetime"]


def test_oracle_source():
    fields = [{"name": "n", "dataTypeNumber": 2}, {"name": "d", "dataTypeNumber": 12},
              {"name": "ts9", "dataTypeNumber": 180}, {"name": "tz", "dataTypeNumber": 181},
              {"name": "s", "dataTypeNumber": 1}]
    before = [v("Decimal", value="12.5", precision=10, scale=2), dt_(2020, 1, 2, 3, 4, 5),
              dt_(2020, 1, 2, 3, 4, 5, 123456789), NONE, v("Character", charset="AL32UTF8", value=b"old")]
    after = [v("Decimal", value="13", precision=10, scale=2), dt_(2020, 1, 2, 3, 4, 5),
             dt_(2020, 1, 2, 3, 4, 5, 123456000), v("TimestampWithTimeZone", value=dt_(2020, 1, 2, 3, 4, 5, 1000)[1],
                                                   timezone="Asia/Shanghai"),
             v("Character", charset="UTF-8", value=b"new")]
    event = one(avro(datum(source={"sourceType": "Oracle", "version": "19c"}, operation="UPDATE",
                           objectName="ORCL.SCOTT.EMP", sourcePosition="998877", fields=fields, beforeImages=before,
                           afterImages=after)))
    assert (event.database, event.table) == ("ORCL", "SCOTT.EMP")
    assert event.after == {"n": "13.00", "d": "2020-01-02 03:04:05", "ts9": "2020-01-02 03:04:05.123456",
                           "tz": "2020-01-01T19:04:05.000001Z", "s": "new"}
    assert event.before == {"n": "12.50", "d": "2020-01-02 03:04:05", "ts9": "2020-01-02 03:04:05.123456789",
                            "tz": "2020-01-01T19:04:05.000001Z", "s": "old"}
    assert [c.type for c in event.columns] == ["decimal(10,2)", "datetime", "datetime", "timestamp", "varchar2"]
    assert event.position == pad_position(998877, 1700382)


def test_unknown_charset_keeps_the_bytes_and_is_reported(caplog):
    # dts-avro.md §5.2: "Unknown charset: keep bytes and report." (ZHS16GBK: an Oracle charset name.)
    fields = [{"name": "id", "dataTypeNumber": 3}, {"name": "s", "dataTypeNumber": 253}]
    image = [v("Integer", precision=4, value="1"), v("Character", charset="ZHS16GBK", value="中".encode("gbk"))]
    value = avro(datum(fields=fields, afterImages=image))
    with caplog.at_level(logging.WARNING, logger="cdclake.formats.dts.types"):
        out = decode(value, value)
    assert not out.failures, out.failures[0].reason
    assert [e.after for e in out.events] == [{"id": 1, "s": V.b64("中".encode("gbk"))}] * 2
    assert [c.type for c in out.events[0].columns] == ["int", "varbinary"]
    assert len([r for r in caplog.records if "unknown charset 'zhs16gbk'" in r.getMessage()]) == 1


def test_oracle_negative_intervals_keep_their_sign():
    # dts-avro.md §5.1: interval components "all carrying the sign when negative", so INTERVAL '-0-2' YEAR TO
    # MONTH is year 0, month -2, and INTERVAL '-3 0:0:0' DAY TO SECOND is day -3 with zero clock parts.
    fields = [{"name": "ym", "dataTypeNumber": 182}, {"name": "ym_neg", "dataTypeNumber": 182},
              {"name": "ds", "dataTypeNumber": 183}, {"name": "ds_neg", "dataTypeNumber": 183}]
    image = [dt_(year=0, month=-2), dt_(year=-1, month=-2), dt_(day=-3, hour=0, minute=0, second=0),
             dt_(day=0, hour=-4, minute=-5, second=-6, millis=-7000)]
    event = one(avro(datum(source={"sourceType": "Oracle", "version": "19c"}, objectName="ORCL.S.T",
                           fields=fields, afterImages=image)))
    assert event.after == {"ym": "-0-02", "ym_neg": "-1-02", "ds": "-3 00:00:00", "ds_neg": "-0 04:05:06.000007"}
    # The type codes name the interval types; an interval is neither a DATE nor a TIME.
    assert [c.type for c in event.columns] == ["interval year to month"] * 2 + ["interval day to second"] * 2


# ---------------------------------------------------------------------------------------------------------
# Round trips: the encoder (fastavro) and the decoder (hand-written) must agree

COLUMNS = columns_of(ALL_TYPES)
# The type each strategy type comes back as: DTS carries MySQL binlog type codes (no lengths, no unsigned)
# plus, for DECIMAL, the value's precision and scale.
DTS_TYPES = {
    "tinyint unsigned": "tinyint", "smallint unsigned": "smallint", "mediumint unsigned": "mediumint",
    "int unsigned": "int", "bigint unsigned": "bigint", "bit(1)": "bit", "bit(10)": "bit", "bit(64)": "bit",
    "datetime(3)": "datetime", "datetime(6)": "datetime", "timestamp(6)": "timestamp", "time(6)": "time",
    "char(10)": "char", "varchar(255)": "varchar", "binary(16)": "binary", "varbinary(64)": "varbinary",
    "enum('a','b','c d')": "enum", "set('x','y','z')": "set",
}
NULL_TYPES = {"binary(16)": "char", "varbinary(64)": "varchar", "decimal(10,2)": "decimal",
              "decimal(38,10)": "decimal", "decimal(65,0)": "decimal", "blob": "text"}


def as_dts(row: dict | None) -> dict | None:
    """What DTS carries of a canonical row: fractions of a second without the column's precision."""
    if row is None:
        return None
    out = dict(row)
    for col in COLUMNS:
        value, family = out.get(col.name), parse_type(col.type).family
        if value is None:
            continue
        if family == "datetime":
            out[col.name] = V.datetime_text(V.parse_datetime_text(value))
        elif family == "timestamp":
            out[col.name] = V.timestamp_text_from_micros(V.micros_from_datetime_text(value))
        elif family == "time":
            out[col.name] = V.time_text_from_micros(V.micros_from_time_text(value))
    return out


@st.composite
def row_events(draw):
    op = draw(st.sampled_from("cudr"))
    before = draw(rows(COLUMNS)) if op in "ud" else None
    after = draw(rows(COLUMNS)) if op in "cur" else None
    file, offset, ident = draw(st.integers(1, 999_999)), draw(st.integers(4, 2**40)), draw(st.integers(0, 2**62))
    seconds = draw(st.integers(0, 2**33))
    image = after if after is not None else before
    return ChangeEvent(kind="row", op=op, database=draw(st.sampled_from(["db", "d.b"])), table="t",
                       key={"id": image["id"]}, before=before, after=after, columns=COLUMNS,
                       commit_ts=seconds * 1000, ts_ms=seconds * 1000, position=pad_position(file, offset, ident))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(row_events(), min_size=1, max_size=5), st.sampled_from(["r1", "r2"]))
def test_round_trip_every_type(events, revision):
    fmt = formats.create("dts-avro", {"schema-revision": revision})
    records = fmt.encode(events)
    out = fmt.decode(records)
    assert not out.failures, out.failures[0].reason
    assert len(out.events) == len(events)
    for got, sent in zip(out.events, events, strict=True):
        assert (got.kind, got.op, got.database, got.table, got.key) == ("row", sent.op, sent.database, "t", sent.key)
        assert got.before == as_dts(sent.before)
        assert got.after == as_dts(sent.after)
        assert (got.commit_ts, got.ts_ms, got.position) == (sent.commit_ts, sent.ts_ms, sent.position)
        image = sent.after if sent.after is not None else sent.before
        expected = [Column(c.name, DTS_TYPES.get(c.type, c.type) if image[c.name] is not None or c.key
                           else NULL_TYPES.get(c.type, DTS_TYPES.get(c.type, c.type)), c.key) for c in COLUMNS]
        if sent.op == "u":  # a binary or decimal type is learnt from either image
            expected = [Column(e.name, DTS_TYPES.get(c.type, c.type), e.key)
                        if sent.before[c.name] is not None else e for e, c in zip(expected, COLUMNS, strict=True)]
        assert got.columns == expected
    for record, sent in zip(records, events, strict=True):  # what an independent reader sees
        written = schemaless_reader(io.BytesIO(record.value), SCHEMA_R2 if revision == "r2" else SCHEMA_R1, None)
        assert written["sourceTimestamp"] == sent.commit_ts // 1000
        assert written["operation"] == {"c": "INSERT", "u": "UPDATE", "d": "DELETE", "r": "INIT"}[sent.op]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["ddl", "truncate"]), st.integers(0, 2**33)), min_size=1, max_size=5))
def test_round_trip_ddl_and_truncate(items):
    events = [ChangeEvent(kind=kind, database="db", table="t", commit_ts=s * 1000,
                          ts_ms=s * 1000, ddl="ALTER TABLE t ADD c int" if kind == "ddl" else "TRUNCATE TABLE t",
                          position=pad_position(3, 100 + i, i))
              for i, (kind, s) in enumerate(items)]
    fmt = formats.create("dts-avro")
    got = fmt.decode(fmt.encode(events)).events
    assert [(e.kind, e.database, e.table, e.ddl, e.commit_ts, e.position) for e in got] == [
        (e.kind, e.database, e.table, e.ddl, e.commit_ts, e.position) for e in events]


def test_format_pickles_after_use():
    fmt = formats.create("dts-avro")
    value = avro(mysql_record())
    expected = fmt.decode([Record(value=value)]).events
    assert pickle.loads(pickle.dumps(fmt)).decode([Record(value=value)]).events == expected


# ---------------------------------------------------------------------------------------------------------
# Bad input


def test_every_truncation_fails_cleanly():
    value = avro(mysql_record())
    r1_length = len(avro(mysql_record(), "r1"))
    fmt = formats.create("dts-avro")
    for cut in range(PLACEHOLDER_BYTES + 1, len(value)):
        out = fmt.decode([Record(value=value[:cut])])
        if cut == r1_length:  # exactly the older revision of the same record
            assert len(out.events) == 1
            continue
        assert not out.events, cut
        assert len(out.failures) == 1 and "truncated DTS Avro datum" in out.failures[0].reason, cut


def bad(**overrides: Any) -> str:
    out = decode(avro(mysql_record(**overrides)))
    assert not out.events and len(out.failures) == 1
    return out.failures[0].reason


def patched(value: bytes, old: bytes, new: bytes) -> bytes:
    assert value.count(old) == 1
    return value.replace(old, new)


def test_bad_input_fails_with_a_reason():
    value = avro(mysql_record())
    # operation index 40 (zig-zag 80 = 0x50) where INSERT (0x00) was
    version = value.index(b"\x0c8.0.28")
    operation = version + 7
    unknown_op = value[:operation] + b"\x50" + value[operation + 1:]  # zig-zag 80 = index 40
    assert "unknown operation index 40" in decode(unknown_op).failures[0].reason
    unknown_source = value[:version - 1] + b"\x40" + value[version:]
    assert "unknown source type index 32" in decode(unknown_source).failures[0].reason
    bad_utf8 = patched(value, b"\x0eutf8mb4\x0c" + "测试".encode(), b"\x0eutf8mb4\x0c\xff\xfe\xfd\xfc\xfb\xfa")
    reason = decode(bad_utf8).failures[0].reason
    assert "column 'name'" in reason and "utf-8" in reason
    not_a_number = patched(value, b"\x2818446744073709551615", b"\x2818446744073709551x15")
    assert "column 'big'" in decode(not_a_number).failures[0].reason
    branch = patched(value, b"\x02\x10\x021", b"\x40\x10\x021")  # union branch 32 for the first value
    assert "unknown value union branch 32" in decode(branch).failures[0].reason


def test_shape_errors():
    fields = [{"name": "a", "dataTypeNumber": 3}, {"name": "b", "dataTypeNumber": 3}]
    one_value = [v("Integer", precision=4, value="1")]
    two = one_value * 2
    assert "afterImages has 1 values for 2 fields" in bad(fields=fields, afterImages=one_value)
    assert "more values than the 2 fields" in bad(fields=fields, afterImages=two + one_value)
    assert "without fields" in bad(fields=None, afterImages=None)
    assert "holds values but the record has no fields" in bad(fields=None)
    assert "fields given as a string" in bad(fields="a,b")
    assert "without afterImages" in bad(fields=fields, afterImages=None)
    assert "UPDATE record without both" in bad(operation="UPDATE")
    assert "DELETE record without beforeImages" in bad(operation="DELETE", beforeImages=None)
    assert "image given as a string" in bad(afterImages="x" * 60)
    assert "DDL record without the statement" in bad(operation="DDL")
    assert "pk_uk_info is not JSON" in bad(tags={"pk_uk_info": "{nope"})
    assert "more than three components" in bad(objectName="a.b.c.d")
    assert "unknown time zone 'Mars/Base'" in bad(
        fields=[{"name": "z", "dataTypeNumber": 999}],
        afterImages=[v("TimestampWithTimeZone", value=dt_(2020, 1, 1, 0, 0, 0)[1], timezone="Mars/Base")])
    assert "outside 0..999999" in bad(fields=[{"name": "z", "dataTypeNumber": 7}],
                                      afterImages=[v("Timestamp", timestamp=1, millis=1_000_000)])
    # A Timestamp beyond the calendar fails like any bad value: naming the column, not as a bare OverflowError.
    reason = bad(fields=[{"name": "z", "dataTypeNumber": 17}], afterImages=[v("Timestamp", timestamp=10**12, millis=0)])
    assert reason.startswith("afterImages, column 'z' (timestamp): ") and "out of range" in reason


def test_encoder_writes_what_the_spec_example_shows():
    event = ChangeEvent(kind="row", op="c", database="mydb", table="t1", key={"a": 123456789},
                        after={"a": 123456789, "b": "hi"},
                        columns=[Column("a", "bigint", True), Column("b", "varchar")],
                        commit_ts=1696984408000, position=pad_position(78, 72469, 1700382))
    (record,) = formats.create("dts-avro").encode([event])
    written = schemaless_reader(io.BytesIO(record.value), SCHEMA_R2, None, return_record_name=True)
    assert written["operation"] == "INSERT" and written["objectName"] == "mydb.t1"
    assert written["sourcePosition"] == "72469@78" and written["id"] == 1700382
    assert written["fields"] == [{"name": "a", "dataTypeNumber": 8}, {"name": "b", "dataTypeNumber": 253}]
    assert written["afterImages"][0] == (f"{NS}.Integer", {"precision": 0, "value": "123456789"})
    assert written["afterImages"][1] == (f"{NS}.Character", {"charset": "utf8mb4", "value": b"hi"})
    assert json.loads(written["tags"]["pk_uk_info"]) == {"PRIMARY": ["a"]}



def test_multi_block_arrays_are_read():
    # The worked example's afterImages, re-blocked: two blocks of one, then negative counts with sizes.
    head = WORKED_EXAMPLE.index(bytes.fromhex("0404021012"))
    first, second = WORKED_EXAMPLE[head + 2:head + 14], WORKED_EXAMPLE[head + 14:head + 26]
    tail = WORKED_EXAMPLE[head + 27:]
    for blocks in (b"\x02" + first + b"\x02" + second, b"\x01\x18" + first + b"\x01\x18" + second):
        value = WORKED_EXAMPLE[:head + 1] + blocks + b"\x00" + tail
        assert one(value).after == {"a": 123456789, "b": "hi"}


@pytest.mark.parametrize("make", ["mysql", "update_not_captured"])
def test_generic_reader_agrees_with_the_compiled_one(make, monkeypatch):
    if make == "mysql":
        value = avro(mysql_record())
    else:
        fields = [{"name": "a", "dataTypeNumber": 8}, {"name": "lob", "dataTypeNumber": 252}]
        value = avro(datum(operation="UPDATE", fields=fields, beforeImages=[v("Integer", precision=8, value="1"), NONE],
                           afterImages=[v("Integer", precision=8, value="1"),
                                        v("BinaryObject", type="BLOB", value=b"\x00")]))
    compiled = one(value)
    monkeypatch.setattr("cdclake.formats.dts.avro.compile_image_reader", lambda layout, codecs_: lambda *args: None)
    generic = one(value)
    assert generic == compiled


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                                 HealthCheck.function_scoped_fixture])
@given(st.lists(row_events(), min_size=1, max_size=5))
def test_compiled_reader_agrees_with_the_generic_one_on_every_type(monkeypatch, events):
    # Every type, with dates and datetimes of any year (the compiled reader reads years 64..8191 in two
    # bytes inline and leaves the others to the general DateTime path), nulls, and several tables' worth of
    # records through one decoder (its caches of header bytes must not mix them).
    records = formats.create("dts-avro").encode(events)
    compiled = formats.create("dts-avro").decode(records)
    with monkeypatch.context() as patch:
        patch.setattr("cdclake.formats.dts.avro.compile_image_reader", lambda layout, codecs_: lambda *args: None)
        generic = formats.create("dts-avro").decode(records)
    assert not generic.failures, generic.failures[0].reason
    assert [msgspec.json.encode(e) for e in compiled.events] == [msgspec.json.encode(e) for e in generic.events]
    assert not compiled.failures


def test_header_caches_do_not_mix_tables_or_timestamps():
    first = avro(mysql_record())
    other = avro(datum(objectName="shop.other", sourceTimestamp=1_700_000_123,
                       fields=[{"name": "a", "dataTypeNumber": 8}],
                       afterImages=[v("Integer", precision=8, value="7")]))
    fmt = formats.create("dts-avro")
    out = fmt.decode([Record(value=value, offset=i) for i, value in enumerate([first, other, first, other])])
    assert not out.failures, out.failures[0].reason
    alone = [formats.create("dts-avro").decode([Record(value=value, offset=i)]).events[0]
             for i, value in enumerate([first, other, first, other])]
    assert out.events == alone
    assert out.events[1].after == {"a": 7} and out.events[1].commit_ts == 1_700_000_123_000


# ---------------------------------------------------------------------------------------- geometry


@st.composite
def wkb_geometries(draw: st.DrawFn, depth: int = 0) -> bytes:
    """ISO WKB of any kind and dimension, in either byte order."""
    order = draw(st.sampled_from([0, 1]))
    endian = "<" if order else ">"
    dimension_code = draw(st.sampled_from([0, 1, 2, 3]))
    dims = {0: 2, 1: 3, 2: 3, 3: 4}[dimension_code]
    kind = draw(st.sampled_from([1, 2, 3, 4, 5, 6, 7] if depth < 2 else [1, 2, 3]))
    coordinate = st.floats(-1e7, 1e7, allow_nan=False, allow_subnormal=False)

    def points(n: int) -> bytes:
        return b"".join(struct.pack(endian + "d" * dims, *draw(st.lists(coordinate, min_size=dims, max_size=dims)))
                        for _ in range(n))

    head = bytes([order]) + struct.pack(endian + "I", dimension_code * 1000 + kind)
    if kind == 1:
        return head + points(1)
    n = draw(st.integers(0, 3))
    if kind == 2:
        body = points(n)
    elif kind == 3:
        body = b"".join(struct.pack(endian + "I", k) + points(k) for k in draw(st.lists(st.integers(0, 4), min_size=n,
                                                                                         max_size=n)))
    else:
        body = b"".join(draw(wkb_geometries(depth + 1)) for _ in range(n))
    return head + struct.pack(endian + "I", n) + body


@settings(max_examples=300)
@given(wkb_geometries(), st.sampled_from([0, 4326, 3857, 4269, 32633, 2000000]))
def test_mysql_geometry_loses_its_srid_prefix(wkb, srid):
    # dts-avro.md §5: BinaryGeometry may hold MySQL's own form, a little-endian SRID before the WKB
    assert V.geometry_wkb(srid.to_bytes(4, "little") + wkb) == wkb
    assert V.geometry_wkb(wkb) == wkb


def test_binary_geometry_with_an_srid_reads_as_debeziums_wkb():
    wkb = bytes.fromhex("0101000000000000000000f03f0000000000000040")  # POINT(1 2), little-endian
    for raw in (bytes.fromhex("e6100000") + wkb, bytes(4) + wkb, wkb):
        record = mysql_record()
        record["afterImages"] = [v("BinaryGeometry", type="POINT", value=raw) if name == "geo" else image
                                 for (name, *_), image in zip(MYSQL_VALUES, record["afterImages"], strict=True)]
        assert one(avro(record)).after["geo"] == V.b64(wkb)
    # bytes that are neither stay as they were sent
    assert V.geometry_wkb(b"\xe6\x10\x00\x00\x01\x01") == b"\xe6\x10\x00\x00\x01\x01"


# ------------------------------------------------------------------------------------------- sharded sources


def test_rows_of_a_sharded_source_land_in_their_logical_table():
    # dts-avro.md §2.3: l_db_name / l_tb_name name the logical table of a DRDS/PolarDB-X physical shard
    def shard(db: str, table: str, **tags: str) -> bytes:
        record = mysql_record(objectName=f"{db}.{table}")
        record["tags"] = {**record["tags"], "thread_id": "7", **tags}
        return avro(record)

    values = [shard("shop_0001", "orders_03", l_db_name="shop", l_tb_name="orders"),
              shard("shop_0002", "orders_11", l_tb_name="orders", l_db_name="shop"),
              shard("shop_0002", "items_11", l_tb_name="items"),
              shard("plain", "t")]
    out = decode(*values)
    assert not out.failures, out.failures[0].reason
    assert [(e.database, e.table) for e in out.events] == [("shop", "orders"), ("shop", "orders"),
                                                           ("shop_0002", "items"), ("plain", "t")]
    physical = decode(*values, shards="physical")
    assert [(e.database, e.table) for e in physical.events] == [("shop_0001", "orders_03"), ("shop_0002", "orders_11"),
                                                                ("shop_0002", "items_11"), ("plain", "t")]
    # a shard's DDL stays on the shard: truncating one must not empty the logical table
    ddl = datum(operation="DDL", objectName="shop_0001", afterImages="TRUNCATE TABLE orders_03",
                tags={"l_db_name": "shop", "l_tb_name": "orders"})
    event = one(avro(ddl))
    assert (event.kind, event.database, event.table) == ("truncate", "shop_0001", "orders_03")

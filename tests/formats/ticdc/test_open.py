"""TiCDC Open Protocol: the spec's vectors (ticdc-open-protocol.md §10), the upstream binary fixtures, round
trips over every column type, and bad input."""

from __future__ import annotations

import base64
import json
import pickle
import struct

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cdclake import formats
from cdclake.cli.main import app
from cdclake.formats.ticdc.open_protocol import go_quote_bytes, go_unquote_bytes
from cdclake.model import values as V
from cdclake.model.events import ChangeEvent, Column, pad_position
from cdclake.model.records import Record, write_records
from cdclake.model.types import parse_type
from tests.helpers.strategies import ALL_TYPES, columns_of, rows

EXAMPLES = "tiflow/open-protocol-java-example"


def u64(n: int) -> bytes:
    return struct.pack(">Q", n)


def frame(*pairs: tuple[str, str | bytes]) -> Record:
    """A record holding the given (event key JSON, event value) pairs, framed as TiCDC frames them."""
    key = u64(1) + b"".join(u64(len(k.encode())) + k.encode() for k, _ in pairs)
    value = b"".join(u64(len(v if isinstance(v, bytes) else v.encode()))
                     + (v if isinstance(v, bytes) else v.encode()) for _, v in pairs)
    return Record(key=key, value=value)


def decode(*records: Record, **options: object) -> formats.Decoded:
    return formats.create("ticdc-open", options).decode(list(records))


def one(record: Record, **options: object) -> ChangeEvent:
    out = decode(record, **options)
    assert not out.failures, out.failures[0].reason
    assert len(out.events) == 1
    return out.events[0]


def failure(record: Record, **options: object) -> str:
    out = decode(record, **options)
    assert not out.events
    assert len(out.failures) == 1
    return out.failures[0].reason


# ---------------------------------------------------------------------------------------------------------
# §10.1 the documentation's example stream (legacy encoding: VARCHAR as base64, no flags)

DDL_KEY = '{"ts":415508856908021766,"scm":"test","tbl":"t1","t":2}'
DDL_VALUE = '{"q":"CREATE TABLE test.t1(id int primary key, val varchar(16))","t":3}'
RESOLVED_1 = '{"ts":415508856908021766,"t":3}'
ROW_KEY_1 = '{"ts":415508878783938562,"scm":"test","tbl":"t1","t":1}'
ROW_KEY_2 = '{"ts":415508881418485761,"scm":"test","tbl":"t1","t":1}'
RESOLVED_2 = '{"ts":415508881038376963,"t":3}'


def row_value(op: str, ident: int, val: str | None = None) -> str:
    cols = {"id": {"t": 3, "h": True, "v": ident}}
    if val is not None:
        cols["val"] = {"t": 15, "v": val}
    return json.dumps({op: cols}, separators=(",", ":"))


EXAMPLE_STREAM = [  # (partition, key, value) of records 1..14
    (0, DDL_KEY, DDL_VALUE), (0, RESOLVED_1, ""), (1, DDL_KEY, DDL_VALUE), (1, RESOLVED_1, ""),
    (0, ROW_KEY_1, row_value("u", 1, "YWE=")), (1, ROW_KEY_1, row_value("u", 2, "YmI=")),
    (0, ROW_KEY_1, row_value("u", 3, "Y2M=")), (0, ROW_KEY_1, row_value("u", 3, "Y2M=")),
    (0, ROW_KEY_2, row_value("d", 1)), (1, ROW_KEY_2, row_value("d", 2)),
    (0, ROW_KEY_2, row_value("u", 3, "ZGQ=")), (0, ROW_KEY_2, row_value("u", 4, "ZWU=")),
    (0, RESOLVED_2, ""), (1, RESOLVED_2, ""),
]


def example_records() -> list[Record]:
    records = []
    for offset, (partition, key, value) in enumerate(EXAMPLE_STREAM):
        record = frame((key, value))
        records.append(Record(key=record.key, value=record.value, topic="t", partition=partition, offset=offset))
    return records


def test_spec_example_stream_decodes_to_the_documented_meaning():
    out = decode(*example_records())
    assert not out.failures
    events = out.events
    assert [e.kind for e in events] == ["ddl", "resolved", "ddl", "resolved", *["row"] * 8, "resolved", "resolved"]
    ddl = events[0]
    assert (ddl.database, ddl.table, ddl.ddl) == ("test", "t1", "CREATE TABLE test.t1(id int primary key, "
                                                                 "val varchar(16))")
    assert ddl.commit_ts == 415508856908021766  # exact: above 2**53
    assert events[1].commit_ts == 415508856908021766 and events[1].position is None
    rows_ = events[4:12]
    assert [(e.op, e.key, e.after, e.before) for e in rows_] == [
        ("c", {"id": 1}, {"id": 1, "val": "aa"}, None),
        ("c", {"id": 2}, {"id": 2, "val": "bb"}, None),
        ("c", {"id": 3}, {"id": 3, "val": "cc"}, None),
        ("c", {"id": 3}, {"id": 3, "val": "cc"}, None),
        ("d", {"id": 1}, None, {"id": 1}),
        ("d", {"id": 2}, None, {"id": 2}),
        ("c", {"id": 3}, {"id": 3, "val": "dd"}, None),  # an update with old value off looks like an insert
        ("c", {"id": 4}, {"id": 4, "val": "ee"}, None),
    ]
    assert all(e.commit_ts == 415508878783938562 for e in rows_[:4])
    assert all(e.commit_ts == 415508881418485761 for e in rows_[4:])
    assert rows_[0].ts_ms == 415508878783938562 >> 18
    assert rows_[0].columns == [Column("id", "int", key=True), Column("val", "varchar")]
    assert events[12].commit_ts == events[13].commit_ts == 415508881038376963
    assert [e.source.partition for e in events] == [p for p, _, _ in EXAMPLE_STREAM]


def test_redelivery_and_ddl_broadcast_get_the_same_position():
    events = decode(*example_records()).events
    assert events[6].position == events[7].position  # record 8 duplicates record 7
    assert events[0].position == events[2].position  # the DDL broadcast to both partitions
    other_ddl = one(frame((DDL_KEY, '{"q":"DROP TABLE test.t1","t":4}')))
    assert other_ddl.position != events[0].position  # two statements of one ts stay apart
    assert events[4].position == pad_position(415508878783938562) + "/3"
    assert events[8].position == pad_position(415508881418485761) + "/1"


def test_position_ranks_changes_of_one_transaction_as_ticdc_sorts_them():
    ts = 415508881418485761
    delete = one(frame((ROW_KEY_2, row_value("d", 2))))
    insert = one(frame((ROW_KEY_2, row_value("u", 4, "ZWU="))))
    update = one(frame((ROW_KEY_2, '{"u":{"id":{"t":3,"h":true,"v":3}},"p":{"id":{"t":3,"h":true,"v":3}}}')))
    assert delete.position < update.position < insert.position
    assert [delete.position, update.position, insert.position] == [f"{pad_position(ts)}/{r}" for r in (1, 2, 3)]


def test_spec_record_bytes_are_what_the_encoder_writes():
    fmt = formats.create("ticdc-open")
    ddl = ChangeEvent(kind="ddl", database="test", table="t1", commit_ts=415508856908021766,
                      ddl="CREATE TABLE test.t1(id int primary key, val varchar(16))")
    resolved = ChangeEvent(kind="resolved", commit_ts=415508856908021766)
    first, second = fmt.encode([ddl, resolved])
    assert first.key.hex() == ("000000000000000100000000000000377b227473223a3431353530383835363930383032313736362c22"
                               "73636d223a2274657374222c2274626c223a227431222c2274223a327d")
    assert first.value.hex() == ("00000000000000477b2271223a22435245415445205441424c4520746573742e7431286964"
                                 "20696e74207072696d617279206b65792c2076616c20766172636861722831362929222c2274223a337d")
    assert len(first.key) == 71 and len(first.value) == 79
    assert second.key.hex() == ("0000000000000001000000000000001f7b227473223a343135353038383536393038303231373636"
                                "2c2274223a337d")
    assert second.value == bytes(8)


def test_spec_batched_records_5_and_7():
    key5, value5 = ROW_KEY_1, row_value("u", 1, "YWE=")
    value7 = row_value("u", 3, "Y2M=")
    record = frame((key5, value5), (ROW_KEY_1, value7))
    assert len(value5) == 0x3D and len(record.key) == 134 and len(record.value) == 138
    events = decode(record).events
    assert [e.after for e in events] == [{"id": 1, "val": "aa"}, {"id": 3, "val": "cc"}]


# ---------------------------------------------------------------------------------------------------------
# §10.3 the current encoding of every type

EVERY_TYPE_VALUE = r'''{"u":{"a":{"t":1,"h":true,"f":11,"v":1},"b":{"t":1,"f":65,"v":null},"c":{"t":1,"f":65,"v":1},"d":{"t":1,"f":65,"v":null},"e":{"t":2,"f":65,"v":-1},"f":{"t":2,"f":65,"v":null},"g":{"t":3,"f":65,"v":123},"h":{"t":3,"f":65,"v":null},"i":{"t":4,"f":65,"v":153.123},"j":{"t":4,"f":65,"v":null},"k":{"t":5,"f":65,"v":153.123},"l":{"t":5,"f":65,"v":null},"m":{"t":7,"f":65,"v":"1973-12-30 15:30:00"},"n":{"t":7,"f":65,"v":null},"o":{"t":8,"f":65,"v":123},"p":{"t":8,"f":65,"v":null},"q":{"t":9,"f":65,"v":123},"r":{"t":9,"f":65,"v":null},"s":{"t":10,"f":65,"v":"2000-01-01"},"t":{"t":10,"f":65,"v":null},"u":{"t":11,"f":65,"v":"23:59:59"},"v":{"t":11,"f":65,"v":null},"w":{"t":12,"f":65,"v":"2015-12-20 23:58:58"},"x":{"t":12,"f":65,"v":null},"y":{"t":13,"f":193,"v":1970},"z":{"t":13,"f":193,"v":null},"aa":{"t":15,"f":64,"v":"测试"},"ab":{"t":15,"f":64,"v":null},"ac":{"t":15,"f":65,"v":"\\x01\\x02\\x03\\x04\\x05\\x06\\a\\b\\t\\n"},"ad":{"t":15,"f":65,"v":null},"ae":{"t":16,"f":193,"v":81},"af":{"t":16,"f":193,"v":null},"ag":{"t":245,"f":65,"v":"{\"key1\": \"value1\"}"},"ah":{"t":245,"f":65,"v":null},"ai":{"t":246,"f":65,"v":"129012.12"},"aj":{"t":246,"f":65,"v":null},"ak":{"t":247,"f":64,"v":1},"al":{"t":247,"f":64,"v":null},"am":{"t":248,"f":64,"v":2},"an":{"t":248,"f":64,"v":null},"ao":{"t":249,"f":64,"v":"NXJXTDZLK1ZkR1Y0ZEE9PQ=="},"ap":{"t":249,"f":64,"v":null},"aq":{"t":249,"f":65,"v":"iVBORw0KGgo="},"ar":{"t":249,"f":65,"v":null},"as1":{"t":250,"f":64,"v":"NXJXTDZLK1ZkR1Y0ZEE9PQ=="},"at":{"t":250,"f":64,"v":null},"au":{"t":250,"f":65,"v":"SUQzAwAAAAA="},"av":{"t":250,"f":65,"v":null},"aw":{"t":251,"f":64,"v":"NXJXTDZLK1ZkR1Y0ZEE9PQ=="},"ax":{"t":251,"f":64,"v":null},"ay":{"t":251,"f":65,"v":"UEsDBBQAAAAIAA=="},"az":{"t":251,"f":65,"v":null},"ba":{"t":252,"f":64,"v":"NXJXTDZLK1ZkR1Y0ZEE9PQ=="},"bb":{"t":252,"f":64,"v":null},"bc":{"t":252,"f":65,"v":"JVBERi0xLjQ="},"bd":{"t":252,"f":65,"v":null},"be":{"t":254,"f":64,"v":"Alice"},"bf":{"t":254,"f":64,"v":null},"bg":{"t":254,"f":65,"v":"\\x01\\x02\\x03\\x04\\x05\\x06\\a\\b\\t\\n"},"bh":{"t":254,"f":65,"v":null}}}'''  # noqa: E501

BYTES_01_0A = base64.b64encode(bytes(range(1, 11))).decode()
# (value, type text) of every set column; the odd letters of each pair are NULL.
EVERY_TYPE_EXPECTED = {
    "a": (1, "tinyint"), "c": (1, "tinyint"), "e": (-1, "smallint"), "g": (123, "int"),
    "i": (struct.unpack("<f", struct.pack("<f", 153.123))[0], "float"), "k": (153.123, "double"),
    "m": ("1973-12-30 15:30:00", "timestamp"), "o": (123, "bigint"), "q": (123, "mediumint"),
    "s": ("2000-01-01", "date"), "u": ("23:59:59", "time"), "w": ("2015-12-20 23:58:58", "datetime"),
    "y": (1970, "year"), "aa": ("测试", "varchar"), "ac": (BYTES_01_0A, "varbinary"), "ae": (81, "bit"),
    "ag": ('{"key1": "value1"}', "json"), "ai": ("129012.12", "decimal"), "ak": (1, "enum"), "am": (2, "set"),
    "ao": ("5rWL6K+VdGV4dA==", "tinytext"), "aq": ("iVBORw0KGgo=", "tinyblob"),
    "as1": ("5rWL6K+VdGV4dA==", "mediumtext"), "au": ("SUQzAwAAAAA=", "mediumblob"),
    "aw": ("5rWL6K+VdGV4dA==", "longtext"), "ay": ("UEsDBBQAAAAIAA==", "longblob"),
    "ba": ("5rWL6K+VdGV4dA==", "text"), "bc": ("JVBERi0xLjQ=", "blob"), "be": ("Alice", "char"),
    "bg": (BYTES_01_0A, "binary"),
}
NULL_PARTNER = {"b": "a", "d": "c", "f": "e", "h": "g", "j": "i", "l": "k", "n": "m", "p": "o", "r": "q", "t": "s",
                "v": "u", "x": "w", "z": "y", "ab": "aa", "ad": "ac", "af": "ae", "ah": "ag", "aj": "ai", "al": "ak",
                "an": "am", "ap": "ao", "ar": "aq", "at": "as1", "av": "au", "ax": "aw", "az": "ay", "bb": "ba",
                "bd": "bc", "bf": "be", "bh": "bg"}


def test_every_type_vector():
    event = one(frame(('{"ts":1,"scm":"test","tbl":"t","t":1}', EVERY_TYPE_VALUE)))
    assert (event.kind, event.op, event.database, event.table, event.commit_ts) == ("row", "c", "test", "t", 1)
    assert event.key == {"a": 1}
    assert event.before is None
    expected = {name: value for name, (value, _) in EVERY_TYPE_EXPECTED.items()}
    expected |= dict.fromkeys(NULL_PARTNER)
    assert event.after == expected
    assert list(event.after) == [c.name for c in event.columns]
    types = {c.name: c.type for c in event.columns}
    for name, (_, type_text) in EVERY_TYPE_EXPECTED.items():
        assert types[name] == type_text, name
    for name, partner in NULL_PARTNER.items():
        assert types[name] == types[partner], name
    columns = {c.name: c for c in event.columns}
    assert columns["a"] == Column("a", "tinyint", key=True, nullable=False)  # flags 11: binary|handle|primary
    assert columns["b"] == Column("b", "tinyint", key=False, nullable=True)  # flags 65: binary|nullable
    assert columns["y"].type == "year"  # 193 sets unsigned, which says nothing more for YEAR and BIT


def test_timestamp_zone_option_gives_utc():
    event = one(frame(('{"ts":1,"scm":"test","tbl":"t","t":1}', EVERY_TYPE_VALUE)), **{"timestamp-zone": "+08:00"})
    assert event.after["m"] == "1973-12-30T07:30:00Z"
    assert one(frame(('{"ts":1,"scm":"test","tbl":"t","t":1}', EVERY_TYPE_VALUE)),
               **{"timestamp-zone": "UTC"}).after["m"] == "1973-12-30T15:30:00Z"


def test_timestamp_in_a_dst_fold_is_read_as_ticdc_hashes_it():
    # TiCDC (Go) reads Berlin's repeated 02:30 with CET, as its checksum does; Python's fold=0 would take CEST
    value = '{"u":{"id":{"t":8,"h":true,"f":11,"v":1},"m":{"t":7,"f":65,"v":"2021-10-31 02:30:00"}}}'
    event = one(frame(('{"ts":1,"scm":"test","tbl":"t","t":1}', value)), **{"timestamp-zone": "Europe/Berlin"})
    assert event.after["m"] == "2021-10-31T01:30:00Z"


def test_unsigned_flag_gives_unsigned_types_and_exact_values():
    value = '{"u":{"id":{"t":8,"h":true,"f":139,"v":18446744073709551615},"s":{"t":1,"f":193,"v":255}}}'
    event = one(frame(('{"ts":1,"scm":"d","tbl":"t","t":1}', value)))
    assert event.after == {"id": 18446744073709551615, "s": 255}
    assert [c.type for c in event.columns] == ["bigint unsigned", "tinyint unsigned"]


# ---------------------------------------------------------------------------------------------------------
# §10.4 insert / update / delete, DDL, resolved

INSERT_VALUE = '{"u":{"a":{"t":1,"h":true,"f":11,"v":1},"b":{"t":3,"f":65,"v":123}}}'
UPDATE_VALUE = ('{"u":{"a":{"t":1,"h":true,"f":11,"v":1},"b":{"t":3,"f":65,"v":456}},'
                '"p":{"a":{"t":1,"h":true,"f":11,"v":1},"b":{"t":3,"f":65,"v":123}}}')
DELETE_VALUE = '{"d":{"a":{"t":1,"h":true,"f":11,"v":1},"b":{"t":3,"f":65,"v":456}}}'
KEY_FOR = '{{"ts":{ts},"scm":"test","tbl":"t","t":1}}'


def test_insert_update_delete_vectors():
    events = decode(frame((KEY_FOR.format(ts=1), INSERT_VALUE)), frame((KEY_FOR.format(ts=2), UPDATE_VALUE)),
                    frame((KEY_FOR.format(ts=3), DELETE_VALUE))).events
    insert, update, delete = events
    assert (insert.op, insert.before, insert.after, insert.commit_ts) == ("c", None, {"a": 1, "b": 123}, 1)
    assert (update.op, update.before, update.after, update.commit_ts) == ("u", {"a": 1, "b": 123},
                                                                         {"a": 1, "b": 456}, 2)
    assert (delete.op, delete.before, delete.after, delete.commit_ts) == ("d", {"a": 1, "b": 456}, None, 3)
    assert all(e.key == {"a": 1} for e in events)
    assert insert.columns == [Column("a", "tinyint", True, False), Column("b", "int", False, True)]


def test_old_value_off_makes_a_lone_u_an_upsert():
    event = one(frame((KEY_FOR.format(ts=1), INSERT_VALUE)), **{"old-value": "false"})
    assert event.op == "u" and event.before is None


def test_only_updated_columns_old_image_is_completed():
    value = ('{"u":{"a":{"t":1,"h":true,"f":11,"v":1},"b":{"t":3,"f":65,"v":456},"c":{"t":246,"f":65,'
             '"v":"456.45"},"e":{"t":254,"f":64,"v":"x"}},"p":{"b":{"t":3,"f":65,"v":123},"c":{"t":246,"f":65,'
             '"v":"123.12"}}}')
    event = one(frame((KEY_FOR.format(ts=5), value)))
    assert event.before == {"a": 1, "b": 123, "c": "123.12", "e": "x"}
    assert event.after == {"a": 1, "b": 456, "c": "456.45", "e": "x"}


def test_handle_key_only_events():
    key = '{"ts":7,"scm":"test","tbl":"t","t":1,"ohk":true}'
    delete = one(frame((key, '{"d":{"a":{"t":1,"h":true,"f":11,"v":1}}}')))
    assert (delete.op, delete.key, delete.before) == ("d", {"a": 1}, {"a": 1})
    reason = failure(frame((key, '{"u":{"a":{"t":1,"h":true,"f":11,"v":1}}}')))
    assert "handle-key-only" in reason and "insert" in reason and "ts 7" in reason
    reason = failure(frame((key, '{"u":{"a":{"t":1,"h":true,"f":11,"v":1}},"p":{"a":{"t":1,"h":true,"f":11,'
                                  '"v":1}}}')))
    assert "handle-key-only" in reason and "update" in reason


def test_ddl_and_truncate():
    ddl = one(frame(('{"ts":1,"scm":"test","tbl":"t","t":2}',
                     '{"q":"create table test.t(a tinyint primary key, b int)","t":3}')))
    assert (ddl.kind, ddl.database, ddl.table, ddl.ddl, ddl.commit_ts) == (
        "ddl", "test", "t", "create table test.t(a tinyint primary key, b int)", 1)
    truncate = one(frame(('{"ts":9,"scm":"test","tbl":"t","t":2}', '{"q":"TRUNCATE TABLE `test`.`t`","t":11}')))
    assert (truncate.kind, truncate.database, truncate.table, truncate.commit_ts) == ("truncate", "test", "t", 9)
    partition = one(frame(('{"ts":9,"scm":"test","tbl":"t","t":2}', '{"q":"ALTER TABLE t TRUNCATE PARTITION p0",'
                                                                  '"t":23}')))
    assert partition.kind == "ddl"  # only some rows go: not a whole-table truncate
    schema = one(frame(('{"ts":3,"scm":"db2","t":2}', '{"q":"CREATE DATABASE db2","t":1}')))
    assert (schema.database, schema.table) == ("db2", None)
    unknown_action = one(frame(('{"ts":3,"scm":"d","tbl":"t","t":2}', '{"q":"ALTER TABLE t TTL = x","t":999}')))
    assert unknown_action.kind == "ddl"
    # TiCDC's key names a rename by its new table (and sends each table of RENAME TABLE a TO b, c TO d apart).
    rename = one(frame(('{"ts":4,"scm":"test","tbl":"t10","t":2}', '{"q":"RENAME TABLE `test`.`t1` TO `test`.`t10`",'
                                                                    '"t":14}')))
    assert (rename.database, rename.table) == ("test", "t1")
    (record,) = formats.create("ticdc-open").encode([rename])
    assert b'"tbl":"t10"' in record.key and one(record).table == "t1"


def test_resolved_vector():
    record = frame(('{"ts":12345678,"t":3}', b""))
    assert record.value == bytes(8)
    event = one(record)
    assert (event.kind, event.commit_ts, event.database, event.position) == ("resolved", 12345678, None, None)


# ---------------------------------------------------------------------------------------------------------
# The upstream binary fixtures (§10.2)


def corpus_pair(corpus, name: str, index: int) -> Record:
    base = corpus / EXAMPLES
    return Record(key=(base / "key" / f"{name}_key_{index}").read_bytes(),
                  value=(base / "value" / f"{name}_value_{index}").read_bytes(), topic=f"{name}_{index}")


def test_corpus_row_fixtures(corpus):
    (event,) = decode(corpus_pair(corpus, "row", 0)).events
    assert (event.kind, event.op, event.database, event.table, event.commit_ts) == ("row", "c", "a", "b", 1)
    assert event.after == {"col1": "aa"}  # a TINYINT holding a string: kept as sent, as TiCDC's decoders do
    assert event.columns == [Column("col1", "tinyint")]
    assert event.key is None
    events = decode(corpus_pair(corpus, "row", 1)).events
    assert [(e.commit_ts, e.database, e.table, e.after) for e in events] == [
        (1, "a", "b", {"col1": "aa"}), (2, "a", "b", {"col1": "bb"}), (3, "a", "b", {"col1": "bb"}),
        (4, "a", "c", {"col1": "cc"})]
    assert all(e.op == "c" for e in events)
    out = decode(corpus_pair(corpus, "row", 2))
    assert (out.events, out.failures, out.skipped) == ([], [], 1)


def test_corpus_ddl_fixtures(corpus):
    (event,) = decode(corpus_pair(corpus, "ddl", 0)).events
    assert (event.kind, event.database, event.table, event.ddl, event.commit_ts) == ("ddl", "a", "b",
                                                                                    "create table a", 1)
    events = decode(corpus_pair(corpus, "ddl", 1)).events
    assert [(e.kind, e.commit_ts, e.ddl) for e in events] == [
        ("ddl", 1, "create table a"), ("ddl", 2, "create table b"), ("ddl", 3, "create table c")]
    out = decode(corpus_pair(corpus, "ddl", 2))
    assert (out.events, out.failures, out.skipped) == ([], [], 1)


def test_corpus_resolved_fixtures(corpus):
    assert [(e.kind, e.commit_ts) for e in decode(corpus_pair(corpus, "rts", 0)).events] == [("resolved", 1)]
    assert [(e.kind, e.commit_ts) for e in decode(corpus_pair(corpus, "rts", 1)).events] == [
        ("resolved", 1), ("resolved", 2), ("resolved", 3)]
    out = decode(corpus_pair(corpus, "rts", 2))
    assert (out.events, out.failures, out.skipped) == ([], [], 1)


def test_corpus_fixtures_fail_under_strict_values(corpus):
    reason = decode(corpus_pair(corpus, "row", 0), **{"strict-values": "true"}).failures[0].reason
    assert "col1" in reason and "'aa'" in reason and "tinyint" in reason


def test_cli_decodes_a_captured_records_file(corpus, tmp_path):
    path = tmp_path / "open.jsonl"
    write_records(path, [corpus_pair(corpus, name, i) for name in ("ddl", "row", "rts") for i in range(3)])
    result = CliRunner().invoke(app, ["decode", "--format", "ticdc-open", str(path)])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [e["kind"] for e in lines] == ["ddl"] * 4 + ["row"] * 5 + ["resolved"] * 4
    assert lines[4]["after"] == {"col1": "aa"}
    assert "9 records: 13 events, 3 skipped, 0 failed" in result.output


# ---------------------------------------------------------------------------------------------------------
# Binary strings (§5.1)


def test_go_escape_vectors():
    assert go_unquote_bytes(r"\x01\x02\x03\x04\x05\x06\a\b\t\n") == bytes(range(1, 11))
    assert go_unquote_bytes(r"\x89PNG\r\n\x1a\n") == bytes.fromhex("89504e470d0a1a0a")
    assert go_quote_bytes(bytes(range(1, 11))) == r"\x01\x02\x03\x04\x05\x06\a\b\t\n"
    assert go_quote_bytes(bytes.fromhex("89504e470d0a1a0a")) == r"\x89PNG\r\n\x1a\n"
    assert go_quote_bytes('a"b\\c 测\u2028'.encode()) == 'a\\"b\\\\c 测\\u2028'
    assert go_unquote_bytes(r"\101\u6d4b\U0001F600\'") == b"A" + "测😀".encode() + b"'"


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_go_escape_round_trip(data):
    assert go_unquote_bytes(go_quote_bytes(data)) == data


# ---------------------------------------------------------------------------------------------------------
# Round trips


# Type text the protocol reports for each strategy type (§5 type codes and §6 flags; no lengths).
PROTOCOL_TYPES = {
    "tinyint unsigned": "tinyint unsigned", "smallint unsigned": "smallint unsigned",
    "mediumint unsigned": "mediumint unsigned", "int unsigned": "int unsigned", "bigint unsigned": "bigint unsigned",
    "decimal(10,2)": "decimal", "decimal(38,10)": "decimal", "decimal(65,0)": "decimal", "bit(1)": "bit",
    "bit(10)": "bit", "bit(64)": "bit", "datetime(3)": "datetime", "datetime(6)": "datetime",
    "timestamp(6)": "timestamp", "time(6)": "time", "char(10)": "char", "varchar(255)": "varchar",
    "binary(16)": "binary", "varbinary(64)": "varbinary", "enum('a','b','c d')": "enum",
    "set('x','y','z')": "set",
}
COLUMNS = columns_of(ALL_TYPES)
# The same columns NOT NULL: their flags can be 0, and TiCDC still writes `f` (without it a VARCHAR is read as the
# legacy encoding's base64).
NOT_NULL_COLUMNS = [Column(c.name, c.type, c.key, nullable=False) for c in COLUMNS]


def as_protocol(row: dict | None) -> dict | None:
    """What the protocol carries of a canonical row: ENUM and SET travel as their numbers."""
    if row is None:
        return None
    out = dict(row)
    for col in COLUMNS:
        t = parse_type(col.type)
        if out.get(col.name) is not None and t.family == "enum":
            out[col.name] = V.enum_index(out[col.name], t)
        elif out.get(col.name) is not None and t.family == "set":
            out[col.name] = V.set_mask(out[col.name], t)
    return out


@st.composite
def row_events(draw):
    op = draw(st.sampled_from("cud"))
    table, columns = draw(st.sampled_from([("t1", COLUMNS), ("t2", COLUMNS), ("t3", NOT_NULL_COLUMNS)]))
    before = draw(rows(columns)) if op in "ud" else None
    after = draw(rows(columns)) if op in "cu" else None
    if op == "u":
        after["id"] = before["id"]
    ts = draw(st.integers(1, 2**64 - 1))
    return ChangeEvent(kind="row", op=op, database="db", table=table,
                       key={"id": (after or before)["id"]}, before=before, after=after, columns=columns, commit_ts=ts)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(row_events(), min_size=1, max_size=6), st.sampled_from(["none", "snappy", "lz4"]),
       st.integers(1, 4))
def test_round_trip_every_type(events, compression, batch):
    options = {"timestamp-zone": "UTC", "compression": compression, "max-batch-size": batch}
    fmt = formats.create("ticdc-open", options)
    records = fmt.encode(events)
    assert len(records) == -(-len(events) // batch)
    out = fmt.decode(records)
    assert not out.failures, out.failures[0].reason
    assert len(out.events) == len(events)
    for got, sent in zip(out.events, events, strict=True):
        assert (got.kind, got.op, got.database, got.table, got.key) == ("row", sent.op, "db", sent.table, sent.key)
        assert got.before == as_protocol(sent.before)
        assert got.after == as_protocol(sent.after)
        assert got.columns == [Column(c.name, PROTOCOL_TYPES.get(c.type, c.type), c.key, c.nullable)
                               for c in sent.columns]
        assert (got.commit_ts, got.ts_ms) == (sent.commit_ts, sent.commit_ts >> 18)
        assert got.position == pad_position(sent.commit_ts) + "/" + {"d": "1", "u": "2", "c": "3"}[sent.op]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 2**63), min_size=1, max_size=5))
def test_round_trip_ddl_truncate_resolved(timestamps):
    events = []
    for i, ts in enumerate(timestamps):
        events.append(ChangeEvent(kind="ddl", database="db", table=f"t{i}", ddl=f"ALTER TABLE t{i} ADD c int",
                                  commit_ts=ts))
        events.append(ChangeEvent(kind="truncate", database="db", table=f"t{i}", ddl=f"TRUNCATE TABLE t{i}",
                                  commit_ts=ts))
        events.append(ChangeEvent(kind="resolved", commit_ts=ts))
    fmt = formats.create("ticdc-open")
    records = fmt.encode(events)
    assert len(records) == len(events)  # DDL and resolved events travel alone
    got = fmt.decode(records).events
    assert [(e.kind, e.database, e.table, e.ddl, e.commit_ts) for e in got] == [
        (e.kind, e.database, e.table, e.ddl, e.commit_ts) for e in events]


def test_encoder_respects_max_message_bytes():
    events = [ChangeEvent(kind="row", op="c", database="d", table="t", after={"id": i, "v": "x" * 100},
                          columns=[Column("id", "bigint", True, False), Column("v", "varchar(200)")], commit_ts=i + 1)
              for i in range(10)]
    fmt = formats.create("ticdc-open", {"max-message-bytes": 600, "max-batch-size": 16})
    records = fmt.encode(events)
    assert len(records) > 1
    assert all(len(r.key) + len(r.value) <= 600 for r in records)
    assert [e.after for e in fmt.decode(records).events] == [e.after for e in events]


def test_format_pickles_after_use():
    fmt = formats.create("ticdc-open", {"timestamp-zone": "Asia/Shanghai"})
    one_record = frame(('{"ts":1,"scm":"test","tbl":"t","t":1}', EVERY_TYPE_VALUE))
    expected = fmt.decode([one_record]).events
    clone = pickle.loads(pickle.dumps(fmt))
    assert clone.decode([one_record]).events == expected


# ---------------------------------------------------------------------------------------------------------
# Claim check (§8)


def claim_check_document(record: Record) -> bytes:
    return msgspec.json.encode({"key": base64.b64encode(record.key).decode(),
                                "value": base64.b64encode(record.value).decode()})


def test_claim_check_reads_the_stored_event(tmp_path):
    full = frame((KEY_FOR.format(ts=2), UPDATE_VALUE))
    (tmp_path / "abc.json").write_bytes(claim_check_document(full))
    small = '{"u":{"a":{"t":1,"h":true,"f":11,"v":1}},"p":{"a":{"t":1,"h":true,"f":11,"v":1}}}'
    ccl_key = '{"ts":2,"scm":"test","tbl":"t","t":1,"ohk":false,"ccl":"%s"}'
    direct = one(full)
    # only the base name of the location counts, whatever it says before it (as TiCDC's consumer reads it)
    for location in ("s3://bucket/prefix/abc.json", "abc.json", f"file://{tmp_path}/abc.json"):
        event = one(frame((ccl_key % location, small)), **{"claim-check-dir": str(tmp_path)})
        assert (event.op, event.before, event.after, event.position) == (direct.op, direct.before, direct.after,
                                                                         direct.position)


def test_claim_check_without_claim_check_dir_is_not_read(tmp_path):
    # a location naming a readable local file used to be read when no claim-check-dir was set
    full = frame((KEY_FOR.format(ts=2), UPDATE_VALUE))
    (tmp_path / "abc.json").write_bytes(claim_check_document(full))
    ccl_key = '{"ts":2,"scm":"test","tbl":"t","t":1,"ohk":false,"ccl":"%s"}' % (tmp_path / "abc.json")
    reason = failure(frame((ccl_key, '{"u":{"a":{"t":1,"h":true,"f":11,"v":1}}}')))
    assert "claim-check-dir is not set" in reason and str(tmp_path / "abc.json") in reason


def test_claim_check_that_cannot_be_read(tmp_path):
    ccl_key = '{"ts":2,"scm":"test","tbl":"t","t":1,"ohk":false,"ccl":"s3://bucket/abc.json"}'
    store = {"claim-check-dir": str(tmp_path)}
    reason = failure(frame((ccl_key, '{"u":{"a":{"t":1,"h":true,"f":11,"v":1}}}')), **store)
    assert "no claim-check file abc.json" in reason and "s3://bucket/abc.json" in reason
    delete = one(frame((ccl_key, '{"d":{"a":{"t":1,"h":true,"f":11,"v":1}}}')), **{"claim-check-dir": str(tmp_path)})
    assert (delete.op, delete.before) == ("d", {"a": 1})  # the key is all a delete needs
    (tmp_path / "bad.json").write_text("not json")
    reason = failure(frame((ccl_key.replace("s3://bucket/abc.json", "bad.json"),
                            '{"u":{"a":{"t":1,"h":true,"f":11,"v":1}}}')), **{"claim-check-dir": str(tmp_path)})
    assert "not a claim-check document" in reason


# ---------------------------------------------------------------------------------------------------------
# Bad input


def test_wrong_compression_is_a_clear_failure():
    record = formats.create("ticdc-open", {"compression": "snappy"}).encode(
        [ChangeEvent(kind="row", op="c", database="d", table="t", after={"id": 1},
                     columns=[Column("id", "bigint", True, False)], commit_ts=1)])[0]
    assert "lz4-decompress" in failure(record, compression="lz4")
    assert "bad event value JSON" in failure(record)


GOOD_KEY = '{"ts":1,"scm":"d","tbl":"t","t":1}'


@pytest.mark.parametrize(("record", "needle"), [
    (Record(key=None, value=b""), "key is missing"),
    (Record(key=b"\0\0\0", value=b""), "fewer than the 8-byte version"),
    (Record(key=u64(2), value=b""), "unsupported batch version 2"),
    (Record(key=u64(1) + u64(5) + b"{}", value=u64(0)), "claims 5 bytes but only 2 remain"),
    (Record(key=u64(1) + b"\0\0", value=b""), "key truncated"),
    (Record(key=u64(1) + u64(2**63) + b"{}", value=u64(0)), "claims 9223372036854775808 bytes"),
    (Record(key=frame((GOOD_KEY, INSERT_VALUE)).key, value=None), "value holds fewer entries"),
    (Record(key=frame((GOOD_KEY, INSERT_VALUE)).key, value=u64(999) + b"{}"), "value entry 0 claims 999"),
    (Record(key=frame((GOOD_KEY, INSERT_VALUE)).key, value=b"\0\0\0"), "value truncated"),
    (Record(key=frame((GOOD_KEY, INSERT_VALUE)).key, value=frame((GOOD_KEY, INSERT_VALUE)).value + u64(0)),
     "8 bytes left after the key's 1 entries"),
    (frame(("{not json", INSERT_VALUE)), "bad event key JSON"),
    (frame(('{"ts":"1","t":1}', INSERT_VALUE)), "Expected `int`, got `str` - at `$.ts`"),
    (frame(('{"scm":"d","t":1}', INSERT_VALUE)), "missing required field `ts`"),
    (frame(('{"ts":1,"t":9}', "")), "unknown event type t=9"),
    (frame(('{"ts":1,"t":3}', "{}")), "resolved event has a 2-byte value"),
    (frame((GOOD_KEY, '{"u":{"a":{"t":99,"v":1}}}')), "unknown column type code 99"),
    (frame((GOOD_KEY, '{"u":{"a":{"t":252,"f":65,"v":"%%%"}}}')), "invalid base64"),
    (frame((GOOD_KEY, '{"u":{"a":{"t":15,"f":65,"v":"\\\\q"}}}')), "bad escape"),
    (frame((GOOD_KEY, '{"u":{"a":{"t":252,"f":64,"v":"/w=="}}}')), "not UTF-8 text"),
    (frame((GOOD_KEY, '{"u":{"a":{"t":255,"f":65,"v":"AAAA"}}}')), "geometry"),
    (frame((GOOD_KEY, '{"u":[1,2]}')), "got `array` - at `$.u`"),
    (frame((GOOD_KEY, '{"u":{"a":{"v":1}}}')), "missing required field `t`"),
    (frame((GOOD_KEY, "{}")), "none of 'u', 'd'"),
    (frame((GOOD_KEY, '{"p":{"a":{"t":3,"v":1}}}')), "'p' without 'u'"),
    (frame((GOOD_KEY, '{"d":{"a":{"t":3,"v":1}},"u":{"a":{"t":3,"v":1}}}')), "mixes 'd'"),
    (frame(('{"ts":1,"scm":"d","t":2}', '{"t":3}')), "DDL value needs 'q'"),
    (frame((GOOD_KEY, INSERT_VALUE), (GOOD_KEY, INSERT_VALUE[:-3])), "event 1"),
    (frame(("", INSERT_VALUE)), "event 0: bad event key JSON"),
    (frame((GOOD_KEY, INSERT_VALUE), (GOOD_KEY[:-1], INSERT_VALUE)), "event 1: bad event key JSON"),
])
def test_bad_input_fails_with_a_reason(record, needle):
    reason = failure(record)
    assert needle in reason


def test_strict_values_names_the_column():
    record = frame((GOOD_KEY, '{"u":{"a":{"t":8,"f":65,"v":"12x"},"b":{"t":15,"f":64,"v":5}}}'))
    assert one(record).after == {"a": "12x", "b": 5}
    reason = failure(record, **{"strict-values": "true"})
    assert "column 'a'" in reason and "12x" in reason


def test_unknown_option_and_bad_choice_are_rejected():
    with pytest.raises(ValueError, match="unknown option"):
        formats.create("ticdc-open", {"zone": "UTC"})
    with pytest.raises(ValueError, match="compression"):
        formats.create("ticdc-open", {"compression": "zstd"})




@pytest.mark.parametrize("value", [3.4025001647762064e38, 3.4028234663852886e38, -3.4028234663852886e38,
                                   1.401298464324817e-45, 1.1754943508222875e-38, 0.0, 153.1230010986328])
def test_float32_extremes_round_trip(value):
    column = [Column("id", "bigint", True, False), Column("f", "float")]
    event = ChangeEvent(kind="row", op="c", database="d", table="t", after={"id": 1, "f": value}, columns=column,
                        commit_ts=1)
    fmt = formats.create("ticdc-open")
    (record,) = fmt.encode([event])
    assert fmt.decode([record]).events[0].after["f"] == value


def test_a_changed_type_or_flag_under_the_same_names_is_noticed():
    fmt = formats.create("ticdc-open")
    shapes = [
        '{"u":{"a":{"t":3,"h":true,"f":11,"v":1},"b":{"t":3,"f":65,"v":2}}}',
        '{"u":{"a":{"t":3,"h":true,"f":11,"v":1},"b":{"t":15,"f":65,"v":"\\\\x02"}}}',  # MODIFY COLUMN b varbinary
        '{"u":{"a":{"t":3,"h":true,"f":11,"v":1},"b":{"t":15,"f":1,"v":"\\\\x02"}}}',  # b NOT NULL
        '{"u":{"a":{"t":3,"f":65,"v":1},"b":{"t":15,"h":true,"f":27,"v":"\\\\x02"}}}',  # the key moves to b
        '{"u":{"a":{"t":3,"h":true,"v":1},"b":{"t":15,"v":"Ag=="}}}',  # legacy: no flags
        '{"u":{"a":{"t":3,"v":1},"b":{"t":15,"h":true,"v":"Ag=="}}}',  # legacy, other handle
        '{"u":{"a":{"t":3,"h":true,"f":11,"v":1},"b":{"t":3,"f":65,"v":2}}}',  # back to the first shape
    ]
    events = fmt.decode([frame((GOOD_KEY, value)) for value in shapes]).events
    assert [[(c.type, c.key, c.nullable) for c in e.columns] for e in events] == [
        [("int", True, False), ("int", False, True)],
        [("int", True, False), ("varbinary", False, True)],
        [("int", True, False), ("varbinary", False, False)],
        [("int", False, True), ("varbinary", True, False)],
        [("int", True, None), ("varchar", False, None)],
        [("int", False, None), ("varchar", True, None)],
        [("int", True, False), ("int", False, True)],
    ]
    assert [e.after["b"] for e in events] == [2, "Ag==", "Ag==", "Ag==", "\x02", "\x02", 2]
    assert [e.key for e in events] == [{"a": 1}, {"a": 1}, {"a": 1}, {"b": "Ag=="}, {"a": 1}, {"b": "\x02"}, {"a": 1}]


def test_key_is_the_handle_key_else_the_primary_key():
    # A unique NOT NULL handle (flag 0x02) beside a primary-key-flagged column: the handle wins.
    handle = one(frame((GOOD_KEY, '{"u":{"a":{"t":3,"f":8,"v":1},"b":{"t":3,"h":true,"f":18,"v":2}}}')))
    assert handle.key == {"b": 2} and [c.key for c in handle.columns] == [False, True]
    primary = one(frame((GOOD_KEY, '{"u":{"a":{"t":3,"f":8,"v":1},"b":{"t":3,"f":16,"v":2}}}')))
    assert primary.key == {"a": 1} and [c.key for c in primary.columns] == [True, False]
    none = one(frame((GOOD_KEY, '{"u":{"a":{"t":3,"f":64,"v":1}}}')))
    assert none.key is None and not none.columns[0].key


def test_escapes_of_non_characters_fail():
    with pytest.raises(ValueError):
        go_unquote_bytes(r"\ud800")
    with pytest.raises(ValueError):
        go_unquote_bytes(r"\U00110000")
    with pytest.raises(ValueError):
        go_unquote_bytes(r"\777")
    assert "column 'a'" in failure(frame((GOOD_KEY, '{"u":{"a":{"t":15,"f":65,"v":"\\\\ud800"}}}')))


def general_path_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plans without their generated reader: every column map takes the general path."""
    monkeypatch.setattr("cdclake.formats.ticdc.open_plan.Plan.compile", lambda plan: None)


def test_shapes_of_one_name_set_are_kept_apart():
    # One name set, three shapes (type code, flags, and a value that does not fit its code), interleaved:
    # each image is read by the plan of its own shape.
    key = '{"ts":449451550313021441,"scm":"d","tbl":"t","t":1}'
    as_int = '{"u":{"id":{"t":8,"h":true,"f":11,"v":1},"v":{"t":3,"f":65,"v":7}}}'
    as_double = '{"u":{"id":{"t":8,"h":true,"f":11,"v":2},"v":{"t":5,"f":65,"v":7}}}'
    unsigned = '{"u":{"id":{"t":8,"h":true,"f":11,"v":3},"v":{"t":3,"f":193,"v":7}}}'
    misfit = '{"u":{"id":{"t":8,"h":true,"f":11,"v":4},"v":{"t":3,"f":65,"v":"7x"}}}'
    update = ('{"u":{"id":{"t":8,"h":true,"f":11,"v":5},"v":{"t":5,"f":65,"v":8}},'
              '"p":{"id":{"t":8,"h":true,"f":11,"v":5},"v":{"t":3,"f":65,"v":6}}}')
    record = frame(*((key, value) for value in (as_int, as_double, unsigned, misfit, update, as_int)))
    events = decode(record)
    assert not events.failures, events.failures[0].reason
    got = [(e.after, type(e.after["v"]), [c.type for c in e.columns]) for e in events.events]
    assert got == [
        ({"id": 1, "v": 7}, int, ["bigint", "int"]), ({"id": 2, "v": 7.0}, float, ["bigint", "double"]),
        ({"id": 3, "v": 7}, int, ["bigint", "int unsigned"]), ({"id": 4, "v": "7x"}, str, ["bigint", "int"]),
        ({"id": 5, "v": 8.0}, float, ["bigint", "double"]), ({"id": 1, "v": 7}, int, ["bigint", "int"])]
    # the old image is read with the new image's plan, as the general path reads it
    assert events.events[4].before == {"id": 5, "v": 6.0}
    assert events.events[0].columns is events.events[5].columns
    assert "column 'v'" in failure(record, **{"strict-values": "true"})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                                 HealthCheck.function_scoped_fixture])
@given(st.lists(row_events(), min_size=1, max_size=6))
def test_generated_readers_agree_with_the_general_path(monkeypatch, events):
    options = {"timestamp-zone": "UTC", "max-batch-size": 3}
    records = formats.create("ticdc-open", options).encode(events)
    fast = formats.create("ticdc-open", options).decode(records)
    with monkeypatch.context() as patch:
        general_path_only(patch)
        general = formats.create("ticdc-open", options).decode(records)
    assert [msgspec.json.encode(e) for e in fast.events] == [msgspec.json.encode(e) for e in general.events]
    assert [f.reason for f in fast.failures] == [f.reason for f in general.failures]

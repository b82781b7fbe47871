"""canal-json: open-source Canal, TiCDC and DTS flat messages (specs canal-json.md, ticdc-canal-json.md)."""

from __future__ import annotations

import json
import pickle

import lz4.frame
import msgspec
import pytest
import snappy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cdclake.cli.main import app
from cdclake.formats import create
from cdclake.formats.canal.encoder import ddl_type, java_type
from cdclake.formats.canal.json import converter
from cdclake.model import types as T
from cdclake.model import values as V
from cdclake.model.events import ChangeEvent, Column, pad_position
from cdclake.model.records import Record, read_file
from cdclake.model.types import parse_type
from tests.helpers.strategies import ALL_TYPES, canonical_value, columns_of, rows

FLINK = ("flink/canal-data.txt", "flink/canal-data-filter-table.txt", "flink/canal-data-with-init.txt")


def decode(message: dict | bytes | str, offset: int = 0, **options):
    value = message if isinstance(message, bytes) else (
        message.encode() if isinstance(message, str) else json.dumps(message).encode())
    return create("canal-json", options).decode([Record(value=value, topic="t", offset=offset)])


def events_of(message: dict | bytes | str, offset: int = 0, **options) -> list[ChangeEvent]:
    out = decode(message, offset, **options)
    assert not out.failures, out.failures[0].reason
    return out.events


def reason_of(message: dict | bytes | str, **options) -> str:
    out = decode(message, **options)
    assert not out.events and len(out.failures) == 1, out
    return out.failures[0].reason


# --------------------------------------------------------------------------------------- spec examples

SPEC_UPDATE = {
    "data": [
        {"id": "1", "name": "Alice", "balance": "110.00", "tag": "2"},
        {"id": "2", "name": "Bob", "balance": "95.50", "tag": "1"},
    ],
    "database": "shop", "es": 1714557600000, "gtid": "3e11fa47-71ca-11e1-9e33-c80aa9429562:23", "id": 7,
    "isDdl": False,
    "mysqlType": {"id": "bigint(20) unsigned", "name": "varchar(64)", "balance": "decimal(10,2)",
                  "tag": "enum('new','vip')"},
    "old": [{"balance": "100.00"}, {"balance": "95.50", "tag": "2"}],
    "pkNames": ["id"], "sql": "", "sqlType": {"id": -5, "name": 12, "balance": 3, "tag": 4},
    "table": "users", "ts": 1714557600321, "type": "UPDATE",
}


def test_spec_open_source_update_of_two_rows():
    first, second = events_of(SPEC_UPDATE, offset=40)
    for event in (first, second):
        assert (event.kind, event.op, event.database, event.table) == ("row", "u", "shop", "users")
        assert event.commit_ts == event.ts_ms == 1714557600000
        assert event.columns == [Column("id", "bigint(20) unsigned", True), Column("name", "varchar(64)"),
                                 Column("balance", "decimal(10,2)"), Column("tag", "enum('new','vip')")]
    assert first.key == {"id": 1}
    assert first.after == {"id": 1, "name": "Alice", "balance": "110.00", "tag": "vip"}
    assert first.before == {"id": 1, "name": "Alice", "balance": "100.00", "tag": "vip"}
    # Row 2's old repeats balance (Canal accumulates the changed set); tag went from vip (2) to new (1).
    assert second.key == {"id": 2}
    assert second.after == {"id": 2, "name": "Bob", "balance": "95.50", "tag": "new"}
    assert second.before == {"id": 2, "name": "Bob", "balance": "95.50", "tag": "vip"}
    # GTID transaction 23, Kafka offset 40, row index.
    assert first.position == pad_position(23, 40, 0)
    assert second.position == pad_position(23, 40, 1)
    assert first.source is not None and (first.source.format, first.source.offset) == ("canal-json", 40)


def test_spec_open_source_ddl():
    message = {"data": None, "database": "shop", "es": 1714557700000, "gtid": "", "id": 8, "isDdl": True,
               "mysqlType": None, "old": None, "pkNames": None,
               "sql": "ALTER TABLE users ADD COLUMN email varchar(128)", "sqlType": None, "table": "users",
               "ts": 1714557700050, "type": "ALTER"}
    (event,) = events_of(message, offset=3)
    assert (event.kind, event.database, event.table) == ("ddl", "shop", "users")
    assert event.ddl == "ALTER TABLE users ADD COLUMN email varchar(128)"
    assert event.commit_ts == event.ts_ms == 1714557700000
    assert event.position == pad_position(0, 3, 0)
    assert event.before is event.after is None


@pytest.mark.parametrize("kind", ["CREATE", "ALTER", "ERASE", "RENAME", "CINDEX", "DINDEX", "QUERY", "DDL"])
def test_every_ddl_type_is_a_ddl_event(kind):
    (event,) = events_of({"database": "d", "table": "", "isDdl": True, "type": kind, "es": 5,
                          "sql": "CREATE DATABASE d2"})
    assert (event.kind, event.ddl, event.database, event.table) == ("ddl", "CREATE DATABASE d2", "d", None)


def test_truncate_types():
    (event,) = events_of({"database": "d", "table": "t", "isDdl": True, "type": "TRUNCATE", "es": 5,
                          "sql": "TRUNCATE TABLE t"})
    assert (event.kind, event.database, event.table, event.commit_ts) == ("truncate", "d", "t", 5)
    # DTS has one DDL type; a statement that truncates is a truncate.
    (event,) = events_of({"database": "d", "table": "t", "isDdl": True, "type": "DDL", "es": 5,
                          "sql": "/* dts */ truncate table `d`.`t`"})
    assert (event.kind, event.table) == ("truncate", "t")


def test_is_ddl_decides_for_a_type_the_decoder_does_not_know():
    # Spec checklist 2 (and TiCDC's rule): isDdl true means a DDL whatever its type; its SQL says what it does.
    (event,) = events_of({"database": "d", "table": "", "isDdl": True, "type": "DROPDB", "es": 5,
                          "sql": "DROP DATABASE d2"})
    assert (event.kind, event.ddl, event.database, event.table) == ("ddl", "DROP DATABASE d2", "d", None)
    (event,) = events_of({"database": "d", "table": "t", "isDdl": True, "type": "TRUNC", "es": 5,
                          "sql": "truncate t"})
    assert (event.kind, event.table) == ("truncate", "t")
    # Canal's own types classify the statement: a QUERY is not read as a truncate.
    (event,) = events_of({"database": "d", "table": "t", "isDdl": True, "type": "QUERY", "es": 5,
                          "sql": "truncate t"})
    assert event.kind == "ddl"


DTS_CURRENT_DELETE = {
    "data": [{"id": "500000287", "shipping_type": None}],
    "database": "dbname", "es": 1600161894000, "id": 58, "isDdl": False,
    "mysqlType": {"id": "bigint(20)", "shipping_type": "varchar(50)"}, "pkNames": ["id"], "sql": "",
    "sqlType": {"id": -5, "shipping_type": 12}, "table": "tablename", "ts": 1600161894771, "type": "DELETE",
}
DTS_LEGACY_DELETE = {
    "old": [{"shipping_type": "aaa"}],
    "database": "dbname", "es": 1600161894000, "id": 58, "isDdl": False,
    "mysqlType": {"id": "bigint(20)", "shipping_type": "varchar(50)"}, "pkNames": ["id"], "sql": "",
    "sqlType": {"id": -5, "shipping_type": 12}, "table": "tablename", "ts": 1600161894771, "type": "DELETE",
}


def test_spec_dts_current_delete():
    (event,) = events_of(DTS_CURRENT_DELETE)
    assert (event.kind, event.op, event.database, event.table) == ("row", "d", "dbname", "tablename")
    assert event.before == {"id": 500000287, "shipping_type": None}
    assert event.after is None and event.key == {"id": 500000287}
    assert event.commit_ts == 1600161894000


@pytest.mark.parametrize("swap", [False, True])
def test_spec_dts_legacy_delete_lacks_its_key(swap):
    # The seed's legacy DELETE carries its row in old, and that row has no id: the row cannot be found.
    reason = reason_of(DTS_LEGACY_DELETE, **{"dts-legacy-swap": str(swap)})
    assert "primary-key column 'id'" in reason


def test_dts_legacy_delete_with_key_in_old():
    message = {**DTS_LEGACY_DELETE, "old": [{"id": "7", "shipping_type": "aaa"}]}
    for swap in ("false", "true"):
        (event,) = events_of(message, **{"dts-legacy-swap": swap})
        assert event.op == "d" and event.before == {"id": 7, "shipping_type": "aaa"} and event.key == {"id": 7}


def test_dts_legacy_update_swaps_data_and_old():
    message = {"data": [{"id": "1", "v": "before"}], "old": [{"id": "1", "v": "after"}],
               "database": "d", "table": "t", "es": 1, "isDdl": False, "type": "UPDATE",
               "mysqlType": {"id": "bigint", "v": "varchar(8)"}, "pkNames": ["id"]}
    (legacy,) = events_of(message, **{"dts-legacy-swap": "true"})
    assert legacy.before == {"id": 1, "v": "before"} and legacy.after == {"id": 1, "v": "after"}
    (current,) = events_of(message)
    assert current.before == {"id": 1, "v": "after"} and current.after == {"id": 1, "v": "before"}
    # A partial legacy after image (old) is completed from the before image (data).
    partial = {**message, "old": [{"v": "after"}]}
    (event,) = events_of(partial, **{"dts-legacy-swap": "true"})
    assert event.after == {"id": 1, "v": "after"} and event.key == {"id": 1}


def test_spec_dts_ddl_without_row_members():
    (event,) = events_of({"database": "dbname", "es": 1600161894000, "id": 58, "isDdl": True,
                          "sql": "eg:createxxx", "table": "tablename", "ts": 1600161894771, "type": "DDL"})
    assert (event.kind, event.ddl, event.database, event.table) == ("ddl", "eg:createxxx", "dbname", "tablename")


def test_dts_init_is_a_snapshot_read():
    message = {**DTS_CURRENT_DELETE, "type": "INIT"}
    (event,) = events_of(message)
    assert (event.op, event.before, event.after) == ("r", None, {"id": 500000287, "shipping_type": None})


TICDC_UPDATE = (
    '{"id":0,"database":"test","table":"tp_int","pkNames":["id"],"isDdl":false,"type":"UPDATE",'
    '"es":1639633141221,"ts":1639633142960,"sql":"",'
    '"sqlType":{"id":4,"c_tinyint":-6,"c_int":4},"mysqlType":{"id":"int","c_tinyint":"tinyint","c_int":"int"},'
    '"old":[{"id":"2","c_tinyint":"127","c_int":"2147483647"}],'
    '"data":[{"id":"2","c_tinyint":"0","c_int":"0"}],'
    '"_tidb":{"commitTs":429918007904436226}}'
)
TICDC_WATERMARK = (
    '{"id":0,"database":"","table":"","pkNames":null,"isDdl":false,"type":"TIDB_WATERMARK","es":1640007049196,'
    '"ts":1640007050284,"sql":"","sqlType":null,"mysqlType":null,"data":null,"old":null,'
    '"_tidb":{"watermarkTs":429918007904436226}}'
)


def test_spec_ticdc_update_with_extension():
    (event,) = events_of(TICDC_UPDATE, offset=9)
    assert (event.op, event.database, event.table, event.key) == ("u", "test", "tp_int", {"id": 2})
    assert event.commit_ts == 429918007904436226  # exact: beyond 2**53
    assert event.ts_ms == 1639633141221
    assert event.before == {"id": 2, "c_tinyint": 127, "c_int": 2147483647}
    assert event.after == {"id": 2, "c_tinyint": 0, "c_int": 0}
    assert [c.type for c in event.columns] == ["int", "tinyint", "int"]
    assert event.position == "2"  # TiCDC: an update's rank, whatever the offset, so a copy is a replay


def test_spec_ticdc_watermark():
    (event,) = events_of(TICDC_WATERMARK)
    assert (event.kind, event.commit_ts, event.table, event.key) == ("resolved", 429918007904436226, None, None)


def test_spec_ticdc_binary_value():
    # ticdc-canal-json.md §3.3: bytes → ISO-8859-1 characters, JSON-escaped (<, & as \u003c, \u0026).
    text = '"\\u0005\\u0007\\n\\u000f$2+cx\\u003c\\u0026ÿþ-7F"'
    message = ('{"database":"d","table":"t","pkNames":["id"],"isDdl":false,"type":"INSERT","es":1,'
               '"mysqlType":{"id":"int","b":"varbinary"},"data":[{"id":"1","b":' + text + '}],'
               '"_tidb":{"commitTs":7}}')
    (event,) = events_of(message)
    expected = bytes.fromhex("05070a0f24322b63783c26fffe2d3746")
    assert event.after == {"id": 1, "b": V.b64(expected)}


def test_ticdc_base_type_enum_and_set_stay_integers():
    message = {"database": "d", "table": "t", "pkNames": ["id"], "isDdl": False, "type": "INSERT", "es": 1,
               "mysqlType": {"id": "int unsigned", "e": "enum", "s": "set", "b": "bit", "y": "year"},
               "data": [{"id": "4294967295", "e": "2", "s": "6", "b": "65", "y": "2024"}],
               "_tidb": {"commitTs": 11}}
    (event,) = events_of(message)
    assert event.after == {"id": 4294967295, "e": 2, "s": 6, "b": 65, "y": 2024}
    assert event.commit_ts == 11


def test_ticdc_old_with_only_updated_columns_is_completed():
    message = json.loads(TICDC_UPDATE)
    message["old"] = [{"c_int": "5"}]
    (event,) = events_of(message)
    assert event.before == {"id": 2, "c_tinyint": 0, "c_int": 5}


@pytest.mark.parametrize("tidb", [{"onlyHandleKey": True}, {"claimCheckLocation": "s3://bucket/claim/1.json"}])
def test_ticdc_handle_key_only_rows(tidb):
    base = {"database": "d", "table": "t", "pkNames": ["id"], "isDdl": False, "es": 1,
            "mysqlType": {"id": "int", "v": "varchar"}, "data": [{"id": "1"}], "_tidb": {"commitTs": 3, **tidb}}
    for kind in ("INSERT", "UPDATE"):
        reason = reason_of({**base, "type": kind, "old": [{"id": "1"}]})
        assert "only the handle-key columns" in reason and "cannot be applied" in reason
        if "claimCheckLocation" in tidb:
            assert "s3://bucket/claim/1.json" in reason
    (event,) = events_of({**base, "type": "DELETE"})  # a key-only delete is complete
    assert (event.op, event.before, event.key) == ("d", {"id": 1}, {"id": 1})


@pytest.mark.parametrize("compression", ["snappy", "lz4"])
def test_ticdc_whole_value_compression(compression):
    compress = snappy.compress if compression == "snappy" else lz4.frame.compress
    value = compress(TICDC_UPDATE.encode())
    (event,) = events_of(value, compression=compression)
    assert event.commit_ts == 429918007904436226 and event.after == {"id": 2, "c_tinyint": 0, "c_int": 0}
    assert "compressed" in reason_of(TICDC_UPDATE.encode(), compression=compression)


# ----------------------------------------------------------------------------------- values and types

def test_timestamps_become_utc():
    message = {"database": "d", "table": "t", "pkNames": ["id"], "isDdl": False, "type": "INSERT", "es": 1,
               "mysqlType": {"id": "int", "ts": "timestamp(3)", "dt": "datetime(3)", "z": "timestamp"},
               "data": [{"id": "1", "ts": "2024-05-01 18:00:00.125", "dt": "2024-05-01 18:00:00.125",
                         "z": "0000-00-00 00:00:00"}]}
    (utc,) = events_of(message)
    assert utc.after == {"id": 1, "ts": "2024-05-01T18:00:00.125Z", "dt": "2024-05-01 18:00:00.125",
                         "z": "0000-00-00 00:00:00"}
    (shanghai,) = events_of(message, **{"timestamp-zone": "Asia/Shanghai"})
    assert shanghai.after["ts"] == "2024-05-01T10:00:00.125Z"
    assert shanghai.after["dt"] == "2024-05-01 18:00:00.125"  # DATETIME has no zone
    (kept,) = events_of(message, **{"timestamp-zone": ""})
    assert kept.after["ts"] == "2024-05-01 18:00:00.125"
    for bad in ("2024-05-01 18:00:00xyz", "2024-02-30 18:00:00", "2024-05-01 25:00:00", "yesterday"):
        broken = {**message, "data": [{"id": "1", "ts": bad}]}
        assert f"column 'ts': value {bad!r} does not fit type timestamp(3)" in reason_of(broken)


def test_unknown_timestamp_zone_is_rejected_at_configuration():
    with pytest.raises(Exception, match="Mars"):
        create("canal-json", {"timestamp-zone": "Mars/Olympus"})


def test_sqltype_codes_type_columns_without_mysql_type():
    message = {"database": "d", "table": "t", "pkNames": ["id"], "isDdl": False, "type": "INSERT", "es": 1,
               "mysqlType": {"id": "", "b": "blob", "u": ""},
               "sqlType": {"id": -5, "b": 2004, "u": 3, "f": 8, "x": 1111},
               "data": [{"id": "9", "b": "\u00ff\u0000", "u": "18446744073709551615", "f": "1.0E7", "x": "?"}]}
    (event,) = events_of(message)
    # id by code BIGINT; u was BIGINT UNSIGNED promoted to DECIMAL: the code cannot tell, the text stays.
    assert event.after == {"id": 9, "b": V.b64(b"\xff\x00"), "u": "18446744073709551615", "f": 1.0e7, "x": "?"}
    assert [(c.name, c.type) for c in event.columns] == [
        ("id", "bigint"), ("b", "blob"), ("u", "decimal"), ("f", "double"), ("x", "unknown")]
    # no mysqlType at all
    (event,) = events_of({**message, "mysqlType": None})
    assert event.after["id"] == 9 and event.after["f"] == 1.0e7


def test_columns_the_type_map_does_not_list_keep_their_text():
    message = {"database": "d", "table": "t", "pkNames": ["id"], "isDdl": False, "type": "UPDATE", "es": 1,
               "mysqlType": {"id": "int", "v": "int"},
               "data": [{"id": "1", "v": "2", "extra": "x"}], "old": [{"v": "1", "more": "y"}]}
    (event,) = events_of(message)
    assert event.after == {"id": 1, "v": 2, "extra": "x"}
    assert event.before == {"id": 1, "v": 1, "extra": "x", "more": "y"}
    assert event.columns == [Column("id", "int", True), Column("v", "int"), Column("extra"), Column("more")]


def test_unusual_integer_spelling_takes_the_general_path():
    message = {"database": "d", "table": "t", "pkNames": ["id"], "isDdl": False, "type": "INSERT", "es": 1,
               "mysqlType": {"id": "int(5) zerofill"}, "data": [{"id": "00042"}]}
    (event,) = events_of(message)
    assert event.after == {"id": 42}


def test_rows_without_primary_key_have_no_key():
    message = {"database": "d", "table": "t", "pkNames": None, "isDdl": False, "type": "INSERT", "es": 1,
               "mysqlType": {"a": "int"}, "data": [{"a": "1"}, {"a": None}]}
    first, second = events_of(message)
    assert first.key is None and first.after == {"a": 1} and second.after == {"a": None}
    assert [c.key for c in first.columns] == [False]


def test_composite_and_implicit_keys():
    message = {"database": "d", "table": "t", "pkNames": ["a", "__#alibaba_rds_row_id#__"], "isDdl": False,
               "type": "INSERT", "es": 1, "mysqlType": {"a": "int", "b": "varchar(3)"},
               "data": [{"a": "1", "b": "x", "__#alibaba_rds_row_id#__": "77"}]}
    (event,) = events_of(message)
    assert event.key == {"a": 1, "__#alibaba_rds_row_id#__": "77"}
    assert Column("__#alibaba_rds_row_id#__", "unknown", True) in event.columns


def test_empty_old_means_nothing_changed():
    message = {**SPEC_UPDATE, "data": SPEC_UPDATE["data"][:1], "old": [{}]}
    (event,) = events_of(message)
    assert event.before == event.after and event.before is not event.after


def test_gtid_forms():
    base = {"database": "d", "table": "t", "isDdl": True, "type": "QUERY", "es": 1, "sql": "x"}
    for gtid, number in [("3e11fa47-71ca-11e1-9e33-c80aa9429562:23", 23), ("0-1-4711", 4711), ("", 0),
                         ("garbage", 0)]:
        (event,) = events_of({**base, "gtid": gtid}, offset=2)
        assert event.position == pad_position(number, 2, 0)


def test_control_types_and_tombstones_are_skipped():
    fmt = create("canal-json")
    out = fmt.decode([Record(value=None), Record(value=b'{"type":"MHEARTBEAT","isDdl":false}')])
    assert (out.events, out.failures, out.skipped) == ([], [], 2)


# ----------------------------------------------------------------------------------------------- corpus

def _flink_value(text: str | None, type_text: str) -> object:
    """An independent reading of the corpus's few types (INTEGER/int(11), FLOAT/float, text, DATE)."""
    if text is None:
        return None
    name = type_text.lower()
    if name.startswith(("int", "integer")):
        return int(text)
    if name == "float":
        return float(text)
    return text


def _flink_row(row: dict, types: dict) -> dict:
    return {k: _flink_value(v, types.get(k, "varchar")) for k, v in row.items()}


@pytest.mark.parametrize("name", FLINK)
def test_corpus_files(corpus, name):
    lines = [line for line in (corpus / name).read_text().splitlines() if line.strip()]
    records = [fl.record for fl in read_file(corpus / name)]
    out = create("canal-json").decode(records)
    expected: list[tuple] = []
    failing = []
    for index, line in enumerate(lines):
        message = json.loads(line)
        if message["isDdl"]:
            expected.append(("ddl", None, message["table"], message["sql"], None, None))
            continue
        types = message["mysqlType"]
        try:
            data = [_flink_row(row, types) for row in message["data"]]
            old = [_flink_row(row, types) for row in message["old"] or []]
        except ValueError:
            failing.append(index)
            continue
        op = {"INSERT": "c", "INIT": "r", "UPDATE": "u", "DELETE": "d"}[message["type"]]
        for i, row in enumerate(data):
            before = {**row, **old[i]} if op == "u" else row if op == "d" else None
            after = None if op == "d" else row
            expected.append(("row", op, message["table"], None, before, after))
    got = [(e.kind, e.op, e.table, e.ddl, e.before, e.after) for e in out.events]
    assert got == expected
    assert [f.record.offset for f in out.failures] == failing
    for event in out.events:
        assert event.database in ("inventory", "mydb")
        assert event.commit_ts == event.ts_ms and event.source.topic == name.split("/")[1]
        if event.kind == "row":
            assert event.key == {k: (event.after or event.before)[k] for k in ("id", "order_number")
                                 if k in (event.after or event.before)}


def test_corpus_canal_data_final_state(corpus):
    records = [fl.record for fl in read_file(corpus / "flink/canal-data.txt")]
    events = create("canal-json").decode(records).events
    assert len(records) == 11 and len(events) == 21
    state: dict[int, tuple] = {}
    for event in events:
        if event.kind != "row":
            assert event.ddl.startswith("CREATE TABLE `xj_`.`user02`")
            continue
        if event.op == "d":
            del state[event.key["id"]]
        else:
            state[event.key["id"]] = tuple(event.after.values())
    # Worked by hand from the file's eleven messages.
    assert state == {
        101: (101, "scooter", "Small 2-wheel scooter", 5.17),
        104: (104, "hammer", "12oz carpenter's hammer", 0.75),
        105: (105, "hammer", "14oz carpenter's hammer", 0.875),
        106: (106, "hammer", "18oz carpenter hammer", 1.0),
        107: (107, "rocks", "box of assorted rocks", 5.1),
        108: (108, "jacket", "water resistent black wind breaker", 0.1),
        109: (109, "spare tire", "24 inch spare tire", 22.2),
        110: (110, "jacket", "new water resistent white wind breaker", 0.5),
    }


def test_corpus_filter_table_line_16_has_text_in_an_int_column(corpus):
    # Flink's test file declares mysqlType int(11) for project.id but sends "A101": a dead letter.
    records = [fl.record for fl in read_file(corpus / "flink/canal-data-filter-table.txt")]
    out = create("canal-json").decode(records)
    assert len(out.failures) == 1 and out.failures[0].record.offset == 15
    assert out.failures[0].reason.startswith("column 'id': value 'A101' does not fit type int(11)")


def test_corpus_with_init_keeps_the_undeclared_column(corpus):
    records = [fl.record for fl in read_file(corpus / "flink/canal-data-with-init.txt")]
    events = create("canal-json").decode(records).events
    assert [e.op for e in events[:9]] == ["r"] * 9
    assert events[0].after == {"id": 101, "name": "scooter", "description": "Small 2-wheel scooter",
                               "weight": 3.14, "other": "val1"}
    assert events[0].columns[-1] == Column("other", "unknown")
    update = events[9]
    assert update.before == {"id": 106, "name": "hammer", "description": None, "weight": 1.0, "other": "val2"}
    assert update.after == {"id": 106, "name": "hammer", "description": "18oz carpenter hammer", "weight": 1.0,
                            "other": "val0"}


def test_cli_decodes_a_corpus_file(corpus):
    result = CliRunner().invoke(app, ["decode", "--format", "canal-json", str(corpus / "flink/canal-data.txt")])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 21 and lines[0]["after"]["id"] == 101 and lines[0]["key"] == {"id": 101}


# ------------------------------------------------------------------------------------------ round trips

COLUMNS = columns_of()
TIDB_TSO = st.integers(1 << 18, (1 << 63) - 1)


def tidb_expected(event: ChangeEvent) -> ChangeEvent:
    """What the TiCDC flavour delivers of an event: no ENUM/SET labels, base-type column text."""
    types = {c.name: parse_type(c.type) for c in COLUMNS}

    def plain(row):
        if row is None:
            return None
        out = dict(row)
        for name, value in row.items():
            t = types[name]
            if value is not None and t.family == T.ENUM:
                out[name] = V.enum_index(value, t)
            elif value is not None and t.family == T.SET:
                out[name] = V.set_mask(value, t)
        return out

    def base(c: Column) -> Column:
        t = types[c.name]
        unsigned = " unsigned" if t.unsigned and t.family == T.INTEGER else ""
        return Column(c.name, t.name + unsigned, c.key, c.nullable)

    return msgspec.structs.replace(event, before=plain(event.before), after=plain(event.after),
                                   columns=[base(c) for c in event.columns],
                                   op="c" if event.op == "r" else event.op)


@st.composite
def row_events(draw, flavour: str) -> ChangeEvent:
    op = draw(st.sampled_from("cudr"))
    before = draw(rows(COLUMNS)) if op in "ud" else None
    after = draw(rows(COLUMNS)) if op in "cur" else None
    if flavour == "tidb":
        commit_ts = draw(TIDB_TSO)
        ts_ms = commit_ts >> 18
    else:
        commit_ts = ts_ms = draw(st.integers(0, 2**42))
    image = after if after is not None else before
    return ChangeEvent(kind="row", op=op, database="db", table="tbl", key={"id": image["id"]}, before=before,
                       after=after, columns=[Column(c.name, c.type, c.key) for c in COLUMNS],
                       commit_ts=commit_ts, ts_ms=ts_ms)


def _comparable(event: ChangeEvent) -> ChangeEvent:
    return msgspec.structs.replace(event, position=None, source=None)


@pytest.mark.parametrize(("options", "examples"), [
    ({"flavour": "canal"}, 100), ({"flavour": "dts"}, 100), ({"flavour": "tidb"}, 100),
    ({"flavour": "dts", "dts-legacy-swap": "true"}, 40), ({"flavour": "tidb", "compression": "snappy"}, 30),
    ({"flavour": "tidb", "compression": "lz4"}, 30), ({"flavour": "canal", "timestamp-zone": "+08:00"}, 40)])
def test_round_trip_every_type(options, examples):
    fmt = create("canal-json", options)
    flavour = options["flavour"]

    @settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(row_events(flavour), min_size=1, max_size=4))
    def check(events):
        records = fmt.encode(events)
        assert len(records) == len(events)
        out = fmt.decode(records)
        assert not out.failures, out.failures[0].reason
        expected = events
        if flavour == "tidb":
            expected = [tidb_expected(e) for e in events]
        elif flavour == "canal":
            expected = [msgspec.structs.replace(e, op="c" if e.op == "r" else e.op) for e in events]
        assert [_comparable(e) for e in out.events] == expected
        if flavour == "tidb":  # the kind of change orders events of one commit; offsets play no part
            assert [e.position for e in out.events] == [{"d": "1", "u": "2"}.get(e.op, "3") for e in out.events]
        else:
            assert [e.position for e in out.events] == [pad_position(0, i, 0) for i in range(len(events))]

    check()


@pytest.mark.parametrize("flavour", ["canal", "dts", "tidb"])
def test_round_trip_ddl_truncate_resolved(flavour):
    fmt = create("canal-json", {"flavour": flavour})
    tso = 429918007904436226
    commit = tso if flavour == "tidb" else 1714557700000
    ts_ms = tso >> 18 if flavour == "tidb" else commit
    events = [
        ChangeEvent(kind="ddl", database="shop", table="users", ddl="ALTER TABLE users ADD COLUMN e int",
                    commit_ts=commit, ts_ms=ts_ms),
        ChangeEvent(kind="truncate", database="shop", table="users", commit_ts=commit, ts_ms=ts_ms),
        ChangeEvent(kind="ddl", database="shop", ddl="CREATE DATABASE shop2", commit_ts=commit, ts_ms=ts_ms),
        ChangeEvent(kind="resolved", commit_ts=tso),
    ]
    got = [_comparable(e) for e in fmt.decode(fmt.encode(events)).events]
    assert got == (events if flavour == "tidb" else events[:3])


def test_encoded_messages_look_like_their_producers():
    update = ChangeEvent(kind="row", op="u", database="shop", table="users", key={"id": 1},
                         before={"id": 1, "name": "Alice", "balance": "100.00", "tag": "vip"},
                         after={"id": 1, "name": "Alice", "balance": "110.00", "tag": "vip"},
                         columns=[Column("id", "bigint(20) unsigned", True), Column("name", "varchar(64)"),
                                  Column("balance", "decimal(10,2)"), Column("tag", "enum('new','vip')")],
                         commit_ts=429918007904436226, ts_ms=1714557600000)
    canal = json.loads(create("canal-json").encode([update])[0].value)
    assert list(canal) == sorted(canal)  # fastjson's alphabetical members, nulls written
    assert canal["old"] == [{"balance": "100.00"}] and canal["data"][0]["tag"] == "2"
    assert canal["mysqlType"]["tag"] == "enum('new','vip')" and canal["sqlType"]["tag"] == 4
    assert canal["es"] == 1714557600000 and canal["pkNames"] == ["id"] and canal["type"] == "UPDATE"
    tidb = json.loads(create("canal-json", {"flavour": "tidb"}).encode([update])[0].value)
    assert list(tidb)[:6] == ["id", "database", "table", "pkNames", "isDdl", "type"]
    assert tidb["_tidb"] == {"commitTs": 429918007904436226} and tidb["es"] == 429918007904436226 >> 18
    assert tidb["mysqlType"] == {"id": "bigint unsigned", "name": "varchar", "balance": "decimal", "tag": "enum"}
    assert tidb["old"] == [{"id": "1", "name": "Alice", "balance": "100.00", "tag": "2"}]
    dts = json.loads(create("canal-json", {"flavour": "dts", "dts-legacy-swap": "true"}).encode([update])[0].value)
    assert dts["data"][0]["balance"] == "100.00" and dts["old"][0]["balance"] == "110.00"
    delete = msgspec.structs.replace(update, op="d", after=None)
    legacy = json.loads(create("canal-json", {"flavour": "dts", "dts-legacy-swap": "true"}).encode([delete])[0].value)
    assert "data" not in legacy and legacy["old"][0]["id"] == "1"


def test_java_types_and_unsigned_promotion():
    assert java_type(parse_type("bigint(20) unsigned"), "9223372036854775807") == -5
    assert java_type(parse_type("bigint(20) unsigned"), "9223372036854775808") == 3
    assert java_type(parse_type("int unsigned"), "2147483648") == -5
    assert java_type(parse_type("tinyint unsigned"), "128") == 5
    assert java_type(parse_type("mediumint unsigned"), "16777215") == 4
    assert [java_type(parse_type(t)) for t in ("enum('a')", "set('a')", "year", "json", "text", "blob",
                                                "datetime", "timestamp", "decimal(5,2)", "float")] == [
        4, -7, 12, 12, 2005, 2004, 93, 93, 3, 7]


def test_ddl_classification():
    assert [ddl_type(s) for s in ("CREATE TABLE t (a int)", "create unique index i on t(a)", "DROP INDEX i ON t",
                                  "alter table t add b int", "/* x */ DROP TABLE t", "RENAME TABLE a TO b",
                                  "truncate t", "CREATE DATABASE d")] == [
        "CREATE", "CINDEX", "DINDEX", "ALTER", "ERASE", "RENAME", "TRUNCATE", "QUERY"]


@pytest.mark.parametrize("flavour", ["canal", "tidb"])
def test_a_rename_names_the_table_it_renames_though_its_message_names_the_new_one(flavour):
    # As Canal's DDL parser and TiCDC's DDL event name it: the new table.
    message = {"database": "shop", "table": "people", "isDdl": True, "type": "RENAME", "es": 1, "ts": 1,
               "sql": "RENAME TABLE `shop`.`users` TO `shop`.`people`", "data": None, "old": None}
    (event,) = events_of(message, flavour=flavour)
    assert (event.kind, event.database, event.table) == ("ddl", "shop", "users")
    (record,) = create("canal-json", {"flavour": flavour}).encode([event])
    assert (json.loads(record.value)["database"], json.loads(record.value)["table"]) == ("shop", "people")


EXTRA_TYPES = ("bool", "timestamp(3)", "enum", "set", "decimal", "varbinary", "geometry", "vector",
               "mediumint unsigned")


@pytest.mark.parametrize(("flavour", "utc"), [("tidb", "2021-10-31T01:30:00Z"), ("canal", "2021-10-31T00:30:00Z"),
                                              ("dts", "2021-10-31T00:30:00Z")])
def test_timestamp_in_a_dst_fold_is_read_by_the_producers_rule(flavour, utc):
    # Berlin's 02:30 repeats: TiCDC (Go) means the CET one, Canal and DTS (Java) the earlier, CEST one
    message = {"database": "d", "table": "t", "pkNames": ["id"], "isDdl": False, "type": "INSERT", "es": 1,
               "mysqlType": {"id": "int", "ts": "timestamp"}, "data": [{"id": "1", "ts": "2021-10-31 02:30:00"}]}
    (event,) = events_of(message, **{"timestamp-zone": "Europe/Berlin", "flavour": flavour})
    assert event.after["ts"] == utc
    t = parse_type("timestamp")
    rule = "go" if flavour == "tidb" else "java"
    assert converter(t, "Europe/Berlin", rule)("2021-10-31 02:30:00") == utc
    # A message with _tidb is TiCDC's, whatever the option says.
    (event,) = events_of({**message, "_tidb": {"commitTs": 1 << 18}},
                         **{"timestamp-zone": "Europe/Berlin", "flavour": flavour})
    assert event.after["ts"] == "2021-10-31T01:30:00Z"


@pytest.mark.parametrize("type_text", (*ALL_TYPES, "timestamp(3)"))
@pytest.mark.parametrize("zone", ["UTC", "+05:30", None])
def test_converters_agree_with_from_text(type_text, zone):
    t = parse_type(type_text)
    convert = converter(t, zone)

    @settings(max_examples=25, deadline=None)
    @given(canonical_value(t))
    def check(value):
        text = V.to_text(value, t, zone)
        expected = V.from_text(text, t, zone)
        assert (text if convert is None else convert(text)) == expected

    check()


@pytest.mark.parametrize("type_text", EXTRA_TYPES)
def test_converters_agree_with_from_text_for_other_types(type_text):
    t = parse_type(type_text)
    convert = converter(t, "UTC")
    for text in ("0", "1", "2", "7", "abc", "2024-01-01 00:00:00.5", "[1,2]"):
        try:
            expected = V.from_text(text, t, "UTC")
        except ValueError:
            with pytest.raises(ValueError):
                convert(text)  # type: ignore[misc]
            continue
        assert (text if convert is None else convert(text)) == expected


# ------------------------------------------------------------------------------------------- bad input

VALID_INSERT = {"database": "d", "table": "t", "pkNames": ["id"], "isDdl": False, "type": "INSERT", "es": 1,
                "mysqlType": {"id": "int", "b": "blob"}, "data": [{"id": "1", "b": "x"}]}


@pytest.mark.parametrize(("message", "expected"), [
    (b'{"type":"INSERT","data":[{"id":"1"}', "invalid JSON"),
    (b"[1, 2]", "not a Canal-JSON message"),
    (b"\xff\xfe", "invalid JSON"),
    (b"", "empty message value"),
    ({**VALID_INSERT, "type": "UPSERT"}, "unknown Canal event type 'UPSERT'"),
    ({k: v for k, v in VALID_INSERT.items() if k != "type"}, "missing required field `type`"),
    ({**VALID_INSERT, "table": ""}, "INSERT message without table"),
    ({**VALID_INSERT, "data": None}, "INSERT message without data rows"),
    ({**VALID_INSERT, "data": "oops"}, "data: Expected `array | null`, got `str`"),
    ({**VALID_INSERT, "data": [{"id": "1", "b": 1}]}, "data: Expected `str | null`, got `int`"),
    ({**VALID_INSERT, "es": "yesterday"}, "Expected `int | null`, got `str` - at `$.es`"),
    ({**VALID_INSERT, "mysqlType": ["int"]}, "Expected `object | null`, got `array`"),
    ({**VALID_INSERT, "pkNames": "id"}, "Expected `array | null`, got `str`"),
    ({**VALID_INSERT, "data": [{"id": "one"}]}, "column 'id': value 'one' does not fit type int"),
    ({**VALID_INSERT, "data": [{"id": "1", "b": "\u20ac"}]}, "column 'b': value '€' does not fit type blob"),
    ({**VALID_INSERT, "data": [{"b": "x"}]}, "INSERT row 0 lacks primary-key column 'id'"),
    ({**VALID_INSERT, "type": "UPDATE", "old": [{}, {}]}, "UPDATE has 1 data rows but 2 old rows"),
    ({**VALID_INSERT, "isDdl": True}, "isDdl true, row type INSERT and no sql: neither a DDL nor a row"),
    ({"type": "TIDB_WATERMARK", "_tidb": {}}, "TIDB_WATERMARK message without _tidb.watermarkTs"),
    ({**VALID_INSERT, "_tidb": {"commitTs": "soon"}}, "Expected `int | null`, got `str` - at `$._tidb.commitTs`"),
    ({**VALID_INSERT, "type": "UPDATE", "old": [{"b": 5}]}, "old: Expected `str | null`, got `int`"),
])
def test_bad_input_is_a_failure_that_says_why(message, expected):
    assert expected in reason_of(message)


def test_is_ddl_decides_over_a_row_type():
    # canal-json.md §10 item 2: isDdl true means a DDL; the statement is read, data and old are ignored
    (event,) = events_of({**VALID_INSERT, "isDdl": True, "sql": "ALTER TABLE t ADD c int"})
    assert (event.kind, event.ddl, event.database, event.table) == ("ddl", "ALTER TABLE t ADD c int", "d", "t")
    assert (event.before, event.after) == (None, None)


def test_numbers_for_numeric_columns_are_tolerated():
    # Every producer writes strings; a JSON number in a numeric column means the same value.
    (event,) = events_of({**VALID_INSERT, "data": [{"id": 1}]})
    assert event.after == {"id": 1}


def test_bad_rows_on_the_general_path_name_the_column():
    # An extra column sends the row down the general path; the bad value is still named.
    message = {**VALID_INSERT, "data": [{"id": "1", "extra": "e", "b": "\u0100"}]}
    assert "column 'b'" in reason_of(message)


def test_legacy_update_needs_both_images():
    assert "without both data and old" in reason_of({**VALID_INSERT, "type": "UPDATE"},
                                                    **{"dts-legacy-swap": "true"})


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_never_crash(value):
    out = decode(value)
    assert len(out.events) + len(out.failures) + out.skipped >= 1


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(TICDC_UPDATE) - 1))
def test_truncated_messages_fail(cut):
    out = decode(TICDC_UPDATE.encode()[:cut])
    assert not out.events and len(out.failures) == 1


@settings(max_examples=150, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                max_size=3), max_leaves=8),
       st.sampled_from([*sorted(VALID_INSERT), "old", "_tidb", "gtid", "sqlType", "sql"]))
def test_wrongly_typed_members_never_crash(junk, member):
    out = decode({**VALID_INSERT, member: junk})
    assert len(out.events) + len(out.failures) + out.skipped >= 1


def test_format_pickles_and_decodes_after_unpickling():
    fmt = create("canal-json", {"timestamp-zone": "+08:00"})
    first = fmt.decode([Record(value=json.dumps(SPEC_UPDATE).encode())]).events
    clone = pickle.loads(pickle.dumps(fmt))
    assert clone.decode([Record(value=json.dumps(SPEC_UPDATE).encode())]).events == first
    assert clone.settings == fmt.settings


def test_interleaved_tables_keep_their_own_schema():
    # The schema cache is keyed by table: two tables whose columns share names but not types, interleaved,
    # each keep their own conversions and column list.
    def message(table: str, types: dict[str, str], row: dict[str, str], kind: str = "INSERT",
                old: list[dict[str, str]] | None = None) -> dict:
        return {"data": [row], "database": "db", "es": 1000, "id": 1, "isDdl": False, "mysqlType": types,
                "old": old, "pkNames": ["id"], "sql": "", "sqlType": {}, "table": table, "ts": 1000, "type": kind}

    ints = {"id": "bigint", "v": "int", "d": "decimal(5,2)"}
    texts = {"id": "varchar(8)", "v": "varchar(8)", "d": "double"}
    records = [message("a", ints, {"id": "1", "v": "10", "d": "1.50"}),
               message("b", texts, {"id": "1", "v": "10", "d": "1.50"}),
               message("a", ints, {"id": "2", "v": "20", "d": "2.5e0"}, "UPDATE", [{"v": "19"}]),
               message("b", texts, {"id": "2", "v": "20", "d": "2.5e0"}, "UPDATE", [{"v": "19"}])]
    out = create("canal-json").decode([Record(value=json.dumps(m).encode(), offset=i) for i, m in enumerate(records)])
    assert not out.failures, out.failures[0].reason
    a1, b1, a2, b2 = out.events
    assert a1.after == {"id": 1, "v": 10, "d": "1.50"}
    assert b1.after == {"id": "1", "v": "10", "d": 1.5}
    assert (a2.before, a2.after) == ({"id": 2, "v": 19, "d": "2.50"}, {"id": 2, "v": 20, "d": "2.50"})
    assert (b2.before, b2.after) == ({"id": "2", "v": "19", "d": 2.5}, {"id": "2", "v": "20", "d": 2.5})
    assert [c.type for c in a1.columns] == ["bigint", "int", "decimal(5,2)"]
    assert [c.type for c in b1.columns] == ["varchar(8)", "varchar(8)", "double"]
    # events of one layout share one column list (the Spark layer caches its JSON by identity)
    assert a1.columns is a2.columns and b1.columns is b2.columns


def test_completed_old_image_keeps_the_after_image_order():
    message = {**SPEC_UPDATE, "data": [{"id": "1", "name": "A", "balance": "1.00", "tag": "1"}],
               "old": [{"tag": "2", "extra": "x", "balance": "2.00"}]}
    [event] = events_of(message)
    assert list(event.before) == ["id", "name", "balance", "tag", "extra"]
    assert event.before == {"id": 1, "name": "A", "balance": "2.00", "tag": "vip", "extra": "x"}

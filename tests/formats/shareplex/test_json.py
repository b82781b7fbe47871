"""shareplex-json: SharePlex JSON as Alibaba DTS writes it (spec shareplex-json.md)."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cdclake.cli import main as cli
from cdclake.cli.main import app
from cdclake.formats import create
from cdclake.formats.shareplex import json as shareplex_json
from cdclake.formats.shareplex.json import parse_key_columns
from cdclake.model import values as V
from cdclake.model.events import ChangeEvent, Column, pad_position
from cdclake.model.records import Record
from cdclake.model.types import parse_type
from tests.helpers.strategies import ALL_TYPES, columns_of, rows

# The seed's three examples (spec §6).
INSERT = {
    "meta": {"time": "2017-06-16T14:24:34", "userid": 84, "op": "ins", "scn": "14589063118712",
             "rowid": "AAATGpAAIAAItcIAAA", "trans": "7.0.411499", "seq": 1, "size": 11, "table": "CL_BIZ1.MIO_LOG",
             "idx": "1/11", "posttime": "2017-06-16T14:33:52"},
    "data": {"MIO_LOG_ID": "32539737"},
}
UPDATE = {
    "meta": {"time": "2017-06-16T15:38:13", "userid": 84, "op": "upd", "table": "CL_BIZ1.MIO_LOG"},
    "data": {"CNTR_NO": "1171201606"},
    "key": {"MIO_LOG_ID": "32537893", "PLNMIO_REC_ID": "31557806", "POL_CODE": None, "CNTR_TYPE": None,
            "CNTR_NO": "1171201606syui26"},
}
DELETE = {
    "meta": {"time": "2017-06-16T15:51:35", "userid": 84, "op": "del"},
    "data": {"MIO_LOG_ID": "32539739", "PLNMIO_REC_ID": "31557806", "POL_CODE": None, "CNTR_TYPE": None,
             "CG_NO": None},
}


def _record(message: dict | bytes, offset: int = 0, partition: int = 0) -> Record:
    value = message if isinstance(message, bytes) else json.dumps(message).encode()
    return Record(value=value, topic="t", partition=partition, offset=offset)


def decode(messages: list[dict | bytes], **options):
    return create("shareplex-json", options).decode([_record(m, i) for i, m in enumerate(messages)])


def events_of(message: dict | bytes, **options) -> list[ChangeEvent]:
    out = decode([message], **options)
    assert not out.failures, out.failures[0].reason
    return out.events


def reason_of(message: dict | bytes, **options) -> str:
    out = decode([message], **options)
    assert not out.events and len(out.failures) == 1, out
    return out.failures[0].reason


def _millis(text: str) -> int:
    return V.micros_from_datetime_text(text + "Z") // 1000


def test_spec_insert():
    (event,) = events_of(INSERT)
    assert (event.kind, event.op, event.database, event.table) == ("row", "c", "CL_BIZ1", "MIO_LOG")
    assert event.before is None and event.after == {"MIO_LOG_ID": "32539737"}
    assert event.columns == [Column("MIO_LOG_ID", "unknown", False)]
    assert event.commit_ts == event.ts_ms == _millis("2017-06-16T14:24:34") == 1497623074000
    assert event.position == pad_position(14589063118712, "7.0.411499", 1)
    assert event.key is None and event.source.format == "shareplex-json"


def test_spec_update_key_is_the_before_image():
    (event,) = events_of(UPDATE)
    assert event.op == "u" and event.table == "MIO_LOG"
    assert event.before == UPDATE["key"]
    assert event.after == {**UPDATE["key"], "CNTR_NO": "1171201606"}
    assert list(event.after) == list(UPDATE["key"])
    assert event.commit_ts == 1497627493000
    assert [c.name for c in event.columns] == list(UPDATE["key"])
    # No scn: Kafka order.
    assert event.position == pad_position(0, "", 0)


def test_an_scn_that_is_no_number_orders_as_none(caplog, monkeypatch):
    # spec §2: non-Oracle sources may send scn values of their own kind; the change is kept, in Kafka order
    monkeypatch.setattr(shareplex_json, "_WARNED_SCN", [])
    (event,) = events_of({**INSERT, "meta": {**INSERT["meta"], "scn": "mysql-bin.000003:120"}})
    assert event.after == INSERT["data"] and event.position == pad_position(0, "", 0)
    assert "meta.scn 'mysql-bin.000003:120' is not a number" in caplog.text  # said once, not per message
    events_of({**INSERT, "meta": {**INSERT["meta"], "scn": "other"}})
    assert "'other'" not in caplog.text


def test_spec_delete_without_table_fails():
    assert "without meta.table" in reason_of(DELETE)
    message = {**DELETE, "meta": {**DELETE["meta"], "table": "CL_BIZ1.MIO_LOG"}}
    (event,) = events_of(message)
    assert (event.op, event.before, event.after) == ("d", DELETE["data"], None)


@pytest.mark.parametrize(("code", "op"), [
    ("ins", "c"), ("INSERT", "c"), ("Insert", "c"), ("upd", "u"), ("UPDATE", "u"), ("del", "d"),
    ("DELETE", "d"), ("delete", "d")])
def test_row_op_codes(code, op):
    message = {"meta": {"op": code, "table": "O.T", "time": "2020-01-01T00:00:00"},
               "data": {"A": "1"}, "key": {"A": "0"}}
    (event,) = events_of(message)
    assert event.op == op


@pytest.mark.parametrize("code", ["TRUNCATE", "truncate", "trunc"])
def test_truncate(code):
    (event,) = events_of({"meta": {"op": code, "table": "O.T", "time": "2020-01-01T00:00:01Z", "scn": "9"}})
    assert (event.kind, event.database, event.table, event.commit_ts) == ("truncate", "O", "T", 1577836801000)
    assert event.before is event.after is None


@pytest.mark.parametrize("code", ["DROP COLUMN", "drop_column", "Drop-Column", "dropcol"])
def test_drop_column_keeps_the_message(code):
    message = {"meta": {"op": code, "table": "O.T"}, "data": {"GONE": None}}
    (event,) = events_of(message)
    assert (event.kind, event.table) == ("ddl", "T")
    assert json.loads(event.ddl) == message


@pytest.mark.parametrize(("text", "millis"), [
    ("2017-06-16T14:24:34", 1497623074000), ("2017-06-16T14:24:34Z", 1497623074000),
    ("2017-06-16T14:24:34.250Z", 1497623074250), ("2017-06-16 14:24:34", 1497623074000),
    ("2017-06-16T22:24:34+08:00", 1497623074000)])
def test_time_forms(text, millis):
    (event,) = events_of({**INSERT, "meta": {**INSERT["meta"], "time": text}})
    assert event.commit_ts == event.ts_ms == millis


def test_meta_numbers_as_numbers_or_digit_strings():
    big = 2**63 + 12345  # SCNs can exceed 2**53
    meta = {**INSERT["meta"], "scn": big, "seq": "3", "size": "11", "idx": "3/11"}
    (event,) = events_of({**INSERT, "meta": meta})
    assert event.position == pad_position(big, "7.0.411499", 3)
    meta = {**INSERT["meta"], "scn": str(big)}
    del meta["seq"], meta["size"]
    (event,) = events_of({**INSERT, "meta": meta})  # idx alone gives seq
    assert event.position == pad_position(big, "7.0.411499", 1)


def test_positions_of_a_replay_are_identical_and_order_follows_scn():
    first, again = decode([INSERT, INSERT]).events
    assert first.position == again.position and first.source.offset != again.source.offset
    later = {**INSERT, "meta": {**INSERT["meta"], "scn": "14589063118713", "seq": 1}}
    assert events_of(later)[0].position > first.position
    no_seq = {**INSERT, "meta": {k: v for k, v in INSERT["meta"].items() if k not in ("seq", "idx")}}
    out = decode([no_seq, no_seq])
    assert [e.position for e in out.events] == [pad_position(14589063118712, "7.0.411499", i) for i in (0, 1)]


def test_table_splits_on_the_first_dot():
    (event,) = events_of({**INSERT, "meta": {**INSERT["meta"], "table": "OWNER.T.WITH.DOTS"}})
    assert (event.database, event.table) == ("OWNER", "T.WITH.DOTS")
    (event,) = events_of({**INSERT, "meta": {**INSERT["meta"], "table": "PLAIN"}})
    assert (event.database, event.table) == (None, "PLAIN")


# ---------------------------------------------------------------------------------- UPDATE BEFORE/AFTER

def _half(code: str, seq: int, data: dict, trans: str = "1.2.3", table: str = "O.T") -> dict:
    return {"meta": {"op": code, "table": table, "trans": trans, "seq": seq, "size": 9, "scn": "100",
                     "time": "2020-01-01T00:00:00"}, "data": data}


def test_update_before_and_after_are_paired():
    before = _half("UPDATE BEFORE", 4, {"ID": "1", "V": "old", "W": "same"})
    after = _half("UPDATE AFTER", 5, {"ID": "1", "V": "new"})
    out = decode([before, after], **{"key-columns": "ID"})
    assert not out.failures and out.skipped == 1
    (event,) = out.events
    assert event.op == "u" and event.key == {"ID": "1"}
    assert event.before == {"ID": "1", "V": "old", "W": "same"}
    assert event.after == {"ID": "1", "V": "new", "W": "same"}
    assert event.position == pad_position(100, "1.2.3", 5) and event.source.offset == 1


def test_update_halves_across_partitions_are_paired_by_partition():
    records = [_record(_half("updb", 1, {"ID": "1"}), 0, partition=0),
               _record(_half("updb", 1, {"ID": "2"}), 0, partition=1),
               _record(_half("upda", 2, {"ID": "2", "V": "b"}), 1, partition=1),
               _record(_half("upda", 2, {"ID": "1", "V": "a"}), 1, partition=0)]
    out = create("shareplex-json").decode(records)
    assert not out.failures
    assert [(e.before, e.after) for e in out.events] == [({"ID": "2"}, {"ID": "2", "V": "b"}),
                                                        ({"ID": "1"}, {"ID": "1", "V": "a"})]


def test_unpaired_update_halves():
    after = _half("UPDATE AFTER", 5, {"ID": "1", "V": "new"})
    (event,) = events_of(after)  # an upsert of the after image
    assert (event.op, event.before, event.after) == ("u", None, {"ID": "1", "V": "new"})
    out = decode([_half("UPDATE BEFORE", 4, {"ID": "1"})])
    assert not out.events and "without its UPDATE AFTER" in out.failures[0].reason
    # A BEFORE followed by an AFTER of another seq does not pair.
    out = decode([_half("UPDATE BEFORE", 4, {"ID": "1"}), _half("UPDATE AFTER", 7, {"ID": "1"})])
    assert [e.before for e in out.events] == [None] and len(out.failures) == 1
    # Two BEFOREs in a row: the first one is left alone.
    out = decode([_half("updb", 1, {"ID": "1"}), _half("updb", 2, {"ID": "1"}), _half("upda", 3, {"ID": "9"})])
    assert [f.record.offset for f in out.failures] == [0]
    assert out.events[0].before == {"ID": "1"} and out.events[0].after == {"ID": "9"}
    with pytest.raises(Exception, match="UPDATE BEFORE on its own"):
        create("shareplex-json").decode_record(_record(_half("updb", 1, {"ID": "1"})))


def test_a_before_that_ends_its_partitions_records_waits_for_more_when_more_follow():
    fmt = create("shareplex-json")
    records = [_record(_half("updb", 1, {"ID": "1"}), 0, partition=0), _record(_half("updb", 1, {"ID": "2"}), 0, 1),
               _record(_half("updb", 3, {"ID": "3"}, trans="9"), 1, partition=1)]
    out = fmt.decode(records, more=True)
    # Partition 1's first BEFORE is followed by another record of its partition, which is not its AFTER.
    assert out.waiting == [records[0], records[2]] and [f.record for f in out.failures] == [records[1]]
    assert not fmt.decode(records).waiting  # no more to come: each BEFORE fails
    assert len(fmt.decode(records).failures) == 3
    after = _record(_half("upda", 2, {"ID": "1", "V": "a"}), 1, partition=0)
    later = fmt.decode([*out.waiting, after], more=True)
    assert [(e.before, e.after) for e in later.events] == [({"ID": "1"}, {"ID": "1", "V": "a"})]
    assert later.waiting == [records[2]] and not later.failures and later.skipped == 1


# ------------------------------------------------------------------------------------------ key columns

def test_key_columns_option():
    assert parse_key_columns("ID") == {None: ("ID",)}
    assert parse_key_columns("CL_BIZ1.MIO_LOG=MIO_LOG_ID; T2 = A , B ;*=ID") == {
        "cl_biz1.mio_log": ("MIO_LOG_ID",), "t2": ("A", "B"), None: ("ID",)}
    (event,) = events_of(UPDATE, **{"key-columns": "cl_biz1.mio_log=MIO_LOG_ID,PLNMIO_REC_ID;*=ID"})
    assert event.key == {"MIO_LOG_ID": "32537893", "PLNMIO_REC_ID": "31557806"}
    assert [c.name for c in event.columns if c.key] == ["MIO_LOG_ID", "PLNMIO_REC_ID"]
    reason = reason_of(INSERT, **{"key-columns": "*=ID"})
    assert "lacks key column 'ID'" in reason
    for bad in ("T=", "=A", "A=B=C=;x="):
        with pytest.raises(ValueError, match="key-columns"):
            create("shareplex-json", {"key-columns": bad})


# -------------------------------------------------------------------------------------------- encoding

def test_encoded_messages_follow_spec_section_7():
    event = ChangeEvent(kind="row", op="u", database="CL_BIZ1", table="MIO_LOG", key={"ID": "1"},
                        before={"ID": "1", "A": "x", "B": None}, after={"ID": "1", "A": "y", "B": None},
                        commit_ts=1497627493000, ts_ms=1497627493000)
    (record,) = create("shareplex-json").encode([event])
    message = json.loads(record.value)
    assert list(message["meta"]) == ["time", "userid", "op", "scn", "rowid", "trans", "seq", "size", "table",
                                     "idx", "posttime"]
    assert message["meta"]["time"] == "2017-06-16T15:38:13" and message["meta"]["op"] == "upd"
    assert message["meta"]["table"] == "CL_BIZ1.MIO_LOG" and message["meta"]["idx"] == "1/1"
    assert isinstance(message["meta"]["scn"], str) and isinstance(message["meta"]["seq"], int)
    assert message["data"] == {"A": "y"} and message["key"] == {"ID": "1", "A": "x", "B": None}


def test_encoder_numbers_a_transaction():
    events = [ChangeEvent(kind="row", op="c", database="O", table="T", after={"ID": str(i)}, commit_ts=ts,
                          ts_ms=ts) for i, ts in enumerate((1000, 1000, 1000, 2000))]
    metas = [json.loads(r.value)["meta"] for r in create("shareplex-json").encode(events)]
    assert [(m["seq"], m["size"], m["idx"], m["scn"]) for m in metas] == [
        (1, 3, "1/3", "1000"), (2, 3, "2/3", "1000"), (3, 3, "3/3", "1000"), (1, 1, "1/1", "2000")]


TEXT_COLUMNS = columns_of(ALL_TYPES)
_types = {c.name: parse_type(c.type) for c in TEXT_COLUMNS}


@st.composite
def text_events(draw) -> list[ChangeEvent]:
    """Row and truncate events whose values are text, as SharePlex carries them."""
    out = []
    for _ in range(draw(st.integers(1, 4))):
        commit_ts = draw(st.integers(0, 2**34)) * 1000  # the time member has second resolution
        kind = draw(st.sampled_from(["row", "row", "row", "truncate"]))
        if kind == "truncate":
            out.append(ChangeEvent(kind="truncate", database="OWNER", table="T", commit_ts=commit_ts,
                                   ts_ms=commit_ts))
            continue
        op = draw(st.sampled_from("cud"))

        def text_row():
            row = draw(rows(TEXT_COLUMNS))
            return {name: None if value is None else V.to_text(value, _types[name]) for name, value in row.items()}

        before = text_row() if op in "ud" else None
        after = text_row() if op in "cu" else None
        image = after if after is not None else before
        out.append(ChangeEvent(kind="row", op=op, database="OWNER", table="T", key={"id": image["id"]},
                               before=before, after=after,
                               columns=[Column(c.name, "unknown", c.name == "id") for c in TEXT_COLUMNS],
                               commit_ts=commit_ts, ts_ms=commit_ts))
    return out



@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text_events())
def test_round_trip_with_text_values(events):
    fmt = create("shareplex-json", {"key-columns": "id"})
    records = fmt.encode(events)
    out = fmt.decode(records)
    assert not out.failures, out.failures[0].reason
    assert [msgspec.structs.replace(e, position=None, source=None) for e in out.events] == events
    # Positions carry scn/trans/seq, so re-encoding what was decoded writes the same messages.
    assert [r.value for r in fmt.encode(out.events)] == [r.value for r in records]


def test_encoder_leaves_out_what_the_format_cannot_carry():
    events = [ChangeEvent(kind="resolved", commit_ts=5), ChangeEvent(kind="ddl", ddl="ALTER TABLE t ADD c int")]
    assert create("shareplex-json").encode(events) == []


def test_cli_decodes_a_message_per_line_file(tmp_path):
    path = tmp_path / "shareplex.txt"
    path.write_text("\n".join(json.dumps(m) for m in (INSERT, UPDATE, DELETE)) + "\n")
    result = CliRunner().invoke(app, ["decode", "--format", "shareplex-json", str(path)])
    assert result.exit_code == 1  # the spec's delete example names no table
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [line["op"] for line in lines] == ["c", "u"]
    assert "without meta.table" in result.output


@pytest.mark.parametrize("batch", [1, 2, 3])
def test_cli_pairs_update_halves_in_any_of_its_batches(tmp_path, monkeypatch, batch):
    monkeypatch.setattr(cli, "BATCH", batch)
    path = tmp_path / "halves.txt"
    path.write_text("\n".join(json.dumps(m) for m in (
        INSERT, _half("updb", 1, {"ID": "1"}), _half("upda", 2, {"ID": "2"}), _half("updb", 3, {"ID": "2"}))) + "\n")
    result = CliRunner().invoke(app, ["decode", "--format", "shareplex-json", str(path)])
    assert result.exit_code == 1  # the last BEFORE has no AFTER
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [(line["op"], line["before"]) for line in lines] == [("c", None), ("u", {"ID": "1"})]
    assert f"{path}:4: shareplex-json: UPDATE BEFORE" in result.output
    assert "4 records: 2 events, 1 skipped, 1 failed" in result.output


# ------------------------------------------------------------------------------------------- bad input

@pytest.mark.parametrize(("message", "expected"), [
    (b'{"meta": {"op": "ins"', "invalid JSON"),
    (b"[]", "not a SharePlex JSON message"),
    ({"data": {"A": "1"}}, "missing required field `meta`"),
    ({"meta": "ins"}, "Expected `object`, got `str` - at `$.meta`"),
    ({"meta": {"table": "O.T"}}, "missing required field `op`"),
    ({"meta": {"op": "merge", "table": "O.T"}}, "unknown SharePlex operation 'merge'"),
    ({"meta": {"op": "ins", "table": "O.T", "seq": "first"}, "data": {}}, "meta.seq 'first' is not a number"),
    ({"meta": {"op": "ins", "table": "O.T", "seq": 2, "idx": "1/11"}, "data": {}}, "disagrees with seq 2"),
    ({"meta": {"op": "ins", "table": "O.T", "idx": "one of eleven"}, "data": {}}, "is not seq/size"),
    ({"meta": {"op": "ins", "table": "O.T", "time": "yesterday"}, "data": {}}, "meta.time 'yesterday' is not a time"),
    ({"meta": {"op": "ins", "table": "O.T"}}, "insert without data"),
    ({"meta": {"op": "del", "table": "O.T"}}, "delete without data"),
    ({"meta": {"op": "ins", "table": "O.T"}, "data": {"A": 1}}, "Expected `str | null`, got `int`"),
    ({"meta": {"op": "ins", "table": "O."}, "data": {}}, "names no table"),
    ({"meta": {"op": "ins", "table": ""}, "data": {}}, "without meta.table"),
    (b"", "invalid JSON"),
])
def test_bad_input_is_a_failure_that_says_why(message, expected):
    assert expected in reason_of(message)


def test_tombstones_are_skipped():
    out = create("shareplex-json").decode([Record(value=None)])
    assert (out.events, out.failures, out.skipped) == ([], [], 1)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_never_crash(value):
    out = decode([value])
    assert len(out.events) + len(out.failures) + out.skipped == 1


@settings(max_examples=150, deadline=None)
@given(st.integers(0, len(json.dumps(INSERT)) - 1))
def test_truncated_messages_fail(cut):
    out = decode([json.dumps(INSERT).encode()[:cut]])
    assert not out.events and len(out.failures) == 1


@settings(max_examples=150, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                max_size=3), max_leaves=8),
       st.sampled_from(["meta.op", "meta.time", "meta.scn", "meta.seq", "meta.idx", "meta.table", "meta.trans",
                        "data", "key", "meta"]))
def test_wrongly_typed_members_never_crash(junk, member):
    message = json.loads(json.dumps(UPDATE))
    message["meta"]["scn"] = "1"
    if member.startswith("meta."):
        message["meta"][member[5:]] = junk
    else:
        message[member] = junk
    out = decode([message])
    assert len(out.events) + len(out.failures) == 1

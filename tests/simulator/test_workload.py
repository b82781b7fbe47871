"""The simulated database, its oracle, and emit; and, for every format present, emit → decode → fold equals
the expected state (the cross-check of each encoder/decoder pair against the oracle)."""

from __future__ import annotations

import base64
import datetime as dt
import importlib
import itertools
import json
import random
import re
import struct
from collections import Counter

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cdclake import formats
from cdclake import simulator as W
from cdclake.cli.main import app
from cdclake.formats.base import Format
from cdclake.model import types as T
from cdclake.model import values as V
from cdclake.model.events import (
    DDL,
    DELETE,
    INSERT,
    RESOLVED,
    ROW,
    TRUNCATE,
    UPDATE,
    ChangeEvent,
    Column,
    Source,
    to_json,
)
from cdclake.model.records import Record, read_file
from cdclake.model.types import parse_type
from cdclake.simulator.values import _float32_text

# Option variants that change what a format's producer writes or its decoder delivers; every other format
# runs with its defaults.
VARIANTS: dict[str, list[dict[str, str]]] = {
    "canal-json": [{}, {"flavour": "tidb"}, {"flavour": "dts"}],
    "debezium-json": [{}, {"schemas-enable": "false"}],
    "ticdc-open": [{}, {"timestamp-zone": "Asia/Shanghai"}],
    "ticdc-avro": [{}, {"enable-tidb-extension": "true"}],
}
# Cross-check failures that are open issues of a format (reported to its owner), each with its reason. strict:
# the test fails as soon as the gap is closed, so that the entry is removed with the fix.
KNOWN_GAPS: dict[tuple[str, str], str] = {
}
CASES = [pytest.param(name, options, id=f"{name}{options or ''}",
                      marks=[pytest.mark.xfail(reason=KNOWN_GAPS[(name, str(options))], strict=True)]
                      if (name, str(options)) in KNOWN_GAPS else [])
         for name in formats.names() for options in VARIANTS.get(name, [{}])]


def _key(row: dict, names: list[str]) -> W.KeyTuple:
    return tuple(sorted((n, row[n]) for n in names))


MOVED = r"RENAME TABLE `([^`]+)`\.`([^`]+)` TO `([^`]+)`\.`([^`]+)`$"
RENAMED = r"ALTER TABLE \S+ (?:RENAME|CHANGE) COLUMN `([^`]+)` (?:TO )?`([^`]+)`"


def naive_fold(events: list[ChangeEvent]) -> W.State:
    """The simplest possible reading of the simulator's own events, in the order given (commit order)."""
    state: W.State = {}
    for e in events:
        ident = (e.database, e.table)
        names = [c.name for c in e.columns or () if c.key]
        if e.kind == ROW:
            rows = state.setdefault(ident, {})
            if e.before is not None:
                rows.pop(_key(e.before, names), None)
            if e.after is not None:
                rows[_key(e.after, names)] = e.after
        elif e.kind == TRUNCATE or (e.kind == DDL and e.ddl.startswith("TRUNCATE")):
            state[ident] = {}
        elif e.kind == DDL and e.ddl.startswith("DROP TABLE"):
            state.pop(ident, None)
        elif e.kind == DDL and e.ddl.startswith("CREATE TABLE"):
            state[ident] = {}
        elif e.kind == DDL and (moved := re.match(MOVED, e.ddl)):
            state[(moved[3], moved[4])] = state.pop((moved[1], moved[2]), {})
        elif e.kind == DDL and (renamed := re.match(RENAMED, e.ddl)):
            old, new = renamed.groups()
            rows = state.get(ident, {})
            for k, row in rows.items():
                rows[k] = {(new if n == old else n): v for n, v in row.items()}
        elif e.kind == DDL:
            action, name = re.match(r"ALTER TABLE \S+ (ADD|DROP) COLUMN `([^`]+)`", e.ddl).groups()
            rows = state.get(ident, {})
            for k, row in rows.items():
                rows[k] = {**row, name: None} if action == "ADD" else {n: v for n, v in row.items() if n != name}
    return state


def same(a: W.State, b: W.State) -> bool:
    """States are equal when their tables with rows are (a table with no rows may or may not be listed)."""
    return {k: v for k, v in a.items() if v} == {k: v for k, v in b.items() if v}


def busy(seed: int = 1, **settings) -> W.Database:
    """A database with every DDL kind, frequent DDL and key changes, and resolved timestamps."""
    profile = W.Profile(ddl=frozenset(W.DDL_KINDS), resolved=True)
    return W.Database(seed=seed, tables=4, profile=profile, ddl_rate=0.03, key_change_rate=0.2, **settings)


# ------------------------------------------------------------------------------------------- the simulator

def test_same_seed_same_events_and_records():
    first, second = busy(seed=9), busy(seed=9)
    a, b = first.run(3000), second.run(3000)
    assert [to_json(e) for e in a] == [to_json(e) for e in b]
    assert first.expected() == second.expected()
    assert [to_json(e) for e in busy(seed=10).run(3000)] != [to_json(e) for e in a]
    ra = W.emit(a, "canal-json", partitions=3, replay_fraction=0.1, seed=4, options={"flavour": "tidb"})
    rb = W.emit(b, "canal-json", partitions=3, replay_fraction=0.1, seed=4, options={"flavour": "tidb"})
    assert ra == rb


def test_run_continues_where_it_stopped():
    whole = busy(seed=2)
    pieces = busy(seed=2)
    events = whole.run(2000)
    split = pieces.run(700) + pieces.run(1300)
    assert [to_json(e) for e in split][: len(events)] == [to_json(e) for e in events][: len(split)]
    assert len(split) >= 2000


def test_max_keys_caps_the_live_rows_and_keeps_changing_them():
    capped = W.Database(seed=5, tables=2, max_keys=40, ddl_rate=0.0)
    changes = capped.run(5_000)
    assert 0 < sum(len(rows) for rows in capped.expected().values()) <= 40
    ops = Counter(e.op for e in changes if e.kind == ROW)
    assert ops[UPDATE] > 3 * ops[INSERT]  # inserts become updates once a table holds its share
    free = W.Database(seed=5, tables=2, ddl_rate=0.0)
    free.run(5_000)
    assert sum(len(rows) for rows in free.expected().values()) > 40


def test_events_are_whole_canonical_changes():
    db = busy(seed=3)
    events = db.run(4000)
    kinds = Counter(e.op if e.kind == ROW else e.kind for e in events)
    assert kinds[INSERT] and kinds[UPDATE] and kinds[DELETE] and kinds[DDL] and kinds[RESOLVED]
    key_changes = 0
    for e in events:
        if e.kind != ROW:
            continue
        names = {c.name for c in e.columns}
        key_names = [c.name for c in e.columns if c.key]
        assert key_names and all(not c.nullable for c in e.columns if c.key)
        for image in (e.before, e.after):
            assert image is None or set(image) == names  # whole images over the event's columns
        assert (e.before is None) == (e.op == INSERT) and (e.after is None) == (e.op == DELETE)
        image = e.after if e.after is not None else e.before
        assert e.key == {n: image[n] for n in key_names}
        if e.op == UPDATE and any(e.before[n] != e.after[n] for n in key_names):
            key_changes += 1
    assert key_changes > 10


def test_commit_ts_is_a_tso_shared_by_a_transaction_and_positions_increase():
    events = busy(seed=4).run(4000)
    changes = [e for e in events if e.kind != RESOLVED]
    assert all(e.commit_ts >> 18 == e.ts_ms for e in changes)  # TiDB TSO: physical ms above 18 bits
    assert all(a.commit_ts <= b.commit_ts for a, b in itertools.pairwise(changes))
    positions = [e.position for e in changes]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    per_txn = Counter(e.commit_ts for e in changes)
    assert max(per_txn.values()) > 1  # transactions of several rows share one commit_ts
    # A resolved ts covers everything before it and nothing after it.
    last = 0
    for i, e in enumerate(events):
        if e.kind == RESOLVED:
            assert e.commit_ts == last
            assert all(later.commit_ts > e.commit_ts for later in events[i + 1:i + 50] if later.kind != RESOLVED)
        else:
            last = e.commit_ts


def test_one_change_per_row_per_transaction():
    events = busy(seed=5).run(4000)
    seen: set = set()
    for e in events:
        if e.kind != ROW:
            continue
        names = [c.name for c in e.columns if c.key]
        touched = {(e.commit_ts, e.table, _key(image, names)) for image in (e.before, e.after) if image}
        assert not touched & seen  # neither the old nor the new key changed earlier in this transaction
        seen |= touched


def test_ms_clock_profile_gives_commit_time_in_ms():
    events = W.Database(seed=1, profile=W.Profile(clock="ms")).run(500)
    assert all(e.commit_ts == e.ts_ms for e in events)


@pytest.mark.parametrize("type_text", W.ALL_TYPES)
def test_generated_values_fit_their_type(type_text):
    gen = W.value_generator(type_text)
    r = random.Random(type_text)
    t = parse_type(type_text)
    for _ in range(2000):
        check_value(t, gen(r))


def check_value(t: T.SqlType, v: object) -> None:
    f = t.family
    if f in (T.INTEGER, T.BIT, T.YEAR):
        assert type(v) is int
        if f == T.INTEGER:
            bits = t.bits
            lo, hi = (0, 2**bits - 1) if t.unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
            assert lo <= v <= hi
        elif f == T.BIT:
            assert 0 <= v < 2**t.length
        else:
            assert 1901 <= v <= 2155
    elif f == T.DECIMAL:
        fraction = r"\." + r"\d" * t.scale if t.scale else ""
        assert re.fullmatch(r"-?\d+" + fraction, v), v
        assert len(v.lstrip("-").replace(".", "").lstrip("0")) <= t.length
        assert not re.fullmatch(r"-0+(\.0+)?", v)  # no negative zero
    elif f == T.FLOAT:
        assert type(v) is float and struct.unpack("<f", struct.pack("<f", v))[0] == v
        assert _float32_text(v) is not None and float(_float32_text(v)) == v
    elif f == T.DOUBLE:
        assert type(v) is float and v == v and abs(v) != float("inf")
    elif f == T.DATE:
        assert re.fullmatch(r"\d{4}-\d\d-\d\d", v) and dt.date.fromisoformat(v)
    elif f in (T.DATETIME, T.TIMESTAMP):
        frac = rf"\.\d{{{t.fsp}}}" if t.fsp else ""
        sep, zone = (" ", "") if f == T.DATETIME else ("T", "Z")
        assert re.fullmatch(rf"\d{{4}}-\d\d-\d\d{sep}\d\d:\d\d:\d\d{frac}{zone}", v), v
        moment = dt.datetime.fromisoformat(v.rstrip("Z").replace(" ", "T"))
        if f == T.TIMESTAMP:
            assert dt.datetime(1970, 1, 1, 0, 0, 1) < moment < dt.datetime(2038, 1, 19, 3, 14, 7)
    elif f == T.TIME:
        frac = rf"\.\d{{{t.fsp}}}" if t.fsp else ""
        assert re.fullmatch(rf"-?\d\d\d?:[0-5]\d:[0-5]\d{frac}", v), v
        assert int(v.lstrip("-").split(":")[0]) <= 838
        assert not re.fullmatch(r"-00:00:00(\.0+)?", v)  # no negative zero
    elif f == T.TEXT:
        assert isinstance(v, str) and len(v) <= (t.length or 65535)
        assert not any(0xD800 <= ord(c) <= 0xDFFF for c in v)
        if t.name == "char":
            assert not v.endswith(" ")
    elif f == T.BINARY:
        data = base64.b64decode(v, validate=True)
        assert len(data) == t.length if t.name == "binary" else len(data) <= (t.length or 65535)
    elif f == T.JSON:
        json.loads(v)
    elif f == T.ENUM:
        assert v in t.members
    elif f == T.SET:
        chosen = v.split(",") if v else []
        assert chosen == [m for m in t.members if m in chosen]
    else:
        raise AssertionError(f"no check for {t}")


def test_tables_have_every_type_and_composite_keys():
    db = W.Database(seed=1, tables=3)
    first = db.tables[("sim", "t0")].columns
    assert [c.type for c in first if not c.key] == list(W.ALL_TYPES)
    assert [c.name for c in db.tables[("sim", "t1")].columns if c.key] == ["tenant", "code"]
    assert W.Database(seed=1, types=("int", "text")).tables[("sim", "t0")].gens.keys() == {"c0_int", "c1_text"}


# ------------------------------------------------------------------------------------------------ the oracle

def test_expected_state_equals_an_independent_fold():
    db = busy(seed=6)
    events = db.run(6000)
    assert same(db.state(), naive_fold(events))
    assert same(W.fold(events), db.state())
    assert any(db.state().values())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32), tables=st.integers(1, 4))
def test_fold_matches_the_database_for_any_seed(seed, tables):
    profile = W.Profile(ddl=frozenset(W.DDL_KINDS), resolved=True)
    db = W.Database(seed=seed, tables=tables, profile=profile, ddl_rate=0.05, key_change_rate=0.3)
    events = db.run(400)
    assert same(W.fold(events), db.state()) and same(db.state(), naive_fold(events))


def test_fold_orders_by_commit_ts_and_position_not_arrival():
    db = busy(seed=7)
    events = db.run(3000)
    shuffled = list(events)
    random.Random(1).shuffle(shuffled)
    assert same(W.fold(shuffled), db.state())
    # A redelivered copy sorts beside its original and changes nothing.
    again = events + [msgspec.structs.replace(e) for e in events[100:900]]
    assert same(W.fold(again), db.state())


def test_fold_orders_a_change_without_commit_ts_after_its_partitions_latest():
    columns = [Column("id", "bigint", key=True, nullable=False), Column("v", "int")]

    def row(op, v, ts, partition, offset, position=None):
        image = {"id": 1, "v": v}
        return ChangeEvent(kind=ROW, op=op, database="d", table="t", key={"id": 1}, columns=columns,
                           before=image if op == DELETE else None, after=None if op == DELETE else image,
                           commit_ts=ts, position=position, source=Source("f", "x", partition, offset))

    key = (("id", 1),)
    inserted, deleted = row(INSERT, 1, 100, 0, 0, "a"), row(DELETE, 1, None, 0, 1)
    assert W.fold([inserted, deleted]) == {("d", "t"): {}}  # the tombstone follows the insert it came after
    again = row(INSERT, 2, 100, 0, 2, "b")  # same commit ts, later in the log: still after the delete?
    assert W.fold([inserted, deleted, again])[("d", "t")] == {}  # no: it sorts by position within ts 100
    later = row(INSERT, 3, 101, 0, 2, "c")
    assert W.fold([inserted, deleted, later])[("d", "t")][key]["v"] == 3
    # A resolved ts seen in the partition counts, so a delete after it follows that commit ts.
    resolved = ChangeEvent(kind=RESOLVED, commit_ts=105, source=Source("f", "x", 0, 1))
    other = row(INSERT, 4, 104, 1, 0, "d")  # another partition, committed before the resolved ts
    assert W.fold([inserted, resolved, row(DELETE, 1, None, 0, 2), other])[("d", "t")] == {}


def test_key_changes_move_rows():
    db = W.Database(seed=8, tables=1, key_change_rate=1.0)
    events = db.run(1500)
    moves = [e for e in events if e.op == UPDATE and e.before["id"] != e.after["id"]]
    assert moves
    state = db.state()[("sim", "t0")]
    last_touch: dict = {}
    for i, e in enumerate(events):
        for image in (e.before, e.after):
            if image is not None:
                last_touch[image["id"]] = i
    for e in moves:
        i = events.index(e)
        if last_touch[e.before["id"]] == i:  # the old key never came back
            assert (("id", e.before["id"]),) not in state
        if last_touch[e.after["id"]] == i:
            assert state[(("id", e.after["id"]),)] == e.after


def test_deletes_remove_rows():
    db = W.Database(seed=9, tables=1)
    events = db.run(1500)
    deleted = {e.before["id"] for e in events if e.op == DELETE}
    alive = {e.after["id"] for e in events if e.after is not None}
    state = db.state()[("sim", "t0")]
    reinserted = {e.after["id"] for e in events if e.op == INSERT and e.after["id"] in deleted}
    assert deleted and reinserted  # deleted keys are sometimes inserted again
    for ident in deleted:
        last = [e for e in events if (e.after or e.before)["id"] == ident or (e.before or {}).get("id") == ident][-1]
        assert ((("id", ident),) in state) == (last.op != DELETE and last.after["id"] == ident)
    assert {k[0][1] for k in state} <= alive


def _ddl_db(kind: str, seed: int = 1) -> tuple[W.Database, list[ChangeEvent], ChangeEvent]:
    db = W.Database(seed=seed, tables=2, profile=W.Profile(ddl=frozenset({kind}), truncate_kind=DDL))
    events = db.run(400)
    db.ddl_rate = 1.0
    statement = db.run(1)
    assert len(statement) == 1
    return db, events + statement, statement[0]


def test_add_column_gives_present_rows_a_null_column():
    db, events, ddl = _ddl_db(W.ADD_COLUMN)
    name = re.search(r"ADD COLUMN `([^`]+)` (.+) NULL$", ddl.ddl).group(1)
    rows = db.state()[(ddl.database, ddl.table)]
    assert rows and all(row[name] is None for row in rows.values())
    assert ddl.columns[-1].name == name and ddl.columns[-1].nullable
    assert same(W.fold(events), db.state())
    db.ddl_rate = 0.0
    later = [e for e in db.run(300) if e.table == ddl.table and e.after is not None]
    assert later and all(name in e.after for e in later)


def test_drop_column_removes_it():
    db, events, ddl = _ddl_db(W.DROP_COLUMN)
    name = re.search(r"DROP COLUMN `([^`]+)`$", ddl.ddl).group(1)
    rows = db.state()[(ddl.database, ddl.table)]
    assert rows and all(name not in row for row in rows.values())
    assert name not in {c.name for c in ddl.columns}
    assert same(W.fold(events), db.state())


def test_truncate_empties_the_table():
    db, events, ddl = _ddl_db(W.TRUNCATE_TABLE)
    assert ddl.ddl.startswith("TRUNCATE TABLE") and db.state()[(ddl.database, ddl.table)] == {}
    assert same(W.fold(events), db.state())
    profile = W.Profile(ddl=frozenset({W.TRUNCATE_TABLE}), truncate_kind=TRUNCATE, ddl_to="key")
    db = W.Database(seed=1, profile=profile, ddl_rate=0.05)
    events = db.run(2000)
    assert any(e.kind == TRUNCATE and e.ddl is None for e in events)
    assert same(W.fold(events), db.state())


def test_drop_table_then_create_again():
    db = W.Database(seed=2, tables=3, profile=W.Profile(ddl=frozenset({W.DROP_TABLE})), ddl_rate=0.02)
    events = db.run(6000)
    drops = [e for e in events if e.kind == DDL and e.ddl.startswith("DROP TABLE")]
    creates = [e for e in events if e.kind == DDL and e.ddl.startswith("CREATE TABLE")]
    assert drops and creates
    assert same(W.fold(events), db.state()) and same(db.state(), naive_fold(events))
    assert all(e.columns for e in creates)


def test_only_the_profiles_ddl_and_resolved():
    events = W.Database(seed=1, profile=W.Profile(), ddl_rate=0.5).run(2000)
    assert {e.kind for e in events} == {ROW}
    events = W.Database(seed=1, profile=W.Profile(ddl=frozenset({W.ADD_COLUMN})), ddl_rate=0.2).run(2000)
    assert {e.ddl.split()[3] for e in events if e.kind == DDL} == {"ADD"}


def test_expected_state_is_what_the_format_delivers():
    def expected(profile: W.Profile) -> W.State:
        db = W.Database(seed=3, profile=profile)
        db.run(600)
        return db.expected()

    types = {c.name: parse_type(c.type) for table in W.Database(seed=3).tables.values() for c in table.columns}
    canonical = expected(W.Profile())
    integers, texts = expected(W.Profile(labels=False)), expected(W.Profile(text_values=True))
    enum, sets = parse_type("enum('a','b','c d')"), parse_type("set('x','y','z')")
    compared = 0
    for ident, rows in canonical.items():
        for key, row in rows.items():
            for name, value in row.items():
                text_key = tuple((n, v if isinstance(v, str) else str(v)) for n, v in key)
                number, text = integers[ident][key][name], texts[ident][text_key][name]
                if value is None:
                    assert number is None and text is None
                    continue
                assert text == (value if isinstance(value, str) else V.to_text(value, types[name]))
                assert isinstance(text, str)
                if name.endswith("_enum"):
                    assert number == enum.members.index(value) + 1
                    compared += 1
                elif name.endswith("_set"):
                    assert number == sum(1 << enum_i for enum_i, m in enumerate(sets.members)
                                         if m in value.split(","))
                else:
                    assert number == value
    assert compared


def test_profiles():
    assert W.profile_for("no-such-format") == W.DEFAULT_PROFILE
    assert W.profile_for("canal-json").labels and not W.profile_for("canal-json", {"flavour": "tidb"}).labels
    assert W.profile_for("canal-json", {"flavour": "tidb"}).clock == "tso"
    assert W.profile_for("shareplex-json").text_values
    for profile in W.PROFILES.values():
        assert set(profile.types) <= set(W.ALL_TYPES) and profile.ddl <= set(W.DDL_KINDS)
    W.Profile().to_dict()


def test_a_million_events_shape_at_small_scale():
    # The generator's speed target is a million events in well under a minute; here only that sizes add up.
    db = W.Database(seed=1)
    assert len(db.run(20_000)) >= 20_000


# ---------------------------------------------------------------------------------------------------- emit

def _decoded(records: list[Record], name: str, options: dict | None = None):
    out = formats.create(name, options).decode(records)
    assert not out.failures, [f.describe() for f in out.failures[:3]]
    return out.events


def test_emit_partitions_rows_by_key_and_numbers_offsets():
    db = busy(seed=11)
    events = db.run(3000)
    records = W.emit(events, "canal-json", partitions=4, options={"flavour": "tidb"})
    by_partition: dict = {}
    for r in records:
        by_partition.setdefault((r.topic, r.partition), []).append(r.offset)
    assert set(by_partition) == {("cdclake-sim", p) for p in range(4)}
    assert all(offsets == list(range(len(offsets))) for offsets in by_partition.values())
    decoded = _decoded(records, "canal-json", {"flavour": "tidb"})
    for e in decoded:
        if e.kind == ROW:
            key = e.key
            assert e.source.partition == W.key_partition(e.database, e.table, key, 4)
        elif e.kind in (DDL, TRUNCATE):
            assert e.source.partition == 0  # TiCDC canal-json: DDL to partition 0 only
    resolved = Counter(e.commit_ts for e in decoded if e.kind == RESOLVED)
    assert resolved and set(resolved.values()) == {4}  # watermarks go to every partition
    # Each partition keeps commit order, and ends with nothing after its last resolved ts that is older.
    for p in range(4):
        stamps = [e.commit_ts for e in decoded if e.source.partition == p]
        assert stamps == sorted(stamps)


def test_emit_one_key_stays_in_one_partition():
    events = W.Database(seed=12, tables=2, key_change_rate=0.0).run(3000)
    records = W.emit(events, "canal-json", partitions=5)
    where: dict = {}
    for e in _decoded(records, "canal-json"):
        if e.kind == ROW:
            where.setdefault((e.table, tuple(sorted(e.key.items()))), set()).add(e.source.partition)
    assert where and all(len(parts) == 1 for parts in where.values())
    assert len({p for parts in where.values() for p in parts}) == 5


def test_emit_replays_are_later_copies_and_leave_the_state_alone():
    options = {"flavour": "tidb"}
    db = W.Database(seed=13, tables=4, profile=W.profile_for("canal-json", options), ddl_rate=0.03,
                    key_change_rate=0.2)
    events = db.run(3000)
    snapshot = [to_json(e) for e in events]
    plain = W.emit(events, "canal-json", partitions=2, options=options)
    replayed = W.emit(events, "canal-json", partitions=2, replay_fraction=0.1, seed=1, options=options)
    assert [to_json(e) for e in events] == snapshot  # emit does not touch the events
    assert len(plain) * 1.08 < len(replayed) < len(plain) * 1.12
    for p in range(2):
        original = [(r.key, r.value) for r in plain if r.partition == p]
        got = [r for r in replayed if r.partition == p]
        assert [r.offset for r in got] == list(range(len(got)))
        seen: list = []
        matched = 0
        for r in got:
            content = (r.key, r.value)
            if matched < len(original) and content == original[matched]:
                matched += 1
            else:  # a redelivery: an exact copy of a record sent before
                assert content in original[:matched]
            seen.append(content)
        assert matched == len(original)
    assert W.diff_states(db.expected(), W.fold(_decoded(replayed, "canal-json", options))) == []


def test_emit_rejects_bad_arguments():
    with pytest.raises(ValueError, match="partitions"):
        W.emit([], "canal-json", partitions=0)
    with pytest.raises(ValueError, match="replay"):
        W.emit([], "canal-json", replay_fraction=1.5)
    with pytest.raises(ValueError, match="unknown format"):
        W.emit([], "no-such-format")


def test_route_per_table_topics_and_broadcasts():
    db = busy(seed=14)
    events = db.run(1500)
    profile = W.Profile(topics="table", ddl_to="all", resolved_to="all")
    groups = W.route(events, profile, 3)
    tables = {(e.database, e.table) for e in events if e.kind != RESOLVED}
    assert {g[0] for g in groups} == tables
    resolved = [e for e in events if e.kind == RESOLVED]
    for group, routed in groups.items():
        assert [e for e in routed if e.kind == RESOLVED] == resolved  # every partition of every topic
        ddl = [e for e in events if e.kind == DDL and (e.database, e.table) == group[0]]
        assert [e for e in routed if e.kind == DDL] == ddl
        assert all((e.database, e.table) == group[0] for e in routed if e.kind != RESOLVED)
    single = W.route(events, W.Profile(ddl_to="first"), 3)
    assert {g[0] for g in single} == {None}
    assert all(not any(e.kind == DDL for e in single[(None, p)]) for p in (1, 2))


class _Echo(Format):
    """A stand-in producer that names per-table topics itself and writes Debezium-like tombstones."""

    name = "echo"

    def encode(self, events):
        out = []
        for e in events:
            key = None if e.key is None else msgspec.json.encode(e.key)
            topic = f"echo.{e.database}.{e.table}" if e.kind == ROW else ""
            out.append(Record(key=key, value=to_json(e), topic=topic))
            if e.op == DELETE:
                out.append(Record(key=key, value=None, topic=topic))
        return out


def test_emit_keeps_encoder_topics_tombstones_and_stamps_times(monkeypatch):
    monkeypatch.setattr(formats, "create", lambda name, options=None: _Echo())
    db = busy(seed=15)
    events = db.run(1500)
    records = W.emit(events, "echo", partitions=2, profile=W.Profile(topics="table"))
    topics = {r.topic for r in records}
    assert topics == {f"echo.{d}.{t}" for d, t in {(e.database, e.table) for e in events if e.kind == ROW}}
    # Resolved records, which the encoder leaves unnamed, follow each table's topic.
    assert all(r.topic.startswith("echo.") for r in records if b'"resolved"' in (r.value or b""))
    deletes = sum(e.op == DELETE for e in events)
    assert sum(r.value is None for r in records) == deletes
    assert all(r.timestamp is not None and r.timestamp >= W.START_MS for r in records)


# ------------------------------------------------------------------------------- every format, end to end

def _with_registry(name: str, options: dict, where) -> dict:
    """Formats that keep schemas in a registry get a folder one, as `cdclake generate` gives them."""
    if "registry" in {o.name for o in formats.get(name).options}:
        return {**options, "registry": str(where / "registry")}
    return dict(options)


@pytest.mark.parametrize(("name", "options"), CASES)
def test_emit_decode_fold_equals_expected(name, options, tmp_path):
    """The main cross-check: what the format's encoder writes, its decoder reads back, and the planner's
    fold of it is the simulated database's final state as this format delivers it."""
    options = _with_registry(name, options, tmp_path)
    profile = W.profile_for(name, options)
    db = W.Database(seed=21, tables=4, profile=profile, ddl_rate=0.02, key_change_rate=0.1)
    events = db.run(4000)
    if "key-columns" in {o.name for o in formats.get(name).options}:
        # SharePlex messages do not name the key: the consumer is told (OWNER.TABLE=COL,COL;…).
        options["key-columns"] = ";".join(f"{d}.{t}={','.join(k)}" for (d, t), k in db.key_names().items())
    partitions = 3 if profile.ordered else 1
    replays = 0.05 if profile.replay_safe else 0.0
    records = W.emit(events, name, partitions=partitions, replay_fraction=replays, seed=2, options=options)
    decoded = _decoded(records, name, options)
    assert W.diff_states(db.expected(), W.fold(decoded)) == []


def test_cross_check_covers_every_registered_format():
    assert "canal-json" in {case.values[0] for case in CASES}
    assert {name for name, _ in KNOWN_GAPS} <= set(formats.names())
    for name in formats.names():
        importlib.import_module(formats._MODULES[name])


# ------------------------------------------------------------------------------------------ cdclake generate

def test_generate_writes_records_expected_state_and_manifest(tmp_path):
    out = tmp_path / "data"
    result = CliRunner().invoke(app, ["generate", "--format", "canal-json", "--out", str(out), "--events", "3000",
                                      "--tables", "2", "--seed", "5", "--partitions", "2", "--replays", "0.05",
                                      "--option", "flavour=tidb"])
    assert result.exit_code == 0, result.output
    assert "3000 events" in result.output or "events (" in result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "canal-json" and manifest["options"] == {"flavour": "tidb"}
    assert manifest["seed"] == 5 and manifest["partitions"] == 2 and manifest["replays"] == 0.05
    files = sorted((out / "records").iterdir())
    assert [str(p.relative_to(out)) for p in files] == manifest["files"]
    assert [p.name for p in files] == ["cdclake-sim.0000.jsonl", "cdclake-sim.0001.jsonl"]
    records = []
    for path in files:
        lines = list(read_file(path))
        assert [line.record.offset for line in lines] == list(range(len(lines)))
        records += [line.record for line in lines]
    assert len(records) == manifest["records"]
    expected = W.read_expected(out)
    assert W.diff_states(expected, W.fold(_decoded(records, "canal-json", {"flavour": "tidb"}))) == []
    same = W.generate("canal-json", events=3000, tables=2, seed=5, partitions=2, replays=0.05,
                      options={"flavour": "tidb"})
    assert expected == same.expected and manifest["expected_rows"] == sum(map(len, expected.values()))
    for ident, rows in expected.items():
        lines = (out / "expected" / f"{ident[0]}.{ident[1]}.jsonl").read_bytes().split(b"\n")
        assert lines[-1] == b"" and [json.loads(line) for line in lines[:-1]] == W.state_rows(rows)


def test_generate_max_keys_caps_the_live_rows_of_the_expected_state(tmp_path):
    def live_rows(out, *flags: str) -> int:
        result = CliRunner().invoke(app, ["generate", "--format", "canal-json", "--out", str(out), "--events", "3000",
                                          "--tables", "2", "--seed", "5", *flags])
        assert result.exit_code == 0, result.output
        expected = W.read_expected(out)
        records = [line.record for path in sorted((out / "records").iterdir()) for line in read_file(path)]
        assert W.diff_states(expected, W.fold(_decoded(records, "canal-json"))) == []  # the records agree
        return sum(map(len, expected.values()))

    assert 0 < live_rows(tmp_path / "capped", "--max-keys", "40") <= 40
    assert live_rows(tmp_path / "free") > 40  # same seed and events: without the cap, the rows outgrow it
    result = CliRunner().invoke(app, ["generate", "--format", "canal-json", "--out", str(tmp_path / "bad"),
                                      "--max-keys", "0"])
    assert result.exit_code != 0 and not (tmp_path / "bad" / "manifest.json").exists()


def test_generate_rejects_bad_input(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["generate", "--format", "nope", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "unknown format" in result.output
    result = runner.invoke(app, ["generate", "--format", "canal-json", "--out", str(tmp_path), "-o", "bogus=1"])
    assert result.exit_code == 2 and "unknown option" in result.output
    result = runner.invoke(app, ["generate", "--format", "canal-json", "--out", str(tmp_path), "--replays", "2"])
    assert result.exit_code != 0
    assert not (tmp_path / "manifest.json").exists()
    (tmp_path / "file").write_text("not a directory")
    result = runner.invoke(app, ["generate", "--format", "canal-json", "--out", str(tmp_path / "file" / "out")])
    assert result.exit_code == 2 and "out cannot be made a directory: Not a directory" in result.output


def test_run_names_a_lake_or_checkpoint_that_cannot_be_a_directory(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "file").write_text("not a directory")
    runner = CliRunner()
    for where in (["--lake", str(tmp_path / "file" / "lake")],
                  ["--lake", str(tmp_path / "lake"), "--checkpoint", str(tmp_path / "file" / "checkpoint")]):
        result = runner.invoke(app, ["run", "--format", "canal-json", "--input", str(tmp_path / "in"), *where])
        assert result.exit_code == 2, result.output
        assert "cannot be made a directory: Not a directory" in result.output
        assert "Traceback" not in result.output


def test_generate_notes_what_the_format_cannot_order(tmp_path):
    result = CliRunner().invoke(app, ["generate", "--format", "canal-json", "--out", str(tmp_path), "--events",
                                      "200", "--partitions", "2", "--replays", "0.1"])
    assert result.exit_code == 0
    assert "redelivered" in result.output and "across partitions" in result.output


def test_generate_gives_registry_formats_a_registry_folder(tmp_path):
    name = next((n for n in formats.names() if "registry" in {o.name for o in formats.get(n).options}), None)
    assert name is not None, "no format with a schema registry is present"
    out = tmp_path / "data"
    result = CliRunner().invoke(app, ["generate", "--format", name, "--out", str(out), "--events", "500"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["options"]["registry"] == str((out / "registry").resolve())
    assert any((out / "registry").iterdir())
    records = [line.record for path in sorted((out / "records").iterdir()) for line in read_file(path)]
    assert W.diff_states(W.read_expected(out), W.fold(_decoded(records, name, manifest["options"]))) == []


# ------------------------------------------------------------------------- producer details of the profiles

def test_murmur2_is_kafkas():
    # Vectors from Kafka's own UtilsTest.
    assert W.murmur2(b"21") == -973932308
    assert W.murmur2(b"foobar") == -790332482
    assert W.murmur2(b"a-little-bit-long-string") == -985981536
    assert W.murmur2(b"a-little-bit-longer-string") == -1486304829
    assert W.murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert W.murmur2(b"abc") == 479470107
    assert W.record_key_partition(None, 4) == 0 and W.record_key_partition(b"x", 1) == 0


def test_emit_partitions_by_record_key(monkeypatch):
    monkeypatch.setattr(formats, "create", lambda name, options=None: _Echo())
    events = W.Database(seed=16, tables=2, key_change_rate=0.3).run(1500)
    records = W.emit(events, "echo", partitions=4, profile=W.Profile(topics="table", partition_by="record-key"))
    assert {r.partition for r in records} == {0, 1, 2, 3}
    for r in records:
        assert r.partition == W.record_key_partition(r.key, 4)
    for topic, partition in {(r.topic, r.partition) for r in records}:
        offsets = [r.offset for r in records if (r.topic, r.partition) == (topic, partition)]
        assert offsets == list(range(len(offsets)))


def test_split_key_changes_keeps_order_and_state():
    db = W.Database(seed=17, tables=2, key_change_rate=0.5)
    events = db.run(1500)
    split = W.split_key_changes(events)
    moved = [e for e in events if e.op == UPDATE and e.key != {n: e.before[n] for n in e.key}]
    assert moved and len(split) == len(events) + len(moved)
    assert not [e for e in split if e.op == UPDATE and e.key != {n: e.before[n] for n in e.key}]
    changes = [e for e in split if e.kind != RESOLVED]
    assert [e.position for e in changes] == sorted(e.position for e in changes)
    assert same(W.fold(split), db.state())


def test_profile_options_and_deliveries():
    assert W.profile_for("ticdc-open").timestamps == "local"
    assert W.profile_for("ticdc-open", {"timestamp-zone": "Asia/Shanghai"}).timestamps == "utc"
    assert W.profile_for("canal-json", {"timestamp-zone": "UTC"}).timestamps == "utc"
    assert W.profile_for("debezium-json", {"schemas-enable": "false"}).types != W.ALL_TYPES
    profile = W.Profile(timestamps="local", fractions="micros")
    db = W.Database(seed=18, tables=1, profile=profile, types=("timestamp(6)", "datetime(3)", "time(6)", "time"))
    db.run(300)
    raw = db.state()[("sim", "t0")]
    delivered = db.expected()[("sim", "t0")]
    for key, row in raw.items():
        got = delivered[key]
        stamp = row["c0_timestamp"]
        if stamp is not None:
            assert got["c0_timestamp"] == stamp.replace("T", " ").removesuffix("Z")
        moment = row["c1_datetime"]
        if moment is not None:
            head, _, fraction = moment.partition(".")
            assert got["c1_datetime"] == (head if fraction == "000" else f"{head}.{fraction}000")
        assert got["c3_time"] == row["c3_time"]  # no fraction digits: nothing to pad


def test_position_styles():
    sequence = W.Database(seed=1).run(50)[0].position
    binlog = W.Database(seed=1, profile=W.Profile(clock="ms", position="binlog")).run(50)[0].position
    dts = W.Database(seed=1, profile=W.Profile(clock="ms", position="dts")).run(50)[0].position
    assert re.fullmatch(r"\d{20}", sequence)
    assert re.fullmatch(r"mysql-bin\.000001/\d{20}/0{20}", binlog)
    assert re.fullmatch(r"0{19}1/\d{20}/\d{20}", dts)


BROADCASTING = [name for name in formats.names() if W.profile_for(name).ddl or W.profile_for(name).resolved]


def _control(e: ChangeEvent) -> tuple | None:
    """What identifies a DDL, truncate or resolved event across formats (a TRUNCATE statement is a truncate)."""
    if e.kind == RESOLVED:
        return (RESOLVED, e.commit_ts)
    if e.kind == TRUNCATE or (e.kind == DDL and e.ddl.startswith("TRUNCATE")):
        return (TRUNCATE, e.table)
    return (DDL, e.ddl) if e.kind == DDL else None


@pytest.mark.parametrize("name", BROADCASTING)
def test_ddl_and_resolved_reach_the_partitions_the_producer_sends_them_to(name, tmp_path):
    options = _with_registry(name, {}, tmp_path)
    profile = W.profile_for(name, options)
    assert profile.topics == "single"  # per-table topics would need per-topic expectations
    db = W.Database(seed=22, tables=3, profile=profile, ddl_rate=0.05)
    events = db.run(2000)
    decoded = _decoded(W.emit(events, name, partitions=3, options=options), name, options)
    sent = [c for c in map(_control, events) if c is not None]
    got: dict[int, list] = {p: [] for p in range(3)}
    for e in decoded:
        if (control := _control(e)) is not None:
            got[e.source.partition].append(control)
    assert sent
    for kind in (DDL, TRUNCATE, RESOLVED):
        want = [c for c in sent if c[0] == kind]
        lists = {p: [c for c in controls if c[0] == kind] for p, controls in got.items()}
        to = profile.resolved_to if kind == RESOLVED else profile.ddl_to
        if to == "all":
            assert all(lists[p] == want for p in lists), kind
        elif to == "first":
            assert lists[0] == want and not lists[1] and not lists[2], kind
        else:  # with its table's rows: each on exactly one partition
            assert sorted(c for p in lists for c in lists[p]) == sorted(want), kind


@pytest.mark.parametrize("name", [n for n in formats.names() if n.startswith("debezium")])
def test_debezium_deletes_are_followed_by_tombstones(name, tmp_path):
    options = _with_registry(name, {}, tmp_path)
    events = W.Database(seed=23, tables=2, profile=W.profile_for(name), key_change_rate=0.2).run(1500)
    records = W.emit(events, name, partitions=2, options=options)
    deletes = sum(e.op == DELETE for e in events) + len(W.split_key_changes(events)) - len(events)
    for topic, partition in {(r.topic, r.partition) for r in records}:
        log = [r for r in records if (r.topic, r.partition) == (topic, partition)]
        for i, record in enumerate(log):
            if record.value is None:
                assert i > 0 and log[i - 1].key == record.key and log[i - 1].value is not None
    assert sum(r.value is None for r in records) == deletes

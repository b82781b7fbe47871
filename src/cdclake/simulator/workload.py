"""A simulated upstream MySQL/TiDB database: the oracle for tests, benchmarks and the demo.

:class:`Database` holds tables with a column of every type the formats carry, runs random transactions of
inserts, updates, deletes, primary-key changes and DDL, and records each change as a canonical
:class:`~cdclake.model.events.ChangeEvent` (whole before/after images, ``columns``, ``key``, one ``commit_ts`` per
transaction, a ``position`` per change, resolved timestamps between transactions). Its tables *are* the
expected final state: nothing in it goes through a decoder or the pipeline.

A :class:`Profile` per format says what that format carries (column types, DDL, resolved timestamps, ENUM/SET
labels) and how its producer lays records out (topics, partitioning, DDL/resolved broadcast, key-change split),
so that the events a simulation produces for a format are what the format can deliver and
:meth:`Database.expected` describes what a correct pipeline ends up with. :func:`emit` turns events into the
Kafka records the real producer would write, through the format's own ``encode``::

    db = Database(seed=7, profile=profile_for("ticdc-open"))
    events = db.run(10_000)
    records = emit(events, "ticdc-open", partitions=3, replay_fraction=0.05, seed=7)
    assert diff_states(db.expected(), fold(formats.create("ticdc-open").decode(records).events)) == []
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import struct
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import msgspec

from cdclake.formats.base import Format
from cdclake.model import ddl as ddl_actions
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
    Row,
    pad_position,
)
from cdclake.model.records import Record, write_records
from cdclake.model.types import SqlType, parse_type

# One column of every MySQL/TiDB type family the formats carry (tests/helpers/strategies.py uses the same list).
ALL_TYPES: tuple[str, ...] = (
    "tinyint", "tinyint unsigned", "smallint", "smallint unsigned", "mediumint", "mediumint unsigned",
    "int", "int unsigned", "bigint", "bigint unsigned", "decimal(10,2)", "decimal(38,10)", "decimal(65,0)",
    "float", "double", "bit(1)", "bit(10)", "bit(64)", "date", "datetime", "datetime(3)", "datetime(6)",
    "timestamp", "timestamp(6)", "time", "time(6)", "year", "char(10)", "varchar(255)", "text",
    "binary(16)", "varbinary(64)", "blob", "json", "enum('a','b','c d')", "set('x','y','z')",
)

# DDL a simulation may run; a profile lists the ones its format delivers.
ADD_COLUMN: Final = "add_column"
DROP_COLUMN: Final = "drop_column"
TRUNCATE_TABLE: Final = "truncate"
DROP_TABLE: Final = "drop_table"  # followed, some transactions later, by CREATE TABLE of the same name
RENAME_COLUMN: Final = "rename_column"  # RENAME COLUMN or CHANGE COLUMN, of a column outside the key
RENAME_TABLE: Final = "rename_table"  # to a new name, or two tables swap names through a third (as gh-ost ends)
DDL_KINDS: Final = (ADD_COLUMN, DROP_COLUMN, TRUNCATE_TABLE, DROP_TABLE, RENAME_COLUMN, RENAME_TABLE)

TSO_LOGICAL_BITS: Final = 18
START_MS: Final = 1_714_521_600_000  # 2024-05-01T00:00:00Z, the simulated clock's start
BINLOG_EVENTS_PER_FILE: Final = 1_000_000
ORACLE_FIRST_SCN: Final = 14_589_063_118_712


def tso(physical_ms: int, logical: int = 0) -> int:
    """A TiDB timestamp oracle value: physical milliseconds above 18 logical bits."""
    return physical_ms << TSO_LOGICAL_BITS | logical


# ---------------------------------------------------------------------------------------------------------
# Profiles: what each format carries and how its producer routes records

class Profile(msgspec.Struct, frozen=True, kw_only=True):
    """What one format delivers, and how its real producer lays records out in Kafka.

    What arrives:

    - ``types``: the column types the format carries losslessly (a simulation uses only these).
    - ``labels``: ENUM/SET arrive as labels, else as integers.
    - ``text_values``: every value arrives as text (``values.to_text``), with no types.
    - ``timestamps``: TIMESTAMP arrives as canonical ``utc`` text, or as the ``local`` wall-clock text the
      producer wrote (the simulated server runs in UTC) when the decoder is not told the producer's zone.
    - ``fractions``: DATETIME/TIME fractions have the column's ``fsp`` digits, or are ``micros``: six digits,
      none when the fraction is zero (DTS's broken-down DateTime).
    - ``ddl``: the DDL kinds delivered (:data:`DDL_KINDS`); ``truncate_kind``: TRUNCATE as a ``ddl``
      statement or as a ``truncate`` event; ``resolved``: resolved timestamps are delivered.

    What the source and producer do:

    - ``clock``: ``tso`` (commit_ts is a TiDB TSO) or ``ms`` (commit time in epoch ms: MySQL, Oracle).
    - ``position``: how the source reports a change's place in its log, which the encoder writes back into
      the message: ``sequence`` (one padded number), ``binlog`` (file name, byte offset, row: Debezium's
      ``source.file/pos/row``), ``dts`` (file number, offset, record id: DTS's ``sourcePosition`` and ``id``)
      or ``scn`` (commit SCN, transaction id, place in the transaction: SharePlex's ``scn/trans/seq``).
    - ``topics``: one ``single`` topic, or one per ``table``.
    - ``partition_by``: ``event`` (the producer hashes the row's key values, as TiCDC's index-value dispatcher
      and Canal's partitionHash do) or ``record-key`` (Kafka's default partitioner on the record's key bytes,
      as Kafka Connect does: a key change's delete goes to the old key's partition).
    - ``ddl_to`` / ``resolved_to``: the partitions a DDL or resolved record goes to: ``all``, ``first``, or
      ``key`` (where a row of its table without key values would go).
    - ``split_key_changes``: an update that changes the key is sent as a delete of the old key and an insert
      of the new one (TiCDC does this for every MQ protocol).

    What a pipeline can make of it:

    - ``replay_safe``: a redelivered record decodes to the same commit_ts+position, or to one whose
      re-application cannot change the state, so replays leave the state unchanged.
    - ``ordered``: (commit_ts, position) orders one key's changes across partitions (a key change can move a
      row to another partition).
    """

    types: tuple[str, ...] = ALL_TYPES
    labels: bool = True
    text_values: bool = False
    timestamps: str = "utc"
    fractions: str = "fsp"
    clock: str = "tso"
    position: str = "sequence"
    ddl: frozenset[str] = frozenset()
    truncate_kind: str = DDL
    resolved: bool = False
    topics: str = "single"
    partition_by: str = "event"
    ddl_to: str = "all"
    resolved_to: str = "all"
    split_key_changes: bool = False
    replay_safe: bool = True
    ordered: bool = True

    def to_dict(self) -> dict[str, Any]:
        out = msgspec.to_builtins(self)
        out["ddl"] = sorted(self.ddl)
        return out


_DEBEZIUM_NO_SCHEMA_TYPES: Final = tuple(
    t for t in ALL_TYPES
    if parse_type(t).family in (T.INTEGER, T.DOUBLE, T.TEXT, T.JSON, T.ENUM, T.SET, T.TIMESTAMP, T.YEAR)
    and t != "bigint unsigned")

# The one table of format profiles. A format without an entry gets DEFAULT_PROFILE (rows only, every type).
PROFILES: dict[str, Profile] = {
    # Open-source Canal: MySQL binlog, commit time with second resolution and no binlog position, so
    # neither replays nor a key moving across partitions can be ordered.
    "canal-json": Profile(clock="ms", position="binlog", ddl=frozenset(DDL_KINDS), ddl_to="first",
                          replay_safe=False, ordered=False),
    "ticdc-open": Profile(labels=False, timestamps="local", ddl=frozenset(DDL_KINDS), resolved=True,
                          split_key_changes=True),
    # TiCDC Avro without its extension carries no commit ts (and deletes never do): order is the Kafka log's.
    "ticdc-avro": Profile(topics="table", partition_by="record-key", split_key_changes=True, replay_safe=False),
    "debezium-json": Profile(clock="ms", position="binlog", topics="table", partition_by="record-key"),
    "debezium-avro": Profile(clock="ms", position="binlog", topics="table", partition_by="record-key"),
    "dts-avro": Profile(clock="ms", position="dts", fractions="micros", ddl=frozenset(DDL_KINDS), ddl_to="first"),
    # SharePlex (Oracle through DTS) sends every value as text and no types.
    "shareplex-json": Profile(clock="ms", position="scn", text_values=True, ddl=frozenset({TRUNCATE_TABLE}),
                              truncate_kind=TRUNCATE, ddl_to="key"),
}
DEFAULT_PROFILE: Final = Profile()

# Options that change what a format delivers: (format, option, value) → profile fields to replace. The value
# is matched lower-cased; "*" matches any non-empty value that has no entry of its own.
PROFILE_OPTIONS: dict[tuple[str, str, str], dict[str, Any]] = {
    ("ticdc-open", "timestamp-zone", "*"): {"timestamps": "utc"},
    # TiCDC's canal-json: commit TSO in _tidb, watermarks, base-type mysqlType (ENUM/SET as integers).
    ("canal-json", "flavour", "tidb"): {"labels": False, "clock": "tso", "position": "sequence", "resolved": True,
                                        "split_key_changes": True, "replay_safe": True, "ordered": True},
    ("debezium-json", "schemas-enable", "false"): {"types": _DEBEZIUM_NO_SCHEMA_TYPES},
}


def profile_for(format_name: str, options: Mapping[str, Any] | None = None) -> Profile:
    """The profile of a format under the given options (unknown formats get :data:`DEFAULT_PROFILE`)."""
    profile = PROFILES.get(format_name, DEFAULT_PROFILE)
    for name, value in (options or {}).items():
        text = str(value).lower()
        changes = PROFILE_OPTIONS.get((format_name, name, text))
        if changes is None and text:
            changes = PROFILE_OPTIONS.get((format_name, name, "*"))
        if changes:
            profile = msgspec.structs.replace(profile, **changes)
    return profile


# ---------------------------------------------------------------------------------------------------------
# Random canonical values, one fast generator per column type

Gen = Callable[[random.Random], Any]

# ``random.randint``/``randrange`` cost a microsecond each; ``int(random() * n)`` is exact enough for the
# small ranges below (n < 2**53) and several times faster, which matters at a million rows.

_ALPHABET: Final = ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789" * 4
                    + "      .,;:-_/'\"\\%&<>()[]{}#@!?=+*~`|^$\n\t\r\x00\x01\x7f"
                    + "éüßçñøåÆŒ€£¥©°±µ¶·½ЖЯжяαβγΩ中文字日本語한국어ไทย…–—‘’“”\u2028\u00a0🙂🚀𝄞")
# Text values are slices of one fixed random text, so that making one costs a slice, not a join.
_POOL: Final = "".join(random.Random(20240501).choices(_ALPHABET, k=1 << 16))


def _text(max_len: int, *, strip: bool = False) -> Gen:
    max_len = min(max_len, 4096)  # long enough to cross any buffer boundary, short enough to stay fast
    limit = min(max_len, 64)
    span = len(_POOL) - max_len

    def gen(r: random.Random) -> str:
        roll = r.random()
        if roll < 0.05:
            return ""
        n = 1 + int(r.random() * (max_len if roll > 0.97 else limit))
        start = int(r.random() * span)
        text = _POOL[start:start + n]
        # MySQL CHAR drops trailing spaces on read, so a CHAR value never ends with one.
        return text.rstrip(" ") if strip else text

    return gen


def _integer(t: SqlType) -> Gen:
    bits = t.bits or 64
    lo, hi = (0, 2**bits - 1) if t.unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    edges = (lo, hi, 0, 1, hi - 1) if t.unsigned else (lo, hi, 0, -1, 1)
    small = min(hi, 100_000)
    small_lo = max(lo, -small)
    width = small - small_lo + 1

    def gen(r: random.Random) -> int:
        roll = r.random()
        if roll < 0.05:
            return edges[int(roll * 100)]
        if roll < 0.6:
            return small_lo + int(r.random() * width)
        return lo + r.getrandbits(bits)

    return gen


def _decimal(t: SqlType) -> Gen:
    precision, scale = t.length or 10, t.scale or 0

    def gen(r: random.Random) -> str:
        digits = precision if r.random() < 0.1 else 1 + int(r.random() * precision)
        unscaled = r.getrandbits(digits * 4) % 10**digits if digits > 15 else int(r.random() * 10**digits)
        text = str(unscaled).rjust(scale + 1, "0")
        if scale:
            text = text[:-scale] + "." + text[-scale:]
        return "-" + text if unscaled and r.random() < 0.4 else text

    return gen


def _float32_text(x: float) -> str | None:
    """The shortest decimal text that rounds to float32 ``x``."""
    packed = struct.pack("<f", x)
    for digits in range(1, 10):
        text = f"{x:.{digits}g}"
        if struct.pack("<f", float(text)) == packed:
            return text
    return None


def _float_pool(size: int) -> tuple[float, ...]:
    # FLOAT values whose float32 and float64 readings agree on the shortest decimal text, so every format
    # (Java Float.toString, float32 Avro, float64 JSON) carries them as the same Python float. Values outside
    # that set have no single canonical form yet (an open question of the value rules).
    r = random.Random(4)
    pool: list[float] = [0.0, 1.0, -1.0, 0.5, 16777216.0, -16777216.0, 12345678.0]
    while len(pool) < size:
        if r.random() < 0.1:
            x = float(r.getrandbits(25) - (1 << 24))
        else:
            x = (r.getrandbits(21) - (1 << 20)) / (1 << int(r.random() * 7))
        text = _float32_text(x)
        if text is not None and float(text) == x:
            pool.append(x + 0.0)
    return tuple(pool)


_FLOATS: Final = _float_pool(4096)


def _float(r: random.Random) -> float:
    return _FLOATS[int(r.random() * len(_FLOATS))]


_DOUBLE_EDGES: Final = (0.0, 1.0, -1.0, 0.1, 1e-300, -1e300, 1.7976931348623157e308, 5e-324, 2.0**53 + 2)


def _double(r: random.Random) -> float:
    roll = r.random()
    if roll < 0.05:
        return _DOUBLE_EDGES[int(roll * 180)]
    if roll < 0.5:
        return round((r.random() - 0.5) * 2e6, int(r.random() * 7)) + 0.0
    return (r.random() * 2 - 1) * 10.0 ** (int(r.random() * 601) - 300) + 0.0


_DATE_LO: Final = dt.date(1000, 1, 1).toordinal()
_DATE_HI: Final = dt.date(9999, 12, 31).toordinal()
_EPOCH_ORDINAL: Final = dt.date(1970, 1, 1).toordinal()


def _date(r: random.Random) -> str:
    return dt.date.fromordinal(_DATE_LO + int(r.random() * (_DATE_HI - _DATE_LO + 1))).isoformat()


def _clock(seconds: int) -> str:
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return f"{hour:02d}:{minute:02d}:{second:02d}"


def _moment(t: SqlType) -> Gen:
    fsp = t.fsp
    if t.family == T.DATETIME:
        first, days, sep, zone = _DATE_LO, _DATE_HI - _DATE_LO + 1, " ", ""
    else:  # TIMESTAMP: MySQL's range (1970-01-01 00:00:01 to 2038-01-19 03:14:07 UTC) less a day each side
        first, days, sep, zone = _EPOCH_ORDINAL + 1, 24_853 - 2, "T", "Z"
    scale = 10**fsp

    def gen(r: random.Random) -> str:
        day = dt.date.fromordinal(first + int(r.random() * days)).isoformat()
        text = day + sep + _clock(int(r.random() * 86_400))
        if fsp:
            text += "." + str(int(r.random() * scale)).zfill(fsp)
        return text + zone

    return gen


def _time(t: SqlType) -> Gen:
    fsp = t.fsp
    scale = 10**fsp
    limit = 838 * 3600 + 59 * 60 + 59

    def gen(r: random.Random) -> str:
        wide = r.random() < 0.3
        seconds = int(r.random() * (limit + 1 if wide else 86_400))
        text = _clock(seconds)
        if fsp:
            text += "." + str(int(r.random() * scale)).zfill(fsp)
        return "-" + text if wide and r.random() < 0.5 and text.strip("0:.") else text

    return gen


def _binary(t: SqlType) -> Gen:
    fixed = t.name == "binary"
    size = t.length or (1 if fixed else 255)
    limit = min(size, 300)

    def gen(r: random.Random) -> str:
        # BINARY(n) is right-padded with zero bytes to n, so its values always have n bytes.
        n = size if fixed else int(r.random() * (limit + 1))
        return V.b64(r.randbytes(n))

    return gen


def _json_doc(r: random.Random, depth: int = 0) -> Any:
    roll = r.random()
    if depth < 2 and roll < 0.25:
        return [_json_doc(r, depth + 1) for _ in range(r.randint(0, 3))]
    if depth < 2 and roll < 0.55:
        return {"".join(r.choices("abcdefgxyz_é", k=r.randint(1, 6))): _json_doc(r, depth + 1)
                for _ in range(r.randint(0, 4))}
    if roll < 0.65:
        return None
    if roll < 0.72:
        return r.random() < 0.5
    if roll < 0.85:
        return r.randint(-(2**53), 2**53)
    return "".join(r.choices(_ALPHABET, k=r.randint(0, 12)))


# MySQL prints JSON with ", " and ": " separators; a document comes back as this exact text. Building one
# costs several microseconds, so values are drawn from a fixed set of documents.
_JSON_DOCS: Final = tuple(json.dumps(_json_doc(random.Random(i)), ensure_ascii=False) for i in range(4096))


def _json(r: random.Random) -> str:
    return _JSON_DOCS[int(r.random() * len(_JSON_DOCS))]


def _enum(t: SqlType) -> Gen:
    members = t.members
    count = len(members)
    return lambda r: members[int(r.random() * count)]


def _set(t: SqlType) -> Gen:
    members = t.members

    def gen(r: random.Random) -> str:
        mask = r.getrandbits(len(members))
        return ",".join(m for i, m in enumerate(members) if mask >> i & 1)

    return gen


def value_generator(type_text: str) -> Gen:
    """A function of a ``random.Random`` giving canonical non-NULL values of one column type."""
    t = parse_type(type_text)
    family = t.family
    if family == T.INTEGER:
        return _integer(t)
    if family == T.DECIMAL:
        return _decimal(t)
    if family == T.FLOAT:
        return _float
    if family == T.DOUBLE:
        return _double
    if family == T.BIT:
        bits = t.length or 1
        return lambda r: r.getrandbits(bits)
    if family == T.DATE:
        return _date
    if family in (T.DATETIME, T.TIMESTAMP):
        return _moment(t)
    if family == T.TIME:
        return _time(t)
    if family == T.YEAR:
        return lambda r: 1901 + int(r.random() * 255)
    if family == T.TEXT:
        return _text(t.length or 400, strip=t.name == "char")
    if family == T.BINARY:
        return _binary(t)
    if family == T.JSON:
        return _json
    if family == T.ENUM:
        return _enum(t)
    if family == T.SET:
        return _set(t)
    raise ValueError(f"the workload has no values for column type {type_text!r}")


# ---------------------------------------------------------------------------------------------------------
# The simulated database

Values = tuple[Any, ...]  # the key values of a row in the simulated table, in key-column order
KeyTuple = tuple[tuple[str, Any], ...]  # a row's key: (column, value) pairs sorted by column name
State = dict[tuple[str, str], dict[KeyTuple, Row]]  # per (database, table): key → row


class _Table:
    """One table of the simulated database: its schema and its current rows."""

    def __init__(self, database: str, name: str, columns: list[Column], composite: bool) -> None:
        self.database = database
        self.name = name
        self.columns = columns
        self.key_names = [c.name for c in columns if c.key]
        self.composite = composite
        self.rows: dict[Values, Row] = {}
        self.keys: list[Values] = []  # the keys of ``rows``, for O(1) random choice
        self.slot: dict[Values, int] = {}
        self.gens: dict[str, Gen] = {c.name: value_generator(c.type) for c in columns if not c.key}
        self.next_column = len(columns)

    def put(self, key: Values, row: Row) -> None:
        if key not in self.rows:
            self.slot[key] = len(self.keys)
            self.keys.append(key)
        self.rows[key] = row

    def remove(self, key: Values) -> None:
        del self.rows[key]
        index = self.slot.pop(key)
        last = self.keys.pop()
        if index < len(self.keys):
            self.keys[index] = last
            self.slot[last] = index

    def clear(self) -> None:
        self.rows.clear()
        self.keys.clear()
        self.slot.clear()

    def key_dict(self, key: Values) -> Row:
        return dict(zip(self.key_names, key, strict=True))

    def set_columns(self, columns: list[Column]) -> None:
        self.columns = columns
        self.gens = {c.name: value_generator(c.type) for c in columns if not c.key}


_quote = ddl_actions.quote


def create_table_sql(database: str, table: str, columns: Sequence[Column]) -> str:
    parts = [f"{_quote(c.name)} {c.type}{' NOT NULL' if c.nullable is False else ' NULL'}" for c in columns]
    keys = ", ".join(_quote(c.name) for c in columns if c.key)
    return f"CREATE TABLE {_quote(database)}.{_quote(table)} ({', '.join(parts)}, PRIMARY KEY ({keys}))"


class Database:
    """A simulated upstream database, deterministic from ``seed``.

    ``tables`` tables spread over ``databases``; every third table has a composite key ``(tenant int,
    code varchar(32))``, the others ``id bigint``. Non-key columns: one per type of ``types`` (default: the
    profile's types). ``ddl_rate`` is the chance that a transaction is a DDL statement instead (only kinds
    the profile delivers); ``resolved_every`` is the number of transactions between resolved timestamps
    (when the profile delivers them). ``max_keys`` caps the live rows over all tables: once a table holds its
    share, an insert becomes an update, so that a long run keeps changing the same keys.
    """

    def __init__(self, *, seed: int = 0, tables: int = 3, profile: Profile = DEFAULT_PROFILE,
                 types: Sequence[str] | None = None, databases: Sequence[str] = ("sim",),
                 ddl_rate: float = 0.002, resolved_every: int = 50, max_txn_rows: int = 8,
                 key_change_rate: float = 0.05, max_keys: int | None = None) -> None:
        if tables < 1:
            raise ValueError("a simulated database needs at least one table")
        self.profile = profile
        self.random = random.Random(seed)
        self.types = tuple(types if types is not None else profile.types)
        self.ddl_kinds = tuple(k for k in DDL_KINDS if k in profile.ddl)
        self.ddl_rate = ddl_rate if self.ddl_kinds else 0.0
        self.resolved_every = resolved_every if profile.resolved else 0
        self.max_txn_rows = max_txn_rows
        self.key_change_rate = key_change_rate
        self.max_keys_per_table = None if max_keys is None else max(1, max_keys // tables)
        self.tables: dict[tuple[str, str], _Table] = {}
        self.dropped: list[tuple[str, str]] = []
        self.physical_ms = START_MS
        self.logical = 0
        self.last_commit_ts = 0
        self.lsn = 0  # the change log's sequence number: one per change, the source of ``position``
        self.txns = 0
        self.next_id = 1
        self.next_table = tables  # the number in the next new table name
        self.freed: list[tuple[tuple[str, str], Values]] = []  # deleted keys, sometimes inserted again
        for i in range(tables):
            database = databases[i % len(databases)]
            name = f"t{i}"
            self.tables[(database, name)] = self._new_table(database, name, composite=i % 3 == 1)

    # -- schema ------------------------------------------------------------------------------------------

    def _new_table(self, database: str, name: str, composite: bool) -> _Table:
        if composite:
            columns = [Column("tenant", "int", key=True, nullable=False),
                       Column("code", "varchar(32)", key=True, nullable=False)]
        else:
            columns = [Column("id", "bigint", key=True, nullable=False)]
        columns += [Column(f"c{i}_{parse_type(text).name}", text, nullable=True) for i, text in enumerate(self.types)]
        return _Table(database, name, columns, composite)

    # -- the clock ---------------------------------------------------------------------------------------

    def _commit(self) -> int:
        step = int(self.random.random() * 4)
        if step:
            self.physical_ms += step
            self.logical = 0
        else:
            self.logical += 1
        commit_ts = tso(self.physical_ms, self.logical)
        self.last_commit_ts = commit_ts
        return commit_ts if self.profile.clock == "tso" else self.physical_ms

    def _position(self, seq: int) -> str:
        """The place of the ``seq``-th (1-based) change of the current transaction in the source's log."""
        self.lsn += 1
        style = self.profile.position
        if style == "scn":
            # Oracle: the commit SCN (unique per transaction), the transaction id, the change's place in it.
            xid = f"{self.txns % 10 + 1}.{self.txns % 32}.{self.txns}"
            return pad_position(ORACLE_FIRST_SCN + self.txns * 8, xid, seq)
        if style in ("binlog", "dts"):
            # One rows event per change; files rotate every million events, positions are byte offsets.
            number, index = divmod(self.lsn, BINLOG_EVENTS_PER_FILE)
            if style == "dts":
                return pad_position(number + 1, 4 + index * 256, self.lsn)
            return pad_position(f"mysql-bin.{number + 1:06d}", 4 + index * 256, 0)
        return pad_position(self.lsn)

    # -- running -----------------------------------------------------------------------------------------

    def run(self, events: int) -> list[ChangeEvent]:
        """At least ``events`` more change events (whole transactions), in commit order."""
        out: list[ChangeEvent] = []
        while len(out) < events:
            self.txns += 1
            r = self.random
            if self.dropped and r.random() < 0.05:
                out.append(self._recreate())
            elif self.ddl_rate and r.random() < self.ddl_rate:
                out.extend(self._ddl())
            else:
                out.extend(self._transaction())
            if self.resolved_every and self.txns % self.resolved_every == 0:
                out.append(ChangeEvent(kind=RESOLVED, commit_ts=self.last_commit_ts))
        return out

    def _transaction(self) -> list[ChangeEvent]:
        r = self.random
        size = 1 + int(r.random() * self.max_txn_rows) if r.random() > 0.01 else r.randint(20, 200)
        commit_ts = self._commit()
        ts_ms = self.physical_ms
        touched: set[tuple[tuple[str, str], Values]] = set()
        live = list(self.tables.values())
        events = []
        for _ in range(size):
            table = live[int(r.random() * len(live))]
            roll = r.random()
            full = self.max_keys_per_table is not None and len(table.keys) >= self.max_keys_per_table
            if not table.keys or (roll < 0.4 and not full):
                event = self._insert(table, touched)
            elif roll < 0.85:
                event = self._update(table, touched)
            else:
                event = self._delete(table, touched)
            if event is not None:
                event.commit_ts = commit_ts
                event.ts_ms = ts_ms
                event.position = self._position(len(events) + 1)
                events.append(event)
        return events

    def _fresh_key(self, table: _Table, touched: set[tuple[tuple[str, str], Values]]) -> Values:
        r = self.random
        ident = (table.database, table.name)
        if self.freed and r.random() < 0.1:
            index = r.randrange(len(self.freed))
            owner, key = self.freed[index]
            if (owner == ident and len(key) == len(table.key_names) and key not in table.rows
                    and (ident, key) not in touched):
                self.freed[index] = self.freed[-1]
                self.freed.pop()
                return key
        self.next_id += 1
        return (1 + int(r.random() * 5), f"k{self.next_id}") if table.composite else (self.next_id,)

    def _free(self, table: _Table, key: Values) -> None:
        self.freed.append(((table.database, table.name), key))
        if len(self.freed) > 4096:  # only recently deleted keys come back
            del self.freed[:2048]

    def _row(self, table: _Table, key: Values) -> Row:
        r = self.random
        chance = r.random
        row = table.key_dict(key)
        for name, gen in table.gens.items():
            row[name] = None if chance() < 0.1 else gen(r)
        return row

    def _pick(self, table: _Table, touched: set[tuple[tuple[str, str], Values]]) -> Values | None:
        # One change per row per transaction (TiDB collapses more into one), so that a row's changes are
        # ordered by commit_ts alone wherever the format gives nothing finer.
        ident = (table.database, table.name)
        for _ in range(4):
            key = table.keys[int(self.random.random() * len(table.keys))]
            if (ident, key) not in touched:
                touched.add((ident, key))
                return key
        return None

    def _insert(self, table: _Table, touched: set[tuple[tuple[str, str], Values]]) -> ChangeEvent | None:
        key = self._fresh_key(table, touched)
        if key in table.rows:
            return None
        touched.add(((table.database, table.name), key))
        row = self._row(table, key)
        table.put(key, row)
        return ChangeEvent(kind=ROW, op=INSERT, database=table.database, table=table.name,
                           key=table.key_dict(key), after=row, columns=table.columns)

    def _update(self, table: _Table, touched: set[tuple[tuple[str, str], Values]]) -> ChangeEvent | None:
        r = self.random
        key = self._pick(table, touched)
        if key is None:
            return None
        before = table.rows[key]
        after = dict(before)
        names = list(table.gens)
        if names:
            count = len(names)
            changed = (names if r.random() < 0.05
                       else [names[int(r.random() * count)] for _ in range(1 + int(r.random() * 3))])
            for name in changed:
                after[name] = None if r.random() < 0.1 else table.gens[name](r)
        new_key = key
        if r.random() < self.key_change_rate:
            candidate = self._fresh_key(table, touched)
            if candidate not in table.rows:
                new_key = candidate
                touched.add(((table.database, table.name), new_key))
                after.update(table.key_dict(new_key))
                table.remove(key)
                self._free(table, key)
        table.put(new_key, after)
        return ChangeEvent(kind=ROW, op=UPDATE, database=table.database, table=table.name,
                           key=table.key_dict(new_key), before=before, after=after, columns=table.columns)

    def _delete(self, table: _Table, touched: set[tuple[tuple[str, str], Values]]) -> ChangeEvent | None:
        key = self._pick(table, touched)
        if key is None:
            return None
        before = table.rows[key]
        table.remove(key)
        self._free(table, key)
        return ChangeEvent(kind=ROW, op=DELETE, database=table.database, table=table.name,
                           key=table.key_dict(key), before=before, columns=table.columns)

    def _ddl_event(self, table: _Table, statement: str, columns: list[Column] | None) -> ChangeEvent:
        commit_ts = self._commit()
        return ChangeEvent(kind=DDL, database=table.database, table=table.name, ddl=statement,
                           columns=columns, commit_ts=commit_ts, ts_ms=self.physical_ms,
                           position=self._position(1))

    def _ddl(self) -> list[ChangeEvent]:
        r = self.random
        live = list(self.tables.values())
        table = live[r.randrange(len(live))]
        kind = self.ddl_kinds[r.randrange(len(self.ddl_kinds))]
        where = f"{_quote(table.database)}.{_quote(table.name)}"
        droppable = [c for c in table.columns if not c.key]
        if kind == DROP_COLUMN and len(droppable) > 2:
            gone = droppable[r.randrange(len(droppable))].name
            columns = [c for c in table.columns if c.name != gone]
            table.set_columns(columns)
            for key, row in list(table.rows.items()):
                table.rows[key] = {name: value for name, value in row.items() if name != gone}
            return [self._ddl_event(table, f"ALTER TABLE {where} DROP COLUMN {_quote(gone)}", columns)]
        if kind == RENAME_COLUMN and droppable:
            old = droppable[r.randrange(len(droppable))]
            name = f"c{table.next_column}_{parse_type(old.type).name}"
            table.next_column += 1
            columns = [msgspec.structs.replace(c, name=name) if c is old else c for c in table.columns]
            table.set_columns(columns)
            for key, row in list(table.rows.items()):
                table.rows[key] = {(name if n == old.name else n): value for n, value in row.items()}
            clause = (f"RENAME COLUMN {_quote(old.name)} TO {_quote(name)}" if r.random() < 0.5
                      else f"CHANGE COLUMN {_quote(old.name)} {_quote(name)} {old.type}")
            return [self._ddl_event(table, f"ALTER TABLE {where} {clause}", columns)]
        if kind == TRUNCATE_TABLE:
            table.clear()
            event = self._ddl_event(table, f"TRUNCATE TABLE {where}", table.columns)
            if self.profile.truncate_kind == TRUNCATE:
                event.kind, event.ddl = TRUNCATE, None
            return [event]
        if kind == RENAME_TABLE:
            if len(live) == 1 or r.random() < 0.5:
                return [self._rename_table(table, f"t{self._new_number()}")]
            other = r.choice([t for t in live if t is not table])
            names, through = (table.name, other.name), f"t{self._new_number()}"
            # One statement a table, as TiCDC sends RENAME TABLE a TO c, b TO a, c TO b.
            return [self._rename_table(table, through), self._rename_table(other, names[0]),
                    self._rename_table(table, names[1])]
        if kind == DROP_TABLE and len(self.tables) > 1:
            ident = (table.database, table.name)
            del self.tables[ident]
            self.dropped.append(ident)
            self.freed = [(owner, key) for owner, key in self.freed if owner != ident]
            return [self._ddl_event(table, f"DROP TABLE {where}", None)]
        # ADD COLUMN, also the fallback when the chosen DDL cannot run on this table
        text = self.types[r.randrange(len(self.types))] if self.types else "int"
        name = f"c{table.next_column}_{parse_type(text).name}"
        table.next_column += 1
        columns = [*table.columns, Column(name, text, nullable=True)]
        table.set_columns(columns)
        for key, row in list(table.rows.items()):
            table.rows[key] = {**row, name: None}
        return [self._ddl_event(table, f"ALTER TABLE {where} ADD COLUMN {_quote(name)} {text} NULL", columns)]

    def _new_number(self) -> int:
        self.next_table += 1
        return self.next_table - 1

    def _rename_table(self, table: _Table, name: str) -> ChangeEvent:
        old, new = (table.database, table.name), (table.database, name)
        where = f"{_quote(table.database)}.{_quote(table.name)}"
        event = self._ddl_event(table, f"RENAME TABLE {where} TO {_quote(table.database)}.{_quote(name)}", None)
        del self.tables[old]
        table.name = name
        self.tables[new] = table
        self.freed = [(new if owner == old else owner, key) for owner, key in self.freed]
        return event

    def _recreate(self) -> ChangeEvent:
        database, name = self.dropped.pop(0)
        table = self._new_table(database, name, composite=self.random.random() < 0.3)
        self.tables[(database, name)] = table
        return self._ddl_event(table, create_table_sql(database, name, table.columns), table.columns)

    # -- the oracle --------------------------------------------------------------------------------------

    def state(self) -> State:
        """The current rows of every table, as canonical values."""
        return {ident: {_key_of(table.key_dict(key)): row for key, row in table.rows.items()}
                for ident, table in self.tables.items()}

    def expected(self) -> State:
        """What a correct pipeline holds for each table: the current rows as the profile's format delivers
        them (``state_tables`` orders them by key)."""
        out: State = {}
        for ident, table in self.tables.items():
            deliver = _deliverers(self.profile, table.columns)
            rows: dict[KeyTuple, Row] = {}
            for canonical in table.rows.values():
                row = _delivered(canonical, deliver) if deliver else canonical
                rows[_key_of({name: row[name] for name in table.key_names})] = row
            out[ident] = rows
        return out

    def key_names(self) -> dict[tuple[str, str], list[str]]:
        return {ident: list(table.key_names) for ident, table in self.tables.items()}

    def column_types(self) -> dict[str, dict[str, str]]:
        """Each table's columns and their types now, as ``{"database.table": {"column": "type"}}``."""
        return {f"{table.database}.{table.name}": {c.name: c.type for c in table.columns}
                for table in self.tables.values()}


def _deliverers(profile: Profile, columns: Sequence[Column]) -> dict[str, Callable[[Any], Any]]:
    """Per column, how the format's delivered value differs from the canonical one (none: identical)."""
    out: dict[str, Callable[[Any], Any]] = {}
    for column in columns:
        t = parse_type(column.type)
        if profile.text_values:
            out[column.name] = lambda v, t=t: v if isinstance(v, str) else V.to_text(v, t)
        elif profile.timestamps == "local" and t.family == T.TIMESTAMP:
            out[column.name] = _as_local_text
        elif profile.fractions == "micros" and t.family in (T.DATETIME, T.TIME) and t.fsp:
            out[column.name] = _as_micros_fraction
        elif not profile.labels and t.family == T.ENUM:
            out[column.name] = lambda v, t=t: V.enum_index(v, t)
        elif not profile.labels and t.family == T.SET:
            out[column.name] = lambda v, t=t: V.set_mask(v, t)
    return out


def _as_micros_fraction(value: str) -> str:
    head, _, fraction = value.partition(".")
    return f"{head}.{fraction.ljust(6, '0')}" if fraction.strip("0") else head


def _as_local_text(value: str) -> str:
    return V.utc_timestamp_to_local(value, "UTC")


def _delivered(row: Row, deliver: Mapping[str, Callable[[Any], Any]]) -> Row:
    return {name: (deliver[name](value) if name in deliver and value is not None else value)
            for name, value in row.items()}


def simulate(events: int, *, profile: Profile = DEFAULT_PROFILE, seed: int = 0, tables: int = 3,
             **settings: Any) -> tuple[list[ChangeEvent], State]:
    """``events`` change events of a fresh simulated database and the expected final state."""
    db = Database(seed=seed, tables=tables, profile=profile, **settings)
    return db.run(events), db.expected()


# ---------------------------------------------------------------------------------------------------------
# Folding events into table state: the planner's contract, in plain Python

def _key_of(key: Mapping[str, Any]) -> KeyTuple:
    return tuple(sorted(key.items()))


def _event_key(event: ChangeEvent, image: Row | None) -> KeyTuple | None:
    names = [c.name for c in event.columns or () if c.key] or list(event.key or ())
    if image is None or not names:
        return _key_of(event.key) if event.key else None
    return _key_of({name: image.get(name) for name in names})


def fold(events: Iterable[ChangeEvent]) -> State:
    """The state a correct pipeline reaches from these events, by the planner's contract: one stable sort
    by (commit_ts, position), so a redelivered copy with the same commit_ts and position lands next to its
    original and re-applies the same change; inserts and updates write their whole after image, an update
    whose key changes deletes the old key, deletes remove the key. DDL is applied as :func:`cdclake.model.ddl.parse`
    reads it (ADD COLUMN gives present rows a NULL column, DROP COLUMN removes it, RENAME and CHANGE COLUMN
    rename it, TRUNCATE empties the table,
    DROP TABLE removes it, RENAME TABLE moves it); every action is idempotent, so a redelivered or broadcast
    DDL is harmless.

    A change without a commit ts (a TiCDC Avro delete is a bare tombstone) happened after everything before
    it in its Kafka partition: it takes the latest commit ts seen so far in that partition (resolved
    timestamps included) and sorts after that commit's changes, in offset order. Events are taken to be in
    offset order within each partition, as decoding a partition's records gives them."""
    latest: dict[tuple[str | None, int | None], int] = {}
    keyed: list[tuple[tuple[int, str], ChangeEvent]] = []
    for event in events:
        source = event.source
        where = (source.topic, source.partition) if source is not None else (None, None)
        if event.commit_ts is not None:
            if event.commit_ts > latest.get(where, 0):
                latest[where] = event.commit_ts
            if event.kind != RESOLVED:
                keyed.append(((event.commit_ts, event.position or ""), event))
        elif event.kind != RESOLVED:
            offset = source.offset if source is not None and source.offset is not None else 0
            keyed.append(((latest.get(where, 0), f"~{offset:020d}"), event))
    keyed.sort(key=lambda item: item[0])
    state: State = {}
    for _, event in keyed:
        ident = (event.database or "", event.table or "")
        if event.kind == ROW:
            rows = state.setdefault(ident, {})
            if event.op == DELETE:
                key = _event_key(event, event.before)
                if key is not None:
                    rows.pop(key, None)
                continue
            if event.after is None:
                continue
            new_key = _event_key(event, event.after)
            if event.before is not None:
                old_key = _event_key(event, event.before)
                if old_key is not None and old_key != new_key:
                    rows.pop(old_key, None)
            if new_key is not None:
                rows[new_key] = event.after
        elif event.kind == TRUNCATE:
            state[ident] = {}
        elif event.kind == DDL:
            for name, actions in ddl_actions.by_table(event.ddl or "", *ident):
                for action in actions:
                    _apply(state, name, action)
    return state


def _apply(state: State, ident: tuple[str, str], action: ddl_actions.Action) -> None:
    rows = state.get(ident, {})
    if isinstance(action, ddl_actions.Truncate):
        state[ident] = {}
    elif isinstance(action, ddl_actions.DropTable):
        state.pop(ident, None)
    elif isinstance(action, ddl_actions.RenameTable):
        if ident in state:  # a copy of the statement (broadcast, redelivered) finds it moved
            state[(action.database or ident[0], action.table)] = state.pop(ident)
    elif isinstance(action, ddl_actions.AddColumn):
        for key, row in rows.items():
            if action.name not in row:
                rows[key] = {**row, action.name: None}
    elif isinstance(action, ddl_actions.DropColumn):
        for key, row in rows.items():
            if action.name in row:
                rows[key] = {n: v for n, v in row.items() if n != action.name}
    elif isinstance(action, ddl_actions.ModifyColumn | ddl_actions.RenameColumn) and action.new_name:
        for key, row in rows.items():
            rows[key] = {(action.new_name if n == action.name else n): v for n, v in row.items()}


def _sort_key(key: KeyTuple) -> tuple[Any, ...]:
    return tuple((name, type(value).__name__, value) for name, value in key)


def state_rows(rows: Mapping[KeyTuple, Row]) -> list[Row]:
    """The rows of one table in key order."""
    try:
        ordered = sorted(rows.items(), key=lambda item: _sort_key(item[0]))
    except TypeError:  # keys of mixed types: any fixed order will do
        ordered = sorted(rows.items(), key=lambda item: repr(item[0]))
    return [row for _, row in ordered]


def state_tables(state: State) -> dict[tuple[str, str], list[Row]]:
    return {ident: state_rows(rows) for ident, rows in state.items()}


def diff_states(expected: State, actual: State, *, limit: int = 20) -> list[str]:
    """Differences between two states, one line each for a person (at most ``limit``); ``[]`` when equal.
    A table with no rows equals a missing table."""
    problems: list[str] = []
    for ident in sorted(set(expected) | set(actual)):
        want, got = expected.get(ident) or {}, actual.get(ident) or {}
        if want == got:
            continue
        missing = [k for k in want if k not in got]
        extra = [k for k in got if k not in want]
        changed = [k for k in want if k in got and got[k] != want[k]]
        problems.append(f"{'.'.join(ident)}: {len(want)} rows expected, {len(got)} present: {len(missing)} "
                        f"missing, {len(extra)} unexpected, {len(changed)} different")
        problems += [f"  missing {dict(k)}" for k in missing[:3]]
        problems += [f"  unexpected {dict(k)}" for k in extra[:3]]
        for k in changed[:5]:
            row, other = want[k], got[k]
            columns = [*row, *(c for c in other if c not in row)]
            changes = {c: (row.get(c, "<absent>"), other.get(c, "<absent>")) for c in columns
                       if row.get(c, "<absent>") != other.get(c, "<absent>")}
            problems.append(f"  {dict(k)}: column: (expected, actual) {changes}")
    return problems[:limit]


# ---------------------------------------------------------------------------------------------------------
# Emitting events as the real producer's Kafka records

DEFAULT_TOPIC: Final = "cdclake-sim"


def topic_name(profile: Profile, ident: tuple[str, str] | None, prefix: str = DEFAULT_TOPIC) -> str:
    """The topic a producer writes to when its encoder does not name one: one per changefeed, or one per
    table (``<prefix>.<database>.<table>``, Debezium's and the Avro dispatchers' layout)."""
    if profile.topics == "table" and ident is not None:
        return f"{prefix}.{ident[0]}.{ident[1]}"
    return prefix


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 hash (``org.apache.kafka.common.utils.Utils.murmur2``) as a signed 32-bit int."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = length & ~3
    rest = length % 4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def record_key_partition(key: bytes | None, partitions: int) -> int:
    """Kafka's default partitioner for a keyed record; unkeyed records stay on partition 0 (the real
    producer spreads them by batch, which no consumer may rely on)."""
    if key is None or partitions <= 1:
        return 0
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def key_partition(database: str | None, table: str | None, key: Mapping[str, Any] | None, partitions: int) -> int:
    """The partition of a row by the hash of its table and key values (stable across runs and machines,
    unlike Python's ``hash``), as TiCDC's index-value dispatcher and Canal's ``partitionHash`` spread rows."""
    if partitions <= 1:
        return 0
    values = [v for _, v in sorted((key or {}).items())]
    return zlib.crc32(msgspec.json.encode([database, table, *values])) % partitions


_Group = tuple[tuple[str, str] | None, int]  # (the table whose topic it is, or None for a single topic; partition)


def route(events: Sequence[ChangeEvent], profile: Profile, partitions: int) -> dict[_Group, list[ChangeEvent]]:
    """The events each (topic, partition) of the producer receives, in order: rows by key hash (a key
    change by its new key), DDL and resolved timestamps as the profile's producer broadcasts them."""
    per_table = profile.topics == "table"
    tables = sorted({(e.database or "", e.table or "") for e in events if e.kind != RESOLVED and e.table})
    topic_ids: list[tuple[str, str] | None] = list(tables) if per_table else [None]
    groups: dict[_Group, list[ChangeEvent]] = {}

    def send(event: ChangeEvent, topic_id: tuple[str, str] | None, to: str, partition: int) -> None:
        targets = range(partitions) if to == "all" else (0,) if to == "first" else (partition,)
        for p in targets:
            groups.setdefault((topic_id, p), []).append(event)

    for event in events:
        ident = (event.database or "", event.table or "")
        topic_id = ident if per_table else None
        if event.kind == ROW:
            image = event.after if event.after is not None else event.before
            key = event.key if event.key is not None else event.key_of()
            if key is None and image is not None:
                key = image
            partition = key_partition(event.database, event.table, key, partitions)
            groups.setdefault((topic_id, partition), []).append(event)
        elif event.kind == RESOLVED:
            for tid in topic_ids:
                send(event, tid, profile.resolved_to, 0)
        else:
            send(event, topic_id, profile.ddl_to, key_partition(event.database, event.table, None, partitions))
    return groups


def emit(events: Sequence[ChangeEvent], format_name: str | Format, *, partitions: int = 1,
         replay_fraction: float = 0.0, seed: int = 0, options: Mapping[str, Any] | None = None,
         profile: Profile | None = None, topic_prefix: str = DEFAULT_TOPIC) -> list[Record]:
    """The Kafka records a real producer of a format writes for these events, ordered by (topic,
    partition, offset): the format's own ``encode`` makes each partition's records from the events routed
    to it (see :func:`route`); offsets increase from 0 per (topic, partition). With ``replay_fraction`` > 0,
    about that fraction of records is delivered again a little later at new offsets (at-least-once
    redelivery: a producer retry or restart re-sends short runs of records).

    ``format_name`` may be a format object instead (made with ``options``), e.g. to decode with the same
    object when its schema registry lives in the process."""
    from cdclake import formats

    if partitions < 1:
        raise ValueError("partitions must be at least 1")
    if not 0.0 <= replay_fraction <= 1.0:
        raise ValueError("replay fraction must be between 0 and 1")
    fmt = format_name if isinstance(format_name, Format) else formats.create(format_name, dict(options or {}))
    profile = profile or profile_for(fmt.name, options)
    by_record_key = profile.partition_by == "record-key"
    if profile.split_key_changes:
        events = split_key_changes(events)
    groups = route(events, profile, 1 if by_record_key else partitions)
    encoded: dict[_Group, list[Record]] = {}
    named: dict[tuple[str, str] | None, str] = {}
    for group in sorted(groups, key=lambda g: (g[0] or ("", ""), g[1])):
        batch = groups[group]
        records = fmt.encode(batch)
        _stamp(records, batch)
        encoded[group] = records
        for record in records:
            if record.topic:
                named.setdefault(group[0], record.topic)
                break
    r = random.Random(seed)
    by_partition: dict[tuple[str, int], list[Record]] = {}
    for (topic_id, partition), records in encoded.items():
        default = named.get(topic_id) or topic_name(profile, topic_id, topic_prefix)
        for record in records:
            record.topic = record.topic or default
            record.partition = record_key_partition(record.key, partitions) if by_record_key else partition
            by_partition.setdefault((record.topic, record.partition), []).append(record)
    out: list[Record] = []
    for where in sorted(by_partition):
        records = _with_replays(by_partition[where], replay_fraction, r) if replay_fraction else by_partition[where]
        for offset, record in enumerate(records):
            record.offset = offset
        out.extend(records)
    return out


def split_key_changes(events: Sequence[ChangeEvent]) -> list[ChangeEvent]:
    """Updates that change the key as a delete of the old key then an insert of the new one, in the same
    transaction, as TiCDC sends them; their positions extend the update's, so they keep its place."""
    out: list[ChangeEvent] = []
    for event in events:
        if event.kind == ROW and event.op == UPDATE and event.before is not None and event.after is not None:
            names = [c.name for c in event.columns or () if c.key] or list(event.key or ())
            old_key = {name: event.before.get(name) for name in names}
            if names and old_key != {name: event.after.get(name) for name in names}:
                position = event.position or ""
                out.append(msgspec.structs.replace(event, op=DELETE, key=old_key, after=None,
                                                   position=f"{position}/0"))
                out.append(msgspec.structs.replace(event, op=INSERT, before=None, position=f"{position}/1"))
                continue
        out.append(event)
    return out


def _stamp(records: list[Record], events: Sequence[ChangeEvent]) -> None:
    """Give records their producer timestamp where the encoder left none: the event time of the matching
    event (exact when the encoder writes one record per event, proportional when it batches)."""
    times = [e.ts_ms for e in events if e.ts_ms is not None]
    if not times or not records:
        return
    latest = 0
    for i, record in enumerate(records):
        if record.timestamp is None:
            latest = max(latest, times[min(len(times) - 1, i * len(times) // len(records))])
            record.timestamp = latest


def _with_replays(records: list[Record], fraction: float, r: random.Random) -> list[Record]:
    n = len(records)
    target = round(n * fraction)
    later: dict[int, list[Record]] = {}
    replayed = 0
    while replayed < target:
        start = r.randrange(n)
        run = records[start:start + r.randint(1, min(8, target - replayed))]
        at = min(n - 1, start + len(run) - 1 + r.randint(0, 50))
        later.setdefault(at, []).extend(msgspec.structs.replace(rec) for rec in run)
        replayed += len(run)
    out: list[Record] = []
    for i, record in enumerate(records):
        out.append(record)
        out.extend(later.get(i, ()))
    return out


# ---------------------------------------------------------------------------------------------------------
# Generated data sets: records, expected state and a manifest, as `cdclake generate` writes them

class Generated(msgspec.Struct):
    """A simulation's output for one format: the records to deliver, the state they must lead to."""

    records: list[Record]
    expected: State
    key_names: dict[tuple[str, str], list[str]]
    manifest: dict[str, Any]


def generate(format_name: str, *, events: int = 10_000, tables: int = 3, seed: int = 0, partitions: int = 1,
             replays: float = 0.0, options: Mapping[str, Any] | None = None, **settings: Any) -> Generated:
    """Simulate ``events`` changes for a format and emit them as its producer would."""
    profile = profile_for(format_name, options)
    db = Database(seed=seed, tables=tables, profile=profile, **settings)
    changes = db.run(events)
    records = emit(changes, format_name, partitions=partitions, replay_fraction=replays, seed=seed,
                   options=options, profile=profile)
    expected = db.expected()
    counts: dict[str, int] = {}
    for event in changes:
        name = f"{event.kind}:{event.op}" if event.kind == ROW else event.kind
        counts[name] = counts.get(name, 0) + 1
    manifest = {
        "format": format_name, "options": dict(options or {}), "seed": seed, "tables": tables,
        "partitions": partitions, "replays": replays, "events": len(changes), "event_counts": counts,
        "records": len(records), "expected_rows": sum(len(rows) for rows in expected.values()),
        "profile": profile.to_dict(), "column_types": db.column_types(),
    }
    return Generated(records, expected, db.key_names(), manifest)


RECORDS_DIR: Final = "records"
EXPECTED_DIR: Final = "expected"
MANIFEST: Final = "manifest.json"


def write_generated(out: str | os.PathLike[str], generated: Generated) -> list[Path]:
    """Write a generated data set under ``out``: ``records/<topic>.<partition>.jsonl`` captured-records
    files (one per topic-partition, in offset order, so that sorted file names then lines give every
    partition in offset order), ``expected/<database>.<table>.jsonl`` (canonical rows in key order, one JSON
    object per line) and ``manifest.json``. Returns the record files."""
    root = Path(out)
    (root / RECORDS_DIR).mkdir(parents=True, exist_ok=True)
    (root / EXPECTED_DIR).mkdir(parents=True, exist_ok=True)
    by_partition: dict[tuple[str, int], list[Record]] = {}
    for record in generated.records:
        by_partition.setdefault((record.topic, record.partition), []).append(record)
    files = []
    for (topic, partition), records in sorted(by_partition.items()):
        path = root / RECORDS_DIR / f"{topic}.{partition:04d}.jsonl"
        write_records(path, sorted(records, key=lambda rec: rec.offset))
        files.append(path)
    encoder = msgspec.json.Encoder()
    tables = {}
    for ident in sorted(generated.expected):
        rows = state_rows(generated.expected[ident])
        (root / EXPECTED_DIR / f"{ident[0]}.{ident[1]}.jsonl").write_bytes(
            b"".join(encoder.encode(row) + b"\n" for row in rows))
        tables[f"{ident[0]}.{ident[1]}"] = {"rows": len(rows), "key": generated.key_names.get(ident, [])}
    manifest = {**generated.manifest, "files": [str(p.relative_to(root)) for p in files], "expected": tables}
    (root / MANIFEST).write_bytes(msgspec.json.format(msgspec.json.encode(manifest)) + b"\n")
    return files


def read_expected(out: str | os.PathLike[str]) -> State:
    """The expected state of a data set that :func:`write_generated` wrote, keyed like :func:`fold`'s."""
    root = Path(out)
    manifest = msgspec.json.decode((root / MANIFEST).read_bytes())
    state: State = {}
    for name, table in manifest["expected"].items():
        database, _, table_name = name.partition(".")
        rows: dict[KeyTuple, Row] = {}
        for line in (root / EXPECTED_DIR / f"{name}.jsonl").read_bytes().splitlines():
            row = msgspec.json.decode(line)
            rows[_key_of({k: row[k] for k in table["key"]})] = row
        state[(database, table_name)] = rows
    return state

"""The Debezium change envelope (``op``, ``before``, ``after``, ``source``) → canonical change events,
for either converter.

**Ordering.** ``commit_ts`` is ``source.ts_ms`` (epoch ms: ``ts_us``/``ts_ns`` add no order MySQL has, so ms
is kept), except for rows of a blocking snapshot (``source.snapshot`` true/first/last/…, or a legacy
boolean ``true``): those are consistent as of the log position where the snapshot began, which precedes
every change streamed afterwards, while their ``source.ts_ms`` is the (later) time each row was *read*. They
get ``commit_ts`` 0 so that a change streamed while a long snapshot ran is never ordered before the stale
snapshot row. Incremental-snapshot rows keep ``source.ts_ms``. ``position`` is
``pad_position(file, pos, row)`` for MySQL binlogs and ``pad_position(lsn)`` for PostgreSQL (per key, change
LSN order is commit order because writers of one row serialise on its lock); other connectors have none.

**Identity.** ``database`` is ``source.schema`` where the connector has one (PostgreSQL, SQL Server: the
namespace that holds the table; ``source.db`` is then the connector-wide database), else ``source.db``;
``table`` is ``source.table``. Topic and Avro record names are never used, as they may be sanitised.
"""

from __future__ import annotations

from typing import Final

import msgspec

from cdclake.formats.base import DecodeError
from cdclake.model.events import (
    DDL,
    READ,
    ROW,
    TRUNCATE,
    ChangeEvent,
    Column,
    Row,
    pad_position,
)

NEW_KEY_HEADER: Final = "__debezium.newkey"
OLD_KEY_HEADER: Final = "__debezium.oldkey"

_BLOCKING_SNAPSHOT: Final = frozenset(("true", "first", "first_in_data_collection", "last_in_data_collection",
                                       "last"))



class Source(msgspec.Struct, gc=False):
    """The ``source`` fields cdclake uses, for every connector; others are ignored."""

    db: str | None = None
    schema: str | None = None
    table: str | None = None
    ts_ms: int | None = None
    snapshot: str | bool | None = None
    file: str | None = None
    pos: int | None = None
    row: int | None = None
    lsn: int | str | None = None


def database_of(source: Source) -> str | None:
    return source.schema if source.schema else source.db


def position_of(source: Source) -> str | None:
    if source.file is not None and source.pos is not None:
        # pad_position(file, pos, row), spelled out: this runs once per event
        return f"{source.file}/{source.pos:020d}/{source.row or 0:020d}"
    if source.lsn is not None:
        return pad_position(source.lsn if isinstance(source.lsn, int) else str(source.lsn))
    return None


def snapshot_kind(source: Source) -> str | None:
    """``"blocking"``, ``"incremental"`` or None (streaming) from the string enum or a legacy boolean."""
    flag = source.snapshot
    if flag is None or flag is False:
        return None
    if flag is True:
        return "blocking"
    text = flag.lower()
    if text in _BLOCKING_SNAPSHOT:
        return "blocking"
    return "incremental" if text == "incremental" else None


def envelope_events(op: str | None, before: Row | None, after: Row | None, source: Source | None,
                    key: Row | None, columns: list[Column] | None) -> list[ChangeEvent]:
    """The canonical events of one change envelope; ``[]`` for ``op`` m (a logical-decoding message)."""
    if op is None:
        raise DecodeError("the value has no op: not a Debezium change event")
    if op == "m":
        return []
    if source is None:
        raise DecodeError("the value has no source block")
    if source.table is None:
        raise DecodeError("source.table is missing: the changed table is unknown")
    database = database_of(source)
    position = position_of(source)
    ts_ms = source.ts_ms
    if op == "t":
        return [ChangeEvent(kind=TRUNCATE, database=database, table=source.table, commit_ts=ts_ms,
                            position=position, ts_ms=ts_ms)]
    commit_ts = ts_ms
    if op in ("c", "r"):
        if after is None:
            raise DecodeError(f"op {op} without an after image")
        snapshot = snapshot_kind(source)
        if snapshot is not None or op == "r":
            op = READ
            if snapshot != "incremental":
                commit_ts = 0
        before = None
    elif op == "u":
        if after is None:
            raise DecodeError("op u without an after image")
    elif op == "d":
        if before is None and key is None:
            raise DecodeError("op d with neither a before image nor a Kafka key: the deleted row is unknown")
        after = None
    else:
        raise DecodeError(f"unknown op {op!r} (expected c, u, d, r, t or m)")
    return [ChangeEvent(kind=ROW, op=op, database=database, table=source.table, key=key, before=before,
                        after=after, columns=columns, commit_ts=commit_ts, position=position, ts_ms=ts_ms)]


def schema_change_events(ddl: str, database: str | None, source: Source | None) -> list[ChangeEvent]:
    """A value of the schema change topic (``include.schema.changes``) as a DDL event."""
    source = source or Source()
    return [ChangeEvent(kind=DDL, database=database or database_of(source), table=source.table, ddl=ddl,
                        commit_ts=source.ts_ms, position=position_of(source), ts_ms=source.ts_ms)]


def key_names_of(key: Row | None) -> tuple[str, ...]:
    return tuple(key) if key else ()

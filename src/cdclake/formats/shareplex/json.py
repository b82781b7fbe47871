"""SharePlex JSON, as Alibaba Cloud DTS writes it into Kafka (spec ``shareplex-json.md``).

One record holds one row operation: ``meta`` (commit ``time`` in UTC, operation ``op``, Oracle ``scn``,
transaction ``trans``, ``seq``/``size``/``idx`` = place in the transaction, ``table`` as ``OWNER.TABLE``),
``data`` (column → text) and, for updates, ``key`` (the pre-update image). No column types are sent: values
stay the strings they are, and every column is reported with type ``unknown``.

Operations (case, spaces, ``_`` and ``-`` ignored): ``ins``/``INSERT``, ``upd``/``UPDATE``, ``del``/``DELETE``,
``TRUNCATE`` (a ``truncate`` event), ``DROP COLUMN`` (a ``ddl`` event whose ``ddl`` is the message text itself,
since its layout is undocumented), ``UPDATE BEFORE`` / ``UPDATE AFTER`` (the two halves of one update).

- insert: after = ``data``. delete: before = ``data``.
- update: ``data`` holds the changed columns with their new values and ``key`` the pre-update image (the old
  values of the changed columns included), so before = ``key`` and after = ``key`` overlaid with ``data``.
- ``UPDATE BEFORE`` + ``UPDATE AFTER``: :meth:`SharePlexJson.decode` pairs a BEFORE with the next AFTER of the
  same topic partition, transaction and table (its ``seq`` one higher, when both have one) into one update
  whose after image is the BEFORE image overlaid with the AFTER image. An AFTER without its BEFORE is an
  update with no before image (an upsert of the after image); a BEFORE whose AFTER is not in the same batch
  cannot be applied and fails with that reason. A decoding task reads its records in several batches: a BEFORE
  that ends one waits for the next (``decode(records, more=True)``), and fails only at the task's end.

The messages do not say which columns form the key. Option ``key-columns`` names them (``ID`` for every
table, or ``OWNER.TABLE=COL,COL;*=ID``); without it events carry no key and a row is identified by all its
values.

Order: ``commit_ts`` = ``ts_ms`` = ``meta.time`` in epoch ms (second resolution). ``position`` is
``pad_position(scn, trans, seq)``: commit SCN order, then the transaction id (two transactions can commit at
one SCN), then the operation's place in it, so that a re-delivered copy has the same position. Without
``seq`` the Kafka offset stands in for it; without ``scn`` the position is ``pad_position(0, "", offset)``
(Kafka order, as nothing else orders transactions of the same second). A non-Oracle source may send an ``scn``
of its own kind (spec §2): one that is not a number orders as none.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any, Final

import msgspec

from cdclake.formats.base import Decoded, DecodeError, Failure, Format, Option, decode_message, reason
from cdclake.model import values as V
from cdclake.model.events import (
    DDL,
    DELETE,
    INSERT,
    READ,
    ROW,
    TRUNCATE,
    UPDATE,
    ChangeEvent,
    Column,
    Row,
    Source,
    complete_before,
    pad_position,
)
from cdclake.model.records import Record
from cdclake.model.types import parse_type

log = logging.getLogger(__name__)

Texts = dict[str, str | None]

_INSERT: Final = "insert"
_UPDATE: Final = "update"
_DELETE: Final = "delete"
_TRUNCATE: Final = "truncate"
_DROP_COLUMN: Final = "drop column"
_UPDATE_BEFORE: Final = "update before"
_UPDATE_AFTER: Final = "update after"

# Normalised op code (lower case, no spaces, "_" or "-") → operation. The short forms beyond ins/upd/del
# are guesses the spec lists; accepting them costs nothing.
_OPS: Final = {
    "ins": _INSERT, "insert": _INSERT, "upd": _UPDATE, "update": _UPDATE, "del": _DELETE, "delete": _DELETE,
    "truncate": _TRUNCATE, "trunc": _TRUNCATE, "dropcolumn": _DROP_COLUMN, "dropcol": _DROP_COLUMN,
    "updatebefore": _UPDATE_BEFORE, "updbefore": _UPDATE_BEFORE, "updb": _UPDATE_BEFORE,
    "updateafter": _UPDATE_AFTER, "updafter": _UPDATE_AFTER, "upda": _UPDATE_AFTER,
}
_OP_CODES: Final = {INSERT: "ins", READ: "ins", UPDATE: "upd", DELETE: "del"}
_NO_KEY: Final[tuple[str, ...]] = ()


class _Meta(msgspec.Struct, gc=False):
    op: str
    time: str | None = None
    scn: str | int | None = None
    trans: str | None = None
    seq: int | str | None = None
    size: int | str | None = None
    table: str | None = None
    idx: str | None = None


class _Message(msgspec.Struct, gc=False):
    meta: _Meta
    data: Texts | None = None
    key: Texts | None = None


_decoder: Final = msgspec.json.Decoder(_Message)
_encoder: Final = msgspec.json.Encoder()


class _Operation(msgspec.Struct, gc=False):
    """One message, read and checked: what :meth:`SharePlexJson.decode` needs to make its events."""

    op: str
    database: str | None
    table: str
    commit_ts: int | None
    scn: int | None
    trans: str | None
    seq: int | None
    data: Texts | None
    key: Texts | None
    value: bytes  # the message itself, for DROP COLUMN

    def position(self, offset: int) -> str:
        """``pad_position(scn, trans, seq)``, or its fallbacks."""
        if self.scn is None:
            return pad_position(0, "", offset)
        return "%020d/%s/%020d" % (self.scn, self.trans or "", self.seq if self.seq is not None else offset)  # noqa: UP031


_DIGITS: Final = re.compile(r"[0-9]{1,40}")  # a number of meta, as SharePlex writes it (an SCN has at most 20 digits)


def _number(value: int | str | None, member: str) -> int | None:
    if value is None or isinstance(value, int):
        return value
    if not _DIGITS.fullmatch(value):
        raise DecodeError(f"meta.{member} {value[:40]!r} is not a number")
    return int(value)


_WARNED_SCN: list[str] = []


def _scn(value: int | str | None) -> int | None:
    """``meta.scn`` as a number, or None where a non-Oracle source sent something else (spec §2)."""
    if not isinstance(value, str):
        return value
    if _DIGITS.fullmatch(value):
        return int(value)
    if not _WARNED_SCN:  # once per process: every message of such a source has one
        _WARNED_SCN.append(value)
        log.warning("shareplex-json: meta.scn %r is not a number: such changes are ordered by meta.time, then by "
                    "Kafka offset", value[:40])
    return None


@lru_cache(maxsize=4096)
def _millis(text: str) -> int:
    """``yyyy-MM-ddTHH:mm:ss[.f][Z|±hh:mm]``; without a zone the time is UTC. Cached: the operations of
    one second share their text."""
    try:
        return V.micros_from_datetime_text(text) // 1000
    except ValueError:
        raise DecodeError(f"meta.time {text[:40]!r} is not a time") from None


def _read(value: bytes) -> _Operation:
    msg = decode_message(_decoder, value, "SharePlex JSON")
    meta = msg.meta
    op = _OPS.get(meta.op) or _OPS.get(meta.op.lower().replace(" ", "").replace("_", "").replace("-", ""))
    if op is None:
        raise DecodeError(f"unknown SharePlex operation {meta.op!r}")
    if not meta.table:
        raise DecodeError(f"{meta.op} without meta.table: the table cannot be known")
    owner, dot, name = meta.table.partition(".")
    database, table = (owner, name) if dot else (None, owner)
    if not table:
        raise DecodeError(f"meta.table {meta.table!r} names no table")
    seq, size = _number(meta.seq, "seq"), _number(meta.size, "size")
    if meta.idx is not None:
        first, slash, second = meta.idx.partition("/")
        if not (slash and _DIGITS.fullmatch(first) and _DIGITS.fullmatch(second)):
            raise DecodeError(f"meta.idx {meta.idx!r} is not seq/size")
        if (seq is not None and seq != int(first)) or (size is not None and size != int(second)):
            raise DecodeError(f"meta.idx {meta.idx!r} disagrees with seq {seq} and size {size}")
        seq = int(first)
    return _Operation(op=op, database=database, table=table,
                      commit_ts=None if meta.time is None else _millis(meta.time),
                      scn=_scn(meta.scn), trans=meta.trans, seq=seq, data=msg.data, key=msg.key,
                      value=value)


def parse_key_columns(text: str) -> dict[str | None, tuple[str, ...]]:
    """``COL,COL`` (every table) or ``OWNER.TABLE=COL,COL;TABLE=COL;*=COL`` → table (casefolded; None for
    every other table) → key column names."""
    keys: dict[str | None, tuple[str, ...]] = {}
    for entry in filter(None, (part.strip() for part in text.split(";"))):
        table, eq, columns = entry.rpartition("=") if "=" in entry else ("*", "=", entry)
        names = tuple(c.strip() for c in columns.split(",") if c.strip())
        if not eq or not table.strip() or not names:
            raise ValueError(f"option key-columns: {entry!r} is not TABLE=COL[,COL]")
        keys[None if table.strip() == "*" else table.strip().casefold()] = names
    return keys


class SharePlexJson(Format):
    name = "shareplex-json"
    options = (
        Option("key-columns", "", "Key columns, which the messages do not name: COL[,COL] for every table, or "
               "OWNER.TABLE=COL[,COL];*=COL. Without them events carry no key."),
    )

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._keys = parse_key_columns(self.settings["key-columns"])
        self._layouts: dict[tuple[tuple[str, ...], tuple[str, ...]], list[Column]] = {}

    def _key_columns(self, database: str | None, table: str) -> tuple[str, ...]:
        if not self._keys:
            return _NO_KEY
        qualified = f"{database}.{table}".casefold() if database else table.casefold()
        for name in (qualified, table.casefold(), None):
            if name in self._keys:
                return self._keys[name]
        return _NO_KEY

    def _columns(self, names: tuple[str, ...], keys: tuple[str, ...]) -> list[Column]:
        """The columns of a row layout, made once per layout (bounded: layouts can vary per row)."""
        columns = self._layouts.get((names, keys))
        if columns is None:
            if len(self._layouts) >= 4096:
                self._layouts.clear()
            columns = self._layouts[(names, keys)] = [Column(name, key=name in keys) for name in names]
        return columns

    # ---------------------------------------------------------------------------------------- decoding

    def decode(self, records: Sequence[Record], more: bool = False) -> Decoded:
        """The base loop, plus the pairing of UPDATE BEFORE and UPDATE AFTER records. With ``more``, a BEFORE that
        is its partition's last record waits for the records that follow (its AFTER comes next)."""
        out = Decoded()
        pending: dict[tuple[str, int, str | None, str | None, str], tuple[Record, _Operation]] = {}
        for record in records:
            try:
                if record.value is None:
                    out.skipped += 1  # a tombstone
                    continue
                operation = _read(record.value)
                if operation.op == _UPDATE_BEFORE:
                    slot = (record.topic, record.partition, operation.trans, operation.database, operation.table)
                    earlier = pending.pop(slot, None)
                    if earlier is not None:
                        out.failures.append(self._unpaired(*earlier))
                    pending[slot] = (record, operation)
                    continue
                before = None
                if operation.op == _UPDATE_AFTER:
                    slot = (record.topic, record.partition, operation.trans, operation.database, operation.table)
                    candidate = pending.get(slot)
                    if candidate is not None and (candidate[1].seq is None or operation.seq is None
                                                  or candidate[1].seq + 1 == operation.seq):
                        del pending[slot]
                        before = candidate[1]
                        out.skipped += 1  # the BEFORE record's change is in the AFTER record's event
                events = self._events(operation, record.offset, before)
            except self.fatal:
                raise
            except Exception as exc:
                out.failures.append(Failure(record, self.name, reason(exc)))
                continue
            source = Source(self.name, record.topic, record.partition, record.offset)
            for event in events:
                event.source = source
            out.events.extend(events)
        if pending:
            last = {(r.topic, r.partition): r for r in records} if more else {}
            for record, operation in pending.values():
                if last.get((record.topic, record.partition)) is record:
                    out.waiting.append(record)
                else:
                    out.failures.append(self._unpaired(record, operation))
        return out

    def _unpaired(self, record: Record, operation: _Operation) -> Failure:
        return Failure(record, self.name, f"UPDATE BEFORE (transaction {operation.trans}, seq {operation.seq}) "
                                          f"without its UPDATE AFTER in the same batch: the before image alone "
                                          f"cannot be applied")

    def decode_record(self, record: Record) -> list[ChangeEvent]:
        if record.value is None:
            return []
        operation = _read(record.value)
        if operation.op == _UPDATE_BEFORE:
            raise DecodeError("UPDATE BEFORE on its own: the before image alone cannot be applied")
        return self._events(operation, record.offset, None)

    def _events(self, operation: _Operation, offset: int, paired: _Operation | None) -> list[ChangeEvent]:
        op, data = operation.op, operation.data
        common: dict[str, Any] = {
            "database": operation.database, "table": operation.table, "commit_ts": operation.commit_ts,
            "ts_ms": operation.commit_ts, "position": operation.position(offset)}
        if op == _TRUNCATE:
            return [ChangeEvent(kind=TRUNCATE, **common)]
        if op == _DROP_COLUMN:
            return [ChangeEvent(kind=DDL, ddl=operation.value.decode("utf-8", "replace"), **common)]
        before: Row | None
        after: Row | None
        if op == _INSERT:
            if data is None:
                raise DecodeError("insert without data")
            kind, before, after = INSERT, None, data
        elif op == _DELETE:
            if data is None:
                raise DecodeError("delete without data")
            kind, before, after = DELETE, data, None
        elif op == _UPDATE:
            before = operation.key
            after = complete_before(before, data or {}) if before is not None else data or {}
            kind = UPDATE
        else:  # UPDATE AFTER, with its UPDATE BEFORE when that was found
            before = paired.data if paired is not None else None
            after = complete_before(before, data or {}) if before is not None else data or {}
            kind = UPDATE
        keys = self._key_columns(operation.database, operation.table)
        identity: Row = after if after is not None else before or {}
        try:
            key = {name: identity[name] for name in keys} if keys else None
        except KeyError as exc:
            raise DecodeError(f"{operation.op} row lacks key column {exc}") from None
        columns = self._columns(tuple(dict.fromkeys([*(before or ()), *(after or ())])), keys)
        return [ChangeEvent(kind=ROW, op=kind, key=key, before=before, after=after, columns=columns, **common)]

    # ---------------------------------------------------------------------------------------- encoding

    def encode(self, events: Iterable[ChangeEvent]) -> list[Record]:
        """Spec §7. Consecutive events with one commit_ts form one transaction (``seq`` 1..``size``); its
        SCN and id come from the commit_ts, or back from a position this format decoded."""
        carried = [e for e in events if e.kind in (ROW, TRUNCATE)]  # DDL and resolved: not carried
        records: list[Record] = []
        start = 0
        while start < len(carried):
            end = start
            while end < len(carried) and carried[end].commit_ts == carried[start].commit_ts:
                end += 1
            size = end - start
            for seq, event in enumerate(carried[start:end], 1):
                message = self._message(event, seq, size)
                records.append(Record(value=_encoder.encode(message), offset=len(records)))
            start = end
        return records

    def _message(self, e: ChangeEvent, seq: int, size: int) -> dict[str, Any]:
        scn = e.commit_ts or 0
        trans = f"0.0.{scn}"  # Oracle's undo-segment.slot.sequence form
        parts = (e.position or "").split("/")
        if len(parts) == 3 and parts[0].isdigit() and not parts[1].isdigit() and parts[2].isdigit():
            scn, trans, seq = int(parts[0]), parts[1], int(parts[2])  # a position this format decoded
            size = max(size, seq)
        millis = e.ts_ms if e.ts_ms is not None else e.commit_ts or 0
        time = (V.EPOCH + dt.timedelta(milliseconds=millis)).strftime("%Y-%m-%dT%H:%M:%S")
        meta = {"time": time, "userid": 0, "op": "TRUNCATE" if e.kind == TRUNCATE else _OP_CODES[e.op or ""],
                "scn": str(scn), "rowid": "AAAAAAAAAAAAAAAAAA", "trans": trans, "seq": seq, "size": size,
                "table": f"{e.database}.{e.table}" if e.database else e.table or "", "idx": f"{seq}/{size}",
                "posttime": time}
        message: dict[str, Any] = {"meta": meta}
        if e.kind == TRUNCATE:
            return message
        types = {c.name: parse_type(c.type) for c in e.columns or ()}

        def texts(row: Row) -> Texts:
            return {name: value if value is None or isinstance(value, str)
                    else V.to_text(value, types.get(name) or parse_type(None)) for name, value in row.items()}

        if e.op == UPDATE and e.before is not None:
            before, after = texts(e.before), texts(e.after or {})
            missing = object()
            message["data"] = {name: text for name, text in after.items() if before.get(name, missing) != text}
            message["key"] = before
        else:
            image = e.before if e.op == DELETE else e.after
            message["data"] = texts(image or {})
        return message


FORMAT = SharePlexJson

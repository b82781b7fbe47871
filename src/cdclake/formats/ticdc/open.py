"""TiCDC Open Protocol (``protocol=open-protocol``): batched JSON events in binary framing.

A Kafka key is an 8-byte big-endian version (1) followed by 8-byte big-endian length-prefixed event keys;
the value holds the matching length-prefixed event values, paired in order. Key ``t`` says what an event
is: 1 row (``u`` new image, ``p`` old image, ``d`` deleted image), 2 DDL (``q`` statement, ``t`` action
code), 3 resolved timestamp (empty value). See ``ticdc-open-protocol.md``.

Decoding choices, documented for users:

- ``commit_ts`` is the event key's ``ts`` (TiDB TSO, exact); ``ts_ms`` its physical part (``ts >> 18``).
- ``position`` is ``<ts, 20 digits>/<rank>`` for a row: rank orders the kinds of change inside one
  transaction the way TiCDC itself sorts them (``1`` delete < ``2`` update with old image < ``3`` insert or
  upsert). TiDB merges all changes to one row in one transaction into one event, so per key that order is
  complete. A DDL's position is ``<ts>/0/<digest>``, the digest hashing its key and value JSON. Positions
  depend only on the event, never on the partition, offset or batch, so a redelivered copy (TiCDC is
  at-least-once) and a DDL broadcast to every partition get the same position and are dropped as replays.
- ``{"u": …}`` without ``p`` is an insert while TiCDC's ``output-old-value`` is on (its default); with
  option ``old-value=false`` it is reported as ``u`` (an upsert), since inserts and updates look alike.
- A partial ``p`` (``only-output-updated-columns``) is completed from ``u``. A key-only ``d``
  (``delete-only-output-handle-key-columns`` or handle-key-only mode) is a complete delete.
- Handle-key-only insert/update events (``ohk``) lack the row; they fail, naming the reason, unless the key
  carries a claim-check location (``ccl``) whose file is in the directory ``claim-check-dir``: then the stored
  full record is decoded instead. As TiCDC's consumer does, only the last path element of ``ccl`` is used, as
  a file name in that directory (see :mod:`cdclake.formats.claim_check`); the location itself is never
  opened. Without ``claim-check-dir``, or when the file is absent, a delete is decoded from its key and an
  insert or update fails saying why.
- Column types are MySQL type text derived from the type code and flags (``bigint unsigned``,
  ``varbinary``, ``mediumtext``, …); lengths, scales and ENUM/SET members are not in the message, so ENUM
  and SET values stay integers (index, bitmask). ``key`` columns are those flagged as TiCDC's handle key
  (``h`` or flag 0x02), else the primary-key-flagged ones; ``nullable`` comes from flag 0x40.
- TIMESTAMP text is in the TiCDC server's zone; option ``timestamp-zone`` (e.g. ``UTC``,
  ``Asia/Shanghai``) turns it into canonical UTC text, empty keeps the text as sent.
- Events from the earliest releases have no ``f`` in their columns and carry CHAR/VARCHAR as base64
  (``legacy-base64``); their TEXT/BLOB and CHAR/VARCHAR values are text when they are UTF-8, else binary.
- A value whose JSON kind does not fit its type code (the upstream Java example's TINYINT holding
  ``"aa"``) is kept as sent, as TiCDC's own Go and Java decoders do; ``strict-values=true`` fails the
  record instead. Malformed base64 or escapes always fail.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

import msgspec

from cdclake.formats import claim_check
from cdclake.formats.base import DecodeError, Format, Option
from cdclake.formats.ticdc.open_plan import Plan
from cdclake.formats.ticdc.open_protocol import (
    DDL_EVENT,
    HANDLE_KEY_FLAG,
    NULLABLE_FLAG,
    PRIMARY_KEY_FLAG,
    RESOLVED_EVENT,
    ROW_EVENT,
    TRUNCATE_TABLE,
    VERSION,
    Col,
    Converter,
    _Mismatch,
    column_spec,
    statement_action,
    timestamp_to_utc,
    to_float,
    writer_for,
)
from cdclake.model import ddl as ddl_text
from cdclake.model import types as T
from cdclake.model import values as V
from cdclake.model.events import (
    DDL,
    DELETE,
    INSERT,
    READ,
    RESOLVED,
    ROW,
    TRUNCATE,
    UNKNOWN_TYPE,
    UPDATE,
    ChangeEvent,
    Column,
    complete_before,
    pad_position,
)
from cdclake.model.records import Record

# Rank of each kind of change inside one transaction, as TiCDC sorts them (delete < update < insert).
_RANK_DDL, _RANK_DELETE, _RANK_UPDATE, _RANK_INSERT = "0", "1", "2", "3"


# ---------------------------------------------------------------------------------------------------------
# Wire structures


# Fields in the order TiCDC writes the members: msgspec matches each member against the field after the
# last one found first.
class _Key(msgspec.Struct, kw_only=True, gc=False):
    ts: int
    scm: str | None = None
    tbl: str | None = None
    t: int
    rid: int | None = None
    ptn: int | None = None
    ohk: bool = False
    ccl: str | None = None


class _Value(msgspec.Struct, gc=False):
    u: dict[str, Col] | None = None
    p: dict[str, Col] | None = None
    d: dict[str, Col] | None = None
    q: str | None = None
    t: int | None = None


class _KeyOut(msgspec.Struct, omit_defaults=True, kw_only=True):
    ts: int
    scm: str | None = None
    tbl: str | None = None
    t: int


class _ColOut(msgspec.Struct, omit_defaults=True, kw_only=True):
    # As TiCDC writes a column: `h` only when true, `f` and `v` always (no `f` marks the legacy encoding).
    t: int
    h: bool = False
    f: int
    v: Any


class _RowOut(msgspec.Struct, omit_defaults=True):
    u: dict[str, _ColOut] | None = None
    p: dict[str, _ColOut] | None = None
    d: dict[str, _ColOut] | None = None


class _DdlOut(msgspec.Struct):
    q: str
    t: int


class _ClaimCheck(msgspec.Struct):
    key: str
    value: str


_key_decoder = msgspec.json.Decoder(_Key)
_value_decoder = msgspec.json.Decoder(_Value)
_claim_decoder = msgspec.json.Decoder(_ClaimCheck)
_encoder = msgspec.json.Encoder()
_U64 = struct.Struct(">Q")


# ---------------------------------------------------------------------------------------------------------


class TicdcOpen(Format):
    name = "ticdc-open"
    options = (
        Option("timestamp-zone", "", "Time zone the TiCDC server rendered TIMESTAMP values in (its tz); "
               "set it to get UTC TIMESTAMP values, empty keeps the text as sent"),
        Option("compression", "none", "Per-event value compression (large-message-handle-compression)",
               ("none", "snappy", "lz4")),
        Option("old-value", True, "TiCDC output-old-value is on: a row event without 'p' is an insert "
               "(false: an upsert, op u)"),
        Option("legacy-base64", True, "Columns without flags (earliest releases) carry CHAR/VARCHAR as base64"),
        Option("strict-values", False, "Fail a record whose value does not fit its type code "
               "(default: keep it as sent, as TiCDC's own decoders do)"),
        Option("claim-check-dir", "", "Local directory holding TiCDC's claim-check files, read by the last "
               "path element of each message's ccl (empty: claim-check events are not read)"),
        Option("claim-check-max-bytes", claim_check.DEFAULT_MAX_BYTES, "Largest claim-check file read"),
        Option("max-batch-size", 16, "Encoder: most row events in one Kafka record"),
        Option("max-message-bytes", 10 * 1024 * 1024, "Encoder: most bytes of key plus value in one record"),
    )

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._zone: str = self.settings["timestamp-zone"]
        self._old_value: bool = self.settings["old-value"]
        self._legacy_base64: bool = self.settings["legacy-base64"]
        self._strict: bool = self.settings["strict-values"]
        self._compressed = self.settings["compression"] != "none"
        self._plans: dict[tuple[Any, ...], Plan] = {}
        self._last: dict[tuple[str, ...], Plan] = {}
        self._ts_prefix: tuple[int, str] = (-1, "")
        if self.settings["max-batch-size"] < 1:
            raise ValueError(f"{self.name}: max-batch-size must be at least 1")
        if self._zone:  # fail at start-up, not on the first TIMESTAMP
            V.checked_zone(self._zone, f"{self.name}: option timestamp-zone")

    def __getstate__(self) -> dict[str, Any]:
        # Plans hold generated readers, which do not pickle; executors rebuild them from the data.
        return {**self.__dict__, "_plans": {}, "_last": {}}

    # -- decoding ------------------------------------------------------------------------------------------

    def decode_record(self, record: Record) -> list[ChangeEvent]:
        return self._decode_pair(record.key, record.value, allow_claim_check=True)

    def _decode_pair(self, key: bytes | None, value: bytes | None, allow_claim_check: bool) -> list[ChangeEvent]:
        if key is None:
            raise DecodeError("Kafka key is missing (Open Protocol keys carry the event keys)")
        if len(key) < 8:
            raise DecodeError(f"Kafka key has {len(key)} bytes, fewer than the 8-byte version header")
        version = _U64.unpack_from(key)[0]
        if version != VERSION:
            raise DecodeError(f"unsupported batch version {version} (expected {VERSION})")
        value = value or b""
        events: list[ChangeEvent] = []
        k, v, n_key, n_value = 8, 0, len(key), len(value)
        index = 0
        plain = not self._compressed
        last_json: bytes | None = None
        while k < n_key:
            if k + 8 > n_key:
                raise DecodeError(f"key truncated: event {index} length needs 8 bytes, {n_key - k} left")
            length = _U64.unpack_from(key, k)[0]
            k += 8
            if length > n_key - k:
                raise DecodeError(f"key entry {index} claims {length} bytes but only {n_key - k} remain")
            key_json = key[k:k + length]
            k += length
            if v + 8 > n_value:
                raise DecodeError(f"value holds fewer entries than the key: entry {index} is missing"
                                  if v == n_value else
                                  f"value truncated: entry {index} length needs 8 bytes, {n_value - v} left")
            length = _U64.unpack_from(value, v)[0]
            v += 8
            if length > n_value - v:
                raise DecodeError(f"value entry {index} claims {length} bytes but only {n_value - v} remain")
            value_json = value[v:v + length]
            v += length
            # The row events of one transaction and table repeat their key: decode it once.
            if key_json != last_json:
                try:
                    event_key = _key_decoder.decode(key_json)
                except msgspec.DecodeError as exc:
                    raise DecodeError(f"event {index}: bad event key JSON: {exc}") from None
                last_json = key_json
            if event_key.t == ROW_EVENT and plain and event_key.ccl is None:
                # _event's path for a row, inlined: nearly every event takes it
                try:
                    body = _value_decoder.decode(value_json)
                except msgspec.DecodeError as exc:
                    raise DecodeError(f"event {index}: bad event value JSON: {exc}") from None
                try:
                    events.append(self._row(event_key, body))
                except DecodeError as exc:
                    raise DecodeError(f"event {index} ({event_key.scm}.{event_key.tbl}): {exc}") from None
            else:
                events.append(self._event(event_key, key_json, value_json, index, allow_claim_check))
            index += 1
        if v != n_value:
            raise DecodeError(f"value has {n_value - v} bytes left after the key's {index} entries")
        return events

    def _decompress(self, data: bytes) -> bytes:
        codec = self.settings["compression"]
        try:
            if codec == "snappy":
                import snappy

                return snappy.uncompress(data)
            import lz4.frame

            return lz4.frame.decompress(data)
        except Exception as exc:
            raise DecodeError(f"cannot {codec}-decompress event value: {type(exc).__name__}: {exc}") from None

    def _event(self, key: _Key, key_json: bytes, value_json: bytes, index: int,
               allow_claim_check: bool) -> ChangeEvent:
        kind = key.t
        if kind == RESOLVED_EVENT:
            if value_json:
                raise DecodeError(f"event {index}: resolved event has a {len(value_json)}-byte value (expected 0)")
            return ChangeEvent(kind=RESOLVED, commit_ts=key.ts)
        if kind not in (ROW_EVENT, DDL_EVENT):
            raise DecodeError(f"event {index}: unknown event type t={kind} (1 row, 2 DDL, 3 resolved)")
        raw = self._decompress(value_json) if self._compressed else value_json
        try:
            body = _value_decoder.decode(raw)
        except msgspec.DecodeError as exc:
            raise DecodeError(f"event {index}: bad event value JSON: {exc}") from None
        if kind == DDL_EVENT:
            return self._ddl(key, body, key_json, raw, index)
        if key.ccl is not None and allow_claim_check:
            full = self._claim_check(key, index)
            if isinstance(full, ChangeEvent):
                return full
            if body.d is None:
                raise DecodeError(f"event {index} ({key.scm}.{key.tbl}): handle-key-only event with claim-check "
                                  f"location {key.ccl!r}: {full}; the full row exists only there or upstream "
                                  f"(TiDB snapshot at ts {key.ts})")
        try:
            return self._row(key, body)
        except DecodeError as exc:
            raise DecodeError(f"event {index} ({key.scm}.{key.tbl}): {exc}") from None

    def _ddl(self, key: _Key, body: _Value, key_json: bytes, raw: bytes, index: int) -> ChangeEvent:
        if body.q is None or body.t is None:
            raise DecodeError(f"event {index}: DDL value needs 'q' (statement) and 't' (action code)")
        database, table = ddl_text.changed_table(body.q, key.scm, key.tbl)
        return ChangeEvent(kind=TRUNCATE if body.t == TRUNCATE_TABLE else DDL, database=database, table=table,
                           ddl=body.q, commit_ts=key.ts, ts_ms=key.ts >> 18,
                           position=_ddl_position(key.ts, key_json, raw))

    def _row(self, key: _Key, body: _Value) -> ChangeEvent:
        deleted, new, old = body.d, body.u, body.p
        if deleted is not None:
            if new is not None or old is not None:
                raise DecodeError("row value mixes 'd' with 'u'/'p'")
            before, plan = self._image(deleted)
            image, op, after, rank = before, DELETE, None, _RANK_DELETE
        elif new is not None:
            if key.ohk or key.ccl is not None:  # a claim-check message carries only the key, with ohk false
                raise DecodeError(
                    "handle-key-only event (ohk): TiCDC left out every non-key column of this "
                    f"{'update' if old is not None else 'insert'} because it exceeded max-message-bytes; the "
                    f"full row exists only upstream (TiDB snapshot at ts {key.ts})"
                    + (f" or in the claim-check file {key.ccl}, which cannot be read here" if key.ccl else ""))
            # _image's first try, inlined: the last plan of these names, through its generated reader
            plan = self._last.get(tuple(new))
            after = None if plan is None else plan.read(new)
            if after is None:
                after, plan = self._image(new)
            image = after
            if old is not None:
                if tuple(old) == plan.names:  # both images of one event share the table's schema
                    before = plan.read(old)
                    if before is None:
                        before, _ = self._image(old, plan)
                else:  # only-output-updated-columns: complete the old image
                    before = complete_before(after, self._image(old)[0])
                op, rank = UPDATE, _RANK_UPDATE
            else:
                before = None
                op, rank = (INSERT if self._old_value else UPDATE), _RANK_INSERT
        elif old is not None:
            raise DecodeError("row value has 'p' without 'u'")
        else:
            raise DecodeError("row value has none of 'u', 'd'")
        keys = plan.keys
        if len(keys) == 1:
            event_key: dict[str, Any] | None = {keys[0]: image[keys[0]]}
        else:
            event_key = {name: image[name] for name in keys} if keys else None
        # pad_position(ts, rank), written out: the events of a transaction share their ts, so its padded
        # text is kept for the next event
        ts = key.ts
        last_ts, prefix = self._ts_prefix
        if ts != last_ts:
            prefix = f"{ts:020d}/"
            self._ts_prefix = (ts, prefix)
        # Events of one shape share their (read-only) column list, as the other formats' events do.
        return ChangeEvent(kind=ROW, op=op, database=key.scm or None, table=key.tbl or None, key=event_key,
                           before=before, after=after, columns=plan.columns, commit_ts=ts, ts_ms=ts >> 18,
                           position=prefix + rank)

    def _image(self, cols: dict[str, Col], plan: Plan | None = None) -> tuple[dict[str, Any], Plan]:
        """The canonical row image of a column map, and the plan describing its columns (given for an old
        image, whose column map has the new image's shape)."""
        if plan is None:
            # Types and flags only change with DDL, so one plan per column-map shape serves a whole table:
            # the last plan for these column names reads the map if it fits (its generated reader checks
            # the type codes and flags); otherwise the general path below finds or makes the plan.
            names = tuple(cols)
            plan = self._last.get(names)
            if plan is not None:
                row = plan.read(cols)
                if row is not None:
                    return row, plan
            values = cols.values()
            types = [c.t for c in values]
            flags = [c.f for c in values]
            # `h` repeats flag 0x02 except in the earliest encoding, which has no flags.
            if (plan is None or plan.type_codes != types or plan.flags != flags
                    or (plan.legacy and plan.handles != [c.h for c in values])):
                plan = self._shape_plan(cols, names, types, flags)
        else:
            row = plan.read(cols)
            if row is not None:
                return row, plan
        row = {name: c.v for name, c in cols.items()}
        for name, convert in plan.converts:
            value = row[name]
            if value is None or (convert is to_float and type(value) is float):
                continue
            try:
                row[name] = convert(value)
            except _Mismatch:
                if self._strict:
                    col = cols[name]
                    raise DecodeError(f"column {name!r}: {type(value).__name__} value {value!r:.60} does not fit "
                                      f"type code {col.t} ({plan.types[name]})") from None
            except ValueError as exc:
                raise DecodeError(f"column {name!r} ({plan.types[name]}): {exc}") from None
        return row, plan

    def _shape_plan(self, cols: dict[str, Col], names: tuple[str, ...], types: list[int],
                    flags: list[int | None]) -> Plan:
        legacy = None in flags
        handles = [c.h for c in cols.values()] if legacy else []
        shape = (names, tuple(types), tuple(flags), tuple(handles))
        plan = self._plans.get(shape)
        if plan is None:
            plan = self._plan(cols, shape)
            plan.type_codes, plan.flags, plan.legacy, plan.handles = types, flags, legacy, handles
            plan.compile()
        if len(self._last) >= 4096:
            self._last.clear()
        self._last[names] = plan
        return plan

    def _plan(self, cols: dict[str, Col], shape: tuple[Any, ...]) -> Plan:
        specs = {name: column_spec(col.t, col.f, col.h, self._legacy_base64) for name, col in cols.items()}
        # The key is TiCDC's handle key; a message that flags none falls back to the primary key.
        keys = [name for name, spec in specs.items() if spec.key] or [
            name for name, spec in specs.items() if spec.primary]
        columns: list[Column] = []
        converts: list[tuple[str, Converter]] = []
        for name, spec in specs.items():
            convert = spec.convert or (spec.check if self._strict else None)
            if spec.type_text == "timestamp" and self._zone:
                convert = partial(timestamp_to_utc, zone=self._zone)
            if convert is not None:
                converts.append((name, convert))
            columns.append(Column(name, spec.type_text, name in keys, spec.nullable))
        plan = Plan(shape[0], columns, keys, converts)
        if len(self._plans) >= 4096:  # shapes come from the data: keep the cache bounded
            self._plans.clear()
        self._plans[shape] = plan
        return plan

    def _claim_check(self, key: _Key, index: int) -> ChangeEvent | str:
        """The full event stored at the claim-check location, or why it is not available (no claim-check
        directory, no such file there); a location or file that must not be read is a DecodeError."""
        location = key.ccl or ""
        directory = self.settings["claim-check-dir"]
        if not directory:
            return "option claim-check-dir is not set, so claim-check files are not read"
        try:
            document = claim_check.read_claim_check(directory, location, self.settings["claim-check-max-bytes"])
        except DecodeError as exc:
            raise DecodeError(f"event {index}: {exc}") from None
        name = claim_check.claim_check_name(location)
        if document is None:
            return f"no claim-check file {name} in claim-check-dir"
        try:
            stored = _claim_decoder.decode(document)
            full_key, full_value = base64.b64decode(stored.key), base64.b64decode(stored.value)
        except (msgspec.DecodeError, binascii.Error) as exc:
            raise DecodeError(f"event {index}: claim-check file {name} is not a claim-check document: {exc}") from None
        events = self._decode_pair(full_key, full_value, allow_claim_check=False)
        if len(events) != 1 or events[0].kind != ROW:
            raise DecodeError(f"event {index}: claim-check file {name} does not hold exactly one row event")
        return events[0]

    # -- encoding ------------------------------------------------------------------------------------------

    def encode(self, events: Iterable[ChangeEvent]) -> list[Record]:
        max_batch: int = self.settings["max-batch-size"]
        max_bytes: int = self.settings["max-message-bytes"]
        records: list[Record] = []
        keys: list[bytes] = []
        values: list[bytes] = []
        size = 0

        def flush() -> None:
            nonlocal size
            if keys:
                records.append(self._record(keys, values, len(records)))
                keys.clear()
                values.clear()
                size = 0

        writers: dict[str, tuple[int, int, Callable[[Any], Any]]] = {}
        for event in events:
            if event.kind == ROW:
                key_json, value_json = self._encode_row(event, writers)
                entry = 16 + len(key_json) + len(value_json)
                if keys and (len(keys) >= max_batch or 8 + size + entry > max_bytes):
                    flush()
                keys.append(key_json)
                values.append(self._compress(value_json))
                size += entry
                continue
            flush()
            if event.kind == RESOLVED:
                keys.append(_encoder.encode(_KeyOut(ts=event.commit_ts or 0, t=RESOLVED_EVENT)))
                values.append(b"")
            elif event.kind in (DDL, TRUNCATE):
                query = event.ddl or (f"TRUNCATE TABLE {ddl_text.qualified(event.database, event.table)}"
                                      if event.kind == TRUNCATE else "")
                code = TRUNCATE_TABLE if event.kind == TRUNCATE else statement_action(query)
                if code == TRUNCATE_TABLE and event.kind != TRUNCATE:
                    code = 0
                database, table = ddl_text.message_table(query, event.database, event.table)
                keys.append(_encoder.encode(_KeyOut(ts=event.commit_ts or 0, scm=database or None,
                                                    tbl=table or None, t=DDL_EVENT)))
                values.append(self._compress(_encoder.encode(_DdlOut(q=query, t=code))))
            else:
                raise ValueError(f"{self.name}: cannot encode an event of kind {event.kind!r}")
            flush()
        flush()
        return records

    def _compress(self, data: bytes) -> bytes:
        codec = self.settings["compression"]
        if codec == "snappy":
            import snappy

            return snappy.compress(data)
        if codec == "lz4":
            import lz4.frame

            return lz4.frame.compress(data)
        return data

    @staticmethod
    def _record(keys: list[bytes], values: list[bytes], index: int) -> Record:
        key = bytearray(_U64.pack(VERSION))
        for item in keys:
            key += _U64.pack(len(item)) + item
        value = bytearray()
        for item in values:
            value += _U64.pack(len(item)) + item
        return Record(key=bytes(key), value=bytes(value), offset=index)

    def _encode_row(self, event: ChangeEvent,
                    writers: dict[str, tuple[int, int, Callable[[Any], Any]]]) -> tuple[bytes, bytes]:
        columns = {c.name: c for c in event.columns or ()}
        key_names = set(event.key or ()) | {c.name for c in columns.values() if c.key}

        def image(row: dict[str, Any]) -> dict[str, _ColOut]:
            out: dict[str, _ColOut] = {}
            for name, value in row.items():
                column = columns.get(name)
                type_text = column.type if column is not None else UNKNOWN_TYPE
                writer = writers.get(type_text)
                if writer is None:
                    writer = writers[type_text] = writer_for(T.parse_type(type_text), self._zone)
                code, flags, write = writer
                is_key = name in key_names
                if is_key:
                    flags |= HANDLE_KEY_FLAG | PRIMARY_KEY_FLAG
                if column is None or (column.nullable is not False and not is_key):
                    flags |= NULLABLE_FLAG
                out[name] = _ColOut(t=code, h=is_key, f=flags, v=None if value is None else write(value))
            return out

        if event.op == DELETE:
            body = _RowOut(d=image(event.before or event.key or {}))
        elif event.op == UPDATE and event.before is not None and self._old_value:
            body = _RowOut(u=image(event.after or {}), p=image(event.before))
        elif event.op in (INSERT, READ, UPDATE):
            body = _RowOut(u=image(event.after or {}))
        else:
            raise ValueError(f"{self.name}: cannot encode a row event with op {event.op!r}")
        key = _KeyOut(ts=event.commit_ts or 0, scm=event.database or None, tbl=event.table or None, t=ROW_EVENT)
        return _encoder.encode(key), _encoder.encode(body)


def _ddl_position(ts: int, key_json: bytes, value_json: bytes) -> str:
    digest = hashlib.blake2b(key_json + b"\0" + value_json, digest_size=10).hexdigest()
    return pad_position(ts, _RANK_DDL, digest)


FORMAT = TicdcOpen

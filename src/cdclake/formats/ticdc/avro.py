"""TiCDC Avro (``protocol=avro``, spec ``ticdc-avro.md``): one Kafka record per row change, key and value
each an Avro datum whose writer schema is in a schema registry, framed as Confluent's or as the AWS Glue
Schema Registry's (spec 3).

Decoding:

- The key record holds the handle-key columns, the value record the whole new row; a delete is the key
  with a null (or empty) value: op ``d`` with ``key`` only, no commit ts (TiCDC sends none). For inserts
  and updates the key values are taken from the row (the key record repeats them; only its schema is read).
- Column types come from ``connect.parameters.tidb_type`` and are reported in MySQL vocabulary
  (``int``, ``bigint unsigned``, ``decimal(10,2)``, ``enum('a','b')``…); sanitized field names are the
  column names (TiCDC's sanitizing is lossy: ``中文`` arrives as ``__``). Database = the record namespace
  after its first ``.``; table = the record name.
- With ``enable-tidb-extension`` on the producer, ``_tidb_op`` gives insert/update and
  ``_tidb_commit_ts`` the commit TSO (``commit_ts``); ``ts_ms`` is its physical part (what
  ``_tidb_commit_physical_time`` carries), else the Kafka timestamp.
  Without it insert and update cannot be told apart: op ``u`` (an upsert), no commit ts.
- The schema is read per schema ID once and compiled into a plan (:mod:`~cdclake.formats.ticdc.avro_schema`):
  column list, converters, checksum encoders, and a reader generated for the schema
  (:mod:`~cdclake.formats.ticdc.avro_reader`) that walks the bytes once, producing canonical values
  and the checksum together. fastavro plus the converters is the reference path, taken for schemas the
  generator does not know and for any record the generated reader cannot read (it then names the error).
- A registry that is unreachable or refuses the credentials raises
  :class:`~cdclake.errors.RegistryError`, which stops the run like :class:`CorruptionError` (retrying
  later is right; dead-lettering every record is not). An unknown schema ID fails only that record.
- Test-only markers (``avro-enable-watermark``): a null key with value ``0x01``+JSON is a DDL event,
  ``0x02``+8 bytes a resolved event; new TiCDC's ``0x03``+8 bytes value is a delete with commit ts, and
  its ``_ticdc_before`` image becomes ``before``.

``position``: events that carry a commit ts get ``pad_position(rank, digest)``, where rank 0 is a delete
and 1 an insert/update, and digest is a 64-bit BLAKE2b of the record's key and value bytes. Within one
transaction a key has at most one delete and one insert/update (TiCDC merges a row's changes and splits a
key change into delete + insert), and the key's final state exists exactly when an insert/update is there,
so delete-before-upsert is always the right order; and a re-sent copy of a message (TiCDC delivers at
least once) gets the very same commit_ts and position, so the planner drops it as a replay. Events without
a commit ts (tombstones, producers without the extension) can only be ordered by the Kafka log:
``pad_position(partition, offset)``.

Row checksums (``integrity-check-level="correctness"`` on the changefeed) are verified on every
insert/update with :mod:`cdclake.formats.ticdc.checksum`; the result is the event's ``checksum``.
``corruption-handling`` says what a mismatch, or a row TiCDC flagged with ``_tidb_corrupted``, does:
``quarantine`` (default) makes the record a Failure (a dead letter) whose reason says why; ``warn`` logs
and passes the event with ``checksum.ok = false``; ``error`` raises :class:`CorruptionError`, which
``Format.decode`` does not catch, so the pipeline stops before writing anything of that batch.

Encoding writes what TiCDC writes: one topic per table (option ``topic``), subjects ``<topic>-key`` and
``<topic>-value`` with ``.`` replaced by ``_``, TiCDC's field layout, extension and checksum fields as
configured, tombstones for deletes; DDL and resolved events are not written (production TiCDC Avro has
none).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from typing import Any, Final

import msgspec

from cdclake.errors import CorruptionError, RegistryError
from cdclake.formats.avro.datum import read_payload
from cdclake.formats.avro.framing import SchemaId, header_bytes, header_id, readable
from cdclake.formats.avro.registry import registry_from
from cdclake.formats.avro.registry.base import SchemaRegistry
from cdclake.formats.avro.registry.memory import MemoryRegistry
from cdclake.formats.base import DecodeError, Format, Option, reason
from cdclake.formats.ticdc.avro_reader import compile_reader
from cdclake.formats.ticdc.avro_schema import (
    BEFORE_FIELD,
    CHECKSUM_FIELD,
    COMMIT_TS_FIELD,
    CORRUPTED_FIELD,
    OP_FIELD,
    PHYSICAL_TIME_FIELD,
    Plan,
    Read,
)
from cdclake.formats.ticdc.avro_writer import Writer, new_writer, write
from cdclake.formats.ticdc.checksum import (
    ChecksumInputError,
    expected_checksum,
    fold_readings,
)
from cdclake.model import ddl as ddl_text
from cdclake.model import values as V
from cdclake.model.events import (
    DDL,
    DELETE,
    INSERT,
    RESOLVED,
    ROW,
    UPDATE,
    ChangeEvent,
    Checksum,
    Column,
    pad_position,
)
from cdclake.model.integrity import CORRUPTED, FAILED, MISMATCH, OK, SKIPPED, RowCheck
from cdclake.model.records import Record

log = logging.getLogger(__name__)

DDL_MARKER: Final = 0x01
CHECKPOINT_MARKER: Final = 0x02
DELETE_MARKER: Final = 0x03

_OPS: Final = {"c": INSERT, "u": UPDATE, "d": DELETE, "": UPDATE, None: UPDATE}
_RANK_DELETE: Final = 0
_RANK_UPSERT: Final = 1
_RANK_PREFIX: Final = {rank: pad_position(rank, "") for rank in (_RANK_DELETE, _RANK_UPSERT)}


class CorruptRow(DecodeError):
    """A corrupt row under ``corruption-handling=quarantine``: its record becomes a dead letter."""


class _DdlMarker(msgspec.Struct, rename={"commit_ts": "commitTs"}):
    query: str
    type: int = 0
    schema: str = ""
    table: str = ""
    commit_ts: int = 0


_ddl_marker = msgspec.json.Decoder(_DdlMarker)

Outcome = tuple[str, str]
_NO_CHECKSUM_FIELDS: Final = (SKIPPED, "the schema has no checksum fields (integrity-check-level is not correctness)")
_NO_CHECKSUM: Final = (SKIPPED, "the row carries no checksum (empty or 0)")
_TOMBSTONE: Final = (SKIPPED, "delete: a tombstone carries only the key")
_MARKER: Final = (SKIPPED, "DDL or checkpoint marker, not a row")
_VERIFIED: Final = (OK, "")
_FLAGGED: Final = "TiCDC flagged the row as corrupted (_tidb_corrupted)"


# --- the format ------------------------------------------------------------------------------------
# What a record's pair of headers names: the value's plan, the key's, their schema IDs, the columns with
# the key marked, and the key's column names in order.
_Pair = tuple[Plan, Plan, SchemaId, SchemaId, list[Column], tuple[str, ...]]


class TicdcAvro(Format):
    name = "ticdc-avro"
    options = (
        Option("registry", "", "Schema registry: http(s)://[user:password@]host:port, glue://REGION[/REGISTRY] "
               "(AWS Glue), or a folder of <id>.avsc files (needed to read a producer's messages; empty = a registry "
               "held in this process, for encoding)"),
        Option("timestamp-zone", "UTC", "Time zone of the TiCDC server (its tz setting): TIMESTAMP values are in it"),
        Option("corruption-handling", "quarantine", "A row whose checksum mismatches or that TiCDC flagged: "
               "quarantine = dead letter, warn = pass with checksum.ok=false, error = stop the run",
               ("quarantine", "warn", "error")),
        Option("enable-tidb-extension", False, "Encoder: append _tidb_op, _tidb_commit_ts, _tidb_commit_physical_time"),
        Option("decimal-handling-mode", "precise", "Encoder: DECIMAL as Avro decimal bytes or as text (the decoder "
               "reads either, as the schema says)", ("precise", "string")),
        Option("bigint-unsigned-handling-mode", "long", "Encoder: BIGINT UNSIGNED as a (wrapping) long or as text "
               "(the decoder reads either)", ("long", "string")),
        Option("integrity-check-level", "none", "Encoder: correctness adds the row checksum fields (needs the "
               "extension and both string modes, as TiCDC does)", ("none", "correctness")),
        Option("topic", "{schema}_{table}", "Encoder: each table's topic; {schema} and {table} are replaced"),
        Option("namespace", "default", "Encoder: the changefeed namespace (keyspace) in the record namespace"),
    )  # fmt: skip
    # A detected corruption under corruption-handling=error, and a registry that is down or refuses us:
    # neither is a problem of one record, so neither may turn good records into dead letters.
    fatal = (CorruptionError, RegistryError)

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        s = self.settings
        V.checked_zone(s["timestamp-zone"], f"{self.name}: option timestamp-zone")  # here, not on the first TIMESTAMP
        if s["integrity-check-level"] == "correctness" and not (
            s["enable-tidb-extension"]
            and s["decimal-handling-mode"] == "string"
            and s["bigint-unsigned-handling-mode"] == "string"
        ):
            raise ValueError(
                "ticdc-avro: integrity-check-level=correctness needs enable-tidb-extension=true, "
                "decimal-handling-mode=string and bigint-unsigned-handling-mode=string (TiCDC refuses otherwise)"
            )
        if "{schema}" not in s["topic"] or "{table}" not in s["topic"]:
            raise ValueError("ticdc-avro: topic must contain {schema} and {table}: TiCDC Avro needs a topic per table")
        self._registry: SchemaRegistry | None = None
        self._reset_caches()

    def _reset_caches(self) -> None:
        self._plans: dict[SchemaId, Plan] = {}
        self._pairs: dict[bytes, _Pair] = {}
        self._columns: dict[tuple[SchemaId, SchemaId], list[Column]] = {}
        self._writers: dict[Any, Writer] = {}

    def __getstate__(self) -> dict[str, Any]:
        # Plans hold compiled closures; executors rebuild them from the (picklable) registry.
        state = self.__dict__.copy()
        for cache in ("_plans", "_pairs", "_columns", "_writers"):
            state.pop(cache, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset_caches()

    @property
    def registry(self) -> SchemaRegistry:
        if self._registry is None:
            url = self.settings["registry"]
            self._registry = registry_from(url) if url else MemoryRegistry()
        return self._registry

    # --- decoding ----------------------------------------------------------------------------------

    def _plan(self, schema_id: SchemaId) -> Plan:
        plan = self._plans.get(schema_id)
        if plan is None:
            registry = self.registry
            try:
                raw = registry.raw_schema(schema_id)
            except DecodeError as exc:
                if self.settings["registry"]:
                    raise
                raise DecodeError(f"{exc} (the registry option is not set: give a registry URL or folder)") from None
            try:
                zone = self.settings["timestamp-zone"]
                plan = Plan(raw, registry.schema(schema_id), zone)
            except DecodeError as exc:
                raise DecodeError(f"schema id {schema_id}: {exc}") from None
            plan.fast = compile_reader(raw, plan, V.zone(zone) is V.UTC)
            self._plans[schema_id] = plan
        return plan

    def _key_columns(
        self, key_id: SchemaId, value_id: SchemaId, key_plan: Plan, value_plan: Plan | None
    ) -> list[Column]:
        columns = self._columns.get((key_id, value_id))
        if columns is None:
            keys = {c.name for c in key_plan.cols}
            base = key_plan.columns if value_plan is None else value_plan.columns
            columns = [Column(c.name, c.type, c.name in keys, c.nullable) for c in base]
            self._columns[(key_id, value_id)] = columns
        return columns

    def _corrupt(self, record: Record, why: str) -> None:
        mode = self.settings["corruption-handling"]
        if mode == "quarantine":
            raise CorruptRow(why)
        if mode == "error":
            raise CorruptionError(f"{self.name}: record {record.where()}: {why}")
        log.warning("%s: record %s: %s", self.name, record.where(), why)

    def decode_record(self, record: Record) -> list[ChangeEvent]:
        events, (status, why) = self._decode(record)
        if status in (MISMATCH, CORRUPTED):
            self._corrupt(record, why)
        return events

    def _decode(self, record: Record) -> tuple[list[ChangeEvent], Outcome]:
        key_data = record.key
        value = record.value
        if key_data is None:
            return self._marker(record)
        if not value or (value[0] == DELETE_MARKER and len(value) == 9):
            return self._delete(record, key_data, value)
        # Both headers together name everything a record needs; only validated headers are cached. Confluent's
        # 5-byte headers are looked up first: Glue's start 0x03 and are cached whole (18 bytes), so they never match.
        pair = self._pairs.get(key_data[:5] + value[:5])
        if pair is None:
            pair = self._pairs.get(header_bytes(key_data) + header_bytes(value)) or self._pair(key_data, value)
        if value[0] != 0 or key_data[0] != 0:  # AWS Glue's framing
            key_data, value = readable(key_data), readable(value)
        plan, key_plan, key_id, value_id, columns, key_names = pair
        fast = plan.fast
        try:
            read = fast(value) if fast is not None else None
        except Exception:  # the reference path names the problem exactly
            read = None
        if read is None:
            read = _read_reference(plan, value, value_id)
        row, before, op_text, commit_ts, physical, expected, corrupted, actual, problem = read
        op = _OPS.get(op_text)
        if op is None:
            raise DecodeError(f"unknown {OP_FIELD} {op_text!r} (expected c, u or d)")
        if plan.has_checksum:
            if actual and not corrupted and expected == str(actual):  # the common case, quickly
                checksum, outcome = Checksum(actual, actual, True), _VERIFIED
            else:
                if plan.timestamps and actual is not None and not corrupted and not problem:
                    actual = _fold_match(plan, value, value_id, expected, row) or actual
                checksum, outcome = _verdict(expected, corrupted, actual, problem, plan.hint)
        else:
            checksum, outcome = None, _NO_CHECKSUM_FIELDS
        try:  # the key record repeats the row's key columns: take them from the row (after a fold reading)
            if len(key_names) == 1:
                name = key_names[0]
                key = {name: row[name]}
            else:
                key = {name: row[name] for name in key_names}
        except KeyError:
            key = self._read(key_plan, key_data, key_id)[0]
        if op == DELETE:
            before, after = row, None
        else:
            after = row
        event = ChangeEvent(
            kind=ROW, op=op, database=plan.database, table=plan.table, key=key, before=before, after=after,
            columns=columns, commit_ts=commit_ts or None,
            position=self._position(_RANK_DELETE if op == DELETE else _RANK_UPSERT, record) if commit_ts
            else _kafka_position(record),
            ts_ms=commit_ts >> 18 if commit_ts else physical or record.timestamp, checksum=checksum,
        )  # fmt: skip
        return [event], outcome

    def _pair(self, key_data: bytes, value: bytes) -> _Pair:
        key_id = header_id(key_data)
        value_id = header_id(value)
        key_plan = self._plan(key_id)
        plan = self._plan(value_id)
        pair = (plan, key_plan, key_id, value_id, self._key_columns(key_id, value_id, key_plan, plan), key_plan.order)
        self._pairs[header_bytes(key_data) + header_bytes(value)] = pair
        return pair

    def _delete(self, record: Record, key_data: bytes, value: bytes | None) -> tuple[list[ChangeEvent], Outcome]:
        """A tombstone, or new TiCDC's 0x03 delete marker carrying the commit ts."""
        key_id = header_id(key_data)
        key_plan = self._plan(key_id)
        key = self._read(key_plan, readable(key_data), key_id)[0]
        commit_ts = int.from_bytes(value[1:], "big") if value else None
        event = ChangeEvent(
            kind=ROW, op=DELETE, database=key_plan.database, table=key_plan.table, key=key,
            columns=self._key_columns(key_id, -1, key_plan, None), commit_ts=commit_ts,
            position=self._position(_RANK_DELETE, record) if commit_ts else _kafka_position(record),
            ts_ms=commit_ts >> 18 if commit_ts else record.timestamp,
        )  # fmt: skip
        return [event], _TOMBSTONE

    @staticmethod
    def _read(plan: Plan, data: bytes, schema_id: SchemaId) -> Read:
        """One record read with its schema: the generated reader when it can, else the reference path."""
        if plan.fast is not None:
            try:
                return plan.fast(data)
            except Exception:  # the reference path below names the problem exactly
                pass
        return _read_reference(plan, data, schema_id)

    @staticmethod
    def _position(rank: int, record: Record) -> str:
        # A value record holds the whole row, key columns included; a 9-byte delete marker only the commit ts.
        value = record.value or b""
        content = value if len(value) > 9 else (record.key or b"") + value
        return _RANK_PREFIX[rank] + hashlib.blake2b(content, digest_size=8).hexdigest()

    def _marker(self, record: Record) -> tuple[list[ChangeEvent], Outcome]:
        value = record.value
        if not value:
            return [], (SKIPPED, "empty record")
        if value[0] == DDL_MARKER:
            try:
                marker = _ddl_marker.decode(value[1:])
            except msgspec.DecodeError as exc:
                raise DecodeError(f"DDL marker (0x01) with bad JSON: {exc}") from None
            commit_ts = marker.commit_ts or None
            database, table = ddl_text.changed_table(marker.query, marker.schema, marker.table)
            event = ChangeEvent(
                kind=DDL, database=database, table=table, ddl=marker.query,
                commit_ts=commit_ts, position=self._position(_RANK_DELETE, record),
                ts_ms=commit_ts >> 18 if commit_ts else record.timestamp,
            )  # fmt: skip
            return [event], _MARKER
        if value[0] == CHECKPOINT_MARKER and len(value) == 9:
            commit_ts = int.from_bytes(value[1:], "big")
            event = ChangeEvent(kind=RESOLVED, commit_ts=commit_ts, position=self._position(_RANK_DELETE, record),
                                ts_ms=commit_ts >> 18)  # fmt: skip
            return [event], _MARKER
        raise DecodeError(
            f"record without a key whose value starts with 0x{value[0]:02x} ({len(value)} bytes): TiCDC Avro "
            "rows always have a key; only test-mode DDL (0x01) and checkpoint (0x02, 9 bytes) markers have none"
        )

    def verify(self, records: Iterable[Record]) -> list[RowCheck]:
        """The checksum verdict of each record (``cdclake verify``), whatever ``corruption-handling`` says."""
        checks: list[RowCheck] = []
        for record in records:
            try:
                events, (status, why) = self._decode(record)
            except RegistryError:
                raise  # not a verdict on the record: every one would wait for the registry in turn
            except Exception as exc:
                checks.append(RowCheck(status=FAILED, reason=reason(exc), where=record.where()))
                continue
            event = events[0] if events else None
            if event is None:
                checks.append(RowCheck(status=status, reason=why, where=record.where()))
                continue
            checks.append(RowCheck(
                status=status, reason=why, where=record.where(), database=event.database, table=event.table,
                key=event.key, commit_ts=event.commit_ts, checksum=event.checksum,
            ))  # fmt: skip
        return checks

    # --- encoding ----------------------------------------------------------------------------------

    def _writer(self, event: ChangeEvent) -> Writer:
        columns = tuple(event.columns or ())
        if not columns:
            raise ValueError(f"ticdc-avro: an event of {event.database}.{event.table} has no columns to write")
        cache_key = (event.database, event.table, columns, tuple(event.key or ()))
        writer = self._writers.get(cache_key)
        if writer is None:
            writer = self._writers[cache_key] = new_writer(event, columns, self.settings, self.registry)
        return writer

    def encode(self, events: Iterable[ChangeEvent]) -> list[Record]:
        """TiCDC's records for ``events``. An update that changes the key becomes a tombstone for the old key
        and an insert of the new row, as TiCDC splits such updates for non-MySQL sinks."""
        records: list[Record] = []
        offsets: dict[str, int] = {}
        for event in events:
            if event.kind != ROW:
                continue  # production TiCDC Avro writes no DDL, resolved or truncate messages
            writer = self._writer(event)
            if event.op == DELETE:
                image = event.before or event.key
                changes = [(DELETE, image)]
            else:
                image = event.after
                changes = [(event.op, image)]
                if event.op == UPDATE and event.before is not None and image is not None:
                    old = [event.before.get(c.name) for c in writer.key_cols]
                    if old != [image.get(c.name) for c in writer.key_cols]:
                        changes = [(DELETE, event.before), (INSERT, image)]
            if image is None:
                raise ValueError(f"ticdc-avro: a {event.op} event of {event.database}.{event.table} has no row image")
            for op, row in changes:
                key, value, timestamp = write(writer, op, row, event, self.settings["enable-tidb-extension"])
                offset = offsets.get(writer.topic, 0)
                offsets[writer.topic] = offset + 1
                records.append(Record(key=key, value=value, topic=writer.topic, offset=offset, timestamp=timestamp))
        return records


def _read_reference(plan: Plan, data: bytes, schema_id: SchemaId) -> Read:
    """fastavro with the writer schema, then the checksum over the wire values, then the converters."""
    row = read_payload(plan.parsed, data, schema_id)
    tail = {name: row.pop(name) for name in plan.tail} if plan.tail else {}
    actual: int | None = None
    problem = ""
    if plan.has_checksum:
        try:
            actual = plan.checksum(list(row.values()))
        except ChecksumInputError as exc:
            problem = f"row checksum cannot be computed: {exc}"
    before = tail.get(BEFORE_FIELD)
    return (
        plan.convert(row), None if before is None else plan.convert(before), tail.get(OP_FIELD),
        tail.get(COMMIT_TS_FIELD), tail.get(PHYSICAL_TIME_FIELD), tail.get(CHECKSUM_FIELD),
        tail.get(CORRUPTED_FIELD), actual, problem,
    )  # fmt: skip


def _fold_match(
    plan: Plan, data: bytes, schema_id: SchemaId, expected_text: str | None, row: dict[str, Any]
) -> int | None:
    """The expected checksum when another reading of a TIMESTAMP in a DST fold or gap matches it (see
    :func:`fold_readings`); ``row`` then takes the instants that matched. Only run on a mismatch: it reads
    the record again for its wire values."""
    try:
        expected = expected_checksum(expected_text)
    except ValueError:
        return None  # _verdict reports it
    if expected is None:
        return None
    wire = read_payload(plan.parsed, data, schema_id)
    readings = fold_readings(plan.checksum, [wire[name] for name in plan.order], plan.timestamps, plan.zone,
                             expected)  # fmt: skip
    if readings is None:
        return None
    for i, text in readings.items():
        row[plan.order[i]] = text
    return expected


def _verdict(
    expected_text: str | None, corrupted: bool | None, actual: int | None, problem: str, hint: str = ""
) -> tuple[Checksum | None, Outcome]:
    """The event's checksum and the verification outcome, from the checksum fields and the recomputation."""
    try:
        expected = expected_checksum(expected_text)
    except ValueError as exc:
        raise DecodeError(str(exc)) from None
    if expected is None:
        if not corrupted:
            return None, _NO_CHECKSUM
        return Checksum(None, None, False), (CORRUPTED, _FLAGGED)
    if actual != expected and not problem:
        problem = f"row checksum mismatch: the message says {expected}, the row computes to {actual}{hint}"
    if corrupted:
        return Checksum(expected, actual, False), (CORRUPTED, f"{_FLAGGED}; {problem}" if problem else _FLAGGED)
    if problem:
        return Checksum(expected, actual, False), (MISMATCH, problem)
    return Checksum(expected, actual, True), _VERIFIED


def _kafka_position(record: Record) -> str:
    return pad_position(record.partition, record.offset)


FORMAT = TicdcAvro

"""The way back, for the encoders of both converters: canonical events → the keys, envelopes, tombstones and
primary-key-change record triples the Debezium MySQL connector writes (:class:`EnvelopeWriter`), with Connect
schemas built from the events' column types (:class:`TableSchema`)."""

from __future__ import annotations

import base64
import datetime as dt
import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, NamedTuple

import msgspec

from cdclake.formats.base import reason
from cdclake.formats.debezium import schema as S
from cdclake.formats.debezium.converters import Conv, json_value, shown, zoned_timestamp_text
from cdclake.formats.debezium.envelope import NEW_KEY_HEADER, OLD_KEY_HEADER
from cdclake.formats.debezium.schema import FieldSpec
from cdclake.model import events as E
from cdclake.model import types as T
from cdclake.model import values as V
from cdclake.model.events import ChangeEvent, Column, Row
from cdclake.model.types import SqlType, parse_type

_BINLOG_POSITION: Final = 3
_ENVELOPE_VERSION: Final = "2.5.0.Final"


class Planned(NamedTuple):
    """One record an encoder writes: the converter turns ``key`` and ``value`` (wire values, bytes as
    bytes) into bytes with the schemas of ``table``; ``value`` None is a tombstone."""

    table: TableSchema
    key: dict[str, Any] | None
    value: dict[str, Any] | None
    headers: list[tuple[str, dict[str, Any]]]
    timestamp: int


class ColumnWriter(NamedTuple):
    column: Column
    spec: FieldSpec
    to_wire: Conv | None


SOURCE_SPEC: Final = FieldSpec("source", "struct", "io.debezium.connector.mysql.Source", optional=False, fields=(
    FieldSpec("version", "string", optional=False),
    FieldSpec("connector", "string", optional=False),
    FieldSpec("name", "string", optional=False),
    FieldSpec("ts_ms", "int64", optional=False),
    FieldSpec("snapshot", "string", S.ENUM, (("allowed", "true,last,false,incremental"),), optional=True),
    FieldSpec("db", "string", optional=False),
    FieldSpec("sequence", "string"),
    FieldSpec("table", "string"),
    FieldSpec("server_id", "int64", optional=False),
    FieldSpec("gtid", "string"),
    FieldSpec("file", "string", optional=False),
    FieldSpec("pos", "int64", optional=False),
    FieldSpec("row", "int32", optional=False),
    FieldSpec("thread", "int64"),
    FieldSpec("query", "string"),
))
TRANSACTION_SPEC: Final = FieldSpec("transaction", "struct", "event.block", fields=(
    FieldSpec("id", "string", optional=False),
    FieldSpec("total_order", "int64", optional=False),
    FieldSpec("data_collection_order", "int64", optional=False),
))


class TableSchema:
    """The Connect schemas of one table's records (key struct, envelope) and its column writers.
    ``field_name`` maps a column name to its field name (Avro must sanitise; JSON keeps it)."""

    __slots__ = ("database", "envelope", "key", "key_writers", "serialized", "table", "topic", "writers")

    def __init__(self, database: str, table: str, columns: list[Column], settings: Mapping[str, Any],
                 field_name: Callable[[str], str]) -> None:
        self.database, self.table = database, table
        self.topic = f"{settings['topic-prefix']}.{database}.{table}"
        self.writers = [column_writer(c, settings, field_name(c.name)) for c in columns]
        self.key_writers = [w for w in self.writers if w.column.key]
        row = FieldSpec("", "struct", f"{self.topic}.Value", fields=tuple(w.spec for w in self.writers))
        self.key = (FieldSpec("", "struct", f"{self.topic}.Key", optional=False,
                              fields=tuple(msgspec.structs.replace(w.spec, optional=False) for w in self.key_writers))
                    if self.key_writers else None)
        self.envelope = FieldSpec("", "struct", f"{self.topic}.Envelope", optional=False, fields=(
            msgspec.structs.replace(row, name="before"), msgspec.structs.replace(row, name="after"), SOURCE_SPEC,
            FieldSpec("op", "string", optional=False), FieldSpec("ts_ms", "int64"), TRANSACTION_SPEC))
        #: Whatever the converter derives once from these schemas (serialised schema, registry ids).
        self.serialized: Any = None

    def wire_row(self, row: Row | None) -> dict[str, Any] | None:
        if row is None:
            return None
        return {writer.spec.name: self._wire(writer, row.get(writer.column.name)) for writer in self.writers}

    def wire_key(self, row: Row) -> dict[str, Any] | None:
        if not self.key_writers:
            return None
        return {writer.spec.name: self._wire(writer, row.get(writer.column.name)) for writer in self.key_writers}

    @staticmethod
    def _wire(writer: ColumnWriter, value: Any) -> Any:
        if value is None or writer.to_wire is None:
            return value
        try:
            return writer.to_wire(value)
        except Exception as exc:
            raise ValueError(f"column {writer.column.name!r} ({writer.column.type}): cannot encode "
                             f"{shown(value)}: {reason(exc)}") from exc


def _source_params(t: SqlType, column: Column) -> tuple[tuple[str, str], ...]:
    if t.family == T.UNKNOWN:
        return ((S.SOURCE_NAME, column.name),)
    declared = t.name.upper() + (" UNSIGNED" if t.unsigned else "")
    params = [(S.SOURCE_TYPE, declared)]
    if t.length is not None and t.family not in (T.ENUM, T.SET):
        params.append((S.SOURCE_LENGTH, str(t.length)))
        if t.scale is not None:
            params.append((S.SOURCE_SCALE, str(t.scale)))
    params.append((S.SOURCE_NAME, column.name))
    return tuple(params)


_INT_WIRE: Final = {8: "int16", 16: "int16", 24: "int32", 32: "int32", 64: "int64"}
_UNSIGNED_INT_WIRE: Final = {8: "int16", 16: "int32", 24: "int32", 32: "int64", 64: "int64"}
_TWO_64: Final = 1 << 64
_TWO_63: Final = 1 << 63


def column_writer(column: Column, settings: Mapping[str, Any], field_name: str) -> ColumnWriter:
    """How one column is written: its Connect schema and canonical value → wire value, as the MySQL
    connector does with the given handling modes."""
    t = parse_type(column.type)
    family = t.family
    nullable = column.nullable is not False
    adaptive = settings["time-precision-mode"] != "connect"
    structured_mode = settings["time-precision-mode"] == "structured"
    params: tuple[tuple[str, str], ...] = ()
    fields: tuple[FieldSpec, ...] = ()
    semantic: str | None = None
    to_wire: Conv | None = None
    kind = "string"

    def zero_date(convert: Conv, zero: Any) -> Conv:
        # MySQL zero dates: Debezium writes null for a nullable column, the epoch otherwise.
        return lambda v: (None if nullable else zero) if V.is_zero_date(v) else convert(v)

    if family == T.INTEGER:
        bits = t.bits or 64
        kind = (_UNSIGNED_INT_WIRE if t.unsigned else _INT_WIRE).get(bits, "int64")
        if t.unsigned and bits == 64:
            if settings["bigint-unsigned-handling-mode"] == "precise":
                kind, semantic = "bytes", S.DECIMAL
                params = (("scale", "0"), ("connect.decimal.precision", "20"))
                to_wire = lambda v: V.unscaled_bytes(str(v), 0)  # noqa: E731
            else:
                to_wire = lambda v: v - _TWO_64 if v >= _TWO_63 else v  # noqa: E731
    elif family == T.DECIMAL:
        scale = t.scale  # None: string mode writes each value's own digits
        mode = settings["decimal-handling-mode"]
        if mode == "precise":
            scale = T.fixed_scale(t, column.name, "decimal.handling.mode=precise")
            kind, semantic = "bytes", S.DECIMAL
            params = (("scale", str(scale)), ("connect.decimal.precision", str(t.length or 65)))
            to_wire = lambda v: V.unscaled_bytes(str(v), scale)  # noqa: E731
        elif mode == "double":
            kind, to_wire = "double", float
        else:
            kind, to_wire = "string", lambda v: V.decimal_text(v, scale)
    elif family in (T.FLOAT, T.DOUBLE):
        kind, to_wire = ("float" if family == T.FLOAT else "double"), float
    elif family == T.BIT:
        length = t.length or 1
        if length == 1:
            kind, to_wire = "boolean", bool
        else:
            kind, semantic, params = "bytes", S.BITS, (("length", str(length)),)
            width = (length + 7) // 8
            to_wire = lambda v: int(v).to_bytes(width, "little")  # noqa: E731
    elif family == T.BOOLEAN:
        kind, to_wire = "boolean", bool
    elif structured_mode and family in (T.DATE, T.DATETIME, T.TIMESTAMP, T.TIME):
        kind, semantic, fields, params, to_wire = _structured_wire(t, column.name, nullable)
    elif family == T.DATE:
        kind, semantic = "int32", S.DATE if adaptive else S.CONNECT_DATE
        to_wire = zero_date(V.days_from_date_text, 0)
    elif family == T.DATETIME:
        kind = "int64"
        if adaptive and t.fsp > 3:
            semantic, to_wire = S.MICRO_TIMESTAMP, zero_date(V.micros_from_datetime_text, 0)
        else:
            semantic = S.TIMESTAMP if adaptive else S.CONNECT_TIMESTAMP
            to_wire = zero_date(lambda v: V.micros_from_datetime_text(v) // 1000, 0)
    elif family == T.TIMESTAMP:
        semantic = S.ZONED_TIMESTAMP
        to_wire = zero_date(_zoned_wire, "1970-01-01T00:00:00Z")
    elif family == T.TIME:
        if adaptive:
            kind, semantic, to_wire = "int64", S.MICRO_TIME, V.micros_from_time_text
        else:
            kind, semantic, to_wire = "int32", S.CONNECT_TIME, _connect_time
    elif family == T.YEAR:
        kind, semantic = "int32", S.YEAR
    elif family == T.BINARY and t.name in ("point",):
        kind, semantic, to_wire = "struct", S.POINT, _point_wire
    elif family == T.BINARY and t.name in _GEOMETRY_NAMES:
        kind, semantic = "struct", S.GEOMETRY
        to_wire = lambda v: {"wkb": V.unb64(v), "srid": None}  # noqa: E731
    elif family == T.BINARY:
        mode = settings["binary-handling-mode"]
        if mode == "bytes":
            kind, to_wire = "bytes", V.unb64
        elif mode == "base64":
            kind = "string"
        elif mode == "base64-url-safe":
            kind, to_wire = "string", lambda v: base64.urlsafe_b64encode(V.unb64(v)).decode("ascii")
        else:
            kind, to_wire = "string", lambda v: V.unb64(v).hex()
    elif family == T.JSON:
        semantic = S.JSON
    elif family in (T.ENUM, T.SET):
        semantic = S.ENUM if family == T.ENUM else S.ENUM_SET
        params = (("allowed", ",".join(t.members)),)
        to_wire = ((lambda v: V.enum_value(v, t) if isinstance(v, int) else v) if family == T.ENUM
                   else (lambda v: V.set_value(v, t) if isinstance(v, int) else v))
    elif family == T.TEXT:
        pass
    else:
        to_wire = lambda v: v if isinstance(v, str) else json_value(v)  # noqa: E731
    if settings["propagate-source-type"]:
        params = params + _source_params(t, column)
    if semantic == S.POINT:
        fields = (FieldSpec("x", "double", optional=False), FieldSpec("y", "double", optional=False),
                  FieldSpec("wkb", "bytes"), FieldSpec("srid", "int32"))
    elif semantic == S.GEOMETRY:
        fields = (FieldSpec("wkb", "bytes", optional=False), FieldSpec("srid", "int32"))
    spec = FieldSpec(field_name, kind, semantic, params, nullable, fields)
    return ColumnWriter(column, spec, to_wire)


_GEOMETRY_NAMES: Final = frozenset(("geometry", "linestring", "polygon", "multipoint", "multilinestring",
                                    "multipolygon", "geometrycollection", "geomcollection"))


_CLOCK_FIELDS: Final = (FieldSpec("year", "int32"), FieldSpec("month", "int8"), FieldSpec("day", "int8"),
                        FieldSpec("hour", "int8"), FieldSpec("minute", "int8"), FieldSpec("second", "int8"),
                        FieldSpec("picoseconds", "int64"))
_STRUCTURED_FIELDS: Final = {
    S.STRUCTURED_DATE: _CLOCK_FIELDS[:3],
    S.STRUCTURED_TIMESTAMP: (*_CLOCK_FIELDS, FieldSpec("specialValue", "string"), FieldSpec("precision", "int32")),
    S.STRUCTURED_ZONED_TIMESTAMP: (*_CLOCK_FIELDS, FieldSpec("offsetSeconds", "int32"), FieldSpec("zoneId", "string"),
                                 FieldSpec("specialValue", "string"), FieldSpec("precision", "int32")),
    S.STRUCTURED_DURATION: (FieldSpec("years", "int32"), FieldSpec("months", "int32"), FieldSpec("days", "int32"),
                          FieldSpec("hours", "int32"), FieldSpec("minutes", "int32"), FieldSpec("seconds", "int64"),
                          FieldSpec("picoseconds", "int64"), FieldSpec("precision", "int32")),
}
_STRUCTURED_OF: Final = {T.DATE: S.STRUCTURED_DATE, T.DATETIME: S.STRUCTURED_TIMESTAMP,
                         T.TIMESTAMP: S.STRUCTURED_ZONED_TIMESTAMP, T.TIME: S.STRUCTURED_DURATION}


def _structured_wire(t: SqlType, column_name: str, nullable: bool
                     ) -> tuple[str, str, tuple[FieldSpec, ...], tuple[tuple[str, str], ...], Conv]:
    """A temporal column as ``time.precision.mode=structured`` writes it: its kind, schema name (qualified by the
    column, as Debezium does, so that each column's Avro record keeps its own parameters), fields, parameters and
    value writer."""
    base = _STRUCTURED_OF[t.family]
    fsp = t.fsp
    params: tuple[tuple[str, str], ...] = () if base == S.STRUCTURED_DATE else ((S.STRUCTURED_PRECISION, str(fsp)),)
    if base == S.STRUCTURED_DURATION:
        params += ((S.DURATION_KIND, "elapsed-time"),)

    def clock(moment: dt.datetime) -> dict[str, Any]:
        return {"year": moment.year, "month": moment.month, "day": moment.day, "hour": moment.hour,
                "minute": moment.minute, "second": moment.second, "picoseconds": moment.microsecond * 1_000_000,
                "specialValue": None, "precision": fsp}

    def date(text: str) -> dict[str, Any]:
        if V.is_zero_date(text):
            return {"year": 0, "month": 0, "day": 0}
        day = dt.date.fromisoformat(text)
        return {"year": day.year, "month": day.month, "day": day.day}

    def local(text: str) -> dict[str, Any]:
        if V.is_zero_date(text):
            return {**dict.fromkeys((f.name for f in _CLOCK_FIELDS), 0), "specialValue": None, "precision": fsp}
        return clock(V.parse_datetime_text(text))

    def zoned(text: str) -> dict[str, Any] | None:
        if V.is_zero_date(text):
            # As in the other modes: a MySQL zero TIMESTAMP is null in a nullable column, else the epoch.
            return None if nullable else zoned("1970-01-01T00:00:00Z")
        moment = V.parse_datetime_text(text)
        if moment.tzinfo is not None:
            moment = moment.astimezone(V.UTC)
        return {**clock(moment.replace(tzinfo=None)), "offsetSeconds": 0, "zoneId": "Z"}

    def duration(text: str) -> dict[str, Any]:
        micros = V.micros_from_time_text(text)
        sign = -1 if micros < 0 else 1
        seconds, fraction = divmod(abs(micros), 1_000_000)
        minutes, second = divmod(seconds, 60)
        hours, minute = divmod(minutes, 60)
        return {"years": 0, "months": 0, "days": 0, "hours": sign * hours, "minutes": sign * minute,
                "seconds": sign * second, "picoseconds": sign * fraction * 1_000_000, "precision": fsp}

    writers: dict[str, Conv] = {S.STRUCTURED_DATE: date, S.STRUCTURED_TIMESTAMP: local, S.STRUCTURED_DURATION: duration}
    writer = writers.get(base, zoned)
    return "struct", f"{base}SourceColumn{column_name.encode().hex()}", _STRUCTURED_FIELDS[base], params, writer


def _connect_time(value: str) -> int:
    millis = V.micros_from_time_text(value) // 1000
    if not 0 <= millis < 86_400_000:
        # Kafka Connect's Time is a time of day; MySQL TIME beyond it needs adaptive_time_microseconds.
        raise V.BadValue(f"TIME {value} is outside 00:00:00-24:00:00, which time.precision.mode=connect cannot carry")
    return millis


def _zoned_wire(value: str) -> str:
    if value.endswith("Z"):
        return value
    return zoned_timestamp_text(value + "Z" if "+" not in value[10:] else value, None)


def _point_wire(value: str) -> dict[str, Any]:
    wkb = V.unb64(value)
    if len(wkb) != 21:
        raise V.BadValue("POINT wkb must be 21 bytes")
    order = "<" if wkb[0] == 1 else ">"
    x, y = struct.unpack_from(order + "dd", wkb, 5)
    return {"x": x, "y": y, "wkb": wkb, "srid": None}


def _position_parts(position: str | None) -> tuple[str, int, int] | None:
    if not position:
        return None
    parts = position.split("/")
    if len(parts) == _BINLOG_POSITION and parts[1].isdigit() and parts[2].isdigit():
        return parts[0], int(parts[1]), int(parts[2])
    return None


class EnvelopeWriter:
    """Canonical events → the records the Debezium MySQL connector writes, as :class:`Planned` values
    (one table schema per table and column list, built once)."""

    def __init__(self, settings: Mapping[str, Any], tables: dict[Any, TableSchema],
                 field_name: Callable[[str], str] = str) -> None:
        self.settings = settings
        self.tables = tables
        self.field_name = field_name

    def table_for(self, event: ChangeEvent) -> TableSchema:
        columns = event.columns
        if columns is None:
            image = event.after if event.after is not None else event.before or {}
            keys = set(event.key or ())
            columns = [Column(name, E.UNKNOWN_TYPE, name in keys, None) for name in image]
        cache_key = (event.database, event.table, tuple(columns))
        table = self.tables.get(cache_key)
        if table is None:
            if len(self.tables) >= 512:
                self.tables.clear()
            table = self.tables[cache_key] = TableSchema(event.database or "", event.table or "", list(columns),
                                                         self.settings, self.field_name)
        return table

    def plan(self, events: Iterable[ChangeEvent]) -> list[Planned]:
        planned: list[Planned] = []
        tombstones = self.settings["tombstones-on-delete"]
        for index, event in enumerate(events):
            if event.kind not in (E.ROW, E.TRUNCATE):
                continue  # DDL goes to the schema change topic, which cdclake does not write
            if event.table is None:
                raise ValueError("event without a table cannot be written as a Debezium record")
            table = self.table_for(event)
            source = self._source(event, index)
            ts = source["ts_ms"]
            if event.kind == E.TRUNCATE:
                planned.append(Planned(table, None, _envelope(None, None, source, "t", ts), [], ts))
                continue
            op = event.op
            before = table.wire_row(event.before)
            after = table.wire_row(event.after)
            if op == E.DELETE:
                key = table.wire_key(event.before or event.key or {})
                planned.append(Planned(table, key, _envelope(before, None, source, "d", ts), [], ts))
                if tombstones and key is not None:
                    planned.append(Planned(table, key, None, [], ts))
                continue
            if after is None:
                raise ValueError(f"op {op} event without an after image")
            key = table.wire_key(event.after or {})
            if op == E.UPDATE and before is not None and event.before is not None:
                old_key = table.wire_key(event.before)
                if old_key != key:
                    # A key change is delete(old, newkey header) [+ tombstone] + create(new, oldkey header).
                    planned.append(Planned(table, old_key, _envelope(before, None, source, "d", ts),
                                           [(NEW_KEY_HEADER, key or {})], ts))
                    if tombstones and old_key is not None:
                        planned.append(Planned(table, old_key, None, [], ts))
                    planned.append(Planned(table, key, _envelope(None, after, source, "c", ts),
                                           [(OLD_KEY_HEADER, old_key or {})], ts))
                    continue
            wire_op = {E.INSERT: "c", E.UPDATE: "u", E.READ: "r"}.get(op or "")
            if wire_op is None:
                raise ValueError(f"cannot write op {op!r}")
            planned.append(Planned(table, key, _envelope(before if wire_op == "u" else None, after, source,
                                                         wire_op, ts), [], ts))
        return planned

    def _source(self, event: ChangeEvent, index: int) -> dict[str, Any]:
        parts = _position_parts(event.position) or ("mysql-bin.000001", 4 + index, 0)
        ts = event.ts_ms if event.ts_ms is not None else event.commit_ts or 0
        return {"version": _ENVELOPE_VERSION, "connector": "mysql", "name": self.settings["topic-prefix"],
                "ts_ms": ts, "snapshot": "true" if event.op == E.READ else "false", "db": event.database or "",
                "sequence": None, "table": event.table, "server_id": 1, "gtid": None, "file": parts[0],
                "pos": parts[1], "row": parts[2], "thread": None, "query": None}


def _envelope(before: dict[str, Any] | None, after: dict[str, Any] | None, source: dict[str, Any], op: str,
              ts_ms: int) -> dict[str, Any]:
    return {"before": before, "after": after, "source": source, "op": op, "ts_ms": ts_ms, "transaction": None}

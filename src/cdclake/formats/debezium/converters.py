"""What Debezium means, written once for every converter: the envelope's semantics and the Kafka Connect
semantic types, shared by ``debezium-json`` and ``debezium-avro``.

A converter module only turns bytes into *wire values* (Kafka Connect's logical values: ints, floats,
strings, bytes — base64 text in JSON —, dicts for structs) and a :class:`FieldSpec` tree describing them;
everything after that lives here:

* :class:`RowShape` — one row struct compiled once per schema: column names (the original names from
  ``__debezium.source.column.name`` where Avro had to sanitise them), MySQL type text, and a converter per
  column that turns a wire value into its canonical value (:mod:`cdclake.model.values`).
* :func:`envelope_events` — ``before``/``after``/``source``/``op`` → canonical change events.
* :class:`EnvelopeWriter` — the way back, for encoders: canonical events → keys, envelopes, tombstones and
  primary-key-change record triples, with schemas built from the events' column types.

**Column types.** ``__debezium.source.column.type``/``length``/``scale`` (``column.propagate.source.type``)
are exact and win whenever they agree with the wire type; otherwise the type follows the Connect schema
(``int16`` → ``smallint``, ``io.debezium.time.MicroTimestamp`` → ``datetime(6)``, ``Decimal`` →
``decimal(p,s)``, ``Bits`` → ``bit(n)``, ``Enum`` → ``enum('a',…)``, …). Real Debezium writes MySQL TINYINT
as ``int16`` (both corpus captures), so without source types a TINYINT reports as ``smallint``. The structs of
``time.precision.mode=structured`` are read by their fields' names, since Debezium 3.x versions differ in them
(``nanos`` or ``picoseconds``); their precision comes from the schema (a parameter, or a ``Precision<n>`` name).

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

import base64
import datetime as dt
import math
import re
import struct
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import Any, ClassVar, Final, NamedTuple

import msgspec

from cdclake.formats.base import DecodeError, Format, Option, reason
from cdclake.model import types as T
from cdclake.model import values as V
from cdclake.model.events import (
    DDL,
    DELETE,
    INSERT,
    READ,
    ROW,
    TRUNCATE,
    UNKNOWN_TYPE,
    UPDATE,
    ChangeEvent,
    Column,
    Row,
    pad_position,
)
from cdclake.model.types import SqlType, parse_type, type_text

Conv = Callable[[Any], Any]

# Kafka Connect / Debezium semantic type names.
DATE: Final = "io.debezium.time.Date"
TIME: Final = "io.debezium.time.Time"
MICRO_TIME: Final = "io.debezium.time.MicroTime"
NANO_TIME: Final = "io.debezium.time.NanoTime"
TIMESTAMP: Final = "io.debezium.time.Timestamp"
MICRO_TIMESTAMP: Final = "io.debezium.time.MicroTimestamp"
NANO_TIMESTAMP: Final = "io.debezium.time.NanoTimestamp"
ZONED_TIMESTAMP: Final = "io.debezium.time.ZonedTimestamp"
ZONED_TIME: Final = "io.debezium.time.ZonedTime"
ISO_DATE: Final = "io.debezium.time.IsoDate"
ISO_TIME: Final = "io.debezium.time.IsoTime"
ISO_TIMESTAMP: Final = "io.debezium.time.IsoTimestamp"
YEAR: Final = "io.debezium.time.Year"
CONNECT_DATE: Final = "org.apache.kafka.connect.data.Date"
CONNECT_TIME: Final = "org.apache.kafka.connect.data.Time"
CONNECT_TIMESTAMP: Final = "org.apache.kafka.connect.data.Timestamp"
DECIMAL: Final = "org.apache.kafka.connect.data.Decimal"
VARIABLE_DECIMAL: Final = "io.debezium.data.VariableScaleDecimal"
BITS: Final = "io.debezium.data.Bits"
JSON: Final = "io.debezium.data.Json"
ENUM: Final = "io.debezium.data.Enum"
ENUM_SET: Final = "io.debezium.data.EnumSet"
UUID: Final = "io.debezium.data.Uuid"
XML: Final = "io.debezium.data.Xml"
GEOMETRY: Final = "io.debezium.data.geometry.Geometry"
GEOGRAPHY: Final = "io.debezium.data.geometry.Geography"
POINT: Final = "io.debezium.data.geometry.Point"
FLOAT_VECTOR: Final = "io.debezium.data.FloatVector"
DOUBLE_VECTOR: Final = "io.debezium.data.DoubleVector"
# time.precision.mode=structured (Debezium 3.x): temporal values as structs of their calendar and clock parts. Debezium
# may add "Precision<n>" (the fraction digits) and "SourceColumn<hex of the column name>" (which keeps the Avro
# records of two columns apart) to these names.
STRUCTURED_DATE: Final = "io.debezium.time.StructuredDate"
STRUCTURED_TIME: Final = "io.debezium.time.StructuredTime"
STRUCTURED_ZONED_TIME: Final = "io.debezium.time.StructuredZonedTime"
STRUCTURED_TIMESTAMP: Final = "io.debezium.time.StructuredTimestamp"
STRUCTURED_ZONED_TIMESTAMP: Final = "io.debezium.time.StructuredZonedTimestamp"
STRUCTURED_DURATION: Final = "io.debezium.time.StructuredDuration"
STRUCTURED_PRECISION: Final = "io.debezium.time.precision"
DURATION_KIND: Final = "io.debezium.time.duration.kind"

SOURCE_TYPE: Final = "__debezium.source.column.type"
SOURCE_LENGTH: Final = "__debezium.source.column.length"
SOURCE_SCALE: Final = "__debezium.source.column.scale"
SOURCE_NAME: Final = "__debezium.source.column.name"

NEW_KEY_HEADER: Final = "__debezium.newkey"
OLD_KEY_HEADER: Final = "__debezium.oldkey"

CONNECT_TYPES: Final = frozenset(("int8", "int16", "int32", "int64", "float", "double", "boolean", "string",
                                  "bytes", "struct", "array", "map"))

# Type text for a wire type when the message states no source type.
_SEMANTIC_TYPE_TEXT: Final = {
    DATE: "date", CONNECT_DATE: "date", ISO_DATE: "date",
    TIME: "time", MICRO_TIME: "time", NANO_TIME: "time", CONNECT_TIME: "time", ZONED_TIME: "time",
    ISO_TIME: "time",
    TIMESTAMP: "datetime", CONNECT_TIMESTAMP: "datetime", ISO_TIMESTAMP: "datetime",
    MICRO_TIMESTAMP: "datetime(6)", NANO_TIMESTAMP: "datetime(6)",
    ZONED_TIMESTAMP: "timestamp", YEAR: "year", JSON: "json", UUID: "uuid", XML: "xml",
    VARIABLE_DECIMAL: "decimal", GEOMETRY: "geometry", GEOGRAPHY: "geometry", POINT: "point",
    FLOAT_VECTOR: "vector", DOUBLE_VECTOR: "vector",
}
_LITERAL_TYPE_TEXT: Final = {
    "int8": "tinyint", "int16": "smallint", "int32": "int", "int64": "bigint", "float": "float",
    "double": "double", "boolean": "boolean", "string": "text", "bytes": "blob", "struct": "json",
    "array": "json", "map": "json",
}
# Source-type families a wire family can carry (what Debezium's converters produce), beyond its own.
_COMPATIBLE: Final = {
    T.INTEGER: {T.YEAR},
    T.FLOAT: {T.DOUBLE, T.DECIMAL},
    T.DOUBLE: {T.FLOAT, T.DECIMAL},
    T.DECIMAL: {T.INTEGER},
    T.BOOLEAN: {T.BIT, T.INTEGER},
    T.TEXT: {T.DECIMAL, T.BINARY, T.JSON, T.ENUM, T.SET},
}
_TEMPORAL: Final = (T.DATETIME, T.TIMESTAMP, T.TIME)
_BLOCKING_SNAPSHOT: Final = frozenset(("true", "first", "first_in_data_collection", "last_in_data_collection",
                                       "last"))


# ---------------------------------------------------------------------------------------------- options

OPTIONS: Final = (
    Option("decimal-handling-mode", "precise",
           "How the producer writes DECIMAL (decoding with a schema reads every mode; encoding and "
           "debezium-json's column-types use this one)",
           ("precise", "double", "string")),
    Option("bigint-unsigned-handling-mode", "long",
           "BIGINT UNSIGNED as wrapped int64 or as Decimal (decoding with a schema reads both; encoding and "
           "debezium-json's column-types use this one)",
           ("long", "precise")),
    Option("binary-handling-mode", "bytes",
           "How the producer writes BINARY/BLOB: bytes, or a string in base64, base64-url-safe or hex",
           ("bytes", "base64", "base64-url-safe", "hex")),
    Option("time-precision-mode", "adaptive_time_microseconds",
           "Temporal types the producer writes (decoding with a schema reads every mode; encoding and "
           "debezium-json's column-types use this one)",
           ("adaptive_time_microseconds", "connect", "structured")),
    Option("tombstones-on-delete", True, "Encoder: write a tombstone (null value) after each delete"),
    Option("propagate-source-type", True,
           "Encoder: add __debezium.source.column.* schema parameters, which make a round trip exact"),
    Option("topic-prefix", "cdclake", "Encoder: topic.prefix; records go to <prefix>.<database>.<table>"),
)


class DebeziumFormat(Format):
    """Base of the Debezium converters: the shared options, and caches that are rebuilt lazily after
    pickling (Spark ships formats to executors; compiled schemas hold dynamically made classes)."""

    options: ClassVar[tuple[Option, ...]] = OPTIONS
    CACHE_LIMIT: ClassVar[int] = 512

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._caches: dict[str, dict[Any, Any]] = {}

    def cache(self, name: str) -> dict[Any, Any]:
        table = self._caches.get(name)
        if table is None:
            table = self._caches[name] = {}
        elif len(table) >= self.CACHE_LIMIT:
            table.clear()  # a stream of ever-new schemas must not grow memory without bound
        return table

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_caches"] = {}
        return state


# ------------------------------------------------------------------------------------- the source block

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


# ------------------------------------------------------------------------------------------ field specs

class FieldSpec(msgspec.Struct, frozen=True):
    """One Kafka Connect schema, as both converters describe it: the literal type, the semantic name,
    the parameters (all strings), and nested fields/items."""

    name: str
    type: str
    semantic: str | None = None
    params: tuple[tuple[str, str], ...] = ()
    optional: bool = True
    fields: tuple[FieldSpec, ...] = ()
    items: FieldSpec | None = None

    def param(self, name: str, default: str | None = None) -> str | None:
        for key, value in self.params:
            if key == name:
                return value
        return default

    def field(self, name: str) -> FieldSpec | None:
        for spec in self.fields:
            if spec.name == name:
                return spec
        return None


def connect_spec(schema: Any, name: str = "") -> FieldSpec:
    """A :class:`FieldSpec` from the JSON converter's schema object."""
    if not isinstance(schema, dict):
        raise DecodeError(f"schema of field {name or '<root>'!r} is not an object")
    kind = schema.get("type")
    field_name = schema.get("field", name)
    if not isinstance(kind, str) or kind not in CONNECT_TYPES:
        raise DecodeError(f"field {field_name or '<root>'!r} has unknown Connect type {kind!r}")
    params = schema.get("parameters") or {}
    if not isinstance(params, dict):
        raise DecodeError(f"field {field_name!r}: parameters is not an object")
    fields: tuple[FieldSpec, ...] = ()
    items = None
    if kind == "struct":
        members = schema.get("fields")
        if not isinstance(members, list):
            raise DecodeError(f"struct {field_name or '<root>'!r} has no fields list")
        fields = tuple(connect_spec(member) for member in members)
        if len({f.name for f in fields}) != len(fields):
            raise DecodeError(f"struct {field_name or '<root>'!r} names a field twice")
    elif kind == "array":
        items = connect_spec(schema.get("items"), f"{field_name}[]")
    elif kind == "map":
        items = connect_spec(schema.get("values"), f"{field_name}{{}}")
    semantic = schema.get("name")
    return FieldSpec(str(field_name), kind, semantic if isinstance(semantic, str) else None,
                     tuple((str(k), str(v)) for k, v in params.items()), bool(schema.get("optional", False)),
                     fields, items)


def envelope_rows(envelope: FieldSpec) -> tuple[FieldSpec | None, FieldSpec | None]:
    """The ``before`` and ``after`` row structs of an envelope schema (None where absent); the same object
    twice when both describe the same row, as they always do in Debezium, so that it is compiled once."""
    before, after = envelope.field("before"), envelope.field("after")
    before = before if before is not None and before.type == "struct" else None
    after = after if after is not None and after.type == "struct" else None
    if before is not None and after is not None and before.fields == after.fields:
        after = before
    return before, after


# ------------------------------------------------------------------------------------------ column types

def column_name(spec: FieldSpec) -> str:
    return spec.param(SOURCE_NAME) or spec.name


def _labels(spec: FieldSpec) -> tuple[str, ...]:
    allowed = spec.param("allowed")
    return tuple(allowed.split(",")) if allowed else ()


class Structured(NamedTuple):
    """A ``time.precision.mode=structured`` schema: its base name and the fraction digits it states."""

    name: str
    precision: int | None


_STRUCTURED_NAME: Final = re.compile(r"(io\.debezium\.time\.Structured(?:Date|Time|ZonedTime|Timestamp|ZonedTimestamp|"
                                     r"Duration))(?:Precision(\d+))?(?:SourceColumn[0-9a-fA-F]*)?")


def _count(text: str | None) -> int | None:
    """A schema parameter that should be a small whole number (a length, a precision), or None."""
    return int(text) if text and text.isascii() and text.isdigit() and len(text) <= 18 else None


def structured(spec: FieldSpec) -> Structured | None:
    if spec.type != "struct" or spec.semantic is None or (match := _STRUCTURED_NAME.fullmatch(spec.semantic)) is None:
        return None
    name, digits = match.groups()
    if name == STRUCTURED_DURATION and spec.param(DURATION_KIND, "elapsed-time") != "elapsed-time":
        return None  # a duration of calendar parts (PostgreSQL INTERVAL) is no TIME: its parts stay JSON text
    stated = spec.param(STRUCTURED_PRECISION) or digits
    return Structured(name, _count(stated))


_STRUCTURED_TYPE_TEXT: Final = {
    STRUCTURED_DATE: "date", STRUCTURED_TIMESTAMP: "datetime", STRUCTURED_ZONED_TIMESTAMP: "timestamp",
    STRUCTURED_TIME: "time", STRUCTURED_ZONED_TIME: "time", STRUCTURED_DURATION: "time",
}


def wire_type_text(spec: FieldSpec) -> str:
    """The MySQL type text the Connect schema alone implies."""
    if (parts := structured(spec)) is not None:
        base = _STRUCTURED_TYPE_TEXT[parts.name]
        # Like MicroTimestamp, six digits where the schema does not say: all that the lake holds.
        digits = 6 if parts.precision is None else min(6, parts.precision)
        return base if parts.name == STRUCTURED_DATE else f"{base}({digits})"
    semantic = spec.semantic
    if semantic == DECIMAL:
        return f"decimal({spec.param('connect.decimal.precision', '65')},{spec.param('scale', '0')})"
    if semantic == BITS:
        return f"bit({spec.param('length', '1')})"
    if semantic in (ENUM, ENUM_SET):
        family = T.ENUM if semantic == ENUM else T.SET
        return type_text(SqlType(family, family, members=_labels(spec)))
    text = _SEMANTIC_TYPE_TEXT.get(semantic or "")
    return text or _LITERAL_TYPE_TEXT[spec.type]


def source_type_text(spec: FieldSpec) -> str | None:
    """The column's type as ``column.propagate.source.type`` states it, or None."""
    declared = spec.param(SOURCE_TYPE)
    if not declared:
        return None
    words = declared.lower().split()
    modifiers = [w for w in words if w in ("unsigned", "signed", "zerofill")]
    base = " ".join(w for w in words if w not in modifiers)
    if base in ("enum", "set"):
        return type_text(SqlType(base, base, members=_labels(spec))) if spec.param("allowed") is not None else None
    length, scale = spec.param(SOURCE_LENGTH), spec.param(SOURCE_SCALE)
    if parse_type(base).family in _TEMPORAL and (_count(length) or 0) > 6:
        # Some connectors (PostgreSQL) give temporal columns their display size as length, fsp as scale.
        length, scale = (scale if (_count(scale) or 7) <= 6 else None), None
    args = ""
    if length is not None:
        args = f"({length})" if scale is None else f"({length},{scale})"
    return base + args + "".join(" " + m for m in modifiers)


def column_type(spec: FieldSpec) -> tuple[str, SqlType]:
    """Type text and parsed type of a column: the source type where it is stated and agrees with what
    the wire carries, else the wire type."""
    wire_text = wire_type_text(spec)
    wire = parse_type(wire_text)
    declared = source_type_text(spec)
    if declared is not None:
        t = parse_type(declared)
        if t.family == T.BOOLEAN and wire.family == T.INTEGER:
            # MySQL BOOLEAN is TINYINT(1); learned from a snapshot it arrives as a number, and may hold 2.
            return "tinyint(1)", parse_type("tinyint(1)")
        compatible = t.family == wire.family or t.family in _COMPATIBLE.get(wire.family, ())
        if t.family == T.DECIMAL and (t.length is None or not 0 < t.length <= 65
                                      or (spec.semantic == DECIMAL and str(t.scale or 0) != spec.param("scale", "0"))):
            compatible = False
        if compatible:
            return declared, t
    return wire_text, wire


# ------------------------------------------------------------------------------------- value converters

class Wire(msgspec.Struct, frozen=True):
    """How a converter puts wire values into Python: JSON gives bytes as base64 text, Avro as bytes."""

    base64_bytes: bool
    binary_mode: str = "bytes"


def _micros_toward_zero(value: int, per_micro: int = 1000) -> int:
    """Nanos (or finer units, ``per_micro`` of them to a micro) as micros, cut toward zero: the lake holds no finer."""
    return -((-value) // per_micro) if value < 0 else value // per_micro


def _structured_micros(value: Mapping[str, Any]) -> int:
    """The fraction of a structured value in micros: newer Debezium versions give picoseconds, older ones nanos."""
    if (picos := value.get("picoseconds")) is not None:
        return _micros_toward_zero(picos, 1_000_000)
    return _micros_toward_zero(value.get("nanos") or 0)


def _finite(value: Mapping[str, Any]) -> Mapping[str, Any]:
    if (special := value.get("specialValue")) is not None:
        # PostgreSQL's infinity dates and timestamps: no DATE or TIMESTAMP of the lake holds them.
        raise V.BadValue(f"{special} has no value in the lake")
    return value


def _structured_clock(value: Mapping[str, Any]) -> dt.datetime:
    return dt.datetime(value["year"], value["month"], value["day"], value.get("hour") or 0, value.get("minute") or 0,
                       value.get("second") or 0, _structured_micros(value))


def _is_zero_date(value: Mapping[str, Any]) -> bool:
    return not (value.get("year") or value.get("month") or value.get("day"))


def _structured_converter(parts: Structured, fsp: int | None) -> Conv:
    """A structured value (its parts by name, as the schema lists them) → canonical text."""
    name = parts.name
    if name == STRUCTURED_DATE:
        return lambda v: ("0000-00-00" if _is_zero_date(_finite(v))
                          else dt.date(v["year"], v["month"], v["day"]).isoformat())
    if name == STRUCTURED_TIMESTAMP:
        zero = "0000-00-00 00:00:00" + ("." + "0" * fsp if fsp else "")
        return lambda v: zero if _is_zero_date(_finite(v)) else V.datetime_text(_structured_clock(v), fsp)
    if name == STRUCTURED_ZONED_TIMESTAMP:
        return lambda v: V.timestamp_text(_structured_clock(_finite(v)) - dt.timedelta(seconds=_offset(v)), fsp)

    def time_of_day(v: Mapping[str, Any]) -> str:
        seconds = ((v.get("hour") or 0) * 60 + (v.get("minute") or 0)) * 60 + (v.get("second") or 0)
        if name == STRUCTURED_ZONED_TIME:
            seconds = (seconds - _offset(v)) % 86_400
        return V.time_text_from_micros(seconds * 1_000_000 + _structured_micros(v), fsp)

    def elapsed(v: Mapping[str, Any]) -> str:
        if v.get("years") or v.get("months"):
            raise V.BadValue("a duration of years or months is no TIME")
        seconds = (((v.get("days") or 0) * 24 + (v.get("hours") or 0)) * 60 + (v.get("minutes") or 0)) * 60
        return V.time_text_from_micros((seconds + (v.get("seconds") or 0)) * 1_000_000 + _structured_micros(v), fsp)

    return elapsed if name == STRUCTURED_DURATION else time_of_day


def _offset(value: Mapping[str, Any]) -> int:
    """Seconds east of UTC of a structured zoned value: its offset, which Debezium always gives with a zone id."""
    offset = value.get("offsetSeconds")
    if offset is None:
        if (value.get("zoneId") or "Z").upper() not in ("Z", "UTC", "GMT"):
            raise V.BadValue(f"zone {value['zoneId']!r} without offsetSeconds")
        return 0
    return offset


def _fit_fraction(body: str, fsp: int | None) -> str:
    """``body`` (text up to the seconds, optional fraction) with at most 6, or exactly ``fsp``, digits."""
    head, dot, frac = body.partition(".")
    if fsp is None:
        return head + dot + frac[:6] if frac else head
    if fsp == 0:
        return head
    return f"{head}.{(frac + '000000')[:fsp]}"


def zoned_timestamp_text(text: str, fsp: int | None) -> str:
    """A ZonedTimestamp (ISO-8601 with ``Z`` or an offset, 0–9 fraction digits) as canonical UTC text."""
    if text.endswith("Z") and len(text) >= 20 and text[10] == "T" and text[4] == "-":
        body = text[:-1]
    else:
        moment = V.parse_datetime_text(text)
        if moment.tzinfo is None:
            raise V.BadValue(f"timestamp {text[:40]!r} has no zone")
        fraction = _FRACTION.match(text, 19)
        digits = min(len(fraction.group(1)), 6) if fraction else 0
        moment = moment.astimezone(V.UTC)
        body = moment.replace(tzinfo=None).isoformat("T", "seconds")
        body += f".{moment.microsecond:06d}"[: digits + 1] if digits else ""
    return _fit_fraction(body, fsp) + "Z"


def _strip_zone(text: str) -> str:
    if text.endswith("Z"):
        return text[:-1]
    if len(text) > 6 and text[-6] in "+-" and text[-3] == ":":
        return text[:-6]
    return text


def _utc_time(text: str) -> str:
    """A ZonedTime/IsoTime (``HH:MM:SS[.f…]`` with ``Z`` or ``±hh:mm``) as the UTC time of day."""
    body = _strip_zone(text)
    offset = text[len(body):]
    if offset[1:] in ("", "00:00"):
        return body
    head, dot, frac = body.partition(".")
    east = (int(offset[1:3]) * 60 + int(offset[4:6])) * 60 * (1 if offset[0] == "+" else -1)
    seconds = (V.micros_from_time_text(head) // 1_000_000 - east) % 86_400
    return V.time_text_from_micros(seconds * 1_000_000) + dot + frac


def _float32(value: float | str) -> float:
    return V.float32(_double(value))


def _double(value: float | str) -> float:
    """A FLOAT64 (or FLOAT32) payload value: JsonConverter writes NaN and the infinities as the strings Java names
    them by (JSON has no number for them), Avro as doubles; a key's number comes as a Decimal (see the JSON
    format's key decoder)."""
    if type(value) is str and value not in _NON_FINITE:
        raise V.BadValue(f"floating-point value {value[:40]!r}")
    return float(value)


_NON_FINITE: Final = frozenset(("NaN", "Infinity", "-Infinity"))


def _point_wkb(value: Mapping[str, Any]) -> bytes:
    return struct.pack("<BIdd", 1, 1, float(value["x"]), float(value["y"]))


_json_text = msgspec.json.Encoder(decimal_format="number")
_FRACTION = re.compile(r"\.(\d+)")


def _json_value(value: Any) -> str:
    return _json_text.encode(value).decode("utf-8")


def _binary_string(mode: str) -> Conv | None:
    """A string-typed binary column (``binary.handling.mode`` other than bytes) → base64 text. A string
    where the option says bytes means the producer used a string mode after all: base64, the usual one."""
    if mode == "base64-url-safe":
        return lambda v: V.b64(base64.urlsafe_b64decode(v + "=" * (-len(v) % 4)))
    if mode == "hex":
        return lambda v: V.b64(bytes.fromhex(v))
    return None


def converter(spec: FieldSpec, t: SqlType, wire: Wire) -> Conv | None:
    """The function turning one non-null wire value of ``spec`` into the canonical value of a column of
    type ``t``; None where the wire value already is canonical."""
    to_bytes: Conv = V.unb64 if wire.base64_bytes else bytes
    semantic = spec.semantic
    fsp = (t.length if t.length is not None and t.length <= 6 else None) if t.family in _TEMPORAL else None

    if (parts := structured(spec)) is not None:
        return _structured_converter(parts, fsp)
    if semantic in (DATE, CONNECT_DATE):
        return V.date_text
    if semantic in (TIME, CONNECT_TIME):
        return lambda v: V.time_text_from_micros(v * 1000, fsp)
    if semantic == MICRO_TIME:
        return lambda v: V.time_text_from_micros(v, fsp)
    if semantic == NANO_TIME:
        return lambda v: V.time_text_from_micros(_micros_toward_zero(v), fsp)
    if semantic in (TIMESTAMP, CONNECT_TIMESTAMP):
        return lambda v: V.datetime_text_from_micros(v * 1000, fsp)
    if semantic == MICRO_TIMESTAMP:
        return lambda v: V.datetime_text_from_micros(v, 6 if fsp is None else fsp)
    if semantic == NANO_TIMESTAMP:
        return lambda v: V.datetime_text_from_micros(v // 1000, 6 if fsp is None else fsp)
    if semantic == ZONED_TIMESTAMP:
        return lambda v: zoned_timestamp_text(v, fsp)
    if semantic in (ZONED_TIME, ISO_TIME):
        return lambda v: _fit_fraction(_utc_time(v), fsp)
    if semantic == ISO_DATE:
        return _strip_zone
    if semantic == ISO_TIMESTAMP:
        return lambda v: _fit_fraction(_strip_zone(v).replace("T", " "), fsp)
    if semantic == DECIMAL:
        return _decimal_converter(_scale(spec), t, to_bytes)
    if semantic == VARIABLE_DECIMAL:
        return lambda v: V.decimal_from_unscaled(to_bytes(v["value"]), int(v["scale"]))
    if semantic == BITS:
        return lambda v: int.from_bytes(to_bytes(v), "little")
    if semantic in (GEOMETRY, GEOGRAPHY, POINT):
        as_text = None if wire.base64_bytes else V.b64

        def geometry(v: Mapping[str, Any]) -> str:
            wkb = v.get("wkb")
            if wkb is None:
                if semantic != POINT:
                    raise V.BadValue("geometry without wkb")
                return V.b64(_point_wkb(v))
            return wkb if as_text is None else as_text(wkb)

        return geometry
    if semantic in (FLOAT_VECTOR, DOUBLE_VECTOR):
        # Items as the FLOAT32/FLOAT64 columns' values: JSON reads them as Decimals, Avro as doubles.
        item = _float32 if semantic == FLOAT_VECTOR else _double
        return lambda v: [item(x) for x in v]

    kind = spec.type
    if kind in ("int8", "int16", "int32", "int64"):
        if t.family == T.INTEGER and t.unsigned and t.bits == 64:
            # bigint.unsigned.handling.mode=long wraps values ≥ 2^63 to negative.
            return lambda v: v + 18446744073709551616 if v < 0 else v
        return None
    if kind in ("float", "double"):
        if t.family == T.DECIMAL:
            scale = t.scale or 0
            return lambda v: V.decimal_text(Decimal(repr(float(v))), scale)
        if kind == "float":
            return _float32
        return _double if wire.base64_bytes else None  # Avro's doubles are floats already, NaN too
    if kind == "boolean":
        return int if t.family in (T.INTEGER, T.BIT) else None
    if kind == "string":
        if t.family == T.DECIMAL:
            scale = t.scale
            return lambda v: V.decimal_text(v, scale)
        if t.family == T.BINARY:
            return _binary_string(wire.binary_mode)
        return None
    if kind == "bytes":
        return None if wire.base64_bytes else V.b64
    if kind in ("struct", "array", "map"):
        nested = _nested(spec, wire)
        return _json_value if nested is None else lambda v: _json_value(nested(v))
    return None


_SEMANTIC_STRUCTS: Final = frozenset((VARIABLE_DECIMAL, GEOMETRY, GEOGRAPHY, POINT))


def _nested(spec: FieldSpec, wire: Wire) -> Conv | None:
    """The canonical value of a value inside an array, map or struct column (a PostgreSQL DATE[] item, a
    Decimal map value), before the column becomes JSON text; None where the wire value already is canonical."""
    kind = spec.type
    if kind == "array" and spec.semantic not in (FLOAT_VECTOR, DOUBLE_VECTOR):
        item = None if spec.items is None else _nested(spec.items, wire)
        if item is None:
            return None
        return lambda v: [x if x is None else item(x) for x in v]
    if kind == "map":
        value = None if spec.items is None else _nested(spec.items, wire)
        if value is None:
            return None

        def entries(v: Any) -> Any:
            if isinstance(v, Mapping):
                return {k: x if x is None else value(x) for k, x in v.items()}
            # a map whose keys are not strings: the JSON converter writes [key, value] pairs
            return [[k, x if x is None else value(x)] for k, x in v]

        return entries
    if kind == "struct" and structured(spec) is None and spec.semantic not in _SEMANTIC_STRUCTS:
        members = {f.name: conv for f in spec.fields if (conv := _nested(f, wire)) is not None}
        if not members:
            return None
        return lambda v: {k: x if x is None or k not in members else members[k](x) for k, x in v.items()}
    return converter(spec, parse_type(wire_type_text(spec)), wire)


def _scale(spec: FieldSpec) -> int:
    """A Decimal schema's scale parameter, which the message states."""
    text = spec.param("scale", "0") or "0"
    if not re.fullmatch(r"-?[0-9]{1,4}", text):
        raise DecodeError(f"field {spec.name!r}: Decimal scale {text[:40]!r} is not a whole number")
    return int(text)


def _decimal_converter(scale: int, t: SqlType, to_bytes: Conv) -> Conv:
    def decimal(v: Any) -> str:
        if isinstance(v, str | bytes):
            return V.decimal_from_unscaled(to_bytes(v), scale)
        if isinstance(v, float):  # decimal.format=NUMERIC read without a Decimal hook
            if not math.isfinite(v):
                raise V.BadValue(f"decimal value {v!r}")
            return V.decimal_text(Decimal(repr(v)), scale)
        if isinstance(v, int | Decimal) and not isinstance(v, bool):
            return V.decimal_text(v, scale)
        raise V.BadValue(f"decimal value of type {type(v).__name__}")

    if t.family == T.INTEGER:  # BIGINT UNSIGNED in precise mode
        return lambda v: int(Decimal(decimal(v)))
    return decimal


# ----------------------------------------------------------------------------------------------- rows

class RowShape:
    """A row struct compiled once: output names, columns, and the converters of the columns that need one.
    ``convert`` takes the wire values in field order and returns the canonical row."""

    __slots__ = ("_columns", "convs", "lookup", "names", "spec", "wire_names")

    def __init__(self, spec: FieldSpec, wire: Wire) -> None:
        self.spec = spec
        names: list[str] = []
        columns: list[Column] = []
        convs: list[tuple[int, Conv]] = []
        self.lookup: dict[str, tuple[str, Conv | None]] = {}
        for index, field in enumerate(spec.fields):
            name = column_name(field)
            text, t = column_type(field)
            conv = converter(field, t, wire)
            names.append(name)
            columns.append(Column(name, text, False, field.optional))
            if conv is not None:
                convs.append((index, conv))
            # JSON keys are read with exact numbers, for Decimal columns; a double column wants its float.
            self.lookup[field.name] = (name, float if conv is None and field.type == "double" else conv)
        self.names = tuple(names)
        self.wire_names = tuple(f.name for f in spec.fields)
        self.convs = tuple(convs)
        self._columns: dict[tuple[str, ...], list[Column]] = {(): columns}

    def convert(self, values: list[Any]) -> Row:
        for index, conv in self.convs:
            value = values[index]
            if value is not None:
                try:
                    values[index] = conv(value)
                except Exception as exc:
                    raise DecodeError(f"column {self.names[index]!r}: bad value {_show(value)}: "
                                      f"{reason(exc)}") from exc
        return dict(zip(self.names, values, strict=True))

    def convert_key(self, wire_key: Mapping[str, Any]) -> Row:
        """A key struct (wire names → wire values) with this row's converters."""
        key: Row = {}
        for wire_name, value in wire_key.items():
            name, conv = self.lookup.get(wire_name, (wire_name, None))
            try:
                key[name] = value if value is None or conv is None else conv(value)
            except Exception as exc:
                raise DecodeError(f"key column {name!r}: bad value {_show(value)}: {reason(exc)}") from exc
        return key

    def columns(self, key_names: tuple[str, ...]) -> list[Column]:
        """The columns with ``key`` set for ``key_names``; the list is shared by events, do not mutate."""
        columns = self._columns.get(key_names)
        if columns is None:
            keys = set(key_names)
            columns = [Column(c.name, c.type, c.name in keys, c.nullable) for c in self._columns[()]]
            if len(self._columns) < 64:
                self._columns[key_names] = columns
        return columns


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_schemaless_columns: dict[tuple[tuple[str, ...], tuple[str, ...]], list[Column]] = {}


def schemaless_columns(row: Row, key_names: tuple[str, ...]) -> list[Column]:
    """Columns of a row that came without a schema: names only, types unknown."""
    names = tuple(row)
    cached = _schemaless_columns.get((names, key_names))
    if cached is None:
        keys = set(key_names)
        cached = [Column(name, UNKNOWN_TYPE, name in keys, None) for name in names]
        if len(_schemaless_columns) > 1024:
            _schemaless_columns.clear()
        _schemaless_columns[(names, key_names)] = cached
    return cached


# ----------------------------------------------------------------------------------------------- events

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


# =============================================================================================== encoding

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
    FieldSpec("snapshot", "string", ENUM, (("allowed", "true,last,false,incremental"),), optional=True),
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
                             f"{_show(value)}: {reason(exc)}") from exc


def _source_params(t: SqlType, column: Column) -> tuple[tuple[str, str], ...]:
    if t.family == T.UNKNOWN:
        return ((SOURCE_NAME, column.name),)
    declared = t.name.upper() + (" UNSIGNED" if t.unsigned else "")
    params = [(SOURCE_TYPE, declared)]
    if t.length is not None and t.family not in (T.ENUM, T.SET):
        params.append((SOURCE_LENGTH, str(t.length)))
        if t.scale is not None:
            params.append((SOURCE_SCALE, str(t.scale)))
    params.append((SOURCE_NAME, column.name))
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
                kind, semantic = "bytes", DECIMAL
                params = (("scale", "0"), ("connect.decimal.precision", "20"))
                to_wire = lambda v: V.unscaled_bytes(str(v), 0)  # noqa: E731
            else:
                to_wire = lambda v: v - _TWO_64 if v >= _TWO_63 else v  # noqa: E731
    elif family == T.DECIMAL:
        scale = t.scale  # None: string mode writes each value's own digits
        mode = settings["decimal-handling-mode"]
        if mode == "precise":
            scale = T.fixed_scale(t, column.name, "decimal.handling.mode=precise")
            kind, semantic = "bytes", DECIMAL
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
            kind, semantic, params = "bytes", BITS, (("length", str(length)),)
            width = (length + 7) // 8
            to_wire = lambda v: int(v).to_bytes(width, "little")  # noqa: E731
    elif family == T.BOOLEAN:
        kind, to_wire = "boolean", bool
    elif structured_mode and family in (T.DATE, T.DATETIME, T.TIMESTAMP, T.TIME):
        kind, semantic, fields, params, to_wire = _structured_wire(t, column.name, nullable)
    elif family == T.DATE:
        kind, semantic = "int32", DATE if adaptive else CONNECT_DATE
        to_wire = zero_date(V.days_from_date_text, 0)
    elif family == T.DATETIME:
        kind = "int64"
        if adaptive and t.fsp > 3:
            semantic, to_wire = MICRO_TIMESTAMP, zero_date(V.micros_from_datetime_text, 0)
        else:
            semantic = TIMESTAMP if adaptive else CONNECT_TIMESTAMP
            to_wire = zero_date(lambda v: V.micros_from_datetime_text(v) // 1000, 0)
    elif family == T.TIMESTAMP:
        semantic = ZONED_TIMESTAMP
        to_wire = zero_date(_zoned_wire, "1970-01-01T00:00:00Z")
    elif family == T.TIME:
        if adaptive:
            kind, semantic, to_wire = "int64", MICRO_TIME, V.micros_from_time_text
        else:
            kind, semantic, to_wire = "int32", CONNECT_TIME, _connect_time
    elif family == T.YEAR:
        kind, semantic = "int32", YEAR
    elif family == T.BINARY and t.name in ("point",):
        kind, semantic, to_wire = "struct", POINT, _point_wire
    elif family == T.BINARY and t.name in _GEOMETRY_NAMES:
        kind, semantic = "struct", GEOMETRY
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
        semantic = JSON
    elif family in (T.ENUM, T.SET):
        semantic = ENUM if family == T.ENUM else ENUM_SET
        params = (("allowed", ",".join(t.members)),)
        to_wire = ((lambda v: V.enum_value(v, t) if isinstance(v, int) else v) if family == T.ENUM
                   else (lambda v: V.set_value(v, t) if isinstance(v, int) else v))
    elif family == T.TEXT:
        pass
    else:
        to_wire = lambda v: v if isinstance(v, str) else _json_value(v)  # noqa: E731
    if settings["propagate-source-type"]:
        params = params + _source_params(t, column)
    if semantic == POINT:
        fields = (FieldSpec("x", "double", optional=False), FieldSpec("y", "double", optional=False),
                  FieldSpec("wkb", "bytes"), FieldSpec("srid", "int32"))
    elif semantic == GEOMETRY:
        fields = (FieldSpec("wkb", "bytes", optional=False), FieldSpec("srid", "int32"))
    spec = FieldSpec(field_name, kind, semantic, params, nullable, fields)
    return ColumnWriter(column, spec, to_wire)


_GEOMETRY_NAMES: Final = frozenset(("geometry", "linestring", "polygon", "multipoint", "multilinestring",
                                    "multipolygon", "geometrycollection", "geomcollection"))


_CLOCK_FIELDS: Final = (FieldSpec("year", "int32"), FieldSpec("month", "int8"), FieldSpec("day", "int8"),
                        FieldSpec("hour", "int8"), FieldSpec("minute", "int8"), FieldSpec("second", "int8"),
                        FieldSpec("picoseconds", "int64"))
_STRUCTURED_FIELDS: Final = {
    STRUCTURED_DATE: _CLOCK_FIELDS[:3],
    STRUCTURED_TIMESTAMP: (*_CLOCK_FIELDS, FieldSpec("specialValue", "string"), FieldSpec("precision", "int32")),
    STRUCTURED_ZONED_TIMESTAMP: (*_CLOCK_FIELDS, FieldSpec("offsetSeconds", "int32"), FieldSpec("zoneId", "string"),
                                 FieldSpec("specialValue", "string"), FieldSpec("precision", "int32")),
    STRUCTURED_DURATION: (FieldSpec("years", "int32"), FieldSpec("months", "int32"), FieldSpec("days", "int32"),
                          FieldSpec("hours", "int32"), FieldSpec("minutes", "int32"), FieldSpec("seconds", "int64"),
                          FieldSpec("picoseconds", "int64"), FieldSpec("precision", "int32")),
}
_STRUCTURED_OF: Final = {T.DATE: STRUCTURED_DATE, T.DATETIME: STRUCTURED_TIMESTAMP,
                         T.TIMESTAMP: STRUCTURED_ZONED_TIMESTAMP, T.TIME: STRUCTURED_DURATION}


def _structured_wire(t: SqlType, column_name: str, nullable: bool
                     ) -> tuple[str, str, tuple[FieldSpec, ...], tuple[tuple[str, str], ...], Conv]:
    """A temporal column as ``time.precision.mode=structured`` writes it: its kind, schema name (qualified by the
    column, as Debezium does, so that each column's Avro record keeps its own parameters), fields, parameters and
    value writer."""
    base = _STRUCTURED_OF[t.family]
    fsp = t.fsp
    params: tuple[tuple[str, str], ...] = () if base == STRUCTURED_DATE else ((STRUCTURED_PRECISION, str(fsp)),)
    if base == STRUCTURED_DURATION:
        params += ((DURATION_KIND, "elapsed-time"),)

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

    writer: Conv = {STRUCTURED_DATE: date, STRUCTURED_TIMESTAMP: local, STRUCTURED_DURATION: duration}.get(base, zoned)
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
            columns = [Column(name, UNKNOWN_TYPE, name in keys, None) for name in image]
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
            if event.kind not in (ROW, TRUNCATE):
                continue  # DDL goes to the schema change topic, which cdclake does not write
            if event.table is None:
                raise ValueError("event without a table cannot be written as a Debezium record")
            table = self.table_for(event)
            source = self._source(event, index)
            ts = source["ts_ms"]
            if event.kind == TRUNCATE:
                planned.append(Planned(table, None, _envelope(None, None, source, "t", ts), [], ts))
                continue
            op = event.op
            before = table.wire_row(event.before)
            after = table.wire_row(event.after)
            if op == DELETE:
                key = table.wire_key(event.before or event.key or {})
                planned.append(Planned(table, key, _envelope(before, None, source, "d", ts), [], ts))
                if tombstones and key is not None:
                    planned.append(Planned(table, key, None, [], ts))
                continue
            if after is None:
                raise ValueError(f"op {op} event without an after image")
            key = table.wire_key(event.after or {})
            if op == UPDATE and before is not None and event.before is not None:
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
            wire_op = {INSERT: "c", UPDATE: "u", READ: "r"}.get(op or "")
            if wire_op is None:
                raise ValueError(f"cannot write op {op!r}")
            planned.append(Planned(table, key, _envelope(before if wire_op == "u" else None, after, source,
                                                         wire_op, ts), [], ts))
        return planned

    def _source(self, event: ChangeEvent, index: int) -> dict[str, Any]:
        parts = _position_parts(event.position) or ("mysql-bin.000001", 4 + index, 0)
        ts = event.ts_ms if event.ts_ms is not None else event.commit_ts or 0
        return {"version": _ENVELOPE_VERSION, "connector": "mysql", "name": self.settings["topic-prefix"],
                "ts_ms": ts, "snapshot": "true" if event.op == READ else "false", "db": event.database or "",
                "sequence": None, "table": event.table, "server_id": 1, "gtid": None, "file": parts[0],
                "pos": parts[1], "row": parts[2], "thread": None, "query": None}


def _envelope(before: dict[str, Any] | None, after: dict[str, Any] | None, source: dict[str, Any], op: str,
              ts_ms: int) -> dict[str, Any]:
    return {"before": before, "after": after, "source": source, "op": op, "ts_ms": ts_ms, "transaction": None}


"""The Kafka Connect schema of a Debezium message, as both converters describe it: the semantic type names,
:class:`FieldSpec` (a JSON converter schema or an Avro schema, read into one tree), and each column's type.

**Column types.** ``__debezium.source.column.type``/``length``/``scale`` (``column.propagate.source.type``)
are exact and win whenever they agree with the wire type; otherwise the type follows the Connect schema
(``int16`` → ``smallint``, ``io.debezium.time.MicroTimestamp`` → ``datetime(6)``, ``Decimal`` →
``decimal(p,s)``, ``Bits`` → ``bit(n)``, ``Enum`` → ``enum('a',…)``, …). Real Debezium writes MySQL TINYINT
as ``int16`` (both corpus captures), so without source types a TINYINT reports as ``smallint``. The structs of
``time.precision.mode=structured`` are read by their fields' names, since Debezium 3.x versions differ in them
(``nanos`` or ``picoseconds``); their precision comes from the schema (a parameter, or a ``Precision<n>`` name).
"""

from __future__ import annotations

import re
from typing import Any, Final, NamedTuple

import msgspec

from cdclake.formats.base import DecodeError
from cdclake.model import types as T
from cdclake.model.types import SqlType, parse_type, type_text

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
TEMPORAL: Final = (T.DATETIME, T.TIMESTAMP, T.TIME)



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
    if parse_type(base).family in TEMPORAL and (_count(length) or 0) > 6:
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

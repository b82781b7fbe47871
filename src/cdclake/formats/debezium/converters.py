"""Wire values → canonical values: a converter per column (temporal types, Decimal, VariableScaleDecimal,
Bits, geometry, vectors, nested arrays/maps/structs) and :class:`RowShape`, a row struct compiled once.

A converter module (``debezium-json``, ``debezium-avro``) only turns bytes into *wire values* (Kafka Connect's
logical values: ints, floats, strings, bytes — base64 text in JSON —, dicts for structs) and a
:class:`~cdclake.formats.debezium.schema.FieldSpec` tree describing them; the values become canonical
(:mod:`cdclake.model.values`) here.
"""

from __future__ import annotations

import base64
import datetime as dt
import math
import re
import struct
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, Final

import msgspec

from cdclake.formats.base import DecodeError, reason
from cdclake.formats.debezium.schema import (
    BITS,
    CONNECT_DATE,
    CONNECT_TIME,
    CONNECT_TIMESTAMP,
    DATE,
    DECIMAL,
    DOUBLE_VECTOR,
    FLOAT_VECTOR,
    GEOGRAPHY,
    GEOMETRY,
    ISO_DATE,
    ISO_TIME,
    ISO_TIMESTAMP,
    MICRO_TIME,
    MICRO_TIMESTAMP,
    NANO_TIME,
    NANO_TIMESTAMP,
    POINT,
    STRUCTURED_DATE,
    STRUCTURED_DURATION,
    STRUCTURED_TIMESTAMP,
    STRUCTURED_ZONED_TIME,
    STRUCTURED_ZONED_TIMESTAMP,
    TEMPORAL,
    TIME,
    TIMESTAMP,
    VARIABLE_DECIMAL,
    ZONED_TIME,
    ZONED_TIMESTAMP,
    FieldSpec,
    Structured,
    column_name,
    column_type,
    structured,
    wire_type_text,
)
from cdclake.model import types as T
from cdclake.model import values as V
from cdclake.model.events import (
    UNKNOWN_TYPE,
    Column,
    Row,
)
from cdclake.model.types import SqlType, parse_type

Conv = Callable[[Any], Any]


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


def json_value(value: Any) -> str:
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
    fsp = (t.length if t.length is not None and t.length <= 6 else None) if t.family in TEMPORAL else None

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
        return json_value if nested is None else lambda v: json_value(nested(v))
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
                    raise DecodeError(f"column {self.names[index]!r}: bad value {shown(value)}: "
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
                raise DecodeError(f"key column {name!r}: bad value {shown(value)}: {reason(exc)}") from exc
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


def shown(value: Any) -> str:
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

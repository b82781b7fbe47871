"""TiCDC's Avro schemas as the decoder reads them: the reserved field names, each column field's type and
converter (wire value → canonical value), and :class:`Plan`, what one writer schema needs at decode time."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any, Final, NamedTuple

from cdclake.formats.base import DecodeError
from cdclake.formats.ticdc.checksum import RowChecksum, column_encoder, split_allowed
from cdclake.model import types as T
from cdclake.model import values as V
from cdclake.model.events import Column
from cdclake.model.types import SqlType

OP_FIELD: Final = "_tidb_op"
COMMIT_TS_FIELD: Final = "_tidb_commit_ts"
PHYSICAL_TIME_FIELD: Final = "_tidb_commit_physical_time"
CHECKSUM_FIELD: Final = "_tidb_row_level_checksum"
CORRUPTED_FIELD: Final = "_tidb_corrupted"
CHECKSUM_VERSION_FIELD: Final = "_tidb_checksum_version"
BEFORE_FIELD: Final = "_ticdc_before"
# The first field with one of these names ends the column fields (ticdc-avro.md §5).
RESERVED: Final = frozenset(
    {BEFORE_FIELD, OP_FIELD, COMMIT_TS_FIELD, PHYSICAL_TIME_FIELD, CHECKSUM_FIELD, CORRUPTED_FIELD,
     CHECKSUM_VERSION_FIELD}
)  # fmt: skip
# The reserved fields as TiCDC writes them: with enable-tidb-extension, and with the row checksum.
EXTENSION_FIELDS: Final = (
    {"default": "", "name": OP_FIELD, "type": "string"},
    {"default": 0, "name": COMMIT_TS_FIELD, "type": "long"},
    {"default": 0, "name": PHYSICAL_TIME_FIELD, "type": "long"},
)
CHECKSUM_FIELDS: Final = (
    {"default": "", "name": CHECKSUM_FIELD, "type": "string"},
    {"default": False, "name": CORRUPTED_FIELD, "type": "boolean"},
    {"default": 0, "name": CHECKSUM_VERSION_FIELD, "type": "int"},
)

U64: Final = 1 << 64

Converter = Callable[[Any], Any]


def _unsigned_long(value: int) -> int:
    return value + U64 if value < 0 else value


def _unsigned_text(value: str) -> int:
    number = int(value)
    if not 0 <= number < U64:
        raise V.BadValue(f"BIGINT UNSIGNED value {value!r} is out of range")
    return number


def _decimal_text(value: Decimal) -> str:
    return format(value, "f")  # fastavro scales by the schema's scale, so the exponent is -scale


def _bit_value(value: bytes) -> int:
    return int.from_bytes(value, "big")


def _utc_timestamp(text: str) -> str:
    if text.startswith("0000-00-00"):
        return text
    return text.replace(" ", "T", 1) + "Z"


def _local_timestamp(zone: str) -> Converter:
    def convert(text: str) -> str:
        try:
            return V.local_timestamp_to_utc(text, zone, rule="go")
        except ValueError:
            raise V.BadValue(f"TIMESTAMP {text[:40]!r} is not YYYY-MM-DD HH:MM:SS[.f]") from None

    return convert


# The Avro types TiCDC writes for each tidb_type (FLOAT was double before v7.0.0).
_AVRO_TYPES: Final = {
    "INT": ("int", "long"), "INT UNSIGNED": ("int", "long"), "BIGINT": ("long",), "YEAR": ("int",),
    "BIGINT UNSIGNED": ("long", "string"), "FLOAT": ("float", "double"), "DOUBLE": ("double",),
    "DECIMAL": ("bytes", "string"), "TEXT": ("string",), "JSON": ("string",), "DATE": ("string",),
    "DATETIME": ("string",), "TIME": ("string",), "TIMESTAMP": ("string",), "BLOB": ("bytes",), "BIT": ("bytes",),
    "ENUM": ("string",), "SET": ("string",), "TiDBVECTORFloat32": ("string",),
}  # fmt: skip


class Col(NamedTuple):
    name: str
    tidb_type: str
    nullable: bool
    type_text: str
    convert: Converter | None  # wire value → canonical value; None when they are the same


def _column_of(field: dict[str, Any], zone: str) -> tuple[Col, Any]:
    """A column field's plan entry and its checksum encoder."""
    name = field.get("name")
    avro_type = field.get("type")
    nullable = False
    if isinstance(avro_type, list):
        branches = [b for b in avro_type if b != "null"]
        nullable = len(branches) < len(avro_type)
        if len(branches) != 1:
            raise DecodeError(f"column {name!r}: union {avro_type!r} is not a TiCDC column type")
        avro_type = branches[0]
    if not isinstance(avro_type, dict) or not isinstance(avro_type.get("connect.parameters"), dict):
        raise DecodeError(f"column {name!r} has no connect.parameters: not a TiCDC Avro schema")
    params = avro_type["connect.parameters"]
    tidb_type = params.get("tidb_type")
    base = avro_type.get("type")
    expected = _AVRO_TYPES.get(tidb_type)
    if expected is not None and base not in expected:
        raise DecodeError(f"column {name!r}: tidb_type {tidb_type} cannot be Avro {base!r}")
    convert: Converter | None = None
    scale: int | None = None
    allowed: tuple[str, ...] = ()
    if tidb_type in ("INT", "INT UNSIGNED", "BIGINT", "YEAR"):
        text = {"INT": "int", "INT UNSIGNED": "int unsigned", "BIGINT": "bigint", "YEAR": "year"}[tidb_type]
    elif tidb_type == "BIGINT UNSIGNED":
        text = "bigint unsigned"
        convert = _unsigned_text if base == "string" else _unsigned_long
    elif tidb_type in ("FLOAT", "DOUBLE"):
        text = tidb_type.lower()
    elif tidb_type == "DECIMAL":
        if avro_type.get("logicalType") == "decimal":
            scale = int(avro_type.get("scale", 0))
            text = f"decimal({int(avro_type.get('precision', 10))},{scale})"
            convert = _decimal_text
        elif base == "string":
            text = "decimal"
        else:
            raise DecodeError(f"column {name!r}: DECIMAL as Avro bytes without the decimal logical type")
    elif tidb_type in ("TEXT", "JSON", "DATE", "DATETIME", "TIME"):
        text = tidb_type.lower()
    elif tidb_type == "BLOB":
        text = "blob"
        convert = V.b64
    elif tidb_type == "TIMESTAMP":
        text = "timestamp"
        convert = _utc_timestamp if V.zone(zone) is V.UTC else _local_timestamp(zone)
    elif tidb_type == "BIT":
        length = str(params.get("length", ""))
        text = f"bit({length})" if length.isdigit() else "bit"
        convert = _bit_value
    elif tidb_type in ("ENUM", "SET"):
        allowed = split_allowed(str(params.get("allowed", "")))
        family = T.ENUM if tidb_type == "ENUM" else T.SET
        text = T.type_text(SqlType(family, family, members=allowed))
    elif tidb_type == "TiDBVECTORFloat32":
        text = "vector"
    else:
        raise DecodeError(f"column {name!r} has unknown tidb_type {tidb_type!r}")
    encoder = column_encoder(tidb_type, allowed, scale, zone)
    return Col(str(name), tidb_type, nullable, text, convert), encoder


# A value record read: row and before image (canonical values), _tidb_op, _tidb_commit_ts,
# _tidb_commit_physical_time, _tidb_row_level_checksum, _tidb_corrupted, the recomputed checksum, and why it
# could not be recomputed. Fields the schema lacks are None.
Read = tuple[
    dict[str, Any], dict[str, Any] | None, str | None, int | None, int | None, str | None, bool | None, int | None, str
]


class Plan:
    """What one writer schema needs at decode time, built once per schema ID."""

    __slots__ = (
        "checksum",
        "cols",
        "columns",
        "converters",
        "database",
        "fast",
        "has_checksum",
        "hint",
        "order",
        "parsed",
        "table",
        "tail",
        "timestamps",
        "zone",
    )  # fmt: skip

    def __init__(self, raw: dict[str, Any], parsed: Any, zone: str) -> None:
        if not isinstance(raw, dict) or raw.get("type") != "record" or not isinstance(raw.get("fields"), list):
            raise DecodeError("writer schema is not an Avro record: not a TiCDC Avro schema")
        self.parsed = parsed
        self.table: str = str(raw.get("name", ""))
        namespace = str(raw.get("namespace") or "")
        self.database: str | None = namespace.partition(".")[2] or None
        fields = raw["fields"]
        if not all(isinstance(f, dict) and isinstance(f.get("name"), str) for f in fields):
            raise DecodeError("writer schema has a field that is not a named Avro field")
        end = next((i for i, f in enumerate(fields) if f.get("name") in RESERVED), len(fields))
        cols: list[Col] = []
        encoders = []
        for field in fields[:end]:
            col, encoder = _column_of(field, zone)
            cols.append(col)
            encoders.append(encoder)
        self.cols = cols
        self.order = tuple(c.name for c in cols)
        self.converters = tuple((c.name, c.convert) for c in cols if c.convert is not None)
        self.tail = tuple(str(f.get("name")) for f in fields[end:])
        self.has_checksum = CHECKSUM_FIELD in self.tail
        # TIMESTAMP values are hashed in UTC, so a wrong timestamp-zone shows as a mismatch: say so
        self.hint = (
            f" (TIMESTAMP columns are hashed in UTC from timestamp-zone={zone}: is that the TiCDC server's tz?)"
            if any(c.tidb_type == "TIMESTAMP" for c in cols)
            else ""
        )
        self.checksum = RowChecksum(encoders)
        self.timestamps = tuple(i for i, c in enumerate(cols) if c.tidb_type == "TIMESTAMP")
        self.zone = zone
        self.columns = [Column(c.name, c.type_text, False, c.nullable) for c in cols]
        self.fast: Callable[[bytes], Read] | None = None  # the generated reader: avro_reader.compile_reader

    def convert(self, row: dict[str, Any]) -> dict[str, Any]:
        """Wire values → canonical values, in place."""
        for name, convert in self.converters:
            value = row[name]
            if value is not None:
                row[name] = convert(value)
        return row

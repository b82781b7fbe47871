"""Alibaba Cloud DTS Avro: one schemaless Avro datum of ``com.alibaba.dts.formats.avro.Record`` per message.

See ``dts-avro.md``. The schema is fixed and known (``RECORD_SCHEMA`` below, revision R2; R1 lacks the
trailing ``bornTimestamp``), so the decoder reads the binary encoding directly into canonical values
instead of building fastavro's intermediate dicts (several times faster): the header inline, each image
through a reader generated once per column layout (``_compile_reader``) with the generic per-value reader
``DtsAvro._value`` as its fallback and reference. The encoder uses fastavro, which keeps the decoder honest
in the tests.

Decoding choices, documented for users:

- Both schema revisions are detected, not configured: the datum is read with the R1 field list and a
  remaining varint is R2's ``bornTimestamp``; further trailing bytes are logged once and ignored.
- ``INSERT``/``UPDATE``/``DELETE`` are row events (``INIT``, the full-load rows, are snapshot reads ``r``);
  ``DDL`` is a DDL event whose table is parsed from the statement (the record names only the database);
  a ``TRUNCATE [TABLE] t`` statement is kind ``truncate``. ``NOOP`` placeholders,
  ``HEARTBEAT``, ``BEGIN``, ``COMMIT`` and the other control operations carry no change: ``[]`` (skipped).
  A null value, and a value of at most 48 bytes that does not decode (DTS's offset-advancing placeholder),
  are skipped too.
- ``objectName`` ``db.table`` gives database and table; ``db.schema.table`` gives database ``db`` and
  table ``schema.table``; ``\\u002E`` inside a component is a literal dot.
- ``commit_ts`` and ``ts_ms`` are ``sourceTimestamp`` (epoch seconds) in milliseconds. ``position`` orders
  records inside that second: MySQL's ``<offset>@<file>`` becomes ``pad_position(file, offset, id)``, a
  numeric position ``pad_position(n, id)``, anything else the text followed by the padded ``id``; a
  redelivered message keeps its position.
- Key columns come from the ``pk_uk_info`` tag (``PRIMARY``, else the first unique index).
- Column types are MySQL type text from ``dataTypeNumber`` (MySQL binlog codes; PostgreSQL and Oracle codes
  are mapped to their closest types, other sources are typed from the value), refined by the value where
  the code leaves it open: ``decimal(p,s)`` from the Decimal's precision and scale, ``varbinary``/``blob``
  for charset ``binary`` or BLOB objects. A NULL value reports the text variant. Text in a charset Python
  does not know is kept as bytes (logged once per charset).
- ``EmptyObject.NONE`` ("not captured", e.g. an unchanged LOB) leaves the column out of that image; an
  update's images are then completed from each other, so an unchanged column keeps its value.
- Timestamp and TimestampWithTimeZone values become UTC text; DateTime values are rendered by column type
  (DATE, TIME, DATETIME, YEAR; Oracle intervals as ``[-]Y-MM`` and ``[-]D HH:MM:SS[.f]``, typed by their code);
  Oracle's nanosecond fraction keeps nine digits when it is not whole micros.
"""

from __future__ import annotations

import base64
import codecs
import datetime as dt
import encodings.cp1252
import io
import logging
import re
import struct
from collections.abc import Iterable
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any, Final

import msgspec

from cdclake.formats.base import DecodeError, Format, Option
from cdclake.model import ddl as ddl_text
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
    complete_before,
    pad_position,
)
from cdclake.model.records import Record

log = logging.getLogger(__name__)

NAMESPACE: Final = "com.alibaba.dts.formats.avro"
SOURCE_TYPES: Final = ("MySQL", "Oracle", "SQLServer", "PostgreSQL", "MongoDB", "Redis", "DB2", "PPAS", "DRDS",
                       "HBASE", "HDFS", "FILE", "OTHER")
OPERATIONS: Final = ("INSERT", "UPDATE", "DELETE", "DDL", "BEGIN", "COMMIT", "ROLLBACK", "ABORT", "HEARTBEAT",
                     "CHECKPOINT", "COMMAND", "FILL", "FINISH", "CONTROL", "RDB", "NOOP", "INIT")
PLACEHOLDER_BYTES: Final = 48

_VALUE_BRANCHES: Final = ("Integer", "Character", "Decimal", "Float", "Timestamp", "DateTime",
                          "TimestampWithTimeZone", "BinaryGeometry", "TextGeometry", "BinaryObject", "TextObject",
                          "EmptyObject")

# The DTS Record schema, revision R2 (written from dts-avro.md §3.1; docs omitted). R1 drops the last field.
RECORD_SCHEMA: Final[dict[str, Any]] = {
    "type": "record", "name": "Record", "namespace": NAMESPACE,
    "fields": [
        {"name": "version", "type": "int"},
        {"name": "id", "type": "long"},
        {"name": "sourceTimestamp", "type": "long"},
        {"name": "sourcePosition", "type": "string"},
        {"name": "safeSourcePosition", "type": "string", "default": ""},
        {"name": "sourceTxid", "type": "string", "default": ""},
        {"name": "source", "type": {"type": "record", "name": "Source", "fields": [
            {"name": "sourceType", "type": {"type": "enum", "name": "SourceType", "symbols": list(SOURCE_TYPES)}},
            {"name": "version", "type": "string"}]}},
        {"name": "operation", "type": {"type": "enum", "name": "Operation", "symbols": list(OPERATIONS)}},
        {"name": "objectName", "type": ["null", "string"], "default": None},
        {"name": "processTimestamps", "type": ["null", {"type": "array", "items": "long"}], "default": None},
        {"name": "tags", "type": {"type": "map", "values": "string"}, "default": {}},
        {"name": "fields", "type": ["null", "string", {"type": "array", "items": {
            "type": "record", "name": "Field", "fields": [
                {"name": "name", "type": "string"}, {"name": "dataTypeNumber", "type": "int"}]}}],
         "default": None},
        {"name": "beforeImages", "type": ["null", "string", {"type": "array", "items": [
            "null",
            {"type": "record", "name": "Integer", "fields": [
                {"name": "precision", "type": "int"}, {"name": "value", "type": "string"}]},
            {"type": "record", "name": "Character", "fields": [
                {"name": "charset", "type": "string"}, {"name": "value", "type": "bytes"}]},
            {"type": "record", "name": "Decimal", "fields": [
                {"name": "value", "type": "string"}, {"name": "precision", "type": "int"},
                {"name": "scale", "type": "int"}]},
            {"type": "record", "name": "Float", "fields": [
                {"name": "value", "type": "double"}, {"name": "precision", "type": "int"},
                {"name": "scale", "type": "int"}]},
            {"type": "record", "name": "Timestamp", "fields": [
                {"name": "timestamp", "type": "long"}, {"name": "millis", "type": "int"}]},
            {"type": "record", "name": "DateTime", "fields": [
                {"name": part, "type": ["null", "int"], "default": None}
                for part in ("year", "month", "day", "hour", "minute", "second", "millis")]},
            {"type": "record", "name": "TimestampWithTimeZone", "fields": [
                {"name": "value", "type": "DateTime"}, {"name": "timezone", "type": "string"}]},
            {"type": "record", "name": "BinaryGeometry", "fields": [
                {"name": "type", "type": "string"}, {"name": "value", "type": "bytes"}]},
            {"type": "record", "name": "TextGeometry", "fields": [
                {"name": "type", "type": "string"}, {"name": "value", "type": "string"}]},
            {"type": "record", "name": "BinaryObject", "fields": [
                {"name": "type", "type": "string"}, {"name": "value", "type": "bytes"}]},
            {"type": "record", "name": "TextObject", "fields": [
                {"name": "type", "type": "string"}, {"name": "value", "type": "string"}]},
            {"type": "enum", "name": "EmptyObject", "symbols": ["NULL", "NONE"]}]}], "default": None},
        {"name": "afterImages", "type": ["null", "string", {"type": "array", "items": [
            "null", *_VALUE_BRANCHES]}], "default": None},
        {"name": "bornTimestamp", "type": "long", "default": 0},
    ],
}
RECORD_SCHEMA_R1: Final[dict[str, Any]] = {**RECORD_SCHEMA, "fields": RECORD_SCHEMA["fields"][:-1]}

_SOURCE_TYPE_COUNT: Final = len(SOURCE_TYPES)
_OPERATION_COUNT: Final = len(OPERATIONS)
_OP_INSERT, _OP_UPDATE, _OP_DELETE, _OP_DDL = 0, 1, 2, 3
_OP_INIT = 16
_ROW_OPS: Final = {_OP_INSERT: INSERT, _OP_UPDATE: UPDATE, _OP_DELETE: DELETE, _OP_INIT: READ}
_MYSQL_LIKE: Final = frozenset({0, 8})  # MySQL, DRDS (PolarDB-X)
_POSTGRES_LIKE: Final = frozenset({3, 7})  # PostgreSQL, PPAS
_ORACLE: Final = 1

_DOUBLE = struct.Struct("<d")
_FLOAT_PARTS = struct.Struct("<xdBB")  # from the branch byte: value, one-byte precision and scale
_NOT_CAPTURED: Final = object()  # EmptyObject.NONE: no value was captured for the column


class _Truncated(Exception):
    """The datum ended before the schema did."""


# ---------------------------------------------------------------------------------------------------------
# Column types

# Temporal rendering kinds for DateTime values.
_DATE, _TIME, _DATETIME, _YEAR, _INFER = "date", "time", "datetime", "year", ""

# MySQL binlog type code → (type text when the value says text / nothing, type text when binary)
_MYSQL_TYPES: Final[dict[int, tuple[str, str]]] = {
    0: ("decimal", "decimal"), 1: ("tinyint", "tinyint"), 2: ("smallint", "smallint"), 3: ("int", "int"),
    4: ("float", "float"), 5: ("double", "double"), 6: (UNKNOWN_TYPE, UNKNOWN_TYPE),
    7: ("timestamp", "timestamp"), 8: ("bigint", "bigint"), 9: ("mediumint", "mediumint"), 10: ("date", "date"),
    11: ("time", "time"), 12: ("datetime", "datetime"), 13: ("year", "year"), 14: ("date", "date"),
    15: ("varchar", "varbinary"), 16: ("bit", "bit"), 17: ("timestamp", "timestamp"),
    18: ("datetime", "datetime"), 19: ("time", "time"), 245: ("json", "json"), 246: ("decimal", "decimal"),
    247: ("enum", "enum"), 248: ("set", "set"), 249: ("tinytext", "tinyblob"), 250: ("mediumtext", "mediumblob"),
    251: ("longtext", "longblob"), 252: ("text", "blob"), 253: ("varchar", "varbinary"), 254: ("char", "binary"),
    255: ("geometry", "geometry"),
}
_POSTGRES_TYPES: Final[dict[int, str]] = {
    16: "boolean", 17: "bytea", 18: "char", 20: "bigint", 21: "smallint", 23: "int", 25: "text", 114: "json",
    142: "xml", 700: "float", 701: "double", 790: "money", 829: "macaddr", 869: "inet", 650: "cidr",
    1042: "char", 1043: "varchar", 1082: "date", 1083: "time", 1114: "datetime", 1184: "timestamp",
    1186: "interval", 1266: "timetz", 1560: "varbit", 1561: "varbit[]", 1700: "decimal", 2950: "uuid",
    3802: "jsonb", 3614: "tsvector", 3615: "tsquery", 2970: "txid_snapshot", 3220: "pg_lsn",
}
_ORACLE_TYPES: Final[dict[int, str]] = {
    1: "varchar2", 2: "decimal", 8: "clob", 12: "datetime", 23: "raw", 24: "raw", 58: "xml", 69: "varchar",
    96: "char", 100: "float", 101: "double", 112: "clob", 113: "blob", 114: "varchar", 180: "datetime",
    181: "timestamp", 182: "interval year to month", 183: "interval day to second", 208: "varchar",
    231: "timestamp",
}
_TEMPORAL_KIND: Final = {T.DATE: _DATE, T.TIME: _TIME, T.DATETIME: _DATETIME, T.TIMESTAMP: _DATETIME,
                         T.YEAR: _YEAR}
# BinaryObject types holding text; in a text-typed column any type but the binary ones is text too.
_TEXT_OBJECT_TYPES: Final = frozenset({"TEXT", "JSON", "XML", "ENUM", "SET", "UUID", "ROWID", "UROWID", "CLOB"})
_BINARY_OBJECT_TYPES: Final = frozenset({"BINARY", "BLOB", "BYTEA", "RAW", "LONG_RAW", "GEOMETRY", "BFILE"})
_TEXTUAL_FAMILIES: Final = frozenset({T.TEXT, T.JSON, T.ENUM, T.SET})

# MySQL's latin1 is Windows-1252 except for the five bytes that code page leaves undefined (0x81, 0x8D, 0x8F, 0x90,
# 0x9D): MySQL stores them and reads each as the control character of the same number, where cp1252 fails.
_MYSQL_LATIN1_TABLE: Final = "".join(chr(byte) if char == "\ufffe" else char
                                     for byte, char in enumerate(encodings.cp1252.decoding_table))
_MYSQL_LATIN1_ENCODING: Final = codecs.charmap_build(_MYSQL_LATIN1_TABLE)
_MYSQL_LATIN1: Final = codecs.CodecInfo(
    name="cdclake_mysql_latin1",
    encode=lambda text, errors="strict": codecs.charmap_encode(text, errors, _MYSQL_LATIN1_ENCODING),
    decode=lambda data, errors="strict": codecs.charmap_decode(data, errors, _MYSQL_LATIN1_TABLE))
codecs.register(lambda name: _MYSQL_LATIN1 if name == _MYSQL_LATIN1.name else None)

_CHARSETS: Final = {
    "utf8": "utf-8", "utf8mb3": "utf-8", "utf8mb4": "utf-8", "latin1": _MYSQL_LATIN1.name, "ascii": "ascii",
    "gbk": "gbk", "gb2312": "gb2312", "gb18030": "gb18030", "big5": "big5", "sjis": "shift_jis", "cp932": "cp932",
    "ujis": "euc_jp", "eucjpms": "euc_jp", "euckr": "euc_kr", "latin2": "iso8859_2", "latin5": "iso8859_9",
    "latin7": "iso8859_13", "greek": "iso8859_7", "hebrew": "iso8859_8", "cp1250": "cp1250", "cp1251": "cp1251",
    "cp1256": "cp1256", "cp1257": "cp1257", "cp850": "cp850", "cp852": "cp852", "cp866": "cp866",
    "koi8r": "koi8_r", "koi8u": "koi8_u", "tis620": "tis_620", "macroman": "mac_roman", "macce": "mac_latin2",
    "utf16": "utf-16-be", "utf16le": "utf-16-le", "utf32": "utf-32-be", "ucs2": "utf-16-be", "dec8": "cp1252",
    "hp8": "cp1252", "swe7": "cp1252", "geostd8": "cp1252", "armscii8": "cp1252", "keybcs2": "cp852",
    "al32utf8": "utf-8", "utf-8": "utf-8",
}


def _codec(charset: bytes) -> str | None:
    """Python codec for a DTS charset name; None for ``binary`` and for a charset Python does not know, whose
    values are then kept as bytes (dts-avro.md §5.2). Callers cache the answer, so each is reported once."""
    name = charset.decode("ascii", "replace").strip().lower()
    if name == "binary":
        return None
    mapped = _CHARSETS.get(name)
    if mapped is not None:
        return mapped
    try:
        return codecs.lookup(name).name
    except LookupError:
        log.warning("dts-avro: unknown charset %r; its values are kept as bytes (base64)", name)
        return None


class _Field(msgspec.Struct, frozen=True):
    """One column of a ``fields`` list, as this source's type code means it."""

    name: str
    code: int
    text_type: str  # type text for a NULL or textual value
    binary_type: str  # type text when the value is binary
    temporal: str  # how a DateTime value renders
    family: str


def _field(name: str, code: int, source_type: int) -> _Field:
    if source_type in _MYSQL_LIKE:
        text_type, binary_type = _MYSQL_TYPES.get(code, (UNKNOWN_TYPE, UNKNOWN_TYPE))
    elif source_type in _POSTGRES_LIKE:
        text_type = binary_type = _POSTGRES_TYPES.get(code, UNKNOWN_TYPE)
    elif source_type == _ORACLE:
        text_type = binary_type = _ORACLE_TYPES.get(code, UNKNOWN_TYPE)
    else:
        text_type = binary_type = UNKNOWN_TYPE
    family = T.parse_type(text_type).family
    return _Field(name, code, text_type, binary_type, _TEMPORAL_KIND.get(family, _INFER), family)


class _Layout:
    """Everything about one ``fields`` list that does not depend on the values; cached by its bytes."""

    __slots__ = ("columns", "fields", "names", "nanos", "reader", "types")

    def __init__(self, fields: list[_Field], source_type: int) -> None:
        self.fields = fields
        self.reader: Any = None  # the compiled image reader, made on first use
        self.names = [f.name for f in fields]
        self.types = [f.text_type for f in fields]
        self.nanos = source_type == _ORACLE  # Oracle DateTime fractions are nanoseconds
        self.columns: dict[tuple[tuple[str, ...], tuple[str, ...]], list[Column]] = {}

    def column_list(self, types: list[str], keys: tuple[str, ...]) -> list[Column]:
        """The columns for these types and keys; events of one shape share the (read-only) list."""
        key = (tuple(types), keys)
        columns = self.columns.get(key)
        if columns is None:
            key_set = set(keys)
            columns = [Column(f.name, t, f.name in key_set) for f, t in zip(self.fields, types, strict=True)]
            if len(self.columns) < 256:
                self.columns[key] = columns
        return columns


# Tag keys as Avro writes them (length 9, zig-zag 0x12): a sharded source's logical database and table.
_L_DB_NAME: Final = b"\x12l_db_name"
_L_TB_NAME: Final = b"\x12l_tb_name"


class _Tail:
    """What a record holds between objectName and its images (processTimestamps, tags, fields), read once:
    the records of one table repeat these bytes. Key columns, names and columns are filled in on first
    use by a row (only rows need them, and working them out can fail)."""

    __slots__ = ("columns", "keys", "layout", "logical", "object_name", "pk_uk_info", "rest", "source_type", "where",
                 "whole")

    def __init__(self, rest: bytes, source_type: int, object_name: str | None, pk_uk_info: bytes | None,
                 layout: _Layout | None, logical: tuple[bytes | None, bytes | None] = (None, None)) -> None:
        self.rest = rest
        self.whole = rest  # with the objectName before it, as the last record of the table wrote it
        self.source_type = source_type
        self.object_name = object_name
        self.pk_uk_info = pk_uk_info
        self.layout = layout
        self.logical = logical  # the tags l_db_name and l_tb_name of a sharded source's physical table
        self.keys: tuple[str, ...] | None = None
        self.where: tuple[str | None, str | None] | None = None
        self.columns: list[Column] | None = None


# ---------------------------------------------------------------------------------------------------------
# Value rendering


def _fraction(value: int, nanos: bool) -> str:
    if nanos:
        if value % 1000:
            return ".%09d" % value  # noqa: UP031 — printf formatting is twice as fast here
        value //= 1000
    if not 0 <= value <= 999_999:
        raise ValueError(f"fraction {value} is outside 0..999999 microseconds")
    return ".%06d" % value  # noqa: UP031


def _datetime_text(parts: list[int | None], kind: str, nanos: bool) -> Any:
    """A DateTime's components as DATE / DATETIME / TIME text or a YEAR number, by the column's kind
    (inferred from the components present when the type code does not say)."""
    year, month, day, hour, minute, second, frac = parts
    if kind == _DATETIME and year is not None and year >= 0 and month is not None and day is not None:
        text = "%04d-%02d-%02d %02d:%02d:%02d" % (year, month, day, hour or 0, minute or 0, second or 0)  # noqa: UP031
        return text + _fraction(frac, nanos) if frac else text
    if kind == _INFER:
        if year is not None and hour is not None:
            kind = _DATETIME
        elif year is not None and month is not None:
            kind = _DATE
        elif year is not None:
            kind = _YEAR
        else:
            kind = _TIME
    if kind == _YEAR:
        if year is None:
            raise ValueError("YEAR value without a year")
        return year
    if kind == _TIME:
        h, m, s, f = hour or 0, minute or 0, second or 0, frac or 0
        # A negative TIME or interval carries the sign in every component; only some may be non-zero.
        sign = "-" if h < 0 or m < 0 or s < 0 or f < 0 or (day or 0) < 0 else ""
        text = "%02d:%02d:%02d" % (abs(h), abs(m), abs(s))  # noqa: UP031
        if f:
            text += _fraction(abs(f), nanos)
        if year is not None or day is not None:  # an interval DAY TO SECOND
            return f"{sign}{abs(day or 0)} {text}"
        return sign + text
    if year is None or month is None:
        raise ValueError(f"{kind.upper()} value without year or month")
    if day is None:  # an interval YEAR TO MONTH: '-0-2' is year 0, month -2
        return f"{'-' if year < 0 or month < 0 else ''}{abs(year)}-{abs(month):02d}"
    head = "-%04d" % -year if year < 0 else "%04d" % year  # noqa: UP031
    if kind == _DATE:
        return "%s-%02d-%02d" % (head, month, day)  # noqa: UP031
    text = "%s-%02d-%02d %02d:%02d:%02d" % (head, month, day, hour or 0, minute or 0, second or 0)  # noqa: UP031
    return text + _fraction(frac, nanos) if frac else text


_OFFSET = re.compile(r"^(?:GMT|UTC)?([+-])(\d{1,2})(?::?(\d{2}))?$", re.IGNORECASE)


def _zone(name: str) -> dt.tzinfo:
    match = _OFFSET.match(name.strip())
    try:
        if match:
            sign, hours, minutes = match.groups()
            return V.zone(f"{sign}{int(hours):02d}:{minutes or '00'}")
        return V.zone(name.strip())
    except (ValueError, KeyError) as exc:
        raise ValueError(f"unknown time zone {name!r}") from exc


def _zoned_text(parts: list[int | None], zone_name: str, nanos: bool) -> str:
    year, month, day, hour, minute, second, frac = parts
    fraction = frac or 0
    micros = fraction // 1000 if nanos else fraction
    if year is None or month is None or day is None:  # a time with zone (PostgreSQL timetz)
        return f"{hour or 0:02d}:{minute or 0:02d}:{second or 0:02d}{_fraction(fraction, nanos) if frac else ''}" \
               f"{zone_name}"
    try:
        moment = dt.datetime(year, month, day, hour or 0, minute or 0, second or 0, micros, tzinfo=_zone(zone_name))
    except (ValueError, OverflowError) as exc:
        raise ValueError(f"bad timestamp with time zone {parts} {zone_name!r}: {exc}") from None
    return V.timestamp_text(moment)


def _decimal(text: str, scale: int) -> str:
    if scale < 0:
        return text
    dot = text.find(".")
    digits = 0 if dot < 0 else len(text) - dot - 1
    if digits == scale and "E" not in text and "e" not in text:
        return text
    try:
        return V.decimal_text(Decimal(text), scale)
    except InvalidOperation:
        return text  # NaN / Infinity of PostgreSQL NUMERIC stay text


# ---------------------------------------------------------------------------------------------------------
# The datum reader: plain functions over (data, pos) with the common one-byte varints read inline, because
# per-value function calls dominate the cost of decoding in Python. Reading past the end raises IndexError
# (bytes indexing) or _Truncated (slices); both become "truncated".

# Zig-zag encoded union branch bytes of an image value.
_B_NULL, _B_INTEGER, _B_CHARACTER, _B_DECIMAL, _B_FLOAT, _B_TIMESTAMP, _B_DATETIME = 0, 2, 4, 6, 8, 10, 12
_B_TIMESTAMP_TZ, _B_BINARY_GEOMETRY, _B_TEXT_GEOMETRY, _B_BINARY_OBJECT, _B_TEXT_OBJECT = 14, 16, 18, 20, 22
_B_EMPTY_OBJECT = 24


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """The zig-zag varint ``long`` at ``pos``, and the position after it."""
    b = data[pos]
    pos += 1
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos
    n = b & 0x7F
    shift = 7
    while True:
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return (n >> 1) ^ -(n & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError(f"varint longer than 10 bytes at byte {pos}")


def _bytes(data: bytes, pos: int) -> tuple[bytes, int]:
    """The length-prefixed ``bytes``/``string`` at ``pos``, and the position after it."""
    b = data[pos]
    if b < 0x80 and not b & 1:
        n = b >> 1
        pos += 1
    else:
        n, pos = _varint(data, pos)
        if n < 0:
            raise ValueError(f"negative length {n} at byte {pos}")
    end = pos + n
    if end > len(data):
        raise _Truncated
    return data[pos:end], end


def _block_count(data: bytes, pos: int) -> tuple[int, int]:
    n, pos = _varint(data, pos)
    if n < 0:  # a negative count is followed by the block's byte size
        _, pos = _varint(data, pos)
        n = -n
    return n, pos


def _datetime_parts(data: bytes, pos: int) -> tuple[list[int | None], int]:
    """The seven ``[null, int]`` components of a DateTime."""
    parts: list[int | None] = [None] * 7
    for i in range(7):
        b = data[pos]
        if b == 0:
            pos += 1
            continue
        if b != 2:
            raise ValueError(f"DateTime component: union branch {b >> 1} of [null, int]")
        c = data[pos + 1]
        if c < 0x80:
            parts[i] = (c >> 1) ^ -(c & 1)
            pos += 2
            continue
        d = data[pos + 2]
        if d < 0x80:  # two bytes: a year
            n = (c & 0x7F) | (d << 7)
            parts[i] = (n >> 1) ^ -(n & 1)
            pos += 3
        else:
            parts[i], pos = _varint(data, pos + 1)
    return parts, pos


class _Header(msgspec.Struct):
    id: int
    source_timestamp: int
    source_position: str
    source_type: int
    operation: int
    object_name: str | None
    pk_uk_info: bytes | None


class DtsAvro(Format):
    name = "dts-avro"
    options = (
        Option("schema-revision", "r2", "Encoder: write the newer schema with bornTimestamp (r2) or the "
               "older one without it (r1); the decoder reads both", ("r2", "r1")),
        Option("shards", "logical", "Rows of a sharded source (DRDS/PolarDB-X: tags l_db_name, l_tb_name) land "
               "in their logical table, as DTS's own targets do, or in each physical shard's table",
               ("logical", "physical")),
    )

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._layouts: dict[tuple[int, bytes], _Layout] = {}
        self._recent: dict[tuple[str | None, int], tuple[bytes, _Layout]] = {}
        self._keys: dict[bytes, tuple[str, ...]] = {}
        self._codecs: dict[bytes, str | None] = {}
        self._tails: dict[tuple[int, bytes | None], _Tail] = {}
        # The last sourceTimestamp read, as (varint bytes, value); b"\x00" is the varint of 0.
        self._timestamp: tuple[bytes, int] = (b"\x00", 0)
        # The last source (type, version) bytes read, as (bytes, type); b"\x00\x00" is MySQL, version "".
        self._source: tuple[bytes, int] = (b"\x00\x00", 0)
        self._last_tail: _Tail | None = None
        self._warned_trailing = False

    def __getstate__(self) -> dict[str, Any]:
        # Layouts hold compiled readers, which do not pickle; executors rebuild them from the data.
        return {**self.__dict__, "_layouts": {}, "_recent": {}, "_tails": {}, "_last_tail": None}

    # -- decoding ------------------------------------------------------------------------------------------

    def decode_record(self, record: Record) -> list[ChangeEvent]:
        data = record.value
        if data is None:
            return []
        try:
            return self._decode(data)
        except (_Truncated, IndexError, ValueError) as exc:  # DecodeError, UnicodeDecodeError are ValueErrors
            if len(data) <= PLACEHOLDER_BYTES:
                return []  # DTS's offset-advancing placeholder
            if isinstance(exc, _Truncated | IndexError):
                raise DecodeError(f"truncated DTS Avro datum ({len(data)} bytes)") from None
            if isinstance(exc, DecodeError):
                raise
            raise DecodeError(f"malformed DTS Avro datum: {exc}") from None

    def _decode(self, data: bytes) -> list[ChangeEvent]:
        # The header, with the one-byte varints and short strings that real records carry read inline.
        size = len(data)
        pos = 1 if data[0] < 0x80 else _varint(data, 0)[1]  # version
        record_id, pos = _varint(data, pos)
        # Records come in bursts of one second: a varint is self-delimiting, so bytes equal to the last
        # timestamp's are that timestamp.
        seen, source_timestamp = self._timestamp
        if data.startswith(seen, pos):
            pos += len(seen)
        else:
            start = pos
            source_timestamp, pos = _varint(data, pos)
            self._timestamp = (data[start:pos], source_timestamp)
        c = data[pos]
        if c < 0x80 and not c & 1:
            end = pos + 1 + (c >> 1)
            raw = data[pos + 1:end]
            pos = end
        else:
            raw, pos = _bytes(data, pos)
        source_position = raw.decode("utf-8")
        c = data[pos]  # safeSourcePosition
        if c < 0x80 and not c & 1:
            pos += 1 + (c >> 1)
        else:
            _, pos = _bytes(data, pos)
        c = data[pos]  # sourceTxid
        if c < 0x80 and not c & 1:
            pos += 1 + (c >> 1)
        else:
            _, pos = _bytes(data, pos)
        # source (type and version) is the same in every record of a stream
        seen, source_type = self._source
        if data.startswith(seen, pos):
            pos += len(seen)
        else:
            start = pos
            c = data[pos]
            source_type, pos = ((c >> 1) ^ -(c & 1), pos + 1) if c < 0x80 else _varint(data, pos)
            if not 0 <= source_type < _SOURCE_TYPE_COUNT:
                raise DecodeError(f"unknown source type index {source_type}")
            c = data[pos]  # source version
            if c < 0x80 and not c & 1:
                pos += 1 + (c >> 1)
            else:
                _, pos = _bytes(data, pos)
            if pos > size:
                raise _Truncated
            self._source = (data[start:pos], source_type)
        c = data[pos]
        operation, pos = ((c >> 1) ^ -(c & 1), pos + 1) if c < 0x80 else _varint(data, pos)
        if not 0 <= operation < _OPERATION_COUNT:
            raise DecodeError(f"unknown operation index {operation} (known: 0..{_OPERATION_COUNT - 1})")
        # From objectName to the fields list, a table's records repeat their bytes: read once, matched after.
        tail = self._last_tail
        if tail is not None and tail.source_type == source_type and data.startswith(tail.whole, pos):
            pos += len(tail.whole)
        else:
            tail, pos = self._tail_at(data, pos, source_type)
        layout = tail.layout
        types = [] if layout is None else list(layout.types)
        # _image's first try inlined for both images: the layout's compiled reader (once _image made it)
        reader = None if layout is None else layout.reader
        generic = self._value
        read = None
        b = data[pos]
        if b == 4 and reader is not None:
            try:
                read = reader(data, pos + 1, types, generic)
            except Exception:  # _image's generic reader names the problem
                read = None
        if read is not None:
            before, pos = read
        elif b == 0:
            before, pos = None, pos + 1
        else:
            before, pos = self._image(data, pos, "beforeImages", layout, types)
        read = None
        b = data[pos]
        if b == 4 and reader is not None:
            try:
                read = reader(data, pos + 1, types, generic)
            except Exception:
                read = None
        if read is not None:
            after, pos = read
        elif b == 0:
            after, pos = None, pos + 1
        else:
            after, pos = self._image(data, pos, "afterImages", layout, types)
        if pos < size:
            seen = self._timestamp[0]  # bornTimestamp (revision R2), mostly the sourceTimestamp
            pos = pos + len(seen) if data.startswith(seen, pos) else _varint(data, pos)[1]
            if pos < size and not self._warned_trailing:
                self._warned_trailing = True
                log.warning("dts-avro: %d unknown trailing bytes after bornTimestamp (a newer schema revision?); "
                            "ignored", size - pos)
        if operation == _OP_DDL:
            header = _Header(record_id, source_timestamp, source_position, source_type, operation,
                             tail.object_name, tail.pk_uk_info)
            return [self._ddl(header, after)]
        op = _ROW_OPS.get(operation)
        if op is None:
            return []  # BEGIN, COMMIT, HEARTBEAT, NOOP, …: no change
        return [self._row(tail, op, operation, types, before, after, record_id, source_timestamp, source_position)]

    def _tail_at(self, data: bytes, pos: int, source_type: int) -> tuple[_Tail, int]:
        """The tail starting at objectName: the table's known one if the bytes after the name match it."""
        start = pos
        branch = data[pos]
        if branch == 2:
            c = data[pos + 1]
            if c < 0x80 and not c & 1:
                end = pos + 2 + (c >> 1)
                if end > len(data):
                    raise _Truncated
                name: bytes | None = data[pos + 2:end]
                pos = end
            else:
                name, pos = _bytes(data, pos + 1)
        elif branch == 0:
            name = None
            pos += 1
        else:
            raise DecodeError(f"objectName: union branch {_varint(data, pos)[0]} of [null, string]")
        tail = self._tails.get((source_type, name))
        if tail is not None and data.startswith(tail.rest, pos):
            pos += len(tail.rest)
        else:
            tail, pos = self._tail(data, pos, name, source_type)
        tail.whole = data[start:pos]
        self._last_tail = tail
        return tail, pos

    def _tail(self, data: bytes, pos: int, name: bytes | None, source_type: int) -> tuple[_Tail, int]:
        """Read processTimestamps, tags and fields (after objectName ``name``), and remember them."""
        start = pos
        branch = data[pos]  # processTimestamps
        pos += 1
        if branch == 2:
            n, pos = _block_count(data, pos)
            while n:
                for _ in range(n):
                    _, pos = _varint(data, pos)
                n, pos = _block_count(data, pos)
        elif branch != 0:
            raise DecodeError(f"processTimestamps: union branch {_varint(data, pos - 1)[0]} of [null, array]")
        pk_uk_info = logical_db = logical_table = None
        c = data[pos]  # tags: pk_uk_info, and a sharded source's logical names, matter here
        n, pos = ((c >> 1), pos + 1) if c < 0x80 and not c & 1 else _block_count(data, pos)
        while n:
            for _ in range(n):
                is_key = data.startswith(b"\x14pk_uk_info", pos)
                logical = data[pos:pos + 10] if data.startswith(b"\x12l_", pos) else None
                c = data[pos]
                if c < 0x80 and not c & 1:
                    pos += 1 + (c >> 1)
                else:
                    _, pos = _bytes(data, pos)
                if is_key:
                    pk_uk_info, pos = _bytes(data, pos)
                    continue
                if logical == _L_DB_NAME:
                    logical_db, pos = _bytes(data, pos)
                    continue
                if logical == _L_TB_NAME:
                    logical_table, pos = _bytes(data, pos)
                    continue
                c = data[pos]
                if c < 0x80 and not c & 1:
                    pos += 1 + (c >> 1)
                else:
                    _, pos = _bytes(data, pos)
            c = data[pos]
            n, pos = ((c >> 1), pos + 1) if c < 0x80 and not c & 1 else _block_count(data, pos)
        if pos > len(data):
            raise _Truncated
        object_name = None if name is None else name.decode("utf-8")
        layout, pos = self._fields(data, pos, object_name, source_type)
        tail = _Tail(data[start:pos], source_type, object_name, pk_uk_info, layout, (logical_db, logical_table))
        if len(self._tails) >= 4096:  # names come from the data: keep the cache bounded
            self._tails.clear()
        self._tails[(source_type, name)] = tail
        return tail, pos

    def _fields(self, data: bytes, pos: int, object_name: str | None,
                source_type: int) -> tuple[_Layout | None, int]:
        # A table's records repeat the same fields bytes: when they match the table's last layout (Avro
        # encodings are prefix-free), the list need not be read again.
        recent = self._recent.get((object_name, source_type))
        if recent is not None and data.startswith(recent[0], pos):
            return recent[1], pos + len(recent[0])
        start = pos
        branch, pos = _varint(data, pos)
        if branch == 0:
            return None, pos
        if branch == 1:
            raise DecodeError("fields given as a string are not supported (expected an array of Field)")
        if branch != 2:
            raise DecodeError(f"fields: union branch {branch} of [null, string, array]")
        fields: list[tuple[str, int]] = []
        n, pos = _block_count(data, pos)
        while n:
            for _ in range(n):
                raw, pos = _bytes(data, pos)
                code, pos = _varint(data, pos)
                fields.append((raw.decode("utf-8"), code))
            n, pos = _block_count(data, pos)
        raw = data[start:pos]
        layout = self._layouts.get((source_type, raw))
        if layout is None:
            layout = _Layout([_field(name, code, source_type) for name, code in fields], source_type)
            if len(self._layouts) >= 4096:  # shapes come from the data: keep the caches bounded
                self._layouts.clear()
                self._recent.clear()
            self._layouts[(source_type, raw)] = layout
        self._recent[(object_name, source_type)] = (raw, layout)
        return layout, pos

    def _image(self, data: bytes, pos: int, what: str, layout: _Layout | None,
               types: list[str]) -> tuple[dict[str, Any] | str | None, int]:
        """One image as canonical values, read straight from the datum; refines ``types`` where a value says
        more than its type code."""
        branch = data[pos]
        pos += 1
        if branch == 0:
            return None, pos
        if branch == 2:
            raw, pos = _bytes(data, pos)
            return raw.decode("utf-8"), pos
        if branch != 4:
            raise DecodeError(f"{what}: union branch {_varint(data, pos - 1)[0]} of [null, string, array]")
        if layout is None:
            raise DecodeError(f"{what} holds values but the record has no fields")
        reader = layout.reader
        if reader is None:
            reader = layout.reader = _compile_reader(layout, self._codecs)
        try:
            read = reader(data, pos, types, self._value)
        except Exception:  # the generic reader below names the problem exactly
            read = None
        if read is not None:
            return read
        fields = layout.fields
        count = len(fields)
        row: dict[str, Any] = {}
        seen = 0
        n, pos = _block_count(data, pos)
        while n:
            if seen + n > count:
                raise DecodeError(f"{what} has more values than the {count} fields")
            for index in range(seen, seen + n):
                field = fields[index]
                try:
                    value, pos = self._value(data, pos, index, types, layout)
                except (ValueError, UnicodeDecodeError, OverflowError) as exc:  # Overflow: beyond the calendar
                    if isinstance(exc, DecodeError):
                        raise DecodeError(f"{what}, column {field.name!r}: {exc}") from None
                    raise DecodeError(f"{what}, column {field.name!r} ({field.text_type}): {exc}") from None
                if value is not _NOT_CAPTURED:
                    row[field.name] = value
            seen += n
            n, pos = _block_count(data, pos)
        if seen != count:
            raise DecodeError(f"{what} has {seen} values for {count} fields")
        return row, pos

    def _value(self, data: bytes, pos: int, index: int, types: list[str], layout: _Layout) -> tuple[Any, int]:
        """The value union at ``pos`` (its branch byte) as a canonical value, or ``_NOT_CAPTURED``."""
        field = layout.fields[index]
        b = data[pos]
        pos += 1
        size = len(data)
        codecs_ = self._codecs
        if b == _B_INTEGER:
            if data[pos] < 0x80:  # precision
                pos += 1
            else:
                _, pos = _varint(data, pos)
            c = data[pos]
            if c < 0x80 and not c & 1:
                end = pos + 1 + (c >> 1)
                pos += 1
            else:
                length, pos = _varint(data, pos)
                end = pos + length
            if end > size:
                raise _Truncated
            value: Any = int(data[pos:end])
            pos = end
            if field.family == T.UNKNOWN:
                types[index] = "bigint"
        elif b == _B_CHARACTER:
            charset, pos = _bytes(data, pos)
            raw, pos = _bytes(data, pos)
            codec = codecs_.get(charset, False)
            if codec is False:
                codec = codecs_[charset] = _codec(charset)
            if codec is None:
                value = base64.b64encode(raw).decode("ascii")
                types[index] = field.binary_type if field.family != T.UNKNOWN else "varbinary"
            else:
                value = raw.decode(codec)
                if field.family == T.UNKNOWN:
                    types[index] = "varchar"
        elif b == _B_NULL:
            value = None
        elif b == _B_DECIMAL:
            raw, pos = _bytes(data, pos)
            precision, pos = _varint(data, pos)
            scale, pos = _varint(data, pos)
            value = _decimal(raw.decode("ascii"), scale)
            if field.family in (T.DECIMAL, T.UNKNOWN):
                types[index] = f"decimal({precision},{scale})" if precision > 0 <= scale else "decimal"
        elif b == _B_DATETIME:
            parts, pos = _datetime_parts(data, pos)
            value = _datetime_text(parts, field.temporal, layout.nanos)
            if field.text_type == UNKNOWN_TYPE:  # a code this source maps (an interval) keeps its type
                types[index] = _inferred_temporal(parts)
        elif b == _B_FLOAT:
            if pos + 8 > size:
                raise _Truncated
            value = _DOUBLE.unpack_from(data, pos)[0]
            _, pos = _varint(data, pos + 8)
            _, pos = _varint(data, pos)
            if field.family == T.UNKNOWN:
                types[index] = "double"
        elif b == _B_TIMESTAMP:
            seconds, pos = _varint(data, pos)
            micros, pos = _varint(data, pos)
            if not 0 <= micros <= 999_999:
                raise ValueError(f"Timestamp fraction {micros} is outside 0..999999 microseconds")
            value = V.timestamp_text_from_micros(seconds * 1_000_000 + micros)
            if field.family == T.UNKNOWN:
                types[index] = "timestamp"
        elif b == _B_TIMESTAMP_TZ:
            parts, pos = _datetime_parts(data, pos)
            raw, pos = _bytes(data, pos)
            value = _zoned_text(parts, raw.decode("utf-8"), layout.nanos)
            if field.family == T.UNKNOWN:
                types[index] = "timestamp" if parts[0] is not None else "timetz"
        elif b == _B_BINARY_GEOMETRY:
            _, pos = _bytes(data, pos)
            raw, pos = _bytes(data, pos)
            value = base64.b64encode(V.geometry_wkb(raw)).decode("ascii")
            if field.family != T.BINARY:
                types[index] = "geometry"
        elif b == _B_TEXT_GEOMETRY:
            _, pos = _bytes(data, pos)
            raw, pos = _bytes(data, pos)
            value = raw.decode("utf-8")
            if field.family in (T.BINARY, T.UNKNOWN):
                types[index] = "text"
        elif b == _B_BINARY_OBJECT:
            raw, pos = _bytes(data, pos)
            object_type = raw.decode("utf-8").upper()
            raw, pos = _bytes(data, pos)
            if object_type in _TEXT_OBJECT_TYPES or (field.family in _TEXTUAL_FAMILIES
                                                     and object_type not in _BINARY_OBJECT_TYPES):
                value = raw.decode("utf-8")
                if field.family == T.UNKNOWN:
                    types[index] = "text"
            else:
                value = base64.b64encode(raw).decode("ascii")
                if field.family != T.BINARY:
                    types[index] = field.binary_type if field.binary_type != field.text_type else "blob"
        elif b == _B_TEXT_OBJECT:
            _, pos = _bytes(data, pos)
            raw, pos = _bytes(data, pos)
            value = raw.decode("utf-8")
            if field.family == T.BOOLEAN:
                value = V.from_text(value, _BOOLEAN)
            elif field.family == T.UNKNOWN:
                types[index] = "text"
        elif b == _B_EMPTY_OBJECT:
            symbol, pos = _varint(data, pos)
            if symbol == 1:
                return _NOT_CAPTURED, pos  # NONE: not captured, so not part of this image
            if symbol != 0:
                raise DecodeError(f"EmptyObject symbol index {symbol} (known: 0 NULL, 1 NONE)")
            value = None
        else:
            branch = _varint(data, pos - 1)[0] if b < 0x80 else b
            raise DecodeError(f"unknown value union branch {branch} (known: 0..12)")
        return value, pos

    def _row(self, tail: _Tail, op: str, operation: int, types: list[str], before: dict[str, Any] | str | None,
             after: dict[str, Any] | str | None, record_id: int, source_timestamp: int,
             source_position: str) -> ChangeEvent:
        layout = tail.layout
        if layout is None:
            raise DecodeError(f"{OPERATIONS[operation]} record without fields")
        if type(before) is str or type(after) is str:
            raise DecodeError(f"{OPERATIONS[operation]} record with an image given as a string")
        if op == DELETE:
            if before is None:
                raise DecodeError("DELETE record without beforeImages")
            after = None
        elif op == UPDATE:
            if before is None or after is None:
                raise DecodeError("UPDATE record without both beforeImages and afterImages")
            count = len(layout.fields)
            if len(before) != count or len(after) != count:
                # A column not captured in one image (EmptyObject.NONE) kept its value.
                after = {name: after[name] if name in after else before[name]
                         for name in layout.names if name in after or name in before}
                before = complete_before(after, before)
        else:
            if after is None:
                raise DecodeError(f"{OPERATIONS[operation]} record without afterImages")
            before = None
        keys = tail.keys
        if keys is None:
            keys = tail.keys = self._key_names(tail.pk_uk_info, layout.names)
        image = after if after is not None else before
        if len(keys) == 1 and keys[0] in image:
            key: dict[str, Any] | None = {keys[0]: image[keys[0]]}
        else:
            key = {name: image[name] for name in keys if name in image} if keys else None
        where = tail.where
        if where is None:
            where = tail.where = self._where(tail)
        # Most records leave the fields' types as they are; their column list is the tail's.
        if types == layout.types:
            columns = tail.columns
            if columns is None:
                columns = tail.columns = layout.column_list(types, keys)
        else:
            columns = layout.column_list(types, keys)
        commit_ms = source_timestamp * 1000
        return ChangeEvent(kind=ROW, op=op, database=where[0], table=where[1], key=key or None, before=before,
                           after=after, columns=columns, commit_ts=commit_ms,
                           position=_position(source_position, record_id), ts_ms=commit_ms)

    def _where(self, tail: _Tail) -> tuple[str | None, str | None]:
        """The database and table a row lands in: a sharded source's logical table unless ``shards`` says
        physical. DDL keeps its physical table: truncating one shard must not empty the logical table."""
        database, table = _object_name(tail.object_name)
        logical_db, logical_table = tail.logical
        if self.settings["shards"] == "logical" and logical_table:
            return (logical_db.decode("utf-8") if logical_db else database), logical_table.decode("utf-8")
        return database, table

    def _ddl(self, header: _Header, after: dict[str, Any] | str | None) -> ChangeEvent:
        if not isinstance(after, str):
            raise DecodeError("DDL record without the statement in afterImages")
        database, table = _object_name(header.object_name)
        target = ddl_text.table_of(after)  # a DDL record names the database only: the table is in the statement
        if target is not None:
            database, table = target[0] or database, target[1]
        kind = TRUNCATE if ddl_text.parse(after) == [ddl_text.Truncate()] else DDL
        commit_ms = header.source_timestamp * 1000
        return ChangeEvent(kind=kind, database=database, table=table, ddl=after, commit_ts=commit_ms,
                           position=_position(header.source_position, header.id), ts_ms=commit_ms)

    def _key_names(self, pk_uk_info: bytes | None, names: list[str]) -> tuple[str, ...]:
        if not pk_uk_info:
            return ()
        keys = self._keys.get(pk_uk_info)
        if keys is None:
            keys = _parse_keys(pk_uk_info, names)
            if len(self._keys) >= 4096:
                self._keys.clear()
            self._keys[pk_uk_info] = keys
        return keys

    # -- encoding ------------------------------------------------------------------------------------------

    def encode(self, events: Iterable[ChangeEvent]) -> list[Record]:
        from fastavro import parse_schema, schemaless_writer

        schema = parse_schema(RECORD_SCHEMA if self.settings["schema-revision"] == "r2" else RECORD_SCHEMA_R1)
        records: list[Record] = []
        for index, event in enumerate(events):
            datum = _datum(event, index)
            if self.settings["schema-revision"] == "r1":
                datum.pop("bornTimestamp")
            out = io.BytesIO()
            schemaless_writer(out, schema, datum)
            records.append(Record(value=out.getvalue(), offset=index, timestamp=event.ts_ms))
        return records


# ---------------------------------------------------------------------------------------------------------
# Compiled image readers. A table's records repeat one column layout, and each column nearly always carries
# the union branch its type code implies (or null), so for every layout straight-line Python is generated
# that reads each column's expected branch inline and hands anything else to the generic ``_value``. It
# returns None (the generic loop then reads the image) unless the image is one block of exactly the layout's
# columns; any error also falls back to the generic loop, which names the column and the problem.

_DECIMAL_TYPES: dict[tuple[int, int], str] = {}
_DATES: dict[int, str] = {}


def _decimal_type(precision: int, scale: int) -> str:
    text = _DECIMAL_TYPES.get((precision, scale))
    if text is None:
        text = f"decimal({precision},{scale})" if precision > 0 <= scale else "decimal"
        if len(_DECIMAL_TYPES) < 4096:
            _DECIMAL_TYPES[(precision, scale)] = text
    return text


def _utc_text(seconds: int, micros: int) -> str:
    """``values.timestamp_text_from_micros`` for a Timestamp's seconds and micros, with the date cached."""
    if not 0 <= micros <= 999_999:
        raise ValueError(f"Timestamp fraction {micros} is outside 0..999999 microseconds")
    days, rest = divmod(seconds, 86_400)
    date = _DATES.get(days)
    if date is None:
        date = (V.EPOCH_DATE + dt.timedelta(days=days)).isoformat()
        if len(_DATES) >= 65_536:
            _DATES.clear()
        _DATES[days] = date
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if micros:
        return "%sT%02d:%02d:%02d.%06dZ" % (date, hours, minutes, secs, micros)  # noqa: UP031 — fastest form
    return "%sT%02d:%02d:%02dZ" % (date, hours, minutes, secs)  # noqa: UP031


def _zigzag(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# Inline reads of the common one-byte cases; ``{v}`` names the target variable. The readers leave out bounds
# checks: a slice past the end is short but a later index past the end raises, and every reader ends by
# indexing the byte after the image, so a truncated image always fails (and the generic reader says so).
_READ_LONG = """\
c = data[pos]
if c < 0x80:
    {v} = (c >> 1) ^ -(c & 1)
    pos += 1
else:
    {v}, pos = _varint(data, pos)"""
_SKIP_LONG = """\
if data[pos] < 0x80:
    pos += 1
else:
    _, pos = _varint(data, pos)"""
_READ_BYTES = """\
c = data[pos]
if c < 0x80 and not c & 1:
    end = pos + 1 + (c >> 1)
    {v} = data[pos + 1:end]
    pos = end
else:
    {v}, pos = _bytes(data, pos)"""


def _byte_class(values: range) -> bytes:
    return b"[" + re.escape(bytes(values)) + b"]"


# A DateTime (branch 12) whose year takes two varint bytes (years 64..8191) and whose other components are
# present, one byte each and not negative: month to second (DATETIME), month and day only (DATE). Matched
# in C, so that reading the value needs no loop over the components.
_YEAR_2: Final = b"\x0c\x02" + _byte_class(range(0x80, 0x100, 2)) + b"[\x00-\x7f]"
_PART_1: Final = b"\x02" + _byte_class(range(0, 0x80, 2))
_plain_datetime: Final = re.compile(_YEAR_2 + _PART_1 * 5 + b"\x00", re.DOTALL).match
_plain_date: Final = re.compile(_YEAR_2 + _PART_1 * 2 + b"\x00\x00\x00\x00", re.DOTALL).match
# The bytes of those components, from the branch byte: the year's two varint bytes as one little-endian
# number, then each one-byte component. One unpack instead of an index and some arithmetic per component.
_datetime_bytes: Final = struct.Struct("<2xH" + "xB" * 5).unpack_from
_date_bytes: Final = struct.Struct("<2xHxBxB").unpack_from
# Two-digit text of a component by its (even, one-byte) zig-zag varint: %-formatting costs several times more.
_TWO_DIGITS: Final = tuple(f"{b >> 1:02d}" for b in range(0x80))


class _YearText(dict[int, str]):
    """Four-digit year text by the year's two varint bytes (as ``_datetime_bytes`` gives them); at most the
    8192 two-byte years, filled as they occur."""

    def __missing__(self, raw: int) -> str:
        n = (raw & 0x7F) | (raw >> 8) << 7
        text = self[raw] = "%04d" % ((n >> 1) ^ -(n & 1))  # noqa: UP031
        return text


_YEARS: Final = _YearText()


def _column_code(index: int, field: _Field) -> list[str]:
    """The lines that read column ``index`` (from its branch byte at ``pos``) into ``v<index>``."""
    v = f"v{index}"
    family = field.family
    # (condition on the branch byte ``b`` and what follows it, body reading from the branch byte)
    if family in (T.INTEGER, T.BIT):
        # precision and digit count in one byte each: nearly every integer
        test = "b == 2 and data[pos + 1] < 0x80 and (c := data[pos + 2]) < 0x80 and not c & 1"
        body = ["pos += 3", "end = pos + (c >> 1)", f"{v} = int(data[pos:end])", "pos = end"]
    elif family in (T.FLOAT, T.DOUBLE):
        # value, precision and scale in one unpack; precision and scale of one byte each
        test = "b == 8"
        body = [f"{v}, precision, scale = _float_parts(data, pos)", "if precision < 0x80 and scale < 0x80:",
                "    pos += 11", "else:", f"    {v}, pos = generic(data, pos, {index}, types, layout)"]
    elif family in (T.TEXT, T.BINARY) and field.code in (249, 250, 251, 252):
        test = "b == 20"
        body = ["pos += 1", _READ_BYTES.format(v="kind"), _READ_BYTES.format(v="raw"),
                "if kind == b'TEXT':", f"    {v} = raw.decode('utf-8')",
                "elif kind == b'BLOB':", f"    {v} = _b64(raw).decode('ascii')",
                f"    types[{index}] = {field.binary_type!r}",
                "else:", "    return None"]
    elif family in (T.TEXT, T.BINARY) and field.code in (15, 253, 254):
        test = "b == 4"
        body = ["pos += 1", _READ_BYTES.format(v="charset"), _READ_BYTES.format(v="raw"),
                "codec = codecs_get(charset)",
                "if codec:", f"    {v} = raw.decode(codec)",
                "elif charset == b'binary':", f"    {v} = _b64(raw).decode('ascii')",
                f"    types[{index}] = {field.binary_type!r}",
                "else:", "    return None"]
    elif family == T.DECIMAL:
        test = "b == 6"
        body = ["pos += 1", _READ_BYTES.format(v="raw"), _READ_LONG.format(v="precision"),
                _READ_LONG.format(v="scale"), f"{v} = _decimal(raw.decode('ascii'), scale)",
                f"types[{index}] = _decimal_type(precision, scale)"]
    elif family in (T.DATETIME, T.DATE) and field.temporal in (_DATETIME, _DATE):
        # The common DateTime, whole components matched at once (see _PLAIN_DATETIME); anything else takes
        # the general path below, which gives the same text.
        if field.temporal == _DATETIME:
            test = "b == 12 and _plain_datetime(data, pos) is not None"
            body = ["y, mo, d, h, mi, s = _datetime_bytes(data, pos)",
                    f"{v} = f'{{_years[y]}}-{{_two[mo]}}-{{_two[d]}} {{_two[h]}}:{{_two[mi]}}:{{_two[s]}}'",
                    "pos += 15"]
        else:
            test = "b == 12 and _plain_date(data, pos) is not None"
            body = ["y, mo, d = _date_bytes(data, pos)", f"{v} = f'{{_years[y]}}-{{_two[mo]}}-{{_two[d]}}'",
                    "pos += 12"]
        lines = ["b = data[pos]", f"if {test}:", *("    " + line for line in body), "elif b == 12:",
                 "    parts, pos = _datetime_parts(data, pos + 1)",
                 f"    {v} = _datetime_text(parts, {field.temporal!r}, nanos)"]
        return [*lines, "elif b == 0:", f"    {v} = None", "    pos += 1", "else:",
                f"    {v}, pos = generic(data, pos, {index}, types, layout)",
                f"    if {v} is _NOT_CAPTURED:", "        missing = True"]
    elif family in (T.DATE, T.DATETIME, T.TIME, T.YEAR):
        test = "b == 12"
        body = ["parts, pos = _datetime_parts(data, pos + 1)",
                f"{v} = _datetime_text(parts, {field.temporal!r}, nanos)"]
    elif family == T.TIMESTAMP and field.code in (7, 17):
        test = "b == 10"
        body = ["seconds, pos = _varint(data, pos + 1)", _READ_LONG.format(v="micros"),
                f"{v} = _utc_text(seconds, micros)"]
    elif family in (T.JSON, T.ENUM, T.SET):
        test = "b == 22"
        body = ["pos += 1", _READ_BYTES.format(v="raw"), _READ_BYTES.format(v="raw"), f"{v} = raw.decode('utf-8')"]
    else:
        test, body = "", []
    lines = ["b = data[pos]"]
    if test:
        lines += [f"if {test}:", *("    " + line for part in body for line in part.split("\n")), "elif b == 0:"]
    else:
        lines.append("if b == 0:")
    return [*lines, f"    {v} = None", "    pos += 1", "else:",
            f"    {v}, pos = generic(data, pos, {index}, types, layout)",
            f"    if {v} is _NOT_CAPTURED:", "        missing = True"]


def _compile_reader(layout: _Layout, codecs_: dict[bytes, str | None]) -> Any:
    """A reader of one image array of ``layout``: ``(data, pos, types, generic) -> (row, pos) | None``.

    Each column's value goes to a local variable and the row is built at the end in one dict display; a
    column not captured (EmptyObject.NONE, only ever from ``generic``) is then dropped from it."""
    count = len(layout.fields)
    lines = ["def read(data, pos, types, generic):",
             f"    if not data.startswith({_zigzag(count)!r}, pos):", "        return None",
             f"    pos += {len(_zigzag(count))}", "    missing = False"]
    for index, field in enumerate(layout.fields):
        lines += ["    " + line for line in _column_code(index, field)]
    row = "{" + ", ".join(f"{field.name!r}: v{index}" for index, field in enumerate(layout.fields)) + "}"
    lines += ["    if data[pos] != 0:", "        return None", f"    row = {row}", "    if missing:",
              "        row = {name: value for name, value in row.items() if value is not _NOT_CAPTURED}",
              "    return row, pos + 1"]
    namespace: dict[str, Any] = {
        "_varint": _varint, "_bytes": _bytes, "_b64": base64.b64encode,
        "_decimal": _decimal, "_decimal_type": _decimal_type, "_float_parts": _FLOAT_PARTS.unpack_from,
        "_datetime_parts": _datetime_parts, "_datetime_text": _datetime_text, "_utc_text": _utc_text,
        "_plain_datetime": _plain_datetime, "_plain_date": _plain_date, "_two": _TWO_DIGITS,
        "_datetime_bytes": _datetime_bytes, "_date_bytes": _date_bytes, "_years": _YEARS,
        "_NOT_CAPTURED": _NOT_CAPTURED, "codecs_get": codecs_.get, "nanos": layout.nanos, "layout": layout,
    }
    exec(compile("\n".join(lines), "<dts-avro image reader>", "exec"), namespace)
    return namespace["read"]


_BOOLEAN: Final = T.parse_type("boolean")


def _inferred_temporal(parts: list[int | None]) -> str:
    year, month, _, hour = parts[0], parts[1], parts[2], parts[3]
    if year is not None and hour is not None:
        return "datetime"
    if year is not None and month is not None:
        return "date"
    if year is not None:
        return "year"
    return "time"


def _parse_keys(pk_uk_info: bytes, names: list[str]) -> tuple[str, ...]:
    try:
        indexes = msgspec.json.decode(pk_uk_info)
    except msgspec.DecodeError:
        raise DecodeError(f"tag pk_uk_info is not JSON: {pk_uk_info[:80]!r}") from None
    if not isinstance(indexes, dict):
        raise DecodeError(f"tag pk_uk_info is not a JSON object: {pk_uk_info[:80]!r}")
    present = set(names)
    candidates = [indexes["PRIMARY"]] if "PRIMARY" in indexes else []
    candidates += [cols for name, cols in indexes.items() if name != "PRIMARY"]
    for cols in candidates:
        if isinstance(cols, list) and cols and all(isinstance(c, str) and c in present for c in cols):
            return tuple(cols)
    return ()


def _unescape(component: str) -> str:
    return component.replace("\\u002E", ".")


@lru_cache(maxsize=4096)
def _object_name(name: str | None) -> tuple[str | None, str | None]:
    if not name:
        return None, None
    parts = [_unescape(p) for p in name.split(".")]
    if len(parts) == 1:
        return parts[0], None
    if len(parts) == 2:
        return parts[0], parts[1]
    if len(parts) == 3:
        return parts[0], f"{parts[1]}.{parts[2]}"
    raise DecodeError(f"objectName {name!r} has more than three components")


def _escape(component: str) -> str:
    return component.replace(".", "\\u002E")


def object_name(database: str | None, table: str | None) -> str | None:
    """The ``objectName`` DTS writes for a database and table (``schema.table`` names stay dotted)."""
    if database is None:
        return None
    if table is None:
        return _escape(database)
    return f"{_escape(database)}.{_escape(table)}"


def _position(source_position: str, record_id: int) -> str:
    offset, at, file = source_position.partition("@")
    if at and offset.isdigit() and file.isdigit() and source_position.isascii() and len(source_position) < 40:
        # MySQL <offset>@<binlog file number>: pad_position(file, offset, id), written out because it is hot
        # (padding the digits equals padding their number: leading zeros do not change the order; and
        # str().zfill() pads an int as format "020d" does, sign first, at a fraction of the cost)
        return f"{file.zfill(20)}/{offset.zfill(20)}/{str(record_id).zfill(20)}"
    if source_position.isdigit():
        return pad_position(int(source_position), record_id)
    return pad_position(source_position, record_id)


# ---------------------------------------------------------------------------------------------------------
# Encoding: canonical event → DTS datum (fastavro's dict form)

_MYSQL_CODES: Final = {
    "tinyint": 1, "smallint": 2, "mediumint": 9, "int": 3, "integer": 3, "bigint": 8, "float": 4, "double": 5,
    "decimal": 246, "numeric": 246, "bit": 16, "date": 10, "time": 11, "datetime": 12, "timestamp": 7, "year": 13,
    "char": 254, "binary": 254, "varchar": 253, "varbinary": 253, "tinytext": 249, "tinyblob": 249,
    "mediumtext": 250, "mediumblob": 250, "longtext": 251, "longblob": 251, "text": 252, "blob": 252,
    "json": 245, "enum": 247, "set": 248, "geometry": 255, "boolean": 1, "bool": 1,
}


def _n(name: str) -> str:
    return f"{NAMESPACE}.{name}"


def _split_position(position: str | None) -> tuple[str, int] | None:
    """(sourcePosition, id) back from a position this decoder made, else None."""
    if not position:
        return None
    parts = position.split("/")
    if len(parts) == 3 and all(p.isdigit() for p in parts):
        return f"{int(parts[1])}@{int(parts[0])}", int(parts[2])
    if len(parts) == 2 and all(p.isdigit() for p in parts):
        return str(int(parts[0])), int(parts[1])
    return None


def _datetime_record(year: int | None = None, month: int | None = None, day: int | None = None,
                     hour: int | None = None, minute: int | None = None, second: int | None = None,
                     millis: int | None = None) -> dict[str, int | None]:
    return {"year": year, "month": month, "day": day, "hour": hour, "minute": minute, "second": second,
            "millis": millis}


def _wire_value(value: Any, t: T.SqlType) -> Any:
    """A canonical value as the union item DTS writes for a MySQL column of type ``t``."""
    if value is None:
        return None
    family = t.family
    if family in (T.INTEGER, T.BIT, T.BOOLEAN):
        return (_n("Integer"), {"precision": t.length or 0, "value": str(int(value))})
    if family == T.DECIMAL:
        scale = t.scale if t.scale is not None else max(0, -Decimal(value).as_tuple().exponent)  # type: ignore[operator]
        return (_n("Decimal"), {"value": str(value), "precision": t.length or 0, "scale": scale})
    if family in (T.FLOAT, T.DOUBLE):
        return (_n("Float"), {"value": float(value), "precision": t.length or 0, "scale": t.scale or 0})
    if family == T.TIMESTAMP:
        micros = V.micros_from_datetime_text(value)
        seconds, fraction = divmod(micros, 1_000_000)
        return (_n("Timestamp"), {"timestamp": seconds, "millis": fraction})
    if family == T.DATE:
        year, month, day = (int(p) for p in value.split("-"))
        return (_n("DateTime"), _datetime_record(year, month, day))
    if family == T.DATETIME:
        moment = V.parse_datetime_text(value)
        return (_n("DateTime"), _datetime_record(moment.year, moment.month, moment.day, moment.hour, moment.minute,
                                                 moment.second, moment.microsecond or None))
    if family == T.TIME:
        micros = V.micros_from_time_text(value)
        sign = -1 if micros < 0 else 1
        seconds, fraction = divmod(abs(micros), 1_000_000)
        minutes, second = divmod(seconds, 60)
        hour, minute = divmod(minutes, 60)
        return (_n("DateTime"), _datetime_record(hour=sign * hour, minute=sign * minute, second=sign * second,
                                                 millis=sign * fraction or None))
    if family == T.YEAR:
        return (_n("DateTime"), _datetime_record(year=int(value)))
    if family == T.JSON:
        return (_n("TextObject"), {"type": "JSON", "value": value})
    if family == T.ENUM:
        return (_n("TextObject"), {"type": "ENUM", "value": V.enum_value(value, t) if isinstance(value, int)
                                   else value})
    if family == T.SET:
        return (_n("TextObject"), {"type": "SET", "value": V.set_value(value, t) if isinstance(value, int)
                                   else value})
    if family == T.BINARY:
        raw = V.unb64(value)
        if t.name in ("binary", "varbinary"):
            return (_n("Character"), {"charset": "binary", "value": raw})
        if t.name == "geometry" or t.name in ("point", "linestring", "polygon", "multipoint", "multilinestring",
                                               "multipolygon", "geometrycollection", "geomcollection"):
            return (_n("BinaryGeometry"), {"type": t.name.upper(), "value": raw})
        return (_n("BinaryObject"), {"type": "BLOB", "value": raw})
    if t.name in ("tinytext", "mediumtext", "longtext", "text"):
        return (_n("BinaryObject"), {"type": "TEXT", "value": str(value).encode("utf-8")})
    return (_n("Character"), {"charset": "utf8mb4", "value": str(value).encode("utf-8")})


def _datum(event: ChangeEvent, index: int) -> dict[str, Any]:
    split = _split_position(event.position)
    source_position, record_id = split if split is not None else (f"{index + 4}@1", index + 1)
    commit_ms = event.commit_ts if event.commit_ts is not None else (event.ts_ms or 0)
    seconds = commit_ms // 1000
    datum: dict[str, Any] = {
        "version": 0, "id": record_id, "sourceTimestamp": seconds, "sourcePosition": source_position,
        "safeSourcePosition": source_position, "sourceTxid": "0",
        "source": {"sourceType": "MySQL", "version": "8.0.28"}, "operation": "NOOP",
        "objectName": object_name(event.database, event.table), "processTimestamps": None, "tags": {},
        "fields": None, "beforeImages": None, "afterImages": None, "bornTimestamp": seconds,
    }
    if event.kind in (DDL, TRUNCATE):
        datum["operation"] = "DDL"
        datum["objectName"] = object_name(event.database, None)
        datum["afterImages"] = event.ddl or f"TRUNCATE TABLE {ddl_text.qualified(event.database, event.table)}"
        return datum
    if event.kind != ROW:
        raise ValueError(f"dts-avro: cannot encode an event of kind {event.kind!r}")
    columns = event.columns or [Column(name) for name in (event.after or event.before or {})]
    types = [T.parse_type(c.type) for c in columns]
    keys = [c.name for c in columns if c.key] or list(event.key or ())
    if keys:
        datum["tags"]["pk_uk_info"] = msgspec.json.encode({"PRIMARY": keys}).decode()
    datum["fields"] = [{"name": c.name, "dataTypeNumber": _MYSQL_CODES.get(t.name, 253)}
                       for c, t in zip(columns, types, strict=True)]

    def image(row: dict[str, Any]) -> list[Any]:
        return [_wire_value(row[c.name], t) if c.name in row else "NONE"
                for c, t in zip(columns, types, strict=True)]

    operation = {INSERT: "INSERT", UPDATE: "UPDATE", DELETE: "DELETE", READ: "INIT"}.get(event.op or "")
    if operation is None:
        raise ValueError(f"dts-avro: cannot encode a row event with op {event.op!r}")
    datum["operation"] = operation
    if event.op in (UPDATE, DELETE):
        datum["beforeImages"] = image(event.before or event.key or {})
    if event.op != DELETE:
        datum["afterImages"] = image(event.after or {})
    return datum


FORMAT = DtsAvro

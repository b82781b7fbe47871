"""The TiCDC Open Protocol's vocabulary, for its decoder and encoder: event types, column flags, DDL action
codes, the column as the message writes it, Go-quoted binary strings, and what each type code means (type
text, value converter, the check of ``strict-values``) and how each column type is written back."""

from __future__ import annotations

import binascii
import json
import math
import re
import struct
import unicodedata
from collections.abc import Callable
from typing import Any, Final

import msgspec

from cdclake.formats.base import DecodeError
from cdclake.model import types as T
from cdclake.model import values as V
from cdclake.model.events import (
    UNKNOWN_TYPE,
)

VERSION: Final = 1
ROW_EVENT: Final = 1
DDL_EVENT: Final = 2
RESOLVED_EVENT: Final = 3

# Column flag bits (§6).
BINARY_FLAG: Final = 0x01
HANDLE_KEY_FLAG: Final = 0x02
GENERATED_FLAG: Final = 0x04
PRIMARY_KEY_FLAG: Final = 0x08
UNIQUE_KEY_FLAG: Final = 0x10
MULTIPLE_KEY_FLAG: Final = 0x20
NULLABLE_FLAG: Final = 0x40
UNSIGNED_FLAG: Final = 0x80

TRUNCATE_TABLE: Final = 11

# TiDB DDL action codes (§7); unknown codes pass through.
DDL_ACTIONS: Final[dict[int, str]] = {
    0: "none", 1: "create schema", 2: "drop schema", 3: "create table", 4: "drop table", 5: "add column",
    6: "drop column", 7: "add index", 8: "drop index", 9: "add foreign key", 10: "drop foreign key",
    11: "truncate table", 12: "modify column", 13: "rebase auto_increment ID", 14: "rename table",
    15: "set default value", 16: "shard row ID", 17: "modify table comment", 18: "rename index",
    19: "add partition", 20: "drop partition", 21: "create view", 22: "modify table charset and collate",
    23: "truncate partition", 24: "drop view", 25: "recover table", 26: "modify schema charset and collate",
    27: "lock table", 28: "unlock table", 29: "repair table", 30: "set tiflash replica",
    31: "update tiflash replica status", 32: "add primary key", 33: "drop primary key", 34: "create sequence",
    35: "alter sequence", 36: "drop sequence", 37: "add columns", 38: "drop columns",
    39: "modify auto id cache", 40: "rebase auto_random ID", 41: "alter index visibility",
    42: "exchange partition", 43: "add check constraint", 44: "drop check constraint",
    45: "alter check constraint", 46: "alter partition", 47: "rename tables", 48: "drop indexes",
    49: "alter table attributes", 50: "alter table partition attributes", 51: "create placement policy",
    52: "alter placement policy", 53: "drop placement policy", 54: "alter table partition placement",
    55: "modify schema default placement", 56: "alter table placement", 57: "alter table cache",
    58: "alter table statistics options", 59: "alter table nocache", 60: "create tables",
    61: "multi-schema change", 62: "flashback cluster", 63: "flashback schema", 64: "reorganize partition",
    65: "alter table ttl", 67: "alter table no_ttl", 68: "create resource group", 69: "alter resource group",
    70: "drop resource group", 71: "alter table partition by", 72: "remove partitioning",
    73: "add vector index",
}


def ddl_action_name(code: int) -> str:
    return DDL_ACTIONS.get(code, f"action {code}")


# A column as the message writes it: type code, handle-key bit, flags (absent in the earliest encoding), value.
class Col(msgspec.Struct, kw_only=True, gc=False):
    t: int
    h: bool = False
    f: int | None = None
    v: Any = None


_F32 = struct.Struct("<f")


# ---------------------------------------------------------------------------------------------------------
# Go string escaping of binary CHAR/VARCHAR (§5.1)

_SIMPLE_ESCAPES: Final = {"a": 7, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11, "\\": 92, '"': 34, "'": 39}
_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|[0-7]{3}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[abfnrtv\\\"'])")


def go_unquote_bytes(text: str) -> bytes:
    """The bytes behind a Go ``strconv.Quote`` body (quotes stripped), as TiCDC writes binary strings."""
    if "\\" not in text:
        return text.encode("utf-8")
    parts = _ESCAPE.split(text)
    out = bytearray()
    for i, part in enumerate(parts):
        if i % 2 == 0:
            if "\\" in part:
                raise ValueError(f"bad escape {part[part.index(chr(92)):][:6]!r} in binary string")
            out += part.encode("utf-8")
        elif part[0] == "x":
            out.append(int(part[1:], 16))
        elif part[0] in "01234567":
            code = int(part, 8)
            if code > 255:
                raise ValueError(f"octal escape \\{part} is above 255")
            out.append(code)
        elif part[0] in "uU":
            out += chr(int(part[1:], 16)).encode("utf-8")  # a surrogate is not a character: an error
        else:
            out.append(_SIMPLE_ESCAPES[part])
    return bytes(out)


_QUOTE_SIMPLE: Final = {7: "\\a", 8: "\\b", 12: "\\f", 10: "\\n", 13: "\\r", 9: "\\t", 11: "\\v", 92: "\\\\", 34: '\\"'}


def go_quote_bytes(data: bytes) -> str:
    """Go's ``strconv.Quote`` of raw bytes without the surrounding quotes (what TiCDC sends)."""
    out: list[str] = []
    for ch in data.decode("utf-8", "surrogateescape"):
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:  # a byte that does not start valid UTF-8
            out.append(f"\\x{code - 0xDC00:02x}")
        elif code in _QUOTE_SIMPLE:
            out.append(_QUOTE_SIMPLE[code])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif ch == " " or unicodedata.category(ch)[0] in "LMNPS":
            out.append(ch)
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return "".join(out)


# ---------------------------------------------------------------------------------------------------------
# Type codes → type text and value converters (§5)


class _Mismatch(Exception):
    """A value whose JSON kind does not fit its type code."""


def _check_int(v: Any) -> int:
    if type(v) is int:
        return v
    raise _Mismatch


def _check_text(v: Any) -> str:
    if type(v) is str:
        return v
    raise _Mismatch


def _to_float32(v: Any) -> float:
    if type(v) is float or type(v) is int:
        return V.float32(v)
    raise _Mismatch


def to_float(v: Any) -> float:
    if type(v) is float:
        return v
    if type(v) is int:  # Go writes a whole float64 without a fraction
        return float(v)
    raise _Mismatch


def _b64_checked(v: Any) -> bytes:
    if type(v) is not str:
        raise _Mismatch
    try:
        return binascii.a2b_base64(v, strict_mode=True)
    except binascii.Error:
        raise ValueError(f"invalid base64 {v[:40]!r}") from None


def _blob(v: Any) -> str:
    _b64_checked(v)
    return v


def _base64_text(v: Any) -> str:
    try:
        return _b64_checked(v).decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"base64 value {v[:40]!r} is not UTF-8 text") from None


def _escaped_binary(v: Any) -> str:
    if type(v) is not str:
        raise _Mismatch
    return V.b64(go_unquote_bytes(v))


def _legacy_base64(v: Any) -> str:
    """Earliest releases: base64 with no flag saying text or binary; text when it is UTF-8."""
    raw = _b64_checked(v)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return v


def _null(v: Any) -> None:
    raise _Mismatch  # only called for a value that is not null


def _geometry(v: Any) -> Any:
    raise ValueError("type 255 (geometry) is not supported by TiCDC Open Protocol")


def timestamp_to_utc(v: Any, zone: str) -> str:
    return V.local_timestamp_to_utc(_check_text(v), zone, rule="go")


Converter = Callable[[Any], Any]

# code → (type name, converter applied to every non-null value, check applied only with strict-values);
# CHAR/VARCHAR/TEXT/BLOB codes are in _STRINGS.
_SCALARS: Final[dict[int, tuple[str, Converter | None, Converter | None]]] = {
    1: ("tinyint", None, _check_int), 2: ("smallint", None, _check_int), 3: ("int", None, _check_int),
    4: ("float", _to_float32, None), 5: ("double", to_float, None), 6: (UNKNOWN_TYPE, _null, None),
    7: ("timestamp", None, _check_text), 8: ("bigint", None, _check_int), 9: ("mediumint", None, _check_int),
    10: ("date", None, _check_text), 14: ("date", None, _check_text), 11: ("time", None, _check_text),
    12: ("datetime", None, _check_text), 13: ("year", None, _check_int), 16: ("bit", None, _check_int),
    225: ("vector", None, _check_text), 245: ("json", None, _check_text), 246: ("decimal", None, _check_text),
    247: ("enum", None, _check_int), 248: ("set", None, _check_int), 255: ("geometry", _geometry, None),
}
_SIGNED_FAMILIES: Final = (T.INTEGER, T.DECIMAL, T.FLOAT, T.DOUBLE)

# code → (text type, binary type, Go-escaped when binary (else base64))
_STRINGS: Final[dict[int, tuple[str, str, bool]]] = {
    15: ("varchar", "varbinary", True), 253: ("varchar", "varbinary", True), 254: ("char", "binary", True),
    249: ("tinytext", "tinyblob", False), 250: ("mediumtext", "mediumblob", False),
    251: ("longtext", "longblob", False), 252: ("text", "blob", False),
}


class ColSpec(msgspec.Struct, frozen=True):
    """What one (type code, flags) pair means: type text, key/nullable metadata and the value converter
    (``check`` validates values that need no conversion, for ``strict-values``)."""

    type_text: str
    convert: Converter | None
    check: Converter | None
    key: bool
    primary: bool
    nullable: bool | None


def column_spec(code: int, flags: int | None, handle: bool, legacy_base64: bool) -> ColSpec:
    f = flags or 0
    nullable = None if flags is None else bool(f & NULLABLE_FLAG)
    key = handle or bool(f & HANDLE_KEY_FLAG)
    primary = bool(f & PRIMARY_KEY_FLAG)
    if code in _STRINGS:
        text_type, binary_type, escaped = _STRINGS[code]
        if flags is None:  # the earliest encoding: no flags, so text or binary is unknown
            legacy = _legacy_base64 if (legacy_base64 or not escaped) else None
            return ColSpec(text_type, legacy, _check_text, key, primary, nullable)
        if f & BINARY_FLAG:
            return ColSpec(binary_type, _escaped_binary if escaped else _blob, None, key, primary, nullable)
        if escaped:
            return ColSpec(text_type, None, _check_text, key, primary, nullable)
        return ColSpec(text_type, _base64_text, None, key, primary, nullable)
    scalar = _SCALARS.get(code)
    if scalar is None:
        raise DecodeError(f"unknown column type code {code}")
    name, convert, check = scalar
    if f & UNSIGNED_FLAG and T.parse_type(name).family in _SIGNED_FAMILIES:
        name += " unsigned"
    return ColSpec(name, convert, check, key, primary, nullable)


# ---------------------------------------------------------------------------------------------------------
# Encoding side: type text → (code, flags, writer)


def _float32_json(value: float) -> msgspec.Raw:
    """The shortest decimal that reads back as the same float32, as Go writes a FLOAT."""
    number = _F32.unpack(_F32.pack(value))[0]
    for digits in range(1, 10):
        text = f"{number:.{digits}g}"
        try:
            if _F32.unpack(_F32.pack(float(text)))[0] == number:
                return msgspec.Raw(text.encode())
        except OverflowError:  # rounded past the largest float32: more digits are needed
            continue
    return msgspec.Raw(repr(number).encode())  # pragma: no cover — 9 digits always round-trip a float32


def writer_for(t: T.SqlType, timestamp_zone: str) -> tuple[int, int, Callable[[Any], Any]]:
    """(type code, type-derived flags, canonical value → wire value) for an event column type."""
    family, name = t.family, t.name
    unsigned = UNSIGNED_FLAG if t.unsigned else 0

    def plain(v: Any) -> Any:
        return v

    if family == T.INTEGER:
        code = {"tinyint": 1, "smallint": 2, "int2": 2, "smallserial": 2, "mediumint": 9, "int": 3, "integer": 3,
                "int4": 3, "serial": 3}.get(name, 8)
        return code, BINARY_FLAG | unsigned, plain
    if family == T.BOOLEAN:
        return 1, BINARY_FLAG, int
    if family == T.FLOAT:
        # TiCDC writes NaN and ±Infinity as 0.
        return 4, BINARY_FLAG | unsigned, lambda v: _float32_json(v if math.isfinite(v) else 0.0)
    if family == T.DOUBLE:
        return 5, BINARY_FLAG | unsigned, lambda v: v if math.isfinite(v) else 0.0
    if family == T.DECIMAL:
        return 246, BINARY_FLAG | unsigned, str
    if family == T.BIT:
        return 16, BINARY_FLAG | UNSIGNED_FLAG, plain
    if family == T.YEAR:
        return 13, BINARY_FLAG | UNSIGNED_FLAG, plain
    if family == T.DATE:
        return 10, BINARY_FLAG, plain
    if family == T.TIME:
        return 11, BINARY_FLAG, plain
    if family == T.DATETIME:
        return 12, BINARY_FLAG, plain
    if family == T.TIMESTAMP:
        zone = timestamp_zone or "UTC"
        return 7, BINARY_FLAG, lambda v: V.utc_timestamp_to_local(v, zone) if v.endswith("Z") else v
    if family == T.JSON:
        return 245, BINARY_FLAG, plain
    if family == T.ENUM:
        return 247, 0, lambda v: V.enum_index(v, t)
    if family == T.SET:
        return 248, 0, lambda v: V.set_mask(v, t)
    if family == T.VECTOR:
        return 225, 0, plain
    if family == T.BINARY:
        if name in ("binary",):
            return 254, BINARY_FLAG, lambda v: go_quote_bytes(V.unb64(v))
        if name in ("varbinary",):
            return 15, BINARY_FLAG, lambda v: go_quote_bytes(V.unb64(v))
        code = {"tinyblob": 249, "mediumblob": 250, "longblob": 251}.get(name, 252)
        return code, BINARY_FLAG, plain
    if family == T.TEXT:
        if name in ("char", "nchar", "character"):
            return 254, 0, plain
        if name in ("tinytext", "mediumtext", "longtext", "text"):
            code = {"tinytext": 249, "mediumtext": 250, "longtext": 251}.get(name, 252)
            return code, 0, lambda v: V.b64(v.encode("utf-8"))
        return 15, 0, plain
    # A type the protocol has no code for travels as VARCHAR text.
    return 15, 0, lambda v: v if isinstance(v, str) else json.dumps(v)


def statement_action(sql: str) -> int:
    """An action code for a DDL statement, from its first two words (the encoder's best guess; decoders only
    rely on 11, TRUNCATE TABLE)."""
    words = sql.split(None, 4)
    head = " ".join(w.upper() for w in words[:2])
    if head.startswith("TRUNCATE"):
        return TRUNCATE_TABLE
    return {"CREATE DATABASE": 1, "CREATE SCHEMA": 1, "DROP DATABASE": 2, "DROP SCHEMA": 2, "CREATE TABLE": 3,
            "DROP TABLE": 4, "RENAME TABLE": 14, "CREATE VIEW": 21, "DROP VIEW": 24, "CREATE INDEX": 7,
            "CREATE UNIQUE": 7, "DROP INDEX": 8, "ALTER TABLE": 12}.get(head, 0)

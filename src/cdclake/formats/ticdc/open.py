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
import json
import math
import re
import struct
import unicodedata
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, Final

import msgspec

from cdclake.formats import claim_check
from cdclake.formats.base import DecodeError, Format, Option
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


class _Col(msgspec.Struct, kw_only=True, gc=False):
    t: int
    h: bool = False
    f: int | None = None
    v: Any = None


class _Value(msgspec.Struct, gc=False):
    u: dict[str, _Col] | None = None
    p: dict[str, _Col] | None = None
    d: dict[str, _Col] | None = None
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


def _to_float(v: Any) -> float:
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


def _timestamp_to_utc(v: Any, zone: str) -> str:
    return V.local_timestamp_to_utc(_check_text(v), zone, rule="go")


Converter = Callable[[Any], Any]

# code → (type name, converter applied to every non-null value, check applied only with strict-values);
# CHAR/VARCHAR/TEXT/BLOB codes are in _STRINGS.
_SCALARS: Final[dict[int, tuple[str, Converter | None, Converter | None]]] = {
    1: ("tinyint", None, _check_int), 2: ("smallint", None, _check_int), 3: ("int", None, _check_int),
    4: ("float", _to_float32, None), 5: ("double", _to_float, None), 6: (UNKNOWN_TYPE, _null, None),
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


class _ColSpec(msgspec.Struct, frozen=True):
    """What one (type code, flags) pair means: type text, key/nullable metadata and the value converter
    (``check`` validates values that need no conversion, for ``strict-values``)."""

    type_text: str
    convert: Converter | None
    check: Converter | None
    key: bool
    primary: bool
    nullable: bool | None


class _Plan:
    """How to read one shape of column map: its columns, key columns and the values that need converting."""

    __slots__ = ("columns", "converts", "flags", "handles", "keys", "legacy", "names", "read", "type_codes",
                 "types")

    def __init__(self, names: tuple[str, ...], columns: list[Column], keys: list[str],
                 converts: list[tuple[str, Converter]]) -> None:
        self.names = names
        self.columns = columns
        self.keys = keys
        self.converts = converts
        self.types = {c.name: c.type for c in columns}
        # The shape this plan was made for, to check the next column map of these names against.
        self.type_codes: list[int] = []
        self.flags: list[int | None] = []
        self.legacy = False
        self.handles: list[bool] = []
        self.read: Callable[[dict[str, _Col]], dict[str, Any] | None] = _no_reader

    def compile(self) -> None:
        """Generate :attr:`read`: the image of a column map of this plan's names, or ``None`` when a type
        code, flag or value does not fit the plan (the general path then decides, and names any error).

        One generated function per shape checks every column and builds the row in one go, where the
        general path loops over the columns several times. The checks are those of the general path's
        plan match (type codes, flags, and handle bits in the flag-less encoding)."""
        checks, fields, converts = [], [], []
        scope: dict[str, Any] = {"_Mismatch": _Mismatch}
        convert_of = dict(self.converts)
        for i, name in enumerate(self.names):
            flags = self.flags[i]
            checks += [f"c{i}.t != {self.type_codes[i]!r}",
                       f"c{i}.f is not None" if flags is None else f"c{i}.f != {flags!r}"]
            if self.legacy:
                checks.append(f"c{i}.h is not {self.handles[i]!r}")
            convert = convert_of.get(name)
            if convert is None:
                fields.append(f"{name!r}: c{i}.v")
                continue
            scope[f"f{i}"] = convert
            # like the general path, a float needs no _to_float
            keep = f"v{i} is None or type(v{i}) is float" if convert is _to_float else f"v{i} is None"
            converts += [f"        v{i} = c{i}.v", f"        if not ({keep}):", f"            v{i} = f{i}(v{i})"]
            fields.append(f"{name!r}: v{i}")
        lines = ["def read(cols):"]
        if self.names:
            lines.append("    " + ", ".join(f"c{i}" for i in range(len(self.names))) + ", = cols.values()")
            lines += [f"    if {' or '.join(checks)}:", "        return None"]
        if converts:
            lines += ["    try:", *converts, "    except Exception:",
                      "        return None"]
        lines.append("    return {" + ", ".join(fields) + "}")
        source = "\n".join(lines) + "\n"
        exec(compile(source, "<ticdc-open image reader>", "exec"), scope)
        self.read = scope["read"]


def _no_reader(cols: dict[str, _Col]) -> None:
    return None


def _column_spec(code: int, flags: int | None, handle: bool, legacy_base64: bool) -> _ColSpec:
    f = flags or 0
    nullable = None if flags is None else bool(f & NULLABLE_FLAG)
    key = handle or bool(f & HANDLE_KEY_FLAG)
    primary = bool(f & PRIMARY_KEY_FLAG)
    if code in _STRINGS:
        text_type, binary_type, escaped = _STRINGS[code]
        if flags is None:  # the earliest encoding: no flags, so text or binary is unknown
            legacy = _legacy_base64 if (legacy_base64 or not escaped) else None
            return _ColSpec(text_type, legacy, _check_text, key, primary, nullable)
        if f & BINARY_FLAG:
            return _ColSpec(binary_type, _escaped_binary if escaped else _blob, None, key, primary, nullable)
        if escaped:
            return _ColSpec(text_type, None, _check_text, key, primary, nullable)
        return _ColSpec(text_type, _base64_text, None, key, primary, nullable)
    scalar = _SCALARS.get(code)
    if scalar is None:
        raise DecodeError(f"unknown column type code {code}")
    name, convert, check = scalar
    if f & UNSIGNED_FLAG and T.parse_type(name).family in _SIGNED_FAMILIES:
        name += " unsigned"
    return _ColSpec(name, convert, check, key, primary, nullable)


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


def _writer_for(t: T.SqlType, timestamp_zone: str) -> tuple[int, int, Callable[[Any], Any]]:
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


def _statement_action(sql: str) -> int:
    """An action code for a DDL statement, from its first two words (the encoder's best guess; decoders only
    rely on 11, TRUNCATE TABLE)."""
    words = sql.split(None, 4)
    head = " ".join(w.upper() for w in words[:2])
    if head.startswith("TRUNCATE"):
        return TRUNCATE_TABLE
    return {"CREATE DATABASE": 1, "CREATE SCHEMA": 1, "DROP DATABASE": 2, "DROP SCHEMA": 2, "CREATE TABLE": 3,
            "DROP TABLE": 4, "RENAME TABLE": 14, "CREATE VIEW": 21, "DROP VIEW": 24, "CREATE INDEX": 7,
            "CREATE UNIQUE": 7, "DROP INDEX": 8, "ALTER TABLE": 12}.get(head, 0)


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
        self._plans: dict[tuple[Any, ...], _Plan] = {}
        self._last: dict[tuple[str, ...], _Plan] = {}
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

    def _image(self, cols: dict[str, _Col], plan: _Plan | None = None) -> tuple[dict[str, Any], _Plan]:
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
            if value is None or (convert is _to_float and type(value) is float):
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

    def _shape_plan(self, cols: dict[str, _Col], names: tuple[str, ...], types: list[int],
                    flags: list[int | None]) -> _Plan:
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

    def _plan(self, cols: dict[str, _Col], shape: tuple[Any, ...]) -> _Plan:
        specs = {name: _column_spec(col.t, col.f, col.h, self._legacy_base64) for name, col in cols.items()}
        # The key is TiCDC's handle key; a message that flags none falls back to the primary key.
        keys = [name for name, spec in specs.items() if spec.key] or [
            name for name, spec in specs.items() if spec.primary]
        columns: list[Column] = []
        converts: list[tuple[str, Converter]] = []
        for name, spec in specs.items():
            convert = spec.convert or (spec.check if self._strict else None)
            if spec.type_text == "timestamp" and self._zone:
                convert = partial(_timestamp_to_utc, zone=self._zone)
            if convert is not None:
                converts.append((name, convert))
            columns.append(Column(name, spec.type_text, name in keys, spec.nullable))
        plan = _Plan(shape[0], columns, keys, converts)
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
                code = TRUNCATE_TABLE if event.kind == TRUNCATE else _statement_action(query)
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
                    writer = writers[type_text] = _writer_for(T.parse_type(type_text), self._zone)
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

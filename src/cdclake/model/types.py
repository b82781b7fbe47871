"""Column types in one vocabulary: MySQL/TiDB type text (``bigint(20) unsigned``, ``decimal(10,2)``,
``enum('a','b')``, ``datetime(6)``), parsed once into :class:`SqlType`.

Every format reports its columns in this vocabulary (Debezium and DTS derive it from their own schemas),
so that value conversion and the lake's typed tables have one place that knows what a type means.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final

import msgspec

from cdclake.errors import InvalidType

# The families a base type name belongs to; the canonical value rules and the Spark types follow them.
INTEGER: Final = "integer"
DECIMAL: Final = "decimal"
FLOAT: Final = "float"
DOUBLE: Final = "double"
BIT: Final = "bit"
BOOLEAN: Final = "boolean"
DATE: Final = "date"
DATETIME: Final = "datetime"
TIMESTAMP: Final = "timestamp"
TIME: Final = "time"
YEAR: Final = "year"
TEXT: Final = "text"
BINARY: Final = "binary"
JSON: Final = "json"
ENUM: Final = "enum"
SET: Final = "set"
VECTOR: Final = "vector"
UNKNOWN: Final = "unknown"

_FAMILIES: Final = {
    **dict.fromkeys(("tinyint", "smallint", "mediumint", "int", "integer", "bigint", "int2", "int4", "int8",
                     "serial", "bigserial", "smallserial"), INTEGER),
    **dict.fromkeys(("decimal", "numeric", "fixed", "dec"), DECIMAL),
    **dict.fromkeys(("float", "real", "float4"), FLOAT),
    **dict.fromkeys(("double", "double precision", "float8"), DOUBLE),
    "bit": BIT,
    **dict.fromkeys(("bool", "boolean"), BOOLEAN),
    "date": DATE,
    "datetime": DATETIME,
    **dict.fromkeys(("timestamp", "timestamptz", "timestamp with time zone"), TIMESTAMP),
    "timestamp without time zone": DATETIME,
    **dict.fromkeys(("time", "time without time zone"), TIME),
    "year": YEAR,
    **dict.fromkeys(("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "nchar", "nvarchar",
                     "character", "character varying", "string", "uuid", "xml", "clob", "varchar2",
                     "nvarchar2"), TEXT),
    **dict.fromkeys(("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "bytea", "raw",
                     "geometry", "point", "linestring", "polygon", "multipoint", "multilinestring",
                     "multipolygon", "geometrycollection", "geomcollection"), BINARY),
    **dict.fromkeys(("json", "jsonb"), JSON),
    "enum": ENUM,
    "set": SET,
    "vector": VECTOR,
}

# Whole range of each MySQL integer type, as bit widths.
INTEGER_BITS: Final = {"tinyint": 8, "smallint": 16, "int2": 16, "smallserial": 16, "mediumint": 24,
                       "int": 32, "integer": 32, "int4": 32, "serial": 32, "bigint": 64, "int8": 64,
                       "bigserial": 64}


class SqlType(msgspec.Struct, frozen=True):
    name: str  # lower-case base name, e.g. "bigint", "decimal", "enum"
    family: str
    length: int | None = None  # display width, precision, fsp, or bit count, as the type text gives it
    scale: int | None = None
    unsigned: bool = False
    members: tuple[str, ...] = ()  # ENUM / SET labels, in definition order

    @property
    def fsp(self) -> int:
        """Fractional-second digits of a temporal type (0 when the text states none)."""
        return self.length or 0

    @property
    def bits(self) -> int | None:
        """Bit width of an integer type."""
        return INTEGER_BITS.get(self.name)


_TYPE_TEXT = re.compile(r"^\s*([a-z][a-z0-9_ ]*?)\s*(?:\((.*)\))?\s*((?:\s*(?:unsigned|signed|zerofill))*)\s*$",
                        re.IGNORECASE | re.DOTALL)


@lru_cache(maxsize=4096)
def parse_type(text: str | None) -> SqlType:
    """Parse MySQL-style type text; anything unrecognised is ``unknown`` rather than an error, because a
    type the lake cannot map must still let the row through as text."""
    if not text:
        return SqlType(UNKNOWN, UNKNOWN)
    match = _TYPE_TEXT.match(text)
    if not match:
        return SqlType(text.strip().lower(), UNKNOWN)
    name = " ".join(match.group(1).lower().split())
    args, modifiers = match.group(2), match.group(3).lower()
    family = _FAMILIES.get(name, UNKNOWN)
    unsigned = "unsigned" in modifiers or "zerofill" in modifiers
    if family in (ENUM, SET):
        return SqlType(name, family, members=tuple(split_members(args or "")))
    length = scale = None
    if args:
        numbers = [a.strip() for a in args.split(",")]
        length = _parameter(numbers[0])
        scale = _parameter(numbers[1]) if len(numbers) > 1 else None
    return SqlType(name, family, length, scale, unsigned)


_HUGE: Final = 10**18


def _parameter(text: str) -> int | None:
    """A type parameter's number; None for anything but ASCII digits. Type text is message content: a number of
    more than 18 digits (int() refuses thousands) is :data:`_HUGE` plus its count of digits, which is out of every
    range :func:`check_type` allows and keeps the order of such numbers by their length."""
    if not (text.isascii() and text.isdigit()):
        return None
    digits = text.lstrip("0") or "0"
    return int(digits) if len(digits) <= 18 else _HUGE + len(digits)


# ENUM and SET members as MySQL bounds them; a SET's value is a 64-bit mask.
MAX_ENUM_MEMBERS: Final = 65535
MAX_SET_MEMBERS: Final = 64


def check_type(t: SqlType) -> SqlType:
    """``t`` when its parameters are in range: DECIMAL precision at least 1 and scale 0 to the precision (a
    precision above 38 is kept as text, see :mod:`cdclake.spark.lake_types`), fractional seconds of DATETIME,
    TIMESTAMP and TIME 0 to 6, BIT 1 to 64 bits, at most 65,535 ENUM and 64 SET members. Other parameters
    (character lengths, integer display widths) do not reach the lake's types. Raises :class:`InvalidType`."""
    problem = None
    if t.family == DECIMAL and t.length is not None and (t.length < 1 or (t.scale or 0) > t.length):
        problem = "a DECIMAL needs a precision of at least 1 and a scale from 0 to the precision"
    elif t.family in (DATETIME, TIMESTAMP, TIME) and t.length is not None and t.length > 6:
        problem = "fractional seconds go from 0 to 6 digits"
    elif t.family == BIT and t.length is not None and not 1 <= t.length <= 64:
        problem = "a BIT holds 1 to 64 bits"
    elif t.family == ENUM and len(t.members) > MAX_ENUM_MEMBERS:
        problem = f"an ENUM has at most {MAX_ENUM_MEMBERS} members"
    elif t.family == SET and len(t.members) > MAX_SET_MEMBERS:
        problem = f"a SET has at most {MAX_SET_MEMBERS} members"
    if problem is not None:
        raise InvalidType(f"column type {type_text(t)[:80]!r}: {problem}")
    return t


def split_members(args: str) -> list[str]:
    """ENUM/SET labels from ``'a','b,c','it''s'`` (commas inside quotes, doubled quotes)."""
    members: list[str] = []
    i, n = 0, len(args)
    while i < n:
        quote = args[i]
        if quote not in "'\"":
            i += 1
            continue
        i += 1
        label: list[str] = []
        while i < n:
            ch = args[i]
            if ch == quote and i + 1 < n and args[i + 1] == quote:
                label.append(quote)
                i += 2
            elif ch == "\\" and i + 1 < n:
                label.append(args[i + 1])
                i += 2
            elif ch == quote:
                i += 1
                break
            else:
                label.append(ch)
                i += 1
        members.append("".join(label))
    return members


def type_text(t: SqlType) -> str:
    """The type text for a parsed type (the inverse of :func:`parse_type`, up to spelling)."""
    if t.family in (ENUM, SET):
        # split_members reads a backslash as an escape, so a literal one must be escaped too
        quoted = ",".join("'" + m.replace("\\", "\\\\").replace("'", "''") + "'" for m in t.members)
        return f"{t.name}({quoted})"
    args = ""
    if t.length is not None:
        args = f"({t.length})" if t.scale is None else f"({t.length},{t.scale})"
    return f"{t.name}{args}{' unsigned' if t.unsigned else ''}"


def fixed_scale(t: SqlType, column: str, needed_by: str) -> int:
    """A DECIMAL's scale, for a wire form that fixes one (decimal bytes). A DECIMAL without a scale states none (as
    decoded from a message that gave none): its values keep their own digits, which such a form cannot carry, so
    it is refused by name rather than written at scale 0."""
    if t.scale is None:
        raise ValueError(f"column {column} has type {type_text(t)!r} without a scale, which {needed_by} needs")
    return t.scale


_NEXT_SIGNED: Final = {8: "smallint", 16: "int", 24: "int", 32: "bigint"}
_BY_BITS: Final = {8: "tinyint", 16: "smallint", 24: "mediumint", 32: "int", 64: "bigint"}


def wider(a: SqlType, b: SqlType) -> SqlType:
    """A type that holds every value of both: for producers that state a column's type per value (DTS
    says ``tinyint`` for 5 and ``tinyint unsigned`` for 200 in the same column). Types of different
    families that do not nest leave ``a``, the later statement."""
    if a.family == INTEGER and b.family == INTEGER:
        bits_a, bits_b = a.bits or 64, b.bits or 64
        if a.unsigned == b.unsigned:
            return a if bits_a >= bits_b else b
        unsigned_bits = bits_a if a.unsigned else bits_b
        signed_bits = bits_b if a.unsigned else bits_a
        if signed_bits > unsigned_bits:
            return a if not a.unsigned else b
        if unsigned_bits == 64:
            return SqlType("decimal", DECIMAL, 20, 0)
        name = _NEXT_SIGNED[unsigned_bits]
        return SqlType(name, INTEGER)
    if a.family == DECIMAL and b.family == DECIMAL and (a.length is None or b.length is None):
        return a if a.length is None else b  # precision unstated: the lake infers it from the values
    if {a.family, b.family} <= {INTEGER, DECIMAL}:
        digits = [(t.length or 10) - (t.scale or 0) if t.family == DECIMAL else
                  len(str(2 ** (t.bits or 64))) for t in (a, b)]
        scale = max(t.scale or 0 for t in (a, b) if t.family == DECIMAL)
        return SqlType("decimal", DECIMAL, min(65, max(digits) + scale), scale)
    if {a.family, b.family} == {FLOAT, DOUBLE}:
        return a if a.family == DOUBLE else b
    if a.family == b.family and a.family not in (ENUM, SET) and (b.length or 0) > (a.length or 0):
        return b
    return a


def integer_type_for(low: int, high: int) -> SqlType:
    """The narrowest MySQL integer type holding every value in [low, high]."""
    for bits in (8, 16, 32, 64):
        if -(2 ** (bits - 1)) <= low and high < 2 ** (bits - 1):
            return SqlType(_BY_BITS[bits], INTEGER)
        if low >= 0 and high < 2**bits:
            return SqlType(_BY_BITS[bits], INTEGER, unsigned=True)
    return SqlType("decimal", DECIMAL, 20, 0)

"""Column types of DTS records: each source's type codes as MySQL type text, charsets as Python codecs, and
:class:`Layout`, what one ``fields`` list means independently of the values."""

from __future__ import annotations

import codecs
import encodings.cp1252
import logging
from typing import Any, Final

import msgspec

from cdclake.model import types as T
from cdclake.model.events import UNKNOWN_TYPE, Column

log = logging.getLogger(__name__)

MYSQL_LIKE: Final = frozenset({0, 8})  # MySQL, DRDS (PolarDB-X)
POSTGRES_LIKE: Final = frozenset({3, 7})  # PostgreSQL, PPAS
ORACLE: Final = 1

# Temporal rendering kinds for DateTime values.
KIND_DATE, KIND_TIME, KIND_DATETIME, KIND_YEAR, KIND_INFER = "date", "time", "datetime", "year", ""

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
_TEMPORAL_KIND: Final = {T.DATE: KIND_DATE, T.TIME: KIND_TIME, T.DATETIME: KIND_DATETIME, T.TIMESTAMP: KIND_DATETIME,
                         T.YEAR: KIND_YEAR}
# BinaryObject types holding text; in a text-typed column any type but the binary ones is text too.
TEXT_OBJECT_TYPES: Final = frozenset({"TEXT", "JSON", "XML", "ENUM", "SET", "UUID", "ROWID", "UROWID", "CLOB"})
BINARY_OBJECT_TYPES: Final = frozenset({"BINARY", "BLOB", "BYTEA", "RAW", "LONG_RAW", "GEOMETRY", "BFILE"})
TEXTUAL_FAMILIES: Final = frozenset({T.TEXT, T.JSON, T.ENUM, T.SET})

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


def codec_of(charset: bytes) -> str | None:
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


class Field(msgspec.Struct, frozen=True):
    """One column of a ``fields`` list, as this source's type code means it."""

    name: str
    code: int
    text_type: str  # type text for a NULL or textual value
    binary_type: str  # type text when the value is binary
    temporal: str  # how a DateTime value renders
    family: str


def field_of(name: str, code: int, source_type: int) -> Field:
    if source_type in MYSQL_LIKE:
        text_type, binary_type = _MYSQL_TYPES.get(code, (UNKNOWN_TYPE, UNKNOWN_TYPE))
    elif source_type in POSTGRES_LIKE:
        text_type = binary_type = _POSTGRES_TYPES.get(code, UNKNOWN_TYPE)
    elif source_type == ORACLE:
        text_type = binary_type = _ORACLE_TYPES.get(code, UNKNOWN_TYPE)
    else:
        text_type = binary_type = UNKNOWN_TYPE
    family = T.parse_type(text_type).family
    return Field(name, code, text_type, binary_type, _TEMPORAL_KIND.get(family, KIND_INFER), family)


class Layout:
    """Everything about one ``fields`` list that does not depend on the values; cached by its bytes."""

    __slots__ = ("columns", "fields", "names", "nanos", "reader", "types")

    def __init__(self, fields: list[Field], source_type: int) -> None:
        self.fields = fields
        self.reader: Any = None  # the compiled image reader, made on first use
        self.names = [f.name for f in fields]
        self.types = [f.text_type for f in fields]
        self.nanos = source_type == ORACLE  # Oracle DateTime fractions are nanoseconds
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

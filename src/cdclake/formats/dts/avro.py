"""Alibaba Cloud DTS Avro: one schemaless Avro datum of ``com.alibaba.dts.formats.avro.Record`` per message.

See ``dts-avro.md``. The schema is fixed and known (:mod:`cdclake.formats.dts.schema`, revision R2; R1 lacks
the trailing ``bornTimestamp``), so the decoder reads the binary encoding directly into canonical values
instead of building fastavro's intermediate dicts: the header inline, each image through a reader generated
once per column layout (:mod:`cdclake.formats.dts.image_reader`) with the generic per-value reader
``DtsAvro._value`` as its fallback and reference; both read with :mod:`cdclake.formats.avro.reader`. The
encoder (:mod:`cdclake.formats.dts.encoder`) uses fastavro, which keeps the decoder honest in the tests.

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
import logging
import struct
from collections.abc import Iterable
from functools import lru_cache
from typing import Any, Final

import msgspec

from cdclake.formats.avro.reader import block_count, read_bytes, read_long
from cdclake.formats.base import DecodeError, Format, Option
from cdclake.formats.dts.encoder import encode
from cdclake.formats.dts.image_reader import compile_image_reader
from cdclake.formats.dts.schema import OPERATIONS, SOURCE_TYPES
from cdclake.formats.dts.types import (
    BINARY_OBJECT_TYPES,
    TEXT_OBJECT_TYPES,
    TEXTUAL_FAMILIES,
    Layout,
    codec_of,
    field_of,
)
from cdclake.formats.dts.values import (
    NOT_CAPTURED,
    datetime_parts,
    datetime_text,
    decimal_text,
    inferred_temporal,
    zoned_text,
)
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

PLACEHOLDER_BYTES: Final = 48
_SOURCE_TYPE_COUNT: Final = len(SOURCE_TYPES)
_OPERATION_COUNT: Final = len(OPERATIONS)
_OP_INSERT, _OP_UPDATE, _OP_DELETE, _OP_DDL = 0, 1, 2, 3
_OP_INIT = 16
_ROW_OPS: Final = {_OP_INSERT: INSERT, _OP_UPDATE: UPDATE, _OP_DELETE: DELETE, _OP_INIT: READ}
_DOUBLE = struct.Struct("<d")

# The datum is read with plain code over (data, pos), the common one-byte varints and short strings inline,
# because per-value function calls dominate the cost of decoding in Python. Reading past the end raises
# IndexError, which becomes "truncated".

# Zig-zag encoded union branch bytes of an image value.
_B_NULL, _B_INTEGER, _B_CHARACTER, _B_DECIMAL, _B_FLOAT, _B_TIMESTAMP, _B_DATETIME = 0, 2, 4, 6, 8, 10, 12
_B_TIMESTAMP_TZ, _B_BINARY_GEOMETRY, _B_TEXT_GEOMETRY, _B_BINARY_OBJECT, _B_TEXT_OBJECT = 14, 16, 18, 20, 22
_B_EMPTY_OBJECT = 24
_BOOLEAN: Final = T.parse_type("boolean")

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
                 layout: Layout | None, logical: tuple[bytes | None, bytes | None] = (None, None)) -> None:
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
        self._layouts: dict[tuple[int, bytes], Layout] = {}
        self._recent: dict[tuple[str | None, int], tuple[bytes, Layout]] = {}
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
        except (IndexError, ValueError) as exc:  # DecodeError, UnicodeDecodeError are ValueErrors
            if len(data) <= PLACEHOLDER_BYTES:
                return []  # DTS's offset-advancing placeholder
            if isinstance(exc, IndexError):
                raise DecodeError(f"truncated DTS Avro datum ({len(data)} bytes)") from None
            if isinstance(exc, DecodeError):
                raise
            raise DecodeError(f"malformed DTS Avro datum: {exc}") from None

    def _decode(self, data: bytes) -> list[ChangeEvent]:
        # The header, with the one-byte varints and short strings that real records carry read inline.
        size = len(data)
        pos = 1 if data[0] < 0x80 else read_long(data, 0)[1]  # version
        record_id, pos = read_long(data, pos)
        # Records come in bursts of one second: a varint is self-delimiting, so bytes equal to the last
        # timestamp's are that timestamp.
        seen, source_timestamp = self._timestamp
        if data.startswith(seen, pos):
            pos += len(seen)
        else:
            start = pos
            source_timestamp, pos = read_long(data, pos)
            self._timestamp = (data[start:pos], source_timestamp)
        c = data[pos]
        if c < 0x80 and not c & 1:
            end = pos + 1 + (c >> 1)
            raw = data[pos + 1:end]
            pos = end
        else:
            raw, pos = read_bytes(data, pos)
        source_position = raw.decode("utf-8")
        c = data[pos]  # safeSourcePosition
        if c < 0x80 and not c & 1:
            pos += 1 + (c >> 1)
        else:
            _, pos = read_bytes(data, pos)
        c = data[pos]  # sourceTxid
        if c < 0x80 and not c & 1:
            pos += 1 + (c >> 1)
        else:
            _, pos = read_bytes(data, pos)
        # source (type and version) is the same in every record of a stream
        seen, source_type = self._source
        if data.startswith(seen, pos):
            pos += len(seen)
        else:
            start = pos
            c = data[pos]
            source_type, pos = ((c >> 1) ^ -(c & 1), pos + 1) if c < 0x80 else read_long(data, pos)
            if not 0 <= source_type < _SOURCE_TYPE_COUNT:
                raise DecodeError(f"unknown source type index {source_type}")
            c = data[pos]  # source version
            if c < 0x80 and not c & 1:
                pos += 1 + (c >> 1)
            else:
                _, pos = read_bytes(data, pos)
            if pos > size:
                raise IndexError
            self._source = (data[start:pos], source_type)
        c = data[pos]
        operation, pos = ((c >> 1) ^ -(c & 1), pos + 1) if c < 0x80 else read_long(data, pos)
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
            pos = pos + len(seen) if data.startswith(seen, pos) else read_long(data, pos)[1]
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
                    raise IndexError
                name: bytes | None = data[pos + 2:end]
                pos = end
            else:
                name, pos = read_bytes(data, pos + 1)
        elif branch == 0:
            name = None
            pos += 1
        else:
            raise DecodeError(f"objectName: union branch {read_long(data, pos)[0]} of [null, string]")
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
            n, pos = block_count(data, pos)
            while n:
                for _ in range(n):
                    _, pos = read_long(data, pos)
                n, pos = block_count(data, pos)
        elif branch != 0:
            raise DecodeError(f"processTimestamps: union branch {read_long(data, pos - 1)[0]} of [null, array]")
        pk_uk_info = logical_db = logical_table = None
        c = data[pos]  # tags: pk_uk_info, and a sharded source's logical names, matter here
        n, pos = ((c >> 1), pos + 1) if c < 0x80 and not c & 1 else block_count(data, pos)
        while n:
            for _ in range(n):
                is_key = data.startswith(b"\x14pk_uk_info", pos)
                logical = data[pos:pos + 10] if data.startswith(b"\x12l_", pos) else None
                c = data[pos]
                if c < 0x80 and not c & 1:
                    pos += 1 + (c >> 1)
                else:
                    _, pos = read_bytes(data, pos)
                if is_key:
                    pk_uk_info, pos = read_bytes(data, pos)
                    continue
                if logical == _L_DB_NAME:
                    logical_db, pos = read_bytes(data, pos)
                    continue
                if logical == _L_TB_NAME:
                    logical_table, pos = read_bytes(data, pos)
                    continue
                c = data[pos]
                if c < 0x80 and not c & 1:
                    pos += 1 + (c >> 1)
                else:
                    _, pos = read_bytes(data, pos)
            c = data[pos]
            n, pos = ((c >> 1), pos + 1) if c < 0x80 and not c & 1 else block_count(data, pos)
        if pos > len(data):
            raise IndexError
        object_name = None if name is None else name.decode("utf-8")
        layout, pos = self._fields(data, pos, object_name, source_type)
        tail = _Tail(data[start:pos], source_type, object_name, pk_uk_info, layout, (logical_db, logical_table))
        if len(self._tails) >= 4096:  # names come from the data: keep the cache bounded
            self._tails.clear()
        self._tails[(source_type, name)] = tail
        return tail, pos

    def _fields(self, data: bytes, pos: int, object_name: str | None,
                source_type: int) -> tuple[Layout | None, int]:
        # A table's records repeat the same fields bytes: when they match the table's last layout (Avro
        # encodings are prefix-free), the list need not be read again.
        recent = self._recent.get((object_name, source_type))
        if recent is not None and data.startswith(recent[0], pos):
            return recent[1], pos + len(recent[0])
        start = pos
        branch, pos = read_long(data, pos)
        if branch == 0:
            return None, pos
        if branch == 1:
            raise DecodeError("fields given as a string are not supported (expected an array of Field)")
        if branch != 2:
            raise DecodeError(f"fields: union branch {branch} of [null, string, array]")
        fields: list[tuple[str, int]] = []
        n, pos = block_count(data, pos)
        while n:
            for _ in range(n):
                raw, pos = read_bytes(data, pos)
                code, pos = read_long(data, pos)
                fields.append((raw.decode("utf-8"), code))
            n, pos = block_count(data, pos)
        raw = data[start:pos]
        layout = self._layouts.get((source_type, raw))
        if layout is None:
            layout = Layout([field_of(name, code, source_type) for name, code in fields], source_type)
            if len(self._layouts) >= 4096:  # shapes come from the data: keep the caches bounded
                self._layouts.clear()
                self._recent.clear()
            self._layouts[(source_type, raw)] = layout
        self._recent[(object_name, source_type)] = (raw, layout)
        return layout, pos

    def _image(self, data: bytes, pos: int, what: str, layout: Layout | None,
               types: list[str]) -> tuple[dict[str, Any] | str | None, int]:
        """One image as canonical values, read straight from the datum; refines ``types`` where a value says
        more than its type code."""
        branch = data[pos]
        pos += 1
        if branch == 0:
            return None, pos
        if branch == 2:
            raw, pos = read_bytes(data, pos)
            return raw.decode("utf-8"), pos
        if branch != 4:
            raise DecodeError(f"{what}: union branch {read_long(data, pos - 1)[0]} of [null, string, array]")
        if layout is None:
            raise DecodeError(f"{what} holds values but the record has no fields")
        reader = layout.reader
        if reader is None:
            reader = layout.reader = compile_image_reader(layout, self._codecs)
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
        n, pos = block_count(data, pos)
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
                if value is not NOT_CAPTURED:
                    row[field.name] = value
            seen += n
            n, pos = block_count(data, pos)
        if seen != count:
            raise DecodeError(f"{what} has {seen} values for {count} fields")
        return row, pos

    def _value(self, data: bytes, pos: int, index: int, types: list[str], layout: Layout) -> tuple[Any, int]:
        """The value union at ``pos`` (its branch byte) as a canonical value, or ``NOT_CAPTURED``."""
        field = layout.fields[index]
        b = data[pos]
        pos += 1
        size = len(data)
        codecs_ = self._codecs
        if b == _B_INTEGER:
            if data[pos] < 0x80:  # precision
                pos += 1
            else:
                _, pos = read_long(data, pos)
            c = data[pos]
            if c < 0x80 and not c & 1:
                end = pos + 1 + (c >> 1)
                pos += 1
            else:
                length, pos = read_long(data, pos)
                end = pos + length
            if end > size:
                raise IndexError
            value: Any = int(data[pos:end])
            pos = end
            if field.family == T.UNKNOWN:
                types[index] = "bigint"
        elif b == _B_CHARACTER:
            charset, pos = read_bytes(data, pos)
            raw, pos = read_bytes(data, pos)
            codec = codecs_.get(charset, False)
            if codec is False:
                codec = codecs_[charset] = codec_of(charset)
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
            raw, pos = read_bytes(data, pos)
            precision, pos = read_long(data, pos)
            scale, pos = read_long(data, pos)
            value = decimal_text(raw.decode("ascii"), scale)
            if field.family in (T.DECIMAL, T.UNKNOWN):
                types[index] = f"decimal({precision},{scale})" if precision > 0 <= scale else "decimal"
        elif b == _B_DATETIME:
            parts, pos = datetime_parts(data, pos)
            value = datetime_text(parts, field.temporal, layout.nanos)
            if field.text_type == UNKNOWN_TYPE:  # a code this source maps (an interval) keeps its type
                types[index] = inferred_temporal(parts)
        elif b == _B_FLOAT:
            if pos + 8 > size:
                raise IndexError
            value = _DOUBLE.unpack_from(data, pos)[0]
            _, pos = read_long(data, pos + 8)
            _, pos = read_long(data, pos)
            if field.family == T.UNKNOWN:
                types[index] = "double"
        elif b == _B_TIMESTAMP:
            seconds, pos = read_long(data, pos)
            micros, pos = read_long(data, pos)
            if not 0 <= micros <= 999_999:
                raise ValueError(f"Timestamp fraction {micros} is outside 0..999999 microseconds")
            value = V.timestamp_text_from_micros(seconds * 1_000_000 + micros)
            if field.family == T.UNKNOWN:
                types[index] = "timestamp"
        elif b == _B_TIMESTAMP_TZ:
            parts, pos = datetime_parts(data, pos)
            raw, pos = read_bytes(data, pos)
            value = zoned_text(parts, raw.decode("utf-8"), layout.nanos)
            if field.family == T.UNKNOWN:
                types[index] = "timestamp" if parts[0] is not None else "timetz"
        elif b == _B_BINARY_GEOMETRY:
            _, pos = read_bytes(data, pos)
            raw, pos = read_bytes(data, pos)
            value = base64.b64encode(V.geometry_wkb(raw)).decode("ascii")
            if field.family != T.BINARY:
                types[index] = "geometry"
        elif b == _B_TEXT_GEOMETRY:
            _, pos = read_bytes(data, pos)
            raw, pos = read_bytes(data, pos)
            value = raw.decode("utf-8")
            if field.family in (T.BINARY, T.UNKNOWN):
                types[index] = "text"
        elif b == _B_BINARY_OBJECT:
            raw, pos = read_bytes(data, pos)
            object_type = raw.decode("utf-8").upper()
            raw, pos = read_bytes(data, pos)
            if object_type in TEXT_OBJECT_TYPES or (field.family in TEXTUAL_FAMILIES
                                                     and object_type not in BINARY_OBJECT_TYPES):
                value = raw.decode("utf-8")
                if field.family == T.UNKNOWN:
                    types[index] = "text"
            else:
                value = base64.b64encode(raw).decode("ascii")
                if field.family != T.BINARY:
                    types[index] = field.binary_type if field.binary_type != field.text_type else "blob"
        elif b == _B_TEXT_OBJECT:
            _, pos = read_bytes(data, pos)
            raw, pos = read_bytes(data, pos)
            value = raw.decode("utf-8")
            if field.family == T.BOOLEAN:
                value = V.from_text(value, _BOOLEAN)
            elif field.family == T.UNKNOWN:
                types[index] = "text"
        elif b == _B_EMPTY_OBJECT:
            symbol, pos = read_long(data, pos)
            if symbol == 1:
                return NOT_CAPTURED, pos  # NONE: not captured, so not part of this image
            if symbol != 0:
                raise DecodeError(f"EmptyObject symbol index {symbol} (known: 0 NULL, 1 NONE)")
            value = None
        else:
            branch = read_long(data, pos - 1)[0] if b < 0x80 else b
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
        return encode(events, self.settings["schema-revision"])


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


FORMAT = DtsAvro

"""Canal-JSON ("flat message"): open-source Alibaba Canal, TiCDC's ``canal-json`` and Alibaba DTS "Canal Json".

One Kafka record holds one JSON object describing one binlog event: a DDL statement, or a row event whose
``data`` array may carry several rows. Specs: ``canal-json.md`` (open source and DTS) and
``ticdc-canal-json.md``. The three producers write the same shape, so one decoder reads them all:

- **open-source Canal**: full MySQL type text in ``mysqlType``; an UPDATE's ``old`` holds only the changed
  columns (possibly more, because Canal accumulates the changed set across the rows of one event, or
  ``{}``); the before image is completed from the after image.
- **TiCDC** (recognised by its ``_tidb`` member): ``commitTs`` is the exact commit TSO; ``TIDB_WATERMARK``
  messages become ``resolved`` events; ``mysqlType`` holds the base type only, so ENUM/SET values stay
  integers; ``old`` may hold every column. A row that TiCDC cut down to its handle key (``onlyHandleKey``
  or ``claimCheckLocation``) cannot be applied when it is an insert or update and fails with that reason;
  a key-only delete is complete. The whole value may be snappy- or lz4-compressed (option ``compression``).
- **DTS**: ``INIT`` (full load) rows are snapshot reads; ``DDL`` is any DDL, and a ``DDL`` whose statement
  is a TRUNCATE is a truncate. Instances created before 2022-03-20 swap ``data`` and ``old`` on UPDATE and
  put a DELETE's row in ``old``; nothing in the message says so, hence option ``dts-legacy-swap``. A DELETE
  whose row is only in ``old`` is read from there whatever the option says.

Values are strings typed by ``mysqlType`` (``sqlType`` codes only for columns without type text; they are
never trusted for UNSIGNED) and converted by :func:`cdclake.model.values.from_text`. Columns a row carries that
``mysqlType`` does not list keep their text and are reported with type ``unknown``.

Order: ``commit_ts`` is ``_tidb.commitTs`` when present, else ``es`` (epoch ms, one-second resolution in
open-source Canal). Canal writes no binlog position, so ``position`` is
``pad_position(gtid transaction number, Kafka offset, row index)``: the GTID transaction number (0 when
``gtid`` is absent or empty) orders transactions of one server that committed in the same second, the
offset orders the events of one transaction (several messages can share one GTID) and of producers without
GTIDs, and the row index orders the rows of one message. Nothing in a Canal message identifies a copy
(``id`` is a batch number shared by many messages, ``ts`` a build time shared by a batch), so a re-delivered
copy gets its own offset and is applied again where it lands; that is harmless unless a later change of
the same key in the same second (and GTID transaction) lies between original and copy. With TiCDC the
exact ``commitTs`` orders transactions, TiDB merges a row's changes in one transaction into one event, and
the position is the kind of change alone (``1`` delete, ``2`` update, ``3`` insert: TiCDC's order, so the
delete half of a key change precedes the insert half), so a redelivered copy is an exact replay.

The encoder (``canal/encoder.py``) writes what each producer writes (option ``flavour``).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any, ClassVar, Final, Literal

import msgspec
import numpy as np
import pyarrow as pa

from cdclake.formats.base import (
    CompiledRows,
    Decoded,
    DecodeError,
    Failure,
    Format,
    Option,
    decode_message,
    layout_id,
    reason,
    struct_name_ok,
)
from cdclake.formats.canal import encoder
from cdclake.formats.canal.encoder import WATERMARK, Texts
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
    Row,
    Source,
    pad_position,
)
from cdclake.model.records import Record
from cdclake.model.types import SqlType, parse_type
from cdclake.native.compiled import variable_array

try:
    from cdclake.native import _canal
except ImportError:  # built at install where a C compiler is present; the Python decoder does the same work
    _canal = None


# Canal's DDL event types (open source, TiCDC) and DTS's single "DDL".
_DDL_TYPES: Final = frozenset(("CREATE", "ALTER", "ERASE", "RENAME", "CINDEX", "DINDEX", "QUERY", "TRUNCATE",
                                "DDL"))
# Canal EventType members that are not changes; not expected in flat messages, skipped if they appear.
_CONTROL_TYPES: Final = frozenset(("GTID", "XACOMMIT", "XAROLLBACK", "MHEARTBEAT"))
_ROW_OPS: Final = {"INSERT": INSERT, "UPDATE": UPDATE, "DELETE": DELETE, "INIT": READ}
_TRUNCATE_SQL: Final = re.compile(r"^\s*(?:/\*.*?\*/\s*)*truncate\b", re.IGNORECASE | re.DOTALL)

# java.sql.Types code → type text, for columns whose mysqlType is missing or empty. UNSIGNED promotion
# (Canal and TiCDC bump the code by value, e.g. BIGINT UNSIGNED → DECIMAL) cannot be undone from the code.
_SQLTYPE_TEXT: Final = {
    -7: "bit", -6: "tinyint", 5: "smallint", 4: "int", -5: "bigint", 6: "double", 7: "float",
    8: "double", 2: "decimal", 3: "decimal", 91: "date", 92: "time", 93: "datetime", 1: "char", 12: "varchar",
    -1: "text", -15: "char", -9: "varchar", -16: "text", 2005: "text", 2011: "text", -2: "binary",
    -3: "varbinary", -4: "blob", 2004: "blob", 16: "boolean",
}

_NULL: Final = msgspec.Raw(b"null")
_NO_NAMES: Final[list[str]] = []
_NO_TXN: Final = "0" * 20 + "/"
_ROW_SUFFIXES: Final = 256
_ROW_SUFFIX: Final = tuple(f"{i:020d}" for i in range(_ROW_SUFFIXES))
# A message's first row: pad_position(txn, offset, 0) is txn + _FIRST_ROW % offset.
_FIRST_ROW: Final = "%020d/" + _ROW_SUFFIX[0]


class _Tidb(msgspec.Struct, gc=False):
    commitTs: int | None = None
    watermarkTs: int | None = None
    onlyHandleKey: bool = False
    claimCheckLocation: str | None = None


# gc=False: a message holds no reference cycles, and untracked objects make collections cheaper. The fields
# follow the members' order in open-source Canal's messages (fastjson writes them alphabetically): msgspec
# looks for each member from the field after the last one found.
class _Message(msgspec.Struct, kw_only=True, gc=False):
    # Kept raw: the type members key the schema cache and are decoded only when a schema is new; the
    # rows are decoded by their schema's own typed decoder.
    data: msgspec.Raw = _NULL
    database: str | None = None
    es: int | None = None
    gtid: str | None = None
    isDdl: bool | None = None
    mysqlType: msgspec.Raw = _NULL
    old: msgspec.Raw = _NULL
    pkNames: msgspec.Raw = _NULL
    sql: str | None = None
    sqlType: msgspec.Raw = _NULL
    table: str | None = None
    type: str
    tidb: _Tidb | None = msgspec.field(default=None, name="_tidb")


_decoder: Final = msgspec.json.Decoder(_Message)
_tidb_decoder: Final = msgspec.json.Decoder(_Tidb | None)
_type_map_decoder: Final = msgspec.json.Decoder(dict[str, str] | None)
_code_map_decoder: Final = msgspec.json.Decoder(dict[str, int] | None)
_names_decoder: Final = msgspec.json.Decoder(list[str] | None)
_texts_decoder: Final = msgspec.json.Decoder(list[Texts] | None)
_encoder: Final = msgspec.json.Encoder()
_to_builtins: Final = msgspec.to_builtins


def _layout_message_decoder(name: str, row_type: type) -> msgspec.json.Decoder[Any]:
    """A decoder of a whole row message of one layout, its rows typed by ``row_type``: one pass over the
    bytes instead of one for the message and one for each of ``data`` and ``old``.

    The rows need lax mode (numbers in strings), which would also loosen the message's own members, so
    those lax mode could coerce are read as they are written (``es`` and ``isDdl`` as any value, ``_tidb``
    raw): the caller takes the message only where ``_Message``'s strict types would."""
    rows = list[row_type] | None  # type: ignore[valid-type]
    # A literal type is decoded to the constant itself, whose hash is known: cheaper to look up.
    kinds = Literal["INSERT", "UPDATE", "DELETE", "INIT"]
    fields = [("data", rows, None), ("database", str | None, None), ("es", Any, None),
              ("gtid", str | None, None), ("isDdl", Any, None), ("mysqlType", msgspec.Raw, _NULL),
              ("old", rows, None), ("pkNames", msgspec.Raw, _NULL), ("sql", str | None, None),
              ("sqlType", msgspec.Raw, _NULL), ("table", str | None, None), ("type", kinds),
              ("tidb", msgspec.Raw, msgspec.field(default=_NULL, name="_tidb"))]
    message = msgspec.defstruct(name, fields, kw_only=True, gc=False)
    return msgspec.json.Decoder(message, strict=False)


Converter = Callable[[str], Any]

# Families whose canonical value from_text produces with a builtin (which msgspec also applies itself to a
# row's JSON strings) or leaves as the text; the rest go to from_text.
_BUILTIN: Final[dict[str, Converter]] = {T.INTEGER: int, T.YEAR: int, T.BIT: int, T.FLOAT: float,
                                         T.DOUBLE: float}
_AS_TEXT: Final = frozenset((T.TEXT, T.JSON, T.DATE, T.DATETIME, T.TIME, T.VECTOR, T.UNKNOWN))


def converter(t: SqlType, timestamp_zone: str | None, rule: V.FoldRule = "java") -> Converter | None:
    """The text → canonical value function of one column type (``None``: the text is the value).

    Equivalent to :func:`cdclake.model.values.from_text` (the tests hold them to it); it only picks, once per
    column, the cheapest way to the same value. (The row fast path lets msgspec parse integers and floats,
    which also accepts integral spellings such as ``"1.0"`` that ``int()`` refuses.)"""
    family = t.family
    if family in _AS_TEXT:
        return None
    builtin = _BUILTIN.get(family)
    if builtin is not None:
        return builtin
    slow = partial(V.from_text, t=t, timestamp_zone=timestamp_zone, rule=rule)
    if family == T.DECIMAL:
        return _decimal_converter(slow)
    if family in (T.ENUM, T.SET):
        return _Memo(slow).__getitem__  # few distinct values per column: remember each
    if family == T.TIMESTAMP and timestamp_zone and V.zone(timestamp_zone) is V.UTC:
        return _utc_timestamp_converter(slow)
    return slow


def _decimal_converter(slow: Converter) -> Converter:
    def decimal(text: str) -> Any:
        # Canal and TiCDC write plain text with the column's scale; only an exponent needs rewriting.
        return slow(text) if "e" in text or "E" in text else text

    return decimal


def _utc_timestamp_converter(slow: Converter) -> Converter:
    def timestamp(text: str) -> Any:
        # A UTC rendering only needs the canonical spelling; anything unusual takes the general path.
        fraction = text[19:]
        if (len(text) < 19 or text[10] != " " or text.startswith("0000-00-00")
                or (fraction and not (fraction[0] == "." and fraction[1:].isdigit()))):
            return slow(text)
        head = text[:10] + "T" + text[11:19]
        dt.datetime.fromisoformat(head)  # validates the date and the clock
        return head + fraction + "Z"

    return timestamp


class _Memo(dict[str, Any]):
    """Values already converted, keyed by their text; a miss converts and remembers (up to a bound)."""

    __slots__ = ("slow",)
    LIMIT: ClassVar = 1024

    def __init__(self, slow: Converter) -> None:
        super().__init__()
        self.slow = slow

    def __missing__(self, text: str) -> Any:
        value = self.slow(text)
        if len(self) < self.LIMIT:
            self[text] = value
        return value


def _columns(types: dict[str, str], pk: list[str]) -> list[Column]:
    keys = set(pk)
    columns = [Column(name, text or UNKNOWN_TYPE, name in keys) for name, text in types.items()]
    # Key columns the type map does not list are still key columns of the rows.
    return columns + [Column(name, UNKNOWN_TYPE, True) for name in pk if name not in types]


# The value kinds of the compiled decoder (_canal.c's K_*), by family: the canonical value from_text makes.
_TEXT_KIND, _UTC_TIMESTAMP_KIND, _ENUM_NUMBER_KIND, _ENUM_LABEL_KIND, _SET_LABEL_KIND = 0, 8, 5, 6, 9
_COMPILED_KINDS: Final = {**dict.fromkeys(_AS_TEXT, _TEXT_KIND), T.INTEGER: 1, T.YEAR: 1, T.BIT: 1, T.FLOAT: 2,
                          T.DOUBLE: 2, T.DECIMAL: 3, T.BINARY: 4, T.BOOLEAN: 7}
_COMPILED_OPS: Final = pa.array([INSERT, UPDATE, DELETE, READ], pa.string())  # _canal.c's OP_*
_text = partial(variable_array, pa.string())


class _Schema:
    """Everything one table layout (mysqlType, pkNames[, sqlType]) needs, built once.

    Rows decode on a fast path: a row Struct generated for the layout, which msgspec fills from the JSON
    with integers and floats already converted and which refuses columns the layout does not list; the
    remaining non-text columns then go through their converters. Whatever the fast path refuses (extra
    columns, unusual spellings, bad values) takes the slow path: plain text rows converted column by
    column, which keeps extra columns as text and names the column of a bad value.

    Once a layout is known, a whole message of it decodes in one pass (``message``), rows included; the
    layout is recognised by its members as written (``mysqlType``, ``pkNames`` and, when it supplies
    types, ``sqlType``)."""

    __slots__ = ("codes_raw", "columns", "convs", "fast", "known", "message", "pk", "pk_raw", "post",
                 "single_key", "types_raw")

    def __init__(self, database: str | None, table: str | None, types: dict[str, str], pk: list[str],
                 timestamp_zone: str | None, raw: tuple[msgspec.Raw, msgspec.Raw, msgspec.Raw | None],
                 rule: V.FoldRule = "java") -> None:
        # The raw members are views of one message's bytes, which stay referenced while the schema is.
        self.types_raw, self.pk_raw, self.codes_raw = raw
        self.pk = tuple(pk)
        self.single_key = pk[0] if len(pk) == 1 else None
        self.columns = _columns(types, pk)
        self.known = frozenset(c.name for c in self.columns)
        convs, post, fields = [], [], []
        for i, col in enumerate(self.columns):
            t = parse_type(col.type if col.type != UNKNOWN_TYPE else None)
            f = converter(t, timestamp_zone, rule)
            if f is not None:
                convs.append((col.name, f, t))
            native = _BUILTIN.get(t.family)
            if f is not None and native is None:
                post.append((col.name, f))
            fields.append((f"c{i}", (native or str) | None | msgspec.UnsetType,
                           msgspec.field(name=col.name, default=msgspec.UNSET)))
        self.convs: tuple[tuple[str, Converter, SqlType], ...] = tuple(convs)
        self.post: tuple[tuple[str, Converter], ...] = tuple(post)
        self.fast: msgspec.json.Decoder[Any] | None = None
        self.message: msgspec.json.Decoder[Any] | None = None
        if all(struct_name_ok(c.name) for c in self.columns):  # else only the general path reads the rows
            row_type = msgspec.defstruct("Row", fields, forbid_unknown_fields=True, gc=False)
            if fields:
                self.fast = msgspec.json.Decoder(list[row_type] | None, strict=False)  # type: ignore[valid-type]
            self.message = _layout_message_decoder("Message", row_type)

    def rows(self, raw: msgspec.Raw, member: str) -> tuple[list[Row] | None, list[str]]:
        """The rows of ``data`` or ``old`` as canonical values, and the names of columns they carry that
        the layout does not list."""
        fast = self.fast
        if fast is not None:
            try:
                rows: list[Row] | None = _to_builtins(fast.decode(raw))
                if self.post:
                    self.convert_post(rows)
                return rows, _NO_NAMES
            except (ValueError, ArithmeticError, UnicodeError):  # msgspec.ValidationError is a ValueError
                pass  # the general path says which column and why
        try:
            texts = _texts_decoder.decode(raw)
        except msgspec.ValidationError as exc:
            raise DecodeError(f"{member}: {exc}") from None
        if texts is None:
            return None, _NO_NAMES
        known = self.known
        extra = [name for row in texts if not row.keys() <= known for name in row if name not in known]
        return [self.convert(row, self.convs) for row in texts], extra

    def convert_post(self, rows: list[Row] | None) -> None:
        """Converts, in place, the fast path's rows' values that msgspec leaves as text."""
        for row in rows or ():
            for name, f in self.post:
                text = row.get(name)
                if text is not None:
                    row[name] = f(text)

    def columns_with(self, extra: list[str]) -> list[Column]:
        """The layout's columns, plus columns rows carry that it does not list (as ``unknown``)."""
        if not extra:
            return self.columns
        return self.columns + [Column(name, UNKNOWN_TYPE) for name in dict.fromkeys(extra)]

    @staticmethod
    def convert(row: dict[str, Any], convs: tuple[tuple[str, Converter, SqlType], ...]) -> Row:
        """Canonical values, in place: the row dict is the decoder's own, fresh for every message."""
        for name, f, t in convs:
            text = row.get(name)
            if text is not None:
                try:
                    row[name] = f(text)
                except (ValueError, ArithmeticError, UnicodeError) as exc:
                    raise DecodeError(f"column {name!r}: value {text[:60]!r} does not fit type "
                                      f"{T.type_text(t)} ({exc})") from None
        return row


# TiCDC: the commit TSO orders transactions and TiDB merges one row's changes in a transaction into one
# event, so within a commit only the kind of change matters (TiCDC's own order: delete < update < insert,
# as the delete half of a key change precedes the insert half). The position then depends on the message
# alone, and a redelivered copy is recognised as a replay.
_TSO_RANK: Final = {DELETE: "1", UPDATE: "2", INSERT: "3", READ: "3"}

# The one-pass decode of a row message (by the layout of the last one) is tried while it mostly fits: a fit
# earns a credit (up to _MAX_CREDIT), a miss (a wasted pass) costs _MISS_COST, and while in debt messages
# take the general path, each repaying one. A switch between runs of one table's messages then costs one
# wasted pass, and a topic whose messages interleave layouts tries (and wastes) rarely.
_MAX_CREDIT: Final = 16
_MISS_COST: Final = 16


def _gtid_number(gtid: str | None) -> int:
    """The transaction number of a MySQL (``uuid:n``) or MariaDB (``domain-server-seq``) GTID; 0 if none."""
    if not gtid:
        return 0
    tail = gtid.rpartition(":")[2] if ":" in gtid else gtid
    tail = tail.rpartition("-")[2]
    return int(tail) if tail.isdigit() else 0


def _decompressor(name: str) -> Callable[[bytes], bytes]:
    """snappy: block format; lz4: frame format (TiCDC's large-message-handle-compression)."""
    if name == "snappy":
        import snappy

        return snappy.uncompress
    import lz4.frame

    return lz4.frame.decompress


class CanalJson(Format):
    name = "canal-json"
    options = (
        Option("timestamp-zone", "UTC", "Time zone the producer rendered TIMESTAMP values in (Canal: its JVM's "
               "zone; TiCDC: its server's zone); they become UTC. Empty: keep them as written."),
        Option("dts-legacy-swap", False, "DTS instances created before 2022-03-20: UPDATE has data/old swapped "
               "and DELETE carries its row in old."),
        Option("compression", "none", "Whole-value compression (TiCDC large-message-handle-compression).",
               ("none", "snappy", "lz4")),
        Option("flavour", "canal", "What the encoder writes: open-source Canal, TiCDC (with _tidb), or DTS; "
               "tidb also makes the decoder read a TIMESTAMP in a DST fold as TiCDC (Go) does (as it does anyway for "
               "a message with _tidb).",
               ("canal", "tidb", "dts")),
    )

    # Bounds the converter cache: a producer that changes schemas forever must not grow it forever.
    MAX_SCHEMAS: ClassVar = 4096

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._zone: str | None = self.settings["timestamp-zone"] or None
        if self._zone:  # an unknown zone fails here, at configuration, not on every record
            V.checked_zone(self._zone, f"{self.name}: option timestamp-zone")
        # TiCDC resolves a DST fold by Go's rule, Canal and DTS (Java) by the earlier offset; a message with
        # ``_tidb`` is TiCDC's whatever the flavour says (see _schema)
        self._rule: V.FoldRule = "go" if self.settings["flavour"] == "tidb" else "java"
        self._swap: bool = self.settings["dts-legacy-swap"]
        self._compressed = self.settings["compression"] != "none"
        self._schemas: dict[tuple[str | None, str | None], _Schema] = {}
        # The layout of the last row message the general path decoded, tried first on the next ones: a
        # table's changes tend to come in runs.
        self._guess: _Schema | None = None
        self._credit = 0
        # The compiled decoder's layouts (by raw mysqlType and pkNames), their column lists as JSON and their ids.
        self._compiled: dict[bytes, Any] = {}
        self._compiled_columns: list[bytes] = []
        self._compiled_ids: list[int] = []

    def __getstate__(self) -> dict[str, Any]:
        # Executors rebuild the converter caches; they are not worth shipping (the compiled one cannot be).
        return {**self.__dict__, "_schemas": {}, "_guess": None, "_compiled": {}, "_compiled_columns": [],
                "_compiled_ids": []}

    # ------------------------------------------------------------------------------- the compiled path

    def decode_arrow(self, values: pa.Array, offsets: pa.Array) -> CompiledRows | None:
        """The row messages of an Arrow batch decoded by ``_canal.c`` into changelog columns; it leaves to
        :meth:`decode` whatever it cannot decode exactly as :meth:`decode` would (see the C file)."""
        if (_canal is None or not len(values) or self._compressed or self._swap or values.type != pa.binary()
                or offsets.type != pa.int64() or offsets.null_count or len(values) != len(offsets)):
            return None
        if values.offset % 8:  # the validity bitmap must start at a whole byte
            values = pa.concat_arrays([values])
        if len(self._compiled) >= self.MAX_SCHEMAS:
            self._compiled.clear()
            self._compiled_columns.clear()
            self._compiled_ids.clear()
        n = len(values)
        valid, value_offsets, data = values.buffers()
        start = values.offset
        (events, records, seq, op, layout, commit_ts, ts_ms, ts_ms_valid, database, table, key, before_key, after,
         position, left) = _canal.decode(
            value_offsets[start * 4:(start + n + 1) * 4], data or pa.py_buffer(b""),
            None if valid is None or not values.null_count else valid[start // 8:],
            offsets.buffers()[1][offsets.offset * 8:(offsets.offset + n) * 8], n,
            self._compiled_layout, self._compiled)
        layout_numbers = np.frombuffer(layout, np.int32)
        columns = {
            "op": _COMPILED_OPS.take(np.frombuffer(op, np.int8)), "database": _text(database),
            "table": _text(table), "key": _text(key), "before_key": _text(before_key), "after": _text(after),
            "layout": pa.array(np.array(self._compiled_ids, np.int64)[layout_numbers], pa.int64()),
            "commit_ts": pa.Array.from_buffers(pa.int64(), events, [None, pa.py_buffer(commit_ts)]),
            "position": _text(position),
            "ts_ms": pa.Array.from_buffers(pa.int64(), events, [pa.py_buffer(ts_ms_valid), pa.py_buffer(ts_ms)]),
            "seq": pa.Array.from_buffers(pa.int32(), events, [None, pa.py_buffer(seq)]),
        }
        used = {self._compiled_ids[i]: self._compiled_columns[i] for i in np.unique(layout_numbers).tolist()}
        return CompiledRows(np.frombuffer(records, np.int32), columns, np.frombuffer(left, np.int32), used)

    def _compiled_layout(self, types_raw: bytes, pk_raw: bytes) -> tuple[Any, ...] | None:
        """What ``_canal.c`` needs of a layout: its number, column names (raw and as JSON members), value
        kinds and key columns; ``None`` for a layout it leaves to the Python decoder."""
        try:
            types = _type_map_decoder.decode(types_raw) or {}
            pk = _names_decoder.decode(pk_raw) or []
        except (msgspec.DecodeError, UnicodeDecodeError):
            return None
        # Layouts that take types from sqlType, have no key or untyped columns: rare, and the Python path's.
        if not types or "" in types.values() or not pk or not set(pk) <= types.keys():
            return None
        columns = _columns(types, pk)
        if any(c.type == UNKNOWN_TYPE for c in columns):
            return None
        parsed = [parse_type(c.type) for c in columns]
        kinds = [self._compiled_kind(t) for t in parsed]
        if None in kinds:
            return None
        self._compiled_columns.append(_encoder.encode(columns))
        self._compiled_ids.append(layout_id(self._compiled_columns[-1]))
        return (len(self._compiled_columns) - 1, [c.name.encode() for c in columns],
                [_encoder.encode(c.name) + b":" for c in columns], kinds,
                [[label.encode() for label in t.members] for t in parsed], [i for i, c in enumerate(columns) if c.key])

    def _compiled_kind(self, t: SqlType) -> int | None:
        if t.family == T.TIMESTAMP:  # as converter(): UTC needs the canonical spelling, another zone a conversion
            if not self._zone:
                return _TEXT_KIND
            return _UTC_TIMESTAMP_KIND if V.zone(self._zone) is V.UTC else None
        if t.family in (T.ENUM, T.SET):
            return (_ENUM_NUMBER_KIND if not t.members else _ENUM_LABEL_KIND if t.family == T.ENUM
                    else _SET_LABEL_KIND)
        return _COMPILED_KINDS.get(t.family)

    # ---------------------------------------------------------------------------------------- decoding

    def decode(self, records: Sequence[Record], more: bool = False) -> Decoded:
        # The base loop, with each record's Source given to its events as they are made.
        out = Decoded()
        events, failures, name = out.events, out.failures, self.name
        for record in records:
            try:
                got = self._events(record, Source(name, record.topic, record.partition, record.offset))
            except self.fatal:
                raise
            except Exception as exc:
                failures.append(Failure(record, name, reason(exc)))
                continue
            if got:
                events.extend(got)
            else:
                out.skipped += 1
        return out

    def decode_record(self, record: Record) -> list[ChangeEvent]:
        return self._events(record, None)

    def _events(self, record: Record, source: Source | None) -> list[ChangeEvent]:
        value = record.value
        if value is None:
            return []  # a tombstone: Canal never writes one, log compaction may
        if not value:
            raise DecodeError("empty message value")
        if self._compressed:
            decompress = _decompressor(self.settings["compression"])
            try:
                value = decompress(value)
            except Exception as exc:
                raise DecodeError(f"value is not {self.settings['compression']}-compressed "
                                  f"({type(exc).__name__}: {exc})") from None
        guess = self._guess
        if guess is not None:
            if self._credit < 0:
                self._credit += 1
            else:
                got = self._layout_rows(guess, value, record.offset, source)
                if got is not None:
                    if self._credit < _MAX_CREDIT:
                        self._credit += 1
                    return got
                self._credit -= _MISS_COST
        msg = decode_message(_decoder, value, "Canal-JSON")
        kind = msg.type
        # isDdl decides (canal-json.md §10 item 2; TiCDC's rule too): a DDL whatever its type says, its data and
        # old ignored. A row type with no statement is neither a DDL nor a change that can be trusted.
        if msg.isDdl:
            if kind in _ROW_OPS and not (msg.sql or "").strip():
                raise DecodeError(f"message has isDdl true, row type {kind} and no sql: neither a DDL nor a row")
            return [self._ddl(msg, record.offset, source)]
        op = _ROW_OPS.get(kind)
        if op is not None:
            return self._rows(msg, op, record.offset, source)
        if kind in _DDL_TYPES:
            return [self._ddl(msg, record.offset, source)]
        if kind == WATERMARK:
            if msg.tidb is None or msg.tidb.watermarkTs is None:
                raise DecodeError("TIDB_WATERMARK message without _tidb.watermarkTs")
            return [ChangeEvent(kind=RESOLVED, commit_ts=msg.tidb.watermarkTs, source=source)]
        if kind in _CONTROL_TYPES:
            return []
        raise DecodeError(f"unknown Canal event type {kind!r}")

    def _ddl(self, msg: _Message, offset: int, source: Source | None) -> ChangeEvent:
        sql = msg.sql or ""
        # Canal classifies a statement by its type; DTS's "DDL" and an unknown type leave it to the SQL.
        classified = msg.type in _DDL_TYPES and msg.type != "DDL"
        truncate = msg.type == "TRUNCATE" or (not classified and _TRUNCATE_SQL.match(sql) is not None)
        database, table = ddl_text.changed_table(sql, msg.database, msg.table)
        return ChangeEvent(kind=TRUNCATE if truncate else DDL, database=database, table=table,
                           commit_ts=self._commit_ts(msg),
                           position=pad_position(_gtid_number(msg.gtid), offset, 0), ts_ms=msg.es,
                           ddl=None if truncate else sql, source=source)

    @staticmethod
    def _commit_ts(msg: _Message) -> int | None:
        tidb = msg.tidb
        if tidb is not None and tidb.commitTs is not None:
            return tidb.commitTs
        return msg.es

    def _schema(self, msg: _Message) -> _Schema:
        """The schema of a layout the cache does not hold (for the message's table), built and cached."""
        try:
            types = _type_map_decoder.decode(msg.mysqlType) or {}
            pk = _names_decoder.decode(msg.pkNames) or []
            codes = None
            if not types or "" in types.values():
                codes = _code_map_decoder.decode(msg.sqlType) or {}
        except msgspec.ValidationError as exc:
            raise DecodeError(f"not a Canal-JSON message: {exc}") from None
        if codes:
            # Columns without type text take it from sqlType (which then belongs to the layout).
            types = {column: types.get(column) or _SQLTYPE_TEXT.get(codes.get(column, 0), "")
                     for column in dict.fromkeys([*types, *codes])}
        if len(self._schemas) >= self.MAX_SCHEMAS:
            self._schemas.clear()
        raw = (msg.mysqlType, msg.pkNames, None if codes is None else msg.sqlType)
        rule: V.FoldRule = "go" if msg.tidb is not None else self._rule
        schema = self._schemas[(msg.database, msg.table)] = _Schema(msg.database, msg.table, types, pk,
                                                                   self._zone, raw, rule)
        return schema

    def _rows(self, msg: _Message, op: str, offset: int, source: Source | None) -> list[ChangeEvent]:
        if not msg.table:
            raise DecodeError(f"{msg.type} message without table")
        tidb = msg.tidb
        if tidb is not None and (tidb.onlyHandleKey or tidb.claimCheckLocation) and op != DELETE:
            where = f" (full message at {tidb.claimCheckLocation})" if tidb.claimCheckLocation else ""
            raise DecodeError(f"{msg.type} carries only the handle-key columns{where}: the row cannot be "
                              f"applied")
        # The schema cache's hit test, inlined: this is the path of every message the one-pass decode does
        # not take. Per table, the cache holds the last layout seen: comparing raw members is cheaper than
        # hashing them.
        schema = self._schemas.get((msg.database, msg.table))
        if (schema is None or msg.mysqlType != schema.types_raw or msg.pkNames != schema.pk_raw
                or (schema.codes_raw is not None and msg.sqlType != schema.codes_raw)):
            schema = self._schema(msg)
        self._guess = schema
        data, extra = schema.rows(msg.data, "data")
        old: list[Row] | None = None
        if op == UPDATE or (op == DELETE and (self._swap or not data)):
            old, old_extra = schema.rows(msg.old, "old")
            if old_extra:
                extra = extra + old_extra
        return self._emit(msg, op, tidb, schema, data, old, extra, offset, source)

    def _layout_rows(self, schema: _Schema, value: bytes, offset: int,
                     source: Source | None) -> list[ChangeEvent] | None:
        """The events of a row message of ``schema``'s layout, decoded in one pass; ``None`` for any other
        message and for anything unusual, which the general path then decodes (and reports)."""
        if schema.message is None:
            return None
        try:
            msg = schema.message.decode(value)
        except Exception:
            return None
        op = _ROW_OPS[msg.type]
        is_ddl, es = msg.isDdl, msg.es
        # The members _Message types strictly, checked here; and the layout the rows were typed by.
        if (not msg.table or not (is_ddl is None or is_ddl is False)
                or not (es is None or type(es) is int)
                or msg.mysqlType != schema.types_raw or msg.pkNames != schema.pk_raw
                or (schema.codes_raw is not None and msg.sqlType != schema.codes_raw)):
            return None
        tidb: _Tidb | None = None
        if msg.tidb is not _NULL:
            try:
                tidb = _tidb_decoder.decode(msg.tidb)
            except msgspec.DecodeError:
                return None
            if tidb is not None and (tidb.onlyHandleKey or tidb.claimCheckLocation) and op != DELETE:
                return None
        data = msg.data
        old: list[Row] | None = None
        swap = self._swap
        if op == UPDATE or (op == DELETE and (swap or not data)):
            data, old = _to_builtins((data, msg.old))
        else:
            data = _to_builtins(data)
        if schema.post:
            try:
                schema.convert_post(data)
                schema.convert_post(old)
            except (ValueError, ArithmeticError, UnicodeError):
                return None
        if swap or data is None or len(data) != 1 or (old is not None and len(old) != 1):
            return self._emit(msg, op, tidb, schema, data, old, _NO_NAMES, offset, source)
        # The usual message, one row: the event _emit would make, made here without its loop and
        # branches; a missing key column is left to the general path to report.
        image = data[0]
        if op == DELETE:
            before, after = image, None
        elif old is None:
            before, after = None, image
        else:
            before, after = {**image, **old[0]}, image
        single_key = schema.single_key
        try:
            if single_key is not None:
                key: Row | None = {single_key: image[single_key]}
            else:
                key = {name: image[name] for name in schema.pk} if schema.pk else None
        except KeyError:
            return None
        if tidb is not None and tidb.commitTs is not None:
            commit_ts, position = tidb.commitTs, _TSO_RANK[op]
        else:
            commit_ts = es
            gtid = msg.gtid
            position = ("%020d/" % _gtid_number(gtid) if gtid else _NO_TXN) + _FIRST_ROW % offset  # noqa: UP031
        return [ChangeEvent(kind=ROW, op=op, database=msg.database, table=msg.table, key=key, before=before,
                            after=after, columns=schema.columns, commit_ts=commit_ts, position=position,
                            ts_ms=es, source=source)]

    def _emit(self, msg: Any, op: str, tidb: _Tidb | None, schema: _Schema, data: list[Row] | None,
              old: list[Row] | None, extra: list[str], offset: int, source: Source | None) -> list[ChangeEvent]:
        """The events of a row message whose rows are decoded (``old`` only where the op reads it)."""
        swap = self._swap
        columns = schema.columns_with(extra) if extra else schema.columns
        if op == DELETE and old and (swap or not data):
            images, partial_images = old, None  # DTS legacy: the deleted row is in old
        elif op == UPDATE and swap:
            if data is None or old is None:
                raise DecodeError("UPDATE (dts-legacy-swap) without both data and old rows")
            images, partial_images = data, old  # legacy: data = before, old = after
        else:
            if data is None:
                raise DecodeError(f"{msg.type} message without data rows")
            images, partial_images = data, old
        if partial_images is not None and len(partial_images) != len(images):
            raise DecodeError(f"UPDATE has {len(images)} data rows but {len(partial_images)} old rows")
        pk = schema.pk
        single_key = schema.single_key
        database, table, es = msg.database, msg.table, msg.es
        prefix: str | None = None
        if tidb is not None and tidb.commitTs is not None:
            commit_ts = tidb.commitTs
            position = _TSO_RANK[op]
        else:
            commit_ts = es
            gtid = msg.gtid
            # pad_position(txn, offset, row), spelled out: this is the hot loop
            prefix = ("%020d/" % _gtid_number(gtid) if gtid else _NO_TXN) + "%020d/" % offset  # noqa: UP031
        swapped = swap and op == UPDATE
        events = []
        for i, image in enumerate(images):
            if op == DELETE:
                before, after, identity = image, None, image
            elif partial_images is None:
                before, after, identity = None, image, image
            elif swapped:
                # complete_before(image, old): a dict merge keeps the first image's order and appends
                # the columns only the second has, which is exactly complete_before's order.
                before = image
                after = identity = {**image, **partial_images[i]}
            else:
                before, after, identity = {**image, **partial_images[i]}, image, image
            try:
                if single_key is not None:
                    key: Row | None = {single_key: identity[single_key]}
                else:
                    key = {name: identity[name] for name in pk} if pk else None
            except KeyError as exc:
                raise DecodeError(f"{msg.type} row {i} lacks primary-key column {exc}") from None
            if prefix is not None:
                position = prefix + (_ROW_SUFFIX[i] if i < _ROW_SUFFIXES else f"{i:020d}")
            events.append(ChangeEvent(
                kind=ROW, op=op, database=database, table=table, key=key, before=before, after=after,
                columns=columns, commit_ts=commit_ts, position=position, ts_ms=es, source=source))
        return events

    def encode(self, events: Iterable[ChangeEvent]) -> list[Record]:
        return encoder.encode(events, self.settings)


FORMAT = CanalJson

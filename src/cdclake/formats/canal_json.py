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
never trusted for UNSIGNED) and converted by :func:`cdclake.values.from_text`. Columns a row carries that
``mysqlType`` does not list keep their text and are reported with type ``unknown``.

Order: ``commit_ts`` is ``_tidb.commitTs`` when present, else ``es`` (epoch ms, one-second resolution in
open-source Canal). Canal writes no binlog position, so ``position`` is
``pad_position(gtid transaction number, Kafka offset, row index)``: the GTID transaction number (0 when
``gtid`` is absent or empty) orders transactions of one server that committed in the same second across
re-deliveries, the offset orders the events of one transaction (several messages can share one GTID) and
of producers without GTIDs, and the row index orders the rows of one message. A re-delivered copy has a
different offset, so it is not dropped as an exact replay, but it sorts next to the original (it carries
the same ``commit_ts`` and transaction number), which makes re-applying it harmless.

The encoder writes what each producer writes (option ``flavour``): ``canal`` (full type text, partial
``old``, null members written, members in alphabetical order as fastjson writes them), ``tidb`` (``_tidb``
with the commit TSO, base-type ``mysqlType``, complete ``old``, plain-notation floats, watermarks for
``resolved`` events, whole-value compression) and ``dts`` (``INIT`` for snapshot reads, ``DDL`` type, members
that do not apply omitted, legacy layout with ``dts-legacy-swap``). Canal and DTS cannot carry ``resolved``
events; the encoder leaves them out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from decimal import Decimal
from functools import partial
from typing import Any, ClassVar, Final

import msgspec

from cdclake import types as T
from cdclake import values as V
from cdclake.events import (
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
    complete_before,
    pad_position,
)
from cdclake.formats.base import DecodeError, Format, Option
from cdclake.records import Record
from cdclake.types import SqlType, parse_type

Texts = dict[str, str | None]

# Canal's DDL event types (open source, TiCDC) and DTS's single "DDL".
_DDL_TYPES: Final = frozenset(("CREATE", "ALTER", "ERASE", "RENAME", "CINDEX", "DINDEX", "QUERY", "DDL"))
# Canal EventType members that are not changes; not expected in flat messages, skipped if they appear.
_CONTROL_TYPES: Final = frozenset(("GTID", "XACOMMIT", "XAROLLBACK", "MHEARTBEAT"))
_ROW_OPS: Final = {"INSERT": INSERT, "UPDATE": UPDATE, "DELETE": DELETE, "INIT": READ}
_WATERMARK: Final = "TIDB_WATERMARK"
_TRUNCATE_SQL: Final = re.compile(r"^\s*(?:/\*.*?\*/\s*)*truncate\b", re.IGNORECASE | re.DOTALL)

# java.sql.Types code → type text, for columns whose mysqlType is missing or empty. UNSIGNED promotion
# (Canal and TiCDC bump the code by value, e.g. BIGINT UNSIGNED → DECIMAL) cannot be undone from the code.
_SQLTYPE_TEXT: Final = {
    -7: "bit(64)", -6: "tinyint", 5: "smallint", 4: "int", -5: "bigint", 6: "double", 7: "float",
    8: "double", 2: "decimal", 3: "decimal", 91: "date", 92: "time", 93: "datetime", 1: "char", 12: "varchar",
    -1: "text", -15: "char", -9: "varchar", -16: "text", 2005: "text", 2011: "text", -2: "binary",
    -3: "varbinary", -4: "blob", 2004: "blob", 16: "boolean",
}

_NULL: Final = msgspec.Raw(b"null")
_NEEDS_CODES: Final = object()  # schema-cache marker: the mysqlType lacks types, the key needs sqlType


class _Tidb(msgspec.Struct):
    commitTs: int | None = None
    watermarkTs: int | None = None
    onlyHandleKey: bool = False
    claimCheckLocation: str | None = None


class _Message(msgspec.Struct):
    type: str
    database: str | None = None
    table: str | None = None
    isDdl: bool | None = None
    es: int | None = None
    sql: str | None = None
    gtid: str | None = None
    # Kept raw: they key the per-schema converter cache and are decoded only when a schema is new.
    pkNames: msgspec.Raw = _NULL
    mysqlType: msgspec.Raw = _NULL
    sqlType: msgspec.Raw = _NULL
    data: list[Texts] | None = None
    old: list[Texts] | None = None
    tidb: _Tidb | None = msgspec.field(default=None, name="_tidb")


_decoder: Final = msgspec.json.Decoder(_Message)
_type_map_decoder: Final = msgspec.json.Decoder(dict[str, str] | None)
_code_map_decoder: Final = msgspec.json.Decoder(dict[str, int] | None)
_names_decoder: Final = msgspec.json.Decoder(list[str] | None)
_encoder: Final = msgspec.json.Encoder()

Converter = Callable[[str], Any]

# Families whose canonical value from_text produces with a builtin or leaves as the text; the hot loop
# calls the builtin directly (or nothing) and leaves every other family to from_text itself.
_BUILTIN: Final[dict[str, Converter]] = {T.INTEGER: int, T.YEAR: int, T.BIT: int, T.FLOAT: float,
                                         T.DOUBLE: float}
_AS_TEXT: Final = frozenset((T.TEXT, T.JSON, T.DATE, T.DATETIME, T.TIME, T.VECTOR, T.UNKNOWN))


def converter(t: SqlType, timestamp_zone: str | None) -> Converter | None:
    """The text → canonical value function of one column type (``None``: the text is the value)."""
    if t.family in _AS_TEXT:
        return None
    builtin = _BUILTIN.get(t.family)
    if builtin is not None:
        return builtin
    return partial(V.from_text, t=t, timestamp_zone=timestamp_zone)


class _Schema:
    """What one (mysqlType, pkNames[, sqlType]) combination needs, built once: the columns to report,
    the converters of the columns whose text is not their value, the key column names."""

    __slots__ = ("columns", "convs", "known", "pk")

    def __init__(self, types: dict[str, str], pk: list[str], timestamp_zone: str | None) -> None:
        keys = set(pk)
        self.pk = tuple(pk)
        self.columns = [Column(name, text or UNKNOWN_TYPE, name in keys) for name, text in types.items()]
        # Key columns the type map does not list are still key columns of the rows.
        self.columns += [Column(name, UNKNOWN_TYPE, True) for name in pk if name not in types]
        self.known = frozenset(c.name for c in self.columns)
        convs = []
        for col in self.columns:
            t = parse_type(col.type if col.type != UNKNOWN_TYPE else None)
            f = converter(t, timestamp_zone)
            if f is not None:
                convs.append((col.name, f, t))
        self.convs: tuple[tuple[str, Converter, SqlType], ...] = tuple(convs)

    def columns_for(self, rows: list[Texts]) -> list[Column]:
        """The columns, plus any a row carries that the type map does not list (as ``unknown``)."""
        extra: dict[str, None] = {}
        for row in rows:
            if not row.keys() <= self.known:
                extra.update((name, None) for name in row if name not in self.known)
        if not extra:
            return self.columns
        return self.columns + [Column(name, UNKNOWN_TYPE) for name in extra]

    def convert(self, row: Texts) -> Row:
        """Canonical values, in place: the row dict is the decoder's own, fresh for every message."""
        values: Row = row
        for name, f, t in self.convs:
            text = row.get(name)
            if text is not None:
                try:
                    values[name] = f(text)
                except (ValueError, ArithmeticError, UnicodeError) as exc:
                    raise DecodeError(f"column {name!r}: value {text[:60]!r} does not fit type "
                                      f"{T.type_text(t)} ({exc})") from None
        return values


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


def _compressor(name: str) -> Callable[[bytes], bytes]:
    if name == "snappy":
        import snappy

        return snappy.compress
    import lz4.frame

    return lz4.frame.compress


class CanalJson(Format):
    name = "canal-json"
    options = (
        Option("timestamp-zone", "UTC", "Time zone the producer rendered TIMESTAMP values in (Canal: its JVM's "
               "zone; TiCDC: its server's zone); they become UTC. Empty: keep them as written."),
        Option("dts-legacy-swap", False, "DTS instances created before 2022-03-20: UPDATE has data/old swapped "
               "and DELETE carries its row in old."),
        Option("compression", "none", "Whole-value compression (TiCDC large-message-handle-compression).",
               ("none", "snappy", "lz4")),
        Option("flavour", "canal", "What the encoder writes: open-source Canal, TiCDC (with _tidb), or DTS.",
               ("canal", "tidb", "dts")),
    )

    # Bounds the converter cache: a producer that changes schemas forever must not grow it forever.
    MAX_SCHEMAS: ClassVar = 4096

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._zone: str | None = self.settings["timestamp-zone"] or None
        if self._zone:
            V.zone(self._zone)  # an unknown zone fails here, at configuration, not on every record
        self._swap: bool = self.settings["dts-legacy-swap"]
        self._schemas: dict[bytes, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        # Executors rebuild the converter cache; it is not worth shipping.
        return {**self.__dict__, "_schemas": {}}

    # ---------------------------------------------------------------------------------------- decoding

    def decode_record(self, record: Record) -> list[ChangeEvent]:
        value = record.value
        if value is None:
            return []  # a tombstone: Canal never writes one, log compaction may
        if not value:
            raise DecodeError("empty message value")
        if self.settings["compression"] != "none":
            decompress = _decompressor(self.settings["compression"])
            try:
                value = decompress(value)
            except Exception as exc:
                raise DecodeError(f"value is not {self.settings['compression']}-compressed "
                                  f"({type(exc).__name__}: {exc})") from None
        try:
            msg = _decoder.decode(value)
        except msgspec.ValidationError as exc:
            raise DecodeError(f"not a Canal-JSON message: {exc}") from None
        except msgspec.DecodeError as exc:
            raise DecodeError(f"invalid JSON: {exc}") from None
        kind = msg.type
        op = _ROW_OPS.get(kind)
        if op is not None:
            if msg.isDdl:
                raise DecodeError(f"message has isDdl true but row type {kind}")
            return self._rows(msg, op, record.offset)
        if kind in _DDL_TYPES or kind == TRUNCATE.upper():
            return [self._ddl(msg, record.offset)]
        if kind == _WATERMARK:
            if msg.tidb is None or msg.tidb.watermarkTs is None:
                raise DecodeError("TIDB_WATERMARK message without _tidb.watermarkTs")
            return [ChangeEvent(kind=RESOLVED, commit_ts=msg.tidb.watermarkTs)]
        if kind in _CONTROL_TYPES:
            return []
        raise DecodeError(f"unknown Canal event type {kind!r}")

    def _ddl(self, msg: _Message, offset: int) -> ChangeEvent:
        sql = msg.sql or ""
        truncate = msg.type == "TRUNCATE" or (msg.type == "DDL" and _TRUNCATE_SQL.match(sql) is not None)
        return ChangeEvent(kind=TRUNCATE if truncate else DDL, database=msg.database or None,
                           table=msg.table or None, commit_ts=self._commit_ts(msg),
                           position=pad_position(_gtid_number(msg.gtid), offset, 0), ts_ms=msg.es,
                           ddl=None if truncate else sql)

    @staticmethod
    def _commit_ts(msg: _Message) -> int | None:
        tidb = msg.tidb
        if tidb is not None and tidb.commitTs is not None:
            return tidb.commitTs
        return msg.es

    def _schema(self, msg: _Message) -> _Schema:
        key = bytes(msg.mysqlType) + b"\x00" + bytes(msg.pkNames)
        schema = self._schemas.get(key)
        if schema is _NEEDS_CODES:
            key += b"\x00" + bytes(msg.sqlType)
            schema = self._schemas.get(key)
        return schema if schema is not None else self._new_schema(msg, key)

    def _new_schema(self, msg: _Message, key: bytes) -> _Schema:
        try:
            types = _type_map_decoder.decode(msg.mysqlType) or {}
            pk = _names_decoder.decode(msg.pkNames) or []
            codes = _code_map_decoder.decode(msg.sqlType) or {} if not types or "" in types.values() else None
        except msgspec.ValidationError as exc:
            raise DecodeError(f"not a Canal-JSON message: {exc}") from None
        if len(self._schemas) >= self.MAX_SCHEMAS:
            self._schemas.clear()
        if codes is not None:
            # Columns without type text take it from sqlType, so sqlType joins the cache key.
            if key.count(b"\x00") == 1:
                self._schemas[key] = _NEEDS_CODES
                key += b"\x00" + bytes(msg.sqlType)
            types = {name: types.get(name) or _SQLTYPE_TEXT.get(codes.get(name, 0), "")
                     for name in dict.fromkeys([*types, *codes])}
        schema = self._schemas[key] = _Schema(types, pk, self._zone)
        return schema

    def _rows(self, msg: _Message, op: str, offset: int) -> list[ChangeEvent]:
        database, table = msg.database, msg.table
        if not table:
            raise DecodeError(f"{msg.type} message without table")
        data, old = msg.data, msg.old
        if op == DELETE and (self._swap or not data) and old:
            images, partial_images = old, None  # DTS legacy: the deleted row is in old
        elif op == UPDATE and self._swap:
            if data is None or old is None:
                raise DecodeError("UPDATE (dts-legacy-swap) without both data and old rows")
            images, partial_images = data, old  # legacy: data = before, old = after
        else:
            if data is None:
                raise DecodeError(f"{msg.type} message without data rows")
            images, partial_images = data, old if op == UPDATE else None
        if partial_images is not None and len(partial_images) != len(images):
            raise DecodeError(f"UPDATE has {len(images)} data rows but {len(partial_images)} old rows")
        tidb = msg.tidb
        if tidb is not None and (tidb.onlyHandleKey or tidb.claimCheckLocation) and op != DELETE:
            where = f" (full message at {tidb.claimCheckLocation})" if tidb.claimCheckLocation else ""
            raise DecodeError(f"{msg.type} carries only the handle-key columns{where}: the row cannot be "
                              f"applied")
        schema = self._schema(msg)
        columns = schema.columns_for(images if partial_images is None else images + partial_images)
        pk = schema.pk
        commit_ts = self._commit_ts(msg)
        txn = _gtid_number(msg.gtid)
        es = msg.es
        swapped = self._swap and op == UPDATE
        events = []
        for i, texts in enumerate(images):
            image = schema.convert(texts)
            if op == DELETE:
                before, after = image, None
            elif partial_images is None:
                before, after = None, image
            elif swapped:
                before, after = image, complete_before(image, schema.convert(partial_images[i]))
            else:
                before, after = complete_before(image, schema.convert(partial_images[i])), image
            identity = after if after is not None else before
            for name in pk:
                if name not in identity:
                    raise DecodeError(f"{msg.type} row {i} lacks primary-key column {name!r}")
            events.append(ChangeEvent(
                kind=ROW, op=op, database=database, table=table,
                key={name: identity[name] for name in pk} if pk else None,
                before=before, after=after, columns=columns, commit_ts=commit_ts,
                position=pad_position(txn, offset, i), ts_ms=es))
        return events

    # ---------------------------------------------------------------------------------------- encoding

    def encode(self, events: Iterable[ChangeEvent]) -> list[Record]:
        flavour = self.settings["flavour"]
        compression = self.settings["compression"]
        compress = _compressor(compression) if flavour == "tidb" and compression != "none" else None
        records: list[Record] = []
        for event in events:
            message = self._message(event, flavour, len(records) + 1)
            if message is None:
                continue
            if flavour == "dts":
                message = {name: value for name, value in message.items() if value is not None}
            value = _encoder.encode(message)
            if compress is not None:
                value = compress(value)
            records.append(Record(value=value, offset=len(records), timestamp=message.get("ts")))
        return records

    def _message(self, e: ChangeEvent, flavour: str, number: int) -> dict[str, Any] | None:
        if flavour == "tidb" and e.commit_ts is not None:
            es = e.commit_ts >> 18  # the physical part of the TSO, as TiCDC writes es
        elif e.ts_ms is not None:
            es = e.ts_ms
        else:
            es = e.commit_ts or 0
        if e.kind == RESOLVED:
            if flavour != "tidb" or e.commit_ts is None:
                return None
            return _tidb_order(database="", table="", type=_WATERMARK, es=es, ts=es,
                               watermark=e.commit_ts)
        if e.kind in (DDL, TRUNCATE):
            sql = e.ddl or ""
            if e.kind == TRUNCATE:
                sql = e.ddl or f"TRUNCATE TABLE {_quoted(e.database, e.table)}"
                kind = "DDL" if flavour == "dts" else "TRUNCATE"
            else:
                kind = "DDL" if flavour == "dts" else ddl_type(sql)
            if flavour == "tidb":
                return _tidb_order(database=e.database or "", table=e.table or "", type=kind, es=es, ts=es,
                                   sql=sql, is_ddl=True, commit_ts=e.commit_ts)
            return _canal_order(database=e.database or "", table=e.table or "", type=kind, es=es,
                                ts=es, id=number, sql=sql, is_ddl=True)
        if e.kind != ROW:
            raise ValueError(f"canal-json cannot encode a {e.kind!r} event")
        return self._row_message(e, flavour, es, number)

    def _row_message(self, e: ChangeEvent, flavour: str, es: int, number: int) -> dict[str, Any]:
        columns = e.columns or [Column(name) for name in {**(e.before or {}), **(e.after or {})}]
        key_names = [c.name for c in columns if c.key] or list(e.key or ())
        parsed = {c.name: parse_type(c.type if c.type != UNKNOWN_TYPE else None) for c in columns}
        zone = self._zone
        tidb = flavour == "tidb"
        text_of = _tidb_text if tidb else V.to_text

        def texts(row: Row | None) -> Texts | None:
            if row is None:
                return None
            return {name: text_of(value, parsed.get(name) or _UNKNOWN, zone) for name, value in row.items()}

        after, before = texts(e.after), texts(e.before)
        sample = after if after is not None else before or {}
        kind = {INSERT: "INSERT", UPDATE: "UPDATE", DELETE: "DELETE"}.get(e.op or "")
        if e.op == READ:
            kind = "INIT" if flavour == "dts" else "INSERT"
        if kind is None:
            raise ValueError(f"canal-json cannot encode op {e.op!r}")
        data: list[Texts] | None
        old: list[Texts] | None = None
        if kind == "DELETE":
            data = [before if before is not None else after or {}]
            if flavour == "dts" and self._swap:
                data, old = None, data
        else:
            data = [after if after is not None else {}]
            if kind == "UPDATE" and before is not None:
                if flavour == "canal":
                    # Canal's old holds the columns whose text changed.
                    new = data[0]
                    old = [{name: text for name, text in before.items() if new.get(name, _ABSENT) != text}]
                elif flavour == "dts" and self._swap:
                    data, old = [before], data
                else:
                    old = [before]
        mysql_types = {c.name: _type_text(c, parsed[c.name], tidb) for c in columns}
        sql_types = {c.name: java_type(parsed[c.name], sample.get(c.name)) for c in columns}
        if tidb:
            return _tidb_order(database=e.database or "", table=e.table or "", type=kind, es=es, ts=es,
                               pk=key_names, sql_types=sql_types, mysql_types=mysql_types, old=old, data=data,
                               commit_ts=e.commit_ts)
        return _canal_order(database=e.database or "", table=e.table or "", type=kind, es=es, ts=es,
                            id=number, pk=key_names or None, sql_types=sql_types, mysql_types=mysql_types,
                            old=old, data=data)


_UNKNOWN: Final = SqlType(T.UNKNOWN, T.UNKNOWN)
_ABSENT: Final = object()


def _canal_order(*, database: str, table: str, type: str, es: int, ts: int, id: int, sql: str = "",
                 is_ddl: bool = False, pk: list[str] | None = None, sql_types: dict[str, int] | None = None,
                 mysql_types: dict[str, str] | None = None, old: list[Texts] | None = None,
                 data: list[Texts] | None = None) -> dict[str, Any]:
    # fastjson writes members in alphabetical order, nulls included.
    return {"data": data, "database": database, "es": es, "id": id, "isDdl": is_ddl, "mysqlType": mysql_types,
            "old": old, "pkNames": pk, "sql": sql, "sqlType": sql_types, "table": table, "ts": ts, "type": type}


def _tidb_order(*, database: str, table: str, type: str, es: int, ts: int, sql: str = "", is_ddl: bool = False,
                pk: list[str] | None = None, sql_types: dict[str, int] | None = None,
                mysql_types: dict[str, str] | None = None, old: list[Texts] | None = None,
                data: list[Texts] | None = None, commit_ts: int | None = None,
                watermark: int | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {
        "id": 0, "database": database, "table": table, "pkNames": pk, "isDdl": is_ddl, "type": type, "es": es,
        "ts": ts, "sql": sql, "sqlType": sql_types, "mysqlType": mysql_types, "old": old, "data": data}
    if watermark is not None:
        message["_tidb"] = {"watermarkTs": watermark}
    elif commit_ts is not None:
        message["_tidb"] = {"commitTs": commit_ts}
    return message


def _quoted(database: str | None, table: str | None) -> str:
    name = "`" + (table or "").replace("`", "``") + "`"
    return "`" + database.replace("`", "``") + "`." + name if database else name


def _tidb_text(value: Any, t: SqlType, zone: str | None) -> str | None:
    """TiCDC writes FLOAT/DOUBLE in plain notation (shortest round-trip digits, never an exponent)."""
    if t.family in (T.FLOAT, T.DOUBLE) and isinstance(value, float):
        return format(Decimal(repr(value)), "f")
    return V.to_text(value, t, zone)


def _type_text(column: Column, t: SqlType, base_only: bool) -> str:
    """``mysqlType`` text: the column's own for Canal and DTS; TiCDC's base name with `` unsigned``."""
    if column.type == UNKNOWN_TYPE:
        return ""
    if not base_only:
        return column.type
    unsigned = t.unsigned and t.family in (T.INTEGER, T.DECIMAL, T.FLOAT, T.DOUBLE)
    return t.name + (" unsigned" if unsigned else "")


_JAVA_BY_NAME: Final = {"tinyint": -6, "bool": -6, "boolean": -6, "smallint": 5, "mediumint": 4, "int": 4,
                        "integer": 4, "bigint": -5, "float": 7, "double": 8, "char": 1, "varchar": 12,
                        "year": 12, "json": 12, "vector": 12, "enum": 4, "set": -7, "bit": -7, "date": 91,
                        "time": 92, "datetime": 93, "timestamp": 93}
_JAVA_BY_FAMILY: Final = {T.DECIMAL: 3, T.TEXT: 2005, T.BINARY: 2004, T.FLOAT: 7, T.DOUBLE: 8, T.INTEGER: 4}
# UNSIGNED integers whose value exceeds the signed maximum get the next larger code (per row).
_PROMOTED: Final = {"tinyint": (127, 5), "smallint": (32767, 4), "int": (2**31 - 1, -5),
                    "integer": (2**31 - 1, -5), "bigint": (2**63 - 1, 3)}


def java_type(t: SqlType, text: str | None = None) -> int:
    """The ``sqlType`` code Canal and TiCDC write for a column type and (for UNSIGNED promotion) a value."""
    code = _JAVA_BY_NAME.get(t.name) or _JAVA_BY_FAMILY.get(t.family, 1111)
    if t.unsigned and text is not None and t.name in _PROMOTED:
        limit, promoted = _PROMOTED[t.name]
        if text.isdigit() and int(text) > limit:
            return promoted
    return code


_DDL_KINDS: Final = (
    (re.compile(r"create\s+(?:temporary\s+)?table\b"), "CREATE"),
    (re.compile(r"create\s+(?:unique\s+|fulltext\s+|spatial\s+)?index\b"), "CINDEX"),
    (re.compile(r"drop\s+index\b"), "DINDEX"),
    (re.compile(r"alter\s+table\b"), "ALTER"),
    (re.compile(r"drop\s+(?:temporary\s+)?table\b"), "ERASE"),
    (re.compile(r"rename\s+tables?\b"), "RENAME"),
    (re.compile(r"truncate\b"), "TRUNCATE"),
)


def ddl_type(sql: str) -> str:
    """Canal's classification of a DDL statement, as its DDL parser makes it; ``QUERY`` for the rest."""
    head = re.sub(r"^\s*(?:/\*.*?\*/\s*)*", "", sql, flags=re.DOTALL).lower()
    for pattern, kind in _DDL_KINDS:
        if pattern.match(head):
            return kind
    return "QUERY"


FORMAT = CanalJson

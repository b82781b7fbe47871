"""``canal-json``'s encoder: canonical events → the messages each producer writes (option ``flavour``).

``canal`` (full type text, partial ``old``, null members written, members in alphabetical order as fastjson writes
them), ``tidb`` (``_tidb`` with the commit TSO, base-type ``mysqlType``, complete ``old``, plain-notation floats,
watermarks for ``resolved`` events, whole-value compression) and ``dts`` (``INIT`` for snapshot reads, ``DDL`` type,
members that do not apply omitted, legacy layout with ``dts-legacy-swap``). Canal and DTS cannot carry ``resolved``
events; the encoder leaves them out."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import Any, Final

import msgspec

from cdclake.model import ddl as ddl_text
from cdclake.model import events as E
from cdclake.model import types as T
from cdclake.model import values as V
from cdclake.model.events import ChangeEvent, Column, Row
from cdclake.model.records import Record
from cdclake.model.types import SqlType, parse_type

Texts = dict[str, str | None]

# The type of TiCDC's watermark messages, which carry a resolved timestamp.
WATERMARK: Final = "TIDB_WATERMARK"

_encoder: Final = msgspec.json.Encoder()


def encode(events: Iterable[ChangeEvent], settings: Mapping[str, Any]) -> list[Record]:
    """The records the producer ``settings["flavour"]`` names writes for ``events``."""
    flavour = settings["flavour"]
    compression = settings["compression"]
    zone: str | None = settings["timestamp-zone"] or None
    swap: bool = settings["dts-legacy-swap"]
    compress = _compressor(compression) if flavour == "tidb" and compression != "none" else None
    records: list[Record] = []
    for event in events:
        message = _message(event, flavour, len(records) + 1, zone, swap)
        if message is None:
            continue
        if flavour == "dts":
            message = {name: value for name, value in message.items() if value is not None}
        value = _encoder.encode(message)
        if compress is not None:
            value = compress(value)
        records.append(Record(value=value, offset=len(records), timestamp=message.get("ts")))
    return records

def _message(e: ChangeEvent, flavour: str, number: int, zone: str | None, swap: bool) -> dict[str, Any] | None:
    if flavour == "tidb" and e.commit_ts is not None:
        es = e.commit_ts >> 18  # the physical part of the TSO, as TiCDC writes es
    elif e.ts_ms is not None:
        es = e.ts_ms
    else:
        es = e.commit_ts or 0
    if e.kind == E.RESOLVED:
        if flavour != "tidb" or e.commit_ts is None:
            return None
        return _tidb_order(database="", table="", type=WATERMARK, es=es, ts=es,
                           watermark=e.commit_ts)
    if e.kind in (E.DDL, E.TRUNCATE):
        sql = e.ddl or ""
        if e.kind == E.TRUNCATE:
            sql = e.ddl or f"TRUNCATE TABLE {ddl_text.qualified(e.database, e.table)}"
            kind = "DDL" if flavour == "dts" else "TRUNCATE"
        else:
            kind = "DDL" if flavour == "dts" else ddl_type(sql)
        database, table = ddl_text.message_table(sql, e.database, e.table)
        if flavour == "tidb":
            return _tidb_order(database=database or "", table=table or "", type=kind, es=es, ts=es,
                               sql=sql, is_ddl=True, commit_ts=e.commit_ts)
        return _canal_order(database=database or "", table=table or "", type=kind, es=es,
                            ts=es, id=number, sql=sql, is_ddl=True)
    if e.kind != E.ROW:
        raise ValueError(f"canal-json cannot encode a {e.kind!r} event")
    return _row_message(e, flavour, es, number, zone, swap)

def _row_message(e: ChangeEvent, flavour: str, es: int, number: int, zone: str | None, swap: bool
                 ) -> dict[str, Any]:
    columns = e.columns or [Column(name) for name in {**(e.before or {}), **(e.after or {})}]
    key_names = [c.name for c in columns if c.key] or list(e.key or ())
    parsed = {c.name: parse_type(c.type if c.type != E.UNKNOWN_TYPE else None) for c in columns}
    tidb = flavour == "tidb"
    text_of = _tidb_text if tidb else V.to_text

    def texts(row: Row | None) -> Texts | None:
        if row is None:
            return None
        return {name: text_of(value, parsed.get(name) or _UNKNOWN, zone) for name, value in row.items()}

    after, before = texts(e.after), texts(e.before)
    sample = after if after is not None else before or {}
    kind = {E.INSERT: "INSERT", E.UPDATE: "UPDATE", E.DELETE: "DELETE"}.get(e.op or "")
    if e.op == E.READ:
        kind = "INIT" if flavour == "dts" else "INSERT"
    if kind is None:
        raise ValueError(f"canal-json cannot encode op {e.op!r}")
    data: list[Texts] | None
    old: list[Texts] | None = None
    if kind == "DELETE":
        data = [before if before is not None else after or {}]
        if flavour == "dts" and swap:
            data, old = None, data
    else:
        data = [after if after is not None else {}]
        if kind == "UPDATE" and before is not None:
            if flavour == "canal":
                # Canal's old holds the columns whose text changed.
                new = data[0]
                old = [{name: text for name, text in before.items() if new.get(name, _ABSENT) != text}]
            elif flavour == "dts" and swap:
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


def _compressor(name: str) -> Callable[[bytes], bytes]:
    if name == "snappy":
        import snappy

        return snappy.compress
    import lz4.frame

    return lz4.frame.compress


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


def _tidb_text(value: Any, t: SqlType, zone: str | None) -> str | None:
    """TiCDC writes FLOAT/DOUBLE in plain notation (shortest round-trip digits, never an exponent)."""
    if t.family in (T.FLOAT, T.DOUBLE) and isinstance(value, float):
        return format(Decimal(repr(value)), "f")
    return V.to_text(value, t, zone)


def _type_text(column: Column, t: SqlType, base_only: bool) -> str:
    """``mysqlType`` text: the column's own for Canal and DTS; TiCDC's base name with `` unsigned``."""
    if column.type == E.UNKNOWN_TYPE:
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

"""The DTS encoder: canonical events as DTS Record datums (fastavro's dict form), written with fastavro; the
decoder's independent check in the tests."""

from __future__ import annotations

import io
from collections.abc import Iterable
from decimal import Decimal
from typing import Any, Final

import msgspec
from fastavro import parse_schema, schemaless_writer

from cdclake.formats.dts.schema import NAMESPACE, RECORD_SCHEMA, RECORD_SCHEMA_R1
from cdclake.model import ddl as ddl_text
from cdclake.model import types as T
from cdclake.model import values as V
from cdclake.model.events import DDL, DELETE, INSERT, READ, ROW, TRUNCATE, UPDATE, ChangeEvent, Column
from cdclake.model.records import Record


def encode(events: Iterable[ChangeEvent], revision: str) -> list[Record]:
    """One record per event, written with the schema of ``revision`` (``r2`` or ``r1``)."""
    schema = parse_schema(RECORD_SCHEMA if revision == "r2" else RECORD_SCHEMA_R1)
    records: list[Record] = []
    for index, event in enumerate(events):
        datum = _datum(event, index)
        if revision == "r1":
            datum.pop("bornTimestamp")
        out = io.BytesIO()
        schemaless_writer(out, schema, datum)
        records.append(Record(value=out.getvalue(), offset=index, timestamp=event.ts_ms))
    return records


def _escape(component: str) -> str:
    return component.replace(".", "\\u002E")


def object_name(database: str | None, table: str | None) -> str | None:
    """The ``objectName`` DTS writes for a database and table (``schema.table`` names stay dotted)."""
    if database is None:
        return None
    if table is None:
        return _escape(database)
    return f"{_escape(database)}.{_escape(table)}"


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

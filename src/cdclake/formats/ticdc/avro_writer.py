"""The TiCDC Avro encoder's parts: each column's field and its canonical → wire converter, a table's registered
schemas (:class:`Writer`), and one row change written with them."""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Final, NamedTuple

from cdclake.formats.avro.datum import write_payload
from cdclake.formats.avro.framing import SchemaId
from cdclake.formats.avro.names import sanitize
from cdclake.formats.avro.registry.base import SchemaRegistry
from cdclake.formats.ticdc.avro_schema import (
    CHECKSUM_FIELD,
    CHECKSUM_FIELDS,
    CHECKSUM_VERSION_FIELD,
    COMMIT_TS_FIELD,
    CORRUPTED_FIELD,
    EXTENSION_FIELDS,
    OP_FIELD,
    PHYSICAL_TIME_FIELD,
    U64,
    Converter,
)
from cdclake.formats.ticdc.checksum import RowChecksum, column_encoder, join_allowed
from cdclake.model import types as T
from cdclake.model import values as V
from cdclake.model.events import DELETE, INSERT, READ, ChangeEvent, Column
from cdclake.model.types import parse_type

_I63: Final = 1 << 63


def _bit_bytes(value: int) -> bytes:
    return int(value).to_bytes(max(1, (int(value).bit_length() + 7) // 8), "big")


def _signed_long(value: int) -> int:
    return value - U64 if value >= _I63 else value


class WireColumn(NamedTuple):
    name: str  # the event's column name
    field: dict[str, Any]
    to_wire: Converter | None
    checksum: Any


def wire_column(col: Column, key: bool, settings: dict[str, Any]) -> WireColumn:
    """The Avro field TiCDC writes for a column, and the canonical → wire converter."""
    t = parse_type(col.type)
    family = t.family
    zone = settings["timestamp-zone"]
    avro: str = "string"
    params: dict[str, str] = {}
    extra: dict[str, Any] = {}
    to_wire: Converter | None = None
    scale: int | None = None
    allowed: tuple[str, ...] = ()
    if family in (T.INTEGER, T.BOOLEAN):
        bits = t.bits or 8
        if bits == 64:
            tidb = "BIGINT UNSIGNED" if t.unsigned else "BIGINT"
            avro = "long"
            if t.unsigned:
                as_text = settings["bigint-unsigned-handling-mode"] == "string"
                avro, to_wire = ("string", str) if as_text else ("long", _signed_long)
        else:
            tidb = "INT UNSIGNED" if t.unsigned else "INT"
            avro = "long" if t.unsigned and bits == 32 else "int"
        if family == T.BOOLEAN:
            to_wire = int
    elif family == T.YEAR:
        tidb, avro = "YEAR", "int"
    elif family in (T.FLOAT, T.DOUBLE):
        tidb = avro = family
        tidb = tidb.upper()
    elif family == T.DECIMAL:
        tidb = "DECIMAL"
        scale = t.scale  # None: string mode writes each value's own digits
        if settings["decimal-handling-mode"] == "precise":
            scale = T.fixed_scale(t, col.name, "ticdc-avro's decimal-handling-mode=precise")
            avro = "bytes"
            extra = {"logicalType": "decimal", "precision": t.length or 10, "scale": scale}
            to_wire = Decimal
        else:
            to_wire = lambda value, scale=scale: V.decimal_text(value, scale)  # noqa: E731
    elif family == T.BIT:
        tidb, avro, to_wire = "BIT", "bytes", _bit_bytes
        params["length"] = str(t.length or 1)
    elif family == T.TEXT:
        tidb = "TEXT"
    elif family == T.BINARY:
        tidb, avro, to_wire = "BLOB", "bytes", V.unb64
    elif family == T.JSON:
        tidb = "JSON"
    elif family in (T.ENUM, T.SET):
        if not t.members:
            raise ValueError(f"ticdc-avro: column {col.name} of type {col.type!r} lists no members")
        tidb = family.upper()
        allowed = t.members
        params["allowed"] = join_allowed(allowed)
        to_wire = (
            (lambda value, t=t: V.enum_value(value, t) if isinstance(value, int) else value)
            if family == T.ENUM
            else (lambda value, t=t: V.set_value(value, t) if isinstance(value, int) else value)
        )
    elif family in (T.DATE, T.DATETIME, T.TIME):
        tidb = family.upper()
    elif family == T.TIMESTAMP:
        tidb = "TIMESTAMP"
        to_wire = lambda value, zone=zone: (  # noqa: E731
            V.utc_timestamp_to_local(value, zone) if value.endswith("Z") else value
        )
    elif family == T.VECTOR:
        tidb = "TiDBVECTORFloat32"
    else:
        raise ValueError(f"ticdc-avro: column {col.name} has type {col.type!r}, which TiCDC cannot write")
    avro_type = {"type": avro, "connect.parameters": {"tidb_type": tidb, **params}, **extra}
    name = sanitize(col.name)
    nullable = not key and col.nullable is not False
    if nullable:
        field = {"default": None, "name": name, "type": ["null", avro_type]}
    else:
        field = {"name": name, "type": avro_type}
    return WireColumn(col.name, field, to_wire, column_encoder(tidb, allowed, scale, zone))


class Writer(NamedTuple):
    topic: str
    key_id: SchemaId
    key_parsed: Any
    value_id: SchemaId
    value_parsed: Any
    key_cols: tuple[WireColumn, ...]
    cols: tuple[WireColumn, ...]
    checksum: RowChecksum | None


def to_wire(col: WireColumn, value: Any) -> Any:
    if value is None or col.to_wire is None:
        return value
    return col.to_wire(value)


def new_writer(event: ChangeEvent, columns: tuple[Column, ...], s: dict[str, Any], registry: SchemaRegistry
               ) -> Writer:
    """The schemas TiCDC writes for the table of ``event`` with these columns, registered (subjects
    ``<topic>-key`` and ``<topic>-value``, ``.`` replaced by ``_``)."""
    key_names = [c.name for c in columns if c.key] or list(event.key or ())
    if not key_names:
        raise ValueError(
            f"ticdc-avro: {event.database}.{event.table} has no key columns; TiCDC writes Avro only for "
            "tables with a primary key or a NOT NULL unique key"
        )
    by_name = {c.name: c for c in columns}
    unknown = [n for n in key_names if n not in by_name]
    if unknown:
        raise ValueError(f"ticdc-avro: key column(s) {', '.join(unknown)} are not among the event's columns")
    cols = tuple(wire_column(c, c.name in key_names, s) for c in columns)
    key_cols = tuple(wire_column(by_name[n], True, s) for n in key_names)
    database, table = event.database or "", event.table or ""
    namespace = sanitize(s["namespace"]) + ("." + sanitize(database) if database else "")
    fields: list[dict[str, Any]] = [c.field for c in cols]
    if s["enable-tidb-extension"]:
        fields += EXTENSION_FIELDS
    checksum = None
    if s["integrity-check-level"] == "correctness":
        fields += CHECKSUM_FIELDS
        checksum = RowChecksum([c.checksum for c in cols])
    head = {"type": "record", "name": sanitize(table), "namespace": namespace}
    key_schema = {**head, "fields": [c.field for c in key_cols]}
    value_schema = {**head, "fields": fields}
    topic = s["topic"].replace("{schema}", database).replace("{table}", table)
    subject = topic.replace(".", "_")
    key_id = registry.register(subject + "-key", key_schema)
    value_id = registry.register(subject + "-value", value_schema)
    return Writer(
        topic, key_id, registry.schema(key_id), value_id, registry.schema(value_id), key_cols, cols, checksum
    )


def write(
    writer: Writer, op: str, row: dict[str, Any], event: ChangeEvent, extension: bool
) -> tuple[bytes, bytes | None, int | None]:
    """The key, value (None for a delete: a tombstone) and timestamp of one row change; ``extension``:
    enable-tidb-extension."""
    key_datum = {c.field["name"]: to_wire(c, row.get(c.name)) for c in writer.key_cols}
    key = write_payload(writer.key_id, writer.key_parsed, key_datum)
    timestamp = event.ts_ms
    if op == DELETE:
        return key, None, timestamp
    datum = {c.field["name"]: to_wire(c, row.get(c.name)) for c in writer.cols}
    crc = writer.checksum(list(datum.values())) if writer.checksum is not None else 0
    if extension:
        commit_ts = event.commit_ts or 0
        datum[OP_FIELD] = "c" if op in (INSERT, READ) else "u"
        datum[COMMIT_TS_FIELD] = commit_ts
        datum[PHYSICAL_TIME_FIELD] = commit_ts >> 18
        if commit_ts:
            timestamp = commit_ts >> 18
    if writer.checksum is not None:
        datum[CHECKSUM_FIELD] = str(crc)
        datum[CORRUPTED_FIELD] = False
        datum[CHECKSUM_VERSION_FIELD] = 0
    return key, write_payload(writer.value_id, writer.value_parsed, datum), timestamp

"""``debezium-avro``: Debezium change events written by Confluent's AvroConverter.

Key and value are each Confluent-framed (``0x00``, 4-byte big-endian schema id, Avro binary), or framed
by AWS Glue's converter (``0x03``, compression, the schema version's UUID), or with ``framing=apicurio`` by
Apicurio Registry's (the id in a header, or ``0x00`` and an 8- or 4-byte id: :mod:`cdclake.formats.avro.framing`);
writer schemas come from the registry named by the ``registry`` option and are compiled once per id. Semantic
types are read from the ``connect.name``/``connect.parameters`` properties and the ``decimal`` logical type
into the same :class:`~cdclake.formats.debezium.schema.FieldSpec` the JSON converter builds, so both
converters share every rule of :mod:`cdclake.formats.debezium.converters`. Logical types are stripped before
fastavro compiles the schema: the common converters want the raw wire values (days, millis, unscaled
bytes), not fastavro's ``date``/``Decimal`` objects. Union order does not matter (the writer schema says
which branch was written). Avro record and field names may be sanitised, so table identity comes from
``source.db``/``source.table`` and column names from ``__debezium.source.column.name`` where present.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

import msgspec

from cdclake.errors import RegistryError
from cdclake.formats.avro.datum import read_payload, write_payload
from cdclake.formats.avro.framing import SchemaId, apicurio_framed, header_id, readable
from cdclake.formats.avro.names import lookup, register, sanitize
from cdclake.formats.avro.reader import compile_reader
from cdclake.formats.avro.registry import registry_from
from cdclake.formats.avro.registry.base import SchemaRegistry, parse
from cdclake.formats.base import DecodeError, Option
from cdclake.formats.debezium.converters import RowShape, Wire
from cdclake.formats.debezium.encoder import EnvelopeWriter, TableSchema
from cdclake.formats.debezium.envelope import Source, envelope_events, key_names_of, schema_change_events
from cdclake.formats.debezium.options import DebeziumFormat
from cdclake.formats.debezium.schema import (
    CONNECT_DATE,
    CONNECT_TIME,
    CONNECT_TIMESTAMP,
    DECIMAL,
    MICRO_TIME,
    MICRO_TIMESTAMP,
    FieldSpec,
    envelope_rows,
    structured,
)
from cdclake.model.events import ChangeEvent, Row
from cdclake.model.records import Record

_AVRO_TO_CONNECT: Final = {"int": "int32", "long": "int64", "float": "float", "double": "double",
                           "boolean": "boolean", "string": "string", "bytes": "bytes"}
_CONNECT_TO_AVRO: Final = {"int8": "int", "int16": "int", "int32": "int", "int64": "long", "float": "float",
                           "double": "double", "boolean": "boolean", "string": "string", "bytes": "bytes"}
_LOGICAL: Final = {"date": CONNECT_DATE, "time-millis": CONNECT_TIME, "timestamp-millis": CONNECT_TIMESTAMP,
                   "time-micros": MICRO_TIME, "timestamp-micros": MICRO_TIMESTAMP}
_LOGICAL_OF: Final = {CONNECT_DATE: "date", CONNECT_TIME: "time-millis", CONNECT_TIMESTAMP: "timestamp-millis"}
_json: Final = msgspec.json.Encoder()


# ------------------------------------------------------------------------------- Avro → FieldSpec

def avro_spec(schema: Any, name: str = "", names: dict[str, Any] | None = None, namespace: str = "",
              optional: bool = False) -> FieldSpec:
    """A :class:`FieldSpec` from an Avro schema as the Confluent converter writes Connect schemas."""
    names = {} if names is None else names
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) != 1:
            raise DecodeError(f"field {name!r}: union {_brief(schema)} is not an optional value")
        return avro_spec(branches[0], name, names, namespace, len(branches) < len(schema))
    if isinstance(schema, str):
        if schema in _AVRO_TO_CONNECT:
            return FieldSpec(name, _AVRO_TO_CONNECT[schema], optional=optional)
        target = lookup(names, schema, namespace)
        if target is None:
            raise DecodeError(f"field {name!r}: unknown Avro type {schema!r}")
        return avro_spec(target, name, names, namespace, optional)
    if not isinstance(schema, dict):
        raise DecodeError(f"field {name!r}: {_brief(schema)} is not an Avro schema")
    kind = schema.get("type")
    if isinstance(kind, list | dict):
        return avro_spec(kind, name, names, namespace, optional)
    connect_name = schema.get("connect.name")
    params = dict(schema.get("connect.parameters") or {})
    if kind in ("record", "enum", "fixed"):
        namespace = register(schema, names, namespace)
    if kind == "record":
        fields = schema.get("fields")
        if not isinstance(fields, list):
            raise DecodeError(f"record {schema.get('name')!r} has no fields list")
        specs = tuple(avro_spec(f.get("type"), str(f.get("name")), names, namespace) for f in fields)
        return FieldSpec(name, "struct", connect_name, _params(params), optional, specs)
    if kind == "array":
        return FieldSpec(name, "array", connect_name, _params(params), optional,
                         items=avro_spec(schema.get("items"), f"{name}[]", names, namespace))
    if kind == "map":
        return FieldSpec(name, "map", connect_name, _params(params), optional,
                         items=avro_spec(schema.get("values"), f"{name}{{}}", names, namespace))
    if kind == "enum":
        return FieldSpec(name, "string", connect_name, _params(params), optional)
    if kind == "fixed":
        kind = "bytes"
    if kind not in _AVRO_TO_CONNECT:
        raise DecodeError(f"field {name!r}: unknown Avro type {kind!r}")
    logical = schema.get("logicalType")
    if logical == "decimal":
        connect_name = DECIMAL
        params["scale"] = str(schema.get("scale", 0))  # the Avro property is authoritative
        if "precision" in schema:
            params.setdefault("connect.decimal.precision", str(schema["precision"]))
    elif connect_name is None and logical in _LOGICAL:
        connect_name = _LOGICAL[logical]
    connect_type = schema.get("connect.type") or _AVRO_TO_CONNECT[kind]
    return FieldSpec(name, str(connect_type), connect_name, _params(params), optional)


def _params(params: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple((str(k), str(v)) for k, v in params.items())


def _brief(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def without_logical_types(schema: Any) -> Any:
    """A copy of ``schema`` without ``logicalType``, so that fastavro yields the raw wire values."""
    if isinstance(schema, dict):
        return {k: without_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [without_logical_types(v) for v in schema]
    return schema


class _Reader:
    """One writer schema, compiled: the fastavro schema, a generated reader, and for change envelopes
    the row shapes."""

    __slots__ = ("after", "before", "fast", "parsed", "schema_id")

    def __init__(self, schema_id: SchemaId, raw: dict[str, Any], wire: Wire, *, key: bool) -> None:
        self.schema_id = schema_id
        stripped = without_logical_types(raw)
        try:
            self.parsed = parse(stripped)
        except Exception as exc:
            raise DecodeError(f"schema id {schema_id} is not a valid Avro schema: {exc}") from None
        self.fast = compile_reader(stripped, "<debezium-avro reader>")
        spec = avro_spec(raw)
        self.before = self.after = None
        if key:
            self.after = RowShape(spec, wire) if spec.type == "struct" else None
            return
        before, after = envelope_rows(spec) if spec.type == "struct" else (None, None)
        self.before = RowShape(before, wire) if before is not None else None
        self.after = (self.before if after is before else RowShape(after, wire)) if after is not None else None

    def read(self, data: bytes) -> Any:
        if self.fast is not None:
            try:
                return self.fast(data)
            except Exception:
                pass  # the reference path below gives the exact result or error
        return read_payload(self.parsed, data, self.schema_id)


def _row(shape: RowShape | None, row: Any) -> Row | None:
    if row is None or shape is None:
        return row
    return shape.convert(list(row.values()))


class DebeziumAvro(DebeziumFormat):
    name = "debezium-avro"
    options = (*DebeziumFormat.options,
               Option("registry", "", "Schema registry: an http(s):// URL, glue://REGION[/REGISTRY] (AWS "
                      "Glue), a folder of <id>.avsc files, or memory:"),
               Option("framing", "confluent", "How a key or value names its writer schema: confluent (0x00 and a "
                      "4-byte id; AWS Glue's 0x03 header too) or apicurio (Apicurio Registry's serializers: the id "
                      "in a Kafka header apicurio.key|value.globalId|contentId, else 0x00 and an 8- or 4-byte id; "
                      "registry = the producer's apicurio.registry.url)", ("confluent", "apicurio")),
               Option("apicurio-id", "auto", "framing=apicurio: the kind of an id in the key or value bytes "
                      "(a header names its own): auto (8 bytes a globalId, 4 a contentId, as Apicurio 2.x and 3.x "
                      "write by default), globalId or contentId (apicurio.registry.use-id)",
                      ("auto", "globalId", "contentId")))
    # A registry that is down or refuses us fails every record alike: stop the run instead of dead-lettering all.
    fatal = (RegistryError,)

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        registry = str(self.settings["registry"]).lower()
        if self.settings["framing"] == "apicurio" and registry and not registry.startswith(("http://", "https://")):
            raise ValueError("debezium-avro: framing=apicurio reads schemas by Apicurio Registry's ids, from its "
                             "REST API: the registry option must be its http(s):// URL (the producer's "
                             "apicurio.registry.url)")

    def registry(self) -> SchemaRegistry:
        """The registry (created on first use; kept across pickling, registries are picklable)."""
        registry = self.__dict__.get("_registry")
        if registry is None:
            if not self.settings["registry"]:
                raise DecodeError("debezium-avro needs the registry option (URL, folder or memory:)")
            registry = self.__dict__["_registry"] = registry_from(self.settings["registry"])
        return registry

    @property
    def reads_headers(self) -> bool:
        return self.settings["framing"] == "apicurio"

    def _framed(self, data: bytes, record: Record, part: str) -> tuple[SchemaId, bytes]:
        """The schema id of the key or value (``part``) and its bytes as the readers take them."""
        if self.settings["framing"] == "apicurio":
            return apicurio_framed(data, record.header, part, self.settings["apicurio-id"])
        return header_id(data), readable(data)

    def _reader(self, schema_id: SchemaId, *, key: bool = False) -> _Reader:
        readers = self.cache("key-readers" if key else "readers")
        reader = readers.get(schema_id)
        if reader is None:
            raw = self.registry().raw_schema(schema_id)
            reader = readers[schema_id] = _Reader(schema_id, raw, self._wire(), key=key)
        return reader

    def _wire(self) -> Wire:
        return Wire(base64_bytes=False, binary_mode=self.settings["binary-handling-mode"])

    def decode_record(self, record: Record) -> list[ChangeEvent]:
        value = record.value
        if value is None:
            return []  # tombstone
        schema_id, readable = self._framed(value, record, "value")
        reader = self._reader(schema_id)
        datum = reader.read(readable)
        if not isinstance(datum, dict):
            raise DecodeError(f"schema id {reader.schema_id} is not a record schema")
        op = datum.get("op")
        source = self._source(datum.get("source"))
        if op is None:
            return self._non_change(datum, source)
        shape = reader.after or reader.before
        if shape is None:
            raise DecodeError(f"schema id {reader.schema_id} has op but no before/after row records")
        before = _row(reader.before, datum.get("before"))
        after = _row(reader.after, datum.get("after"))
        key = self._key(record, shape) if record.key is not None else None
        return envelope_events(op, before, after, source, key, shape.columns(key_names_of(key)))

    @staticmethod
    def _source(block: Any) -> Source | None:
        if block is None:
            return None
        try:
            return msgspec.convert(block, Source)
        except msgspec.ValidationError as exc:
            raise DecodeError(f"source: {exc}") from None

    @staticmethod
    def _non_change(datum: Mapping[str, Any], source: Source | None) -> list[ChangeEvent]:
        if datum.get("ddl") is not None:
            return schema_change_events(datum["ddl"], datum.get("databaseName"), source)
        if datum.get("status") in ("BEGIN", "END"):
            return []  # transaction metadata topic
        if set(datum) <= {"ts_ms"}:
            return []  # heartbeat
        raise DecodeError("the value has no op: not a Debezium change event")

    def _key(self, record: Record, shape: RowShape | None) -> Row | None:
        try:
            schema_id, readable = self._framed(record.key, record, "key")
            reader = self._reader(schema_id, key=True)
        except DecodeError as exc:
            raise DecodeError(f"key: {exc}") from None
        datum = reader.read(readable)
        if datum is None:
            return None
        if not isinstance(datum, dict):
            raise DecodeError(f"key schema id {reader.schema_id} is not a record")
        if shape is not None:
            return shape.convert_key(datum)
        return reader.after.convert(list(datum.values())) if reader.after is not None else dict(datum)

    # -------------------------------------------------------------------------------------- encoding

    def encode(self, events: Iterable[ChangeEvent]) -> list[Record]:
        if self.settings["framing"] != "confluent":
            raise ValueError("debezium-avro: the encoder writes Confluent's framing only (framing=confluent)")
        writer = EnvelopeWriter(self.settings, self.cache("encode-tables"), field_name=sanitize)
        records: list[Record] = []
        for planned in writer.plan(events):
            table = planned.table
            if table.serialized is None:
                table.serialized = self._register(table)
            key_id, key_parsed, value_id, value_parsed = table.serialized
            key = None if planned.key is None else write_payload(key_id, key_parsed, planned.key)
            value = None if planned.value is None else write_payload(value_id, value_parsed, planned.value)
            headers = [(name, _json.encode(header)) for name, header in planned.headers]
            records.append(Record(key=key, value=value, topic=table.topic, timestamp=planned.timestamp,
                                  headers=headers))
        return records

    def _register(self, table: TableSchema) -> tuple[SchemaId, Any, SchemaId, Any]:
        registry = self.registry()
        value_schema = avro_schema(table.envelope, set())
        value_id = registry.register(f"{table.topic}-value", value_schema)
        key_id, key_parsed = 0, None
        if table.key is not None:
            key_id = registry.register(f"{table.topic}-key", avro_schema(table.key, set()))
            key_parsed = registry.schema(key_id)
        return key_id, key_parsed, value_id, registry.schema(value_id)


# ------------------------------------------------------------------------------- FieldSpec → Avro

def _avro_fullname(connect_name: str) -> str:
    return ".".join(sanitize(part) for part in connect_name.split("."))


def avro_schema(spec: FieldSpec, defined: set[str]) -> Any:
    """The Avro schema Confluent's AvroData makes of a Connect schema (``defined``: named types already
    written, which are referenced by name the second time)."""
    params = dict(spec.params)
    if spec.type == "struct":
        full = _avro_fullname(spec.semantic or f"ConnectDefault{len(defined)}")
        if full in defined:
            return full
        defined.add(full)
        namespace, _, name = full.rpartition(".")
        fields = []
        for member in spec.fields:
            avro = avro_schema(member, defined)
            if member.optional:
                fields.append({"name": member.name, "type": ["null", avro], "default": None})
            else:
                fields.append({"name": member.name, "type": avro})
        record: dict[str, Any] = {"type": "record", "name": name, "fields": fields}
        if namespace:
            record["namespace"] = namespace
        if spec.semantic:
            record["connect.name"] = spec.semantic
        if params and structured(spec) is not None:
            # Its own record per column (see column_writer). A Geometry or Point record is shared by every such
            # column of the table, so its parameters (the column's name among them) would speak for the first only.
            record["connect.parameters"] = params
        return record
    if spec.type in ("array", "map"):
        assert spec.items is not None
        inner = avro_schema(spec.items, defined)
        return {"type": "array", "items": inner} if spec.type == "array" else {"type": "map", "values": inner}
    schema: dict[str, Any] = {"type": _CONNECT_TO_AVRO[spec.type]}
    if spec.type in ("int8", "int16"):
        schema["connect.type"] = spec.type
    if spec.semantic:
        schema["connect.version"] = 1
        schema["connect.name"] = spec.semantic
    if params:
        schema["connect.parameters"] = params
    if spec.semantic == DECIMAL:
        schema.update(logicalType="decimal", scale=int(params.get("scale", "0")),
                      precision=int(params.get("connect.decimal.precision", "64")))
    elif spec.semantic in _LOGICAL_OF:
        schema["logicalType"] = _LOGICAL_OF[spec.semantic]
    return schema if len(schema) > 1 else schema["type"]


FORMAT = DebeziumAvro

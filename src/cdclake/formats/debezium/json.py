"""``debezium-json``: Debezium change events written by Kafka Connect's JsonConverter.

Each of the Kafka key and value is either ``{"schema": …, "payload": …}`` (``schemas.enable=true``) or the
bare payload; the form is detected per message. With a schema, decoding is driven by it: the schema is
compiled once (cached by its bytes) into a typed msgspec decoder for the payload and a converter per column,
so a message costs one pass over its payload plus the columns that need converting. Without a schema,
the semantic types are not in the message (spec §2.1): the ``column-types`` option states the tables'
column types, from which cdclake writes the Connect schema the connector would have sent (under the
handling modes of the other options) and decodes the payload with it, exactly as above. A table that option
does not name is read as JSON gives it, its column types ``unknown``.

The Kafka key gives the event's ``key`` (converted with the value schema's column converters, which know
the source types). Tombstones (null value), transaction-metadata and heartbeat values, and op ``m`` carry
no change and decode to ``[]``; schema-change-topic values become DDL events. What both converters share
lives beside this module: ``schema`` (Connect schemas, column types), ``converters`` (wire → canonical
values), ``envelope`` (envelope → events), ``encoder`` (events → records), ``options``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

import msgspec

from cdclake.formats.base import DecodeError, Option, struct_name_ok
from cdclake.formats.debezium.converters import RowShape, Wire, schemaless_columns
from cdclake.formats.debezium.encoder import EnvelopeWriter, TableSchema
from cdclake.formats.debezium.envelope import Source, database_of, envelope_events, key_names_of, schema_change_events
from cdclake.formats.debezium.options import DebeziumFormat
from cdclake.formats.debezium.schema import DECIMAL, FieldSpec, connect_spec, envelope_rows
from cdclake.model import types as T
from cdclake.model.events import ChangeEvent, Column, Row
from cdclake.model.records import Record
from cdclake.model.types import parse_type

_ABSENT: Final = msgspec.Raw()


class _Message(msgspec.Struct, gc=False):
    """A value of either form: ``schema`` + ``payload``, or the payload's own members."""

    schema: msgspec.Raw = _ABSENT
    payload: msgspec.Raw = _ABSENT
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    source: Source | None = None
    op: str | None = None
    ts_ms: int | None = None
    ddl: str | None = None
    database_name: str | None = msgspec.field(default=None, name="databaseName")
    status: str | None = None


_message_decoder: Final = msgspec.json.Decoder(_Message)
# Keys are read with exact numbers, as payloads are: a DECIMAL key column may be a JSON number (NUMERIC format).
_key_decoder: Final = msgspec.json.Decoder(float_hook=Decimal)
_encoder: Final = msgspec.json.Encoder()
# What a decoded key that is not an object was, in JSON's terms (a number may be a Decimal: see _key_decoder).
_JSON_KINDS: Final = {str: "a string", list: "an array", bool: "a boolean", int: "a number", float: "a number",
                      Decimal: "a number"}

# Connect literal types → the Python type msgspec validates a payload value against (a float may be "NaN",
# "Infinity" or "-Infinity": see converters._double).
_PY_TYPES: Final[dict[str, Any]] = {
    "int8": int, "int16": int, "int32": int, "int64": int, "float": float | str, "double": float | str, "boolean": bool,
    "string": str, "bytes": str,
}


def _value_type(spec: FieldSpec) -> Any:
    # Decimals may be base64 text or (decimal.format=NUMERIC) numbers, read exactly through the Decimal hook.
    py = Any if spec.semantic == DECIMAL else _PY_TYPES.get(spec.type, Any)
    return py if py is Any else py | None


def _row_type(spec: FieldSpec, name: str, exact: bool) -> Any:
    """A row's payload type; ``exact``: every field present and no other, so that a row of another column list
    fails to decode instead of reading as this one (a schema in the message says which list it is; a stated
    one does not). Column names a struct cannot be renamed to (a quote, a backslash, a control character) are
    legal upstream: such a row is read as a plain object, without the ``exact`` check."""
    if not all(struct_name_ok(f.name) for f in spec.fields):
        return dict[str, Any]
    fields: list[Any] = [(f"f{i}", _value_type(f)) if exact else (f"f{i}", _value_type(f), None)
                         for i, f in enumerate(spec.fields)]
    # gc=False: rows hold only scalars (and plain containers), so the collector need not track them.
    return msgspec.defstruct(name, fields, rename={f"f{i}": f.name for i, f in enumerate(spec.fields)}, gc=False,
                             forbid_unknown_fields=exact)


class _Table:
    """One value schema, compiled: a typed payload decoder and the row shapes."""

    __slots__ = ("after", "before", "decoder")

    def __init__(self, schema: bytes, wire: Wire, exact: bool = False) -> None:
        try:
            envelope = connect_spec(msgspec.json.decode(schema))
        except (msgspec.DecodeError, ArithmeticError) as exc:  # ArithmeticError: a number too large for a Decimal
            raise DecodeError(f"value schema is not JSON: {exc}") from None
        before, after = envelope_rows(envelope)
        self.before = RowShape(before, wire) if before is not None else None
        self.after = (self.before if after is before else RowShape(after, wire)) if after is not None else None
        if self.after is None and self.before is None:
            self.decoder = None  # not a change envelope (schema change, heartbeat, transaction topics)
            return
        before_type = _row_type(before, "Before", exact) if before is not None else Any
        after_type = Any
        if after is not None:
            after_type = before_type if after is before else _row_type(after, "After", exact)
        envelope_type = msgspec.defstruct("Envelope", [
            ("before", before_type | None, None), ("after", after_type | None, None),
            ("source", Source | None, None), ("op", str | None, None), ("ts_ms", int | None, None),
        ], gc=False)
        self.decoder = msgspec.json.Decoder(envelope_type, float_hook=Decimal)


def _row(shape: RowShape | None, row: Any) -> Row | None:
    if row is None:
        return None
    if shape is None:
        return row
    if isinstance(row, dict):
        if not all(isinstance(name, str) for name in row):
            raise DecodeError("row is not an object of column names")
        return shape.convert([row.get(name) for name in shape.wire_names])
    return shape.convert(list(msgspec.structs.astuple(row)))


def _table_of(source: Source) -> str:
    """The name the ``column-types`` option gives a change's table."""
    return f"{database_of(source)}.{source.table}"


def _column_types(text: str) -> dict[str, dict[str, str]]:
    """The ``column-types`` option: ``{"database.table": {"column": "type", …}}``, inline or in a file."""
    source = text.strip()
    if not source:
        return {}
    if not source.startswith("{"):
        try:
            source = Path(source).read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"debezium-json: column-types: cannot read {text!r}: {exc}") from None
    try:
        tables = json.loads(source)
    except ValueError as exc:
        raise ValueError(f"debezium-json: column-types is not JSON: {exc}") from None
    if not isinstance(tables, dict) or not all(
        isinstance(columns, dict) and columns and all(isinstance(t, str) for t in columns.values())
        for columns in tables.values()
    ):
        raise ValueError('debezium-json: column-types must be {"database.table": {"column": "type", …}, …}')
    for table, columns in tables.items():
        for name, type_text in columns.items():
            if parse_type(type_text).family == T.UNKNOWN:
                raise ValueError(f"debezium-json: column-types: {table}.{name}: unknown type {type_text!r}")
    return tables


class DebeziumJson(DebeziumFormat):
    name = "debezium-json"
    options = (*DebeziumFormat.options,
               Option("schemas-enable", True, "Encoder: write {schema, payload} (JsonConverter schemas.enable)"),
               Option("column-types", "", 'Without schemas (schemas.enable=false): the tables\' column types, '
                      '{"database.table": {"column": "mysql type", …}}, inline or the path of a file holding it; '
                      "their values are read as the handling modes above say the connector wrote them"))

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.column_types = _column_types(self.settings["column-types"])
        for table, columns in self.column_types.items():  # a type the connector cannot write fails here
            try:
                self._stated_table(table, tuple(columns))
            except ValueError as exc:
                raise ValueError(f"debezium-json: column-types: {table}: {exc}") from None

    def _wire(self) -> Wire:
        return Wire(base64_bytes=True, binary_mode=self.settings["binary-handling-mode"])

    def _table(self, raw: msgspec.Raw) -> _Table:
        last = self._caches.get("last")
        if last is not None and last[0] == raw:
            return last[1]
        schema = bytes(raw)
        tables = self.cache("tables")
        table = tables.get(schema)
        if table is None:
            table = tables[schema] = _Table(schema, self._wire())
        # JsonConverter writes compactly, schema first: the next message of this table most likely starts
        # with exactly these bytes, so its payload can be sliced out without scanning the schema again.
        self._caches["last"] = (raw.copy(), table, b'{"schema":' + schema + b',"payload":')
        return table

    def decode_record(self, record: Record) -> list[ChangeEvent]:
        value = record.value
        if value is None:
            return []  # tombstone
        last = self._caches.get("last")
        if last is not None and last[1].decoder is not None and value.startswith(last[2]) and value.endswith(b"}"):
            try:
                envelope = last[1].decoder.decode(memoryview(value)[len(last[2]):-1])
            except (msgspec.DecodeError, ArithmeticError):
                pass  # not the compact form after all: the full path below reads it, or says what is wrong
            else:
                return self._row_events(record, last[1], envelope)
        stated = self._caches.get("last-stated")
        if stated is not None:  # a schemaless message most likely has the layout of the one before it
            try:
                envelope = stated[1].decoder.decode(value)
            except (msgspec.DecodeError, ArithmeticError):
                envelope = None  # another column list, or not of a stated table: the path below sees which
            if envelope is not None and envelope.source is not None and _table_of(envelope.source) == stated[0]:
                return self._row_events(record, stated[1], envelope)
        try:
            message = _message_decoder.decode(value)
        except (msgspec.DecodeError, ArithmeticError) as exc:
            if value.strip() == b"null":
                return []
            raise DecodeError(f"value is not a Debezium JSON message: {exc}") from None
        if not len(message.payload) and not len(message.schema):
            stated = self._stated(message)
            if stated is not None:
                try:
                    return self._row_events(record, stated, stated.decoder.decode(value))
                except (msgspec.DecodeError, ArithmeticError) as exc:
                    raise DecodeError(f"payload does not fit the column-types: {exc}") from None
            return self._row_events(record, None, message)
        payload, schema = message.payload, message.schema
        if not len(payload) or bytes(payload).strip() == b"null":
            return []
        table = self._table(schema) if len(schema) and bytes(schema).strip() != b"null" else None
        decoder = _message_decoder if table is None or table.decoder is None else table.decoder
        try:
            envelope = decoder.decode(payload)
        except (msgspec.DecodeError, ArithmeticError) as exc:
            raise DecodeError(f"payload: {exc}") from None
        return self._row_events(record, table if decoder is not _message_decoder else None, envelope)

    def _stated(self, message: _Message) -> _Table | None:
        """The compiled schema of a schemaless change whose table the ``column-types`` option names."""
        if not self.column_types or message.op is None or message.source is None:
            return None
        table = _table_of(message.source)
        columns = self.column_types.get(table)
        if columns is None:
            return None
        image = message.after if message.after is not None else message.before
        compiled = self._stated_table(table, tuple(image or columns))
        self._caches["last-stated"] = (table, compiled)
        return compiled

    def _stated_table(self, table: str, names: tuple[str, ...]) -> _Table:
        """The table as the connector would have described it: these columns, of their stated types, written
        under this format's handling modes (their exact source types among the schema's parameters)."""
        tables = self.cache("stated-tables")
        compiled = tables.get((table, names))
        if compiled is None:
            types = self.column_types[table]
            unstated = [name for name in names if name not in types]
            if unstated:
                raise DecodeError(f"column(s) {', '.join(unstated)} of {table} have no type in column-types")
            database, _, name = table.rpartition(".")
            schema = TableSchema(database, name, [Column(column, types[column], False, True) for column in names],
                                 {**self.settings, "propagate-source-type": True}, str)
            compiled = _Table(_schema_bytes(schema.envelope) or b"", self._wire(), exact=True)
            tables[(table, names)] = compiled
        return compiled

    def _row_events(self, record: Record, table: _Table | None, envelope: Any) -> list[ChangeEvent]:
        """Events of a decoded envelope: typed rows of ``table``'s schema, or schemaless dicts."""
        if envelope.op is None:
            return self._non_change(envelope)
        if table is None:
            shape = None
            before, after = envelope.before, envelope.after
        else:
            shape = table.after or table.before
            before = _row(table.before, envelope.before)
            after = _row(table.after, envelope.after)
        key = self._key(record.key, shape) if record.key is not None else None
        names = key_names_of(key)
        if shape is not None:
            columns = shape.columns(names)
        else:
            image = after if after is not None else before if before is not None else key or {}
            columns = schemaless_columns(image, names)
        return envelope_events(envelope.op, before, after, envelope.source, key, columns)

    @staticmethod
    def _non_change(envelope: Any) -> list[ChangeEvent]:
        ddl = getattr(envelope, "ddl", None)
        if ddl is not None:
            return schema_change_events(ddl, getattr(envelope, "database_name", None), envelope.source)
        if getattr(envelope, "status", None) in ("BEGIN", "END"):
            return []  # transaction metadata topic
        if (envelope.ts_ms is not None and envelope.source is None and envelope.before is None
                and envelope.after is None):
            return []  # heartbeat
        raise DecodeError("the value has no op: not a Debezium change event")

    def _key(self, data: bytes, shape: RowShape | None) -> Row | None:
        try:
            message = _key_decoder.decode(data)
        except (msgspec.DecodeError, ArithmeticError) as exc:
            raise DecodeError(f"key is not JSON: {exc}") from None
        if message is None:
            return None
        if not isinstance(message, dict):
            raise DecodeError(f"key is not a JSON object but {_JSON_KINDS.get(type(message), type(message).__name__)}")
        if message.keys() == {"schema", "payload"} and isinstance(message["schema"], dict):
            payload = message["payload"]
            if payload is None:
                return None
            if not isinstance(payload, dict):
                raise DecodeError("key payload is not an object")
            if shape is None:
                shape = self._key_shape(message["schema"])
            message = payload
        if shape is None:  # no schema says which numbers are decimals: JSON numbers are floats
            return {name: float(v) if type(v) is Decimal else v for name, v in message.items()}
        return shape.convert_key(message)

    def _key_shape(self, schema: dict[str, Any]) -> RowShape:
        text = _encoder.encode(schema)
        shapes = self.cache("key-shapes")
        shape = shapes.get(text)
        if shape is None:
            spec = connect_spec(schema)
            if spec.type != "struct":
                raise DecodeError(f"key schema is {spec.type}, not a struct")
            shape = shapes[text] = RowShape(spec, self._wire())
        return shape

    # -------------------------------------------------------------------------------------- encoding

    def encode(self, events: Iterable[ChangeEvent]) -> list[Record]:
        writer = EnvelopeWriter(self.settings, self.cache("encode-tables"))
        with_schema = self.settings["schemas-enable"]
        records: list[Record] = []
        for planned in writer.plan(events):
            table = planned.table
            if table.serialized is None:
                table.serialized = (_schema_bytes(table.key), _schema_bytes(table.envelope))
            key_schema, value_schema = table.serialized
            key = None if planned.key is None else _message(key_schema, planned.key, with_schema)
            value = None if planned.value is None else _message(value_schema, planned.value, with_schema)
            headers = [(name, _encoder.encode(header)) for name, header in planned.headers]
            records.append(Record(key=key, value=value, topic=table.topic, timestamp=planned.timestamp,
                                  headers=headers))
        return records


def _connect_schema(spec: FieldSpec, as_field: bool) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": spec.type}
    if spec.type == "struct":
        schema["fields"] = [_connect_schema(f, True) for f in spec.fields]
    schema["optional"] = spec.optional
    if spec.semantic:
        schema["name"] = spec.semantic
        schema["version"] = 1
    if spec.params:
        schema["parameters"] = dict(spec.params)
    if as_field:
        schema["field"] = spec.name
    return schema


def _schema_bytes(spec: FieldSpec | None) -> bytes | None:
    return None if spec is None else _encoder.encode(_connect_schema(spec, False))


def _message(schema: bytes | None, payload: dict[str, Any], with_schema: bool) -> bytes:
    body = _encoder.encode(payload)
    if not with_schema or schema is None:
        return body
    return b'{"schema":' + schema + b',"payload":' + body + b"}"


FORMAT = DebeziumJson

"""Framed Avro datums read and written with fastavro: the reference path of every Avro format, and its
encoders' writer."""

from __future__ import annotations

import io
from typing import Any

import fastavro

from cdclake.formats.avro.framing import HEADER_SIZE, SchemaId, frame, header_id, readable
from cdclake.formats.avro.registry.base import ParsedSchema, SchemaRegistry
from cdclake.formats.base import DecodeError


def read_datum(registry: SchemaRegistry, data: bytes) -> tuple[SchemaId, Any]:
    """The schema ID and the datum of one framed message, decoded with its writer schema."""
    schema_id = header_id(data)
    return schema_id, read_payload(registry.schema(schema_id), readable(data), schema_id)


def read_payload(parsed: ParsedSchema, data: bytes, schema_id: SchemaId) -> Any:
    """Decode the Avro datum of ``data`` (as :func:`readable` gives it) with ``parsed``; the whole payload must
    be used, so a datum written with another schema is caught rather than half-read."""
    stream = io.BytesIO(data)
    stream.seek(HEADER_SIZE)
    try:
        datum = fastavro.schemaless_reader(stream, parsed, None)
    except Exception as exc:
        # fastavro reports a short read in several ways (EOFError, struct.error, IndexError…); having
        # reached the end of the data is what tells truncation from a malformed datum (a bad union branch).
        if isinstance(exc, EOFError | StopIteration) or stream.tell() >= len(data):
            raise DecodeError(f"Avro datum for schema id {schema_id} is truncated ({type(exc).__name__})") from None
        raise DecodeError(f"Avro datum for schema id {schema_id} is malformed: {type(exc).__name__}: {exc}") from None
    if stream.tell() != len(data):
        extra = len(data) - stream.tell()
        raise DecodeError(f"Avro datum for schema id {schema_id} has {extra} trailing byte(s): wrong schema?")
    return datum


def write_datum(registry: SchemaRegistry, subject: str, schema: dict[str, Any], datum: Any) -> bytes:
    """Register ``schema`` under ``subject`` and return ``datum`` written with it, framed."""
    schema_id = registry.register(subject, schema)
    return write_payload(schema_id, registry.schema(schema_id), datum)


def write_payload(schema_id: SchemaId, parsed: ParsedSchema, datum: Any) -> bytes:
    """``datum`` written with an already registered and parsed schema, framed: the encoders' hot path."""
    stream = io.BytesIO()
    stream.write(frame(schema_id, b""))
    fastavro.schemaless_writer(stream, parsed, datum)
    return stream.getvalue()

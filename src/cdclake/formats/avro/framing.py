"""Schema-registry framing: the header that names a message's writer schema, before one schemaless Avro datum.

* Confluent's framing: ``0x00`` (magic byte), a 4-byte big-endian schema ID;
* AWS Glue Schema Registry's: ``0x03`` (header version), a compression byte (0 none, 5 zlib: the datum is
  then zlib-compressed), the schema version's 16-byte UUID;
* Apicurio Registry's own (:func:`apicurio_framed`, read only when a format is told so, debezium.md §3): the
  ID in a Kafka header ``apicurio.key|value.globalId|contentId`` (8 bytes, big-endian) and the bare datum as
  the value; without such a header, ``0x00`` and an 8-byte ID (its 2.x serializers' default: a global ID) or a
  4-byte one (3.x: a content ID).

A schema ID is therefore an ``int`` (Confluent), a :class:`uuid.UUID` (Glue) or an :class:`ApicurioId`; the
registries of :mod:`cdclake.formats.avro.registry` hold the schemas by ID.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from collections.abc import Callable
from typing import NamedTuple

from cdclake.formats.base import DecodeError

MAGIC = 0
HEADER_SIZE = 5
GLUE_HEADER_VERSION = 3
GLUE_HEADER_SIZE = 18
GLUE_UNCOMPRESSED = 0
GLUE_ZLIB = 5
_GLUE_FIRST = bytes((GLUE_HEADER_VERSION,))
# A compressed datum larger than this is refused rather than inflated: a corrupt or hostile message must not
# exhaust an executor's memory. Kafka's records are 1 MiB by default.
GLUE_MAX_DATUM = 256 * 2**20
_HEADER = struct.Struct(">bi")
# The Avro readers take a datum at HEADER_SIZE: a Glue-framed datum is copied behind these bytes.
_READABLE_PREFIX = bytes(HEADER_SIZE)

class ApicurioId(NamedTuple):
    """An Apicurio Registry ID: its kind (``globalId``: one schema version; ``contentId``: one schema text,
    shared by the versions that have it) and its number."""

    kind: str
    number: int

    def __str__(self) -> str:
        return f"{self.kind} {self.number}"


SchemaId = int | uuid.UUID | ApicurioId

APICURIO_ID_KINDS = ("globalId", "contentId")
APICURIO_DEFAULT_API = "/apis/registry/v2"  # served by Apicurio Registry 2.x and 3.x alike
_LONG = struct.Struct(">q")
_APICURIO_LONG_ID = HEADER_SIZE + 4

# Apicurio Registry's serializers frame a message as Confluent's do only when told to (debezium.md §3): its 2.x
# Kafka Connect converter writes 0x00 and an 8-byte id, its serializers with headers enabled the bare datum (its
# first byte often 0x00, as a null ``before`` is). Both read as a wrong magic byte or an unknown id under
# Confluent's framing, so those errors say what to change.
APICURIO_NATIVE = ("If the producer used Apicurio Registry's own framing (the schema id in a Kafka header, or in 8 "
                   "bytes), set the option framing=apicurio and the registry option to the producer's "
                   "apicurio.registry.url (http://HOST/apis/registry/v2)")

APICURIO_KIND_HINT = (". An id in the message's bytes is taken for a globalId in 8 bytes and a contentId in 4, as "
                      "Apicurio's serializers write by default: the option apicurio-id names its kind "
                      "(the producer's apicurio.registry.use-id)")


def frame(schema_id: SchemaId, payload: bytes) -> bytes:
    """``payload`` behind the header naming ``schema_id``: Confluent's 5 bytes for an integer ID, Glue's 18
    (uncompressed) for a schema version UUID."""
    if isinstance(schema_id, uuid.UUID):
        return bytes((GLUE_HEADER_VERSION, GLUE_UNCOMPRESSED)) + schema_id.bytes + payload
    return _HEADER.pack(MAGIC, schema_id) + payload


def unframe(data: bytes) -> tuple[SchemaId, bytes]:
    """The schema ID and the Avro payload (decompressed) of a framed message; :class:`DecodeError` when it is
    not one."""
    schema_id = header_id(data)
    return schema_id, bytes(readable(data)[HEADER_SIZE:])


def header_id(data: bytes) -> SchemaId:
    """The schema ID of a framed message without copying its payload."""
    if data is None:
        raise DecodeError("no data: a schema-registry-framed Avro message was expected")
    if data[:1] == _GLUE_FIRST:
        return uuid.UUID(bytes=bytes(_glue_header(data)[2:]))
    if len(data) < HEADER_SIZE:
        raise DecodeError(f"message of {len(data)} byte(s) is shorter than the 5-byte Confluent header")
    if data[0] != MAGIC:
        raise DecodeError(f"first byte is 0x{data[0]:02x}, neither the Confluent magic byte 0x00 nor the AWS Glue "
                          f"header version 0x03. {APICURIO_NATIVE}")
    return _HEADER.unpack_from(data)[1]


def apicurio_framed(data: bytes, header: Callable[[str], bytes | None], part: str, id_kind: str = "auto"
                    ) -> tuple[ApicurioId, bytes]:
    """The schema ID of a key or value (``part``) framed by Apicurio Registry's serializers, and the message as
    the Avro readers take it (see :func:`readable`); ``header`` gives a Kafka header's value by name
    (:meth:`cdclake.model.records.Record.header`). A header ``apicurio.<part>.globalId`` or ``.contentId``
    names the ID and leaves the value the bare datum; Apicurio's deserializers read headers first too. Without
    one, the value is ``0x00`` and an ID of 8 bytes or 4, told apart as Apicurio's OptimisticFallbackIdHandler
    does: 4 zero bytes cannot start a 4-byte ID (IDs start at 1), and must start an 8-byte ID below 2**32. Such an
    ID's kind is ``id_kind``, or with ``auto`` the default of the serializers that write that size: a global ID
    in 8 bytes (2.x), a content ID in 4 (3.x)."""
    if data is None:
        raise DecodeError("no data: an Apicurio-framed Avro message was expected")
    for kind in APICURIO_ID_KINDS:
        name = f"apicurio.{part}.{kind}"
        value = header(name)
        if value is None:
            continue
        if len(value) != _LONG.size:
            raise DecodeError(f"header {name} holds {len(value)} byte(s), not the 8 of a big-endian long")
        encoding = header(f"apicurio.{part}.encoding")
        if encoding not in (None, b"BINARY"):
            raise DecodeError(f"header apicurio.{part}.encoding says {encoding!r}: only Avro's BINARY encoding is read")
        return ApicurioId(kind, _LONG.unpack(value)[0]), _READABLE_PREFIX + data
    if len(data) < HEADER_SIZE or data[0] != MAGIC:
        raise DecodeError(f"no header apicurio.{part}.globalId or .contentId, and the {part} does not start with "
                          f"Apicurio's magic byte 0x00 and an id: not Apicurio-framed")
    if data[1:HEADER_SIZE] != bytes(4):
        return ApicurioId("contentId" if id_kind == "auto" else id_kind, _HEADER.unpack_from(data)[1]), data
    if len(data) < _APICURIO_LONG_ID:
        raise DecodeError(f"message of {len(data)} byte(s) is shorter than Apicurio's 9-byte header")
    kind = "globalId" if id_kind == "auto" else id_kind
    return ApicurioId(kind, _LONG.unpack_from(data, 1)[0]), data[_APICURIO_LONG_ID - HEADER_SIZE:]


def readable(data: bytes) -> bytes:
    """``data`` as the Avro readers take it, its datum from offset HEADER_SIZE on: a Confluent-framed message
    as it is; a Glue-framed one's datum, decompressed, behind HEADER_SIZE placeholder bytes."""
    if data[:1] != _GLUE_FIRST:
        return data
    header = _glue_header(data)
    if header[1] == GLUE_UNCOMPRESSED:
        return _READABLE_PREFIX + data[GLUE_HEADER_SIZE:]
    inflater = zlib.decompressobj()
    try:
        datum = inflater.decompress(data[GLUE_HEADER_SIZE:], GLUE_MAX_DATUM)
    except zlib.error as exc:
        raise DecodeError(f"AWS Glue-framed datum marked zlib-compressed does not decompress: {exc}") from None
    if inflater.unconsumed_tail:
        raise DecodeError(f"AWS Glue-framed datum inflates to more than {GLUE_MAX_DATUM >> 20} MiB")
    if not inflater.eof:
        raise DecodeError("AWS Glue-framed datum marked zlib-compressed is truncated")
    return _READABLE_PREFIX + datum


def _glue_header(data: bytes) -> bytes:
    if len(data) < GLUE_HEADER_SIZE:
        raise DecodeError(f"message of {len(data)} byte(s) starting 0x03 is shorter than the 18-byte AWS Glue header")
    if data[1] not in (GLUE_UNCOMPRESSED, GLUE_ZLIB):
        raise DecodeError(f"AWS Glue header names compression {data[1]}: only 0 (none) and 5 (zlib) exist")
    return data[:GLUE_HEADER_SIZE]


def header_bytes(data: bytes) -> bytes:
    """The header of a framed message, as a cache key: the bytes that name its schema and compression."""
    return data[:GLUE_HEADER_SIZE] if data[:1] == _GLUE_FIRST else data[:HEADER_SIZE]

"""What every schema registry shares: the protocol the Avro formats use, the cache by ID and by subject,
schema parsing, and URL redaction (credentials never reach logs, reprs or error messages)."""

from __future__ import annotations

import json
import uuid
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

import fastavro

from cdclake.formats.avro.framing import APICURIO_KIND_HINT, ApicurioId, SchemaId
from cdclake.formats.base import DecodeError

ParsedSchema = dict[str, Any] | list[Any] | str


def parse(schema: dict[str, Any] | list[Any] | str) -> ParsedSchema:
    """A fastavro-parsed schema. Each parse gets its own fresh name table (fastavro's default), so two
    versions of one record name (a table before and after a DDL) never see each other's definitions."""
    if isinstance(schema, str):
        schema = json.loads(schema)
    return fastavro.parse_schema(schema, named_schemas={})


def canonical_text(schema: dict[str, Any] | list[Any] | str) -> str:
    """Compact JSON with sorted keys: equal texts mean the same schema for registration."""
    if isinstance(schema, str):
        schema = json.loads(schema)
    return json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@runtime_checkable
class SchemaRegistry(Protocol):
    """What the Avro formats need of a registry."""

    def schema(self, schema_id: SchemaId) -> ParsedSchema:
        """The parsed writer schema with this ID (cached); :class:`DecodeError` when the ID is unknown."""
        ...

    def raw_schema(self, schema_id: SchemaId) -> dict[str, Any]:
        """The schema with this ID as its JSON object, with every custom attribute (cached)."""
        ...

    def register(self, subject: str, schema: dict[str, Any]) -> SchemaId:
        """Register ``schema`` under ``subject``; the ID (the same ID again for an identical schema)."""
        ...


class CachingRegistry:
    """Caches by ID and by (subject, schema); subclasses fetch and store. ``id_kinds`` are the kinds of
    schema ID the registry holds: a message framed for another kind of registry is named as such."""

    id_kinds: tuple[type, ...] = (int,)
    unknown_id_hint = ""  # said after "schema id N is not in ...": what else the id may mean

    def __init__(self) -> None:
        self._raw: dict[SchemaId, dict[str, Any]] = {}
        self._parsed: dict[SchemaId, ParsedSchema] = {}
        self._registered: dict[tuple[str, str], SchemaId] = {}

    def schema(self, schema_id: SchemaId) -> ParsedSchema:
        parsed = self._parsed.get(schema_id)
        if parsed is None:
            raw = self.raw_schema(schema_id)
            try:
                parsed = parse(raw)
            except Exception as exc:
                raise DecodeError(
                    f"schema id {schema_id} in {self.describe()} is not a valid Avro schema: {exc}"
                ) from exc
            self._parsed[schema_id] = parsed
        return parsed

    def raw_schema(self, schema_id: SchemaId) -> dict[str, Any]:
        raw = self._raw.get(schema_id)
        if raw is None:
            if not isinstance(schema_id, self.id_kinds):
                framing = ("an AWS Glue" if isinstance(schema_id, uuid.UUID) else
                           "an Apicurio" if isinstance(schema_id, ApicurioId) else "a Confluent")
                raise DecodeError(f"schema id {schema_id} comes from {framing} registry's framing, which "
                                  f"{self.describe()} does not hold: set the registry option to the producer's")
            text = self._fetch(schema_id)
            if text is None:
                hint = APICURIO_KIND_HINT if isinstance(schema_id, ApicurioId) else self.unknown_id_hint
                raise DecodeError(f"schema id {schema_id} is not in {self.describe()}{hint}")
            try:
                raw = json.loads(text)
            except ValueError as exc:
                raise DecodeError(f"schema id {schema_id} in {self.describe()} is not JSON: {exc}") from exc
            self._raw[schema_id] = raw
        return raw

    def register(self, subject: str, schema: dict[str, Any]) -> SchemaId:
        text = canonical_text(schema)
        cached = self._registered.get((subject, text))
        if cached is not None:
            return cached
        schema_id = self._store(subject, text)
        self._registered[(subject, text)] = schema_id
        return schema_id

    def describe(self) -> str:
        raise NotImplementedError

    def _fetch(self, schema_id: SchemaId) -> str | None:
        """The schema text with this ID, or None when there is none."""
        raise NotImplementedError

    def _store(self, subject: str, text: str) -> SchemaId:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.describe()})"

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if "_client" in state:
            state["_client"] = None  # network clients are not picklable: each process makes its own
        return state



def redact(url: str) -> str:
    """``url`` with any ``user:password@`` replaced by ``***@``."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit((parts.scheme, "***@" + parts.netloc.rpartition("@")[2], parts.path, parts.query, ""))


"""Schema-registry framing and schema registries, shared by every Avro format.

A framed message is a header naming its writer schema, then one schemaless Avro datum written with it:

* Confluent's framing: ``0x00`` (magic byte), a 4-byte big-endian schema ID;
* AWS Glue Schema Registry's: ``0x03`` (header version), a compression byte (0 none, 5 zlib: the datum is
  then zlib-compressed), the schema version's 16-byte UUID;
* Apicurio Registry's own (:func:`apicurio_framed`, read only when a format is told so, debezium.md §3): the
  ID in a Kafka header ``apicurio.key|value.globalId|contentId`` (8 bytes, big-endian) and the bare datum as
  the value; without such a header, ``0x00`` and an 8-byte ID (its 2.x serializers' default: a global ID) or a
  4-byte one (3.x: a content ID).

A schema ID is therefore an ``int`` (Confluent), a :class:`uuid.UUID` (Glue) or an :class:`ApicurioId`. The
schema lives in a registry, found by ID:

* :class:`HttpRegistry` — a Confluent-compatible REST registry (``http(s)://[user:password@]host[:port]``),
  spoken through confluent-kafka's ``SchemaRegistryClient``, or Apicurio Registry's core API for an
  :class:`ApicurioId`; credentials in the URL become basic auth and never appear in logs, reprs or error
  messages.
* :class:`GlueRegistry` — the AWS Glue Schema Registry (``glue://REGION[/REGISTRY][?endpoint=URL]``),
  spoken through boto3 with the AWS SDK's own credentials (``pip install 'cdclake[glue]'``).
* :class:`DirectoryRegistry` — offline: a folder of ``<id>.avsc`` (or ``<uuid>.avsc``) files plus
  ``subjects.json`` (subject → list of IDs, oldest first). Good for tests, replays and air-gapped debugging.
* :class:`MemoryRegistry` — in-process, for tests and encoders.

:func:`registry_from` picks one from a URL or a folder path. Every registry caches parsed schemas by ID,
is picklable (Spark ships it to executors; network clients are created lazily and not pickled), and reports
an unknown schema ID as :class:`~cdclake.formats.base.DecodeError` — a failure of that record, not of the
run. A registry that cannot be reached or refuses our credentials raises :class:`RegistryError`.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import io
import json
import os
import struct
import time
import urllib.request
import uuid
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, Protocol, runtime_checkable
from urllib.error import HTTPError
from urllib.parse import parse_qs, quote, unquote, urlsplit, urlunsplit

import fastavro

from cdclake.errors import RegistryError
from cdclake.formats.base import DecodeError
from cdclake.support.atomic import write_atomic

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
ParsedSchema = dict[str, Any] | list[Any] | str

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


class _CachingRegistry:
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


class MemoryRegistry(_CachingRegistry):
    """A registry held in this process: IDs from 1 upwards; an identical schema gets its existing ID."""

    def __init__(self) -> None:
        super().__init__()
        self._texts: dict[int, str] = {}
        self._ids: dict[str, int] = {}
        self._subjects: dict[str, list[int]] = {}

    def subjects(self) -> dict[str, list[int]]:
        """Each subject's schema IDs, oldest first."""
        return {subject: list(ids) for subject, ids in self._subjects.items()}

    def describe(self) -> str:
        return "memory registry"

    def _fetch(self, schema_id: int) -> str | None:
        return self._texts.get(schema_id)

    def _store(self, subject: str, text: str) -> int:
        schema_id = self._ids.get(text)
        if schema_id is None:
            schema_id = len(self._texts) + 1
            self._texts[schema_id] = text
            self._ids[text] = schema_id
        versions = self._subjects.setdefault(subject, [])
        if schema_id not in versions:
            versions.append(schema_id)
        return schema_id


class DirectoryRegistry(_CachingRegistry):
    """An offline registry: ``<id>.avsc`` files in one folder, and ``subjects.json`` mapping each subject
    to its schema IDs (oldest first). :meth:`register` takes the next free ID under a file lock, so
    concurrent writers on one machine do not collide. Schemas of Glue-framed messages are read from
    ``<uuid>.avsc`` files (the schema version's UUID in its usual text form), put there by hand."""

    INDEX = "subjects.json"
    id_kinds = (int, uuid.UUID)

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self.path = Path(path)

    def describe(self) -> str:
        return f"schema directory {self.path}"

    def _fetch(self, schema_id: SchemaId) -> str | None:
        if not self.path.is_dir():  # a wrong path: every message would be a dead letter for want of its schema
            raise RegistryError(f"{self.describe()} is no directory")
        if isinstance(schema_id, int) and schema_id < 0:
            return None
        try:
            return (self.path / f"{schema_id}.avsc").read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise RegistryError(f"cannot read schema id {schema_id} from {self.describe()}: {exc}") from exc

    def subjects(self) -> dict[str, list[int]]:
        """Each subject's schema IDs, oldest first."""
        try:
            return json.loads((self.path / self.INDEX).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}

    def _ids(self) -> list[int]:
        ids = []
        for entry in self.path.glob("*.avsc"):
            with contextlib.suppress(ValueError):
                ids.append(int(entry.stem))
        return ids

    def _store(self, subject: str, text: str) -> int:
        self.path.mkdir(parents=True, exist_ok=True)
        with open(self.path / ".lock", "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            ids = self._ids()
            schema_id = next((i for i in sorted(ids) if canonical_text(self._fetch(i) or "null") == text), None)
            if schema_id is None:
                schema_id = max(ids, default=0) + 1
                write_atomic(self.path / f"{schema_id}.avsc", text)
            subjects = self.subjects()
            versions = subjects.setdefault(subject, [])
            if schema_id not in versions:
                versions.append(schema_id)
                write_atomic(self.path / self.INDEX, json.dumps(subjects, indent=1, sort_keys=True))
        return schema_id


class HttpRegistry(_CachingRegistry):
    """A Confluent-compatible REST registry, or Apicurio Registry's core API for an :class:`ApicurioId` (the URL
    its serializers' ``apicurio.registry.url`` names: ``http://HOST/apis/registry/v2`` or ``/v3``; a URL without
    a path gets ``/apis/registry/v2``). ``user:password@`` in the URL becomes basic auth; the URL is kept and
    shown only without it."""

    id_kinds = (int, ApicurioId)
    unknown_id_hint = f". {APICURIO_NATIVE}"

    def __init__(self, url: str, *, timeout: float = 30.0, retries: int = 2) -> None:
        super().__init__()
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"schema registry URL must be http(s)://host[:port][/path], not {redact(url)!r}")
        self._auth: str | None = None
        if parts.username is not None or parts.password is not None:
            self._auth = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
        host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
        netloc = host if parts.port is None else f"{host}:{parts.port}"
        #: The URL without credentials: safe to print.
        self.url = urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
        self.timeout = timeout
        self.retries = retries
        self._client: Any = None

    def describe(self) -> str:
        return f"schema registry {self.url}"

    def _sr(self) -> Any:
        if self._client is None:
            from confluent_kafka.schema_registry import SchemaRegistryClient

            conf: dict[str, Any] = {"url": self.url, "timeout": self.timeout, "max.retries": self.retries}
            if self._auth is not None:
                conf["basic.auth.user.info"] = self._auth
            self._client = SchemaRegistryClient(conf)
        return self._client

    def _fetch(self, schema_id: SchemaId) -> str | None:
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        if isinstance(schema_id, ApicurioId):
            return self._fetch_apicurio(schema_id)
        try:
            return self._sr().get_schema(schema_id).schema_str
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                return None
            raise RegistryError(self._explain(exc, f"fetching schema id {schema_id}")) from None
        except Exception as exc:
            raise RegistryError(self._explain(exc, f"fetching schema id {schema_id}")) from None

    def _fetch_apicurio(self, schema_id: ApicurioId) -> str | None:
        """The schema text by Apicurio's ``GET /ids/globalIds/N`` or ``/ids/contentIds/N``, which answer it as is."""
        path = urlsplit(self.url).path
        if "/apis/ccompat/" in f"{path}/":
            raise RegistryError(f"{self.describe()} is Apicurio's Confluent-compatible API, which does not know "
                                f"{schema_id.kind}s of Apicurio's own framing: give its core API, "
                                f"http://HOST{APICURIO_DEFAULT_API}")
        request = urllib.request.Request(f"{self.url}{'' if path else APICURIO_DEFAULT_API}/ids/{schema_id.kind}s/"
                                         f"{schema_id.number}", headers={"Accept": "*/*"})
        if self._auth is not None:
            request.add_header("Authorization", "Basic " + base64.b64encode(self._auth.encode()).decode())
        for attempt in range(self.retries + 1):
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                    return answer.read().decode("utf-8")
            except HTTPError as exc:
                if exc.code == 404:
                    return None
                if exc.code < 500 or attempt == self.retries:
                    raise RegistryError(self._explain(exc, f"fetching schema {schema_id}")) from None
            except (OSError, UnicodeDecodeError) as exc:
                if attempt == self.retries:
                    raise RegistryError(self._explain(exc, f"fetching schema {schema_id}")) from None
            time.sleep(0.5 * 2**attempt)
        raise AssertionError("unreachable")

    def _store(self, subject: str, text: str) -> int:
        from confluent_kafka.schema_registry import Schema

        try:
            return int(self._sr().register_schema(subject, Schema(text, "AVRO")))
        except Exception as exc:
            raise RegistryError(self._explain(exc, f"registering a schema under subject {subject!r}")) from None

    def check(self, timeout: float = 10.0) -> None:
        """Raises :class:`RegistryError` when the registry cannot be reached or refuses the credentials: said before
        a run starts Spark, rather than by its first batch's tasks. Any other answer will do (a path of Apicurio's
        API may answer 404 here)."""
        request = urllib.request.Request(f"{self.url}/subjects" if not urlsplit(self.url).path else self.url)
        if self._auth is not None:
            request.add_header("Authorization", "Basic " + base64.b64encode(self._auth.encode()).decode())
        try:
            with urllib.request.urlopen(request, timeout=timeout):
                pass
        except HTTPError as exc:
            if exc.code in (401, 403):
                raise RegistryError(self._explain(exc, "checking it before the run")) from None
        except OSError as exc:
            raise RegistryError(self._explain(exc, "checking it before the run")) from None

    def _explain(self, exc: Exception, doing: str) -> str:
        """An error text with no credential in it (exception texts may quote URLs or request data)."""
        status = exc.code if isinstance(exc, HTTPError) else getattr(exc, "http_status_code", None)
        if status in (401, 403):
            what = f"refused our credentials (HTTP {status})" if self._auth else f"requires credentials (HTTP {status})"
        elif status is not None:
            message = exc.reason if isinstance(exc, HTTPError) else getattr(exc, "error_message", "") or ""
            what = f"answered HTTP {status}: {message}"
        else:
            what = f"could not be reached ({type(exc).__name__}: {exc})"
        text = f"{self.describe()} {what} while {doing}"
        if self._auth:
            user, _, password = self._auth.partition(":")
            for secret in (self._auth, quote(password, safe=""), password, quote(user, safe="") + ":"):
                if secret and len(secret) > 1:
                    text = text.replace(secret, "***")
        return text


class GlueRegistry(_CachingRegistry):
    """The AWS Glue Schema Registry, through boto3 (``pip install 'cdclake[glue]'``), named by
    ``glue://REGION[/REGISTRY][?endpoint=URL]``. Credentials come from the AWS SDK's own chain (environment,
    shared config and credentials files, the machine's role), on every Spark executor too: none is in the URL.
    Reading needs only the region (a schema version's UUID is unique in it); registering schemas (encoders)
    needs the registry's name, and makes each subject a schema of that name with compatibility NONE, as TiCDC
    does. ``endpoint`` reaches Glue through a VPC endpoint or a stand-in."""

    id_kinds = (uuid.UUID,)

    def __init__(self, url: str) -> None:
        super().__init__()
        parts = urlsplit(url)
        query = parse_qs(parts.query)
        unknown = set(query) - {"endpoint"}
        if parts.scheme != "glue" or not parts.hostname or unknown or parts.username or parts.password:
            raise ValueError(f"an AWS Glue registry is glue://REGION[/REGISTRY][?endpoint=URL], not {redact(url)!r}"
                             " (credentials come from the AWS SDK's environment, not the URL)")
        self.region = parts.hostname
        self.registry_name = parts.path.strip("/")
        self.endpoint = query.get("endpoint", [None])[-1]
        self._client: Any = None

    def describe(self) -> str:
        name = f"registry {self.registry_name!r}" if self.registry_name else "schema registry"
        where = f" via {self.endpoint}" if self.endpoint else ""
        return f"AWS Glue {name} in {self.region}{where}"

    def _glue(self) -> Any:
        if self._client is None:
            try:
                import boto3
                from botocore.config import Config
            except ImportError:
                raise RegistryError(f"{self.describe()} needs boto3: pip install 'cdclake[glue]'") from None
            # As the HTTP registry's client: a registry that hangs fails the run in about a minute, not in five.
            config = Config(connect_timeout=10, read_timeout=30, retries={"mode": "standard", "max_attempts": 3})
            self._client = boto3.client("glue", region_name=self.region, endpoint_url=self.endpoint, config=config)
        return self._client

    def _fetch(self, schema_id: SchemaId) -> str | None:
        glue = self._glue()
        try:
            version = glue.get_schema_version(SchemaVersionId=str(schema_id))
        except glue.exceptions.EntityNotFoundException:
            return None
        except Exception as exc:
            raise RegistryError(f"{self.describe()} failed while fetching schema version {schema_id}: "
                                f"{type(exc).__name__}: {exc}") from None
        if version.get("DataFormat", "AVRO") != "AVRO":
            raise DecodeError(f"schema version {schema_id} in {self.describe()} is {version['DataFormat']}, not Avro")
        return version["SchemaDefinition"]

    def _store(self, subject: str, text: str) -> SchemaId:
        if not self.registry_name:
            raise RegistryError(f"registering a schema needs the registry's name: glue://{self.region}/REGISTRY")
        glue = self._glue()
        try:
            try:
                answer = glue.register_schema_version(
                    SchemaId={"RegistryName": self.registry_name, "SchemaName": subject}, SchemaDefinition=text)
            except glue.exceptions.EntityNotFoundException:  # the subject's first schema
                answer = glue.create_schema(
                    RegistryId={"RegistryName": self.registry_name}, SchemaName=subject, DataFormat="AVRO",
                    Compatibility="NONE", SchemaDefinition=text)
        except Exception as exc:
            raise RegistryError(f"{self.describe()} failed while registering a schema as {subject!r}: "
                                f"{type(exc).__name__}: {exc}") from None
        return uuid.UUID(answer["SchemaVersionId"])


def redact(url: str) -> str:
    """``url`` with any ``user:password@`` replaced by ``***@``."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit((parts.scheme, "***@" + parts.netloc.rpartition("@")[2], parts.path, parts.query, ""))


def registry_from(url_or_dir: str | os.PathLike[str]) -> SchemaRegistry:
    """An :class:`HttpRegistry` for an ``http(s)://`` URL, a :class:`GlueRegistry` for ``glue://``, a
    :class:`MemoryRegistry` for ``memory:``, otherwise a :class:`DirectoryRegistry` on that folder
    (``file://`` prefix allowed)."""
    text = os.fspath(url_or_dir)
    lowered = text.lower()
    if lowered.startswith(("http://", "https://")):
        return HttpRegistry(text)
    if lowered.startswith("glue://"):
        return GlueRegistry(text)
    if lowered == "memory:":
        return MemoryRegistry()
    if lowered.startswith("file://"):
        text = unquote(urlsplit(text).path)
    if not text:
        raise ValueError("no schema registry given: pass an http(s):// or glue:// URL or a folder of <id>.avsc files")
    return DirectoryRegistry(text)


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


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """A multi-byte Avro varint starting at ``pos`` (readers inline the one-byte case): its raw value,
    before zig-zag decoding, and the position after it. Shared by the generated Avro readers."""
    byte = data[pos]
    result = byte & 0x7F
    shift = 7
    pos += 1
    while byte >= 0x80:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if shift > 70:
            raise ValueError("varint longer than 10 bytes")
    return result, pos

"""A Confluent-compatible REST schema registry, and Apicurio Registry's core API for Apicurio's own IDs."""

from __future__ import annotations

import base64
import time
import urllib.request
from typing import Any
from urllib.error import HTTPError
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from cdclake.errors import RegistryError
from cdclake.formats.avro.framing import APICURIO_DEFAULT_API, APICURIO_NATIVE, ApicurioId, SchemaId
from cdclake.formats.avro.registry.base import CachingRegistry, redact


class HttpRegistry(CachingRegistry):
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

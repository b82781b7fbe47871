"""The AWS Glue Schema Registry, through boto3."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import parse_qs, urlsplit

from cdclake.errors import RegistryError
from cdclake.formats.avro.framing import SchemaId
from cdclake.formats.avro.registry.base import CachingRegistry, redact
from cdclake.formats.base import DecodeError


class GlueRegistry(CachingRegistry):
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

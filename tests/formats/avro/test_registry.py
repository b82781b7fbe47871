from __future__ import annotations

import json
import logging
import pickle
import socket
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdclake.errors import RegistryError
from cdclake.formats.avro.datum import read_datum, write_datum
from cdclake.formats.avro.framing import ApicurioId, frame, unframe
from cdclake.formats.avro.registry import registry_from
from cdclake.formats.avro.registry.base import SchemaRegistry, redact
from cdclake.formats.avro.registry.directory import DirectoryRegistry
from cdclake.formats.avro.registry.glue import GlueRegistry
from cdclake.formats.avro.registry.http import HttpRegistry
from cdclake.formats.avro.registry.memory import MemoryRegistry
from cdclake.formats.base import DecodeError
from tests.helpers import glue
from tests.helpers.registries import FakeRegistry

SCHEMA = {
    "type": "record",
    "name": "t1",
    "namespace": "default.test",
    "fields": [
        {"name": "id", "type": {"type": "int", "connect.parameters": {"tidb_type": "INT"}}},
        {"default": None, "name": "name", "type": ["null", {"type": "string"}]},
    ],
}
SCHEMA_2 = {**SCHEMA, "fields": [*SCHEMA["fields"], {"default": 0, "name": "extra", "type": "long"}]}


@pytest.fixture
def server() -> Iterator[FakeRegistry]:
    with FakeRegistry() as fake:
        yield fake


@pytest.fixture
def secured() -> Iterator[FakeRegistry]:
    with FakeRegistry(auth=("alice", "s3cr:et")) as fake:
        yield fake


# --- registries ------------------------------------------------------------------------------------


def _registries(tmp_path: Path, fake: FakeRegistry) -> list[SchemaRegistry]:
    return [MemoryRegistry(), DirectoryRegistry(tmp_path / "schemas"), HttpRegistry(fake.url())]


def test_every_registry_round_trips_and_reuses_ids(tmp_path, server):
    for registry in _registries(tmp_path, server):
        assert isinstance(registry, SchemaRegistry)
        data = write_datum(registry, "test_t1-value", SCHEMA, {"id": 1, "name": "aa"})
        schema_id, payload = unframe(data)
        assert payload == bytes.fromhex("0202046161")
        assert read_datum(registry, data) == (schema_id, {"id": 1, "name": "aa"})
        # an identical schema gets the same id; a new version a new one
        assert registry.register("test_t1-value", json.loads(json.dumps(SCHEMA))) == schema_id
        assert registry.register("test_t1-value", SCHEMA_2) != schema_id
        assert registry.raw_schema(schema_id)["fields"][0]["type"]["connect.parameters"] == {"tidb_type": "INT"}


def test_unknown_schema_id_is_a_decode_error(tmp_path, server):
    for registry in _registries(tmp_path, server):
        registry.register("s", SCHEMA)
        with pytest.raises(DecodeError, match="schema id 77 is not in"):
            read_datum(registry, frame(77, b"\x02"))


def test_truncated_and_trailing_datums_are_decode_errors():
    registry = MemoryRegistry()
    data = write_datum(registry, "s", SCHEMA, {"id": 1, "name": "aa"})
    with pytest.raises(DecodeError, match="truncated"):
        read_datum(registry, data[:-1])
    with pytest.raises(DecodeError, match="truncated"):
        read_datum(registry, data[:5])
    with pytest.raises(DecodeError, match="1 trailing byte"):
        read_datum(registry, data + b"\x00")


def test_directory_registry_files_and_index(tmp_path):
    registry = DirectoryRegistry(tmp_path)
    first = registry.register("a-value", SCHEMA)
    second = registry.register("b-value", SCHEMA_2)
    again = registry.register("b-value", SCHEMA)
    assert (first, second, again) == (1, 2, 1)
    assert json.loads((tmp_path / "1.avsc").read_text()) == SCHEMA
    assert json.loads((tmp_path / "subjects.json").read_text()) == {"a-value": [1], "b-value": [2, 1]}
    # a fresh object over the same folder sees the same ids and continues numbering
    other = DirectoryRegistry(tmp_path)
    assert other.register("c-value", {**SCHEMA, "name": "t3"}) == 3
    assert other.schema(2) is other.schema(2)  # cached


def test_directory_registry_reads_hand_written_files(tmp_path):
    (tmp_path / "42.avsc").write_text(json.dumps(SCHEMA))
    (tmp_path / "43.avsc").write_text("{not json")
    registry = registry_from(str(tmp_path))
    assert read_datum(registry, frame(42, bytes.fromhex("0400"))) == (42, {"id": 2, "name": None})
    with pytest.raises(DecodeError, match=r"schema id 43 .* is not JSON"):
        registry.schema(43)
    # a Glue-framed message's schema, saved under its version's UUID
    version = uuid.UUID("8af4ade0-9b3e-4fc8-88de-bd98b194ec05")
    (tmp_path / f"{version}.avsc").write_text(json.dumps(SCHEMA))
    assert read_datum(registry, frame(version, bytes.fromhex("0400"))) == (version, {"id": 2, "name": None})


def test_registry_from_picks_by_form(tmp_path):
    assert isinstance(registry_from("http://127.0.0.1:8081"), HttpRegistry)
    assert isinstance(registry_from("HTTPS://u:p@registry.example:8081/sr"), HttpRegistry)
    assert isinstance(registry_from("memory:"), MemoryRegistry)
    directory = registry_from(f"file://{tmp_path}")
    assert isinstance(directory, DirectoryRegistry) and directory.path == tmp_path
    assert isinstance(registry_from(tmp_path), DirectoryRegistry)
    with pytest.raises(ValueError, match="no schema registry"):
        registry_from("")


def test_registries_are_picklable_with_caches(tmp_path, server):
    for registry in _registries(tmp_path, server):
        schema_id = registry.register("s", SCHEMA)
        registry.schema(schema_id)
        copy = pickle.loads(pickle.dumps(registry))
        assert copy.schema(schema_id) == registry.schema(schema_id)


# --- HTTP ------------------------------------------------------------------------------------------


def test_http_registry_caches_and_calls_confluent_endpoints(server):
    registry = HttpRegistry(server.url() + "/")
    schema_id = registry.register("test_t1-value", SCHEMA)
    assert server.requests == [("POST", "/subjects/test_t1-value/versions?normalize=False")]
    fresh = HttpRegistry(server.url())
    for _ in range(3):
        assert fresh.schema(schema_id)["name"] == "default.test.t1"
    assert server.requests[1:] == [("GET", f"/schemas/ids/{schema_id}")]


def test_http_registry_client_is_lazy_and_not_pickled(server):
    registry = HttpRegistry(server.url())
    assert registry._client is None
    registry.register("s", SCHEMA)
    assert registry._client is not None
    copy = pickle.loads(pickle.dumps(registry))
    assert copy._client is None
    assert copy.register("s2", SCHEMA_2) == 2


def test_http_basic_auth_from_url(secured):
    registry = HttpRegistry(secured.url("alice:s3cr%3Aet"))
    assert registry.url == secured.url()
    schema_id = registry.register("s", SCHEMA)
    assert HttpRegistry(secured.url("alice:s3cr%3Aet")).schema(schema_id)["name"] == "default.test.t1"


def test_http_auth_failure_names_no_credentials(secured, caplog):
    caplog.set_level(logging.DEBUG)
    secured.schemas[1] = json.dumps(SCHEMA)
    registry = HttpRegistry(secured.url("alice:wrong-password"))
    with pytest.raises(RegistryError) as info:
        registry.schema(1)
    text = str(info.value)
    assert "refused our credentials (HTTP 401)" in text and secured.url() in text
    assert "wrong-password" not in text and "alice" not in text
    assert "wrong-password" not in repr(registry) and "wrong-password" not in caplog.text
    with pytest.raises(RegistryError, match=r"requires credentials \(HTTP 401\)"):
        HttpRegistry(secured.url()).register("s", SCHEMA)


def test_http_unknown_id_is_a_decode_error(server):
    registry = HttpRegistry(server.url())
    with pytest.raises(DecodeError, match=f"schema id 9 is not in schema registry {server.url()}"):
        read_datum(registry, frame(9, b"\x02"))
    # Apicurio's 8-byte ids behind 0x00 (or a bare datum starting 0x00) read as some unknown id.
    with pytest.raises(DecodeError, match=r"schema id 0 is not in schema registry .*Apicurio.*framing=apicurio"):
        read_datum(registry, b"\x00" + (7).to_bytes(8, "big") + b"\x02")


# --- Apicurio Registry's core API (debezium.md §3) -------------------------------------------------


@pytest.mark.parametrize("path", ["", "/apis/registry/v2", "/apis/registry/v3/"])
def test_http_registry_reads_apicurio_ids_from_its_core_api(secured, path):
    text = json.dumps(SCHEMA)
    secured.apicurio.update({ApicurioId("globalId", 42): text, ApicurioId("contentId", 7): json.dumps(SCHEMA_2)})
    registry = HttpRegistry(secured.url("alice:s3cr%3Aet") + path)
    assert registry.raw_schema(ApicurioId("globalId", 42)) == SCHEMA
    assert registry.raw_schema(ApicurioId("contentId", 7)) == SCHEMA_2
    registry.schema(ApicurioId("globalId", 42))  # cached: no request
    api = path.rstrip("/") or "/apis/registry/v2"
    assert [r for r in secured.requests] == [("GET", f"{api}/ids/globalIds/42"), ("GET", f"{api}/ids/contentIds/7")]
    with pytest.raises(DecodeError, match=f"schema id globalId 7 is not in schema registry {secured.url()}"
                                          f"{path.rstrip('/')}. An id in the message's bytes .* option apicurio-id"):
        registry.schema(ApicurioId("globalId", 7))


def test_apicurio_ids_refused_credentials_and_the_ccompat_api_are_registry_errors(secured):
    with pytest.raises(RegistryError, match=r"refused our credentials \(HTTP 401\) while fetching schema globalId 1"):
        HttpRegistry(secured.url("alice:wrong")).schema(ApicurioId("globalId", 1))
    with pytest.raises(RegistryError, match=r"Confluent-compatible API.*give its core API, http://HOST/apis/registry/v2"):
        HttpRegistry(secured.url() + "/apis/ccompat/v7").schema(ApicurioId("globalId", 1))
    for registry in (MemoryRegistry(), DirectoryRegistry("/nonexistent")):
        with pytest.raises(DecodeError, match="comes from an Apicurio registry's framing"):
            registry.schema(ApicurioId("contentId", 1))


def test_http_unreachable_registry_is_a_registry_error(server):
    port = server.port
    server.server.shutdown()
    server.server.server_close()
    registry = HttpRegistry(f"http://bob:hunter22@127.0.0.1:{port}", retries=0, timeout=2)
    for schema_id in (1, ApicurioId("globalId", 1)):
        with pytest.raises(RegistryError, match="could not be reached") as info:
            registry.schema(schema_id)
        assert "hunter22" not in str(info.value)


def test_redact_and_bad_urls():
    assert redact("https://u:p@h:1/x") == "https://***@h:1/x"
    assert redact("http://h") == "http://h"
    with pytest.raises(ValueError, match=r"\*\*\*@") as info:
        HttpRegistry("ftp://u:pw@h")
    assert "pw" not in str(info.value)


# --- AWS Glue --------------------------------------------------------------------------------------


def test_glue_registry_round_trips_and_reuses_versions(glue_registry):
    registry = registry_from(glue_registry)
    assert isinstance(registry, GlueRegistry) and isinstance(registry, SchemaRegistry)
    data = write_datum(registry, "test_t1-value", SCHEMA, {"id": 1, "name": "aa"})
    version, payload = unframe(data)
    assert isinstance(version, uuid.UUID) and data[:2] == b"\x03\x00" and data[2:18] == version.bytes
    assert payload == bytes.fromhex("0202046161")
    # a reader that has seen nothing fetches the schema by its version's UUID
    reader = registry_from(glue_registry)
    assert read_datum(reader, data) == (version, {"id": 1, "name": "aa"})
    assert read_datum(reader, b"\x03\x05" + version.bytes + zlib.compress(payload))[1] == {"id": 1, "name": "aa"}
    assert reader.raw_schema(version)["fields"][0]["type"]["connect.parameters"] == {"tidb_type": "INT"}
    # an identical schema is the same version, also from another client; a new one is a new version
    assert registry_from(glue_registry).register("test_t1-value", json.loads(json.dumps(SCHEMA))) == version
    newer = registry.register("test_t1-value", SCHEMA_2)
    assert newer != version and reader.schema(newer)["fields"][-1]["name"] == "extra"


def test_glue_registry_reads_with_the_region_alone(glue_registry, glue_endpoint):
    data = write_datum(registry_from(glue_registry), "s-value", SCHEMA, {"id": 7, "name": None})
    reader = registry_from(f"glue://{glue.REGION}?endpoint={glue_endpoint}")
    assert read_datum(reader, data)[1] == {"id": 7, "name": None}
    with pytest.raises(RegistryError, match="registering a schema needs the registry's name"):
        reader.register("s-value", SCHEMA_2)


def test_glue_unknown_version_and_other_framings_are_decode_errors(glue_registry):
    registry = registry_from(glue_registry)
    unknown = uuid.UUID(int=7)
    with pytest.raises(DecodeError, match=f"schema id {unknown} is not in AWS Glue registry 'registry-"):
        read_datum(registry, frame(unknown, b"\x02"))
    with pytest.raises(DecodeError, match="schema id 3 comes from a Confluent registry's framing, which AWS Glue"):
        read_datum(registry, frame(3, b"\x02"))
    with pytest.raises(DecodeError, match=f"schema id {unknown} comes from an AWS Glue registry's framing, which "
                                          "memory registry does not hold"):
        read_datum(MemoryRegistry(), frame(unknown, b"\x02"))


def test_glue_schema_of_another_data_format_is_a_decode_error(glue_registry, glue_endpoint):
    import boto3

    client = boto3.client("glue", region_name=glue.REGION, endpoint_url=glue_endpoint)
    name = glue_registry.split("/")[3].split("?")[0]
    created = client.create_schema(RegistryId={"RegistryName": name}, SchemaName="j", DataFormat="JSON",
                                   Compatibility="NONE", SchemaDefinition='{"type": "object"}')
    version = uuid.UUID(created["SchemaVersionId"])
    with pytest.raises(DecodeError, match=f"schema version {version} .* is JSON, not Avro"):
        read_datum(registry_from(glue_registry), frame(version, b"\x02"))


def test_glue_registry_is_picklable_and_its_client_is_not(glue_registry):
    registry = registry_from(glue_registry)
    version = registry.register("s", SCHEMA)
    assert registry._client is not None
    copy = pickle.loads(pickle.dumps(registry))
    assert copy._client is None and copy.schema(version) == registry.schema(version)
    assert copy.register("s", SCHEMA_2) != version


def test_glue_unreachable_registry_is_a_registry_error():
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    registry = registry_from(f"glue://{glue.REGION}/r?endpoint=http://127.0.0.1:{port}")
    with pytest.raises(RegistryError, match=f"AWS Glue registry 'r' in {glue.REGION} via http://127.0.0.1:{port} "
                                            "failed while fetching schema version"):
        registry.schema(uuid.UUID(int=1))


def test_glue_urls():
    registry = registry_from("glue://eu-central-1/cdc?endpoint=https://glue.vpce.example")
    assert (registry.region, registry.registry_name, registry.endpoint) == (
        "eu-central-1", "cdc", "https://glue.vpce.example")
    assert registry_from("GLUE://ap-east-1").registry_name == ""
    for bad in ("glue://", "glue://r/n?profile=x", "glue://key:secret@us-west-1/n"):
        with pytest.raises(ValueError, match=r"glue://REGION\[/REGISTRY\]") as info:
            registry_from(bad)
        assert "secret" not in str(info.value)

"""A schema registry on 127.0.0.1 for tests, speaking the HTTP APIs of Confluent's and Apicurio's registries, and
Apicurio's framings of a message made from Confluent's."""

from __future__ import annotations

import base64
import json
import struct
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cdclake.formats.avro.framing import ApicurioId, frame, unframe
from cdclake.formats.avro.registry.base import SchemaRegistry
from cdclake.model.records import Record


class FakeRegistry:
    """A Confluent-compatible schema registry on 127.0.0.1: the endpoints confluent-kafka's client calls,
    optional basic auth, Confluent's error codes; and Apicurio Registry's core API for reading schemas by its
    ids (``/apis/registry/v2|v3/ids/globalIds|contentIds/N``, answering the schema text as is). It records every
    request for assertions."""

    def __init__(self, auth: tuple[str, str] | None = None) -> None:
        self.auth = auth
        self.schemas: dict[int, str] = {}
        self.apicurio: dict[ApicurioId, str] = {}
        self.subjects: dict[str, list[int]] = {}
        self.requests: list[tuple[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authorised(self) -> bool:
                if outer.auth is None:
                    return True
                expected = "Basic " + base64.b64encode(":".join(outer.auth).encode()).decode()
                if self.headers.get("Authorization") == expected:
                    return True
                self._reply(401, {"error_code": 40101, "message": "Unauthorized"})
                return False

            def do_GET(self) -> None:
                outer.requests.append(("GET", self.path))
                if not self._authorised():
                    return
                parts = self.path.split("?")[0].strip("/").split("/")
                if (len(parts) == 6 and parts[:2] == ["apis", "registry"] and parts[2] in ("v2", "v3")
                        and parts[3] == "ids" and parts[4] in ("globalIds", "contentIds") and parts[5].isdigit()):
                    text = outer.apicurio.get(ApicurioId(parts[4][:-1], int(parts[5])))
                    data = (text or '{"error_code":404,"message":"No content with id"}').encode()
                    self.send_response(200 if text else 404)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                if len(parts) == 3 and parts[:2] == ["schemas", "ids"] and parts[2].isdigit():
                    text = outer.schemas.get(int(parts[2]))
                    if text is None:
                        self._reply(404, {"error_code": 40403, "message": "Schema not found"})
                    else:
                        self._reply(200, {"schema": text})
                    return
                self._reply(404, {"error_code": 404, "message": "HTTP 404 Not Found"})

            def do_POST(self) -> None:
                outer.requests.append(("POST", self.path))
                if not self._authorised():
                    return
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                parts = self.path.split("?")[0].strip("/").split("/")
                if len(parts) == 3 and parts[0] == "subjects" and parts[2] == "versions":
                    text = body["schema"]
                    canonical = json.dumps(json.loads(text), sort_keys=True)
                    found = [
                        i for i, t in outer.schemas.items() if json.dumps(json.loads(t), sort_keys=True) == canonical
                    ]
                    schema_id = found[0] if found else len(outer.schemas) + 1
                    outer.schemas[schema_id] = text
                    outer.subjects.setdefault(parts[1], []).append(schema_id)
                    self._reply(200, {"id": schema_id})
                    return
                self._reply(404, {"error_code": 404, "message": "HTTP 404 Not Found"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def url(self, userinfo: str = "") -> str:
        return f"http://{userinfo + '@' if userinfo else ''}127.0.0.1:{self.port}"

    def __enter__(self) -> FakeRegistry:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


# Apicurio's ids of a schema that the Confluent-framed message names by id N: distinct numbers, so that a decoder that
# asks for the wrong kind, or reads the wrong bytes, finds nothing.
GLOBAL_ID_BASE = 100
CONTENT_ID_BASE = 5000
APICURIO_FORMS = ("headers", "8-byte", "4-byte")


def as_apicurio_framed(records: Sequence[Record], schemas: SchemaRegistry, fake: FakeRegistry,
                    form: str) -> list[Record]:
    """Confluent-framed records (their schemas in ``schemas``) as Apicurio Registry's serializers write them, their
    schemas put into ``fake``: ``headers`` (2.x serializers' default: the bare datum, the globalId in a header),
    ``8-byte`` (2.x's Kafka Connect converter: 0x00 and an 8-byte globalId) or ``4-byte`` (3.x's default: 0x00
    and a 4-byte contentId)."""
    def reframed(data: bytes | None, part: str, headers: list[tuple[str, bytes | None]]) -> bytes | None:
        if data is None:
            return None
        schema_id, datum = unframe(data)
        assert isinstance(schema_id, int)
        text = json.dumps(schemas.raw_schema(schema_id))
        global_id = ApicurioId("globalId", GLOBAL_ID_BASE + schema_id)
        content_id = ApicurioId("contentId", CONTENT_ID_BASE + schema_id)
        fake.apicurio.update({global_id: text, content_id: text})
        if form == "headers":
            headers.append((f"apicurio.{part}.globalId", struct.pack(">q", global_id.number)))
            return datum
        if form == "8-byte":
            return b"\x00" + struct.pack(">q", global_id.number) + datum
        return frame(content_id.number, datum)

    out = []
    for record in records:
        headers = list(record.headers)
        key, value = reframed(record.key, "key", headers), reframed(record.value, "value", headers)
        out.append(Record(key=key, value=value, topic=record.topic, partition=record.partition, offset=record.offset,
                          timestamp=record.timestamp, headers=headers))
    return out

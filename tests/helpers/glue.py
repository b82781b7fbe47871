"""A local stand-in for the AWS Glue Schema Registry: moto's server on 127.0.0.1, speaking Glue's real HTTP
API, so boto3 and cdclake's :class:`~cdclake.formats.avro.registry.glue.GlueRegistry` run unchanged against it."""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator
from contextlib import contextmanager

REGION = "us-west-1"

# boto3 signs every request, also those to the stand-in, so it needs credentials of some kind; Spark's
# Python workers see the environment their JVM started with, so they are set when the tests are imported.
if not os.environ.get("AWS_ACCESS_KEY_ID"):
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")


@contextmanager
def glue_server() -> Iterator[str]:
    """The endpoint URL of a fresh server, for as long as the block runs."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def create_registry(endpoint: str, name: str) -> str:
    """A new registry of that name on the server; the ``registry`` option that names it."""
    import boto3

    boto3.client("glue", region_name=REGION, endpoint_url=endpoint).create_registry(RegistryName=name)
    return f"glue://{REGION}/{name}?endpoint={endpoint}"


def glue_compressed(data: bytes | None) -> bytes | None:
    """A Glue-framed message as AWS's serializer writes it with zlib compression on."""
    return None if data is None else b"\x03\x05" + data[2:18] + zlib.compress(data[18:])

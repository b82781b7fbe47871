"""A real Apache Kafka broker for the tests: KRaft mode (one node, broker and controller), from the jars that
``make jars`` fetches (jars/kafka/pom.xml), on free loopback ports with its log in a temporary folder, started
once per test session by the first test that asks for it and stopped at its end; and, for tests that kill and
restart a broker, one of their own (``own_broker``).

The shared broker also listens with SASL_PLAINTEXT (mechanism PLAIN, the users of :data:`USERS`) and SSL (a
server certificate for 127.0.0.1 signed by a CA made for the session: :attr:`Broker.ca`)."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from cdclake.model.records import Record
from cdclake.sources import kafka
from cdclake.spark import jars

START_TIMEOUT_S = 60.0
USERS = {"alice": "alice-secret", "bob": "bob-secret"}  # SASL/PLAIN users of the shared broker

# What a single-node test broker needs, and what makes it quick: no rebalance delay, internal topics with one
# replica, few threads. Topics are created by the tests (ensure_topics), never by a read.
SETTINGS = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "num.partitions": "1",
    "auto.create.topics.enable": "false",
    # Kept for ever: the simulator's records carry timestamps of the past, which time-based retention (a week
    # by default) would delete within minutes.
    "log.retention.ms": "-1",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "num.network.threads": "2",
    "num.io.threads": "2",
    "background.threads": "2",
    "log.cleaner.threads": "1",
}
JVM = ["-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true"]
LOG4J = """\
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = out
"""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _classpath() -> str:
    found = jars.cached("kafka")
    if not found:
        raise RuntimeError(f"Apache Kafka's jars are not in {jars.CACHE / 'kafka'}: run `make jars` first")
    return str(jars.CACHE / "kafka" / "*")


@dataclass(frozen=True)
class Certificates:
    """A CA and a server certificate it signed for 127.0.0.1, as PEM files; and a second, unrelated CA."""

    ca: Path
    server: Path  # the server's key (PKCS#8) and certificate, as Kafka's PEM key store wants them
    other_ca: Path


def _certificates(folder: Path) -> Certificates:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def certificate(name: str, key, issuer_name: str, issuer_key, ca: bool) -> x509.Certificate:
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
                   .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer_name)]))
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(hours=1))
                   .not_valid_after(now + datetime.timedelta(days=2))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if not ca:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                             x509.DNSName("localhost")]), critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    def pem(cert: x509.Certificate) -> bytes:
        return cert.public_bytes(serialization.Encoding.PEM)

    ca_key, other_key, server_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    paths = Certificates(folder / "ca.pem", folder / "server.pem", folder / "other-ca.pem")
    paths.ca.write_bytes(pem(certificate("cdclake test CA", ca_key, "cdclake test CA", ca_key, True)))
    paths.other_ca.write_bytes(pem(certificate("another CA", other_key, "another CA", other_key, True)))
    key = server_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption())
    paths.server.write_bytes(key + pem(certificate("127.0.0.1", server_key, "cdclake test CA", ca_key, False)))
    return paths


@dataclass
class Broker:
    servers: str  # the PLAINTEXT listener
    process: subprocess.Popen
    folder: Path
    command: list[str]
    format_command: list[str]  # formats its (empty) storage
    listeners: dict[str, str] = field(default_factory=dict)  # security protocol -> HOST:PORT
    certificates: Certificates | None = None

    @property
    def log(self) -> Path:
        return self.folder / "kafka.log"

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

    def restart(self, attempts: int = 3, *, without_log: bool = False) -> None:
        """The broker started again on the same ports (after :meth:`kill`), once it answers: with its log, so
        with every record it had acknowledged, or ``without_log``: with its storage wiped and formatted anew,
        so with no topics and no records (a broker replaced by an empty one at the same address)."""
        assert self.process.poll() is not None, "kill() the broker first"
        if without_log:
            shutil.rmtree(self.folder / "data")
            _format(self.format_command, self.log)
        error: RuntimeError | None = None
        for _ in range(attempts):  # bounded: a port may still be held for a moment (e.g. a client's connect)
            try:
                self.process = _run(self.command, self.log, self.servers)
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


def _run(command: list[str], log: Path, servers: str) -> subprocess.Popen:
    """The broker's JVM, once its PLAINTEXT listener answers."""
    with open(log, "ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and process.poll() is None:
        if _answers(servers):
            return process
        time.sleep(0.2)
    _stop(process)
    raise RuntimeError(f"Kafka did not answer on {servers} within {START_TIMEOUT_S:.0f}s; its log:\n"
                       + log.read_text(errors="replace")[-3000:])


def _format(command: list[str], log: Path) -> None:
    with open(log, "ab") as out:
        subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=True, timeout=START_TIMEOUT_S)


def _properties(folder: Path, listeners: dict[str, str], certificates: Certificates | None) -> dict[str, str]:
    settings = {
        **SETTINGS,
        "log.dirs": str(folder / "data"),
        "listeners": ",".join(f"{name}://{where}" for name, where in listeners.items()),
        "advertised.listeners": ",".join(f"{name}://{where}" for name, where in listeners.items()
                                         if name != "CONTROLLER"),
        "listener.security.protocol.map": ",".join(f"{name}:{'PLAINTEXT' if name == 'CONTROLLER' else name}"
                                                   for name in listeners),
        "controller.quorum.bootstrap.servers": listeners["CONTROLLER"],
    }
    if "SASL_PLAINTEXT" in listeners:
        users = " ".join(f'user_{name}="{password}"' for name, password in USERS.items())
        settings |= {
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config":
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};",
        }
    if certificates is not None:
        settings |= {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(certificates.server)}
    return settings


def _cluster_id() -> str:
    """A new KRaft cluster id: a random UUID in URL-safe base64. One that begins with ``-`` is drawn again, as Kafka's
    own ``Uuid.randomUuid`` does: the storage tool would read it as an option (CI met one, about 1 in 64)."""
    while True:
        cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster.startswith("-"):
            return cluster


def _start(folder: Path, secure: bool, certificates: Certificates | None = None) -> Broker:
    """A broker with its storage formatted in ``folder``, on free ports: PLAINTEXT, plus SASL_PLAINTEXT and SSL
    when ``secure``."""
    folder.mkdir()
    names = ["PLAINTEXT", "CONTROLLER"] + (["SASL_PLAINTEXT", "SSL"] if secure else [])
    listeners = {name: f"127.0.0.1:{free_port()}" for name in names}
    properties = folder / "server.properties"
    properties.write_text("".join(f"{k}={v}\n" for k, v in
                                  _properties(folder, listeners, certificates if secure else None).items()))
    (folder / "log4j2.properties").write_text(LOG4J)
    java = ["java", *JVM, f"-Dlog4j2.configurationFile={folder / 'log4j2.properties'}", "-cp", _classpath()]
    cluster = _cluster_id()
    log = folder / "kafka.log"
    format_command = [*java, "kafka.tools.StorageTool", "format", "--cluster-id", cluster, "--config",
                      str(properties), "--standalone"]
    _format(format_command, log)
    command = [*java, "kafka.Kafka", str(properties)]
    process = _run(command, log, listeners["PLAINTEXT"])
    return Broker(listeners["PLAINTEXT"], process, folder, command, format_command,
                  {k: v for k, v in listeners.items() if k != "CONTROLLER"}, certificates if secure else None)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGCONT)  # a test that failed while the broker was paused
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def _started(folder: Path, secure: bool = False) -> Broker:
    certificates = _certificates(folder) if secure else None
    error: Exception | None = None
    for attempt in range(3):  # a free port may be taken between the probe and the bind
        try:
            return _start(folder / f"broker-{attempt}", secure, certificates)
        except RuntimeError as exc:
            error = exc
    raise error  # type: ignore[misc]


@pytest.fixture(scope="session")
def broker(tmp_path_factory) -> Iterator[Broker]:
    started = _started(tmp_path_factory.mktemp("kafka"), secure=True)
    try:
        yield started
    finally:
        _stop(started.process)


@pytest.fixture
def own_broker(tmp_path) -> Iterator[Broker]:
    """A broker for this test alone, which it may kill and restart without disturbing the shared one."""
    started = _started(tmp_path)
    try:
        yield started
    finally:
        _stop(started.process)



_BATCH_LINE = re.compile(rb"^(?:\d\d:\d\d:\d\d )?batch ", re.M)


def batches_logged(log: Path) -> int:
    """How many progress lines of applied batches a run's output (stdout and stderr) in ``log`` holds so far."""
    return len(_BATCH_LINE.findall(log.read_bytes())) if log.exists() else 0

"""Kafka topics through confluent-kafka (librdkafka): what the Spark source ``cdclake-kafka``, ``cdclake run
--kafka``, ``cdclake capture`` and ``cdclake generate --kafka`` share. No Spark here.

Offsets are those of Spark's Kafka source: ``{topic: {partition: offset}}`` where an offset is the next one to
read, so a range ``start → end`` covers ``[start, end)`` of each partition. In JSON, partitions are strings and
-2 / -1 stand for earliest / latest: ``{"orders": {"0": 42, "1": -2}}``.

Reading is by offset, never through a consumer group: a range is read with ``assign`` at its start and stops at
its end, so reading the same range again gives the same records (compacted-away offsets and transaction
markers are simply absent). A broker that is down or unreachable is waited for, with a warning that names the
servers every few seconds, for ``retry_timeout_s``; then :class:`KafkaUnavailable`. Records a range was
planned to hold but the broker does not have (deleted by retention, a truncated or recreated topic) are
:class:`DataLoss`, unless ``fail_on_data_loss`` is off. Nothing is ever skipped silently.

Client settings are librdkafka's (``security.protocol``, ``sasl.mechanism``, ``sasl.username``,
``sasl.password``, ``ssl.ca.location`` …); a Java ``sasl.jaas.config`` with a username and password is
translated. Secret values never appear in ``repr``, logs or error messages: :meth:`ClientSettings.redacted`.
Reads keep librdkafka's ``isolation.level`` default, ``read_committed`` (records of aborted transactions are
never read; Spark's own connector defaults to ``read_uncommitted``); latest offsets are asked under the same
level, so a planned range never waits on an open transaction's records.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from cdclake.errors import DataLoss, KafkaSourceError, KafkaUnavailable
from cdclake.model.records import Record, write_records
from cdclake.sources.files import RECORD_ARROW, UNREADABLE_HEADER, records_to_arrow

log = logging.getLogger("cdclake.kafka")
# librdkafka reports every failed connection attempt; cdclake says once, plainly, what it is waiting for.
# Enable this logger to see the client's own messages.
_client_log = logging.getLogger("cdclake.kafka.librdkafka")
if _client_log.level == logging.NOTSET:
    _client_log.setLevel(logging.CRITICAL)

EARLIEST = -2
LATEST = -1
REDACTED = "***"
WARN_EVERY_S = 10.0
CHUNK = 10_000

Offsets = dict[str, dict[int, int]]
# Spark's Kafka source without includeHeaders: the same columns but the last.
RECORD_NO_HEADERS = pa.schema([f for f in RECORD_ARROW if f.name != "headers"])
T = TypeVar("T")


# ------------------------------------------------------------------------------------------- client settings

_SECRET_WORDS = ("password", "secret", "jaas", "token", "pem", "credential", "oauthbearer.config")
_JAAS_FIELD = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def is_secret(name: str) -> bool:
    """Whether a client setting holds a secret (its value is never shown)."""
    lowered = name.lower()
    return any(word in lowered for word in _SECRET_WORDS)


def _from_jaas(text: str) -> dict[str, str]:
    """``sasl.jaas.config`` of Java's PLAIN/SCRAM login modules as librdkafka's username and password."""
    module = text.strip().split(maxsplit=1)[0] if text.strip() else ""
    fields = dict(_JAAS_FIELD.findall(text))
    if not module.endswith(("PlainLoginModule", "ScramLoginModule")) or not {"username", "password"} <= set(fields):
        raise ValueError("Kafka setting sasl.jaas.config: only a PlainLoginModule or ScramLoginModule with a "
                         "username and password can be used here; give sasl.username and sasl.password instead")
    unescape = re.compile(r"\\(.)")
    return {"sasl.username": unescape.sub(r"\1", fields["username"]),
            "sasl.password": unescape.sub(r"\1", fields["password"])}


@dataclass(frozen=True, repr=False)
class ClientSettings:
    """Where Kafka is and how to talk to it: bootstrap servers plus librdkafka settings passed through."""

    servers: str
    options: Mapping[str, str] = field(default_factory=dict)
    retry_timeout_s: float = 600.0  # how long an unreachable broker is waited for before giving up
    request_timeout_s: float = 10.0  # one metadata / offsets request

    def __post_init__(self) -> None:
        if not self.servers or not self.servers.strip():
            raise ValueError("Kafka bootstrap servers are required (HOST:PORT[,HOST:PORT…])")
        if not self.retry_timeout_s > 0:
            raise ValueError(f"the Kafka retry window must be more than 0 seconds, not {self.retry_timeout_s}")
        options = {str(k): str(v) for k, v in self.options.items()}
        if "bootstrap.servers" in options:
            raise ValueError("give the Kafka servers once, not also as the setting bootstrap.servers")
        if "sasl.jaas.config" in options:
            options.update({k: v for k, v in _from_jaas(options["sasl.jaas.config"]).items() if k not in options})
        object.__setattr__(self, "options", options)

    def retrying_for(self, seconds: float | None) -> ClientSettings:
        """These settings with a retry window of ``seconds`` (None: as they are)."""
        return self if seconds is None else replace(self, retry_timeout_s=seconds)

    def config(self, defaults: Mapping[str, Any] | None = None, **forced: Any) -> dict[str, Any]:
        """librdkafka configuration: our defaults, then the user's settings, then what the caller needs."""
        options = {k: v for k, v in self.options.items() if k != "sasl.jaas.config"}
        return {**(defaults or {}), **options, "bootstrap.servers": self.servers, **forced}

    def java_options(self) -> dict[str, str]:
        """The same settings for Spark's own (Java) Kafka connector: username and password as a JAAS config."""
        options = dict(self.options)
        username, password = options.pop("sasl.username", None), options.pop("sasl.password", None)
        if username is not None and "sasl.jaas.config" not in options:
            mechanism = options.get("sasl.mechanism", "PLAIN").upper()
            module = ("org.apache.kafka.common.security.scram.ScramLoginModule" if mechanism.startswith("SCRAM")
                      else "org.apache.kafka.common.security.plain.PlainLoginModule")
            options["sasl.jaas.config"] = (f'{module} required username="{_jaas_quote(username)}" '
                                           f'password="{_jaas_quote(password or "")}";')
        return options

    def request_timeout(self) -> float:
        """One request's timeout: never longer than the whole retry window."""
        return max(0.5, min(self.request_timeout_s, self.retry_timeout_s))

    def redacted(self) -> dict[str, str]:
        """The settings as they may be shown: secret values replaced by ``***``."""
        shown = {"bootstrap.servers": self.servers}
        shown.update({k: REDACTED if is_secret(k) else v for k, v in sorted(self.options.items())})
        return shown

    def scrub(self, text: str) -> str:
        """A client's message with every secret value in it replaced by ``***``."""
        for name, value in self.options.items():
            if is_secret(name) and value:
                text = text.replace(value, REDACTED)
        return text

    def __repr__(self) -> str:
        return f"ClientSettings({self.redacted()})"

    __str__ = __repr__


def _jaas_quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _client_defaults(errors: _LastError | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"logger": _client_log}
    if errors is not None:
        out["error_cb"] = errors
    return out


class _LastError:
    """librdkafka's asynchronous errors (connection refused, all brokers down): the last one, for messages."""

    def __init__(self) -> None:
        self.error: KafkaError | None = None

    def __call__(self, error: KafkaError) -> None:
        self.error = error

    def text(self, settings: ClientSettings) -> str:
        return settings.scrub(self.error.str()) if self.error is not None else "no answer"

    def refusal(self, settings: ClientSettings) -> str | None:
        """Why the brokers refused this client (a failed login, an untrusted certificate), if they did."""
        return self.text(settings) if self.error is not None and self.error.code() in _REFUSED else None


_TRANSIENT = {
    KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE,
    KafkaError._WAIT_COORD, KafkaError._UNKNOWN_PARTITION, KafkaError._TIMED_OUT_QUEUE, KafkaError._NODE_UPDATE,
    KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NETWORK_EXCEPTION, KafkaError.BROKER_NOT_AVAILABLE,
}


# The brokers answer but refuse the client: not waited out like an outage, as retrying cannot help.
_REFUSED = {KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError.SASL_AUTHENTICATION_FAILED}


def _transient(error: KafkaError) -> bool:
    return error.code() in _TRANSIENT or bool(error.retriable())


def _error_of(exc: KafkaException) -> KafkaError | None:
    return exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None


def _new(kind: Callable[[dict[str, Any]], T], settings: ClientSettings, config: dict[str, Any]) -> T:
    """A client, or a clear error for settings librdkafka refuses (with secrets scrubbed from it)."""
    try:
        return kind(config)
    except (KafkaException, ValueError, TypeError) as exc:
        raise ValueError(f"Kafka client settings {settings.redacted()} refused: {settings.scrub(str(exc))} "
                         "(cdclake's Kafka source takes librdkafka settings)") from None


def retrying(settings: ClientSettings, what: str, call: Callable[[], T], *, errors: _LastError | None = None,
             sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> T:
    """``call()``, retried with backoff while the brokers are unreachable, for at most the retry window; not
    retried once the client's ``errors`` say the brokers refused it."""
    started = clock()
    delay = 0.5
    while True:
        try:
            return call()
        except KafkaException as exc:
            error = _error_of(exc)
            reason = settings.scrub(error.str() if error is not None else str(exc))
            refused = errors.refusal(settings) if errors is not None else None
            if error is None or not _transient(error) or refused:
                raise KafkaSourceError(f"Kafka at {settings.servers}: {what} failed: {refused or reason}") from None
            waited = clock() - started
            if waited >= settings.retry_timeout_s:
                raise KafkaUnavailable(f"Kafka at {settings.servers} unreachable for {waited:.0f}s while {what}: "
                                       f"{reason}; giving up") from None
            log.warning("Kafka at %s unreachable while %s (%s); retrying in %.1fs (gives up after %.0fs)",
                        settings.servers, what, reason, delay, settings.retry_timeout_s)
            sleep(delay)
            delay = min(delay * 2, 10.0)


# ------------------------------------------------------------------------------------- topics and offsets

@dataclass(frozen=True)
class Subscription:
    """The topics to read: a list of names, or a pattern (a regular expression matching whole names)."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None

    def __post_init__(self) -> None:
        if bool(self.topics) == bool(self.pattern):
            raise ValueError("give either topics or a topic pattern (exactly one)")
        if self.pattern:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ValueError(f"topic pattern {self.pattern!r} is not a regular expression: {exc}") from None
        if any(not t or "," in t for t in self.topics):
            raise ValueError(f"bad topic list {list(self.topics)!r}")

    @classmethod
    def of(cls, topics: str | Sequence[str] | None = None, pattern: str | None = None) -> Subscription:
        if isinstance(topics, str):
            topics = [topics]
        names = tuple(dict.fromkeys(t.strip() for part in topics or () for t in part.split(",") if t.strip()))
        return cls(names, pattern or None)

    def select(self, names: Iterable[str]) -> list[str]:
        """The subscribed topics among those that exist (a pattern never matches internal ``__`` topics)."""
        present = set(names)
        if self.pattern:
            rx = re.compile(self.pattern)
            return sorted(n for n in present if rx.fullmatch(n) and not n.startswith("__"))
        return [t for t in self.topics if t in present]

    def describe(self) -> str:
        return f"topics matching {self.pattern!r}" if self.pattern else "topic(s) " + ",".join(self.topics)


def parse_offsets(text: str) -> Offsets:
    """Per-partition offsets in Spark's JSON form (``{"t": {"0": 42}}``; -2 earliest, -1 latest)."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"offsets {text!r} are not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ValueError(f'offsets must be a JSON object like {{"topic": {{"0": 42}}}}, not {text!r}')
    out: Offsets = {}
    for topic, partitions in raw.items():
        if not isinstance(partitions, dict):
            raise ValueError(f"offsets of topic {topic!r} must be an object of partition → offset")
        for partition, offset in partitions.items():
            if not str(partition).isdigit() or isinstance(offset, bool) or not isinstance(offset, int) or offset < -2:
                raise ValueError(f"bad offset {offset!r} for {topic}[{partition}] (an offset ≥ 0, -2 earliest "
                                 "or -1 latest)")
            out.setdefault(topic, {})[int(partition)] = offset
    return out


def parse_start(text: str | None, default: str = "earliest") -> str | Offsets:
    """``earliest``, ``latest`` or per-partition JSON offsets."""
    value = (text or default).strip()
    if value.lower() in ("earliest", "latest"):
        return value.lower()
    if not value.startswith("{"):
        raise ValueError(f"starting offsets must be earliest, latest or JSON like {{\"topic\": {{\"0\": 42}}}}, "
                         f"not {value!r}")
    return parse_offsets(value)


def check_subscription(subscription: Subscription, partitions: Sequence[tuple[str, int]], servers: str) -> None:
    """A topic named that Kafka does not have, or a pattern that matches none, is a mistake (a misspelt name): the
    other topics would be read without a word."""
    found = {topic for topic, _ in partitions}
    missing = [topic for topic in subscription.topics if topic not in found]
    if missing:
        raise ValueError(f"Kafka at {servers} has no topic {', '.join(missing)}")
    if subscription.pattern and not partitions:
        raise ValueError(f"Kafka at {servers} has no topic matching {subscription.pattern!r}")


def check_start(start: str | Offsets, partitions: Sequence[tuple[str, int]], servers: str) -> None:
    """Starting offsets that name a partition the subscription does not have are a mistake (a misspelt topic, a
    partition that does not exist): the others would start at earliest without a word."""
    if isinstance(start, str):
        return
    unknown = sorted(set(flatten(start)) - set(partitions))
    if unknown:
        named = ", ".join(f"{topic}[{partition}]" for topic, partition in unknown)
        raise ValueError(f"starting offsets name {named}, which the subscription at Kafka {servers} does not have")


def to_json(offsets: Offsets) -> dict[str, dict[str, int]]:
    """Offsets as Spark writes them (string partition keys), e.g. for a stream's offset."""
    return {topic: {str(p): o for p, o in sorted(parts.items())} for topic, parts in sorted(offsets.items())}


def from_json(offsets: Mapping[str, Mapping[str, int]]) -> Offsets:
    return {topic: {int(p): int(o) for p, o in parts.items()} for topic, parts in offsets.items()}


def flatten(offsets: Offsets) -> dict[tuple[str, int], int]:
    return {(t, p): o for t, parts in offsets.items() for p, o in parts.items()}


def nest(flat: Mapping[tuple[str, int], int]) -> Offsets:
    out: Offsets = {}
    for (topic, partition), offset in sorted(flat.items()):
        out.setdefault(topic, {})[partition] = offset
    return out


class KafkaClient:
    """Metadata and offsets, from the driver. One librdkafka consumer, created on first use; close it."""

    def __init__(self, settings: ClientSettings) -> None:
        self.settings = settings
        self._errors = _LastError()
        self._consumer: Consumer | None = None

    def _retrying(self, what: str, call: Callable[[], T]) -> T:
        def attempt() -> T:
            try:
                return call()
            except KafkaException:
                self._client().poll(0)  # serves the error callback: why the brokers did not answer
                raise

        return retrying(self.settings, what, attempt, errors=self._errors)

    def _client(self) -> Consumer:
        if self._consumer is None:
            self._consumer = _new(Consumer, self.settings, self.settings.config(
                {**_client_defaults(self._errors), "group.id": "cdclake"}, **{"enable.auto.commit": False}))
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def __enter__(self) -> KafkaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def topics(self) -> dict[str, int]:
        """Existing topics and their partition counts."""
        metadata = self._retrying("reading topic metadata",
                            lambda: self._client().list_topics(timeout=self.settings.request_timeout()))
        return {name: len(meta.partitions) for name, meta in metadata.topics.items()
                if meta.error is None or meta.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART}

    def partitions(self, subscription: Subscription) -> list[tuple[str, int]]:
        """The partitions of the subscribed topics that exist now, sorted."""
        topics = self.topics()
        return [(t, p) for t in sorted(subscription.select(topics)) for p in range(topics[t])]

    def _list(self, partitions: Sequence[tuple[str, int]], which: int) -> Offsets:
        if not partitions:
            return {}
        label = "earliest" if which == EARLIEST else "latest"

        def ask() -> list[TopicPartition]:
            # Offsets-for-times with -2/-1 is one ListOffsets request per broker for all partitions, and honours
            # the isolation level (latest = last stable offset under read_committed), like the reads do.
            found = self._client().offsets_for_times([TopicPartition(t, p, which) for t, p in partitions],
                                                     timeout=self.settings.request_timeout())
            for tp in found:
                if tp.error is not None and _transient(tp.error):  # e.g. a leader moving: ask again
                    raise KafkaException(tp.error)
            return found

        found = self._retrying(f"listing {label} offsets", ask)
        out: dict[tuple[str, int], int] = {}
        for tp in found:
            if tp.error is not None:
                raise KafkaSourceError(f"Kafka at {self.settings.servers}: {label} offset of {tp.topic}"
                                       f"[{tp.partition}]: {self.settings.scrub(tp.error.str())}")
            out[(tp.topic, tp.partition)] = tp.offset
        return nest(out)

    def earliest(self, partitions: Sequence[tuple[str, int]]) -> Offsets:
        return self._list(partitions, EARLIEST)

    def latest(self, partitions: Sequence[tuple[str, int]]) -> Offsets:
        return self._list(partitions, LATEST)

    def resolve(self, start: str | Offsets, partitions: Sequence[tuple[str, int]],
                missing: int = EARLIEST) -> Offsets:
        """Concrete offsets for every partition: ``earliest`` / ``latest`` / JSON (-2 / -1 resolved; a partition
        the JSON does not name starts at ``missing``)."""
        if isinstance(start, str):
            wanted = dict.fromkeys(partitions, EARLIEST if start == "earliest" else LATEST)
        else:
            given = flatten(start)
            wanted = {tp: given.get(tp, missing) for tp in partitions}
        low = flatten(self.earliest([tp for tp, o in wanted.items() if o == EARLIEST]))
        high = flatten(self.latest([tp for tp, o in wanted.items() if o == LATEST]))
        return nest({tp: low[tp] if o == EARLIEST else high[tp] if o == LATEST else o for tp, o in wanted.items()})


def plan_end(start: Offsets, latest: Offsets, limit: int | None) -> Offsets:
    """Where a batch starting at ``start`` ends: ``latest``, or at most ``limit`` offsets further in total,
    shared fairly: a partition with less to read than its share reads all of it, the others split the rest
    evenly (any odd remainder goes to those furthest behind). Partitions of ``start`` that ``latest`` lacks
    keep their offsets; a partition already past ``latest`` stays where it is."""
    begin = flatten(start)
    lag: dict[tuple[str, int], int] = {}
    end = dict(begin)
    for tp, high in flatten(latest).items():
        first = begin.get(tp, high)
        end[tp] = first
        if high > first:
            lag[tp] = high - first
    if limit is None or limit <= 0 or sum(lag.values()) <= limit:
        take = lag
    else:
        take = {}
        budget = limit
        order = sorted(lag, key=lambda tp: (lag[tp], tp))
        for i, tp in enumerate(order):
            take[tp] = min(lag[tp], budget // (len(order) - i))
            budget -= take[tp]
        for tp in sorted(order, key=lambda tp: (take[tp] - lag[tp], tp)):
            if budget == 0:
                break
            if take[tp] < lag[tp]:
                take[tp] += 1
                budget -= 1
    for tp, n in take.items():
        end[tp] += n
    return nest(end)


def _flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = options.get(name, str(default)).strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"option {name} must be true or false, not {value!r}")
    return value == "true"


def _positive(options: Mapping[str, str], name: str) -> int | None:
    text = options.get(name)
    if text is None or text.strip() in ("", "0"):
        return None
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"option {name} must be a positive number, not {text!r}")
    return value


_UNSUPPORTED = ("assign", "startingtimestamp", "startingoffsetsbytimestamp", "endingtimestamp",
                "endingoffsetsbytimestamp", "minoffsetspertrigger")


@dataclass(frozen=True)
class SourceOptions:
    """The options of Spark's Kafka source that ``cdclake-kafka`` understands, with the same names:
    ``kafka.bootstrap.servers``, ``subscribe`` (comma-separated) or ``subscribePattern``, ``startingOffsets``
    (default ``latest`` for streams, ``earliest`` for batch reads), ``endingOffsets`` (batch reads; default
    ``latest``), ``maxOffsetsPerTrigger``, ``includeHeaders``, ``failOnDataLoss`` and every ``kafka.*`` client
    setting; plus ``retryTimeoutMs``, how long unreachable brokers are waited for (default 10 minutes)."""

    settings: ClientSettings
    subscription: Subscription
    starting: str | Offsets
    ending: str | Offsets
    max_offsets: int | None
    include_headers: bool
    fail_on_data_loss: bool

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
        opts = {str(k).lower(): str(v) for k, v in options.items()}  # Spark's options are case-insensitive
        for name in _UNSUPPORTED:
            if name in opts:
                raise ValueError(f"option {name} of Spark's Kafka source is not supported by cdclake-kafka")
        servers = opts.get("kafka.bootstrap.servers", "")
        if not servers.strip():
            raise ValueError("option kafka.bootstrap.servers is required")
        client = {k.removeprefix("kafka."): v for k, v in opts.items()
                  if k.startswith("kafka.") and k != "kafka.bootstrap.servers"}
        retry_ms = _positive(opts, "retrytimeoutms")
        settings = ClientSettings(servers, client, **({"retry_timeout_s": retry_ms / 1000} if retry_ms else {}))
        if ("subscribe" in opts) == ("subscribepattern" in opts):
            raise ValueError("give exactly one of the options subscribe and subscribePattern")
        subscription = Subscription.of(opts.get("subscribe"), opts.get("subscribepattern"))
        starting = parse_start(opts.get("startingoffsets"), "latest" if streaming else "earliest")
        ending = parse_start(opts.get("endingoffsets"), "latest")
        if ending == "earliest":
            raise ValueError("endingOffsets must be latest or JSON offsets")
        return cls(settings, subscription, starting, ending, _positive(opts, "maxoffsetspertrigger"),
                   _flag(opts, "includeheaders", False), _flag(opts, "failondataloss", True))


@dataclass(frozen=True)
class Range:
    """Offsets ``[start, end)`` of one partition; ``start`` may be :data:`EARLIEST` (a partition found later)."""

    topic: str
    partition: int
    start: int
    end: int

    def __str__(self) -> str:
        first = "earliest" if self.start == EARLIEST else str(self.start)
        return f"{self.topic}[{self.partition}] offsets {first}..{self.end - 1}"


def ranges(start: Offsets, end: Offsets) -> list[Range]:
    """The non-empty partition ranges between two offsets; a partition ``start`` lacks is read from its
    earliest offset (a partition or topic that appeared meanwhile, as Spark's Kafka source does)."""
    begin = flatten(start)
    out = []
    for (topic, partition), stop in sorted(flatten(end).items()):
        first = begin.get((topic, partition), EARLIEST)
        if (stop > 0) if first == EARLIEST else (first < stop):
            out.append(Range(topic, partition, first, stop))
    return out


# --------------------------------------------------------------------------------------------------- reading

def _reader(settings: ClientSettings, errors: _LastError) -> Consumer:
    return _new(Consumer, settings, settings.config(
        {**_client_defaults(errors), "group.id": "cdclake"},
        **{"enable.auto.commit": False, "enable.partition.eof": True, "auto.offset.reset": "error"}))


def _messages(settings: ClientSettings, rng: Range, chunk: int, fail_on_data_loss: bool,
              clock: Callable[[], float]) -> Iterator[list[Message]]:
    """The messages of one range, in offset order, in chunks; waits out unreachable brokers."""
    if rng.start != EARLIEST and rng.start >= rng.end:
        return
    errors = _LastError()
    consumer = _reader(settings, errors)
    try:
        consumer.assign([TopicPartition(rng.topic, rng.partition,
                                        OFFSET_BEGINNING if rng.start == EARLIEST else rng.start)])
        position = rng.start
        log_end: int | None = None  # where the partition ended when it last said so, short of our end
        idle_since = warned = clock()
        while True:
            got: list[Message] = []
            done = moved = False
            # consume() waits its whole timeout for a full batch, so ask briefly and often: a range's last
            # records and its end are then seen at once.
            while len(got) < chunk and not done and not moved:
                polled = consumer.consume(chunk - len(got), timeout=0.1)
                if not polled:
                    break
                for message in polled:
                    error = message.error()
                    if error is None:
                        if message.offset() >= rng.end:
                            done = True
                            break
                        got.append(message)
                        position = message.offset() + 1
                    elif error.code() == KafkaError._PARTITION_EOF:
                        if message.offset() >= rng.end:
                            done = True
                            break
                        log_end = message.offset()
                    elif error.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                        # Reassigned: what else was polled is stale. A start past the end is answered so at
                        # once, again and again, so the stall check below must get its turn.
                        position = _out_of_range(settings, consumer, rng, position, fail_on_data_loss)
                        moved = True
                        break
                    elif _transient(error):
                        errors(error)
                    else:
                        raise KafkaSourceError(f"Kafka at {settings.servers}: reading {rng}: "
                                               f"{settings.scrub(error.str())}")
                done = done or position >= rng.end
            if got:
                yield got
                idle_since = warned = clock()
            if done:
                return
            if got:
                continue
            refused = errors.refusal(settings)
            if refused:
                raise KafkaSourceError(f"Kafka at {settings.servers}: reading {rng}: {refused}")
            now = clock()
            waited = now - idle_since
            short = log_end is not None and log_end < rng.end
            if waited >= settings.retry_timeout_s:
                if short:
                    message = (f"Kafka at {settings.servers}: {rng} was planned, but the partition ends at offset "
                               f"{log_end}: records {log_end}..{rng.end - 1} are gone (topic truncated or "
                               "recreated)")
                    if fail_on_data_loss:
                        raise DataLoss(message + "; set failOnDataLoss=false to skip them")
                    log.warning("%s; skipping them (failOnDataLoss=false)", message)
                    return
                raise KafkaUnavailable(f"Kafka at {settings.servers}: no records of {rng} from offset {position} "
                                       f"for {waited:.0f}s ({errors.text(settings)}); giving up")
            if now - warned >= WARN_EVERY_S:
                warned = now
                why = (f"the partition ends at offset {log_end}" if short else errors.text(settings))
                log.warning("Kafka at %s: waiting %.0fs for %s at offset %s (%s); retrying until %.0fs",
                            settings.servers, waited, rng, position, why, settings.retry_timeout_s)
    finally:
        consumer.close()


def _out_of_range(settings: ClientSettings, consumer: Consumer, rng: Range, position: int,
                  fail_on_data_loss: bool) -> int:
    """The broker refused the fetch offset: records before the log start are gone; past the end, wait."""
    low, high = retrying(settings, f"reading the offsets of {rng.topic}[{rng.partition}]",
                         lambda: consumer.get_watermark_offsets(TopicPartition(rng.topic, rng.partition),
                                                                timeout=settings.request_timeout()))
    if position != EARLIEST and position < low:
        message = (f"Kafka at {settings.servers}: records {position}..{min(low, rng.end) - 1} of {rng.topic}"
                   f"[{rng.partition}] were deleted (retention) before they were read")
        if fail_on_data_loss:
            raise DataLoss(message + "; set failOnDataLoss=false to skip them")
        log.warning("%s; skipping them (failOnDataLoss=false)", message)
        position = low
    else:
        # Past the end (the log is shorter than planned): look again in a moment; the stall check in
        # _messages decides how long that may go on.
        log.debug("%s: offset %s is past the end %s", rng, position, high)
        time.sleep(1.0)
    consumer.assign([TopicPartition(rng.topic, rng.partition, position)])
    return position


def _record(message: Message) -> Record:
    kind, ts = message.timestamp()
    # A producer's header of the name the captured-records reader marks an unreadable line with would read as that
    # mark, in a captured file or a decoder that reads headers: the message would be dead-lettered unread.
    headers = [h for h in message.headers() or () if h[0] != UNREADABLE_HEADER]
    return Record(key=message.key(), value=message.value(), topic=message.topic(), partition=message.partition(),
                  offset=message.offset(), timestamp=None if kind == TIMESTAMP_NOT_AVAILABLE else ts,
                  headers=headers)


def read_records(settings: ClientSettings, rng: Range, *, chunk: int = CHUNK, fail_on_data_loss: bool = True,
                 clock: Callable[[], float] = time.monotonic) -> Iterator[list[Record]]:
    """The records of ``[start, end)`` of one partition, in offset order, in chunks of at most ``chunk``."""
    for messages in _messages(settings, rng, chunk, fail_on_data_loss, clock):
        yield [_record(m) for m in messages]


def read_arrow(settings: ClientSettings, rng: Range, *, chunk: int = CHUNK, fail_on_data_loss: bool = True,
               include_headers: bool = True) -> Iterator[pa.RecordBatch]:
    """The same, as Arrow batches with the columns of Spark's Kafka source (headers optional, as there)."""
    for messages in _messages(settings, rng, chunk, fail_on_data_loss, time.monotonic):
        batch = records_to_arrow([_record(m) for m in messages])
        # Kafka's TimestampType ids (CreateTime 0, LogAppendTime 1, none -1) are librdkafka's minus one.
        kinds = pa.array([m.timestamp()[0] - 1 for m in messages], pa.int32())
        columns = [kinds if name == "timestampType" else batch.column(name) for name in RECORD_ARROW.names]
        if include_headers:
            yield pa.RecordBatch.from_arrays(columns, schema=RECORD_ARROW)
        else:
            yield pa.RecordBatch.from_arrays(columns[:-1], schema=RECORD_NO_HEADERS)


# ------------------------------------------------------------------------------------------------- capture

@dataclass
class Captured:
    range: Range
    path: Path
    records: int


def capture(settings: ClientSettings, subscription: Subscription, out: str | Path, *,
            starting: str | Offsets = "earliest", max_records: int | None = None,
            progress: Callable[[Captured], None] | None = None) -> list[Captured]:
    """Write the records from ``starting`` up to the end offsets seen now (at most ``max_records``, shared
    fairly over partitions) to captured-records files ``<out>/<topic>.<partition>.jsonl``, one per partition,
    named so that file name then line order is each partition's offset order."""
    root = Path(out)
    with KafkaClient(settings) as client:
        partitions = client.partitions(subscription)
        check_subscription(subscription, partitions, settings.servers)
        check_start(starting, partitions, settings.servers)
        start = client.resolve(starting, partitions)
        latest = client.latest(partitions)
        end = plan_end(start, latest, max_records)
    ends = flatten(latest)
    for (topic, partition), offset in sorted(flatten(start).items()):
        high = ends.get((topic, partition), offset)
        if offset > high:
            log.warning("%s[%d]: starting offset %d is past the partition's end %d: nothing captured from it", topic,
                        partition, offset, high)
    root.mkdir(parents=True, exist_ok=True)
    done = []
    for rng in ranges(start, end):
        path = root / f"{rng.topic}.{rng.partition:04d}.jsonl"
        count = write_records(path, (r for chunk in read_records(settings, rng) for r in chunk))
        done.append(Captured(rng, path, count))
        if progress:
            progress(done[-1])
    return done


# --------------------------------------------------------------------------------------------------- producing

def ensure_topics(settings: ClientSettings, partitions: Mapping[str, int]) -> None:
    """Create the topics that do not exist with these partition counts; an existing topic must have at
    least as many partitions."""
    admin = _new(AdminClient, settings, settings.config(_client_defaults()))
    existing = KafkaClient(settings)
    try:
        have = existing.topics()
    finally:
        existing.close()
    for topic, count in partitions.items():
        if topic in have and have[topic] < count:
            raise KafkaSourceError(f"Kafka at {settings.servers}: topic {topic} has {have[topic]} partitions, "
                                   f"{count} are needed")
    new = [NewTopic(t, n, 1) for t, n in sorted(partitions.items()) if t not in have]
    if not new:
        return
    for topic, future in admin.create_topics(new, request_timeout=settings.request_timeout()).items():
        try:
            future.result()
        except KafkaException as exc:
            error = _error_of(exc)
            if error is None or error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise KafkaSourceError(f"Kafka at {settings.servers}: creating topic {topic}: "
                                       f"{settings.scrub(str(exc))}") from None


PRODUCER_DEFAULTS: dict[str, Any] = {"enable.idempotence": True, "linger.ms": 5}


def new_producer(settings: ClientSettings) -> Producer:
    """A producer; settings librdkafka does not know are a ValueError here, before any connection."""
    return _new(Producer, settings, settings.config({**_client_defaults(), **PRODUCER_DEFAULTS}))


def produce(settings: ClientSettings, records: Iterable[Record], *, timeout_s: float = 300.0) -> Offsets:
    """Produce records to their topic and partition (key, value, headers and timestamp as given), each
    partition's in the given order; returns the end offset acknowledged per partition (last offset + 1)."""
    errors: list[str] = []
    acked: dict[tuple[str, int], int] = {}

    def delivered(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            errors.append(f"{message.topic()}[{message.partition()}]: {settings.scrub(error.str())}")
        else:
            where = (message.topic(), message.partition())
            acked[where] = max(acked.get(where, 0), message.offset() + 1)

    producer = new_producer(settings)
    for n, record in enumerate(records):
        while True:
            try:
                producer.produce(record.topic, value=record.value, key=record.key, partition=record.partition,
                                 headers=list(record.headers) or None, timestamp=record.timestamp or 0,
                                 on_delivery=delivered)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.5)
        if n % 1000 == 0:
            producer.poll(0)
    left = producer.flush(timeout_s)
    if left or errors:
        raise KafkaSourceError(f"Kafka at {settings.servers}: {left} records not acknowledged within {timeout_s:.0f}s"
                               + (f"; {len(errors)} failed, e.g. {errors[0]}" if errors else ""))
    return nest(acked)


def wait_for(settings: ClientSettings, ends: Offsets, timeout_s: float = 30.0) -> Offsets:
    """Wait until the brokers' latest offsets reach ``ends`` (they may lag the acknowledgements); returns the
    latest offsets seen, which fall short of ``ends`` only when the wait timed out."""
    wanted = flatten(ends)
    deadline = time.monotonic() + timeout_s
    with KafkaClient(settings) as client:
        while True:
            latest = flatten(client.latest(sorted(wanted)))
            if all(latest.get(tp, 0) >= o for tp, o in wanted.items()) or time.monotonic() >= deadline:
                return nest(latest)
            time.sleep(0.2)


def publish(settings: ClientSettings, records: Sequence[Record], partitions: int = 1,
            visible_within_s: float = 30.0) -> Offsets:
    """Produce records as a producer laid them out (each to its topic and partition): the topics are created
    with ``partitions`` partitions where missing, and this returns once readers can see every record."""
    needed: dict[str, int] = {}
    for record in records:
        needed[record.topic] = max(needed.get(record.topic, partitions), record.partition + 1)
    ensure_topics(settings, needed)
    acked = produce(settings, records)
    seen = flatten(wait_for(settings, acked, visible_within_s))
    short = {tp: o for tp, o in flatten(acked).items() if seen.get(tp, 0) < o}
    if short:
        (topic, partition), offset = next(iter(sorted(short.items())))
        raise KafkaSourceError(f"Kafka at {settings.servers}: {topic}[{partition}] acknowledged records up to offset "
                               f"{offset - 1}, but after {visible_within_s:.0f}s reports its end at "
                               f"{seen.get((topic, partition), 0)}")
    return acked

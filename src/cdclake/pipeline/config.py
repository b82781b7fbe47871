"""Pipeline configuration: the Python API and the ``PIPELINE.toml`` file describe the same thing.

```toml
name = "shop"                 # pipeline id: names the checkpoints and the lake's commit markers
lake = "/data/lake"           # the lake root (local path; s3:// etc. with [storage])
checkpoint = "/data/ckpt"     # optional; default <lake>/_cdclake/checkpoints/<name>
follow = false                # true: keep watching the sources, all at once (false: one after another)
poll_seconds = 0.2            # with follow: how often an idle source is asked for new records
tombstone_retention_hours = 168
on_error = "dead-letter"      # or "fail": stop after the first batch with records that cannot be decoded
max_dead_letter_ratio = 0.0   # a run that dead-letters more than this share of its records exits 1

[spark]                       # optional: attach to a cluster instead of local[*]
master = "spark://host:7077"  # or remote = "sc://host:15002" for Spark Connect
conf = { "spark.executor.memory" = "8g" }

[metrics]                     # optional: serve Prometheus metrics while the run lasts (see README)
port = 9464                   # 0: any free port (the log says which)
host = "127.0.0.1"            # the address to listen on; "0.0.0.0" for every interface

[[source]]
name = "orders"
format = "canal-json"
input = "/data/in/orders"     # a directory of captured-records or message-per-line files
max_records_per_batch = 500000
options = { "timestamp-zone" = "Asia/Shanghai" }
consistency = "none"          # or "resolved-ts" (ticdc-open, TiCDC canal-json): see below

[[source]]                    # a Kafka source, instead of input
name = "payments"
format = "ticdc-open"
kafka = "broker1:9092,broker2:9092"   # bootstrap servers
topics = ["tidb-payments"]    # a list (or one comma-separated string); or topic_pattern = "tidb-.*"
starting_offsets = "earliest" # earliest | latest | per partition: { "tidb-payments" = { "0" = 42 } }
connector = "cdclake"         # cdclake: no jar needed; spark: Spark's own Kafka source (jar on the classpath)
max_records_per_batch = 200000  # at most this many Kafka offsets per batch, shared fairly over partitions
kafka_retry_seconds = 600     # how long an unreachable Kafka is waited for before the run stops

[source.kafka_options]        # librdkafka client settings of the source above
"security.protocol" = "SASL_SSL"
"sasl.mechanism" = "SCRAM-SHA-512"
"sasl.username" = "cdc"
"sasl.password" = "…"
"ssl.ca.location" = "/etc/ca.pem"
```

Unknown keys are errors, and so is a value of the wrong type (numbers and true/false may also be written as
text: ``"1000"``, ``"false"``); the message names the key. ``kafka_options`` are librdkafka settings (with
``connector = "spark"`` they go to Spark's Kafka source as ``kafka.*`` options; ``sasl.username``/``sasl.password``
become its JAAS config). Secret values are never printed.
After a crash a Kafka source resumes at the offsets the lake says it has applied, whatever Spark's checkpoint
holds: no gap and no duplicate. Without ``follow`` it stops once caught up with the end offsets seen at start.

``consistency = "resolved-ts"`` (sources that send resolved timestamps: TiCDC Open Protocol, TiCDC Canal-JSON
watermarks) applies only the changes whose commit ts is at or below the smallest resolved ts of all the
source's partitions, so no table ever shows part of a transaction; later changes are held in the lake
(``_cdclake/held``) until a later batch releases them, across restarts. Each table's
``cdclake.consistentUpToCommitTs`` property and ``cdclake status`` say up to which commit ts it is consistent.
"""

from __future__ import annotations

import contextlib
import json
import os
import tomllib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cdclake import formats
from cdclake.lake.paths import own_path

if TYPE_CHECKING:
    from cdclake.sources.kafka import ClientSettings


@dataclass
class SourceConfig:
    format: str
    input: str | None = None
    name: str = "main"
    options: dict[str, str] = field(default_factory=dict)
    max_records_per_batch: int = 0  # 0: no limit
    # A Kafka source (instead of input): bootstrap servers, the topics or a pattern, where a new pipeline
    # starts, librdkafka client settings (secrets: kept out of repr), and which Spark connector reads it.
    kafka: str | None = None
    topics: list[str] = field(default_factory=list)
    topic_pattern: str | None = None
    starting_offsets: str = "earliest"
    kafka_options: dict[str, str] = field(default_factory=dict, repr=False)
    connector: str = "cdclake"
    consistency: str = "none"
    kafka_retry_seconds: float | None = None  # None: the client's default, 10 minutes

    def client_settings(self) -> ClientSettings:
        """How to talk to this source's Kafka (which must be given)."""
        from cdclake.sources import kafka  # confluent_kafka only for a pipeline that reads Kafka

        return kafka.ClientSettings(self.kafka or "", self.kafka_options).retrying_for(self.kafka_retry_seconds)

    def validate(self) -> None:
        formats.create_decoder(self.format, self.options)  # unknown format or option → a clear ValueError
        if self.consistency not in CONSISTENCY:
            raise ValueError(f"source {self.name}: consistency must be one of {', '.join(CONSISTENCY)}, "
                             f"not {self.consistency!r}")
        if self.consistency == "resolved-ts" and self.format not in RESOLVED_TS_FORMATS:
            raise ValueError(f"source {self.name}: consistency = \"resolved-ts\" needs a format that sends "
                             f"resolved timestamps ({', '.join(RESOLVED_TS_FORMATS)}), not {self.format}")
        if self.max_records_per_batch < 0:
            raise ValueError(f"source {self.name}: max_records_per_batch must be 0 (no limit) or more, "
                             f"not {self.max_records_per_batch}")
        if self.input is not None and not os.path.exists(self.input):
            raise ValueError(f"source {self.name}: input {self.input!r} does not exist")
        self._validate_kafka()

    def _validate_kafka(self) -> None:
        from cdclake.sources import kafka

        if (self.input is None) == (self.kafka is None):
            raise ValueError(f"source {self.name}: give either input or kafka (exactly one)")
        if self.kafka is None:
            if self.topics or self.topic_pattern or self.kafka_retry_seconds is not None:
                raise ValueError(f"source {self.name}: topics and kafka_retry_seconds need kafka (bootstrap servers)")
            return
        if self.connector not in CONNECTORS:
            raise ValueError(f"source {self.name}: connector must be one of {', '.join(CONNECTORS)}, "
                             f"not {self.connector!r}")
        try:
            kafka.Subscription.of(self.topics, self.topic_pattern)
            kafka.parse_start(self.starting_offsets)
            self.client_settings()
        except ValueError as exc:
            raise ValueError(f"source {self.name}: {exc}") from None


def make_directory(what: str, path: str) -> None:
    """``path`` as a directory, made if need be; one that cannot be is a ValueError that says so plainly."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"{what} {path} cannot be made a directory: {exc.strerror or exc}") from None


CONNECTORS = ("cdclake", "spark")
ON_ERROR = ("dead-letter", "fail")
CONSISTENCY = ("none", "resolved-ts")
RESOLVED_TS_FORMATS = ("ticdc-open", "canal-json")  # canal-json: its TiCDC flavour's WATERMARK messages
# A following pipeline's trigger interval: new records wait for the next poll, half of it on average; an idle
# pipeline's polls cost little CPU (figures: benchmarks/results.md, "Pipeline tuning").
POLL_SECONDS = 0.2
# Metrics are for this machine's scraper unless the pipeline opens them to others.
METRICS_HOST = "127.0.0.1"


@dataclass
class PipelineConfig:
    lake: str
    sources: list[SourceConfig]
    name: str = "default"
    checkpoint: str | None = None
    follow: bool = False
    poll_seconds: float = POLL_SECONDS
    tombstone_retention_hours: float = 168.0
    spark_master: str | None = None
    spark_remote: str | None = None
    spark_conf: dict[str, str] = field(default_factory=dict)
    storage_options: dict[str, str] | None = None
    metrics_port: int | None = None  # None: no metrics served
    metrics_host: str = METRICS_HOST
    # What a record that cannot be decoded does: goes to the dead letters ("dead-letter"), or also stops the run
    # after its batch ("fail"); and the share of a run's records that may be dead-lettered before it exits 1.
    on_error: str = "dead-letter"
    max_dead_letter_ratio: float = 0.0

    def checkpoint_dir(self) -> str:
        return self.checkpoint or own_path(self.lake, f"checkpoints/{self.name}")

    def make_directories(self) -> None:
        """The lake's and the checkpoints' directories, where they are local paths: a path that cannot be one fails
        here with a clear message, before Spark starts, rather than in the middle of the first batch."""
        for what, path in (("lake", self.lake), ("checkpoint", self.checkpoint_dir())):
            if "://" not in path:
                make_directory(what, path)

    def validate(self) -> None:
        if not self.sources:
            raise ValueError("the pipeline has no source")
        names = [s.name for s in self.sources]
        if len(set(names)) != len(names):
            raise ValueError(f"source names must be unique: {names}")
        if not self.poll_seconds > 0:
            raise ValueError(f"poll_seconds must be more than 0, not {self.poll_seconds}")
        if not self.tombstone_retention_hours >= 0:
            raise ValueError(f"tombstone_retention_hours must be 0 or more, not {self.tombstone_retention_hours}")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ValueError(f"the metrics port must be 0 to 65535, not {self.metrics_port}")
        if self.on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {', '.join(ON_ERROR)}, not {self.on_error!r}")
        if not 0 <= self.max_dead_letter_ratio <= 1:
            raise ValueError(f"max_dead_letter_ratio must be from 0 to 1, not {self.max_dead_letter_ratio}")
        for source in self.sources:
            source.validate()


_TOP = {"name", "lake", "checkpoint", "follow", "poll_seconds", "tombstone_retention_hours", "spark", "source",
        "storage", "metrics", "on_error", "max_dead_letter_ratio"}
_SOURCE = {"name", "format", "input", "options", "max_records_per_batch", "kafka", "topics", "topic_pattern",
           "starting_offsets", "kafka_options", "connector", "consistency", "kafka_retry_seconds"}
_SPARK = {"master", "remote", "conf"}
_METRICS = {"port", "host"}
# The tables whose keys are not checked here: a source's options (its format checks them), and kafka_options,
# spark.conf and storage, which are librdkafka's, Spark's and the object store's own settings, too many to list.


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


_KINDS = {str: "a string", int: "a whole number", float: "a number", bool: "true or false", dict: "a table",
          list: "a list"}


def _value(table: dict[str, Any], key: str, kind: type, default: Any, where: str) -> Any:
    """``table[key]`` as ``kind`` (``default`` when absent); a value of another type is an error that names the key,
    as TOML writes ``"100"`` or ``"false"`` as easily as ``100`` or ``false``. Numbers and true/false are also read
    from their text."""
    if key not in table:
        return default
    value = table[key]
    if kind is str and isinstance(value, str):
        return value
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
    elif kind in (int, float) and isinstance(value, (int, float, str)) and not isinstance(value, bool):
        with contextlib.suppress(ValueError):
            if not (kind is int and isinstance(value, float)):  # int() would drop a fraction
                return kind(value)
    elif kind in (dict, list) and isinstance(value, kind):
        return value
    raise ValueError(f"{where}'{key}' must be {_KINDS[kind]}, not {value!r}")


def _kafka_fields(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """The Kafka keys of a ``[[source]]``, as SourceConfig fields (a missing key keeps its default)."""
    out: dict[str, Any] = {}
    for key in ("kafka", "topic_pattern", "connector"):
        if key in raw:
            out[key] = _value(raw, key, str, None, where)
    if "topics" in raw:
        topics = raw["topics"]
        if isinstance(topics, list) and all(isinstance(t, str) for t in topics):
            out["topics"] = topics
        elif isinstance(topics, str):
            out["topics"] = [topics]
        else:
            raise ValueError(f"{where}'topics' must be a list of strings or a string, not {topics!r}")
    if "starting_offsets" in raw:
        start = raw["starting_offsets"]
        out["starting_offsets"] = json.dumps(start) if isinstance(start, dict) else _value(
            raw, "starting_offsets", str, "", where)
    if "kafka_retry_seconds" in raw:
        out["kafka_retry_seconds"] = _value(raw, "kafka_retry_seconds", float, None, where)
    if "kafka_options" in raw:
        out["kafka_options"] = {str(k): _text(v) for k, v in _value(raw, "kafka_options", dict, {}, where).items()}
    return out


def _read(path: str) -> dict[str, Any]:
    """The tables of a TOML file; a file that is missing, unreadable or not TOML is a one-line ValueError that names
    it (tomllib's own errors do not, and the user may have given several)."""
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except OSError as exc:  # a directory, no permission…
        raise ValueError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:  # tomllib decodes the bytes as UTF-8 before parsing
        raise ValueError(f"{path}: not valid TOML: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset "
                         f"{exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML: {exc}") from None


def _unknown(table: dict[str, Any], known: set[str], where: str) -> None:
    extra = set(table) - known
    if extra:
        raise ValueError(f"{where}unknown key(s) {', '.join(sorted(extra))} (known: {', '.join(sorted(known))})")


def load(path: str) -> PipelineConfig:
    """Read a ``PIPELINE.toml``; unknown keys are errors, so a typo never passes silently, and so is a value of the
    wrong type."""
    data = _read(path)
    top = f"{path}: "
    _unknown(data, _TOP, top)
    if "lake" not in data:
        raise ValueError(f"{path}: 'lake' is required")
    sources = []
    for index, raw in enumerate(_value(data, "source", list, [], top)):
        where = f"{path}: source {index + 1}: "
        if not isinstance(raw, dict):
            raise ValueError(f"{where}must be a table ([[source]]), not {raw!r}")
        _unknown(raw, _SOURCE, where)
        if "format" not in raw:
            raise ValueError(f"{where}'format' is required")
        sources.append(SourceConfig(
            format=_value(raw, "format", str, None, where), input=_value(raw, "input", str, None, where),
            name=_value(raw, "name", str, f"source{index + 1}", where),
            options={k: _text(v) for k, v in _value(raw, "options", dict, {}, where).items()},
            max_records_per_batch=_value(raw, "max_records_per_batch", int, 0, where),
            consistency=_value(raw, "consistency", str, "none", where), **_kafka_fields(raw, where)))
    spark, in_spark = _value(data, "spark", dict, {}, top), f"{path}: [spark] "
    _unknown(spark, _SPARK, in_spark)
    metrics, in_metrics = _value(data, "metrics", dict, {}, top), f"{path}: [metrics] "
    _unknown(metrics, _METRICS, in_metrics)
    return PipelineConfig(
        lake=_value(data, "lake", str, None, top), sources=sources, name=_value(data, "name", str, "default", top),
        checkpoint=_value(data, "checkpoint", str, None, top), follow=_value(data, "follow", bool, False, top),
        poll_seconds=_value(data, "poll_seconds", float, POLL_SECONDS, top),
        tombstone_retention_hours=_value(data, "tombstone_retention_hours", float, 168.0, top),
        spark_master=_value(spark, "master", str, None, in_spark),
        spark_remote=_value(spark, "remote", str, None, in_spark),
        spark_conf={k: _text(v) for k, v in _value(spark, "conf", dict, {}, in_spark).items()},
        storage_options=_value(data, "storage", dict, None, top),
        metrics_port=_value(metrics, "port", int, None, in_metrics),
        metrics_host=_value(metrics, "host", str, METRICS_HOST, in_metrics),
        on_error=_value(data, "on_error", str, "dead-letter", top),
        max_dead_letter_ratio=_value(data, "max_dead_letter_ratio", float, 0.0, top))

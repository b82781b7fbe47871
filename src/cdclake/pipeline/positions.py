"""Where each source's read starts and ends, and how it is read.

A Kafka source starts where the lake says it stopped (its progress rows' offsets), whatever Spark's checkpoint
holds; a files source with a new checkpoint skips what the lake's batches read. Without Spark's checkpoint (lost,
replaced, new) batches are numbered above every marker the lake holds (see :func:`base_version`).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cdclake import formats
from cdclake.lake.sink import Sink
from cdclake.pipeline.config import PipelineConfig, SourceConfig
from cdclake.pipeline.signals import before_batches, stop_on_signal
from cdclake.sources import files, kafka
from cdclake.spark import changelog as CL
from cdclake.spark.session import task_slots
from cdclake.spark.sources import DECODING_SOURCES, register, reread, seal

logger = logging.getLogger(__name__)


def base_version(checkpoint: str, sink: Sink) -> int:
    """The lake version of the checkpoint's batch 0. Batch ids restart at 0 with a new checkpoint (or one whose Spark
    part logged no batch: deleted, or killed before its first); lake versions must only grow, so such a checkpoint
    starts above every batch that committed anything to the lake, also one a crash cut short (see
    :meth:`~cdclake.lake.delta.DeltaSink.last_marked_batch`)."""
    marker = os.path.join(checkpoint, "cdclake.json")
    if os.path.exists(marker) and not new_checkpoint(checkpoint):
        with open(marker) as handle:
            return int(json.load(handle)["base_version"])
    last = sink.last_marked_batch()
    base = 0 if last is None else last + 1
    os.makedirs(checkpoint, exist_ok=True)
    with open(marker, "w") as handle:
        json.dump({"base_version": base}, handle)
    return base


def new_checkpoint(checkpoint: str) -> bool:
    """Whether Spark's checkpoint of a source has logged no batch: its query starts reading from the input's start."""
    offsets = os.path.join(checkpoint, "spark", "offsets")
    return not os.path.isdir(offsets) or not any(name.isdigit() for name in os.listdir(offsets))


def source_partitions(source: SourceConfig) -> list[tuple[str, int]]:
    """The partitions a resolved-ts watermark must hear from: all that exist at start (more join when seen)."""
    if source.kafka is not None:
        with kafka.KafkaClient(source.client_settings()) as client:
            return client.partitions(kafka.Subscription.of(source.topics, source.topic_pattern))
    return files.partitions(source.input or "")


@dataclass(frozen=True)
class SourceRead:
    """How a source is read: the Spark data source, its options and, without ``follow`` for Kafka, the end
    offsets to stop at. Where the data source is cdclake's own and the batch needs no records afterwards, the
    source decodes its records itself (``decodes``, see :class:`cdclake.spark.sources.Decoding`): they never
    cross to the JVM and back to Python for decoding. The few batches that need the records again read them
    by the changelog's ``input`` rows (:meth:`records`)."""

    source: SourceConfig
    data_source: str
    options: dict[str, str]
    target: Any = None

    @property
    def marks_lines(self) -> bool:
        """Whether its records carry the captured-records reader's mark of a line it could not read."""
        return self.data_source == "cdclake-files"

    @property
    def decodes(self) -> bool:
        # resolved-ts mode keeps every record of a batch at hand, for the raw bytes of the changes it holds.
        return self.data_source in DECODING_SOURCES and self.source.consistency != "resolved-ts"

    def stream(self, spark: SparkSession) -> DataFrame:
        """The stream of the source's records, or of their changelog (reduced per task) where it decodes them."""
        options = dict(self.options)
        if self.decodes:
            formats.create(self.source.format, self.source.options)  # fail fast on the driver for a bad option
            # The format's options (a registry's credentials, say) reach the source held by it, not as its options.
            options.update(decode=self.source.format, decodeOptions=seal(json.dumps(self.source.options)),
                           reduce="true")
            register(spark)
        try:
            return spark.readStream.format(self.data_source).options(**options).load()
        except AnalysisException as exc:
            if self.data_source == "kafka" and any(
                    text in str(exc) for text in ("KAFKA_DATA_SOURCE_NOT_ENABLED", "DATA_SOURCE_NOT_FOUND",
                                                  "Failed to find data source: kafka")):  # the last: pyspark 4.2
                raise ValueError(
                    f"source {self.source.name}: connector = \"spark\" needs Spark's Kafka connector on the "
                    f"classpath (e.g. spark.jars.packages = \"org.apache.spark:spark-sql-kafka-0-10_2.13:"
                    f"{spark.version}\"); it is not there. Use connector = \"cdclake\", which needs no jar.") from None
            raise

    def records(self, changelog: DataFrame, headers: bool = False) -> DataFrame:
        """The records behind a changelog this source decoded, read again (in the changelog's own session: with
        Spark Connect, the server's foreachBatch worker); from Kafka with their headers only ``headers`` (for
        dead letters: a format that does not read them would take a producer's header named as the
        captured-records reader marks a line it could not read for that mark)."""
        inputs = [r[0] for r in changelog.filter(F.col("status") == CL.INPUT).select(CL.detail(CL.INPUT)).collect()]
        options = {**self.options, "includeHeaders": "true"} if headers and "kafka" in self.data_source else (
            self.options)
        return reread(changelog.sparkSession, self.data_source, options, inputs)


def source_read(spark: SparkSession, source: SourceConfig, config: PipelineConfig, sink: Sink,
                new_checkpoint: bool = False) -> SourceRead:
    """How the source is read. A Kafka source starts where the lake says it stopped (see :func:`_kafka_read`). A
    files source with a new checkpoint reads its input from the start, and skips the records the lake's committed
    batches read (their progress rows' offsets, per topic and partition): a changed batch size or input, or a
    checkpoint deleted after a crash, then neither loses nor repeats a change."""
    if source.kafka is not None:
        with before_batches():
            return _kafka_read(source, config, sink)
    if source.input is None:
        raise ValueError(f"source {source.name}: neither input nor kafka")
    # A task per core, even in a batch that holds one file: each task reduces the keys it read before the planner
    # sees them, so more, smaller tasks would hand the planner more changes of the same keys.
    tasks = str(task_slots(spark))
    # No target: without follow the query runs with Trigger.AvailableNow and stops by itself (see runner._start_query).
    # Absolute: Spark's Python processes need not share this one's working directory (a session made elsewhere).
    options = {"path": os.path.abspath(source.input), "maxRecordsPerBatch": str(source.max_records_per_batch or 0),
               "minPartitions": tasks, "follow": "true" if config.follow else "false"}
    applied = sink.history().offsets if new_checkpoint else {}
    if applied:
        logger.info("source %s: a new checkpoint; the records of %d partition(s) up to where the lake's batches read "
                    "them are skipped", source.name, len(applied))
        options["applied"] = json.dumps(applied, sort_keys=True)
    return SourceRead(source, "cdclake-files", options)


def _kafka_partitions(client: kafka.KafkaClient, source: SourceConfig, config: PipelineConfig) -> list[tuple[str, int]]:
    """The source's partitions now. Without ``follow``, a topic that does not exist, a pattern that matches none, or
    starting offsets that name an unknown partition are errors; a following run waits for them to appear."""
    subscription = kafka.Subscription.of(source.topics, source.topic_pattern)
    partitions = client.partitions(subscription)
    if not config.follow:
        try:
            kafka.check_subscription(subscription, partitions, client.settings.servers)
            kafka.check_start(kafka.parse_start(source.starting_offsets), partitions, client.settings.servers)
        except ValueError as exc:
            raise ValueError(f"source {source.name}: {exc}") from None
    return partitions


def check_kafka_sources(config: PipelineConfig) -> None:
    """What :func:`_kafka_partitions` finds wrong with a run's Kafka sources, before Spark starts: a misspelt topic
    is then said in a second rather than after Spark's start, and an unreachable broker is waited for without a
    JVM holding memory; a signal meanwhile ends the run at once. (A following run waits for its topics.)"""
    if config.follow:
        return
    with stop_on_signal(), before_batches():
        for source in config.sources:
            if source.kafka is not None:
                with kafka.KafkaClient(source.client_settings()) as client:
                    _kafka_partitions(client, source, config)


def _kafka_read(source: SourceConfig, config: PipelineConfig, sink: Sink) -> SourceRead:
    """A Kafka source's read, starting where the lake says this source stopped. Spark's checkpoint, when it
    has one, says the same or repeats a batch the lake skips; when it is new or lost, the starting offsets
    given here are the lake's: the next offset after the last one applied, per partition (partitions the lake
    has not seen start at ``starting_offsets``). Without ``follow``, the target is the end offsets seen now."""
    settings = source.client_settings()
    subscription = kafka.Subscription.of(source.topics, source.topic_pattern)
    with kafka.KafkaClient(settings) as client:
        partitions = _kafka_partitions(client, source, config)
        applied = kafka.flatten(sink.applied_offsets())
        fresh = [tp for tp in partitions if tp not in applied]
        starting = kafka.parse_start(source.starting_offsets)
        resolved = kafka.flatten(client.resolve(starting, fresh))
        # A start at the end of the log moves with time: pinned, the next run starts there too, though no batch
        # read the partition (nothing had arrived); each run would skip what arrived in between otherwise.
        given = {} if isinstance(starting, str) else kafka.flatten(starting)
        sink.pin_kafka_starts(kafka.nest({tp: o for tp, o in resolved.items()
                                          if starting == "latest" or given.get(tp) == kafka.LATEST}))
        start = {**resolved, **{tp: o for tp, o in applied.items() if tp in set(partitions)}}
        # Without follow, the run reads up to each partition's end now, where that is past its start: a partition
        # with nothing to read (or shorter than where the lake stopped: a recreated topic) is not waited for.
        latest = kafka.flatten(client.latest(partitions))
        target = None if config.follow else kafka.to_json(kafka.nest(
            {tp: o for tp, o in latest.items() if o > start.get(tp, kafka.EARLIEST)}))
    options = {
        "kafka.bootstrap.servers": settings.servers,
        **({"subscribePattern": subscription.pattern} if subscription.pattern
           else {"subscribe": ",".join(subscription.topics)}),
        "startingOffsets": json.dumps(kafka.to_json(kafka.nest(start))) if start else "earliest",
        # Headers only for a format that reads them: they cost time, and one named as the captured-records reader
        # marks a line it could not read would make a producer's message a dead letter.
        "includeHeaders": "true" if formats.create(source.format, source.options).reads_headers else "false",
    }
    if source.max_records_per_batch:
        options["maxOffsetsPerTrigger"] = str(source.max_records_per_batch)
    if source.connector == "cdclake":  # Spark's own connector has timeouts of its own, as kafka.* settings
        options["retryTimeoutMs"] = str(round(settings.retry_timeout_s * 1000))
    client_options = settings.java_options() if source.connector == "spark" else settings.options
    options.update({f"kafka.{k}": v for k, v in client_options.items()})
    return SourceRead(source, "kafka" if source.connector == "spark" else "cdclake-kafka", options, target)

"""cdclake's application layer: what the command line does, as functions a Python program calls as well.

```python
from cdclake import pipeline

config = pipeline.PipelineConfig(lake="/data/lake", sources=[pipeline.SourceConfig(format="canal-json",
                                                                                    input="/data/in")])
summary = pipeline.run(config)             # every source until caught up: a RunSummary
state = pipeline.status("/data/lake")      # per table rows, last change, stopped tables; dead letters by reason
```

Each function takes plain values (paths as text), returns data and prints nothing; errors are the exceptions of
:mod:`cdclake.errors`, and ``ValueError`` for a wrong argument. Spark, Kafka and the lake's libraries are imported
by the functions that need them, so importing this package is quick.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdclake.pipeline.config import PipelineConfig, SourceConfig, make_directory
from cdclake.pipeline.failures import file_system_problem, stopping_error

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from cdclake.lake.maintenance import Maintained
    from cdclake.model.records import Record
    from cdclake.pipeline.batch import BatchReport
    from cdclake.pipeline.runner import RunSummary
    from cdclake.sources.kafka import Captured, ClientSettings

__all__ = ["PipelineConfig", "SourceConfig", "build_class_archive", "capture", "check_lake", "check_pipeline",
           "dead_letter_records", "dead_letters", "file_system_problem", "kafka_producer", "load_config", "maintain",
           "make_directory", "migrate_names", "publish", "run", "serve", "status", "stopping_error"]


def load_config(path: str) -> PipelineConfig:
    """Reads a ``PIPELINE.toml`` (its keys: :mod:`cdclake.pipeline.config`).

    Args:
        path: the file.

    Returns:
        The pipeline it describes, not yet validated (:meth:`PipelineConfig.validate`). An unknown key, a value of
        the wrong type or a file that cannot be read is a ValueError that names it.
    """
    from cdclake.pipeline import config

    return config.load(path)


def run(config: PipelineConfig, progress: Callable[[BatchReport], None] | None = None,
        spark: SparkSession | None = None, say: Callable[[str], None] | None = None) -> RunSummary:
    """Runs every source of the pipeline until caught up, or until a signal with ``config.follow``; each batch is
    applied exactly once.

    Args:
        config: the pipeline, validated.
        progress: called with each batch's report once the batch is in the lake.
        spark: a session to run on; None starts one as ``config`` says (and first checks Kafka and registries).
        say: told what the run waits for (Spark starting, a lake another run holds); None: logged.

    Returns:
        The run's summary: its batches' reports, the tables stopped, whether a signal ended it. A service that is
        unreachable raises :class:`~cdclake.errors.KafkaSourceError` or :class:`~cdclake.errors.RegistryError`; a
        failure inside Spark comes back as Spark's exception (:func:`stopping_error` and
        :func:`file_system_problem` tell what it means).
    """
    from cdclake.pipeline import runner

    given: dict[str, Any] = {"progress": progress}
    if spark is not None:
        given["spark"] = spark
    if say is not None:
        given["say"] = say
    return runner.run(config, **given)


def check_lake(lake: str) -> None:
    """Checks that ``lake`` is a local directory a run has made a lake of, holding no table under a name of an
    earlier cdclake.

    Args:
        lake: the lake's root directory.

    Raises:
        ValueError: saying which of these it is not.
    """
    from cdclake.pipeline import inspection

    inspection.check_lake(lake)


def check_pipeline(lake: str, pipeline: str) -> None:
    """Checks that a pipeline has recorded a batch or a dead letter in the lake.

    Args:
        lake: the lake's root directory.
        pipeline: a run's name, or ``NAME.SOURCE``.

    Raises:
        ValueError: naming the pipelines the lake has.
    """
    from cdclake.pipeline import inspection

    inspection.check_pipeline(lake, pipeline)


def status(lake: str) -> dict[str, Any]:
    """What a lake holds.

    Args:
        lake: the lake's root directory.

    Returns:
        ``{"tables": {name: {"rows", "commit_ts", "position", "last_batch_at", "stopped", ...}}, "unreadable":
        {own table: why}, "dead_letters": {reason: count}}``; a table that could not be read has ``"unreadable"``
        (why) instead of its figures.
    """
    from cdclake.pipeline import inspection

    return inspection.collect(lake)


def dead_letters(lake: str, reason: str | None = None, pipeline: str | None = None, format_name: str | None = None,
                 with_bytes: bool = False) -> pa.Table:
    """The records the lake could not apply, oldest first.

    Args:
        lake: the lake's root directory.
        reason: only those whose reason contains this text.
        pipeline: only those of this pipeline (its name, or ``NAME.SOURCE``).
        format_name: only those of this format.
        with_bytes: also their keys, values and headers (they may be large).

    Returns:
        An Arrow table of the dead letters (columns of ``cdclake.lake.layout.DEAD_LETTERS``). A damaged dead-letter
        table raises :class:`~cdclake.errors.LakeError`.
    """
    from cdclake.pipeline import inspection

    return inspection.dead_letters(lake, reason, pipeline, format_name, with_bytes)


def dead_letter_records(dead: pa.Table) -> list[Record]:
    """Dead letters (read ``with_bytes``) as the records they were, where they were read.

    Args:
        dead: as :func:`dead_letters` returns them.

    Returns:
        The records: a captured-records file of them is input that :func:`run` reads again.
    """
    from cdclake.pipeline import inspection

    return inspection.dead_letter_records(dead)


def maintain(lake: str, retention_hours: int = 168, compact: bool = True) -> Iterator[Maintained]:
    """Compacts each table's small files (Delta OPTIMIZE) and deletes the files no recent version needs (VACUUM),
    the lake's own tables included.

    Args:
        lake: the lake's root directory.
        retention_hours: keep the files that the table versions of the last this many hours need.
        compact: compact first; beside a running pipeline prefer False.

    Returns:
        What was done to each table, as each is done.
    """
    from cdclake.lake.maintenance import maintain as maintain_lake

    return maintain_lake(lake, retention_hours, compact)


def migrate_names(lake: str) -> list[str]:
    """Moves the tables that an earlier cdclake named as their source did to the directories that name them now.
    Run it while no pipeline writes to the lake.

    Args:
        lake: the lake's root directory.

    Returns:
        ``old -> new`` for each table moved. A target that exists is a ValueError.
    """
    from cdclake.lake.paths import migrate

    return migrate(lake)


def capture(servers: str, out: Path, topics: list[str] | None = None, topic_pattern: str | None = None,
            starting_offsets: str = "earliest", kafka_options: dict[str, str] | None = None,
            retry_seconds: float | None = None, max_records: int | None = None,
            progress: Callable[[Captured], None] | None = None) -> tuple[list[Captured], str]:
    """Writes Kafka records to captured-records files (one per partition), up to the end offsets seen at start.

    Args:
        servers: bootstrap servers, ``HOST:PORT[,HOST:PORT…]``.
        out: the directory of the files.
        topics, topic_pattern: the topics, or a regex their whole names match.
        starting_offsets: earliest, latest or JSON per partition.
        kafka_options: librdkafka settings.
        retry_seconds: how long an unreachable Kafka is waited for (None: the client's default).
        max_records: at most this many records in all, shared fairly over partitions (None: all).
        progress: called with each partition's capture as it is written.

    Returns:
        The partitions' captures and the subscription in words. A wrong argument is a ValueError; Kafka failing, a
        :class:`~cdclake.errors.KafkaSourceError`.
    """
    from cdclake.sources import kafka

    settings = kafka.ClientSettings(servers, kafka_options or {}).retrying_for(retry_seconds)
    subscription = kafka.Subscription.of(topics, topic_pattern)
    starting = kafka.parse_start(starting_offsets)
    captured = kafka.capture(settings, subscription, out, starting=starting, max_records=max_records,
                             progress=progress)
    return captured, subscription.describe()


def kafka_producer(servers: str, kafka_options: dict[str, str]) -> ClientSettings:
    """Settings to produce records with (:func:`publish`), checked by librdkafka now.

    Args:
        servers: bootstrap servers, ``HOST:PORT[,HOST:PORT…]``.
        kafka_options: librdkafka settings.

    Returns:
        The settings; a misspelt one is a ValueError.
    """
    from cdclake.sources import kafka

    settings = kafka.ClientSettings(servers, kafka_options)
    kafka.new_producer(settings)
    return settings


def publish(settings: ClientSettings, records: Iterable[Record], partitions: int) -> list[str]:
    """Produces records to Kafka, each to its topic and partition, creating the topics as needed.

    Args:
        settings: from :func:`kafka_producer`.
        records: the records.
        partitions: the partitions of each topic created.

    Returns:
        The topics written, sorted. Kafka refusing is a :class:`~cdclake.errors.KafkaSourceError`.
    """
    from cdclake.sources import kafka

    return sorted(kafka.publish(settings, list(records), partitions))


def serve(port: int, conf: dict[str, str], until_stopped: Callable[[], None],
          say: Callable[[str], None] = print) -> None:
    """Keeps a local Spark running for the runs on this machine: a Spark Connect server on the loopback, which only
    this user's runs can attach to (``PipelineConfig.spark_remote = "sc://localhost:PORT"``).

    Args:
        port: its port on 127.0.0.1.
        conf: Spark settings.
        until_stopped: returns when the server is to stop.
        say: told what the server does.
    """
    from cdclake.spark.session import serve as serve_spark

    serve_spark(port, conf, until_stopped, say=say)


def build_class_archive(train: Callable[[Any], None], say: Callable[[str], None] = print) -> Path:
    """Makes local Spark sessions start sooner: runs ``train`` on a session while Java lists the classes Spark
    loads, then archives them (Java class-data sharing, in the user's cache).

    Args:
        train: a workload, given the session.
        say: told what is done.

    Returns:
        The archive's path. No cache directory, no Java, or a failing ``train`` is an OSError or RuntimeError.
    """
    from cdclake.spark.session import build_class_archive as build

    return build(train, say=say)

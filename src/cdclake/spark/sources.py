"""cdclake's sources as PySpark Python data sources (batch and Structured Streaming): ``cdclake-files``
(directories of captured-records files) and ``cdclake-kafka`` (Kafka, without Spark's connector jar)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition

from cdclake.sources import files
from cdclake.sources import kafka as K
from cdclake.spark.changelog import RECORD_SCHEMA

START = {"file": "", "line": 0}


class _Segment(InputPartition):
    def __init__(self, name: str, first: int, stop: int, complete_only: bool) -> None:
        super().__init__((name, first, stop))
        self.name, self.first, self.stop, self.complete_only = name, first, stop, complete_only


class FilesDataSource(DataSource):
    """``spark.read[Stream].format("cdclake-files").option("path", DIR)``."""

    @classmethod
    def name(cls) -> str:
        return "cdclake-files"

    def schema(self) -> str:
        return RECORD_SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        return _FilesReader(self.options)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _FilesStreamReader(self.options)


class _FilesReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.path = options["path"]

    def partitions(self) -> Sequence[InputPartition]:
        counter = files.LineCounter(complete_only=False)
        _, segments = files.plan_range(files.list_files(self.path), counter, START, None)
        return [_Segment(*s, complete_only=False) for s in segments] or [_Segment("", 0, 0, False)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Segment)
        if partition.name:
            yield from files.read_segment(partition.name, partition.first, partition.stop)


class _FilesStreamReader(DataSourceStreamReader):
    """Offsets are file name + line. In follow mode only newline-terminated lines count, so a line
    still being written is never read half."""

    def __init__(self, options: dict[str, str]) -> None:
        self.path = options["path"]
        self.limit = int(options.get("maxRecordsPerBatch", "0") or 0)
        self.complete_only = options.get("follow", "false") == "true"
        self.counter = files.LineCounter(self.complete_only)
        self.initial = json.loads(options["startingOffset"]) if options.get("startingOffset") else dict(START)
        self._last_end = dict(self.initial)

    def initialOffset(self) -> dict:
        return dict(self.initial)

    # Spark 4.2+ passes (start, limit); 4.0/4.1 call it without arguments: both are served.
    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        begin = start if start is not None else self._last_end
        max_rows = getattr(limit, "max_rows", None)
        if limit is not None and max_rows is None:
            max_rows = None  # ReadAllAvailable: the engine asks for everything
        elif limit is None:
            max_rows = self.limit or None
        end, _ = files.plan_range(files.list_files(self.path), self.counter, begin, max_rows)
        self._last_end = end
        return end

    def getDefaultReadLimit(self) -> Any:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
        return ReadMaxRows(self.limit) if self.limit else ReadAllAvailable()

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        _, segments = files.plan_range(files.list_files(self.path), self.counter, start, None)
        bounded = []
        for name, first, stop in segments:
            if (name, first) >= (end["file"], end["line"]):
                break
            bounded.append(_Segment(name, first, stop if name < end["file"] else min(stop, end["line"]),
                                    self.complete_only))
        return bounded

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Segment)
        yield from files.read_segment(partition.name, partition.first, partition.stop, partition.complete_only)

    def commit(self, end: dict) -> None:
        pass


# Spark's Kafka source without includeHeaders has every column but the last.
RECORD_SCHEMA_NO_HEADERS = RECORD_SCHEMA.rsplit(", headers ", 1)[0]


class _KafkaRange(InputPartition):
    def __init__(self, rng: K.Range | None) -> None:
        super().__init__(str(rng) if rng else "")
        self.range = rng


class KafkaDataSource(DataSource):
    """``spark.read[Stream].format("cdclake-kafka")``: Spark's Kafka source read with confluent-kafka in the
    executors, no jar needed. Same options (see :class:`cdclake.sources.kafka.SourceOptions`) and columns as
    ``format("kafka")``, so switching between the two is a change of the format name. One Spark partition per
    Kafka partition range."""

    @classmethod
    def name(cls) -> str:
        return "cdclake-kafka"

    def schema(self) -> str:
        include = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return RECORD_SCHEMA if include else RECORD_SCHEMA_NO_HEADERS

    def reader(self, schema: Any) -> DataSourceReader:
        return _KafkaReader(K.SourceOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _KafkaStreamReader(K.SourceOptions.parse(self.options, streaming=True))


def _read_range(opts: K.SourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    assert isinstance(partition, _KafkaRange)
    if partition.range is not None:
        yield from K.read_arrow(opts.settings, partition.range, fail_on_data_loss=opts.fail_on_data_loss,
                                include_headers=opts.include_headers)


class _KafkaReader(DataSourceReader):
    def __init__(self, opts: K.SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        with K.KafkaClient(self.opts.settings) as client:
            parts = client.partitions(self.opts.subscription)
            start = client.resolve(self.opts.starting, parts)
            end = client.resolve(self.opts.ending, parts, missing=K.LATEST)
        return [_KafkaRange(r) for r in K.ranges(start, end)] or [_KafkaRange(None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from _read_range(self.opts, partition)


class _KafkaStreamReader(DataSourceStreamReader):
    """Offsets are Spark's Kafka offsets ``{"topic": {"0": 42}}``. The initial offset is resolved once (the
    engine may ask more than once and must get the same answer); topics and partitions that appear later are
    read from their earliest offset."""

    def __init__(self, opts: K.SourceOptions) -> None:
        self.opts = opts
        self._client: K.KafkaClient | None = None
        self._initial: dict | None = None
        self._last_end: dict | None = None
        self._latest: dict | None = None
        self._waiting: set[tuple[str, int]] = set()

    def _kafka(self) -> K.KafkaClient:
        if self._client is None:
            self._client = K.KafkaClient(self.opts.settings)
        return self._client

    def initialOffset(self) -> dict:
        if self._initial is None:
            client = self._kafka()
            parts = client.partitions(self.opts.subscription)
            self._initial = K.to_json(client.resolve(self.opts.starting, parts))
        return self._initial

    # Spark 4.2+ passes (start, limit); 4.0/4.1 call it without arguments: both are served.
    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        begin = K.flatten(K.from_json(start if start is not None else self._last_end or self.initialOffset()))
        max_rows = getattr(limit, "max_rows", None)
        if limit is None:
            max_rows = self.opts.max_offsets
        client = self._kafka()
        parts = client.partitions(self.opts.subscription)
        latest = client.latest(parts)
        new = [tp for tp in parts if tp not in begin]
        begin = {**K.flatten(client.earliest(new)), **begin}
        self._warn_past_end(begin, K.flatten(latest))
        end = K.to_json(K.plan_end(K.nest(begin), latest, max_rows))
        self._last_end, self._latest = end, K.to_json(latest)
        return end

    def _warn_past_end(self, begin: dict[tuple[str, int], int], latest: dict[tuple[str, int], int]) -> None:
        for tp, high in latest.items():
            if begin.get(tp, 0) > high and tp not in self._waiting:
                self._waiting.add(tp)
                K.log.warning("Kafka at %s: %s[%d] ends at offset %d, before the offset %d to read next; waiting "
                              "for it (if the topic was recreated, its records below %d are not read)",
                              self.opts.settings.servers, tp[0], tp[1], high, begin[tp], begin[tp])

    def getDefaultReadLimit(self) -> Any:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
        return ReadMaxRows(self.opts.max_offsets) if self.opts.max_offsets else ReadAllAvailable()

    def reportLatestOffset(self) -> dict | None:
        return self._latest

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return [_KafkaRange(r) for r in K.ranges(K.from_json(start), K.from_json(end))]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from _read_range(self.opts, partition)

    def commit(self, end: dict) -> None:
        pass  # the lake is the record of what was applied, not Kafka's consumer groups

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def register(spark: SparkSession) -> None:
    spark.dataSource.register(FilesDataSource)
    spark.dataSource.register(KafkaDataSource)

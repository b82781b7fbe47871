"""cdclake's sources as PySpark Python data sources (batch and Structured Streaming)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition

from cdclake.sources import files
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


def register(spark: SparkSession) -> None:
    spark.dataSource.register(FilesDataSource)

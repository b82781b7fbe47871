"""cdclake's sources as PySpark Python data sources (batch and Structured Streaming): ``cdclake-files``
(directories of captured-records files) and ``cdclake-kafka`` (Kafka, without Spark's connector jar).

Both give Kafka's record columns, or with the option ``decode`` the changelog of their records, decoded in
the task that reads them (see :class:`Decoding`)."""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import json
import logging
import os
import secrets
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from cdclake import formats
from cdclake.sources import files
from cdclake.sources import kafka as K
from cdclake.spark import changelog as CL
from cdclake.spark.changelog import RECORD_SCHEMA

logger = logging.getLogger(__name__)

START = {"file": "", "line": 0}


class Decoding(NamedTuple):
    """Option ``decode`` (a format name): the source gives the changelog of its records instead of the records
    (see :mod:`cdclake.spark.changelog`), decoded in the task that reads them. The records then never cross
    from Python to the JVM and back to Python, which costs more than decoding them. ``decodeOptions`` holds the
    format's options as a JSON object; ``reduce = true`` sends only each key's newest row change of a task. Each
    task ends with an ``input`` row naming what it read: a batch read with the option ``inputs`` reads the same
    records again (see :func:`reread`). Decoding reads Kafka headers only where the format does (``includeHeaders``
    is for records read without decoding)."""

    format: str
    options: dict[str, str]
    reduce: bool

    @classmethod
    def of(cls, options: Any) -> Decoding | None:
        name = options.get("decode")
        if not name:
            return None
        return cls(name, json.loads(options.get("decodeOptions") or "{}"),
                   str(options.get("reduce", "false")).lower() == "true")

    @property
    def reads_headers(self) -> bool:
        return CL.cached_format(self.format, self.options).reads_headers

    def changelog(self, records: Iterator[pa.RecordBatch], described: dict[str, Any]) -> Iterator[pa.RecordBatch]:
        yield from CL.decode_arrow_task(CL.cached_format(self.format, self.options), records, self.reduce)
        yield CL.input_row(json.dumps(described), self.format)


DECODING_OPTIONS = ("decode", "decodeOptions", "reduce")
SEALED = "sealed:"
# On the driver: the texts sealed so far, by their opaque ids (see seal).
_sealed: dict[str, str] = {}


def seal(text: str) -> str:
    """An opaque id to pass as option ``decodeOptions`` instead of ``text``, which the data sources :func:`register`
    makes hold: Spark shows a data source's options in its plans (``df.explain``, the UI), where a registry's
    credentials must not appear. The registered class crosses to the executors pickled, as bytes no plan shows."""
    sealed = next((ref for ref, known in _sealed.items() if known == text), None)
    if sealed is None:
        sealed = SEALED + secrets.token_hex(16)
        _sealed[sealed] = text
    return sealed


class _Sealing(DataSource):
    """A data source whose option ``decodeOptions`` may name a text it holds (see :func:`seal`)."""

    sealed: ClassVar[dict[str, str]] = {}

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        held = self.options.get("decodeOptions") or ""
        if held.startswith(SEALED):
            if held not in self.sealed:
                raise ValueError("option decodeOptions names options this session's cdclake sources do not hold")
            self.options["decodeOptions"] = self.sealed[held]


def _schema(options: Any, records: str) -> StructType | str:
    decoding = Decoding.of(options)
    if decoding is None:
        return records
    formats.create(decoding.format, decoding.options)  # a bad format or option fails at load(), not in a task
    return CL.CHANGELOG_SCHEMA


def _inputs(options: Any) -> list[dict[str, Any]] | None:
    return json.loads(options["inputs"]) if options.get("inputs") else None


def reread(spark: SparkSession, source: str, options: dict[str, str], inputs: list[str]) -> DataFrame:
    """The records behind a decoding source's changelog, read again: those of the inputs its ``input`` rows
    name (``source``, ``options``: the data source and options of the stream that gave the changelog)."""
    plain = {k: v for k, v in options.items() if k not in DECODING_OPTIONS}
    return (spark.read.format(source).options(**plain)
            .option("inputs", json.dumps([json.loads(i) for i in inputs])).load())


class _Segment(InputPartition):
    def __init__(self, name: str, first: int, stop: int, complete_only: bool,
                 seek: tuple[int, int] = (0, 0)) -> None:
        super().__init__((name, first, stop))
        self.name, self.first, self.stop, self.complete_only, self.seek = name, first, stop, complete_only, seek

    def described(self) -> dict[str, Any]:
        return {"name": self.name, "first": self.first, "stop": self.stop, "complete_only": self.complete_only,
                "seek": list(self.seek)}

    @classmethod
    def of(cls, described: dict[str, Any]) -> _Segment:
        return cls(described["name"], described["first"], described["stop"], described["complete_only"],
                   tuple(described["seek"]))

    def read(self, decoding: Decoding | None, applied: dict[str, int]) -> Iterator[pa.RecordBatch]:
        if not self.name:
            return
        records = files.read_segment(self.name, self.first, self.stop, self.complete_only, self.seek)
        if applied:
            records = _unapplied(records, applied)
        yield from decoding.changelog(records, self.described()) if decoding else records


def _applied(options: Any) -> dict[str, int]:
    """Option ``applied``: by ``"topic:partition"``, the highest offset the lake's batches read (see
    :func:`cdclake.pipeline.positions.source_read`); records at or below it are not read again."""
    return {str(k): int(v) for k, v in json.loads(options.get("applied") or "{}").items()}


def _unapplied(records: Iterator[pa.RecordBatch], applied: dict[str, int]) -> Iterator[pa.RecordBatch]:
    """The records past the offsets ``applied`` names for their topic and partition."""
    names = pa.array(list(applied), pa.string())
    highest = pa.array(list(applied.values()), pa.int64())
    for batch in records:
        where = pc.binary_join_element_wise(batch.column("topic"), pc.cast(batch.column("partition"), pa.string()),
                                            ":")
        done = pc.fill_null(pc.take(highest, pc.index_in(where, value_set=names)), -1)
        kept = batch.filter(pc.greater(batch.column("offset"), done))
        if kept.num_rows:
            yield kept


MIN_TASK_LINES = 10_000  # a task is worth its start-up


def _tasks(segments: list[tuple[str, int, int]], counter: files.LineCounter, min_tasks: int,
           complete_only: bool) -> list[_Segment]:
    """The segments cut into at least ``min_tasks`` tasks of about equal lines where they are long enough, each
    starting from a known line start near its first line: one file's lines are read, decoded and reduced in
    parallel (a file is one partition, and a batch may hold little more than one file). The cuts fall at equal
    shares of all the lines, and a file's end cuts too, so no last task of a few lines adds a task to every stage
    of the batch (as cutting every segment by a fixed size would). A share's cut that would leave fewer than
    ``MIN_TASK_LINES`` lines beside a file's end is left to that end: a task of a few lines holds a core while its
    Python worker starts."""
    total = sum(stop - first for _, first, stop in segments)
    count = max(1, min(min_tasks, total // MIN_TASK_LINES))
    ends = list(itertools.accumulate(stop - first for _, first, stop in segments))[:-1]

    def beside_an_end(cut: int) -> bool:
        after = bisect.bisect_left(ends, cut)
        return any(abs(cut - ends[i]) < MIN_TASK_LINES for i in (after - 1, after) if 0 <= i < len(ends))

    cuts = [cut for cut in (total * i // count for i in range(1, count)) if not beside_an_end(cut)]
    tasks, before = [], 0  # lines of the segments before this one
    for name, first, stop in segments:
        inner = [first + cut - before for cut in cuts if before < cut < before + stop - first]
        tasks += [_Segment(name, begin, end, complete_only, counter.seek_point(name, begin))
                  for begin, end in zip([first, *inner], [*inner, stop], strict=True) if begin < end]
        before += stop - first
    return tasks


class FilesDataSource(_Sealing):
    """``spark.read[Stream].format("cdclake-files").option("path", DIR)``; options ``maxRecordsPerBatch``
    (lines per micro-batch), ``minPartitions`` (at least this many tasks per batch where files are long
    enough: a file's lines are read by several tasks at once) and those of :class:`Decoding`."""

    @classmethod
    def name(cls) -> str:
        return "cdclake-files"

    def schema(self) -> StructType | str:
        return _schema(self.options, RECORD_SCHEMA)

    def reader(self, schema: Any) -> DataSourceReader:
        return _FilesReader(self.options)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _FilesStreamReader(self.options)


def _min_tasks(options: dict[str, str]) -> int:
    return int(options.get("minPartitions", "1") or 1)


class _FilesReader(DataSourceReader):
    """Every line of the directory's files; with the option ``inputs``, the segments it names instead."""

    def __init__(self, options: dict[str, str]) -> None:
        self.path = options.get("path", "")
        self.min_tasks = _min_tasks(options)
        self.inputs = _inputs(options)
        self.decoding = Decoding.of(options)
        self.applied = _applied(options)

    def partitions(self) -> Sequence[InputPartition]:
        if self.inputs is not None:
            return [_Segment.of(described) for described in self.inputs] or [_Segment("", 0, 0, False)]
        counter = files.LineCounter(complete_only=False)
        _, segments = files.plan_range(files.list_files(self.path), counter, START, None)
        return _tasks(segments, counter, self.min_tasks, False) or [_Segment("", 0, 0, False)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Segment)
        yield from partition.read(self.decoding, self.applied)


class _FilesStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are file name + line. In follow mode only newline-terminated lines count, so a line
    still being written is never read half. With ``Trigger.AvailableNow`` (a run without follow) the input
    as it is when the query starts is all there is: batches of at most the limit up to it, then the query
    stops by itself."""

    def __init__(self, options: dict[str, str]) -> None:
        self.path = options["path"]
        self.limit = int(options.get("maxRecordsPerBatch", "0") or 0)
        self.min_tasks = _min_tasks(options)
        self.complete_only = options.get("follow", "false") == "true"
        self.decoding = Decoding.of(options)
        self.applied = _applied(options)
        self.counter = files.LineCounter(self.complete_only)
        self.initial = json.loads(options["startingOffset"]) if options.get("startingOffset") else dict(START)
        self._last_end = dict(self.initial)
        self._target: dict | None = None
        self._warned: set[tuple] = set()

    def initialOffset(self) -> dict:
        return dict(self.initial)

    # Spark passes (start, limit); called without them, the reader goes on from its last end.
    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        begin = start if start is not None else self._last_end
        max_rows = getattr(limit, "max_rows", None)
        if limit is not None and max_rows is None:
            max_rows = None  # ReadAllAvailable: the engine asks for everything
        elif limit is None:
            max_rows = self.limit or None
        listed = files.list_files(self.path)
        self._warn_of_unread(listed, begin)
        end, _ = files.plan_range(listed, self.counter, begin, max_rows)
        if self._target is not None and files.position(end) > files.position(self._target):
            end = max(self._target, begin, key=files.position)  # nothing past the input seen at start
        self._last_end = end
        return end

    def _warn_of_unread(self, listed: list[str], begin: dict) -> None:
        """Says (once each) what of the input is never read: files that arrived after the input moved past their
        place, and directories."""
        late = files.late_files(listed, begin)
        if late > 0 and ("late", late) not in self._warned:
            self._warned.add(("late", late))
            logger.warning("%s: %d file(s) arrived that sort before %s, where this input's reading stands: they are "
                           "not read (files must arrive in name order; give them names that sort after it)",
                           self.path, late, files.position(begin)[0])
        directories = files.subdirectories(self.path)
        if directories and ("directories", tuple(directories)) not in self._warned:
            self._warned.add(("directories", tuple(directories)))
            logger.warning("%s: the directories in it are not read: %s", self.path, ", ".join(directories))

    def prepareForTriggerAvailableNow(self) -> None:
        # From any start, everything there is ends at the last file's last line: only that file is counted.
        names = files.list_files(self.path)
        last = os.path.basename(names[-1]) if names else ""
        self._target = ({"file": last, "line": self.counter.count(names[-1]), "files": files.files_up_to(names, last)}
                        if names else dict(START))

    def getDefaultReadLimit(self) -> Any:
        return ReadMaxRows(self.limit) if self.limit else ReadAllAvailable()

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        _, segments = files.plan_range(files.list_files(self.path), self.counter, start, None)
        bounded = []
        end_name, end_line = files.position(end)
        for name, first, stop in segments:
            key = os.path.basename(name)
            if (key, first) >= (end_name, end_line):
                break
            bounded.append((name, first, stop if key < end_name else min(stop, end_line)))
        return _tasks(bounded, self.counter, self.min_tasks, self.complete_only)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Segment)
        yield from partition.read(self.decoding, self.applied)

    def commit(self, end: dict) -> None:
        pass


# Spark's Kafka source without includeHeaders has every column but the last.
RECORD_SCHEMA_NO_HEADERS = RECORD_SCHEMA.rsplit(", headers ", 1)[0]


class _KafkaRange(InputPartition):
    def __init__(self, rng: K.Range | None) -> None:
        super().__init__(str(rng) if rng else "")
        self.range = rng


class KafkaDataSource(_Sealing):
    """``spark.read[Stream].format("cdclake-kafka")``: Spark's Kafka source read with confluent-kafka in the
    executors, no jar needed. Same options (see :class:`cdclake.sources.kafka.SourceOptions`) and columns as
    ``format("kafka")``, so switching between the two is a change of the format name; plus those of
    :class:`Decoding`. One Spark partition per Kafka partition range."""

    @classmethod
    def name(cls) -> str:
        return "cdclake-kafka"

    def schema(self) -> str:
        include = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return _schema(self.options, RECORD_SCHEMA if include else RECORD_SCHEMA_NO_HEADERS)

    def reader(self, schema: Any) -> DataSourceReader:
        return _KafkaReader(K.SourceOptions.parse(self.options, streaming=False), self.options)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _KafkaStreamReader(K.SourceOptions.parse(self.options, streaming=True), Decoding.of(self.options))


def _read_range(opts: K.SourceOptions, partition: InputPartition,
                decoding: Decoding | None) -> Iterator[pa.RecordBatch]:
    assert isinstance(partition, _KafkaRange)
    rng = partition.range
    if rng is None:
        return
    # Headers are read for a decoding format that reads them, else only on request: they cost time, and one
    # named as the captured-records reader marks a line would fail its message.
    include_headers = decoding.reads_headers if decoding else opts.include_headers
    records = K.read_arrow(opts.settings, rng, fail_on_data_loss=opts.fail_on_data_loss,
                           include_headers=include_headers)
    yield from decoding.changelog(records, dataclasses.asdict(rng)) if decoding else records


class _KafkaReader(DataSourceReader):
    """The records between the starting and ending offsets; with the option ``inputs``, the ranges it names."""

    def __init__(self, opts: K.SourceOptions, options: Any) -> None:
        self.opts = opts
        self.inputs = _inputs(options)
        self.decoding = Decoding.of(options)

    def partitions(self) -> Sequence[InputPartition]:
        if self.inputs is not None:
            return [_KafkaRange(K.Range(**described)) for described in self.inputs] or [_KafkaRange(None)]
        with K.KafkaClient(self.opts.settings) as client:
            parts = client.partitions(self.opts.subscription)
            start = client.resolve(self.opts.starting, parts)
            end = client.resolve(self.opts.ending, parts, missing=K.LATEST)
        return [_KafkaRange(r) for r in K.ranges(start, end)] or [_KafkaRange(None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from _read_range(self.opts, partition, self.decoding)


class _KafkaStreamReader(DataSourceStreamReader):
    """Offsets are Spark's Kafka offsets ``{"topic": {"0": 42}}``. The initial offset is resolved once (the
    engine may ask more than once and must get the same answer); topics and partitions that appear later are
    read from their earliest offset."""

    def __init__(self, opts: K.SourceOptions, decoding: Decoding | None) -> None:
        self.opts, self.decoding = opts, decoding
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

    # Spark passes (start, limit); called without them, the reader goes on from its last end.
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
        return ReadMaxRows(self.opts.max_offsets) if self.opts.max_offsets else ReadAllAvailable()

    def reportLatestOffset(self) -> dict | None:
        return self._latest

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return [_KafkaRange(r) for r in K.ranges(K.from_json(start), K.from_json(end))]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from _read_range(self.opts, partition, self.decoding)

    def commit(self, end: dict) -> None:
        pass  # the lake is the record of what was applied, not Kafka's consumer groups

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


# The data sources that take the option ``decode``.
DECODING_SOURCES = (FilesDataSource.name(), KafkaDataSource.name())


def register(spark: SparkSession) -> None:
    """Registers cdclake's data sources, holding the texts sealed so far (see :func:`seal`)."""
    for source in (FilesDataSource, KafkaDataSource):
        # Made here, the class is pickled with what it holds (a class of a module is pickled by its name).
        spark.dataSource.register(type(source.__name__, (source,), {"sealed": dict(_sealed)}))

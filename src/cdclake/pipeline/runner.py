"""Run orchestration: a pipeline's sources as Structured Streaming queries with ``foreachBatch``, their progress
reports and the run's summary.

Batch and streaming use the same path: without ``follow`` a query stops once it has caught up with the input it saw
at start (the sources one after another); with ``follow`` every source's query runs at once and keeps watching.
Each batch is applied by :class:`~cdclake.pipeline.batch.BatchApplier`; where each source starts is
:mod:`cdclake.pipeline.positions`'s.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyspark import InheritableThread
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from cdclake.errors import StopRequested
from cdclake.lake import paths as lakepaths
from cdclake.lake.delta import DeltaSink
from cdclake.lake.sink import Sink
from cdclake.native import compiled
from cdclake.pipeline import metrics
from cdclake.pipeline.batch import TOMBSTONE_EXPIRY_S, BatchApplier, BatchReport, Progress
from cdclake.pipeline.config import PipelineConfig, SourceConfig
from cdclake.pipeline.positions import (
    SourceRead,
    base_version,
    check_kafka_sources,
    new_checkpoint,
    source_partitions,
    source_read,
)
from cdclake.pipeline.signals import before_batches, stop_on_signal
from cdclake.sources import kafka
from cdclake.spark import changelog as CL
from cdclake.spark import planner
from cdclake.spark.session import get_session, is_connect
from cdclake.spark.sources import register

logger = logging.getLogger(__name__)


@dataclass
class RunSummary:
    batches: list[BatchReport] = field(default_factory=list)
    # Ended by SIGINT or SIGTERM: a following run's way to end; a run that stops once caught up may not have.
    signalled: bool = False
    # Why the run stopped before it had read all (on_error = "fail": a batch with records that failed to decode).
    gave_up: str | None = None
    stopped: dict[str, str] = field(default_factory=dict)  # the tables stopped when the run ended, and why

    def total(self, name: str) -> int:
        return sum(getattr(b, name) for b in self.batches)


def run(config: PipelineConfig, progress: Progress | None = None, spark: SparkSession | None = None,
        say: Callable[[str], None] = logger.warning) -> RunSummary:
    """Run every source of the pipeline until caught up (or forever with ``follow``). ``say`` tells the user what
    the run is waiting for."""
    refused = lakepaths.refuse_foreign(config.lake)  # tables named as an earlier cdclake did: never re-mapped
    if refused:
        raise ValueError(refused)
    config.make_directories()
    if "://" not in config.lake:  # what makes a directory a lake for `status` and the other commands
        os.makedirs(lakepaths.own_root(config.lake), exist_ok=True)
    check_kafka_sources(config)
    if spark is None:
        _check_registries(config)
    loading = None
    if spark is None:
        say("starting Spark…")
        spark = _start_spark(config)
        loading = _start_loading_python_workers(spark, config)
    register(spark)
    compiled.warn_if_missing()
    try:
        with stop_on_signal() as stop, metrics.serving(config, progress) as observed:
            return _run_sources(spark, config, observed, stop)
    except BaseException:
        if loading is not None:
            spark.sparkContext.cancelJobGroup(LOADING_GROUP)
        raise
    finally:
        # A run that ends well waits for the loading rather than cancel it: a cancelled task closes its Python
        # worker's socket mid-write, and the worker prints a BrokenPipeError traceback after the run's summary (a
        # short run may end before the loading does).
        if loading is not None:
            loading.join()


def _start_spark(config: PipelineConfig) -> SparkSession:
    """The run's Spark session. A signal meanwhile ends the run at once (KeyboardInterrupt), whatever py4j made of
    the JVM's start being cut short."""
    with stop_on_signal() as stop, before_batches():
        try:
            return get_session(config.spark_master, config.spark_remote, config.spark_conf,
                               short_run=not config.follow)
        except Exception:
            if stop.is_set():
                raise KeyboardInterrupt from None
            raise


# The job group of the job that loads a new local session's Python workers (see _start_loading_python_workers).
LOADING_GROUP = "cdclake-load-python-workers"


def _start_loading_python_workers(spark: SparkSession, config: PipelineConfig) -> threading.Thread | None:
    """Loads the Python workers of a new local session with cdclake's sources and the pipeline's formats, in the
    background while the streaming queries start, which takes Spark seconds of starting one Python helper after
    another with a core to spare. The first batch's tasks then find their workers ready (figures:
    benchmarks/results.md, "Pipeline tuning"). A cluster's executors start theirs as they please."""
    if is_connect(spark) or not spark.sparkContext.master.startswith("local"):
        return None
    in_use = [(source.format, source.options) for source in config.sources]

    def load() -> None:
        spark.sparkContext.setJobGroup(LOADING_GROUP, "cdclake: loading the Python workers", interruptOnCancel=True)
        try:
            CL.load_python_workers(spark, in_use)
        except Exception as exc:  # cancelled because the run failed; the run's own tasks report real trouble
            logger.debug("loading the Python workers ahead of the first batch stopped: %s", exc)

    thread = InheritableThread(target=load, name="cdclake-load-python-workers", daemon=True)
    thread.start()
    return thread


@dataclass
class _SourceRun:
    """One source of a run: the applier of its batches (which knows how the source is read and its sink), and where
    its query keeps its checkpoint. With Spark Connect its batch reports come back through the lake (``reports``)."""

    applier: BatchApplier
    checkpoint: str
    reports: _LakeReports | None

    @property
    def read(self) -> SourceRead:
        return self.applier.read

    def poll(self) -> None:
        if self.reports:
            self.reports.poll()

    def finish(self, summary: RunSummary) -> None:
        self.poll()
        batches = self.reports.reports if self.reports else self.applier.batches
        summary.batches.extend(batches)
        # The tables stopped before the run (as the applier found them when made here; a local one adds its own
        # stops), and those its batches stopped: no read of the lake as the run ends.
        summary.stopped.update(self.applier.stopped)
        for report in batches:
            summary.stopped.update(report.stopped)


def _source_run(spark: SparkSession, config: PipelineConfig, source: SourceConfig,
                progress: Progress | None, stop: threading.Event) -> _SourceRun:
    sink = DeltaSink(config.lake, f"{config.name}.{source.name}", config.storage_options,
                     config.tombstone_retention_hours)
    checkpoint = os.path.join(config.checkpoint_dir(), source.name)
    partitions = source_partitions(source) if source.consistency == "resolved-ts" else None
    # With Spark Connect the batches run in the server's foreachBatch worker: their reports come back
    # through the lake's progress table instead.
    new = new_checkpoint(checkpoint)
    base = base_version(checkpoint, sink)
    last = sink.last_batch()
    reports = _LakeReports(sink, source.name, 0 if last is None else last + 1, progress) if is_connect(spark) else None
    read = source_read(spark, source, config, sink, new)
    applier = BatchApplier(spark, read, sink, base, None if reports else progress, partitions,
                           min(TOMBSTONE_EXPIRY_S, config.tombstone_retention_hours * 3600), stop)
    return _SourceRun(applier, checkpoint, reports)


def _run_sources(spark: SparkSession, config: PipelineConfig, progress: Progress | None,
                 stop: threading.Event) -> RunSummary:
    """Without ``follow``, the sources one after another, each until caught up; with it, all at once: a query
    that follows its source never ends by itself, so the sources after it would never be read. ``stop``, once
    set, stops them after the batches they are applying."""
    summary = RunSummary()
    progress = _failing_on_error(config, progress, summary, stop)
    if config.follow:
        runs = [_source_run(spark, config, source, progress, stop) for source in config.sources]
        _follow(spark, runs, config, stop)
    else:
        runs = []
        for source in config.sources:
            if stop.is_set():
                break
            runs.append(_source_run(spark, config, source, progress, stop))
            if runs[-1].read.target == {} and runs[-1].read.data_source == "cdclake-kafka":
                # A Kafka source with nothing past what the lake applied: a query started only to be stopped at once
                # left Spark's helper process for the source to fail connecting to it, a traceback on the console.
                # (Spark's own connector has no such helper, and its query says whether its jar is there.)
                logger.info("source %s: nothing new in Kafka", source.name)
                continue
            _await_query(_start_query(spark, runs[-1], config), runs[-1], stop)
    for run in runs:
        run.finish(summary)
        run.applier.sink.expire_tombstones()
    summary.signalled = stop.is_set() and summary.gave_up is None
    return summary


def _failing_on_error(config: PipelineConfig, progress: Progress | None, summary: RunSummary,
                      stop: threading.Event) -> Progress | None:
    """``progress``, which with ``on_error = "fail"`` also stops the run after a batch whose records failed to
    decode: they are in the dead letters, and the next run goes on after them."""
    if config.on_error != "fail":
        return progress

    def report(batch: BatchReport) -> None:
        if progress is not None:
            progress(batch)
        if batch.failed and summary.gave_up is None:
            summary.gave_up = (f"batch {batch.batch} [{batch.source}] had {batch.failed:,} "
                               f"record{'' if batch.failed == 1 else 's'} that failed to decode (on_error = fail)")
            stop.set()

    return report


class _LakeReports:
    """Batch reports read back from the lake's progress rows (for Spark Connect, whose foreachBatch runs on
    the server), handed to ``progress`` as they appear."""

    def __init__(self, sink: Sink, source: str, first_batch: int, progress: Progress | None) -> None:
        self.sink, self.source, self.next_batch, self.progress = sink, source, first_batch, progress
        self.reports: list[BatchReport] = []

    def poll(self) -> None:
        for row in self.sink.progress_since(self.next_batch):
            tables = json.loads(row.get("tables") or "{}")
            report = BatchReport(
                self.source, row["batch"], **{name: row.get(name) or 0 for name in (
                    "records", "events", "failed", "skipped", "inserted", "updated", "deleted", "dead_letters",
                    "held")},
                consistent_ts=row.get("consistent_ts"), seconds=row.get("duration_s") or 0.0,
                stopped={name: t["stopped"] for name, t in tables.items() if t.get("stopped")},
                offsets=json.loads(row.get("offsets") or "{}"),
                last_commit_ts=planner.commit_ts_of({name: t.get("last_seq") or "" for name, t in tables.items()}))
            self.reports.append(report)
            self.next_batch = row["batch"] + 1
            if self.progress:
                self.progress(report)


def _clear_unlogged_offsets(spark_checkpoint: str) -> None:
    """A run killed while Spark wrote its first offset-log entry leaves only a temporary file in ``offsets``,
    and Spark then refuses to plan batch 0 there. With no entry logged, the directory holds nothing."""
    offsets = os.path.join(spark_checkpoint, "offsets")
    if os.path.isdir(offsets) and not any(name.isdigit() for name in os.listdir(offsets)):
        shutil.rmtree(offsets)


def _start_query(spark: SparkSession, run: _SourceRun, config: PipelineConfig) -> Any:
    source = run.read.source
    spark_checkpoint = os.path.join(run.checkpoint, "spark")
    _clear_unlogged_offsets(spark_checkpoint)
    writer = (run.read.stream(spark).writeStream.foreachBatch(run.applier)
              .option("checkpointLocation", spark_checkpoint)
              .queryName(f"cdclake-{config.name}-{source.name}"))
    if config.follow:
        writer = writer.trigger(processingTime=f"{config.poll_seconds} seconds")
    elif source.kafka is None:
        # Files: the source fixes its end when the query starts and Spark stops the query once there.
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="0 seconds")
    return writer.start()


def _await_query(query: Any, run: _SourceRun, stop: threading.Event) -> None:
    """Until a query that stops once caught up has done so (a Kafka source: reached the end offsets seen at start)."""
    source, target = run.read.source, run.read.target
    short_since: float | None = None  # since when a Kafka source has found no records short of the target
    last_end: Any = None
    try:
        while query.isActive and not stop.is_set():
            run.poll()
            if _ended(query, 0.5):
                break
            if target is None:
                continue
            state, end = _caught_up(query, target)
            if end != last_end:
                last_end, short_since = end, None  # a batch ran: the source is moving
            if state == REACHED or (state == IDLE and source.kafka is None):
                break
            if state == IDLE:
                # Kafka has fewer records than when the run started (a broker restarting, or not yet serving
                # its log): wait for them, as the reads do, instead of stopping as if caught up.
                short_since = _wait_for_kafka(source, end, target, short_since)
    except BaseException:
        _stop_at_once([query])
        raise
    _stop(query, run)
    _raise_failure(query, run)


def _follow(spark: SparkSession, runs: list[_SourceRun], config: PipelineConfig, stop: threading.Event) -> None:
    """Every source's query at once, until one ends (it failed) or ``stop`` is set. The others are then stopped
    too, each after the batch it is applying."""
    queries: list[Any] = []
    try:
        for run in runs:
            queries.append(_start_query(spark, run, config))
        # A failed query ends the loop, and the others stop after their batches before its failure is raised. (Not
        # stop.wait: a signal handler setting the event while this thread holds the event's lock would deadlock.)
        while all(query.isActive for query in queries) and not stop.is_set():
            for run in runs:
                run.poll()
            time.sleep(0.5)
    except BaseException:
        _stop_at_once(queries)
        raise
    for query, run in zip(queries, runs, strict=True):
        _stop(query, run)
    for query, run in zip(queries, runs, strict=True):
        _raise_failure(query, run)


def _stop(query: Any, run: _SourceRun) -> None:
    """Stops a query that is still running, after the batch it is applying."""
    if not query.isActive:
        return
    if run.reports is None:
        _stop_between_batches(query, run.applier)
    else:
        query.stop()


def _stop_at_once(queries: list[Any]) -> None:
    """Stops the queries wherever they are: the run is failing, or a second signal says not to wait."""
    for query in queries:
        if query.isActive:
            query.stop()


# How long a stopping run waits for Spark to log a batch as done before it stops the query anyway (the batch is then
# read again by the next run, which finds it applied and skips it).
STOP_WAIT_S = 60.0


def _stop_between_batches(query: Any, applier: BatchApplier) -> None:
    """Stops a query after the batch it is applying, not inside it. Spark's stop interrupts the query's thread
    wherever it is: in a batch, the batch's Spark jobs failed, and the JVM, matching the long error that came back
    from Python, overflowed its stack and printed thousands of lines. The batch is left to finish; one that starts
    after it refuses to (:class:`StopRequested`), and the query is stopped once Spark has logged the last batch
    done. (With Spark Connect the batches run on the server, out of reach: the query is stopped as it is.) A run
    that has caught up stops its query this way too: a batch of records that arrived meanwhile may have begun."""
    applier.stopping.set()
    with applier.busy:  # the batch being applied, if any, has ended
        pass
    deadline = time.monotonic() + STOP_WAIT_S
    while query.isActive and query.status["isTriggerActive"] and time.monotonic() < deadline:
        time.sleep(0.1)
    if query.isActive:
        query.stop()


def _ended(query: Any, seconds: float) -> bool:
    """Whether the query has ended within ``seconds``. A query's failure is raised (Spark's own exception), but for
    a batch declining to start in a run that is stopping."""
    try:
        return bool(query.awaitTermination(seconds))
    except StreamingQueryException as failure:
        if _declined(failure):
            return True
        raise


def _raise_failure(query: Any, run: _SourceRun) -> None:
    failure = query.exception()
    if failure is not None and not _declined(failure):
        raise RuntimeError(f"source {run.read.source.name} failed: {failure}")


def _declined(failure: Exception) -> bool:
    """Whether a query ended because a batch declined to start in a stopping run: not a failure. Spark hands the
    error back as text, the batch's Python traceback within."""
    return StopRequested.__name__ in str(failure)


REACHED, IDLE = "reached", "idle"


def _caught_up(query: Any, target: dict[str, Any]) -> tuple[str | None, Any]:
    """Where the query stands against the target, and its last end offset: :data:`REACHED` once the end offset
    is at or past the target; :data:`IDLE` when the source found no new data short of it; None while a trigger
    runs or data is coming."""
    status = query.status
    progress = query.lastProgress
    end = progress["sources"][0].get("endOffset") if progress else None
    if isinstance(end, str):
        end = json.loads(end)
    if status.get("isTriggerActive"):
        return None, end
    if _reached(end, target):
        return REACHED, end
    idle = not status.get("isDataAvailable") and "Waiting for data" in status.get("message", "")
    return (IDLE if idle else None), end


def _reached(end: dict[str, Any] | None, target: dict[str, Any]) -> bool:
    """Whether a stream's Kafka offsets are at or past the target's, partition by partition. Before the first
    batch (no offset yet) only an empty target, nothing to read, is reached."""
    if end is None:
        return not target
    got = kafka.flatten(kafka.from_json(end))
    return all(got.get(tp, -1) >= offset for tp, offset in kafka.flatten(kafka.from_json(target)).items())


def _wait_for_kafka(source: SourceConfig, end: dict[str, Any] | None, target: dict[str, Any],
                    since: float | None) -> float:
    """A Kafka source found no new records short of the target: say so once, and give up with
    :class:`~cdclake.sources.kafka.DataLoss` once that has lasted the client's retry window (as a read of
    records the broker no longer has does). Returns since when it has been waiting."""
    settings = source.client_settings()
    got = kafka.flatten(kafka.from_json(end or {}))
    behind = [f"{t}[{p}] offset {o - 1}" for (t, p), o in sorted(kafka.flatten(kafka.from_json(target)).items())
              if got.get((t, p), -1) < o]
    shown = ", ".join(behind[:3]) + (f" and {len(behind) - 3} more partitions" if len(behind) > 3 else "")
    now = time.monotonic()
    if since is None:
        kafka.log.warning("source %s: Kafka at %s does not serve the records up to %s that it had when the run "
                          "started; waiting up to %.0fs for them (a broker restarting?)", source.name,
                          settings.servers, shown, settings.retry_timeout_s)
        return now
    if now - since >= settings.retry_timeout_s:
        raise kafka.DataLoss(f"source {source.name}: Kafka at {settings.servers} has not served the records up to "
                             f"{shown} for {now - since:.0f}s, though it had them when the run started (a topic "
                             "truncated or recreated, or a broker restarted without its log); the lake holds every "
                             "record applied before them")
    return since


def _check_registries(config: PipelineConfig) -> None:
    """Each source's schema registry reachable over HTTP, before Spark starts, as the Kafka sources are: a registry
    that is down is then one line in a second, not the first batch's failure after Spark's start, with its noise."""
    from cdclake.formats.avro.registry.http import HttpRegistry

    for source in config.sources:
        registry = str(source.options.get("registry") or "")
        if registry.lower().startswith(("http://", "https://")):
            HttpRegistry(registry).check()

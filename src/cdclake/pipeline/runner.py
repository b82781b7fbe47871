"""A pipeline: sources → decode → plan → Delta sink, as Structured Streaming queries with ``foreachBatch``.

Batch and streaming use the same path: without ``follow`` a query stops once it has caught up with
the input it saw at start; with ``follow`` it keeps watching. Each micro-batch is applied exactly once:
Spark's checkpoint says which records a batch covers, and every Delta commit carries the batch's
app-transaction marker, so a batch replayed after a crash skips what it had already committed. Without Spark's
checkpoint (lost, replaced, new) the lake decides: batches are numbered above every marker it holds, and a files
source skips what its recorded batches read (see :func:`_base_version`, :func:`source_read`). One table's failure
stops that table and the batch goes on (see :func:`table_failure`).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark import InheritableThread
from pyspark.errors import AnalysisException, StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cdclake import formats
from cdclake.errors import StopRequested
from cdclake.lake import delta
from cdclake.lake import paths as lakepaths
from cdclake.lake.delta import STEPS_PER_BATCH, DeltaSink, TableStopped
from cdclake.lake.sink import Sink
from cdclake.model import ddl as DDL
from cdclake.model.types import InvalidType, parse_type
from cdclake.native import compiled
from cdclake.pipeline import metrics
from cdclake.pipeline.config import PipelineConfig, SourceConfig
from cdclake.sources import files, kafka
from cdclake.spark import changelog as CL
from cdclake.spark import planner
from cdclake.spark.lake_types import arrow_type
from cdclake.spark.session import get_session, is_connect, private_directory, task_slots
from cdclake.spark.sources import DECODING_SOURCES, register, reread, seal
from cdclake.support.failpoints import failpoint

logger = logging.getLogger("cdclake.pipeline.runner")


@dataclass
class BatchReport:
    source: str
    batch: int
    records: int = 0
    events: int = 0
    failed: int = 0
    skipped: int = 0
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    dead_letters: int = 0
    held: int = 0  # consistency = "resolved-ts": changes waiting for every partition's resolved ts
    consistent_ts: int | None = None
    seconds: float = 0.0
    plan_seconds: float = 0.0  # reading, decoding and planning (Spark jobs)
    apply_seconds: float = 0.0  # typing the net changes and writing them to the tables
    stopped: dict[str, str] = field(default_factory=dict)
    # For the metrics (cdclake.pipeline.metrics): rows changed per table and change (insert, update, delete), the last
    # offset applied per "topic:partition", and the commit ts of each table's last change.
    rows: dict[str, dict[str, int]] = field(default_factory=dict)
    offsets: dict[str, int] = field(default_factory=dict)
    last_commit_ts: dict[str, int] = field(default_factory=dict)


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


Progress = Callable[[BatchReport], None]

# How often a running pipeline forgets the tombstones past their retention (at most; and when it stops).
TOMBSTONE_EXPIRY_S = 3600.0


def _collect(step: planner.RowStep) -> pa.Table:
    """A step's changes at the driver; on a collecting thread, which thereby also makes them (see RowStep)."""
    return step.changes.toArrow()


class ChangesAhead:
    """The row steps' changes, collected to the driver (a small Spark job each) on threads, a few steps ahead
    of the step being applied: a batch of many tables runs these jobs side by side and alongside the merges
    instead of one after another (60 tables: 10 s of collecting became 5 s on 2 cores). At most ``ahead``
    steps' changes wait in memory besides the one being applied."""

    def __init__(self, steps: list[planner.RowStep], ahead: int = 2) -> None:
        self.steps, self.ahead = steps, ahead
        self.index = {id(step): i for i, step in enumerate(steps)}
        self.pool = ThreadPoolExecutor(ahead, thread_name_prefix="cdclake-changes")
        self.futures: dict[int, Future[pa.Table]] = {}
        self.submitted = 0

    def changes(self, step: planner.RowStep) -> pa.Table:
        index = self.index[id(step)]
        for skipped in [i for i in self.futures if i < index]:  # the steps of a table that stopped, or renamed before
            self.futures.pop(skipped).cancel()
        while self.submitted <= min(index + self.ahead, len(self.steps) - 1):
            self.futures[self.submitted] = self.pool.submit(_collect, self.steps[self.submitted])
            self.submitted += 1
        return self.futures.pop(index).result()

    def __enter__(self) -> ChangesAhead:
        return self

    def __exit__(self, *_: object) -> None:
        # The batch frees its cached changes next: no job may still read them.
        self.pool.shutdown(wait=True, cancel_futures=True)


class BatchApplier:
    """Applies one micro-batch of records of one source: the body of ``foreachBatch``."""

    def __init__(self, spark: SparkSession, read: SourceRead, sink: Sink, base_version: int,
                 progress: Progress | None, partitions: list[tuple[str, int]] | None = None,
                 expire_every_s: float = TOMBSTONE_EXPIRY_S, run_stopping: threading.Event | None = None) -> None:
        self.spark, self.read, self.source, self.sink = spark, read, read.source, sink
        self.base_version = base_version
        self.progress = progress
        # A following pipeline forgets expired tombstones as it runs, not only when it stops.
        self.expire_every_s = expire_every_s
        self.expire_due = time.monotonic() + expire_every_s
        self.stopped: dict[str, str] = {}
        self.partition_ts: dict[str, int] = {}
        # consistency = "resolved-ts": the source's partitions, the latest resolved ts of each, the snapshot of
        # held changes the next batch starts from, and the commit ts the tables are consistent up to.
        self.partitions = {f"{t}:{p}" for t, p in partitions or ()}
        self.resolved_ts: dict[str, int] = {}
        self.held_batch: int | None = None
        self.consistent_ts = 0
        self.written: set[tuple[str, str]] = set()
        self._resume()
        self.summary = RunSummary()
        # Set when this query is to end, or the whole run (``run_stopping``, set by a signal): a batch that starts
        # after either is left to the next run (see _stop_between_batches).
        self.stopping = threading.Event()
        self.run_stopping = run_stopping
        self.busy = threading.Lock()  # held while a batch is applied

    def __getstate__(self) -> dict[str, Any]:
        # With Spark Connect the applier is pickled to the server, which makes its own (see _stop_between_batches).
        state = dict(self.__dict__)
        del state["stopping"], state["run_stopping"], state["busy"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, stopping=threading.Event(), run_stopping=None, busy=threading.Lock())

    def _resume(self) -> None:
        """Stopped tables, each partition's latest commit ts and resolved ts, and the held changes, as the
        last applied batch left them."""
        history = self.sink.history()
        state = history.last
        if state is None:
            return
        self.stopped = history.stopped
        self.partition_ts = json.loads(state.get("partition_ts") or "{}")
        self.resolved_ts = json.loads(state.get("resolved_ts") or "{}")
        self.held_batch = state.get("held_batch")
        self.consistent_ts = state.get("consistent_ts") or 0
        self.written = history.written

    def __call__(self, data: DataFrame, batch_id: int) -> None:
        """Applies one batch: ``data`` holds its records, or their changelog where the source decodes them."""
        with self.busy:
            if self.stopping.is_set() or (self.run_stopping and self.run_stopping.is_set()):
                raise StopRequested(f"batch {self.base_version + batch_id} of {self.source.name}: for the next run")
            with one_batch_at_a_time(self.sink.lake):
                self._apply(data, batch_id)

    def _apply(self, data: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        batch = self.base_version + batch_id
        report = BatchReport(self.source.name, batch)
        consistent = self.source.consistency == "resolved-ts"
        # Each task reduces its keys' changes before the planner sees them, except where a held change must
        # keep its place in its transaction.
        reduced = not consistent
        # The cached changelog; ``log`` is what the planner reads of it.
        if self.read.decodes:
            decoded = log = data.persist()
            # Only a batch that renames or stops a table, or has dead letters, needs its records again.
            # Bound to the source's changelog: a batch planned again from every change replaces ``decoded`` with a
            # changelog of its records, which names no inputs to read again.
            records = functools.cache(lambda first=decoded: self.read.records(first))
            raw_records = functools.cache(lambda first=decoded: CL.raw_records(
                self.read.records(first, headers=True), self.read.marks_lines))
        else:
            if consistent:
                data = data.persist()  # read again for the raw bytes of the changes it holds
            decoded = log = CL.decode(data, self.source.format, self.source.options, reduce=reduced).persist()
            records = functools.cache(lambda: data)
            raw_records = functools.cache(lambda: CL.raw_records(data, self.read.marks_lines))
        raw: DataFrame | None = None  # resolved-ts mode: the records behind the changes, also those held before
        plan: planner.BatchPlan | None = None
        try:
            if consistent:
                raw = raw_records()
                log, raw = self._release(records(), decoded, raw, batch, report)
            renames = self.sink.renames()
            plan = planner.plan(log, self.partition_ts, renames)
            if reduced and (plan.renames_tables() or plan.renamed_away):
                # A RENAME seen by one task only may fall between changes that another task reduced, and so may one
                # that an earlier batch applied.
                logger.info("batch %d of %s %s: planned again from every change", batch, self.source.name,
                            "renames a table" if plan.renames_tables() else "has changes of a table renamed before")
                every = self._unreduced(records())  # before the changelog that names the records is freed
                plan.release()
                decoded.unpersist()
                decoded = log = every.persist()
                reduced = False
                plan = planner.plan(log, self.partition_ts, renames)
            report.plan_seconds = time.monotonic() - started
            counts = plan.counts
            report.events, report.failed, report.skipped = (counts.get("event", 0), counts.get("failed", 0),
                                                           counts.get("skipped", 0))
            report.records = plan.records
            report.offsets = plan.offsets
            report.last_commit_ts = planner.commit_ts_of({f"{d}.{t}": s for (d, t), s in plan.last_seq.items()})
            versions = step_versions(plan, batch)
            stopped_now: dict[tuple[str, str], str] = {}
            tombstones: list[pa.Table] = []
            with ChangesAhead([s for run in plan.runs if f"{run.name[0]}.{run.name[1]}" not in self.stopped
                               for s in plan.steps(run) if isinstance(s, planner.RowStep)]) as changes:
                for run in plan.runs:
                    name, label = run.name, f"{run.name[0]}.{run.name[1]}"
                    if label in self.stopped:
                        stopped_now[name] = self.stopped[label]
                        continue
                    steps, commits = plan.steps(run), versions[name][run.first:run.end]
                    if self._renamed_before(name, steps[-1], commits[-1]):
                        continue  # its changes, collected ahead, are dropped when a later step's are asked for
                    try:
                        check_version_space(name, commits, batch)
                        for s, step_commits in zip(steps, commits, strict=True):
                            failpoint("before-merge")
                            self._apply_step(name, s, step_commits, report, tombstones, changes)
                            failpoint("after-merge")
                    except Exception as exc:
                        reason = table_failure(exc)
                        if reason is None:
                            raise
                        if not isinstance(exc, TableStopped):
                            logger.warning("batch %d of %s: table %s stopped: %s", batch, self.source.name, label,
                                           reason, exc_info=exc)
                        stopped_now[name] = reason
                        self.stopped[label] = reason
            report.apply_seconds = time.monotonic() - started - report.plan_seconds
            if tombstones:
                self.sink.record_tombstones(pa.concat_tables(tombstones), batch * STEPS_PER_BATCH + 998)
            failpoint("after-tombstones")
            if consistent:
                self._publish_consistency(list(dict.fromkeys(run.name for run in plan.runs)), report.consistent_ts,
                                          batch)
                failpoint("after-consistency")
            dead = plan.dead_letters
            if report.failed:
                dead = _with_headers(dead, raw_records() if raw is None else raw)
            if stopped_now:
                # Every record behind the stopped tables' changes, also those a reduction left out.
                every = self._unreduced(records()) if reduced else log
                dead = dead.unionByName(self._stopped_records(raw_records() if raw is None else raw, every,
                                                              stopped_now), allowMissingColumns=True)
            failpoint("before-dead-letters")
            report.dead_letters = self.sink.write_dead_letters(
                dead.toArrow(), batch, batch * STEPS_PER_BATCH + 999)
            failpoint("after-dead-letters")
            report.stopped = {f"{d}.{t}": why for (d, t), why in stopped_now.items()}
            report.seconds = time.monotonic() - started
            self.partition_ts = plan.partition_ts
            self.sink.record_progress({
                "batch": batch, "records": report.records, "events": report.events, "failed": report.failed,
                "skipped": report.skipped, "inserted": report.inserted, "updated": report.updated,
                "deleted": report.deleted, "duration_s": report.seconds, "dead_letters": report.dead_letters,
                "tables": {f"{d}.{t}": {"last_seq": seq, "stopped": self.stopped.get(f"{d}.{t}")}
                           for (d, t), seq in plan.last_seq.items()},
                "offsets": plan.offsets,
                "partition_ts": plan.partition_ts,
                "resolved_ts": self.resolved_ts, "consistent_ts": report.consistent_ts,
                "held_batch": batch if report.held else None, "held": report.held,
            }, batch * STEPS_PER_BATCH + STEPS_PER_BATCH - 1)
            failpoint("after-progress")
            if consistent:
                self.held_batch = batch if report.held else None
                self.consistent_ts = report.consistent_ts or 0
                self.sink.forget_held(batch)
                failpoint("after-forget-held")
            compacted = self.sink.compact_own_tables()
            if compacted:
                logger.info("batch %d of %s: compacted the lake's own tables %s", batch, self.source.name,
                            ", ".join(compacted))
            if time.monotonic() >= self.expire_due:
                expired = self.sink.expire_tombstones()
                if expired:
                    logger.info("batch %d of %s: forgot %d tombstones past their retention", batch,
                                self.source.name, expired)
                self.expire_due = time.monotonic() + self.expire_every_s
            failpoint("before-checkpoint")
        finally:
            if plan is not None:
                plan.release()
            decoded.unpersist()
            if consistent:
                records().unpersist()
        self.summary.batches.append(report)
        if self.progress:
            self.progress(report)

    def _unreduced(self, records: DataFrame) -> DataFrame:
        return CL.decode(records, self.source.format, self.source.options)

    def _release(self, records: DataFrame, log: DataFrame, raw: DataFrame, batch: int,
                 report: BatchReport) -> tuple[DataFrame, DataFrame]:
        """consistency = "resolved-ts": this batch's changes and those held before, split at the smallest
        resolved ts over the source's partitions. Changes up to it are complete transactions (a partition's
        resolved ts promises that nothing at or below it is still to come there) and go on to the planner;
        the later ones are held in the lake, with their raw record, until a batch's watermark passes them.
        Returns the changelog to plan and the raw records behind it and the held changes."""
        # Every partition the batch read has a tally (its decoding tasks count every record).
        resolved = F.when(F.col("status") == "event", F.col("commit_ts"))
        per_partition = (log.filter((F.col("status") == "tally")
                                    | ((F.col("status") == "event") & (F.col("kind") == "resolved")))
                         .groupBy("topic", "partition").agg(F.max(resolved).alias("ts")).collect())
        for r in per_partition:
            coords = f"{r['topic']}:{r['partition']}"
            self.partitions.add(coords)
            if r["ts"] is not None:
                self.resolved_ts[coords] = max(self.resolved_ts.get(coords, 0), r["ts"])
        self.partitions |= set(self.resolved_ts)
        watermark = min((self.resolved_ts.get(p, 0) for p in self.partitions), default=0)
        report.consistent_ts = max(watermark, self.consistent_ts)
        earlier = self.sink.held(self.held_batch)
        combined = log
        if earlier is not None and earlier.num_rows:
            # The batch's own session: with Spark Connect this runs in the server's foreachBatch worker.
            before = records.sparkSession.createDataFrame(CL.nested(earlier), schema=log.schema)
            combined = log.unionByName(before)
            raw = raw.unionByName(records.sparkSession.createDataFrame(_held_records(earlier), schema=raw.schema)
                                  .dropDuplicates(COORDINATES))
        waiting = F.coalesce((F.col("status") == "event") & (F.col("kind") != "resolved")
                             & (F.col("commit_ts") > F.lit(report.consistent_ts)), F.lit(False))
        # A held change keeps its column list itself: the rows that list it by id stay with this batch.
        listed = (log.filter(F.col("status") == "layout").select("layout", CL.detail("columns").alias("_listed"))
                  .dropDuplicates(["layout"]))
        later = (CL.flat_frame(combined.filter(waiting)).drop("raw_key", "raw_value")
                 .join(raw.select(*COORDINATES, *[F.col(name).alias(held) for name, held in HELD_RAW.items()]),
                       COORDINATES, "left")
                 .join(F.broadcast(listed), "layout", "left")
                 .withColumn("columns", F.coalesce("columns", "_listed"))
                 .select(*CL.HELD_ARROW.names))
        held_rows = later.toArrow()
        report.held = held_rows.num_rows
        self.sink.hold(held_rows, batch, batch * STEPS_PER_BATCH + 996)
        failpoint("after-hold")
        return combined.filter(~waiting), raw

    def _publish_consistency(self, tables: list[tuple[str, str]], commit_ts: int | None, batch: int) -> None:
        """Every table of the source now holds every change up to the watermark: say so on each."""
        self.written |= set(tables)
        if not commit_ts:
            return
        for database, table in sorted(self.written):
            if f"{database}.{table}" not in self.stopped:
                failpoint("before-consistency")
                self.sink.publish_consistency(database, table, commit_ts, batch * STEPS_PER_BATCH + 997)

    def _apply_step(self, name: tuple[str, str], step: planner.Step, versions: list[int], report: BatchReport,
                    tombstones: list[pa.Table], ahead: ChangesAhead) -> None:
        """Applies one step; ``versions``: its commits' app-transaction versions (see :func:`step_versions`)."""
        database, table = name
        if isinstance(step, planner.RowStep):
            changes = ahead.changes(step)
            unfit = sorted({name for names in changes["_cdc_unfit"].to_pylist() if names for name in names.split(",")})
            if unfit:
                types = {c.name: c.type for c in step.columns}
                raise TableStopped("values that the lake column types cannot hold in "
                                   + ", ".join(f"{n} ({types.get(n)})" for n in unfit))
            changes = changes.drop_columns(["_cdc_unfit"])
            merged = self.sink.apply_rows(database, table, changes, versions[0], step.nulls_only)
            report.inserted += merged["inserted"]
            report.updated += merged["updated"]
            report.deleted += merged["deleted"]
            rows = report.rows.setdefault(f"{database}.{table}", {"insert": 0, "update": 0, "delete": 0})
            for change, count in (("insert", merged["inserted"]), ("update", merged["updated"]),
                                  ("delete", merged["deleted"])):
                rows[change] += count
            deletes = changes.filter(pa.compute.equal(changes["_cdc_op"], "d"))
            if deletes.num_rows:
                tombstones.append(delta.tombstones(database, table, deletes["_cdc_key"], deletes["_cdc_seq"]))
            return
        # A clause that is never applied stops the table before any clause of its statement is applied.
        for action in step.actions:
            if isinstance(action, DDL.Unsupported):
                raise TableStopped(action.reason)
        for clause, (action, version) in enumerate(zip(step.actions, versions, strict=True)):
            if clause:
                failpoint("between-clauses")
            column_type = None
            if isinstance(action, DDL.AddColumn | DDL.ModifyColumn):
                column_type = arrow_type(parse_type(action.type))
            done = self.sink.apply_ddl(database, table, action, version, step.seq, column_type)
            logger.info("batch %d of %s: %s.%s: %s", report.batch, report.source, database, table, done)
            if isinstance(action, DDL.Truncate | DDL.DropTable):
                # Also where the step was committed before a crash: the batch records its tombstones as one.
                tombstones.append(delta.tombstones(database, table, [delta.TABLE_TOMBSTONE], [step.seq]))

    def _renamed_before(self, name: tuple[str, str], last: planner.Step, versions: list[int]) -> bool:
        """Whether a run that ends with a RENAME TABLE was applied, to the rename, before a crash: its steps would
        make the table anew under its old name."""
        rename = last.renames() if isinstance(last, planner.DdlStep) else None
        return rename is not None and self.sink.renamed(*name, rename, versions[last.actions.index(rename)], last.seq)

    def _stopped_records(self, records: DataFrame, log: DataFrame,
                         stopped: dict[tuple[str, str], str]) -> DataFrame:
        """The raw records behind a stopped table's events, as dead letters with the reason: also a DDL statement's
        that changes the table while its message names another (the new name of a RENAME, in Canal and TiCDC)."""
        def stop_reason(name: tuple[str, str]) -> str:
            return f"table {name[0]}.{name[1]} stopped: {stopped[name]}"

        reason = planner.case_sql([(planner.of_table(*name), planner.sql_string(stop_reason(name)))
                                   for name in stopped], "CAST(NULL AS STRING)")
        events = log.filter(F.col("status") == "event")
        statements = [(r["topic"], r["partition"], r["offset"], stop_reason(changed))
                      for r in events.filter(F.col("kind") == "ddl").select(
                          "topic", "partition", "offset", "database", "table", CL.detail("ddl")).collect()
                      for changed, _ in DDL.by_table(r["ddl"] or "", r["database"] or "", r["table"] or "")
                      if changed in stopped]
        coords = events.withColumn("reason", reason).filter(F.col("reason").isNotNull()).select(
            "topic", "partition", "offset", "reason")
        if statements:
            coords = coords.unionByName(log.sparkSession.createDataFrame(statements, coords.schema))
        coords = coords.groupBy("topic", "partition", "offset").agg(F.first("reason").alias("reason"))
        return (records.join(coords, ["topic", "partition", "offset"])
                .select("topic", "partition", "offset", "key", "value", F.lit(self.source.format).alias("format"),
                        "reason", "headers", "timestamp", "timestamp_type"))


COORDINATES = ["topic", "partition", "offset"]
# A record's columns (as CL.raw_records gives them) and the held changes' columns that keep them.
HELD_RAW = {"key": "raw_key", "value": "raw_value", "headers": "raw_headers", "timestamp": "raw_timestamp",
            "timestamp_type": "raw_timestamp_type"}


def _with_headers(dead: DataFrame, raw: DataFrame) -> DataFrame:
    """Dead letters of the decoder with their records' headers, timestamp and its type (``raw``: the records, as
    CL.raw_records gives them): the changelog carries only their keys and values."""
    meta = (raw.drop("key", "value").join(dead.select(*COORDINATES).distinct(), COORDINATES, "left_semi")
            .dropDuplicates(COORDINATES))
    return dead.join(meta, COORDINATES, "left")


def _held_records(held: pa.Table) -> pa.Table:
    """The records behind held changes, as CL.raw_records gives them (a snapshot held by an earlier cdclake lacks
    their headers and timestamps)."""
    columns = [held[name] for name in COORDINATES] + [
        held[kept].cast(CL.HELD_ARROW.field(kept).type) if kept in held.column_names
        else pa.nulls(held.num_rows, CL.HELD_ARROW.field(kept).type) for kept in HELD_RAW.values()]
    return pa.table(columns, names=[*COORDINATES, *HELD_RAW])


def step_versions(plan: planner.BatchPlan, batch: int) -> dict[planner.TableName, list[list[int]]]:
    """The app-transaction versions of a batch's steps, by table: one per commit of a step (a row step makes one,
    a DDL step one per action). Each table's Delta log holds its own markers, so each table numbers its steps
    from the batch's first version on (in the order of the plan's runs), and a batch may change any number of tables;
    a rename's target goes on from the version of the commit that marked the source before its log moved to it,
    which that log carries."""
    first = batch * STEPS_PER_BATCH
    used: dict[planner.TableName, int] = {}
    versions: dict[planner.TableName, list[list[int]]] = {name: [] for name in plan.tables}
    for run in plan.runs:
        name = run.name
        for step in plan.steps(run):
            actions = step.actions if isinstance(step, planner.DdlStep) else [None]
            start = used.get(name, 0)
            versions[name].append(list(range(first + start + 1, first + start + 1 + len(actions))))
            for count, action in enumerate(actions, start + 1):
                if isinstance(action, DDL.RenameTable):
                    target = (action.database or name[0], action.table)
                    used[target] = max(used.get(target, 0), count)
            used[name] = max(used.get(name, 0), start + len(actions))
    return versions


def check_version_space(name: planner.TableName, commits: list[list[int]], batch: int) -> None:
    """Stops a table whose commits in this batch (see :func:`step_versions`) outnumber the versions a batch has for
    one table: the next batch's would take them, and skip its own steps on the table as committed."""
    made = max((version for step in commits for version in step), default=0) - batch * STEPS_PER_BATCH
    if made > delta.TABLE_STEPS:
        raise TableStopped(f"batch {batch} makes {made} commits to table {name[0]}.{name[1]} (its segments and DDL "
                           f"clauses), more than the {delta.TABLE_STEPS} a batch can number: lower the source's "
                           f"max_records_per_batch")


# Failures of the machine or the whole lake that a table's step may meet: they fail the batch (the next run applies
# it again) rather than stop the table. Spark's own failures come back as text.
_NOT_THE_TABLE = re.compile(r"OutOfMemoryError|SparkContext (?:was )?shut down|Py4JNetworkError|Connection refused"
                            r"|Answer from Java side is empty")


def table_failure(failure: Exception) -> str | None:
    """The reason to stop a table whose step raised ``failure``; None where the failure is not the table's and
    fails the batch. A table's own are its change that cannot be applied safely (:class:`TableStopped`), a type
    the lake cannot make (:class:`~cdclake.model.types.InvalidType`), and whatever else its step raised: a schema that
    delta-rs refuses, a value that does not convert, an unexpected error of the writer. Not the table's: a
    stop the run asked for (:class:`StopRequested`; interrupts and exits are not caught at all), an error that
    stops a run by design (:func:`stopping_error`: a registry down, corruption under corruption-handling=error),
    memory running out, the lake's storage failing (an ``OSError``, a file the machine refused to write), the
    lake's own tables failing (:class:`~cdclake.lake.delta.LakeError`) and Spark or its JVM going away."""
    if isinstance(failure, TableStopped | InvalidType):
        return str(failure)
    if isinstance(failure, StopRequested | MemoryError | OSError | delta.LakeError):
        return None
    text = str(failure)
    if file_system_problem(failure) is not None or stopping_error(failure) is not None or _NOT_THE_TABLE.search(text):
        return None
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"{type(failure).__name__}: {first[:500]}"


@contextlib.contextmanager
def one_batch_at_a_time(lake: str) -> Iterator[None]:
    """Holds the lake while one batch is applied. The sources of a following pipeline run their queries at once,
    and two sources may write the same table: a batch that read the tombstones before another batch of the same
    keys recorded its own would bring deleted rows back, and both append to the lake's own tables. One batch at a
    time, each sees what the batches before it wrote, as the sources of a run without ``follow`` do one after
    another. A lock file, not a thread lock: with Spark Connect each query applies its batches in a process of its
    own on the server; and two runs on one lake on this machine take turns as well."""
    name = lake if "://" in lake else os.path.abspath(lake)
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    path = private_directory(Path(tempfile.gettempdir())) / f"lake-{digest}.lock"
    with open(path, "a+") as held:
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another batch holds it: say whose, as the wait may be long
            held.seek(0)
            holder = held.read().strip() or "another run"
            logger.warning("waiting for the run holding lake %s (%s) to finish its batch", name, holder)
            since = time.monotonic()
            fcntl.flock(held, fcntl.LOCK_EX)
            logger.warning("lake %s: waited %.1fs for the run holding it", name, time.monotonic() - since)
        held.truncate(0)
        held.write(f"pid {os.getpid()}, host {socket.gethostname()}")
        held.flush()
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)


def _base_version(checkpoint: str, sink: Sink) -> int:
    """The lake version of the checkpoint's batch 0. Batch ids restart at 0 with a new checkpoint (or one whose Spark
    part logged no batch: deleted, or killed before its first); lake versions must only grow, so such a checkpoint
    starts above every batch that committed anything to the lake, also one a crash cut short (see
    :meth:`~cdclake.lake.delta.DeltaSink.last_marked_batch`)."""
    marker = os.path.join(checkpoint, "cdclake.json")
    if os.path.exists(marker) and not _new_checkpoint(checkpoint):
        with open(marker) as handle:
            return int(json.load(handle)["base_version"])
    last = sink.last_marked_batch()
    base = 0 if last is None else last + 1
    os.makedirs(checkpoint, exist_ok=True)
    with open(marker, "w") as handle:
        json.dump({"base_version": base}, handle)
    return base


def _new_checkpoint(checkpoint: str) -> bool:
    """Whether Spark's checkpoint of a source has logged no batch: its query starts reading from the input's start."""
    offsets = os.path.join(checkpoint, "spark", "offsets")
    return not os.path.isdir(offsets) or not any(name.isdigit() for name in os.listdir(offsets))


def run(config: PipelineConfig, progress: Progress | None = None, spark: SparkSession | None = None,
        say: Callable[[str], None] = logger.warning) -> RunSummary:
    """Run every source of the pipeline until caught up (or forever with ``follow``). ``say`` tells the user what
    the run is waiting for."""
    refused = lakepaths.refuse_foreign(config.lake)  # tables named as an earlier cdclake did: never re-mapped
    if refused:
        raise ValueError(refused)
    config.make_directories()
    if "://" not in config.lake:  # what makes a directory a lake for `status` and the other commands
        os.makedirs(os.path.join(config.lake, "_cdclake"), exist_ok=True)
    _check_kafka_sources(config)
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
        with _stop_on_signal() as stop, metrics.serving(config, progress) as observed:
            return _run_sources(spark, config, observed, stop)
    except BaseException:
        if loading is not None:
            spark.sparkContext.cancelJobGroup(LOADING_GROUP)
        raise
    finally:
        # A run that ends well waits for the loading rather than cancel it: a cancelled task closed its Python
        # worker's socket mid-write, and the worker printed a BrokenPipeError traceback after the run's summary (a
        # run of an empty input ends in about 2 s, before the loading does, which takes about a second).
        if loading is not None:
            loading.join()


def _start_spark(config: PipelineConfig) -> SparkSession:
    """The run's Spark session. A signal meanwhile ends the run at once (KeyboardInterrupt), whatever py4j made of
    the JVM's start being cut short."""
    with _stop_on_signal() as stop, _before_batches():
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
    another with a core to spare. The first batch's tasks then find their workers ready: a one-off run of the
    benchmark's 1,009,559 records, four alternating runs each, 17.7-18.9 s instead of 19.1-19.6 s. A cluster's
    executors start theirs as they please."""
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
        batches = self.reports.reports if self.reports else self.applier.summary.batches
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
    partitions = _source_partitions(source) if source.consistency == "resolved-ts" else None
    # With Spark Connect the batches run in the server's foreachBatch worker: their reports come back
    # through the lake's progress table instead.
    new = _new_checkpoint(checkpoint)
    base = _base_version(checkpoint, sink)
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


@contextlib.contextmanager
def _stop_on_signal() -> Iterator[threading.Event]:
    """SIGINT (Ctrl-C) and SIGTERM set the event, which ends the run after the batches being applied, with its
    summary; a second signal acts as it would have without the run (Spark's SIGINT handler cancels the jobs and
    raises KeyboardInterrupt). A signal within :data:`SAME_SIGNAL_S` of the first is the same one delivered again:
    ``timeout`` and ``kill -- -PGID`` send it to the run and to its process group, which holds the run too.
    Before, Ctrl-C raised KeyboardInterrupt inside whichever call to the JVM was under way, which printed py4j's
    tracebacks and left the batch half applied for the next run to finish. Handlers can only be set on the main
    thread: a run on another thread is stopped by its caller."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    first: list[float] = []  # when the first signal came

    def request_stop(number: int, _frame: object) -> None:
        if first:
            if time.monotonic() - first[0] < SAME_SIGNAL_S:
                return
            for each, handler in previous.items():
                signal.signal(each, handler)
            signal.raise_signal(number)  # as it would have been without the run
            return
        first.append(time.monotonic())
        stop.set()
        if _no_batch_yet.is_set():  # no batch to finish: a broker that is down would be waited for minutes
            raise KeyboardInterrupt
        logger.warning("stopping after the batches being applied (%s); again to stop at once",
                       signal.Signals(number).name)

    for number in previous:
        signal.signal(number, request_stop)
    try:
        yield stop
    finally:
        # Right after a signal, the same one delivered again may still come: ``request_stop`` stays to swallow it
        # and hands over to the previous handler at the next signal after that (else a run that ends within the
        # window would die of its own stop signal).
        if not first or time.monotonic() - first[0] >= SAME_SIGNAL_S:
            for number, handler in previous.items():
                if signal.getsignal(number) is request_stop:  # not one set meanwhile (Spark's, as its session starts)
                    signal.signal(number, handler)


# How long after a signal the same signal again counts as the first one delivered twice (see _stop_on_signal).
SAME_SIGNAL_S = 1.0


def _source_partitions(source: SourceConfig) -> list[tuple[str, int]]:
    """The partitions a resolved-ts watermark must hear from: all that exist at start (more join when seen)."""
    if source.kafka is not None:
        with kafka.KafkaClient(source.client_settings()) as client:
            return client.partitions(kafka.Subscription.of(source.topics, source.topic_pattern))
    return files.partitions(source.input or "")


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


# How the JVM and delta-rs say the machine refused to write a file: the user can fix that, and a traceback does not
# help with it. Each names the path before the reason ("PATH (Read-only file system)", "directory: PATH\nError: Os
# { …, message: \"Read-only file system\" }").
_REFUSED = re.compile("Read-only file system|Permission denied|No space left on device|Disk quota exceeded")
_PATH = re.compile(r"[\w.~-]*/[\w./~-]+")


def file_system_problem(failure: BaseException) -> str | None:
    """"PATH: REASON" when a run failed because the machine refused to write a file of the lake or the checkpoint;
    None for any other failure."""
    text = str(failure)
    refused = _REFUSED.search(text)
    if refused is None:
        return None
    paths = _PATH.findall(text, 0, refused.start())
    return f"{paths[-1] if paths else 'a file'}: {refused[0]}"


# Errors that stop a run by design (a registry down, corruption under corruption-handling=error, a broker gone for
# good), raised in Spark's Python processes: Spark hands them back inside its own exception, as traceback text.
_STOPPING = re.compile(r"^(?:[\w.]+\.)?(RegistryError|CorruptionError|KafkaUnavailable|DataLoss|KafkaSourceError): "
                       r"(.+)$", re.MULTILINE)


def stopping_error(failure: BaseException) -> tuple[str, str] | None:
    """The class name and message of the error that stopped a run by design, found within Spark's exception; None
    for any other failure."""
    found = _STOPPING.search(str(failure))
    return None if found is None else (found[1], found[2].strip())


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


# Set while a run starts Spark or asks Kafka where to start, before any batch: a signal then ends the run at once (see
# _stop_on_signal).
_no_batch_yet = threading.Event()


@contextlib.contextmanager
def _before_batches() -> Iterator[None]:
    _no_batch_yet.set()
    try:
        yield
    finally:
        _no_batch_yet.clear()


def source_read(spark: SparkSession, source: SourceConfig, config: PipelineConfig, sink: Sink,
                new_checkpoint: bool = False) -> SourceRead:
    """How the source is read. A Kafka source starts where the lake says it stopped (see :func:`_kafka_read`). A
    files source with a new checkpoint reads its input from the start, and skips the records the lake's committed
    batches read (their progress rows' offsets, per topic and partition): a changed batch size or input, or a
    checkpoint deleted after a crash, then neither loses nor repeats a change."""
    if source.kafka is not None:
        with _before_batches():
            return _kafka_read(source, config, sink)
    if source.input is None:
        raise ValueError(f"source {source.name}: neither input nor kafka")
    # A task per core, even in a batch that holds one file: each task reduces the keys it read before the planner
    # sees them, so more, smaller tasks would hand the planner more changes of the same keys (on 2 cores, 4 tasks
    # of 250,000 records left it 341,000 changes of 100,000 keys to reduce, 2 tasks 277,000).
    tasks = str(task_slots(spark))
    # No target: without follow the query runs with Trigger.AvailableNow and stops by itself (see _start_query).
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


def _check_kafka_sources(config: PipelineConfig) -> None:
    """What :func:`_kafka_partitions` finds wrong with a run's Kafka sources, before Spark starts: a misspelt topic
    is then said in a second rather than after Spark's start, and an unreachable broker is waited for without a
    JVM holding memory; a signal meanwhile ends the run at once. (A following run waits for its topics.)"""
    if config.follow:
        return
    with _stop_on_signal(), _before_batches():
        for source in config.sources:
            if source.kafka is not None:
                with kafka.KafkaClient(source.client_settings()) as client:
                    _kafka_partitions(client, source, config)


def _check_registries(config: PipelineConfig) -> None:
    """Each source's schema registry reachable over HTTP, before Spark starts, as the Kafka sources are: a registry
    that is down is then one line in a second, not the first batch's failure after Spark's start, with its noise."""
    from cdclake.formats.avro.registry.http import HttpRegistry

    for source in config.sources:
        registry = str(source.options.get("registry") or "")
        if registry.lower().startswith(("http://", "https://")):
            HttpRegistry(registry).check()


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

"""Batch application: one micro-batch of one source's records applied to the lake, the body of ``foreachBatch``.

Each batch is applied exactly once: every Delta commit carries the batch's app-transaction marker (see
:func:`step_versions`), so a batch replayed after a crash skips what it had already committed. One table's failure
stops that table and the batch goes on (see :func:`table_failure`); records that cannot be decoded, and those of a
stopped table, become dead letters; with ``consistency = "resolved-ts"`` changes past the watermark are held.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cdclake.errors import LakeError, StopRequested, TableStopped
from cdclake.lake import tombstones as lake_tombstones
from cdclake.lake.layout import STEPS_PER_BATCH, TABLE_STEPS, TABLE_TOMBSTONE
from cdclake.lake.lock import one_batch_at_a_time
from cdclake.lake.sink import Sink
from cdclake.model import ddl as DDL
from cdclake.model.types import InvalidType, parse_type
from cdclake.pipeline.failures import file_system_problem, stopping_error
from cdclake.spark import changelog as CL
from cdclake.spark import planner
from cdclake.spark.lake_types import arrow_type
from cdclake.support.failpoints import failpoint

if TYPE_CHECKING:
    from cdclake.pipeline.positions import SourceRead

logger = logging.getLogger(__name__)


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


Progress = Callable[[BatchReport], None]

# How often a running pipeline forgets the tombstones past their retention (at most; and when it stops).
TOMBSTONE_EXPIRY_S = 3600.0


def _collect(step: planner.RowStep) -> pa.Table:
    """A step's changes at the driver; on a collecting thread, which thereby also makes them (see RowStep)."""
    return step.changes.toArrow()


class ChangesAhead:
    """The row steps' changes, collected to the driver (a small Spark job each) on threads, a few steps ahead
    of the step being applied: a batch of many tables runs these jobs side by side and alongside the merges
    instead of one after another (figures: benchmarks/results.md, "Pipeline tuning"). At most ``ahead`` steps'
    changes wait in memory besides the one being applied."""

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
        self.batches: list[BatchReport] = []  # the reports of the batches this applier applied
        # Set when this query is to end, or the whole run (``run_stopping``, set by a signal): a batch that starts
        # after either is left to the next run (see runner._stop_between_batches).
        self.stopping = threading.Event()
        self.run_stopping = run_stopping
        self.busy = threading.Lock()  # held while a batch is applied

    def __getstate__(self) -> dict[str, Any]:
        # With Spark Connect the applier is pickled to the server, which makes its own
        # (see runner._stop_between_batches).
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
        self.batches.append(report)
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
                tombstones.append(lake_tombstones.tombstones(database, table, deletes["_cdc_key"], deletes["_cdc_seq"]))
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
                tombstones.append(lake_tombstones.tombstones(database, table, [TABLE_TOMBSTONE], [step.seq]))

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
    if made > TABLE_STEPS:
        raise TableStopped(f"batch {batch} makes {made} commits to table {name[0]}.{name[1]} (its segments and DDL "
                           f"clauses), more than the {TABLE_STEPS} a batch can number: lower the source's "
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
    lake's own tables failing (:class:`~cdclake.lake.LakeError`) and Spark or its JVM going away."""
    if isinstance(failure, TableStopped | InvalidType):
        return str(failure)
    if isinstance(failure, StopRequested | MemoryError | OSError | LakeError):
        return None
    text = str(failure)
    if file_system_problem(failure) is not None or stopping_error(failure) is not None or _NOT_THE_TABLE.search(text):
        return None
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"{type(failure).__name__}: {first[:500]}"

"""Delta tables written with delta-rs (``deltalake``), exactly once.

Lake layout (a contract):

- ``<lake>/<database>/<table>``: the current state of each source table — typed columns plus the
  bookkeeping columns ``_cdc_key`` (the row's key as canonical JSON), ``_cdc_seq`` (the source sequence
  of the change that wrote it), ``_cdc_commit_ts``, ``_cdc_position``, ``_cdc_ts_ms``.
- ``<lake>/_cdclake/dead_letters``: every record that could not be applied, with raw key/value, headers (in
  order, duplicates kept) and timestamp, Kafka coordinates, format and reason.
- ``<lake>/_cdclake/tombstones``: the keys deleted recently and the sequence of their delete, so that a
  late, older insert or update cannot bring a row back; kept for ``tombstone_retention_hours``.
- ``<lake>/_cdclake/progress``: one row per applied batch (counts, offsets, last sequence per table,
  resolved ts per partition and the commit ts the tables are consistent up to); every :data:`SNAPSHOT_EVERY`
  batches a row also states the pipeline's whole state.
- ``<lake>/_cdclake/renames``: every RENAME TABLE applied, with its version and sequence: a batch replayed after a
  crash skips a renamed table's steps up to its rename, which would make the table anew under its old name, and
  changes of the old name older than the rename that arrive later go to the new table.
- ``<lake>/_cdclake/held``: with ``consistency = "resolved-ts"``, the decoded changes a batch held back
  because their transaction may not be complete yet (one snapshot per batch; the progress row names the
  snapshot the next batch starts from).

Every commit carries a Delta app-transaction marker (app id ``cdclake:<pipeline>``, version = batch
version × 1000 + the step's number on that table, 1 to :data:`TABLE_STEPS`; the lake's own tables take 996-999),
so a batch replayed after a crash skips the steps it had already committed.
"""

from __future__ import annotations

import datetime as dt
import json
import operator
import os
import shutil
import uuid
from collections.abc import Callable, Iterator, Sequence
from functools import partial, reduce
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Field, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from cdclake.errors import LakeError, TableStopped
from cdclake.lake import paths as lakepaths
from cdclake.model import ddl as DDL
from cdclake.support.failpoints import failpoint

STEPS_PER_BATCH = 1000
# The versions 1-995 of a batch number its commits to one table (see step_versions): each table's Delta
# log holds its own markers, so the count of tables a batch changes is not bounded by them.
TABLE_STEPS = 995
WRITE_ATTEMPTS = 3
TABLE_TOMBSTONE = "*"  # the key of a tombstone that buries a whole table (TRUNCATE, DROP TABLE)
SEQ_TS_CHARS = 20  # a _cdc_seq starts with its commit ts, 20 digits (cdclake.spark.planner.SEQ)
BOOKKEEPING = pa.schema([
    ("_cdc_key", pa.string()), ("_cdc_seq", pa.string()), ("_cdc_commit_ts", pa.int64()),
    ("_cdc_position", pa.string()), ("_cdc_ts_ms", pa.int64()),
])
DEAD_LETTERS = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()), ("key", pa.binary()),
    ("value", pa.binary()), ("format", pa.string()), ("reason", pa.string()), ("pipeline", pa.string()),
    ("batch", pa.int64()), ("recorded_at", pa.timestamp("us", tz="UTC")),
    # Added after the columns above: a lake of an earlier cdclake gains them at its next dead letter (null before).
    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ("timestamp", pa.timestamp("us", tz="UTC")), ("timestamp_type", pa.int32()),
])
TOMBSTONES = pa.schema([
    ("database", pa.string()), ("table", pa.string()), ("_cdc_key", pa.string()), ("_cdc_seq", pa.string()),
    ("deleted_at", pa.timestamp("us", tz="UTC")),
])
PROGRESS = pa.schema([
    ("pipeline", pa.string()), ("batch", pa.int64()), ("finished_at", pa.timestamp("us", tz="UTC")),
    ("records", pa.int64()), ("events", pa.int64()), ("failed", pa.int64()), ("skipped", pa.int64()),
    ("inserted", pa.int64()), ("updated", pa.int64()), ("deleted", pa.int64()),
    ("tables", pa.string()), ("offsets", pa.string()), ("duration_s", pa.float64()),
    ("partition_ts", pa.string()), ("resolved_ts", pa.string()), ("consistent_ts", pa.int64()),
    ("held_batch", pa.int64()), ("held", pa.int64()), ("dead_letters", pa.int64()), ("state", pa.string()),
])
# Every this many batches (and at a pipeline's first batch, also its first after an upgrade), a progress row also
# states the pipeline's whole state (column ``state``): each table's last sequence, stop and batch time, and the
# highest offset read of each partition. A run's start and ``cdclake status`` read from the latest such row on,
# where they read every row before: after 1,000,000 batches, a start spent 34 s and 4.5 GiB on it (2026-12-06).
SNAPSHOT_EVERY = 1000
RENAMES = pa.schema([
    ("pipeline", pa.string()), ("version", pa.int64()), ("database", pa.string()), ("table", pa.string()),
    ("seq", pa.string()), ("new_database", pa.string()), ("new_table", pa.string()),
    ("renamed_at", pa.timestamp("us", tz="UTC")),
])

COLUMN_CHANGE = "cdclake.columnChange"  # commit metadata: the DROP or RENAME COLUMN a commit applied, and its seq
CONSISTENT_UP_TO = "cdclake.consistentUpToCommitTs"  # table property: every change up to it is applied
# table property of a rename's target that a partition read ahead had made: the renamed table merged into it
RENAMED_FROM = "cdclake.renamedFrom"
RENAMED_TO = "cdclake.renamedTo"  # table property: the name a RENAME TABLE gave the table (its commit: the rename's)
KAFKA_STARTS = pa.schema([("pipeline", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
                          ("offset", pa.int64()), ("pinned_at", pa.timestamp("us", tz="UTC"))])
INTERNAL_TABLES = ("dead_letters", "tombstones", "progress", "held", "kafka_starts", "renames")
# A running pipeline compacts a table of its own once it holds this many files (see DeltaSink.compact_own_tables).
COMPACT_AT_FILES = 50


class Rename(NamedTuple):
    """A RENAME TABLE the lake applied: the table's changes older than ``seq`` are the new table's."""
    database: str
    table: str
    seq: str
    new_database: str
    new_table: str


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def tombstones(database: str, table: str, keys: pa.Array | list[str], seqs: pa.Array | list[str]) -> pa.Table:
    """Tombstone rows for :meth:`DeltaSink.record_tombstones`: deleted keys of one table and their deletes'
    sequences; the key :data:`TABLE_TOMBSTONE` buries the whole table as of its sequence (TRUNCATE, DROP TABLE)."""
    count = len(keys)
    return pa.table({"database": [database] * count, "table": [table] * count, "_cdc_key": keys, "_cdc_seq": seqs,
                     "deleted_at": pa.array([_now()] * count, TOMBSTONES.field("deleted_at").type)}).cast(TOMBSTONES)


def quote(name: str) -> str:
    """A column name in a delta-rs (DataFusion SQL) expression."""
    return '"' + name.replace('"', '""') + '"'


def sql_literal(text: str) -> str:
    """A string literal in a delta-rs (DataFusion SQL) predicate: the one way a value reaches one. delta-rs parses
    predicates with sqlparser's generic dialect, where a backslash is an ordinary character and a quote is doubled;
    a value with a character UTF-8 cannot hold (a lone surrogate) is refused rather than altered."""
    text.encode("utf-8")
    return "'" + text.replace("'", "''") + "'"


class DeltaSink:  # implements sinks.base.Sink
    def __init__(self, lake: str, pipeline: str, storage_options: dict[str, str] | None = None,
                 tombstone_retention_hours: float = 168.0) -> None:
        self.lake = lake.rstrip("/")
        self.pipeline = pipeline
        self.app_id = f"cdclake:{pipeline}"
        self.storage_options = storage_options
        self.tombstone_retention = dt.timedelta(hours=tombstone_retention_hours)
        self._kept_tombstones: DeltaTable | None = None
        self._snapshot_due: int | None = None  # the batch whose progress row states the state next (None: unknown)
        self._journal: DeltaTable | None = None  # of renames, kept open as the tombstones are
        self._journaled: tuple[int, list[Rename]] = (-1, [])

    # -- locations -------------------------------------------------------------------------------
    def table_uri(self, database: str, table: str) -> str:
        """Where the source table is kept: its names as :mod:`cdclake.lake.paths` maps them, never as they are."""
        return lakepaths.table_path(self.lake, database, table)

    def internal_uri(self, name: str) -> str:
        return f"{self.lake}/_cdclake/{name}"

    def _open(self, uri: str) -> DeltaTable | None:
        try:
            return DeltaTable(uri, storage_options=self.storage_options)
        except TableNotFoundError:
            return None

    def _tombstones(self) -> DeltaTable | None:
        """The tombstones table, kept open and brought up to date: every table's MERGE reads it, and an opening
        reads its log since the last checkpoint (a commit for each batch with deletes, up to a hundred), where
        catching up reads only the commits since the last time."""
        if self._kept_tombstones is None:
            self._kept_tombstones = self._open(self.internal_uri("tombstones"))
        else:
            self._kept_tombstones.update_incremental()
        return self._kept_tombstones

    # -- exactly once ------------------------------------------------------------------------------
    def _commit(self, version: int, column_change: dict[str, Any] | None = None) -> CommitProperties:
        """The app-transaction marker; with a DROP or RENAME COLUMN the commit names it (see _older_rows_columns)."""
        return CommitProperties(app_transactions=[Transaction(self.app_id, version)],
                                custom_metadata=None if column_change is None else {
                                    COLUMN_CHANGE: json.dumps(column_change)})

    def done(self, uri: str, version: int) -> bool:
        """Whether the step with this version was already committed to the table at ``uri``."""
        return self._committed(self._open(uri), version)

    def _committed(self, table: DeltaTable | None, version: int) -> bool:
        committed = None if table is None else table.transaction_version(self.app_id)
        return committed is not None and committed >= version

    def _append_target(self, uri: str, version: int) -> DeltaTable | str | None:
        """Where to append the step with this version: the table, opened once for the replay check and the
        write (its uri where it does not exist yet); None where the step is committed already."""
        table = self._open(uri)
        if self._committed(table, version):
            return None
        return uri if table is None else table

    def _rewrite(self, table: DeltaTable, write: Callable[[DeltaTable], dict[str, Any]]) -> dict[str, Any]:
        """A MERGE or DELETE on the table, run again on its new version when another writer committed first
        (``cdclake maintain`` compacting beside a running pipeline): what each of them does depends only on the
        rows and their sequences, which compaction keeps."""
        for _ in range(WRITE_ATTEMPTS - 1):
            try:
                return write(table)
            except CommitFailedError:
                table = DeltaTable(table.table_uri, storage_options=self.storage_options)
        return write(table)

    def last_batch(self) -> int | None:
        table = self._open(self.internal_uri("progress"))
        if table is None:
            return None
        committed = table.transaction_version(self.app_id)
        return None if committed is None else committed // STEPS_PER_BATCH

    def last_marked_batch(self) -> int | None:
        """The last batch that committed anything to the lake: its progress row or, where a crash cut it short, a
        step on any table or on the lake's own tables (their app-transaction markers). A new checkpoint numbers its
        batches above it: reusing the number of a half-applied batch for other records would skip them on the
        tables it had marked. Opens every table of the lake; of a lake on object storage, only the lake's own."""
        uris = [self.internal_uri(name) for name in INTERNAL_TABLES]
        uris += [self.table_uri(database, table) for database, table in self.tables()]
        marks = [version for uri in uris if (table := self._open(uri)) is not None
                 and (version := table.transaction_version(self.app_id)) is not None]
        return max(marks) // STEPS_PER_BATCH if marks else None

    def history(self) -> History:
        """Where this pipeline stands, by its progress rows (see :func:`read_history`)."""
        table = self._open(self.internal_uri("progress"))
        return NO_HISTORY if table is None else read_history(table, self.pipeline)

    def progress_since(self, batch: int) -> list[dict[str, Any]]:
        """This pipeline's progress rows from ``batch`` on, in batch order."""
        table = self._open(self.internal_uri("progress"))
        if table is None:
            return []
        rows = read_dataset(table, None, (pc.field("pipeline") == self.pipeline) & (pc.field("batch") >= batch))
        return rows.sort_by("batch").to_pylist()

    def applied_offsets(self) -> dict[str, dict[int, int]]:
        """The next Kafka offset to read per topic and partition by the lake's own record: one past the highest
        offset of every batch this pipeline has committed (a batch's progress row names what it read); for a
        partition no batch has read yet, the start an earlier run pinned (:meth:`pin_kafka_starts`)."""
        seen: dict[str, dict[int, int]] = {}
        starts = self._open(self.internal_uri("kafka_starts"))
        if starts is not None:
            pinned = starts.to_pyarrow_table(columns=["topic", "partition", "offset"],
                                             filters=[("pipeline", "=", self.pipeline)]).to_pylist()
            for row in sorted(pinned, key=lambda r: -r["offset"]):  # two runs pinned at once: the earlier offset
                seen.setdefault(row["topic"], {})[row["partition"]] = row["offset"]
        for where, offset in self.history().offsets.items():
            topic, _, partition = where.rpartition(":")
            if partition.isdigit():
                seen.setdefault(topic, {})[int(partition)] = offset + 1
        return seen

    def pin_kafka_starts(self, offsets: dict[str, dict[int, int]]) -> None:
        """Records where this pipeline starts reading partitions that no batch has read, when that start depends on
        the time it was asked (``latest``): until a batch reads them, every run would otherwise start at a newer
        end, and the messages that arrived between two runs would never be read."""
        rows = [(topic, partition, offset) for topic, parts in sorted(offsets.items())
                for partition, offset in sorted(parts.items())]
        if not rows:
            return
        table = pa.Table.from_pydict({
            "pipeline": [self.pipeline] * len(rows), "topic": [r[0] for r in rows],
            "partition": [r[1] for r in rows], "offset": [r[2] for r in rows], "pinned_at": [_now()] * len(rows),
        }, schema=KAFKA_STARTS)
        write_deltalake(self.internal_uri("kafka_starts"), table, mode="append", storage_options=self.storage_options)

    # -- rows ------------------------------------------------------------------------------------------
    def apply_rows(self, database: str, table: str, changes: pa.Table, version: int,
                   nulls_only: set[str] | frozenset[str] = frozenset()) -> dict[str, int]:
        """MERGE one table's net changes: a change applies only when its sequence is newer than the
        row's, and never over a newer delete (tombstone)."""
        uri = self.table_uri(database, table)
        if changes.num_rows == 0:
            return {"inserted": 0, "updated": 0, "deleted": 0}
        # Opened once for all the checks below: opening reads the table's log since its last checkpoint, which
        # a table written every batch makes up to a hundred commits long (60 commits: 45 ms an opening).
        target = self._open(uri)
        if self._committed(target, version) or (target is None and pc.all(pc.equal(changes["_cdc_op"], "d")).as_py()):
            # Deletes alone make no table: their images state no value, so a table made from them would take the
            # types their messages state for NULL, which may be stand-ins (DTS cannot tell a NULL BLOB from TEXT).
            return {"inserted": 0, "updated": 0, "deleted": 0}
        return self._merge(database, table, target, changes, self._commit(version), nulls_only)

    def _merge(self, database: str, table: str, target: DeltaTable | None, changes: pa.Table,
               commit: CommitProperties | None, nulls_only: set[str] | frozenset[str] = frozenset()) -> dict[str, int]:
        uri = self.table_uri(database, table)
        changes = self._drop_buried(database, table, changes)
        if target is not None:
            changes = self._older_rows_columns(target, changes)
        changes = self._keep_lake_types(target, changes, nulls_only)
        data_columns = [n for n in changes.column_names if n not in ("_cdc_op",)]
        target = self._ensure_table(uri, changes.select(data_columns).schema, target,
                                    lakepaths.stated_name(database, table))
        metrics = self._rewrite(target, lambda target: (
            target.merge(changes, predicate="t._cdc_key = s._cdc_key", source_alias="s", target_alias="t",
                         commit_properties=commit, merge_schema=False)
            .when_matched_update(updates={quote(n): f"s.{quote(n)}" for n in data_columns},
                                 predicate="s._cdc_op <> 'd' AND s._cdc_seq > t._cdc_seq")
            .when_matched_delete(predicate="s._cdc_op = 'd' AND s._cdc_seq > t._cdc_seq")
            .when_not_matched_insert(updates={quote(n): f"s.{quote(n)}" for n in data_columns},
                                     predicate="s._cdc_op <> 'd'")
            .execute()))
        return {"inserted": metrics.get("num_target_rows_inserted", 0),
                "updated": metrics.get("num_target_rows_updated", 0),
                "deleted": metrics.get("num_target_rows_deleted", 0)}

    def _keep_lake_types(self, table: DeltaTable | None, changes: pa.Table,
                         nulls_only: set[str] | frozenset[str]) -> pa.Table:
        """Keep the lake column's type where it already holds the batch's values: all-NULL columns (their
        message may state a stand-in type for NULL) and columns whose type this batch inferred narrower
        (a DECIMAL without stated precision whose values happen to be short)."""
        if table is None:
            return changes
        existing = pa.schema(table.schema().to_arrow())
        for index, field in enumerate(changes.schema):
            if field.name not in existing.names or field.name.startswith("_cdc_"):
                continue
            lake_type = existing.field(field.name).type
            if _same_type(field.type, lake_type):
                continue
            if field.name in nulls_only:
                changes = changes.set_column(index, pa.field(field.name, lake_type),
                                             pa.nulls(changes.num_rows, lake_type))
            elif widens(field.type, lake_type) and (_is_text(field.type) or not _is_text(lake_type)
                                                    or _holds_values(table, field.name)):
                # A text column that has never held a value took a stand-in type: the lake takes the batch's type
                # instead (_ensure_table), rather than keeping numbers or bytes as text.
                changes = changes.set_column(index, pa.field(field.name, lake_type),
                                             _cast_or_stop(changes[field.name], field.name, lake_type))
        return changes

    def _ensure_table(self, uri: str, schema: pa.Schema, table: DeltaTable | None,
                      name: str | None = None) -> DeltaTable:
        """The table at ``uri`` (``table``, if open already) with every column of ``schema``: made if missing, with
        this Delta table ``name`` (see lakepaths.stated_name)."""
        if table is None:
            write_deltalake(uri, schema.empty_table(), mode="append", storage_options=self.storage_options,
                            name=name, configuration={"delta.enableChangeDataFeed": "false"})
            return DeltaTable(uri, storage_options=self.storage_options)
        existing = pa.schema(table.schema().to_arrow())
        missing = [f for f in schema if f.name not in existing.names]
        if missing:
            table.alter.add_columns([Field.from_arrow(f.with_nullable(True)) for f in missing])
            table = DeltaTable(uri, storage_options=self.storage_options)
        for field in schema:
            if field.name in existing.names and not _same_type(existing.field(field.name).type, field.type):
                self._overwrite(table, partial(_retyped, column=field.name, new_type=field.type), None)
                table = DeltaTable(uri, storage_options=self.storage_options)
        return table

    def _overwrite(self, table: DeltaTable, reshape: Callable[[pa.Table], pa.Table], version: int | None,
                   column_change: dict[str, Any] | None = None) -> None:
        """The table rewritten whole in a new shape (a column dropped, renamed or widened), one batch of rows after
        another, so that a table larger than memory can be rewritten. ``reshape`` sees each batch apart: a
        TableStopped it raises for any of them stops the rewrite before its commit, and the table is unchanged."""
        dataset = table.to_pyarrow_dataset()
        schema = reshape(dataset.schema.empty_table()).schema  # also the checks of the shape alone, before writing
        stopped: list[TableStopped] = []

        def reshaped() -> Iterator[pa.RecordBatch]:
            try:
                for rows in dataset.to_batches(batch_readahead=1, fragment_readahead=1):
                    yield from reshape(pa.Table.from_batches([rows])).cast(schema).to_batches()
            except TableStopped as exc:
                stopped.append(exc)
                raise

        try:
            write_deltalake(table.table_uri, pa.RecordBatchReader.from_batches(schema, reshaped()), mode="overwrite",
                            schema_mode="overwrite", storage_options=self.storage_options,
                            commit_properties=None if version is None else self._commit(version, column_change))
        except Exception:
            if stopped:  # delta-rs reports it as an error of the stream it read
                raise stopped[0] from None
            raise

    def _older_rows_columns(self, table: DeltaTable, changes: pa.Table) -> pa.Table:
        """Rows written before a DROP or RENAME COLUMN that the lake has applied (a partition read behind the one
        that sent the statement) carry the column as it was: their values go to the renamed column, or away with
        the dropped one, rather than bring the old column back. The commits that applied those statements name
        them; a column the lake never had is left to the schema's evolution."""
        lake = set(pa.schema(table.schema().to_arrow()).names)
        pending = [n for n in changes.column_names if n not in lake and not n.startswith("_cdc_")]
        if not pending:
            return changes
        changed = [json.loads(commit[COLUMN_CHANGE]) for commit in table.history() if commit.get(COLUMN_CHANGE)]
        while pending:
            name = pending.pop(0)
            statement = next((c for c in changed if name in (c.get("drop"), c.get("rename", [None])[0])), None)
            if statement is None or name not in changes.column_names:
                continue
            older = _written_before(changes, statement["seq"])
            values = changes[name]
            if "rename" in statement:
                new = statement["rename"][1]
                if new in changes.column_names:
                    moved = pc.if_else(older, _cast_or_stop(values, name, changes.schema.field(new).type), changes[new])
                    changes = changes.set_column(changes.column_names.index(new), new, moved)
                else:
                    changes = changes.append_column(new, pc.if_else(older, values, pa.nulls(len(values), values.type)))
                if new not in lake:
                    pending.append(new)  # renamed again since
            newer = pc.if_else(older, pa.nulls(len(values), values.type), values)
            index = changes.column_names.index(name)
            changes = (changes.remove_column(index) if newer.null_count == len(newer)
                       else changes.set_column(index, name, newer))
        return changes

    def _drop_buried(self, database: str, table: str, changes: pa.Table) -> pa.Table:
        """Changes older than a tombstone of their key are history already: drop them.

        Only a tombstone at or after the batch's oldest change can bury one of them, and in a stream read in
        order there is next to none: the tombstones are read through that bound, which skips the files and row
        groups whose sequences all precede it (Delta's statistics of each file, Parquet's of each row group),
        so the read grows with the batch rather than with all the deletes of the retention horizon (3,000,000
        tombstones: 0.7-1.3 s a table a batch read whole). The bound is the oldest sequence's commit ts (its
        first 20 characters), which no truncation of a string statistic cuts into."""
        if changes.num_rows == 0:
            return changes
        try:
            tombs = self._tombstones()
            if tombs is None:
                return changes
            oldest = pc.min(changes["_cdc_seq"]).as_py()[:SEQ_TS_CHARS]
            candidates = read_dataset(tombs, ["_cdc_key", "_cdc_seq"],
                                      self._lineage(database, table) & (pc.field("_cdc_seq") >= oldest))
        except Exception as exc:
            raise LakeError(f"reading the lake's tombstones: {exc}") from exc
        if candidates.num_rows == 0:
            return changes
        whole = candidates.filter(pc.equal(candidates["_cdc_key"], TABLE_TOMBSTONE))
        if whole.num_rows:
            changes = changes.filter(pc.greater(changes["_cdc_seq"], pc.max(whole["_cdc_seq"])))
        # A key deleted more than once has a tombstone for each delete: the newest buries.
        buried = candidates.group_by("_cdc_key").aggregate([("_cdc_seq", "max")])
        joined = changes.join(buried.rename_columns(["_cdc_key", "_tomb_seq"]), "_cdc_key", join_type="left outer")
        keep = pc.or_kleene(pc.is_null(joined["_tomb_seq"]), pc.greater(joined["_cdc_seq"], joined["_tomb_seq"]))
        return joined.filter(pc.fill_null(keep, True)).drop_columns(["_tomb_seq"]).select(changes.column_names)

    def record_tombstones(self, tombstones: pa.Table, version: int) -> None:
        """Append the batch's deletes (:meth:`expire_tombstones` forgets them after the retention horizon). An
        append, not an upsert per key: a MERGE reads every tombstone of the horizon, each batch."""
        if tombstones.num_rows == 0:
            return
        table = self._tombstones()
        if self._committed(table, version):
            return
        uri = self.internal_uri("tombstones")
        rows = tombstones.select(TOMBSTONES.names).cast(TOMBSTONES)
        write_deltalake(self._ensure_table(uri, TOMBSTONES, table), rows, mode="append",
                        storage_options=self.storage_options, commit_properties=self._commit(version))

    def expire_tombstones(self) -> int:
        tombstones = self._tombstones()
        if tombstones is None:
            return 0
        horizon = (_now() - self.tombstone_retention).strftime("%Y-%m-%dT%H:%M:%S.%f")
        deleted = self._rewrite(tombstones, lambda table: table.delete(f"deleted_at < {sql_literal(horizon)}"))
        return deleted.get("num_deleted_rows", 0)

    # -- DDL ----------------------------------------------------------------------------------------------
    def apply_ddl(self, database: str, table: str, action: DDL.Action, version: int, seq: str,
                  lake_type: Any = None) -> str:
        """Apply one DDL action (``seq``: the statement's source sequence); returns what was done."""
        uri = self.table_uri(database, table)
        if isinstance(action, DDL.RenameTable):
            return self._rename(database, table, action, version, seq)
        if self.done(uri, version):
            return "already applied"
        current = self._open(uri)
        if isinstance(action, DDL.Unsupported):
            raise TableStopped(action.reason)
        if current is None:
            return "no lake table yet"
        if isinstance(action, DDL.Truncate | DDL.DropTable):
            # Rows newer than the statement (already here) stay. A change older than it may still arrive from
            # another partition: the caller records a table-wide tombstone (tombstones()) to bury it.
            self._rewrite(current, lambda target: target.delete(f"_cdc_seq < {sql_literal(seq)}",
                                                                commit_properties=self._commit(version)))
            if isinstance(action, DDL.DropTable) and "://" not in uri and DeltaTable(uri).to_pyarrow_dataset(
                    ).count_rows() == 0:
                self._discard(uri)
            return "truncated" if isinstance(action, DDL.Truncate) else "dropped"
        existing = pa.schema(current.schema().to_arrow())
        if isinstance(action, DDL.AddColumn):
            if action.name in existing.names:
                return "column exists"
            field = pa.field(action.name, lake_type, nullable=True)
            current.alter.add_columns([Field.from_arrow(field)], commit_properties=self._commit(version))
            return f"added column {action.name}"
        if isinstance(action, DDL.DropColumn):
            if action.name not in existing.names:
                return "no such column"
            self._overwrite(current, lambda rows: rows.drop_columns([action.name]), version,
                            {"drop": action.name, "seq": seq})
            return f"dropped column {action.name}"
        if isinstance(action, DDL.RenameColumn | DDL.ModifyColumn) and action.new_name:
            if action.name not in existing.names:
                return "no such column"
            # Delta, like MySQL, does not tell column names apart by case alone.
            taken = [n for n in existing.names if n.lower() == action.new_name.lower() and n != action.name]

            def renamed(rows: pa.Table) -> pa.Table:
                # CHANGE COLUMN may also change the type: one rewrite does both, under the clause's one version.
                if taken:
                    rows = _merged_into(rows, action.name, taken[0], seq)
                rows = rows.rename_columns({action.name: action.new_name})
                return _retyped(rows, action.new_name, lake_type) if isinstance(action, DDL.ModifyColumn) else rows

            self._overwrite(current, renamed, version, {"rename": [action.name, action.new_name], "seq": seq})
            return f"renamed column {action.name} to {action.new_name}"
        if isinstance(action, DDL.ModifyColumn):
            if action.name not in existing.names or _same_type(existing.field(action.name).type, lake_type):
                return "unchanged"
            self._overwrite(current, lambda rows: _retyped(rows, action.name, lake_type), version)
            return f"modified column {action.name}"
        raise TableStopped(f"unknown DDL action {action!r}")

    # -- dead letters and progress ----------------------------------------------------------------------
    def write_dead_letters(self, rows: pa.Table, batch: int, version: int) -> int:
        target = None if rows.num_rows == 0 else self._append_target(self.internal_uri("dead_letters"), version)
        if target is None:
            return 0
        rows = rows.append_column("pipeline", pa.array([self.pipeline] * rows.num_rows, pa.string()))
        rows = rows.append_column("batch", pa.array([batch] * rows.num_rows, pa.int64()))
        rows = rows.append_column("recorded_at", pa.array([_now()] * rows.num_rows, pa.timestamp("us", tz="UTC")))
        rows = pa.table([rows[f.name] if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type)
                         for f in DEAD_LETTERS], names=DEAD_LETTERS.names)
        write_deltalake(target, rows.cast(DEAD_LETTERS), mode="append", schema_mode="merge",
                        storage_options=self.storage_options, commit_properties=self._commit(version))
        return rows.num_rows

    def record_progress(self, progress: dict[str, Any], version: int) -> None:
        target = self._append_target(self.internal_uri("progress"), version)
        if target is None:
            return
        row = {name: [progress.get(name)] for name in PROGRESS.names}
        row["pipeline"] = [self.pipeline]
        row["finished_at"] = [_now()]
        for name in ("tables", "offsets", "partition_ts", "resolved_ts"):
            row[name] = [json.dumps(progress.get(name) or {})]
        batch, due = progress.get("batch"), self._snapshot_due
        if batch is None or due is None or batch >= due:  # the history is read only when a snapshot may be due
            history = self.history()
            if batch is None or history.snapshot is None or batch >= history.snapshot + SNAPSHOT_EVERY:
                now = _fold([{name: values[0] for name, values in row.items()}], history)
                row["state"] = [json.dumps({"tables": now.tables, "offsets": now.offsets})]
                history = now._replace(snapshot=batch)
            due = None if history.snapshot is None else history.snapshot + SNAPSHOT_EVERY
        # schema_mode="merge": a progress table written by an older cdclake gains the new columns.
        write_deltalake(target, pa.Table.from_pydict(row, schema=PROGRESS), mode="append", schema_mode="merge",
                        storage_options=self.storage_options, commit_properties=self._commit(version))
        self._snapshot_due = due

    def compact_own_tables(self) -> list[str]:
        """Compacts each of the lake's own tables that has reached :data:`COMPACT_AT_FILES` files: the batches append a
        file each to them, and a batch reads the tombstones whole but for what Parquet's statistics rule out, a
        quarter of a millisecond a file (600 files: 0.15-0.18 s), which a pipeline that follows its sources for a
        week would have multiplied by a hundred thousand. Compaction changes no row and keeps the app-transaction
        markers. Returns the tables compacted."""
        compacted = []
        for name in INTERNAL_TABLES:
            table = self._tombstones() if name == "tombstones" else self._open(self.internal_uri(name))
            if table is None or len(table.file_uris()) < COMPACT_AT_FILES:
                continue
            try:
                table.optimize.compact()
            except CommitFailedError:  # `cdclake maintain` compacted it first
                continue
            compacted.append(name)
        return compacted

    # -- changes held for a later batch (consistency = "resolved-ts") -----------------------------------
    def hold(self, rows: pa.Table, batch: int, version: int) -> None:
        """Keep this batch's held changes as snapshot ``batch`` (the changelog rows, as decoded)."""
        target = None if rows.num_rows == 0 else self._append_target(self.internal_uri("held"), version)
        if target is None:
            return
        rows = rows.append_column("pipeline", pa.array([self.pipeline] * rows.num_rows, pa.string()))
        rows = rows.append_column("held_batch", pa.array([batch] * rows.num_rows, pa.int64()))
        write_deltalake(target, rows, mode="append", schema_mode="merge", storage_options=self.storage_options,
                        commit_properties=self._commit(version))

    def held(self, batch: int | None) -> pa.Table | None:
        """The changes snapshot ``batch`` held (None: nothing was held)."""
        table = self._open(self.internal_uri("held"))
        if batch is None or table is None:
            return None
        rows = read_table(table)
        rows = rows.filter(pc.and_(pc.equal(rows["pipeline"], self.pipeline), pc.equal(rows["held_batch"], batch)))
        return rows.drop_columns(["pipeline", "held_batch"])

    def forget_held(self, before: int) -> None:
        """Drop snapshots older than ``before``: the progress row of a later batch has superseded them."""
        held = self._open(self.internal_uri("held"))
        if held is not None:
            predicate = f"pipeline = {sql_literal(self.pipeline)} AND held_batch < {int(before)}"
            self._rewrite(held, lambda table: table.delete(predicate))

    def _rename(self, database: str, table: str, action: DDL.RenameTable, version: int, seq: str) -> str:
        """Moves the table's directory, after a commit that marks it with the rename's version: the log moves with
        it, so the target carries the mark. Where a partition read ahead made the target already, the table's rows
        are merged into it instead (:meth:`_merge_renamed`), whose last commit carries the version. Whether a
        replayed batch applied it already is :meth:`renamed`'s to say, before the table's earlier steps: applied,
        the table is gone and its steps would make it anew."""
        new_database = action.database or database
        uri, target = self.table_uri(database, table), self.table_uri(new_database, action.table)
        current = self._open(uri)
        if current is None:
            return "no lake table yet"
        if "://" in uri:
            raise TableStopped("RENAME TABLE is applied only to lakes on a local file system")
        taken = os.path.exists(target)
        arrived = self._open(target) if taken else None
        # A table marked by this rename passed the check of its target before: a merge into it may be half done.
        marked = self._committed(current, version)
        if taken and not marked and not self._read_ahead(arrived, seq):
            raise TableStopped(f"RENAME TABLE target {new_database}.{action.table} already exists in the lake")
        if not marked:
            stated = lakepaths.stated_name(new_database, action.table)
            current.alter.set_table_properties({RENAMED_TO: f"{new_database}.{action.table}",
                                                **({lakepaths.SOURCE_NAME: stated} if stated else {})},
                                               raise_if_not_exists=False, commit_properties=self._commit(version))
        failpoint("before-rename")
        if arrived is None:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.rename(uri, target)
        else:
            self._merge_renamed(current, f"{database}.{table}", new_database, action.table, arrived, version)
            failpoint("after-rename-merge")
            self._discard(uri)
        failpoint("after-rename")
        self._journal_rename(database, table, action, version, seq)
        merged = "" if arrived is None else " (merged with its rows that a partition read ahead had brought)"
        return f"renamed to {new_database}.{action.table}{merged}"

    def _discard(self, uri: str) -> None:
        """Removes a table's directory: moved out of the lake at once, so that a crash while its files are deleted
        leaves no half table behind (what a crash leaves in ``_cdclake/discarded`` goes with the next one)."""
        discarded = self.internal_uri("discarded")
        os.makedirs(discarded, exist_ok=True)
        os.rename(uri, os.path.join(discarded, uuid.uuid4().hex))
        shutil.rmtree(discarded, ignore_errors=True)

    @staticmethod
    def _read_ahead(arrived: DeltaTable | None, seq: str) -> bool:
        """Whether the table a rename's target names holds only changes newer than the rename: a partition read
        ahead of the one with the statement brought them in an earlier batch."""
        return arrived is not None and not read_dataset(arrived, ["_cdc_seq"], pc.field("_cdc_seq") <= seq).num_rows

    def _merge_renamed(self, renamed: DeltaTable, renamed_name: str, database: str, table: str, arrived: DeltaTable,
                       version: int) -> None:
        """The renamed table's rows merged into the target's, a row group at a time: each key keeps its latest
        change, and a key the target deleted after the rename stays deleted (its tombstone buries the older
        row). A merge repeated after a crash changes nothing, so only the last commit carries the rename's version."""
        if self._committed(arrived, version):
            return
        for rows in renamed.to_pyarrow_dataset().to_batches(batch_readahead=1, fragment_readahead=1):
            if not rows.num_rows:
                continue
            changes = _plain_types(pa.Table.from_batches([rows]))
            changes = changes.append_column("_cdc_op", pa.array(["u"] * changes.num_rows, pa.string()))
            self._merge(database, table, self._open(self.table_uri(database, table)), changes, None)
            failpoint("during-rename-merge")
        merged = DeltaTable(self.table_uri(database, table), storage_options=self.storage_options)
        merged.alter.set_table_properties({RENAMED_FROM: renamed_name}, raise_if_not_exists=False,
                                          commit_properties=self._commit(version))

    def renamed(self, database: str, table: str, action: DDL.RenameTable, version: int, seq: str) -> bool:
        """Whether this rename was applied: the lake's journal of renames says so, or the move was the last thing
        done before a crash (the table is gone, and the commit that marked it is its target's latest). Later
        steps may move the target again or give its name to another table, so the journal says it, not the
        names."""
        journal = self._open(self.internal_uri("renames"))
        if journal is not None and read_dataset(journal, ["version"], (
                (pc.field("pipeline") == self.pipeline) & (pc.field("version") == version)
                & (pc.field("database") == database) & (pc.field("table") == table))).num_rows:
            return True
        moved = self._open(self.table_uri(action.database or database, action.table))
        if (self._open(self.table_uri(database, table)) is not None or moved is None
                or moved.transaction_version(self.app_id) != version):
            return False
        self._journal_rename(database, table, action, version, seq)
        return True

    def _journal_rename(self, database: str, table: str, action: DDL.RenameTable, version: int, seq: str) -> None:
        row = {"pipeline": [self.pipeline], "version": [version], "database": [database], "table": [table],
               "seq": [seq], "new_database": [action.database or database], "new_table": [action.table],
               "renamed_at": [_now()]}
        write_deltalake(self.internal_uri("renames"), pa.Table.from_pydict(row, schema=RENAMES), mode="append",
                        storage_options=self.storage_options)

    def renames(self) -> list[Rename]:
        """Every RENAME TABLE applied to the lake, by any pipeline, in the order of their sequences: a partition
        read behind the one with the statement brings changes of the old name afterwards, which are the new
        table's."""
        if self._journal is None:
            self._journal = self._open(self.internal_uri("renames"))
        else:
            self._journal.update_incremental()
        if self._journal is None:
            return []
        if self._journal.version() != self._journaled[0]:
            rows = read_table(self._journal, ["database", "table", "seq", "new_database", "new_table"]).to_pylist()
            self._journaled = (self._journal.version(),
                               sorted({Rename(**row) for row in rows}, key=lambda r: (r.seq, r.database, r.table)))
        return self._journaled[1]

    def _lineage(self, database: str, table: str) -> pc.Expression:
        """The tombstones of a table: its own, and those its changes left under the names it had before renames
        (older than the rename that took them away), by the renames read as the batch began (:meth:`renames`). A
        rename the batch applies needs none: the batch applies the table's older changes before it.

        Each name leads back through one rename only, the latest into it before the table left the name after
        it: an earlier rename into that name brought another table, since gone. Following every rename into each
        name, the ways back grew exponentially with swaps of names (24,889 for one table of a workload of 63
        renames), and the filter built of them overflowed the C stack: a segmentation fault."""
        where = [(pc.field("database") == database) & (pc.field("table") == table)]
        name, bound = (database, table), None
        while into := [r for r in self._journaled[1]
                       if (r.new_database, r.new_table) == name and (bound is None or r.seq < bound)]:
            rename = into[-1]  # the journal is in the order of the renames' sequences
            where.append((pc.field("database") == rename.database) & (pc.field("table") == rename.table)
                         & (pc.field("_cdc_seq") < rename.seq))
            name, bound = (rename.database, rename.table), rename.seq
        return reduce(operator.or_, where)

    def publish_consistency(self, database: str, table: str, commit_ts: int, version: int) -> bool:
        """Record on the table that every change up to ``commit_ts`` is applied (the value only grows)."""
        uri = self.table_uri(database, table)
        current = self._open(uri)
        if current is None or self._committed(current, version):
            return False
        published = current.metadata().configuration.get(CONSISTENT_UP_TO)
        if published is not None and int(published) >= commit_ts:
            return False
        current.alter.set_table_properties({CONSISTENT_UP_TO: str(commit_ts)}, raise_if_not_exists=False,
                                           commit_properties=self._commit(version))
        return True

    def tables(self) -> list[tuple[str, str]]:
        """The source tables present in the lake."""
        return lakepaths.lake_tables(self.lake)


class Maintained(NamedTuple):
    table: str  # "<database>.<table>", or "_cdclake.<name>" for the lake's own tables
    compacted: int  # small files rewritten …
    into: int  # … into this many
    vacuumed: int  # files deleted from storage


def maintain(lake: str, retention_hours: int = 168, compact: bool = True,
             storage_options: dict[str, str] | None = None) -> Iterator[Maintained]:
    """Every table of a local lake compacted (Delta OPTIMIZE) and vacuumed (VACUUM): each batch's MERGE rewrites
    the files it touches and each batch appends to the lake's own tables, so a running pipeline leaves many
    small files and, on storage, every file an older version referenced. Vacuum deletes the files no version
    of the last ``retention_hours`` needs (time travel and readers of older versions need them). Compacting
    commits without an app-transaction marker and changes no row, so exactly once is unaffected. A running
    pipeline's MERGE or DELETE that a compaction overtakes runs again (``DeltaSink._rewrite``); its schema
    changes do not, so compact between runs where possible, and only vacuum beside a running pipeline."""
    sink = DeltaSink(lake, "maintenance", storage_options)
    named = [(f"{d}.{t}", sink.table_uri(d, t)) for d, t in sink.tables()]
    named += [(f"_cdclake.{name}", sink.internal_uri(name)) for name in INTERNAL_TABLES]
    for name, uri in named:  # one at a time, as each is done: a large table takes a while
        table = sink._open(uri)
        if table is None:
            continue
        metrics = table.optimize.compact() if compact else {}
        vacuumed = table.vacuum(retention_hours=retention_hours, dry_run=False, enforce_retention_duration=False)
        yield Maintained(name, metrics.get("numFilesRemoved", 0), metrics.get("numFilesAdded", 0), len(vacuumed))


def read_table(table: DeltaTable, columns: list[str] | None = None) -> pa.Table:
    """A Delta table as Arrow with plain string/binary columns (delta-rs may hand out view types, which
    not every Arrow kernel accepts)."""
    return _plain_types(table.to_pyarrow_table(columns=columns))


class History(NamedTuple):
    """Where a pipeline stands, by its progress rows."""

    tables: dict[str, dict[str, Any]]  # by table: last_seq, stopped, finished_at of the last batch that read it
    offsets: dict[str, int]  # by "topic:partition": the highest offset a batch read
    last: dict[str, Any] | None  # the last progress row (a lake written by an older cdclake may lack columns)
    snapshot: int | None  # the batch of the latest row that states the whole state (see SNAPSHOT_EVERY)

    @property
    def stopped(self) -> dict[str, str]:
        """The tables stopped, and why, by the last batch that read each: a row names the tables its batch read, so
        the last row alone forgot a stopped table that the last batch did not read, and the next run applied that
        table's changes again, past the ones it had sent to the dead letters."""
        return {name: table["stopped"] for name, table in self.tables.items() if table.get("stopped")}

    @property
    def written(self) -> set[tuple[str, str]]:
        """Every table that a batch has changed, as (database, table)."""
        return {name.partition(".")[::2] for name in self.tables}


NO_HISTORY = History({}, {}, None, None)  # a pipeline without a batch (_fold copies its dicts before adding to them)


def read_history(table: DeltaTable, pipeline: str) -> History:
    """A pipeline's state from the progress ``table``: its latest snapshot (see :data:`SNAPSHOT_EVERY`), then the rows
    after it; every row where there is no snapshot (a lake of an older cdclake). Only the files and row groups
    whose statistics hold those rows are read."""
    mine = pc.field("pipeline") == pipeline
    start = None
    if "state" in pa.schema(table.schema().to_arrow()).names:
        snapshots = read_dataset(table, ["batch"], mine & pc.field("state").is_valid())["batch"]
        start = pc.max(snapshots).as_py() if len(snapshots) else None
    rows = read_dataset(table, None, mine if start is None else mine & (pc.field("batch") >= start))
    return _fold(rows.sort_by("batch").to_pylist(), NO_HISTORY)


def _fold(rows: list[dict[str, Any]], history: History) -> History:
    """``history`` followed by these progress rows, in batch order."""
    tables, offsets, last, snapshot = dict(history.tables), dict(history.offsets), history.last, history.snapshot
    for row in rows:
        last = row
        if row.get("state"):
            state = json.loads(row["state"])  # this row's own tables and offsets included
            tables, offsets, snapshot = state["tables"], state["offsets"], row["batch"]
            continue
        finished = row["finished_at"].isoformat() if row.get("finished_at") else None
        for name, table in json.loads(row.get("tables") or "{}").items():
            tables[name] = {**table, "finished_at": finished}
        for where, offset in json.loads(row.get("offsets") or "{}").items():
            if offset is not None:
                offsets[where] = max(offsets.get(where, int(offset)), int(offset))
    return History(tables, offsets, last, snapshot)


def read_dataset(table: DeltaTable, columns: list[str] | None, where: pc.Expression) -> pa.Table:
    """The rows of a Delta table that ``where`` selects, as :func:`read_table` gives them; the files and row
    groups whose statistics rule ``where`` out are not read."""
    return _plain_types(table.to_pyarrow_dataset().to_table(columns=columns, filter=where))


def _plain_types(data: pa.Table) -> pa.Table:
    fields = []
    for f in data.schema:
        if pa.types.is_string_view(f.type) or pa.types.is_large_string(f.type):
            fields.append(f.with_type(pa.string()))
        elif pa.types.is_binary_view(f.type) or pa.types.is_large_binary(f.type):
            fields.append(f.with_type(pa.binary()))
        else:
            fields.append(f)
    return data.cast(pa.schema(fields))


def _merged_into(data: pa.Table, old: str, new: str, seq: str) -> pa.Table:
    """Column ``old`` renamed at ``seq`` onto ``new``, which the lake has already: a partition read ahead of the
    one with the statement brought rows of the new name first, so a row written after the rename holds its value
    under the new name and an older row under the old one."""
    old_type, new_type = data.schema.field(old).type, data.schema.field(new).type
    common = new_type if widens(old_type, new_type) else old_type if widens(new_type, old_type) else None
    if common is None:
        raise TableStopped(f"column {old} cannot be renamed to {new}: the lake table has a column {new} of type "
                           f"{new_type}, which cannot hold its values ({old_type}) nor they its values")
    older = _written_before(data, seq)
    if pc.any(pc.and_(older, pc.is_valid(data[new]))).as_py():
        raise TableStopped(f"column {old} cannot be renamed to {new}: the lake table has a column {new} with values "
                           f"that rows written before the rename gave it")
    values = pc.if_else(older, _cast_or_stop(data[old], old, common), _cast_or_stop(data[new], new, common))
    data = data.drop_columns([new])
    return data.set_column(data.schema.get_field_index(old), pa.field(old, common), values)


def _written_before(rows: pa.Table, seq: str) -> pa.ChunkedArray:
    """Which rows (lake rows or changes) a DDL statement at ``seq`` followed: theirs is the older sequence."""
    return pc.less(rows["_cdc_seq"], pa.scalar(seq, rows.schema.field("_cdc_seq").type))


def _retyped(data: pa.Table, column: str, new_type: pa.DataType) -> pa.Table:
    """``data`` with ``column`` of ``new_type``: a type that holds every value of the old one, or any type where the
    column holds no value (its type was the stand-in that a message stated for NULL)."""
    old_type = data.schema.field(column).type
    if _same_type(old_type, new_type):
        return data
    if not widens(old_type, new_type) and data[column].null_count < data.num_rows:
        raise TableStopped(f"column {column} cannot change from {old_type} to {new_type} without loss")
    return data.set_column(data.schema.get_field_index(column), pa.field(column, new_type),
                           _cast_or_stop(data[column], column, new_type))


def _cast_or_stop(values: pa.ChunkedArray, column: str, new_type: pa.DataType) -> pa.ChunkedArray:
    """Bytes become text only where they are UTF-8: other casts that :func:`widens` allows cannot fail."""
    try:
        return pc.cast(values, new_type)
    except pa.ArrowInvalid as exc:
        raise TableStopped(f"column {column}: its values cannot become {new_type}: {exc}") from None


def _holds_values(table: DeltaTable, column: str) -> bool:
    dataset = table.to_pyarrow_dataset()
    return dataset.scanner(columns=[column], filter=pc.field(column).is_valid()).head(1).num_rows > 0


def _is_text(data_type: pa.DataType) -> bool:
    return pa.types.is_string(data_type) or pa.types.is_large_string(data_type)


def _same_type(a: pa.DataType, b: pa.DataType) -> bool:
    return a == b or (pa.types.is_string(a) and pa.types.is_large_string(b)) or (
        pa.types.is_large_string(a) and pa.types.is_string(b)) or (
        pa.types.is_binary(a) and pa.types.is_large_binary(b)) or (
        pa.types.is_large_binary(a) and pa.types.is_binary(b))


_INT_ORDER: Sequence[pa.DataType] = (pa.int8(), pa.int16(), pa.int32(), pa.int64())


def widens(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether every value of ``old`` is exactly representable in ``new``."""
    if _is_text(new):
        return True
    if old in _INT_ORDER and new in _INT_ORDER:
        return _INT_ORDER.index(old) <= _INT_ORDER.index(new)
    if old in _INT_ORDER and pa.types.is_decimal(new):
        digits = {pa.int8(): 3, pa.int16(): 5, pa.int32(): 10, pa.int64(): 19}[old]
        return new.precision - new.scale >= digits
    if pa.types.is_decimal(old) and pa.types.is_decimal(new):
        return new.scale >= old.scale and new.precision - new.scale >= old.precision - old.scale
    if pa.types.is_float32(old) and pa.types.is_float64(new):
        return True
    return pa.types.is_date32(old) and pa.types.is_timestamp(new) and new.tz is None

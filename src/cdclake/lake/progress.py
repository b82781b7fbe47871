"""Where a pipeline stands, by the lake's own record: its progress rows (``_cdclake/progress``, one per applied
batch) and the Kafka starts it pinned (``_cdclake/kafka_starts``). A run's start, ``cdclake status`` and the
exactly-once numbering of a new checkpoint read them."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake

from cdclake.lake.layout import INTERNAL_TABLES, KAFKA_STARTS, PROGRESS, STEPS_PER_BATCH
from cdclake.lake.store import Store, now, read_dataset

# Every this many batches (and at a pipeline's first batch, also its first after an upgrade), a progress row also
# states the pipeline's whole state (column ``state``): each table's last sequence, stop and batch time, and the
# highest offset read of each partition. A run's start and ``cdclake status`` read from the latest such row on,
# not every row since the first batch.
SNAPSHOT_EVERY = 1000


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


class Progress:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._snapshot_due: int | None = None  # the batch whose progress row states the state next (None: unknown)

    def last_batch(self) -> int | None:
        """The last batch whose progress row this pipeline committed."""
        table = self.store.open(self.store.own_uri("progress"))
        if table is None:
            return None
        committed = table.transaction_version(self.store.app_id)
        return None if committed is None else committed // STEPS_PER_BATCH

    def last_marked_batch(self) -> int | None:
        """The last batch that committed anything to the lake: its progress row or, where a crash cut it short, a
        step on any table or on the lake's own tables (their app-transaction markers). A new checkpoint numbers its
        batches above it: reusing the number of a half-applied batch for other records would skip them on the
        tables it had marked. Opens every table of the lake; of a lake on object storage, only the lake's own."""
        uris = [self.store.own_uri(name) for name in INTERNAL_TABLES]
        uris += [self.store.table_uri(database, table) for database, table in self.store.tables()]
        marks = [version for uri in uris if (table := self.store.open(uri)) is not None
                 and (version := table.transaction_version(self.store.app_id)) is not None]
        return max(marks) // STEPS_PER_BATCH if marks else None

    def history(self) -> History:
        """Where this pipeline stands, by its progress rows (see :func:`read_history`)."""
        table = self.store.open(self.store.own_uri("progress"))
        return NO_HISTORY if table is None else read_history(table, self.store.pipeline)

    def progress_since(self, batch: int) -> list[dict[str, Any]]:
        """This pipeline's progress rows from ``batch`` on, in batch order."""
        table = self.store.open(self.store.own_uri("progress"))
        if table is None:
            return []
        rows = read_dataset(table, None, (pc.field("pipeline") == self.store.pipeline) & (pc.field("batch") >= batch))
        return rows.sort_by("batch").to_pylist()

    def applied_offsets(self) -> dict[str, dict[int, int]]:
        """The next Kafka offset to read per topic and partition by the lake's own record: one past the highest
        offset of every batch this pipeline has committed (a batch's progress row names what it read); for a
        partition no batch has read yet, the start an earlier run pinned (:meth:`pin_kafka_starts`)."""
        seen: dict[str, dict[int, int]] = {}
        starts = self.store.open(self.store.own_uri("kafka_starts"))
        if starts is not None:
            pinned = starts.to_pyarrow_table(columns=["topic", "partition", "offset"],
                                             filters=[("pipeline", "=", self.store.pipeline)]).to_pylist()
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
            "pipeline": [self.store.pipeline] * len(rows), "topic": [r[0] for r in rows],
            "partition": [r[1] for r in rows], "offset": [r[2] for r in rows], "pinned_at": [now()] * len(rows),
        }, schema=KAFKA_STARTS)
        write_deltalake(self.store.own_uri("kafka_starts"), table, mode="append",
                        storage_options=self.store.storage_options)

    def record(self, progress: dict[str, Any], version: int) -> None:
        """Appends the batch's progress row; every :data:`SNAPSHOT_EVERY` batches, the row also states the whole
        state."""
        target = self.store.append_target(self.store.own_uri("progress"), version)
        if target is None:
            return
        row = {name: [progress.get(name)] for name in PROGRESS.names}
        row["pipeline"] = [self.store.pipeline]
        row["finished_at"] = [now()]
        for name in ("tables", "offsets", "partition_ts", "resolved_ts"):
            row[name] = [json.dumps(progress.get(name) or {})]
        batch, due = progress.get("batch"), self._snapshot_due
        if batch is None or due is None or batch >= due:  # the history is read only when a snapshot may be due
            history = self.history()
            if batch is None or history.snapshot is None or batch >= history.snapshot + SNAPSHOT_EVERY:
                folded = _fold([{name: values[0] for name, values in row.items()}], history)
                row["state"] = [json.dumps({"tables": folded.tables, "offsets": folded.offsets})]
                history = folded._replace(snapshot=batch)
            due = None if history.snapshot is None else history.snapshot + SNAPSHOT_EVERY
        # schema_mode="merge": a progress table written by an older cdclake gains the new columns.
        write_deltalake(target, pa.Table.from_pydict(row, schema=PROGRESS), mode="append", schema_mode="merge",
                        storage_options=self.store.storage_options, commit_properties=self.store.commit(version))
        self._snapshot_due = due


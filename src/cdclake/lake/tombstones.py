"""The lake's tombstones (``_cdclake/tombstones``): the keys deleted recently and the sequences of their deletes,
so that a late, older insert or update of a deleted key cannot bring its row back. Kept for the retention horizon;
the key :data:`~cdclake.lake.layout.TABLE_TOMBSTONE` buries a whole table (TRUNCATE, DROP TABLE)."""

from __future__ import annotations

import datetime as dt
import operator
from functools import reduce

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake

from cdclake.errors import LakeError
from cdclake.lake.journal import Journal
from cdclake.lake.layout import TABLE_TOMBSTONE, TOMBSTONES
from cdclake.lake.store import Store, now, read_dataset, sql_literal
from cdclake.model import seq as cdc_seq


def tombstones(database: str, table: str, keys: pa.Array | list[str], seqs: pa.Array | list[str]) -> pa.Table:
    """Tombstone rows for :meth:`Tombstones.record`: deleted keys of one table and their deletes' sequences; the
    key :data:`~cdclake.lake.layout.TABLE_TOMBSTONE` buries the whole table as of its sequence."""
    count = len(keys)
    return pa.table({"database": [database] * count, "table": [table] * count, "_cdc_key": keys, "_cdc_seq": seqs,
                     "deleted_at": pa.array([now()] * count, TOMBSTONES.field("deleted_at").type)}).cast(TOMBSTONES)


class Tombstones:
    def __init__(self, store: Store, journal: Journal) -> None:
        self.store = store
        self.journal = journal
        self._kept: DeltaTable | None = None

    def table(self) -> DeltaTable | None:
        """The tombstones table, kept open and brought up to date: every table's MERGE reads it, and an opening
        reads its log since the last checkpoint, where catching up reads only the commits since the last time."""
        if self._kept is None:
            self._kept = self.store.open(self.store.own_uri("tombstones"))
        else:
            self._kept.update_incremental()
        return self._kept

    def record(self, tombstones: pa.Table, version: int) -> None:
        """Append the batch's deletes (:meth:`expire` forgets them after the retention horizon). An append, not an
        upsert per key: a MERGE reads every tombstone of the horizon, each batch."""
        if tombstones.num_rows == 0:
            return
        table = self.table()
        if self.store.committed(table, version):
            return
        uri = self.store.own_uri("tombstones")
        rows = tombstones.select(TOMBSTONES.names).cast(TOMBSTONES)
        write_deltalake(self.store.create(uri, TOMBSTONES) if table is None else table, rows, mode="append",
                        storage_options=self.store.storage_options, commit_properties=self.store.commit(version))

    def expire(self, retention: dt.timedelta) -> int:
        """Deletes the tombstones older than ``retention``; returns how many."""
        table = self.table()
        if table is None:
            return 0
        horizon = (now() - retention).strftime("%Y-%m-%dT%H:%M:%S.%f")
        deleted = self.store.rewrite(table, lambda table: table.delete(f"deleted_at < {sql_literal(horizon)}"))
        return deleted.get("num_deleted_rows", 0)

    def drop_buried(self, database: str, table: str, changes: pa.Table) -> pa.Table:
        """Changes older than a tombstone of their key are history already: drop them.

        Only a tombstone at or after the batch's oldest change can bury one of them, and in a stream read in
        order there is next to none: the tombstones are read through that bound, which skips the files and row
        groups whose sequences all precede it (Delta's statistics of each file, Parquet's of each row group),
        so the read grows with the batch rather than with all the deletes of the retention horizon. The bound
        is the oldest sequence's commit ts (:func:`cdclake.model.seq.ts_bound`)."""
        if changes.num_rows == 0:
            return changes
        try:
            tombs = self.table()
            if tombs is None:
                return changes
            oldest = cdc_seq.ts_bound(pc.min(changes["_cdc_seq"]).as_py())
            candidates = read_dataset(tombs, ["_cdc_key", "_cdc_seq"],
                                      self.lineage(database, table) & (pc.field("_cdc_seq") >= oldest))
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

    def lineage(self, database: str, table: str) -> pc.Expression:
        """The tombstones of a table: its own, and those its changes left under the names it had before renames
        (older than the rename that took them away), by the renames read as the batch began
        (:meth:`Journal.renames`). A rename the batch applies needs none: the batch applies the table's older
        changes before it.

        Each name leads back through one rename only, the latest into it before the table left the name after
        it: an earlier rename into that name brought another table, since gone. Following every rename into each
        name instead, the ways back grow exponentially with swaps of names, and the filter built of them
        overflows the C stack."""
        where = [(pc.field("database") == database) & (pc.field("table") == table)]
        name, bound = (database, table), None
        while into := [r for r in self.journal.known
                       if (r.new_database, r.new_table) == name and (bound is None or r.seq < bound)]:
            rename = into[-1]  # the journal is in the order of the renames' sequences
            where.append((pc.field("database") == rename.database) & (pc.field("table") == rename.table)
                         & (pc.field("_cdc_seq") < rename.seq))
            name, bound = (rename.database, rename.table), rename.seq
        return reduce(operator.or_, where)

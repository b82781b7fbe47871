"""RENAME TABLE applied to the lake: the table's directory moves (its log, marked with the rename's version, moves
with it), or, where a partition read ahead made the target already, its rows are merged into the target; the
journal (:mod:`cdclake.lake.journal`) records each rename. Lakes on a local file system only."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from cdclake.errors import TableStopped
from cdclake.lake import paths as lakepaths
from cdclake.lake.journal import Journal
from cdclake.lake.layout import RENAMED_FROM, RENAMED_TO
from cdclake.lake.store import Store, plain_types, read_dataset
from cdclake.lake.tables import Tables
from cdclake.model import ddl as DDL
from cdclake.support.failpoints import failpoint


class Renames:
    def __init__(self, store: Store, tables: Tables, journal: Journal) -> None:
        self.store = store
        self.tables = tables
        self.journal = journal

    def rename(self, database: str, table: str, action: DDL.RenameTable, version: int, seq: str) -> str:
        """Moves the table's directory, after a commit that marks it with the rename's version: the log moves with
        it, so the target carries the mark. Where a partition read ahead made the target already, the table's rows
        are merged into it instead (:meth:`_merge_renamed`), whose last commit carries the version. Whether a
        replayed batch applied it already is :meth:`renamed`'s to say, before the table's earlier steps: applied,
        the table is gone and its steps would make it anew."""
        new_database = action.database or database
        uri, target = self.store.table_uri(database, table), self.store.table_uri(new_database, action.table)
        current = self.store.open(uri)
        if current is None:
            return "no lake table yet"
        if "://" in uri:
            raise TableStopped("RENAME TABLE is applied only to lakes on a local file system")
        taken = os.path.exists(target)
        arrived = self.store.open(target) if taken else None
        # A table marked by this rename passed the check of its target before: a merge into it may be half done.
        marked = self.store.committed(current, version)
        if taken and not marked and not self._read_ahead(arrived, seq):
            raise TableStopped(f"RENAME TABLE target {new_database}.{action.table} already exists in the lake")
        if not marked:
            stated = lakepaths.stated_name(new_database, action.table)
            current.alter.set_table_properties({RENAMED_TO: f"{new_database}.{action.table}",
                                                **({lakepaths.SOURCE_NAME: stated} if stated else {})},
                                               raise_if_not_exists=False, commit_properties=self.store.commit(version))
        failpoint("before-rename")
        if arrived is None:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.rename(uri, target)
        else:
            self._merge_renamed(current, f"{database}.{table}", new_database, action.table, arrived, version)
            failpoint("after-rename-merge")
            self.store.discard(uri)
        failpoint("after-rename")
        self.journal.record(database, table, action, version, seq)
        merged = "" if arrived is None else " (merged with its rows that a partition read ahead had brought)"
        return f"renamed to {new_database}.{action.table}{merged}"

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
        if self.store.committed(arrived, version):
            return
        for rows in renamed.to_pyarrow_dataset().to_batches(batch_readahead=1, fragment_readahead=1):
            if not rows.num_rows:
                continue
            changes = plain_types(pa.Table.from_batches([rows]))
            changes = changes.append_column("_cdc_op", pa.array(["u"] * changes.num_rows, pa.string()))
            self.tables.merge(database, table, self.store.open(self.store.table_uri(database, table)), changes, None)
            failpoint("during-rename-merge")
        merged = self.store.reopen(self.store.table_uri(database, table))
        merged.alter.set_table_properties({RENAMED_FROM: renamed_name}, raise_if_not_exists=False,
                                          commit_properties=self.store.commit(version))

    def renamed(self, database: str, table: str, action: DDL.RenameTable, version: int, seq: str) -> bool:
        """Whether this rename was applied: the lake's journal of renames says so, or the move was the last thing
        done before a crash (the table is gone, and the commit that marked it is its target's latest). Later
        steps may move the target again or give its name to another table, so the journal says it, not the
        names."""
        if self.journal.applied(database, table, version):
            return True
        moved = self.store.open(self.store.table_uri(action.database or database, action.table))
        if (self.store.open(self.store.table_uri(database, table)) is not None or moved is None
                or moved.transaction_version(self.store.app_id) != version):
            return False
        self.journal.record(database, table, action, version, seq)
        return True

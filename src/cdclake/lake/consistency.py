"""``consistency = "resolved-ts"`` in the lake: the changes a batch holds back because their transaction may not
be complete yet (``_cdclake/held``, one snapshot per batch), and the commit ts each table is consistent up to (its
table property :data:`~cdclake.lake.layout.CONSISTENT_UP_TO`)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import write_deltalake

from cdclake.lake.layout import CONSISTENT_UP_TO
from cdclake.lake.store import Store, read_table, sql_literal


class Consistency:
    def __init__(self, store: Store) -> None:
        self.store = store

    def hold(self, rows: pa.Table, batch: int, version: int) -> None:
        """Keep this batch's held changes as snapshot ``batch`` (the changelog rows, as decoded)."""
        target = None if rows.num_rows == 0 else self.store.append_target(self.store.own_uri("held"), version)
        if target is None:
            return
        rows = rows.append_column("pipeline", pa.array([self.store.pipeline] * rows.num_rows, pa.string()))
        rows = rows.append_column("held_batch", pa.array([batch] * rows.num_rows, pa.int64()))
        write_deltalake(target, rows, mode="append", schema_mode="merge", storage_options=self.store.storage_options,
                        commit_properties=self.store.commit(version))

    def held(self, batch: int | None) -> pa.Table | None:
        """The changes snapshot ``batch`` held (None: nothing was held)."""
        table = self.store.open(self.store.own_uri("held"))
        if batch is None or table is None:
            return None
        rows = read_table(table)
        rows = rows.filter(pc.and_(pc.equal(rows["pipeline"], self.store.pipeline),
                                   pc.equal(rows["held_batch"], batch)))
        return rows.drop_columns(["pipeline", "held_batch"])

    def forget_held(self, before: int) -> None:
        """Drop snapshots older than ``before``: the progress row of a later batch has superseded them."""
        held = self.store.open(self.store.own_uri("held"))
        if held is not None:
            predicate = f"pipeline = {sql_literal(self.store.pipeline)} AND held_batch < {int(before)}"
            self.store.rewrite(held, lambda table: table.delete(predicate))

    def publish(self, database: str, table: str, commit_ts: int, version: int) -> bool:
        """Record on the table that every change up to ``commit_ts`` is applied (the value only grows)."""
        current = self.store.open(self.store.table_uri(database, table))
        if current is None or self.store.committed(current, version):
            return False
        published = current.metadata().configuration.get(CONSISTENT_UP_TO)
        if published is not None and int(published) >= commit_ts:
            return False
        current.alter.set_table_properties({CONSISTENT_UP_TO: str(commit_ts)}, raise_if_not_exists=False,
                                           commit_properties=self.store.commit(version))
        return True

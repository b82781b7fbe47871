"""The lake's journal of renames (``_cdclake/renames``): every RENAME TABLE applied, by any pipeline, with its
version and sequence. A replayed batch asks it whether a rename was applied; the planner and the tombstones read
it to give the old name's older changes to the new table."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake

from cdclake.lake.layout import RENAMES
from cdclake.lake.sink import Rename
from cdclake.lake.store import Store, now, read_dataset, read_table
from cdclake.model import ddl as DDL


class Journal:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._table: DeltaTable | None = None  # kept open as the tombstones are
        self._read: tuple[int, list[Rename]] = (-1, [])

    def applied(self, database: str, table: str, version: int) -> bool:
        """Whether this pipeline's rename of ``database``.``table`` with this version is in the journal."""
        journal = self.store.open(self.store.own_uri("renames"))
        return journal is not None and bool(read_dataset(journal, ["version"], (
            (pc.field("pipeline") == self.store.pipeline) & (pc.field("version") == version)
            & (pc.field("database") == database) & (pc.field("table") == table))).num_rows)

    def record(self, database: str, table: str, action: DDL.RenameTable, version: int, seq: str) -> None:
        """Adds the rename of ``database``.``table`` that ``action`` states, at ``seq``."""
        row = {"pipeline": [self.store.pipeline], "version": [version], "database": [database], "table": [table],
               "seq": [seq], "new_database": [action.database or database], "new_table": [action.table],
               "renamed_at": [now()]}
        write_deltalake(self.store.own_uri("renames"), pa.Table.from_pydict(row, schema=RENAMES), mode="append",
                        storage_options=self.store.storage_options)

    def renames(self) -> list[Rename]:
        """Every RENAME TABLE applied to the lake, by any pipeline, in the order of their sequences: a partition
        read behind the one with the statement brings changes of the old name afterwards, which are the new
        table's."""
        if self._table is None:
            self._table = self.store.open(self.store.own_uri("renames"))
        else:
            self._table.update_incremental()
        if self._table is None:
            return []
        if self._table.version() != self._read[0]:
            rows = read_table(self._table, ["database", "table", "seq", "new_database", "new_table"]).to_pylist()
            self._read = (self._table.version(),
                          sorted({Rename(**row) for row in rows}, key=lambda r: (r.seq, r.database, r.table)))
        return self._read[1]

    @property
    def known(self) -> list[Rename]:
        """The renames as :meth:`renames` read them last (as the batch began)."""
        return self._read[1]

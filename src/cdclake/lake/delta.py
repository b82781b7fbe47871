"""The lake sink written with delta-rs (``deltalake``), exactly once: :class:`DeltaSink` implements
:class:`cdclake.lake.sink.Sink` by composing the lake's parts, each a module of its own:

- :mod:`~cdclake.lake.store`: opening and committing Delta tables with the pipeline's app-transaction marker;
- :mod:`~cdclake.lake.tables`: MERGE of net changes, DDL, schema evolution (:mod:`~cdclake.lake.evolution`);
- :mod:`~cdclake.lake.renames`: RENAME TABLE, with its journal (:mod:`~cdclake.lake.journal`);
- the bookkeeping tables: :mod:`~cdclake.lake.tombstones`, :mod:`~cdclake.lake.progress`,
  :mod:`~cdclake.lake.dead_letters`, :mod:`~cdclake.lake.consistency` (held changes, consistency markers);
- :mod:`~cdclake.lake.maintenance`: compaction of the lake's own tables (and `cdclake maintain`'s OPTIMIZE, VACUUM).

The layout they write is :mod:`cdclake.lake.layout`'s; paths are :mod:`cdclake.lake.paths`'.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa

from cdclake.errors import LakeError, TableStopped  # noqa: F401 -- their old home (cdclake.errors holds them)
from cdclake.lake.consistency import Consistency
from cdclake.lake.dead_letters import write_dead_letters
from cdclake.lake.journal import Journal
from cdclake.lake.maintenance import compact_own_tables
from cdclake.lake.progress import History, Progress
from cdclake.lake.renames import Renames
from cdclake.lake.sink import Rename
from cdclake.lake.store import Store
from cdclake.lake.tables import Tables
from cdclake.lake.tombstones import Tombstones
from cdclake.model import ddl as DDL


class DeltaSink:  # implements cdclake.lake.sink.Sink
    def __init__(self, lake: str, pipeline: str, storage_options: dict[str, str] | None = None,
                 tombstone_retention_hours: float = 168.0) -> None:
        self.store = Store(lake, pipeline, storage_options)
        self.lake = self.store.lake
        self.pipeline = pipeline
        self.tombstone_retention = dt.timedelta(hours=tombstone_retention_hours)
        self.journal = Journal(self.store)
        self.tombstones = Tombstones(self.store, self.journal)
        self.writer = Tables(self.store, self.tombstones)
        self.renaming = Renames(self.store, self.writer, self.journal)
        self.progress = Progress(self.store)
        self.consistency = Consistency(self.store)

    # -- locations -------------------------------------------------------------------------------
    def table_uri(self, database: str, table: str) -> str:
        return self.store.table_uri(database, table)

    def internal_uri(self, name: str) -> str:
        return self.store.own_uri(name)

    def tables(self) -> list[tuple[str, str]]:
        """The source tables present in the lake."""
        return self.store.tables()

    def done(self, uri: str, version: int) -> bool:
        return self.store.done(uri, version)

    # -- applying a batch's plan -------------------------------------------------------------------
    def apply_rows(self, database: str, table: str, changes: pa.Table, version: int,
                   nulls_only: set[str] | frozenset[str] = frozenset()) -> dict[str, int]:
        return self.writer.apply_rows(database, table, changes, version, nulls_only)

    def apply_ddl(self, database: str, table: str, action: DDL.Action, version: int, seq: str,
                  lake_type: Any = None) -> str:
        if isinstance(action, DDL.RenameTable):
            return self.renaming.rename(database, table, action, version, seq)
        return self.writer.apply_ddl(database, table, action, version, seq, lake_type)

    def renamed(self, database: str, table: str, action: DDL.RenameTable, version: int, seq: str) -> bool:
        return self.renaming.renamed(database, table, action, version, seq)

    def renames(self) -> list[Rename]:
        return self.journal.renames()

    def record_tombstones(self, tombstones: pa.Table, version: int) -> None:
        self.tombstones.record(tombstones, version)

    def expire_tombstones(self) -> int:
        return self.tombstones.expire(self.tombstone_retention)

    def write_dead_letters(self, rows: pa.Table, batch: int, version: int) -> int:
        return write_dead_letters(self.store, rows, batch, version)

    def compact_own_tables(self) -> list[str]:
        return compact_own_tables(self.store, self.tombstones)

    # -- where the pipeline stands -----------------------------------------------------------------
    def record_progress(self, progress: dict[str, Any], version: int) -> None:
        self.progress.record(progress, version)

    def history(self) -> History:
        return self.progress.history()

    def last_batch(self) -> int | None:
        return self.progress.last_batch()

    def last_marked_batch(self) -> int | None:
        return self.progress.last_marked_batch()

    def progress_since(self, batch: int) -> list[dict[str, Any]]:
        return self.progress.progress_since(batch)

    def applied_offsets(self) -> dict[str, dict[int, int]]:
        return self.progress.applied_offsets()

    def pin_kafka_starts(self, offsets: dict[str, dict[int, int]]) -> None:
        self.progress.pin_kafka_starts(offsets)

    # -- consistency = "resolved-ts" -----------------------------------------------------------------
    def hold(self, rows: pa.Table, batch: int, version: int) -> None:
        self.consistency.hold(rows, batch, version)

    def held(self, batch: int | None) -> pa.Table | None:
        return self.consistency.held(batch)

    def forget_held(self, before: int) -> None:
        self.consistency.forget_held(before)

    def publish_consistency(self, database: str, table: str, commit_ts: int, version: int) -> bool:
        return self.consistency.publish(database, table, commit_ts, version)

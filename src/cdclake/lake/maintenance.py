"""Keeping a lake's files few: ``cdclake maintain`` compacts (Delta OPTIMIZE) and vacuums (VACUUM) every table, and
a running pipeline compacts the lake's own tables as they grow. Neither changes a row nor an app-transaction
marker, so exactly once is unaffected."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from deltalake.exceptions import CommitFailedError

from cdclake.lake import paths as lakepaths
from cdclake.lake.layout import INTERNAL_TABLES
from cdclake.lake.store import Store
from cdclake.lake.tombstones import Tombstones

# A running pipeline compacts a table of its own once it holds this many files (see compact_own_tables).
COMPACT_AT_FILES = 50


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
    pipeline's MERGE or DELETE that a compaction overtakes runs again (:meth:`Store.rewrite`); its schema
    changes do not, so compact between runs where possible, and only vacuum beside a running pipeline."""
    store = Store(lake, "maintenance", storage_options)
    named = [(f"{d}.{t}", store.table_uri(d, t)) for d, t in store.tables()]
    named += [(f"{lakepaths.RESERVED}.{name}", store.own_uri(name)) for name in INTERNAL_TABLES]
    for name, uri in named:  # one at a time, as each is done: a large table takes a while
        table = store.open(uri)
        if table is None:
            continue
        metrics = table.optimize.compact() if compact else {}
        vacuumed = table.vacuum(retention_hours=retention_hours, dry_run=False, enforce_retention_duration=False)
        yield Maintained(name, metrics.get("numFilesRemoved", 0), metrics.get("numFilesAdded", 0), len(vacuumed))


def compact_own_tables(store: Store, tombstones: Tombstones) -> list[str]:
    """Compacts each of the lake's own tables that has reached :data:`COMPACT_AT_FILES` files: the batches append a
    file each to them, and a batch reads the tombstones whole but for what Parquet's statistics rule out, at a cost
    per file that a pipeline following its sources for weeks would multiply without end. Compaction changes no row
    and keeps the app-transaction markers. Returns the tables compacted."""
    compacted = []
    for name in INTERNAL_TABLES:
        table = tombstones.table() if name == "tombstones" else store.open(store.own_uri(name))
        if table is None or len(table.file_uris()) < COMPACT_AT_FILES:
            continue
        try:
            table.optimize.compact()
        except CommitFailedError:  # `cdclake maintain` compacted it first
            continue
        compacted.append(name)
    return compacted

"""The lake's dead letters (``_cdclake/dead_letters``): every record that could not be applied, as it arrived (key,
value, headers, timestamp, Kafka coordinates), with its format and the reason, so that it can be replayed."""

from __future__ import annotations

import pyarrow as pa
from deltalake import write_deltalake

from cdclake.lake.layout import DEAD_LETTERS
from cdclake.lake.store import Store, now


def write_dead_letters(store: Store, rows: pa.Table, batch: int, version: int) -> int:
    """Appends a batch's dead letters (columns of :data:`~cdclake.lake.layout.DEAD_LETTERS`; those missing are
    null, a lake of an earlier cdclake gains them); returns how many were written (0 for a replayed step)."""
    target = None if rows.num_rows == 0 else store.append_target(store.own_uri("dead_letters"), version)
    if target is None:
        return 0
    rows = rows.append_column("pipeline", pa.array([store.pipeline] * rows.num_rows, pa.string()))
    rows = rows.append_column("batch", pa.array([batch] * rows.num_rows, pa.int64()))
    rows = rows.append_column("recorded_at", pa.array([now()] * rows.num_rows, pa.timestamp("us", tz="UTC")))
    rows = pa.table([rows[f.name] if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type)
                     for f in DEAD_LETTERS], names=DEAD_LETTERS.names)
    write_deltalake(target, rows.cast(DEAD_LETTERS), mode="append", schema_mode="merge",
                    storage_options=store.storage_options, commit_properties=store.commit(version))
    return rows.num_rows

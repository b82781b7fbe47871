"""The lake's layout (a contract): its tables, their schemas, the properties cdclake sets and the commit markers.

Paths come from :mod:`cdclake.lake.paths` (a source name is never a path):

- ``<lake>/<database>/<table>``: the current state of each source table — typed columns plus the
  bookkeeping columns ``_cdc_key`` (the row's key as canonical JSON), ``_cdc_seq`` (the source sequence
  of the change that wrote it, see :mod:`cdclake.model.seq`), ``_cdc_commit_ts``, ``_cdc_position``, ``_cdc_ts_ms``.
- ``<lake>/_cdclake/dead_letters``: every record that could not be applied, with raw key/value, headers (in
  order, duplicates kept) and timestamp, Kafka coordinates, format and reason.
- ``<lake>/_cdclake/tombstones``: the keys deleted recently and the sequence of their delete, so that a
  late, older insert or update cannot bring a row back; kept for ``tombstone_retention_hours``.
- ``<lake>/_cdclake/progress``: one row per applied batch (counts, offsets, last sequence per table,
  resolved ts per partition and the commit ts the tables are consistent up to); every
  :data:`cdclake.lake.progress.SNAPSHOT_EVERY` batches a row also states the pipeline's whole state.
- ``<lake>/_cdclake/renames``: every RENAME TABLE applied, with its version and sequence: a batch replayed after a
  crash skips a renamed table's steps up to its rename, which would make the table anew under its old name, and
  changes of the old name older than the rename that arrive later go to the new table.
- ``<lake>/_cdclake/held``: with ``consistency = "resolved-ts"``, the decoded changes a batch held back
  because their transaction may not be complete yet (one snapshot per batch; the progress row names the
  snapshot the next batch starts from).
- ``<lake>/_cdclake/kafka_starts``: where a pipeline starts reading partitions no batch has read yet.

Every commit carries a Delta app-transaction marker (app id ``cdclake:<pipeline>``, version = batch
version × :data:`STEPS_PER_BATCH` + the step's number on that table, 1 to :data:`TABLE_STEPS`; the lake's own
tables take 996-999), so a batch replayed after a crash skips the steps it had already committed.
"""

from __future__ import annotations

import pyarrow as pa

STEPS_PER_BATCH = 1000
# The versions 1-995 of a batch number its commits to one table (see step_versions): each table's Delta
# log holds its own markers, so the count of tables a batch changes is not bounded by them.
TABLE_STEPS = 995
TABLE_TOMBSTONE = "*"  # the key of a tombstone that buries a whole table (TRUNCATE, DROP TABLE)

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
RENAMES = pa.schema([
    ("pipeline", pa.string()), ("version", pa.int64()), ("database", pa.string()), ("table", pa.string()),
    ("seq", pa.string()), ("new_database", pa.string()), ("new_table", pa.string()),
    ("renamed_at", pa.timestamp("us", tz="UTC")),
])
KAFKA_STARTS = pa.schema([("pipeline", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
                          ("offset", pa.int64()), ("pinned_at", pa.timestamp("us", tz="UTC"))])
INTERNAL_TABLES = ("dead_letters", "tombstones", "progress", "held", "kafka_starts", "renames")

COLUMN_CHANGE = "cdclake.columnChange"  # commit metadata: the DROP or RENAME COLUMN a commit applied, and its seq
CONSISTENT_UP_TO = "cdclake.consistentUpToCommitTs"  # table property: every change up to it is applied
# table property of a rename's target that a partition read ahead had made: the renamed table merged into it
RENAMED_FROM = "cdclake.renamedFrom"
RENAMED_TO = "cdclake.renamedTo"  # table property: the name a RENAME TABLE gave the table (its commit: the rename's)

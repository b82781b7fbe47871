"""The layout of ``_cdc_seq``, the order of a table's changes: the one place that builds and reads it.

``_cdc_seq`` = the change's commit ts as :data:`TS_DIGITS` decimal digits, zero-padded, then ``/``, then its
position in the source (the format's own position text, made to sort). A change without a commit ts (a TiCDC Avro
delete is a bare tombstone) happened after everything before it in its partition: it takes the partition's latest
commit ts so far and, for its position, :data:`NO_TS` followed by its record's offset in :data:`TS_DIGITS` digits,
which sorts after that commit's positions (``~`` follows every digit and letter).

Compared as text, two sequences order changes by commit ts, then by position. The planner builds it in Spark SQL
(:func:`sql`); the lake reads its commit ts back (:func:`commit_ts`, :func:`ts_bound`).
"""

from __future__ import annotations

TS_DIGITS = 20
NO_TS = "~"


def sql(commit_ts: str, partition_ts: str, position: str, offset: str) -> str:
    """The SQL expression of a change's ``_cdc_seq``, given the SQL of its commit ts, its partition's latest commit
    ts so far, its position and its record's offset (column names or expressions)."""
    return (f"concat(lpad(cast(coalesce({commit_ts}, {partition_ts}, 0) AS STRING), {TS_DIGITS}, '0'), '/', "
            f"CASE WHEN {commit_ts} IS NULL THEN concat('{NO_TS}', lpad(cast({offset} AS STRING), {TS_DIGITS}, '0')) "
            f"ELSE coalesce({position}, '') END)")


def ts_bound(seq: str) -> str:
    """The commit-ts part of a sequence: every sequence of a later commit ts sorts at or after it, and no truncation
    of a string statistic (Parquet's, Delta's) cuts into it."""
    return seq[:TS_DIGITS]


def commit_ts(seq: str) -> int | None:
    """The commit ts a sequence starts with; None for an empty or foreign one."""
    bound = ts_bound(seq)
    return int(bound) if bound and bound.isdigit() else None

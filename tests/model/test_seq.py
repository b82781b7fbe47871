"""The ``_cdc_seq`` layout: the SQL that builds it and the readers of its commit ts agree, and the text orders
changes by commit ts, then position, with a change without commit ts after its partition's commit so far."""

from __future__ import annotations

from cdclake.model import seq


def test_the_sql_states_the_layout():
    assert seq.sql("commit_ts", "_partition_ts", "position", "offset") == (
        "concat(lpad(cast(coalesce(commit_ts, _partition_ts, 0) AS STRING), 20, '0'), '/', "
        "CASE WHEN commit_ts IS NULL THEN concat('~', lpad(cast(offset AS STRING), 20, '0')) "
        "ELSE coalesce(position, '') END)")


def test_the_commit_ts_is_read_back_from_a_sequence():
    assert seq.commit_ts(f"{42:020d}/p") == 42
    assert seq.commit_ts(f"{7:020d}/~{3:020d}") == 7
    assert seq.ts_bound(f"{42:020d}/p") == f"{42:020d}"
    assert seq.commit_ts("") is None
    assert seq.commit_ts("01/") is None  # not of this layout
    assert seq.commit_ts("not a sequence at all") is None


def test_sequences_order_by_commit_ts_then_position_and_a_timeless_change_follows_its_commit():
    ordered = [f"{5:020d}/a", f"{5:020d}/b", f"{5:020d}/{seq.NO_TS}{0:020d}", f"{6:020d}/"]
    assert sorted(reversed(ordered)) == ordered
    # The commit-ts bound of a sequence sorts at or before every sequence that follows it.
    assert all(seq.ts_bound(earlier) <= later for i, earlier in enumerate(ordered) for later in ordered[i:])

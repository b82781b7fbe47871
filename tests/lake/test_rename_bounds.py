"""Where a change of a renamed table ends (planner.rename_bounds): the flat list of bounds that the planner reads as
one CASE gives, for every change, the name that applying the lake's renames one after another would give."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cdclake.lake.sink import Rename
from cdclake.spark.planner import rename_bounds

NAMES = [("shop", "a"), ("shop", "b"), ("shop", "c"), ("arch", "a")]
SEQS = [f"{n:020d}/" for n in range(1, 8)]

renames = st.lists(st.builds(lambda old, seq, new: Rename(*old, seq, *new),
                             st.sampled_from(NAMES), st.sampled_from(SEQS), st.sampled_from(NAMES)), max_size=8)


def one_after_another(renames: list[Rename], name: tuple[str, str], seq: str) -> tuple[tuple[str, str], bool]:
    """The definition: each rename, in the order of the journal, takes the change if it names the table the change
    is in by then and is later than the change."""
    taken = False
    for rename in renames:
        if (rename.database, rename.table) == name and seq < rename.seq:
            name, taken = (rename.new_database, rename.new_table), True
    return name, taken


def first_bound(bounds: list[tuple[str, str, str, str, str]], name: tuple[str, str], seq: str
                ) -> tuple[tuple[str, str], bool]:
    """How the planner's CASE reads the bounds: the first whose table is the change's and whose bound is above it."""
    for database, table, below, new_database, new_table in bounds:
        if (database, table) == name and seq < below:
            return (new_database, new_table), True
    return name, False


@given(renames, st.sampled_from(NAMES), st.sampled_from([f"{n:020d}/x" for n in range(0, 9)]))
def test_the_bounds_send_a_change_where_the_renames_one_after_another_would(journal, name, seq):
    journal = sorted(set(journal), key=lambda r: (r.seq, r.database, r.table))  # as DeltaSink.renames gives them
    assert first_bound(rename_bounds(journal), name, seq) == one_after_another(journal, name, seq)


def test_a_table_renamed_away_and_back_is_taken_by_both_renames_and_ends_under_its_own_name():
    journal = [Rename("shop", "a", SEQS[1], "shop", "b"), Rename("shop", "b", SEQS[3], "shop", "a")]
    assert rename_bounds(journal) == [("shop", "a", SEQS[1], "shop", "a"), ("shop", "b", SEQS[3], "shop", "a")]


def test_the_bounds_grow_with_the_renames_not_with_the_renames_times_the_tables():
    journal = [Rename("shop", f"t{n}", f"{n:020d}/", "shop", f"t{n + 1}") for n in range(500)]
    bounds = rename_bounds(journal)
    assert len(bounds) == 500
    assert bounds[0] == ("shop", "t0", f"{0:020d}/", "shop", "t500")

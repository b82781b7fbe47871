"""Tombstones in a real Delta table: a late, older change of a deleted key never comes back, however many
deletes the retention horizon holds, and a batch reads only the tombstones that can bury one of its changes."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake

from cdclake.lake.delta import DeltaSink
from cdclake.lake.layout import RENAMES, TABLE_TOMBSTONE, TOMBSTONES


def seq(ts: int, position: str = "p") -> str:
    return f"{ts:020d}/{position}"


def tombstones(rows: list[tuple[str, str, str]]) -> pa.Table:
    return pa.Table.from_pylist([{"database": "d", "table": table, "_cdc_key": key, "_cdc_seq": s,
                                  "deleted_at": dt.datetime.now(dt.UTC)} for table, key, s in rows], schema=TOMBSTONES)


def changes(rows: list[tuple[str, str]]) -> pa.Table:
    return pa.table({"_cdc_key": [k for k, _ in rows], "_cdc_seq": [s for _, s in rows],
                     "_cdc_op": ["u"] * len(rows)})


def kept(sink: DeltaSink, table: str, rows: list[tuple[str, str]]) -> list[tuple[str, str]]:
    out = sink.tombstones.drop_buried("d", table, changes(rows))
    return list(zip(out["_cdc_key"].to_pylist(), out["_cdc_seq"].to_pylist(), strict=True))


def test_the_newest_of_a_keys_tombstones_buries_and_only_older_changes(tmp_path):
    sink = DeltaSink(str(tmp_path), "p")
    # Key [1] deleted at 10, re-inserted, deleted again at 30: two tombstones, in two batches.
    sink.record_tombstones(tombstones([("t", "[1]", seq(10)), ("t", "[2]", seq(10)), ("u", "[3]", seq(40))]), 1998)
    sink.record_tombstones(tombstones([("t", "[1]", seq(30))]), 2998)
    sink.record_tombstones(tombstones([("t", "[1]", seq(30))]), 2998)  # a replayed batch: recorded once
    assert DeltaTable(sink.internal_uri("tombstones")).to_pyarrow_table().num_rows == 4
    got = kept(sink, "t", [("[1]", seq(20)), ("[1]", seq(30)), ("[1]", seq(30, "q")), ("[2]", seq(20)),
                           ("[3]", seq(20)), ("[4]", seq(5))])
    # [1] at 20 and at 30 itself are older than its newest delete; [2] at 20 is after its delete; [3]'s
    # tombstone is of another table; [4] was never deleted.
    assert sorted(got) == [("[1]", seq(30, "q")), ("[2]", seq(20)), ("[3]", seq(20)), ("[4]", seq(5))]


def test_a_whole_table_tombstone_buries_every_older_change_of_that_table(tmp_path):
    sink = DeltaSink(str(tmp_path), "p")
    sink.record_tombstones(tombstones([("t", TABLE_TOMBSTONE, seq(50))]), 1998)
    assert kept(sink, "t", [("[1]", seq(49)), ("[2]", seq(50)), ("[3]", seq(51))]) == [("[3]", seq(51))]
    assert len(kept(sink, "u", [("[1]", seq(49))])) == 1


def test_a_batch_reads_only_the_tombstone_files_that_can_bury_its_changes(tmp_path, monkeypatch):
    sink = DeltaSink(str(tmp_path), "p")
    for batch in range(1, 6):  # five batches of deletes, each a file of its own, in sequence order
        sink.record_tombstones(tombstones([("t", f"[{batch}-{i}]", seq(batch * 100 + i)) for i in range(50)]),
                               batch * 1000 + 998)
    table = DeltaTable(sink.internal_uri("tombstones"))
    assert len(table.file_uris()) == 5
    read: list[int] = []  # the files each read of the tombstones opens
    opened = DeltaTable.to_pyarrow_dataset

    class Counting:
        def __init__(self, dataset) -> None:
            self.dataset = dataset

        def to_table(self, columns, filter):
            read.append(sum(1 for _ in self.dataset.get_fragments(filter=filter)))
            return self.dataset.to_table(columns=columns, filter=filter)

    monkeypatch.setattr(DeltaTable, "to_pyarrow_dataset", lambda self, *a, **k: Counting(opened(self, *a, **k)))
    # The batch's oldest change is at 460: only the last file's tombstones (500-549) can be newer.
    assert kept(sink, "t", [("[5-1]", seq(460)), ("[5-1]", seq(502)), ("[1-1]", seq(460))]) == [
        ("[5-1]", seq(502)), ("[1-1]", seq(460))]
    assert read == [1]
    # A change older than every tombstone reads them all, and the old tombstone still buries it.
    assert kept(sink, "t", [("[1-1]", seq(100))]) == []
    assert read[-1] == 5
    assert pc.sum(pc.equal(table.to_pyarrow_table()["table"], "t")).as_py() == 250


def test_a_sink_that_keeps_the_tombstones_open_sees_every_later_delete(tmp_path):
    """The sink keeps the tombstones table open between batches: deletes recorded after it opened it, by
    itself or by another process (a restarted pipeline, ``cdclake maintain`` expiring them), still count."""
    sink, other = DeltaSink(str(tmp_path), "p"), DeltaSink(str(tmp_path), "p")
    assert kept(sink, "t", [("[1]", seq(5))]) == [("[1]", seq(5))]  # no tombstones table yet
    sink.record_tombstones(tombstones([("t", "[1]", seq(10))]), 1998)
    assert kept(sink, "t", [("[1]", seq(5))]) == []
    other.record_tombstones(tombstones([("t", "[2]", seq(20))]), 2998)
    assert kept(sink, "t", [("[1]", seq(15)), ("[2]", seq(15))]) == [("[1]", seq(15))]
    assert sink.done(sink.internal_uri("tombstones"), 2998)
    sink.record_tombstones(tombstones([("t", "[3]", seq(20))]), 2998)  # the same batch again: recorded once
    assert DeltaTable(sink.internal_uri("tombstones")).to_pyarrow_table().num_rows == 2
    other.tombstone_retention = dt.timedelta(0)
    assert other.expire_tombstones() == 2
    assert sorted(kept(sink, "t", [("[1]", seq(5)), ("[2]", seq(5))])) == [("[1]", seq(5)), ("[2]", seq(5))]


def journal(sink: DeltaSink, renames: list[tuple[str, str, str]]) -> None:
    """RENAME TABLE old TO new at each sequence, as the lake's journal holds them, read as a batch begins."""
    write_deltalake(sink.internal_uri("renames"), pa.Table.from_pylist(
        [{"pipeline": "p", "version": n, "database": "d", "table": old, "seq": s, "new_database": "d",
          "new_table": new, "renamed_at": dt.datetime.now(dt.UTC)} for n, (old, new, s) in enumerate(renames)],
        schema=RENAMES))
    sink.renames()


def test_a_table_is_buried_by_the_deletes_of_its_own_former_names_not_by_another_tables_under_its_name(tmp_path):
    sink = DeltaSink(str(tmp_path), "p")
    # Table A is named x at 10 and leaves the name for y at 20; table B is named x at 30.
    journal(sink, [("a", "x", seq(10)), ("x", "y", seq(20)), ("b", "x", seq(30))])
    sink.record_tombstones(tombstones([("a", "[1]", seq(5)), ("b", "[2]", seq(25))]), 1998)
    late = [("[1]", seq(1)), ("[2]", seq(1))]
    assert kept(sink, "x", late) == [("[1]", seq(1))]  # A's delete of [1] is not B's
    assert kept(sink, "y", late) == [("[2]", seq(1))]


def test_the_tombstones_of_tables_that_swapped_names_many_times_are_read_along_one_line_of_names(tmp_path):
    """gh-ost and pt-online-schema-change end each migration with a swap of names. Following every rename into
    each name, the ways back grew exponentially (24,889 for one table of a simulated workload of 63 renames), and
    the filter built of them overflowed the C stack: the process died of a segmentation fault."""
    sink = DeltaSink(str(tmp_path), "p")
    swaps = 40
    journal(sink, [step for k in range(swaps) for step in (
        ("a", "tmp", seq(100 * k + 10)), ("b", "a", seq(100 * k + 11)), ("tmp", "b", seq(100 * k + 12)))])
    # Key [k] deleted from table a and key [-k] from table b between the swaps.
    sink.record_tombstones(tombstones([(name, f"[{sign}{k}]", seq(100 * k + 50)) for k in range(swaps)
                                       for name, sign in (("a", ""), ("b", "-"))]), 1998)
    # The table named a at the end was named b before the last swap: a delete under b after it was the other table's.
    late = [(f"[{sign}{k}]", seq(1)) for k in range(swaps) for sign in ("", "-")]
    assert kept(sink, "a", late) == [(f"[-{swaps - 1}]", seq(1))]
    assert str(sink.tombstones.lineage("d", "a")).count(" or ") <= 3 * swaps

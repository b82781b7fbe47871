"""Where a pipeline stands, from the lake's progress table: read from the latest row that states the whole state (a
snapshot, every ``SNAPSHOT_EVERY`` batches) on, so that a run's start and ``cdclake status`` do not read a history that
grows a row per batch; and from every row of a lake written before snapshots."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from cdclake.lake.delta import DeltaSink
from cdclake.lake.layout import PROGRESS
from cdclake.pipeline import inspection as status

# What each batch read: (table, last_seq, why it stopped) and (partition, last offset).
BATCHES = {
    1: ([("db.a", "01/", None), ("db.b", "01/", None)], {"orders:0": 10, "orders:1": 5}),
    2: ([("db.a", "02/", "a narrowing type change")], {"orders:0": 20}),
    3: ([("db.b", "03/", None)], {"orders:1": 30}),
    4: ([("db.c", "04/", None)], {"orders:2": 7}),
    5: ([("db.a", "05/", None)], {"orders:0": 50}),  # a later batch no longer finds db.a stopped
    6: ([("db.c", "06/", "a value the lake type cannot hold")], {}),
    7: ([("db.b", "07/", None)], {"orders:1": 70, "orders:0": None}),
}
SEQS = {"db.a": "05/", "db.b": "07/", "db.c": "06/"}


def progress(batch: int) -> dict:
    tables, offsets = BATCHES[batch]
    return {"batch": batch, "tables": {name: {"last_seq": seq, "stopped": why} for name, seq, why in tables},
            "offsets": offsets}


def stands_where_the_batches_left_it(sink: DeltaSink) -> None:
    assert sink.history().last["batch"] == 7
    assert sink.history().stopped == {"db.c": "a value the lake type cannot hold"}
    assert sink.history().written == {("db", "a"), ("db", "b"), ("db", "c")}
    assert sink.applied_offsets() == {"orders": {0: 51, 1: 71, 2: 8}}
    assert {name: state["last_seq"] for name, state in sink.history().tables.items()} == SEQS


@pytest.mark.parametrize("every", [1, 3, 1000])
def test_a_pipeline_stands_where_its_batches_left_it_whichever_rows_state_the_whole_state(tmp_path, monkeypatch,
                                                                                          every):
    monkeypatch.setattr("cdclake.lake.progress.SNAPSHOT_EVERY", every)
    sink = DeltaSink(str(tmp_path), "p")
    for batch in BATCHES:
        sink.record_progress(progress(batch), batch * 1000 + 999)
    rows = DeltaTable(sink.internal_uri("progress")).to_pyarrow_table().sort_by("batch")
    snapshots = [batch for batch, state in zip(rows["batch"].to_pylist(), rows["state"].to_pylist(), strict=True)
                 if state]
    assert snapshots == list(range(1, 8, every))
    stands_where_the_batches_left_it(sink)
    assert stands_where_the_batches_left_it(DeltaSink(str(tmp_path), "p")) is None  # a new run's sink too


def test_the_rows_before_the_latest_snapshot_are_not_read(tmp_path, monkeypatch):
    monkeypatch.setattr("cdclake.lake.progress.SNAPSHOT_EVERY", 3)
    sink = DeltaSink(str(tmp_path), "p")
    for batch in BATCHES:
        sink.record_progress(progress(batch), batch * 1000 + 999)
    # Batch 7 states the whole state: the rows before it could not even be read.
    DeltaTable(sink.internal_uri("progress")).update({"tables": "'{'", "offsets": "'{'"}, predicate="batch < 7")
    stands_where_the_batches_left_it(DeltaSink(str(tmp_path), "p"))


def test_a_lake_written_before_snapshots_is_read_whole_and_gains_them(tmp_path, monkeypatch):
    monkeypatch.setattr("cdclake.lake.progress.SNAPSHOT_EVERY", 3)
    older = DeltaSink(str(tmp_path), "p")
    for batch in range(1, 6):
        older.record_progress(progress(batch), batch * 1000 + 999)
    # The same rows as an older cdclake wrote them, without the state column.
    rows = DeltaTable(older.internal_uri("progress")).to_pyarrow_table().drop_columns(["state"])
    uri = str(tmp_path / "older" / "_cdclake" / "progress")
    write_deltalake(uri, rows.cast(pa.schema([f for f in PROGRESS if f.name != "state"])))
    sink = DeltaSink(str(tmp_path / "older"), "p")
    assert sink.history().last["batch"] == 5 and sink.history().snapshot is None
    for batch in (6, 7):
        sink.record_progress(progress(batch), batch * 1000 + 999)
    assert sink.history().snapshot == 6
    stands_where_the_batches_left_it(sink)


def test_status_shows_each_table_as_the_last_batch_of_any_pipeline_left_it(tmp_path, monkeypatch):
    monkeypatch.setattr("cdclake.lake.progress.SNAPSHOT_EVERY", 2)
    for batch in BATCHES:
        DeltaSink(str(tmp_path), "p").record_progress(progress(batch), batch * 1000 + 999)
    other = DeltaSink(str(tmp_path), "q")  # another pipeline of the lake, later
    other.record_progress({"batch": 1, "tables": {"db.b": {"last_seq": "09/", "stopped": None}}}, 1999)
    tables = status.collect(str(tmp_path))["tables"]
    assert {name: (info["position"], info["stopped"]) for name, info in tables.items()} == {
        "db.a": (None, None), "db.b": (None, None), "db.c": (None, "a value the lake type cannot hold")}
    assert {name: info["commit_ts"] for name, info in tables.items()} == {"db.a": 5, "db.b": 9, "db.c": 6}

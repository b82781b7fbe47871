"""The lake's own tables compacted as a running pipeline grows them: no row and no app-transaction marker lost."""

from __future__ import annotations

from deltalake import DeltaTable

from cdclake.lake.delta import DeltaSink
from tests.lake.test_tombstones import kept, seq, tombstones


def test_the_lakes_own_tables_are_compacted_once_they_hold_enough_files(tmp_path, monkeypatch):
    monkeypatch.setattr("cdclake.lake.maintenance.COMPACT_AT_FILES", 4)
    sink = DeltaSink(str(tmp_path), "p")
    for batch in range(1, 4):
        sink.record_tombstones(tombstones([("t", f"[{batch}]", seq(10 * batch))]), batch * 1000 + 998)
        sink.record_progress({"batch": batch}, batch * 1000 + 999)
    assert sink.compact_own_tables() == []  # three files each: not yet
    sink.record_tombstones(tombstones([("t", "[4]", seq(40))]), 4998)
    assert sink.compact_own_tables() == ["tombstones"]
    table = DeltaTable(sink.internal_uri("tombstones"))
    assert len(table.file_uris()) == 1 and table.to_pyarrow_table().num_rows == 4
    assert sink.store.committed(table, 4998)  # the replay check still knows the last batch
    assert kept(sink, "t", [("[2]", seq(15)), ("[2]", seq(25)), ("[4]", seq(45))]) == [("[2]", seq(25)),
                                                                                        ("[4]", seq(45))]
    sink.record_progress({"batch": 4}, 4999)
    assert sink.compact_own_tables() == ["progress"]
    assert sorted(DeltaTable(sink.internal_uri("progress")).to_pyarrow_table()["batch"].to_pylist()) == [1, 2, 3, 4]
    assert sink.history().last["batch"] == 4  # its readers go by batch, not by where a row lies

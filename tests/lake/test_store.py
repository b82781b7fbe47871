"""The sink's MERGE and DELETE against a table that another writer changed between their read and their commit
(``cdclake maintain`` compacting beside a running pipeline): run again on the new version, same result."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from cdclake.lake.delta import DeltaSink
from cdclake.lake.layout import TOMBSTONES


def changes(keys: list[int], op: str, seq: str) -> pa.Table:
    return pa.table({
        "_cdc_key": [f"[{k}]" for k in keys], "_cdc_op": [op] * len(keys), "_cdc_seq": [seq] * len(keys),
        "_cdc_commit_ts": pa.array([1] * len(keys), pa.int64()), "_cdc_position": [""] * len(keys),
        "_cdc_ts_ms": pa.array([None] * len(keys), pa.int64()), "id": pa.array(keys, pa.int64()),
        "name": [f"{op}{k}" for k in keys],
    })


@pytest.fixture
def overtaken(monkeypatch) -> list[int]:
    """Every table handle the sink opens has its first MERGE or DELETE overtaken by a compaction committed from
    another handle; returns the number of files each compaction rewrote."""
    compacted: list[int] = []

    class Overtaken(DeltaTable):
        def _compact_first(self) -> None:
            if not getattr(self, "_compacted", False):
                self._compacted = True
                compacted.append(DeltaTable(self.table_uri).optimize.compact()["numFilesRemoved"])

        def merge(self, *args, **kwargs):
            self._compact_first()
            return super().merge(*args, **kwargs)

        def delete(self, *args, **kwargs):
            self._compact_first()
            return super().delete(*args, **kwargs)

    monkeypatch.setattr("cdclake.lake.store.DeltaTable", Overtaken)
    return compacted


def test_a_merge_overtaken_by_a_compaction_runs_again_on_the_new_version(tmp_path, overtaken):
    sink = DeltaSink(str(tmp_path), "p")
    sink.apply_rows("d", "t", changes([1, 2], "c", "1"), 1001)
    sink.apply_rows("d", "t", changes([3, 4], "c", "2"), 2001)
    overtaken.clear()
    counts = sink.apply_rows("d", "t", pa.concat_tables([changes([2], "u", "3"), changes([3], "d", "3"),
                                                         changes([5], "c", "3")]), 3001)
    assert overtaken[0] > 1, "the compaction must have rewritten files the MERGE read"
    assert counts == {"inserted": 1, "updated": 1, "deleted": 1}
    uri = sink.table_uri("d", "t")
    assert DeltaTable(uri).to_pyarrow_table().sort_by("id").select(["id", "name"]).to_pylist() == [
        {"id": 1, "name": "c1"}, {"id": 2, "name": "u2"}, {"id": 4, "name": "c4"}, {"id": 5, "name": "c5"}]
    assert DeltaTable(uri).transaction_version("cdclake:p") == 3001


def test_a_delete_overtaken_by_a_compaction_runs_again_on_the_new_version(tmp_path, overtaken):
    sink = DeltaSink(str(tmp_path), "p", tombstone_retention_hours=1)
    old, recent = dt.datetime(2020, 1, 1, tzinfo=dt.UTC), dt.datetime.now(dt.UTC)
    for version, (key, at) in enumerate([("[1]", old), ("[2]", recent), ("[3]", old)], start=1):
        sink.record_tombstones(pa.Table.from_pydict({"database": ["d"], "table": ["t"], "_cdc_key": [key],
                                                     "_cdc_seq": ["1"], "deleted_at": [at]}, schema=TOMBSTONES),
                               version * 1000)
    overtaken.clear()
    assert sink.expire_tombstones() == 2
    assert overtaken[0] > 1
    assert DeltaTable(sink.internal_uri("tombstones")).to_pyarrow_table()["_cdc_key"].to_pylist() == ["[2]"]

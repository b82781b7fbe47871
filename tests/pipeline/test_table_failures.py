"""One table's failure stops that table, not the lake: a type the lake cannot make, an unexpected error of the
writer. The other tables of the batch are right, the stopped table is reported with its reason and its records are
dead letters, and the next run goes on instead of failing on it again. A failure of the lake itself still fails
the batch."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from deltalake import DeltaTable

from cdclake.lake import delta
from cdclake.model.events import INSERT, UPDATE
from cdclake.model.records import write_records
from tests.helpers.lake import lake_rows
from tests.pipeline.test_runner import change, ddl, records, run

pytestmark = pytest.mark.spark


def _cdclake_run(data, lake) -> subprocess.CompletedProcess:
    env = {name: value for name, value in os.environ.items() if name != "CDCLAKE_FAILPOINT"}
    return subprocess.run([sys.executable, "-m", "cdclake", "run", "--format", "canal-json", "--input", str(data),
                           "--lake", str(lake)], env=env, capture_output=True, timeout=600, check=False)


def _dead_letters(lake) -> list[dict]:
    return DeltaTable(str(lake / "_cdclake" / "dead_letters")).to_pyarrow_table().to_pylist()


def test_a_type_the_lake_cannot_make_stops_its_table_and_the_run_goes_on(tmp_path):
    data, lake = tmp_path / "in", tmp_path / "lake"
    data.mkdir()
    write_records(data / "1.jsonl", records([
        change(INSERT, 10, 1), change(INSERT, 11, 1, table="orders"),
        ddl(12, "ALTER TABLE shop.orders ADD COLUMN c decimal(10,20)", table="orders"),
        change(INSERT, 13, 2, table="orders"), change(INSERT, 14, 2), change(UPDATE, 15, 1, 1, 0)]))
    first = _cdclake_run(data, lake)
    said = first.stderr.decode()
    assert first.returncode == 3, said[-3000:]  # tables stopped
    assert ("table shop.orders is STOPPED, its records go to the dead letters: column type 'decimal(10,20)': a "
            "DECIMAL needs a precision of at least 1 and a scale from 0 to the precision") in said
    users = lake_rows(str(lake), "shop", "users")
    assert sorted(users) == ["[1]", "[2]"] and users["[1]"]["name"] == "user 1 v1"
    assert sorted(d["offset"] for d in _dead_letters(lake)) == [1, 2, 3]  # every record of the stopped table
    assert all(d["reason"].startswith("table shop.orders stopped: column type") for d in _dead_letters(lake))

    write_records(data / "2.jsonl", records([change(INSERT, 20, 3), change(INSERT, 21, 3, table="orders")],
                                            start_offset=6))
    second = _cdclake_run(data, lake)
    assert second.returncode == 3, second.stderr.decode()[-3000:]  # still stopped, and no batch failed on it
    assert sorted(lake_rows(str(lake), "shop", "users")) == ["[1]", "[2]", "[3]"]
    assert sorted(d["offset"] for d in _dead_letters(lake)) == [1, 2, 3, 7]


def test_an_unexpected_error_of_the_writer_stops_its_table_only(spark, tmp_path, monkeypatch):
    data, lake = tmp_path / "in", tmp_path / "lake"
    data.mkdir()
    write_records(data / "1.jsonl", records([change(INSERT, 10, 1), change(INSERT, 11, 1, table="orders"),
                                             change(INSERT, 12, 2)]))
    apply_rows = delta.DeltaSink.apply_rows

    def failing(self, database, table, *args, **kwargs):
        if table == "orders":
            raise RuntimeError("the writer fell over\nwith a second line")
        return apply_rows(self, database, table, *args, **kwargs)

    monkeypatch.setattr(delta.DeltaSink, "apply_rows", failing)
    summary = run(spark, data, lake)
    assert summary.stopped == {"shop.orders": "RuntimeError: the writer fell over"}
    assert sorted(lake_rows(str(lake), "shop", "users")) == ["[1]", "[2]"]
    assert [d["offset"] for d in _dead_letters(lake)] == [1]
    monkeypatch.undo()
    write_records(data / "2.jsonl", records([change(INSERT, 20, 3), change(INSERT, 21, 3, table="orders")],
                                            start_offset=3))
    again = run(spark, data, lake)
    assert again.stopped == summary.stopped  # stays stopped until the user acts: its later records are dead letters
    assert sorted(lake_rows(str(lake), "shop", "users")) == ["[1]", "[2]", "[3]"]
    assert sorted(d["offset"] for d in _dead_letters(lake)) == [1, 4]


def test_a_failure_of_the_lakes_storage_fails_the_batch_and_stops_no_table(spark, tmp_path, monkeypatch):
    data, lake = tmp_path / "in", tmp_path / "lake"
    data.mkdir()
    write_records(data / "1.jsonl", records([change(INSERT, 10, 1), change(INSERT, 11, 1, table="orders")]))
    apply_rows = delta.DeltaSink.apply_rows

    def unreachable(self, database, table, *args, **kwargs):
        if table == "orders":
            raise OSError("Generic LocalFileSystem error: the lake's storage went away")
        return apply_rows(self, database, table, *args, **kwargs)

    monkeypatch.setattr(delta.DeltaSink, "apply_rows", unreachable)
    with pytest.raises(Exception, match="the lake's storage went away"):
        run(spark, data, lake)
    assert not DeltaTable.is_deltatable(str(lake / "_cdclake" / "progress"))  # the batch is not recorded
    monkeypatch.undo()
    summary = run(spark, data, lake)  # applied once the storage is back, both tables
    assert not summary.stopped
    assert sorted(lake_rows(str(lake), "shop", "orders")) == ["[1]"]
    assert sorted(lake_rows(str(lake), "shop", "users")) == ["[1]"]

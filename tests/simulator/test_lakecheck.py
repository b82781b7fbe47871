"""The lake check that the demo and the end-to-end tests rely on: it must report, not raise."""

from __future__ import annotations

import pyarrow as pa
from deltalake import write_deltalake

from cdclake.simulator.lakecheck import differences


def test_a_lake_column_of_another_type_is_reported_not_raised(tmp_path):
    write_deltalake(str(tmp_path / "db" / "t"), pa.table({"id": [1], "day": [19724]}))  # days, not a date
    expected = {("db", "t"): {(1,): {"id": 1, "day": "2024-01-02"}}}
    problems = differences(str(tmp_path), expected, {("db", "t"): ["id"]})
    assert len(problems) == 1 and "does not fit the lake's columns" in problems[0], problems


def test_equal_and_different_values(tmp_path):
    write_deltalake(str(tmp_path / "db" / "t"), pa.table({"id": [1, 2], "f": pa.array([0.1, 2.5], pa.float32())}))
    key_names = {("db", "t"): ["id"]}
    assert differences(str(tmp_path), {("db", "t"): {(1,): {"id": 1, "f": 0.1}, (2,): {"id": 2, "f": 2.5}}},
                       key_names) == []
    problems = differences(str(tmp_path), {("db", "t"): {(1,): {"id": 1, "f": 0.2}}}, key_names)
    assert any("f: lake" in p for p in problems) and any("unexpected row" in p for p in problems)


def test_a_table_with_rows_that_the_state_lacks_is_reported_in_its_databases_only(tmp_path):
    for database, table in (("db", "t"), ("db", "old_name"), ("other", "u")):
        write_deltalake(str(tmp_path / database / table), pa.table({"id": [1]}))
    write_deltalake(str(tmp_path / "db" / "emptied"), pa.table({"id": pa.array([], pa.int64())}))
    assert differences(str(tmp_path), {("db", "t"): {(1,): {"id": 1}}}, {("db", "t"): ["id"]}) == [
        "db.old_name: unexpected table"]

"""Batch application's plain parts (``pipeline/batch.py``), on stand-ins.

The app-transaction versions a batch's commits carry (``step_versions``): what makes a replayed batch skip exactly
the commits it had made; the real path is every pipeline test, and
``test_pipeline.py::test_a_crash_between_the_clauses_of_a_statement_applies_each_clause_once`` for DDL clauses.
Which failures of a table's step stop only that table and which fail the batch (``table_failure``); the real path
is ``tests/pipeline/test_table_failures.py``."""

from __future__ import annotations

import pytest
from deltalake.exceptions import SchemaMismatchError

from cdclake.errors import LakeError, StopRequested, TableStopped
from cdclake.lake.layout import STEPS_PER_BATCH, TABLE_STEPS
from cdclake.model import ddl as DDL
from cdclake.model.types import InvalidType
from cdclake.pipeline.batch import check_version_space, step_versions, table_failure
from cdclake.spark import planner
from cdclake.spark.planner import BatchPlan, DdlStep, RowStep, Step, TableName


def plan_of(tables: dict[TableName, list[Step]]) -> BatchPlan:
    return BatchPlan(tables=tables, runs=planner._runs(tables), dead_letters=None, counts={}, last_seq={},
                     partition_ts={}, records=0, offsets={}, net=None)  # type: ignore[arg-type]


def rows(name: TableName, segment: int = 0) -> RowStep:
    return RowStep((name[0], name[1], segment), [], None, set())  # type: ignore[arg-type]


def ddl(segment: int, statement: str, seq: int | None = None, clause: int = 0) -> DdlStep:
    return DdlStep(segment, statement, "ddl", f"{segment if seq is None else seq:020d}/", DDL.parse(statement), clause)


def test_each_clause_of_a_statement_gets_a_version_of_its_own():
    users = ("shop", "users")
    plan = plan_of({users: [rows(users), ddl(0, "ALTER TABLE users DROP COLUMN a, DROP COLUMN b, ADD COLUMN c int"),
                            rows(users, 1), ddl(1, "ALTER TABLE users ALTER COLUMN d SET DEFAULT 1")]})
    first = 7 * STEPS_PER_BATCH
    # The statement that changes nothing in the lake (a default) commits nothing, so it takes no version.
    assert step_versions(plan, 7) == {users: [[first + 1], [first + 2, first + 3, first + 4], [first + 5], []]}


def test_every_table_numbers_its_own_commits_so_a_batch_may_change_thousands_of_tables():
    tables = {("db", f"t{i:04d}"): [rows(("db", f"t{i:04d}")), ddl(0, f"TRUNCATE TABLE t{i:04d}"),
                                    rows(("db", f"t{i:04d}"), 1)] for i in range(3000)}
    versions = step_versions(plan_of(tables), 2)
    for numbered in versions.values():
        assert numbered == [[2001], [2002], [2003]]  # all inside batch 2's range, below the bookkeeping's 996-999


def test_a_renamed_tables_commits_go_on_from_the_one_that_moved_its_log():
    source, target = ("shop", "users"), ("archive", "people")
    tables = {source: [rows(source), rows(source, 1), ddl(1, "RENAME TABLE shop.users TO archive.people")],
              target: [rows(target)]}
    # Sorted, the target comes first; the planner puts it after its source.
    plan = plan_of(tables)
    assert [run.name for run in plan.runs] == [source, target]
    versions = step_versions(plan, 1)
    assert versions[source] == [[1001], [1002], [1003]]
    assert versions[target] == [[1004]]  # the moved log carries 1003: a lower version would read as already applied
    chained = {**tables, target: [rows(target), ddl(0, "ALTER TABLE archive.people RENAME TO attic", seq=2)],
               ("archive", "attic"): [rows(("archive", "attic"))]}
    versions = step_versions(plan_of(chained), 1)
    assert versions[("archive", "attic")] == [[1006]]


def test_a_swap_of_names_applies_each_rename_before_the_name_is_taken_and_numbers_on_from_the_moved_logs():
    """``RENAME TABLE t TO _t_del, _t_gho TO t`` and rows of the new t after it, in one batch."""
    t, gho, old = ("shop", "t"), ("shop", "_t_gho"), ("shop", "_t_del")
    swap = {t: [rows(t), ddl(0, "RENAME TABLE shop.t TO shop._t_del", seq=5), rows(t, 1)],
            gho: [rows(gho), rows(gho, 1), ddl(0, "RENAME TABLE shop._t_gho TO shop.t", seq=5, clause=1)]}
    plan = plan_of(swap)
    assert [(run.name, run.first, run.end) for run in plan.runs] == [(t, 0, 2), (gho, 0, 3), (t, 2, 3)]
    versions = step_versions(plan, 3)
    assert versions[t] == [[3001], [3002], [3004]]  # the log moved onto t carries the rename's 3003
    assert versions[gho] == [[3001], [3002], [3003]]
    assert old not in versions


def test_more_commits_to_one_table_than_a_batch_can_number_stop_the_table_with_the_remedy():
    users = ("shop", "users")
    steps: list[Step] = []
    for segment in range(TABLE_STEPS // 2 + 1):
        steps += [rows(users, segment), ddl(segment, f"ALTER TABLE users ADD COLUMN c{segment} int")]
    versions = step_versions(plan_of({users: steps}), 3)
    with pytest.raises(TableStopped, match=r"batch 3 makes 996 commits to table shop.users .* more than the 995 a "
                                           r"batch can number: lower the source's max_records_per_batch"):
        check_version_space(users, versions[users], 3)
    check_version_space(users, versions[users][:-1], 3)  # 995 fit


@pytest.mark.parametrize("failure, reason", [
    (TableStopped("RENAME TABLE target exists"), "RENAME TABLE target exists"),
    (InvalidType("column type 'decimal(10,20)': …"), "column type 'decimal(10,20)': …"),
    (SchemaMismatchError("Cannot cast schema"), "SchemaMismatchError: Cannot cast schema"),
    (ValueError("bad value\nsecond line"), "ValueError: bad value"),
    (RuntimeError(""), "RuntimeError: "),
    (KeyError("x" * 2000), "KeyError: '" + "x" * 499),
])
def test_a_failure_of_the_tables_own_stops_the_table_with_its_reason(failure, reason):
    assert table_failure(failure) == reason


@pytest.mark.parametrize("failure", [
    StopRequested("batch 3: for the next run"), MemoryError(), OSError("Generic LocalFileSystem error"),
    PermissionError("/lake/shop/t: Permission denied"), ConnectionRefusedError(), TimeoutError(),
    LakeError("reading the lake's tombstones: no such file"),
    RuntimeError("Traceback …\ncdclake.confluent.RegistryError: schema registry http://r could not be reached\n"),
    RuntimeError("Generic error: /lake/shop/t/part-1.parquet (Read-only file system)"),
    RuntimeError("An error occurred while calling o123.collect: java.lang.OutOfMemoryError: Java heap space"),
    RuntimeError("Cannot call methods on a stopped SparkContext. SparkContext was shut down"),
])
def test_a_failure_of_the_machine_or_the_lake_fails_the_batch(failure):
    assert table_failure(failure) is None

"""Which failures of a table's step stop only that table and which fail the batch (``pipeline.table_failure``);
the real path is ``tests/pipeline/test_table_failures.py``."""

from __future__ import annotations

import pytest
from deltalake.exceptions import SchemaMismatchError

from cdclake.errors import StopRequested
from cdclake.lake.delta import LakeError, TableStopped
from cdclake.model.types import InvalidType
from cdclake.pipeline.batch import table_failure


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

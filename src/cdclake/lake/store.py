"""The lake's Delta tables through delta-rs, exactly once: opening, reading, and committing with a pipeline's
app-transaction marker (see :mod:`cdclake.lake.layout`), so that a step replayed after a crash is skipped.

Every table write of the lake goes through a :class:`Store`; the modules beside it (table writes, renames, the
bookkeeping tables, maintenance) each take one. Values reach delta-rs predicates only through
:func:`sql_literal`, column names through :func:`quote`.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from cdclake.lake import paths as lakepaths
from cdclake.lake.layout import COLUMN_CHANGE

WRITE_ATTEMPTS = 3


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def quote(name: str) -> str:
    """A column name in a delta-rs (DataFusion SQL) expression."""
    return '"' + name.replace('"', '""') + '"'


def sql_literal(text: str) -> str:
    """A string literal in a delta-rs (DataFusion SQL) predicate: the one way a value reaches one. delta-rs parses
    predicates with sqlparser's generic dialect, where a backslash is an ordinary character and a quote is doubled;
    a value with a character UTF-8 cannot hold (a lone surrogate) is refused rather than altered."""
    text.encode("utf-8")
    return "'" + text.replace("'", "''") + "'"


class Store:
    """One pipeline's access to one lake: where its tables are, and commits marked with the pipeline's app id."""

    def __init__(self, lake: str, pipeline: str, storage_options: dict[str, str] | None = None) -> None:
        self.lake = lake.rstrip("/")
        self.pipeline = pipeline
        self.app_id = f"cdclake:{pipeline}"
        self.storage_options = storage_options

    # -- locations -------------------------------------------------------------------------------
    def table_uri(self, database: str, table: str) -> str:
        """Where the source table is kept: its names as :mod:`cdclake.lake.paths` maps them, never as they are."""
        return lakepaths.table_path(self.lake, database, table)

    def own_uri(self, name: str) -> str:
        """Where the lake keeps its own table ``name`` (one of :data:`~cdclake.lake.layout.INTERNAL_TABLES`)."""
        return lakepaths.own_path(self.lake, name)

    def tables(self) -> list[tuple[str, str]]:
        """The source tables present in the lake."""
        return lakepaths.lake_tables(self.lake)

    # -- opening and making ------------------------------------------------------------------------
    def open(self, uri: str) -> DeltaTable | None:
        """The table at ``uri``; None where there is none."""
        try:
            return DeltaTable(uri, storage_options=self.storage_options)
        except TableNotFoundError:
            return None

    def reopen(self, uri: str) -> DeltaTable:
        """The table at ``uri``, which exists, at its latest version."""
        return DeltaTable(uri, storage_options=self.storage_options)

    def create(self, uri: str, schema: pa.Schema, name: str | None = None) -> DeltaTable:
        """A new, empty table of ``schema`` at ``uri``, with this Delta table ``name`` (see lakepaths.stated_name)."""
        write_deltalake(uri, schema.empty_table(), mode="append", storage_options=self.storage_options,
                        name=name, configuration={"delta.enableChangeDataFeed": "false"})
        return self.reopen(uri)

    def discard(self, uri: str) -> None:
        """Removes a table's directory: moved out of the lake at once, so that a crash while its files are deleted
        leaves no half table behind (what a crash leaves in ``_cdclake/discarded`` goes with the next one)."""
        target = lakepaths.discard_path(self.lake)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.rename(uri, target)
        shutil.rmtree(os.path.dirname(target), ignore_errors=True)

    # -- exactly once ------------------------------------------------------------------------------
    def commit(self, version: int, column_change: dict[str, Any] | None = None) -> CommitProperties:
        """The app-transaction marker; with a DROP or RENAME COLUMN the commit names it (see
        :meth:`cdclake.lake.tables.Tables.older_rows_columns`)."""
        return CommitProperties(app_transactions=[Transaction(self.app_id, version)],
                                custom_metadata=None if column_change is None else {
                                    COLUMN_CHANGE: json.dumps(column_change)})

    def done(self, uri: str, version: int) -> bool:
        """Whether the step with this version was already committed to the table at ``uri``."""
        return self.committed(self.open(uri), version)

    def committed(self, table: DeltaTable | None, version: int) -> bool:
        """Whether ``table`` carries this pipeline's marker of ``version`` or a later one."""
        committed = None if table is None else table.transaction_version(self.app_id)
        return committed is not None and committed >= version

    def append_target(self, uri: str, version: int) -> DeltaTable | str | None:
        """Where to append the step with this version: the table, opened once for the replay check and the
        write (its uri where it does not exist yet); None where the step is committed already."""
        table = self.open(uri)
        if self.committed(table, version):
            return None
        return uri if table is None else table

    def rewrite(self, table: DeltaTable, write: Callable[[DeltaTable], dict[str, Any]]) -> dict[str, Any]:
        """A MERGE or DELETE on the table, run again on its new version when another writer committed first
        (``cdclake maintain`` compacting beside a running pipeline): what each of them does depends only on the
        rows and their sequences, which compaction keeps."""
        for _ in range(WRITE_ATTEMPTS - 1):
            try:
                return write(table)
            except CommitFailedError:
                table = self.reopen(table.table_uri)
        return write(table)


def read_table(table: DeltaTable, columns: list[str] | None = None) -> pa.Table:
    """A Delta table as Arrow with plain string/binary columns (delta-rs may hand out view types, which
    not every Arrow kernel accepts)."""
    return plain_types(table.to_pyarrow_table(columns=columns))


def read_dataset(table: DeltaTable, columns: list[str] | None, where: pc.Expression) -> pa.Table:
    """The rows of a Delta table that ``where`` selects, as :func:`read_table` gives them; the files and row
    groups whose statistics rule ``where`` out are not read."""
    return plain_types(table.to_pyarrow_dataset().to_table(columns=columns, filter=where))


def plain_types(data: pa.Table) -> pa.Table:
    """``data`` with view and large string/binary columns as plain ones."""
    fields = []
    for f in data.schema:
        if pa.types.is_string_view(f.type) or pa.types.is_large_string(f.type):
            fields.append(f.with_type(pa.string()))
        elif pa.types.is_binary_view(f.type) or pa.types.is_large_binary(f.type):
            fields.append(f.with_type(pa.binary()))
        else:
            fields.append(f)
    return data.cast(pa.schema(fields))

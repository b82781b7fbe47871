"""Writes to the lake's source tables: a batch's net changes MERGEd by sequence (never over a newer delete), DDL
applied (TRUNCATE, DROP TABLE, column changes), and the schema evolved to hold what arrives. Every write carries
its step's marker (:class:`~cdclake.lake.store.Store`), so that a replayed step is skipped."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Field, write_deltalake

from cdclake.errors import TableStopped
from cdclake.lake import paths as lakepaths
from cdclake.lake.evolution import (
    cast_or_stop,
    holds_values,
    is_text,
    merged_into,
    retyped,
    same_type,
    widens,
    written_before,
)
from cdclake.lake.layout import COLUMN_CHANGE
from cdclake.lake.store import Store, quote, sql_literal
from cdclake.lake.tombstones import Tombstones
from cdclake.model import ddl as DDL

NO_ROWS = {"inserted": 0, "updated": 0, "deleted": 0}


class Tables:
    def __init__(self, store: Store, tombstones: Tombstones) -> None:
        self.store = store
        self.tombstones = tombstones

    # -- rows ------------------------------------------------------------------------------------------
    def apply_rows(self, database: str, table: str, changes: pa.Table, version: int,
                   nulls_only: set[str] | frozenset[str] = frozenset()) -> dict[str, int]:
        """MERGE one table's net changes: a change applies only when its sequence is newer than the
        row's, and never over a newer delete (tombstone)."""
        uri = self.store.table_uri(database, table)
        if changes.num_rows == 0:
            return dict(NO_ROWS)
        # Opened once for all the checks below: opening reads the table's log since its last checkpoint, which
        # a table written every batch makes up to a hundred commits long.
        target = self.store.open(uri)
        deletes_only = target is None and pc.all(pc.equal(changes["_cdc_op"], "d")).as_py()
        if self.store.committed(target, version) or deletes_only:
            # Deletes alone make no table: their images state no value, so a table made from them would take the
            # types their messages state for NULL, which may be stand-ins (DTS cannot tell a NULL BLOB from TEXT).
            return dict(NO_ROWS)
        return self.merge(database, table, target, changes, self.store.commit(version), nulls_only)

    def merge(self, database: str, table: str, target: DeltaTable | None, changes: pa.Table,
              commit: CommitProperties | None, nulls_only: set[str] | frozenset[str] = frozenset()) -> dict[str, int]:
        """``changes`` MERGEd into the table (``target``, if open already; made if missing), with ``commit``'s
        marker; returns the rows inserted, updated and deleted."""
        uri = self.store.table_uri(database, table)
        changes = self.tombstones.drop_buried(database, table, changes)
        if target is not None:
            changes = self._older_rows_columns(target, changes)
        changes = self._keep_lake_types(target, changes, nulls_only)
        data_columns = [n for n in changes.column_names if n not in ("_cdc_op",)]
        target = self.ensure_table(uri, changes.select(data_columns).schema, target,
                                   lakepaths.stated_name(database, table))
        metrics = self.store.rewrite(target, lambda target: (
            target.merge(changes, predicate="t._cdc_key = s._cdc_key", source_alias="s", target_alias="t",
                         commit_properties=commit, merge_schema=False)
            .when_matched_update(updates={quote(n): f"s.{quote(n)}" for n in data_columns},
                                 predicate="s._cdc_op <> 'd' AND s._cdc_seq > t._cdc_seq")
            .when_matched_delete(predicate="s._cdc_op = 'd' AND s._cdc_seq > t._cdc_seq")
            .when_not_matched_insert(updates={quote(n): f"s.{quote(n)}" for n in data_columns},
                                     predicate="s._cdc_op <> 'd'")
            .execute()))
        return {"inserted": metrics.get("num_target_rows_inserted", 0),
                "updated": metrics.get("num_target_rows_updated", 0),
                "deleted": metrics.get("num_target_rows_deleted", 0)}

    def _keep_lake_types(self, table: DeltaTable | None, changes: pa.Table,
                         nulls_only: set[str] | frozenset[str]) -> pa.Table:
        """Keep the lake column's type where it already holds the batch's values: all-NULL columns (their
        message may state a stand-in type for NULL) and columns whose type this batch inferred narrower
        (a DECIMAL without stated precision whose values happen to be short)."""
        if table is None:
            return changes
        existing = pa.schema(table.schema().to_arrow())
        for index, field in enumerate(changes.schema):
            if field.name not in existing.names or field.name.startswith("_cdc_"):
                continue
            lake_type = existing.field(field.name).type
            if same_type(field.type, lake_type):
                continue
            if field.name in nulls_only:
                changes = changes.set_column(index, pa.field(field.name, lake_type),
                                             pa.nulls(changes.num_rows, lake_type))
            elif widens(field.type, lake_type) and (is_text(field.type) or not is_text(lake_type)
                                                    or holds_values(table, field.name)):
                # A text column that has never held a value took a stand-in type: the lake takes the batch's type
                # instead (ensure_table), rather than keeping numbers or bytes as text.
                changes = changes.set_column(index, pa.field(field.name, lake_type),
                                             cast_or_stop(changes[field.name], field.name, lake_type))
        return changes

    def ensure_table(self, uri: str, schema: pa.Schema, table: DeltaTable | None,
                     name: str | None = None) -> DeltaTable:
        """The table at ``uri`` (``table``, if open already) with every column of ``schema``: made if missing, with
        this Delta table ``name`` (see lakepaths.stated_name)."""
        if table is None:
            return self.store.create(uri, schema, name)
        existing = pa.schema(table.schema().to_arrow())
        missing = [f for f in schema if f.name not in existing.names]
        if missing:
            table.alter.add_columns([Field.from_arrow(f.with_nullable(True)) for f in missing])
            table = self.store.reopen(uri)
        for field in schema:
            if field.name in existing.names and not same_type(existing.field(field.name).type, field.type):
                self._overwrite(table, partial(retyped, column=field.name, new_type=field.type), None)
                table = self.store.reopen(uri)
        return table

    def _overwrite(self, table: DeltaTable, reshape: Callable[[pa.Table], pa.Table], version: int | None,
                   column_change: dict[str, Any] | None = None) -> None:
        """The table rewritten whole in a new shape (a column dropped, renamed or widened), one batch of rows after
        another, so that a table larger than memory can be rewritten. ``reshape`` sees each batch apart: a
        TableStopped it raises for any of them stops the rewrite before its commit, and the table is unchanged."""
        dataset = table.to_pyarrow_dataset()
        schema = reshape(dataset.schema.empty_table()).schema  # also the checks of the shape alone, before writing
        stopped: list[TableStopped] = []

        def reshaped() -> Iterator[pa.RecordBatch]:
            try:
                for rows in dataset.to_batches(batch_readahead=1, fragment_readahead=1):
                    yield from reshape(pa.Table.from_batches([rows])).cast(schema).to_batches()
            except TableStopped as exc:
                stopped.append(exc)
                raise

        try:
            write_deltalake(table.table_uri, pa.RecordBatchReader.from_batches(schema, reshaped()), mode="overwrite",
                            schema_mode="overwrite", storage_options=self.store.storage_options,
                            commit_properties=None if version is None else self.store.commit(version, column_change))
        except Exception:
            if stopped:  # delta-rs reports it as an error of the stream it read
                raise stopped[0] from None
            raise

    def _older_rows_columns(self, table: DeltaTable, changes: pa.Table) -> pa.Table:
        """Rows written before a DROP or RENAME COLUMN that the lake has applied (a partition read behind the one
        that sent the statement) carry the column as it was: their values go to the renamed column, or away with
        the dropped one, rather than bring the old column back. The commits that applied those statements name
        them; a column the lake never had is left to the schema's evolution."""
        lake = set(pa.schema(table.schema().to_arrow()).names)
        pending = [n for n in changes.column_names if n not in lake and not n.startswith("_cdc_")]
        if not pending:
            return changes
        changed = [json.loads(commit[COLUMN_CHANGE]) for commit in table.history() if commit.get(COLUMN_CHANGE)]
        while pending:
            name = pending.pop(0)
            statement = next((c for c in changed if name in (c.get("drop"), c.get("rename", [None])[0])), None)
            if statement is None or name not in changes.column_names:
                continue
            older = written_before(changes, statement["seq"])
            values = changes[name]
            if "rename" in statement:
                new = statement["rename"][1]
                if new in changes.column_names:
                    moved = pc.if_else(older, cast_or_stop(values, name, changes.schema.field(new).type), changes[new])
                    changes = changes.set_column(changes.column_names.index(new), new, moved)
                else:
                    changes = changes.append_column(new, pc.if_else(older, values, pa.nulls(len(values), values.type)))
                if new not in lake:
                    pending.append(new)  # renamed again since
            newer = pc.if_else(older, pa.nulls(len(values), values.type), values)
            index = changes.column_names.index(name)
            changes = (changes.remove_column(index) if newer.null_count == len(newer)
                       else changes.set_column(index, name, newer))
        return changes

    # -- DDL ----------------------------------------------------------------------------------------------
    def apply_ddl(self, database: str, table: str, action: DDL.Action, version: int, seq: str,
                  lake_type: Any = None) -> str:
        """Apply one DDL action but RENAME TABLE (:mod:`cdclake.lake.renames`; ``seq``: the statement's source
        sequence); returns what was done."""
        uri = self.store.table_uri(database, table)
        if self.store.done(uri, version):
            return "already applied"
        current = self.store.open(uri)
        if isinstance(action, DDL.Unsupported):
            raise TableStopped(action.reason)
        if current is None:
            return "no lake table yet"
        if isinstance(action, DDL.Truncate | DDL.DropTable):
            # Rows newer than the statement (already here) stay. A change older than it may still arrive from
            # another partition: the caller records a table-wide tombstone (lake.tombstones.tombstones) to bury it.
            self.store.rewrite(current, lambda target: target.delete(f"_cdc_seq < {sql_literal(seq)}",
                                                                     commit_properties=self.store.commit(version)))
            if isinstance(action, DDL.DropTable) and "://" not in uri and DeltaTable(uri).to_pyarrow_dataset(
                    ).count_rows() == 0:
                self.store.discard(uri)
            return "truncated" if isinstance(action, DDL.Truncate) else "dropped"
        existing = pa.schema(current.schema().to_arrow())
        if isinstance(action, DDL.AddColumn):
            if action.name in existing.names:
                return "column exists"
            field = pa.field(action.name, lake_type, nullable=True)
            current.alter.add_columns([Field.from_arrow(field)], commit_properties=self.store.commit(version))
            return f"added column {action.name}"
        if isinstance(action, DDL.DropColumn):
            if action.name not in existing.names:
                return "no such column"
            self._overwrite(current, lambda rows: rows.drop_columns([action.name]), version,
                            {"drop": action.name, "seq": seq})
            return f"dropped column {action.name}"
        if isinstance(action, DDL.RenameColumn | DDL.ModifyColumn) and action.new_name:
            if action.name not in existing.names:
                return "no such column"
            # Delta, like MySQL, does not tell column names apart by case alone.
            taken = [n for n in existing.names if n.lower() == action.new_name.lower() and n != action.name]

            def renamed(rows: pa.Table) -> pa.Table:
                # CHANGE COLUMN may also change the type: one rewrite does both, under the clause's one version.
                if taken:
                    rows = merged_into(rows, action.name, taken[0], seq)
                rows = rows.rename_columns({action.name: action.new_name})
                return retyped(rows, action.new_name, lake_type) if isinstance(action, DDL.ModifyColumn) else rows

            self._overwrite(current, renamed, version, {"rename": [action.name, action.new_name], "seq": seq})
            return f"renamed column {action.name} to {action.new_name}"
        if isinstance(action, DDL.ModifyColumn):
            if action.name not in existing.names or same_type(existing.field(action.name).type, lake_type):
                return "unchanged"
            self._overwrite(current, lambda rows: retyped(rows, action.name, lake_type), version)
            return f"modified column {action.name}"
        raise TableStopped(f"unknown DDL action {action!r}")


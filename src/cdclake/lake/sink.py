"""What the pipeline needs from a lake sink: the planner's steps applied exactly once, plus the lake's own
bookkeeping (dead letters, tombstones, progress, held changes).

``cdclake.lake.delta.DeltaSink`` (delta-rs) is the implementation here; the planner imports this module only.
A cluster with Delta's Spark extension can implement the same interface with Spark's ``MERGE INTO``
(``apply_rows`` is the one step that moves the data; the rest is bookkeeping): every method that writes gets the
step's ``version`` and must skip the write when the target already carries that app-transaction marker, which
is what makes a replayed batch harmless.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import pyarrow as pa

from cdclake.model import ddl as DDL

if TYPE_CHECKING:
    from cdclake.lake.progress import History


class Rename(NamedTuple):
    """A RENAME TABLE the lake applied: the table's changes older than ``seq`` are the new table's (the planner
    routes them there, the lake's tombstones follow them back)."""
    database: str
    table: str
    seq: str
    new_database: str
    new_table: str


class Sink(Protocol):
    pipeline: str

    # -- applying a batch's plan -----------------------------------------------------------------------
    def apply_rows(self, database: str, table: str, changes: pa.Table, version: int,
                   nulls_only: set[str] | frozenset[str] = frozenset()) -> dict[str, int]: ...

    def apply_ddl(self, database: str, table: str, action: DDL.Action, version: int, seq: str,
                  lake_type: Any = None) -> str: ...

    # Whether the rename with this version was applied (a replayed batch skips the table's steps up to it).
    def renamed(self, database: str, table: str, action: DDL.RenameTable, version: int, seq: str) -> bool: ...

    # Every RENAME TABLE applied to the lake (the planner gives the old name's older changes to the new table).
    def renames(self) -> list[Rename]: ...

    def record_tombstones(self, tombstones: pa.Table, version: int) -> None: ...

    def expire_tombstones(self) -> int: ...

    def write_dead_letters(self, rows: pa.Table, batch: int, version: int) -> int: ...

    def compact_own_tables(self) -> list[str]: ...

    # -- where the pipeline stands -----------------------------------------------------------------------
    def record_progress(self, progress: dict[str, Any], version: int) -> None: ...

    def history(self) -> History: ...

    def last_batch(self) -> int | None: ...

    # The last batch with a commit anywhere in the lake, also one a crash cut short (a new checkpoint goes on above).
    def last_marked_batch(self) -> int | None: ...

    def progress_since(self, batch: int) -> list[dict[str, Any]]: ...

    def applied_offsets(self) -> dict[str, dict[int, int]]: ...

    def pin_kafka_starts(self, offsets: dict[str, dict[int, int]]) -> None: ...

    # -- consistency = "resolved-ts" ---------------------------------------------------------------------
    def hold(self, rows: pa.Table, batch: int, version: int) -> None: ...

    def held(self, batch: int | None) -> pa.Table | None: ...

    def forget_held(self, before: int) -> None: ...

    def publish_consistency(self, database: str, table: str, commit_ts: int, version: int) -> bool: ...

"""Integrity checks on decoded change events: the vocabulary of one record's verification (its status and
:class:`RowCheck`), shared by TiCDC's row checksum (:mod:`cdclake.formats.ticdc.checksum`) and ``cdclake verify``."""

from __future__ import annotations

from typing import Any, Final

import msgspec

from cdclake.model.events import Checksum

OK: Final = "ok"
MISMATCH: Final = "mismatch"  # the recomputed checksum differs from the one in the message
CORRUPTED: Final = "corrupted"  # the producer itself flagged the row (TiCDC's ``_tidb_corrupted``)
SKIPPED: Final = "skipped"  # nothing to verify by design: a delete, a row without checksum, a marker
FAILED: Final = "failed"  # the record could not be decoded at all
STATUSES: Final = (OK, MISMATCH, CORRUPTED, SKIPPED, FAILED)


class RowCheck(msgspec.Struct, kw_only=True):
    """The verification of one record, for ``cdclake verify``: what was checked and how it came out."""

    status: str
    reason: str = ""
    where: str = ""  # the record's Kafka coordinates
    database: str | None = None
    table: str | None = None
    key: dict[str, Any] | None = None
    commit_ts: int | None = None
    checksum: Checksum | None = None

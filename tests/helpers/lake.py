"""Reading lake tables back, and the typed value a canonical value of a source type must become there."""

from __future__ import annotations

import base64
import datetime as dt
import json
import struct
from decimal import Decimal
from typing import Any

from deltalake import DeltaTable

from cdclake.lake.paths import table_path
from cdclake.model import types as T
from cdclake.model import values as V
from cdclake.model.events import Column
from cdclake.model.types import parse_type


def lake_rows(lake: str, database: str, table: str) -> dict[str, dict[str, Any]]:
    """Rows by ``_cdc_key``, without the bookkeeping columns."""
    rows = DeltaTable(table_path(lake, database, table)).to_pyarrow_table().to_pylist()
    return {r["_cdc_key"]: {k: v for k, v in r.items() if not k.startswith("_cdc_")} for r in rows}


def typed(value: Any, type_text: str) -> Any:
    """What the lake must hold for a canonical value of this source type (independent of Spark)."""
    if value is None:
        return None
    t = parse_type(type_text)
    f = t.family
    if f == T.INTEGER:
        return Decimal(value) if t.unsigned and t.bits == 64 else int(value)
    if f == T.BIT:
        return Decimal(value) if (t.length or 1) > 63 else int(value)
    if f == T.YEAR:
        return int(value)
    if f == T.DECIMAL:
        return Decimal(value) if (t.length or 10) <= 38 else value
    if f == T.FLOAT:
        return struct.unpack("f", struct.pack("f", value))[0]
    if f == T.DOUBLE:
        return float(value)
    if f == T.BOOLEAN:
        return bool(value)
    if f == T.DATE:
        return dt.date.fromisoformat(value) if not V.is_zero_date(value) else None
    if f == T.DATETIME:
        return V.parse_datetime_text(value) if not V.is_zero_date(value) else None
    if f == T.TIMESTAMP:
        return V.parse_datetime_text(value).replace(tzinfo=dt.UTC) if not V.is_zero_date(value) else None
    if f == T.BINARY:
        return base64.b64decode(value)
    if isinstance(value, str):
        return value
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


def typed_row(row: dict[str, Any], columns: list[Column]) -> dict[str, Any]:
    types = {c.name: c.type for c in columns}
    return {name: typed(value, types.get(name, "unknown")) for name, value in row.items()}

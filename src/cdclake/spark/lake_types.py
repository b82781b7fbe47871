"""Source column types → lake (Spark/Delta) types, without loss.

| source type | lake type |
|---|---|
| TINYINT … BIGINT | the smallest integer type holding the whole range: TINYINT UNSIGNED → SMALLINT, |
|  | INT UNSIGNED → BIGINT; TINYINT(1) stays an integer |
| BIGINT UNSIGNED | DECIMAL(20,0) |
| DECIMAL(p,s), p ≤ 38 | DECIMAL(p,s) (p > 38: STRING, the exact text) |
| FLOAT / DOUBLE | FLOAT / DOUBLE |
| BIT(n) | BIGINT (DECIMAL(20,0) for n = 64, or n not stated) |
| BOOLEAN | BOOLEAN |
| YEAR | INT |
| DATE | DATE |
| DATETIME | TIMESTAMP_NTZ |
| TIMESTAMP | TIMESTAMP (UTC instant) |
| CHAR / VARCHAR / TEXT | STRING |
| BINARY / VARBINARY / BLOB / GEOMETRY | BINARY |
| TIME, JSON, ENUM, SET, VECTOR | STRING (canonical text) |
| unknown (formats that state no type) | STRING |

Values that do not fit (MySQL zero dates such as ``0000-00-00``) become NULL in the typed column. A type with a
parameter out of range (``DECIMAL(10,20)``, ``DATETIME(9)``) has no lake type: it stops its table.
"""

from __future__ import annotations

import pyarrow as pa

from cdclake.model import types as T
from cdclake.model.types import SqlType

_SIGNED = {8: "TINYINT", 16: "SMALLINT", 24: "INT", 32: "INT", 64: "BIGINT"}
_UNSIGNED = {8: "SMALLINT", 16: "INT", 24: "INT", 32: "BIGINT", 64: "DECIMAL(20,0)"}
_FIXED = {T.FLOAT: "FLOAT", T.DOUBLE: "DOUBLE", T.BOOLEAN: "BOOLEAN", T.YEAR: "INT", T.DATE: "DATE",
          T.DATETIME: "TIMESTAMP_NTZ", T.TIMESTAMP: "TIMESTAMP", T.BINARY: "BINARY"}


_ARROW = {"TINYINT": pa.int8(), "SMALLINT": pa.int16(), "INT": pa.int32(), "BIGINT": pa.int64(),
          "FLOAT": pa.float32(), "DOUBLE": pa.float64(), "BOOLEAN": pa.bool_(), "DATE": pa.date32(),
          "TIMESTAMP_NTZ": pa.timestamp("us"), "TIMESTAMP": pa.timestamp("us", tz="UTC"), "STRING": pa.string(),
          "BINARY": pa.binary()}


def lake_type(t: SqlType) -> str:
    """The Spark SQL type a column of source type ``t`` is stored in; :class:`InvalidType` for a type
    with a parameter out of range (see :func:`~cdclake.model.types.check_type`)."""
    T.check_type(t)
    if t.family == T.INTEGER:
        bits = t.bits or 64
        return (_UNSIGNED if t.unsigned else _SIGNED)[bits]
    if t.family == T.DECIMAL:
        precision = t.length or 10
        return f"DECIMAL({precision},{t.scale or 0})" if precision <= 38 else "STRING"
    if t.family == T.BIT:
        # A BIT whose width the message does not state (TiCDC's base type names) may be 64 bits wide.
        return "BIGINT" if t.length is not None and t.length <= 63 else "DECIMAL(20,0)"
    return _FIXED.get(t.family, "STRING")


def arrow_type(t: SqlType) -> pa.DataType:
    """The Arrow type of the lake column (what delta-rs stores)."""
    target = lake_type(t)
    if target.startswith("DECIMAL"):
        return pa.decimal128(t.length or 10, t.scale or 0) if t.family == T.DECIMAL else pa.decimal128(20, 0)
    return _ARROW[target]


def cast_sql(text_expr: str, t: SqlType) -> str:
    """A Spark SQL expression turning canonical text into the lake type (NULL where it cannot)."""
    target = lake_type(t)
    if target == "BINARY":
        return f"try_to_binary({text_expr}, 'base64')"
    if target == "STRING":
        return text_expr
    return f"try_cast({text_expr} AS {target})"

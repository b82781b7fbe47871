"""Schema evolution of a lake table: which type changes keep every value, and the reshaping of rows when a column
is widened, renamed onto another or read from rows older than a DDL statement. A change that would lose values
stops the table (:class:`~cdclake.errors.TableStopped`) rather than alter them."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from cdclake.errors import TableStopped


def merged_into(data: pa.Table, old: str, new: str, seq: str) -> pa.Table:
    """Column ``old`` renamed at ``seq`` onto ``new``, which the lake has already: a partition read ahead of the
    one with the statement brought rows of the new name first, so a row written after the rename holds its value
    under the new name and an older row under the old one."""
    old_type, new_type = data.schema.field(old).type, data.schema.field(new).type
    common = new_type if widens(old_type, new_type) else old_type if widens(new_type, old_type) else None
    if common is None:
        raise TableStopped(f"column {old} cannot be renamed to {new}: the lake table has a column {new} of type "
                           f"{new_type}, which cannot hold its values ({old_type}) nor they its values")
    older = written_before(data, seq)
    if pc.any(pc.and_(older, pc.is_valid(data[new]))).as_py():
        raise TableStopped(f"column {old} cannot be renamed to {new}: the lake table has a column {new} with values "
                           f"that rows written before the rename gave it")
    values = pc.if_else(older, cast_or_stop(data[old], old, common), cast_or_stop(data[new], new, common))
    data = data.drop_columns([new])
    return data.set_column(data.schema.get_field_index(old), pa.field(old, common), values)


def written_before(rows: pa.Table, seq: str) -> pa.ChunkedArray:
    """Which rows (lake rows or changes) a DDL statement at ``seq`` followed: theirs is the older sequence."""
    return pc.less(rows["_cdc_seq"], pa.scalar(seq, rows.schema.field("_cdc_seq").type))


def retyped(data: pa.Table, column: str, new_type: pa.DataType) -> pa.Table:
    """``data`` with ``column`` of ``new_type``: a type that holds every value of the old one, or any type where the
    column holds no value (its type was the stand-in that a message stated for NULL)."""
    old_type = data.schema.field(column).type
    if same_type(old_type, new_type):
        return data
    if not widens(old_type, new_type) and data[column].null_count < data.num_rows:
        raise TableStopped(f"column {column} cannot change from {old_type} to {new_type} without loss")
    return data.set_column(data.schema.get_field_index(column), pa.field(column, new_type),
                           cast_or_stop(data[column], column, new_type))


def cast_or_stop(values: pa.ChunkedArray, column: str, new_type: pa.DataType) -> pa.ChunkedArray:
    """Bytes become text only where they are UTF-8: other casts that :func:`widens` allows cannot fail."""
    try:
        return pc.cast(values, new_type)
    except pa.ArrowInvalid as exc:
        raise TableStopped(f"column {column}: its values cannot become {new_type}: {exc}") from None


def holds_values(table: DeltaTable, column: str) -> bool:
    """Whether any row of the table has a value in ``column``."""
    dataset = table.to_pyarrow_dataset()
    return dataset.scanner(columns=[column], filter=pc.field(column).is_valid()).head(1).num_rows > 0


def is_text(data_type: pa.DataType) -> bool:
    """Whether the type is Arrow text (plain or large)."""
    return pa.types.is_string(data_type) or pa.types.is_large_string(data_type)


def same_type(a: pa.DataType, b: pa.DataType) -> bool:
    """Whether two types are one in the lake (plain and large text, or binary, are)."""
    return a == b or (pa.types.is_string(a) and pa.types.is_large_string(b)) or (
        pa.types.is_large_string(a) and pa.types.is_string(b)) or (
        pa.types.is_binary(a) and pa.types.is_large_binary(b)) or (
        pa.types.is_large_binary(a) and pa.types.is_binary(b))


_INT_ORDER: Sequence[pa.DataType] = (pa.int8(), pa.int16(), pa.int32(), pa.int64())


def widens(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether every value of ``old`` is exactly representable in ``new``."""
    if is_text(new):
        return True
    if old in _INT_ORDER and new in _INT_ORDER:
        return _INT_ORDER.index(old) <= _INT_ORDER.index(new)
    if old in _INT_ORDER and pa.types.is_decimal(new):
        digits = {pa.int8(): 3, pa.int16(): 5, pa.int32(): 10, pa.int64(): 19}[old]
        return new.precision - new.scale >= digits
    if pa.types.is_decimal(old) and pa.types.is_decimal(new):
        return new.scale >= old.scale and new.precision - new.scale >= old.precision - old.scale
    if pa.types.is_float32(old) and pa.types.is_float64(new):
        return True
    return pa.types.is_date32(old) and pa.types.is_timestamp(new) and new.tz is None

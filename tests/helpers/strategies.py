"""Hypothesis strategies for canonical values and rows, shared by every format's round-trip test."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

from hypothesis import strategies as st

from cdclake.model import types as T
from cdclake.model import values as V
from cdclake.model.events import Column
from cdclake.model.types import SqlType, parse_type
from cdclake.simulator import ALL_TYPES  # one column of every MySQL/TiDB type family the formats carry

_MIN_DATETIME = dt.datetime(1000, 1, 1)
_MAX_DATETIME = dt.datetime(9999, 12, 31, 23, 59, 59, 999999)


def _fsp_micros(fsp: int) -> st.SearchStrategy[int]:
    step = 10 ** (6 - fsp)
    return st.integers(0, 10**fsp - 1).map(lambda n: n * step)


def canonical_value(t: SqlType) -> st.SearchStrategy[object]:
    """Canonical values (as :mod:`cdclake.model.values` defines them) of one column type, never NULL."""
    f = t.family
    if f == T.INTEGER:
        bits = t.bits or 64
        if t.unsigned:
            return st.integers(0, 2**bits - 1)
        return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    if f == T.DECIMAL:
        precision, scale = t.length or 10, t.scale or 0
        bound = 10 ** precision - 1
        return st.integers(-bound, bound).map(
            lambda n: V.decimal_text(Decimal(n).scaleb(-scale, V.DECIMAL_CONTEXT), scale))  # exact beyond 28 digits
    if f == T.FLOAT:
        return st.floats(width=32, allow_nan=False, allow_infinity=False).map(lambda x: x + 0.0)
    if f == T.DOUBLE:
        return st.floats(allow_nan=False, allow_infinity=False).map(lambda x: x + 0.0)
    if f == T.BIT:
        return st.integers(0, 2 ** (t.length or 1) - 1)
    if f == T.DATE:
        return st.dates(dt.date(1000, 1, 1), dt.date(9999, 12, 31)).map(dt.date.isoformat)
    if f in (T.DATETIME, T.TIMESTAMP):
        low = _MIN_DATETIME if f == T.DATETIME else dt.datetime(1970, 1, 2)
        high = _MAX_DATETIME if f == T.DATETIME else dt.datetime(2038, 1, 18)
        fmt = V.datetime_text if f == T.DATETIME else V.timestamp_text
        return st.tuples(st.datetimes(low, high).map(lambda d: d.replace(microsecond=0)),
                         _fsp_micros(t.fsp)).map(lambda p: fmt(p[0].replace(microsecond=p[1]), t.fsp))
    if f == T.TIME:
        limit = 838 * 3600 + 59 * 60 + 59
        return st.tuples(st.integers(-limit, limit), _fsp_micros(t.fsp)).map(
            lambda p: V.time_text_from_micros(p[0] * 1_000_000 + (p[1] if p[0] >= 0 else -p[1]), t.fsp))
    if f == T.YEAR:
        return st.integers(1901, 2155)
    if f == T.TEXT:
        return st.text(st.characters(exclude_categories=("Cs",)), max_size=(t.length or 40))
    if f == T.BINARY:
        return st.binary(max_size=(t.length or 48)).map(V.b64)
    if f == T.JSON:
        scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8)
        docs = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                            | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=6)
        return docs.map(lambda d: json.dumps(d, separators=(",", ":"), ensure_ascii=False))
    if f == T.ENUM:
        return st.sampled_from(t.members)
    if f == T.SET:
        return st.lists(st.sampled_from(t.members), unique=True).map(
            lambda chosen: ",".join(m for m in t.members if m in chosen))
    raise ValueError(f"no strategy for {t}")


def columns_of(type_texts: tuple[str, ...] = ALL_TYPES) -> list[Column]:
    """``id`` (bigint key) followed by one nullable column per type, named ``c<i>_<base name>``."""
    cols = [Column("id", "bigint", key=True, nullable=False)]
    cols += [Column(f"c{i}_{parse_type(text).name}", text, nullable=True) for i, text in enumerate(type_texts)]
    return cols


@st.composite
def rows(draw: st.DrawFn, columns: list[Column]) -> dict[str, object]:
    """A whole row over ``columns``; nullable columns are sometimes NULL."""
    row: dict[str, object] = {}
    for col in columns:
        value = canonical_value(parse_type(col.type))
        row[col.name] = draw(value if col.nullable is False else st.none() | value)
    return row

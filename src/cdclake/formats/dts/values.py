"""DTS values as canonical values: DateTime components as DATE, TIME, DATETIME or YEAR text, timestamps with
a time zone in UTC, decimals at their scale."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from cdclake.formats.avro.reader import read_long
from cdclake.formats.dts.types import KIND_DATE, KIND_DATETIME, KIND_INFER, KIND_TIME, KIND_YEAR
from cdclake.model import values as V

NOT_CAPTURED: Final = object()  # EmptyObject.NONE: no value was captured for the column


def _fraction(value: int, nanos: bool) -> str:
    if nanos:
        if value % 1000:
            return ".%09d" % value  # noqa: UP031 — printf formatting is twice as fast here
        value //= 1000
    if not 0 <= value <= 999_999:
        raise ValueError(f"fraction {value} is outside 0..999999 microseconds")
    return ".%06d" % value  # noqa: UP031


def datetime_text(parts: list[int | None], kind: str, nanos: bool) -> Any:
    """A DateTime's components as DATE / DATETIME / TIME text or a YEAR number, by the column's kind
    (inferred from the components present when the type code does not say)."""
    year, month, day, hour, minute, second, frac = parts
    if kind == KIND_DATETIME and year is not None and year >= 0 and month is not None and day is not None:
        text = "%04d-%02d-%02d %02d:%02d:%02d" % (year, month, day, hour or 0, minute or 0, second or 0)  # noqa: UP031
        return text + _fraction(frac, nanos) if frac else text
    if kind == KIND_INFER:
        if year is not None and hour is not None:
            kind = KIND_DATETIME
        elif year is not None and month is not None:
            kind = KIND_DATE
        elif year is not None:
            kind = KIND_YEAR
        else:
            kind = KIND_TIME
    if kind == KIND_YEAR:
        if year is None:
            raise ValueError("YEAR value without a year")
        return year
    if kind == KIND_TIME:
        h, m, s, f = hour or 0, minute or 0, second or 0, frac or 0
        # A negative TIME or interval carries the sign in every component; only some may be non-zero.
        sign = "-" if h < 0 or m < 0 or s < 0 or f < 0 or (day or 0) < 0 else ""
        text = "%02d:%02d:%02d" % (abs(h), abs(m), abs(s))  # noqa: UP031
        if f:
            text += _fraction(abs(f), nanos)
        if year is not None or day is not None:  # an interval DAY TO SECOND
            return f"{sign}{abs(day or 0)} {text}"
        return sign + text
    if year is None or month is None:
        raise ValueError(f"{kind.upper()} value without year or month")
    if day is None:  # an interval YEAR TO MONTH: '-0-2' is year 0, month -2
        return f"{'-' if year < 0 or month < 0 else ''}{abs(year)}-{abs(month):02d}"
    head = "-%04d" % -year if year < 0 else "%04d" % year  # noqa: UP031
    if kind == KIND_DATE:
        return "%s-%02d-%02d" % (head, month, day)  # noqa: UP031
    text = "%s-%02d-%02d %02d:%02d:%02d" % (head, month, day, hour or 0, minute or 0, second or 0)  # noqa: UP031
    return text + _fraction(frac, nanos) if frac else text


_OFFSET = re.compile(r"^(?:GMT|UTC)?([+-])(\d{1,2})(?::?(\d{2}))?$", re.IGNORECASE)


def _zone(name: str) -> dt.tzinfo:
    match = _OFFSET.match(name.strip())
    try:
        if match:
            sign, hours, minutes = match.groups()
            return V.zone(f"{sign}{int(hours):02d}:{minutes or '00'}")
        return V.zone(name.strip())
    except (ValueError, KeyError) as exc:
        raise ValueError(f"unknown time zone {name!r}") from exc


def zoned_text(parts: list[int | None], zone_name: str, nanos: bool) -> str:
    year, month, day, hour, minute, second, frac = parts
    fraction = frac or 0
    micros = fraction // 1000 if nanos else fraction
    if year is None or month is None or day is None:  # a time with zone (PostgreSQL timetz)
        return f"{hour or 0:02d}:{minute or 0:02d}:{second or 0:02d}{_fraction(fraction, nanos) if frac else ''}" \
               f"{zone_name}"
    try:
        moment = dt.datetime(year, month, day, hour or 0, minute or 0, second or 0, micros, tzinfo=_zone(zone_name))
    except (ValueError, OverflowError) as exc:
        raise ValueError(f"bad timestamp with time zone {parts} {zone_name!r}: {exc}") from None
    return V.timestamp_text(moment)


def decimal_text(text: str, scale: int) -> str:
    if scale < 0:
        return text
    dot = text.find(".")
    digits = 0 if dot < 0 else len(text) - dot - 1
    if digits == scale and "E" not in text and "e" not in text:
        return text
    try:
        return V.decimal_text(Decimal(text), scale)
    except InvalidOperation:
        return text  # NaN / Infinity of PostgreSQL NUMERIC stay text


def datetime_parts(data: bytes, pos: int) -> tuple[list[int | None], int]:
    """The seven ``[null, int]`` components of a DateTime."""
    parts: list[int | None] = [None] * 7
    for i in range(7):
        b = data[pos]
        if b == 0:
            pos += 1
            continue
        if b != 2:
            raise ValueError(f"DateTime component: union branch {b >> 1} of [null, int]")
        c = data[pos + 1]
        if c < 0x80:
            parts[i] = (c >> 1) ^ -(c & 1)
            pos += 2
            continue
        d = data[pos + 2]
        if d < 0x80:  # two bytes: a year
            n = (c & 0x7F) | (d << 7)
            parts[i] = (n >> 1) ^ -(n & 1)
            pos += 3
        else:
            parts[i], pos = read_long(data, pos + 1)
    return parts, pos


def inferred_temporal(parts: list[int | None]) -> str:
    year, month, _, hour = parts[0], parts[1], parts[2], parts[3]
    if year is not None and hour is not None:
        return "datetime"
    if year is not None and month is not None:
        return "date"
    if year is not None:
        return "year"
    return "time"


_DECIMAL_TYPES: dict[tuple[int, int], str] = {}
_DATES: dict[int, str] = {}


def decimal_type(precision: int, scale: int) -> str:
    text = _DECIMAL_TYPES.get((precision, scale))
    if text is None:
        text = f"decimal({precision},{scale})" if precision > 0 <= scale else "decimal"
        if len(_DECIMAL_TYPES) < 4096:
            _DECIMAL_TYPES[(precision, scale)] = text
    return text


def utc_text(seconds: int, micros: int) -> str:
    """``values.timestamp_text_from_micros`` for a Timestamp's seconds and micros, with the date cached."""
    if not 0 <= micros <= 999_999:
        raise ValueError(f"Timestamp fraction {micros} is outside 0..999999 microseconds")
    days, rest = divmod(seconds, 86_400)
    date = _DATES.get(days)
    if date is None:
        date = (V.EPOCH_DATE + dt.timedelta(days=days)).isoformat()
        if len(_DATES) >= 65_536:
            _DATES.clear()
        _DATES[days] = date
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if micros:
        return "%sT%02d:%02d:%02d.%06dZ" % (date, hours, minutes, secs, micros)  # noqa: UP031 — fastest form
    return "%sT%02d:%02d:%02dZ" % (date, hours, minutes, secs)  # noqa: UP031

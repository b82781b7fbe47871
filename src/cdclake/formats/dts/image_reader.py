"""The image readers generated per column layout of DTS records.

A table's records repeat one column layout, and each column nearly always carries the union branch its type
code implies (or null), so for every layout straight-line Python is generated that reads each column's
expected branch inline and hands anything else to the generic reader (``DtsAvro._value``). It returns None
(the generic loop then reads the image) unless the image is one block of exactly the layout's columns; any
error also falls back to the generic loop, which names the column and the problem.
"""

from __future__ import annotations

import base64
import re
import struct
from typing import Any, Final

from cdclake.formats.avro.reader import Emitter, bytes_code, long_code, zigzag
from cdclake.formats.dts.types import KIND_DATE, KIND_DATETIME, Field, Layout
from cdclake.formats.dts.values import (
    NOT_CAPTURED,
    datetime_parts,
    datetime_text,
    decimal_text,
    decimal_type,
    utc_text,
)
from cdclake.model import types as T

_FLOAT_PARTS = struct.Struct("<xdBB")  # from the branch byte: value, one-byte precision and scale


# The inline reads of the shared Avro reader, on ``pos``. The readers leave out bounds checks: a slice past the
# end is short but a later index past the end raises, and every reader ends by indexing the byte after the
# image, so a truncated image always fails (and the generic reader says so).


def _read_long(var: str) -> str:
    return "\n".join(long_code(var, "pos"))


def _read_bytes(var: str) -> str:
    return "\n".join(bytes_code(var, "pos"))


def _byte_class(values: range) -> bytes:
    return b"[" + re.escape(bytes(values)) + b"]"


# A DateTime (branch 12) whose year takes two varint bytes (years 64..8191) and whose other components are
# present, one byte each and not negative: month to second (DATETIME), month and day only (DATE). Matched
# in C, so that reading the value needs no loop over the components.
_YEAR_2: Final = b"\x0c\x02" + _byte_class(range(0x80, 0x100, 2)) + b"[\x00-\x7f]"
_PART_1: Final = b"\x02" + _byte_class(range(0, 0x80, 2))
_plain_datetime: Final = re.compile(_YEAR_2 + _PART_1 * 5 + b"\x00", re.DOTALL).match
_plain_date: Final = re.compile(_YEAR_2 + _PART_1 * 2 + b"\x00\x00\x00\x00", re.DOTALL).match
# The bytes of those components, from the branch byte: the year's two varint bytes as one little-endian
# number, then each one-byte component. One unpack instead of an index and some arithmetic per component.
_datetime_bytes: Final = struct.Struct("<2xH" + "xB" * 5).unpack_from
_date_bytes: Final = struct.Struct("<2xHxBxB").unpack_from
# Two-digit text of a component by its (even, one-byte) zig-zag varint: %-formatting costs several times more.
_TWO_DIGITS: Final = tuple(f"{b >> 1:02d}" for b in range(0x80))


class _YearText(dict[int, str]):
    """Four-digit year text by the year's two varint bytes (as ``_datetime_bytes`` gives them); at most the
    8192 two-byte years, filled as they occur."""

    def __missing__(self, raw: int) -> str:
        n = (raw & 0x7F) | (raw >> 8) << 7
        text = self[raw] = "%04d" % ((n >> 1) ^ -(n & 1))  # noqa: UP031
        return text


_YEARS: Final = _YearText()


def _column_code(index: int, field: Field) -> list[str]:
    """The lines that read column ``index`` (from its branch byte at ``pos``) into ``v<index>``."""
    v = f"v{index}"
    family = field.family
    # (condition on the branch byte ``b`` and what follows it, body reading from the branch byte)
    if family in (T.INTEGER, T.BIT):
        # precision and digit count in one byte each: nearly every integer
        test = "b == 2 and data[pos + 1] < 0x80 and (c := data[pos + 2]) < 0x80 and not c & 1"
        body = ["pos += 3", "end = pos + (c >> 1)", f"{v} = int(data[pos:end])", "pos = end"]
    elif family in (T.FLOAT, T.DOUBLE):
        # value, precision and scale in one unpack; precision and scale of one byte each
        test = "b == 8"
        body = [f"{v}, precision, scale = _float_parts(data, pos)", "if precision < 0x80 and scale < 0x80:",
                "    pos += 11", "else:", f"    {v}, pos = generic(data, pos, {index}, types, layout)"]
    elif family in (T.TEXT, T.BINARY) and field.code in (249, 250, 251, 252):
        test = "b == 20"
        body = ["pos += 1", _read_bytes("kind"), _read_bytes("raw"),
                "if kind == b'TEXT':", f"    {v} = raw.decode('utf-8')",
                "elif kind == b'BLOB':", f"    {v} = _b64(raw).decode('ascii')",
                f"    types[{index}] = {field.binary_type!r}",
                "else:", "    return None"]
    elif family in (T.TEXT, T.BINARY) and field.code in (15, 253, 254):
        test = "b == 4"
        body = ["pos += 1", _read_bytes("charset"), _read_bytes("raw"),
                "codec = codecs_get(charset)",
                "if codec:", f"    {v} = raw.decode(codec)",
                "elif charset == b'binary':", f"    {v} = _b64(raw).decode('ascii')",
                f"    types[{index}] = {field.binary_type!r}",
                "else:", "    return None"]
    elif family == T.DECIMAL:
        test = "b == 6"
        body = ["pos += 1", _read_bytes("raw"), _read_long("precision"),
                _read_long("scale"), f"{v} = decimal_text(raw.decode('ascii'), scale)",
                f"types[{index}] = decimal_type(precision, scale)"]
    elif family in (T.DATETIME, T.DATE) and field.temporal in (KIND_DATETIME, KIND_DATE):
        # The common DateTime, whole components matched at once (see _PLAIN_DATETIME); anything else takes
        # the general path below, which gives the same text.
        if field.temporal == KIND_DATETIME:
            test = "b == 12 and _plain_datetime(data, pos) is not None"
            body = ["y, mo, d, h, mi, s = _datetime_bytes(data, pos)",
                    f"{v} = f'{{_years[y]}}-{{_two[mo]}}-{{_two[d]}} {{_two[h]}}:{{_two[mi]}}:{{_two[s]}}'",
                    "pos += 15"]
        else:
            test = "b == 12 and _plain_date(data, pos) is not None"
            body = ["y, mo, d = _date_bytes(data, pos)", f"{v} = f'{{_years[y]}}-{{_two[mo]}}-{{_two[d]}}'",
                    "pos += 12"]
        lines = ["b = data[pos]", f"if {test}:", *("    " + line for line in body), "elif b == 12:",
                 "    parts, pos = datetime_parts(data, pos + 1)",
                 f"    {v} = datetime_text(parts, {field.temporal!r}, nanos)"]
        return [*lines, "elif b == 0:", f"    {v} = None", "    pos += 1", "else:",
                f"    {v}, pos = generic(data, pos, {index}, types, layout)",
                f"    if {v} is NOT_CAPTURED:", "        missing = True"]
    elif family in (T.DATE, T.DATETIME, T.TIME, T.YEAR):
        test = "b == 12"
        body = ["parts, pos = datetime_parts(data, pos + 1)",
                f"{v} = datetime_text(parts, {field.temporal!r}, nanos)"]
    elif family == T.TIMESTAMP and field.code in (7, 17):
        test = "b == 10"
        body = ["seconds, pos = _long(data, pos + 1)", _read_long("micros"),
                f"{v} = utc_text(seconds, micros)"]
    elif family in (T.JSON, T.ENUM, T.SET):
        test = "b == 22"
        body = ["pos += 1", _read_bytes("raw"), _read_bytes("raw"), f"{v} = raw.decode('utf-8')"]
    else:
        test, body = "", []
    lines = ["b = data[pos]"]
    if test:
        lines += [f"if {test}:", *("    " + line for part in body for line in part.split("\n")), "elif b == 0:"]
    else:
        lines.append("if b == 0:")
    return [*lines, f"    {v} = None", "    pos += 1", "else:",
            f"    {v}, pos = generic(data, pos, {index}, types, layout)",
            f"    if {v} is NOT_CAPTURED:", "        missing = True"]


def compile_image_reader(layout: Layout, codecs_: dict[bytes, str | None]) -> Any:
    """A reader of one image array of ``layout``: ``(data, pos, types, generic) -> (row, pos) | None``.

    Each column's value goes to a local variable and the row is built at the end in one dict display; a
    column not captured (EmptyObject.NONE, only ever from ``generic``) is then dropped from it."""
    count = len(layout.fields)
    lines = ["def read(data, pos, types, generic):",
             f"    if not data.startswith({zigzag(count)!r}, pos):", "        return None",
             f"    pos += {len(zigzag(count))}", "    missing = False"]
    for index, field in enumerate(layout.fields):
        lines += ["    " + line for line in _column_code(index, field)]
    row = "{" + ", ".join(f"{field.name!r}: v{index}" for index, field in enumerate(layout.fields)) + "}"
    lines += ["    if data[pos] != 0:", "        return None", f"    row = {row}", "    if missing:",
              "        row = {name: value for name, value in row.items() if value is not NOT_CAPTURED}",
              "    return row, pos + 1"]
    out = Emitter()
    out.lines = lines
    out.env.update({
        "_b64": base64.b64encode,
        "decimal_text": decimal_text, "decimal_type": decimal_type, "_float_parts": _FLOAT_PARTS.unpack_from,
        "datetime_parts": datetime_parts, "datetime_text": datetime_text, "utc_text": utc_text,
        "_plain_datetime": _plain_datetime, "_plain_date": _plain_date, "_two": _TWO_DIGITS,
        "_datetime_bytes": _datetime_bytes, "_date_bytes": _date_bytes, "_years": _YEARS,
        "NOT_CAPTURED": NOT_CAPTURED, "codecs_get": codecs_.get, "nanos": layout.nanos, "layout": layout,
    })
    return out.compile("<dts-avro image reader>")

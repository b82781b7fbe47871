"""TiCDC's single-row checksum (``ticdc-checksum.md``): a CRC-32 over the new row image that TiCDC puts in
Avro (``_tidb_row_level_checksum``) and Simple messages, recomputed here from the values as they arrived.

The checksum runs zlib's CRC-32 (running value from 0) over each non-NULL column in column-ID order, each
column encoded by its TiDB type:

- integers of every width, YEAR, BIGINT UNSIGNED: 8 bytes little-endian of ``v mod 2**64``;
- FLOAT/DOUBLE: the float64 bit pattern (FLOAT widened exactly from float32), NaN and ±Inf as 0.0;
- ENUM (1-based index), SET (bitmask), BIT (unsigned value): 8 bytes little-endian;
- text, blobs, DECIMAL text, DATE/DATETIME/TIME text, JSON text: uint32 LE byte length, then the bytes;
- TIMESTAMP: the same, after converting the text from the TiCDC server's zone to UTC;
- VECTOR: uint32 LE element count, then float32 LE elements (no byte-length prefix).

Encoders are compiled once per schema (:class:`RowChecksum`) so that verifying a row is one loop of
small calls. Inputs are the *wire* values of the Avro datum (``str`` for DECIMAL/BIGINT UNSIGNED in the
mode TiCDC requires for checksums; ``Decimal``/negative ``long`` from the other modes are accepted too).
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
import struct
import zlib
from collections.abc import Callable, Iterable, Sequence
from decimal import Decimal
from typing import Any, Final

from cdclake.errors import ChecksumInputError
from cdclake.model import values as V
from cdclake.model.events import Checksum

Encoder = Callable[[Any], bytes]

MASK64: Final = 0xFFFF_FFFF_FFFF_FFFF
_pack_u64 = struct.Struct("<Q").pack
_pack_u32 = struct.Struct("<I").pack
_pack_f64 = struct.Struct("<d").pack

INTEGER_TYPES: Final = frozenset({"INT", "INT UNSIGNED", "BIGINT", "BIGINT UNSIGNED", "YEAR"})
TEXT_TYPES: Final = frozenset({"TEXT", "DECIMAL", "DATE", "DATETIME", "TIME", "JSON"})
TIDB_TYPES: Final = frozenset(
    {*INTEGER_TYPES, *TEXT_TYPES, "FLOAT", "DOUBLE", "BIT", "BLOB", "ENUM", "SET", "TIMESTAMP", "TiDBVECTORFloat32"}
)


def split_allowed(text: str) -> tuple[str, ...]:
    """ENUM/SET members from TiCDC's ``allowed`` parameter: split on commas not escaped as ``\\,``."""
    if not text:
        return ()
    members: list[str] = []
    current: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\\" and i + 1 < n and text[i + 1] == ",":
            current.append(",")
            i += 2
            continue
        if ch == ",":
            members.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    members.append("".join(current))
    return tuple(members)


def join_allowed(members: Iterable[str]) -> str:
    """The inverse of :func:`split_allowed`, as TiCDC writes it."""
    return ",".join(m.replace(",", "\\,") for m in members)


def _length_value(data: bytes) -> bytes:
    return _pack_u32(len(data)) + data


def _integer(value: Any) -> bytes:
    return _pack_u64(int(value) & MASK64)


def _float(value: Any) -> bytes:
    number = float(value)
    return _pack_f64(number if math.isfinite(number) else 0.0)


def _text(value: Any) -> bytes:
    data = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    return _pack_u32(len(data)) + data


def _bit(value: Any) -> bytes:
    number = value if isinstance(value, int) else int.from_bytes(value, "big")
    if not 0 <= number <= MASK64:
        raise ChecksumInputError(f"BIT value {number} is negative or wider than 64 bits")
    return _pack_u64(number)


def _decimal(scale: int | None) -> Encoder:
    def encode(value: Any) -> bytes:
        if isinstance(value, str):
            data = value.encode("ascii")
        else:  # Avro ``precise`` mode: re-render with exactly the column's scale, as TiDB's text has
            data = V.decimal_text(value if isinstance(value, Decimal) else Decimal(value), scale).encode("ascii")
        return _pack_u32(len(data)) + data

    return encode


def _enum(allowed: Sequence[str]) -> Encoder:
    index = {name: i + 1 for i, name in enumerate(allowed)}

    def encode(value: Any) -> bytes:
        if isinstance(value, int):
            return _pack_u64(value)
        position = index.get(value)
        if position is None:
            if value != "":  # "" is TiDB's invalid-ENUM value, index 0
                raise ChecksumInputError(f"ENUM value {value!r} is not one of {list(allowed)}")
            position = 0
        return _pack_u64(position)

    return encode


def _set(allowed: Sequence[str]) -> Encoder:
    bits = {name: 1 << i for i, name in enumerate(allowed)}

    def encode(value: Any) -> bytes:
        if isinstance(value, int):
            return _pack_u64(value)
        mask = 0
        if value:
            for name in value.split(","):
                bit = bits.get(name)
                if bit is None:
                    raise ChecksumInputError(f"SET member {name!r} is not one of {list(allowed)}")
                mask |= bit
        return _pack_u64(mask)

    return encode


def timestamp_to_utc(text: str, server_zone: str) -> str:
    """A TIMESTAMP text in the TiCDC server's zone, as UTC text of the same shape and fraction digits; the
    zero timestamp is left as it is (TiCDC never converts it)."""
    if V.is_zero_date(text):
        return text
    head, dot, frac = text.partition(".")
    try:
        moment = dt.datetime.strptime(head, "%Y-%m-%d %H:%M:%S")
        micros = int((frac + "000000")[:6]) if frac else 0
    except ValueError:
        raise ChecksumInputError(f"TIMESTAMP {text[:40]!r} is not YYYY-MM-DD HH:MM:SS[.f]") from None
    moment = V.go_wall_to_utc(moment.replace(microsecond=micros), V.zone(server_zone))
    out = moment.strftime("%Y-%m-%d %H:%M:%S")
    return out + dot + f"{moment.microsecond:06d}"[: len(frac)] if frac else out


def _timestamp(server_zone: str) -> Encoder:
    if V.zone(server_zone) is dt.UTC:
        return _text

    def encode(value: Any) -> bytes:
        return _length_value(timestamp_to_utc(value, server_zone).encode("ascii"))

    return encode


def vector_floats(text: str) -> list[float]:
    """The elements of a TiDB vector text ``[1,2.5,3]``."""
    body = text.strip()
    if not (body.startswith("[") and body.endswith("]")):
        raise ChecksumInputError(f"VECTOR {text[:40]!r} is not [x,y,…]")
    inner = body[1:-1].strip()
    try:
        return [float(item) for item in inner.split(",")] if inner else []
    except ValueError:
        raise ChecksumInputError(f"VECTOR {text[:40]!r} has a non-numeric element") from None


def _vector(value: Any) -> bytes:
    elements = vector_floats(value)
    try:
        return _pack_u32(len(elements)) + struct.pack(f"<{len(elements)}f", *elements)
    except (OverflowError, struct.error):
        raise ChecksumInputError(f"VECTOR {value[:40]!r} has an element beyond float32") from None


def column_encoder(
    tidb_type: str, allowed: Sequence[str] = (), scale: int | None = None, server_zone: str = "UTC"
) -> Encoder:
    """The checksum encoder of one column; ``allowed`` are the ENUM/SET members, ``scale`` the DECIMAL
    scale (only needed for ``precise``-mode values). Unknown types raise ``ValueError``."""
    if tidb_type in INTEGER_TYPES:
        return _integer
    if tidb_type in ("FLOAT", "DOUBLE"):
        return _float
    if tidb_type == "DECIMAL":
        return _decimal(scale)
    if tidb_type in TEXT_TYPES or tidb_type == "BLOB":
        return _text
    if tidb_type == "TIMESTAMP":
        return _timestamp(server_zone)
    if tidb_type == "BIT":
        return _bit
    if tidb_type == "ENUM":
        return _enum(allowed)
    if tidb_type == "SET":
        return _set(allowed)
    if tidb_type == "TiDBVECTORFloat32":
        return _vector
    raise ValueError(f"unknown TiDB type {tidb_type!r} for the row checksum")


def encode_value(
    tidb_type: str, value: Any, allowed: Sequence[str] = (), scale: int | None = None, server_zone: str = "UTC"
) -> bytes:
    """The bytes one column contributes (``b""`` for NULL)."""
    if value is None:
        return b""
    return column_encoder(tidb_type, allowed, scale, server_zone)(value)


class RowChecksum:
    """The checksum of rows of one schema: compiled once, called per row with the column values in
    column-ID order (the value schema's field order)."""

    __slots__ = ("encoders",)

    def __init__(self, encoders: Sequence[Encoder]) -> None:
        self.encoders = tuple(encoders)

    def __call__(self, values: Sequence[Any]) -> int:
        crc = 0
        for encode, value in zip(self.encoders, values, strict=True):
            if value is not None:
                crc = zlib.crc32(encode(value), crc)
        return crc


# Each TIMESTAMP in a fold doubles the readings to try; a row with more is left a mismatch.
MAX_FOLD_COLUMNS: Final = 8


def fold_readings(
    checksum: RowChecksum, values: Sequence[Any], timestamps: Sequence[int], server_zone: str, expected: int
) -> dict[int, str] | None:
    """For a row whose checksum mismatches: other readings of its TIMESTAMP wall times that lie in a DST fold
    or gap of ``server_zone`` (spec §4: Go's choice there is not promised) that make the checksum
    ``expected``, as {column index: canonical UTC text}; None when no reading does. ``timestamps`` are the
    indexes of the TIMESTAMP columns in ``values`` (wire values in column-ID order)."""
    choices = [(i, others) for i in timestamps if values[i] is not None
               and (others := V.other_readings(values[i], server_zone))]  # fmt: skip
    if not choices or len(choices) > MAX_FOLD_COLUMNS:
        return None
    for picked in itertools.product(*([None, *others] for _, others in choices)):
        readings = {i: text for (i, _), text in zip(choices, picked, strict=True) if text is not None}
        if not readings:  # Go's reading everywhere: the checksum already computed
            continue
        encoders = [_utc_reading if i in readings else encode for i, encode in enumerate(checksum.encoders)]
        if RowChecksum(encoders)([readings.get(i, value) for i, value in enumerate(values)]) == expected:
            return readings
    return None


def _utc_reading(text: str) -> bytes:
    """A TIMESTAMP already read as canonical UTC text (``…T…Z``), hashed as :func:`timestamp_to_utc` renders it."""
    return _text(text[:-1].replace("T", " "))


def row_checksum(columns: Iterable[tuple[str, Any, Sequence[str]]], server_zone: str = "UTC") -> int:
    """The checksum of one row given as ``(tidb_type, value, allowed)`` in column-ID order."""
    crc = 0
    for tidb_type, value, allowed in columns:
        if value is not None:
            crc = zlib.crc32(encode_value(tidb_type, value, allowed, server_zone=server_zone), crc)
    return crc


def expected_checksum(field: Any) -> int | None:
    """The checksum a message states, or None when it states none (absent, ``""``, or ``"0"``: TiCDC
    treats 0 as "no checksum"). A value that is not an unsigned 32-bit number raises ``ValueError``."""
    if field is None or field in ("", "0"):
        return None
    text = str(field)
    if not text.isdigit() or int(text) > 0xFFFF_FFFF:
        raise ValueError(f"row checksum {text[:20]!r} is not an unsigned 32-bit number")
    return int(text) or None


def verdict(expected: int, actual: int, corrupted: bool = False) -> Checksum:
    """The event's checksum: ``ok`` only when the numbers agree and TiCDC did not flag the row."""
    return Checksum(expected=expected, actual=actual, ok=expected == actual and not corrupted)

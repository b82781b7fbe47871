"""Random canonical values, one fast generator per column type: what the simulated database writes."""

from __future__ import annotations

import datetime as dt
import json
import random
import struct
from collections.abc import Callable
from typing import Any, Final

from cdclake.model import types as T
from cdclake.model import values as V
from cdclake.model.types import SqlType, parse_type

# ---------------------------------------------------------------------------------------------------------
# Random canonical values, one fast generator per column type

Gen = Callable[[random.Random], Any]

# ``random.randint``/``randrange`` cost a microsecond each; ``int(random() * n)`` is exact enough for the
# small ranges below (n < 2**53) and several times faster, which matters at a million rows.

_ALPHABET: Final = ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789" * 4
                    + "      .,;:-_/'\"\\%&<>()[]{}#@!?=+*~`|^$\n\t\r\x00\x01\x7f"
                    + "éüßçñøåÆŒ€£¥©°±µ¶·½ЖЯжяαβγΩ中文字日本語한국어ไทย…–—‘’“”\u2028\u00a0🙂🚀𝄞")
# Text values are slices of one fixed random text, so that making one costs a slice, not a join.
_POOL: Final = "".join(random.Random(20240501).choices(_ALPHABET, k=1 << 16))


def _text(max_len: int, *, strip: bool = False) -> Gen:
    max_len = min(max_len, 4096)  # long enough to cross any buffer boundary, short enough to stay fast
    limit = min(max_len, 64)
    span = len(_POOL) - max_len

    def gen(r: random.Random) -> str:
        roll = r.random()
        if roll < 0.05:
            return ""
        n = 1 + int(r.random() * (max_len if roll > 0.97 else limit))
        start = int(r.random() * span)
        text = _POOL[start:start + n]
        # MySQL CHAR drops trailing spaces on read, so a CHAR value never ends with one.
        return text.rstrip(" ") if strip else text

    return gen


def _integer(t: SqlType) -> Gen:
    bits = t.bits or 64
    lo, hi = (0, 2**bits - 1) if t.unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    edges = (lo, hi, 0, 1, hi - 1) if t.unsigned else (lo, hi, 0, -1, 1)
    small = min(hi, 100_000)
    small_lo = max(lo, -small)
    width = small - small_lo + 1

    def gen(r: random.Random) -> int:
        roll = r.random()
        if roll < 0.05:
            return edges[int(roll * 100)]
        if roll < 0.6:
            return small_lo + int(r.random() * width)
        return lo + r.getrandbits(bits)

    return gen


def _decimal(t: SqlType) -> Gen:
    precision, scale = t.length or 10, t.scale or 0

    def gen(r: random.Random) -> str:
        digits = precision if r.random() < 0.1 else 1 + int(r.random() * precision)
        unscaled = r.getrandbits(digits * 4) % 10**digits if digits > 15 else int(r.random() * 10**digits)
        text = str(unscaled).rjust(scale + 1, "0")
        if scale:
            text = text[:-scale] + "." + text[-scale:]
        return "-" + text if unscaled and r.random() < 0.4 else text

    return gen


def _float32_text(x: float) -> str | None:
    """The shortest decimal text that rounds to float32 ``x``."""
    packed = struct.pack("<f", x)
    for digits in range(1, 10):
        text = f"{x:.{digits}g}"
        if struct.pack("<f", float(text)) == packed:
            return text
    return None


def _float_pool(size: int) -> tuple[float, ...]:
    # FLOAT values whose float32 and float64 readings agree on the shortest decimal text, so every format
    # (Java Float.toString, float32 Avro, float64 JSON) carries them as the same Python float. Values outside
    # that set have no single canonical form yet (an open question of the value rules).
    r = random.Random(4)
    pool: list[float] = [0.0, 1.0, -1.0, 0.5, 16777216.0, -16777216.0, 12345678.0]
    while len(pool) < size:
        if r.random() < 0.1:
            x = float(r.getrandbits(25) - (1 << 24))
        else:
            x = (r.getrandbits(21) - (1 << 20)) / (1 << int(r.random() * 7))
        text = _float32_text(x)
        if text is not None and float(text) == x:
            pool.append(x + 0.0)
    return tuple(pool)


_FLOATS: Final = _float_pool(4096)


def _float(r: random.Random) -> float:
    return _FLOATS[int(r.random() * len(_FLOATS))]


_DOUBLE_EDGES: Final = (0.0, 1.0, -1.0, 0.1, 1e-300, -1e300, 1.7976931348623157e308, 5e-324, 2.0**53 + 2)


def _double(r: random.Random) -> float:
    roll = r.random()
    if roll < 0.05:
        return _DOUBLE_EDGES[int(roll * 180)]
    if roll < 0.5:
        return round((r.random() - 0.5) * 2e6, int(r.random() * 7)) + 0.0
    return (r.random() * 2 - 1) * 10.0 ** (int(r.random() * 601) - 300) + 0.0


_DATE_LO: Final = dt.date(1000, 1, 1).toordinal()
_DATE_HI: Final = dt.date(9999, 12, 31).toordinal()
_EPOCH_ORDINAL: Final = dt.date(1970, 1, 1).toordinal()


def _date(r: random.Random) -> str:
    return dt.date.fromordinal(_DATE_LO + int(r.random() * (_DATE_HI - _DATE_LO + 1))).isoformat()


def _clock(seconds: int) -> str:
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return f"{hour:02d}:{minute:02d}:{second:02d}"


def _moment(t: SqlType) -> Gen:
    fsp = t.fsp
    if t.family == T.DATETIME:
        first, days, sep, zone = _DATE_LO, _DATE_HI - _DATE_LO + 1, " ", ""
    else:  # TIMESTAMP: MySQL's range (1970-01-01 00:00:01 to 2038-01-19 03:14:07 UTC) less a day each side
        first, days, sep, zone = _EPOCH_ORDINAL + 1, 24_853 - 2, "T", "Z"
    scale = 10**fsp

    def gen(r: random.Random) -> str:
        day = dt.date.fromordinal(first + int(r.random() * days)).isoformat()
        text = day + sep + _clock(int(r.random() * 86_400))
        if fsp:
            text += "." + str(int(r.random() * scale)).zfill(fsp)
        return text + zone

    return gen


def _time(t: SqlType) -> Gen:
    fsp = t.fsp
    scale = 10**fsp
    limit = 838 * 3600 + 59 * 60 + 59

    def gen(r: random.Random) -> str:
        wide = r.random() < 0.3
        seconds = int(r.random() * (limit + 1 if wide else 86_400))
        text = _clock(seconds)
        if fsp:
            text += "." + str(int(r.random() * scale)).zfill(fsp)
        return "-" + text if wide and r.random() < 0.5 and text.strip("0:.") else text

    return gen


def _binary(t: SqlType) -> Gen:
    fixed = t.name == "binary"
    size = t.length or (1 if fixed else 255)
    limit = min(size, 300)

    def gen(r: random.Random) -> str:
        # BINARY(n) is right-padded with zero bytes to n, so its values always have n bytes.
        n = size if fixed else int(r.random() * (limit + 1))
        return V.b64(r.randbytes(n))

    return gen


def _json_doc(r: random.Random, depth: int = 0) -> Any:
    roll = r.random()
    if depth < 2 and roll < 0.25:
        return [_json_doc(r, depth + 1) for _ in range(r.randint(0, 3))]
    if depth < 2 and roll < 0.55:
        return {"".join(r.choices("abcdefgxyz_é", k=r.randint(1, 6))): _json_doc(r, depth + 1)
                for _ in range(r.randint(0, 4))}
    if roll < 0.65:
        return None
    if roll < 0.72:
        return r.random() < 0.5
    if roll < 0.85:
        return r.randint(-(2**53), 2**53)
    return "".join(r.choices(_ALPHABET, k=r.randint(0, 12)))


# MySQL prints JSON with ", " and ": " separators; a document comes back as this exact text. Building one
# costs several microseconds, so values are drawn from a fixed set of documents.
_JSON_DOCS: Final = tuple(json.dumps(_json_doc(random.Random(i)), ensure_ascii=False) for i in range(4096))


def _json(r: random.Random) -> str:
    return _JSON_DOCS[int(r.random() * len(_JSON_DOCS))]


def _enum(t: SqlType) -> Gen:
    members = t.members
    count = len(members)
    return lambda r: members[int(r.random() * count)]


def _set(t: SqlType) -> Gen:
    members = t.members

    def gen(r: random.Random) -> str:
        mask = r.getrandbits(len(members))
        return ",".join(m for i, m in enumerate(members) if mask >> i & 1)

    return gen


def value_generator(type_text: str) -> Gen:
    """A function of a ``random.Random`` giving canonical non-NULL values of one column type."""
    t = parse_type(type_text)
    family = t.family
    if family == T.INTEGER:
        return _integer(t)
    if family == T.DECIMAL:
        return _decimal(t)
    if family == T.FLOAT:
        return _float
    if family == T.DOUBLE:
        return _double
    if family == T.BIT:
        bits = t.length or 1
        return lambda r: r.getrandbits(bits)
    if family == T.DATE:
        return _date
    if family in (T.DATETIME, T.TIMESTAMP):
        return _moment(t)
    if family == T.TIME:
        return _time(t)
    if family == T.YEAR:
        return lambda r: 1901 + int(r.random() * 255)
    if family == T.TEXT:
        return _text(t.length or 400, strip=t.name == "char")
    if family == T.BINARY:
        return _binary(t)
    if family == T.JSON:
        return _json
    if family == T.ENUM:
        return _enum(t)
    if family == T.SET:
        return _set(t)
    raise ValueError(f"the workload has no values for column type {type_text!r}")

"""Canonical values: the exact form a column value takes in a :class:`~cdclake.model.events.ChangeEvent`.

- integers: Python ints of any size (unsigned 64-bit stays exact); BIT: unsigned int; YEAR: int
- DECIMAL: text with the source's scale (``"129012.1230000"``); FLOAT/DOUBLE: float
- text and JSON: str; BINARY/BLOB/GEOMETRY: base64 text
- DATE ``YYYY-MM-DD``; DATETIME ``YYYY-MM-DD HH:MM:SS[.ffffff]``; TIME ``[-]HH:MM:SS[.ffffff]``
- TIMESTAMP ``YYYY-MM-DDTHH:MM:SS[.ffffff]Z`` in UTC wherever the source fixes the zone
- ENUM/SET: labels where the message gives them, else their integer value; NULL: None

Formats convert their wire values with the helpers here, so that each rule is written once.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import math
import struct
from decimal import Context, Decimal, InvalidOperation
from functools import lru_cache
from typing import Any, Final, Literal
from zoneinfo import ZoneInfo

from cdclake.errors import BadValue
from cdclake.model import types as T
from cdclake.model.types import SqlType

EPOCH = dt.datetime(1970, 1, 1)
# DECIMAL arithmetic must stay exact up to MySQL's 65 digits; the default context rounds at 28.
DECIMAL_CONTEXT = Context(prec=200)
EPOCH_DATE = dt.date(1970, 1, 1)
UTC = dt.UTC
# How a producer reads a wall time in a DST fold or gap: see local_timestamp_to_utc.
FoldRule = Literal["java", "go"]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise BadValue(f"invalid base64 {text[:40]!r}") from exc


_FLOAT32: Final = struct.Struct("<f")


def float32(value: float) -> float:
    """The float32 nearest ``value``: a FLOAT's canonical value, whatever text or double carried it (producers
    write a float32 as its shortest decimal text, whose nearest double is not the float32)."""
    try:
        return _FLOAT32.unpack(_FLOAT32.pack(value))[0]
    except OverflowError:
        raise BadValue(f"value {value!r} is out of FLOAT range") from None


def geometry_wkb(raw: bytes) -> bytes:
    """The WKB of a spatial value. MySQL's own form (its binlog's) is a 4-byte little-endian SRID, then WKB:
    the SRID is dropped, as Debezium's Geometry struct carries it apart from its WKB. That form is tried
    first: a few odd SRIDs (513, say) make it read as WKB too, while WKB that reads as an SRID and WKB needs
    coordinates no real geometry has. Anything else, WKB already or bytes that are neither, stays as it is: a
    value is never lost to a guess."""
    if len(raw) > 4 and _wkb_end(raw, 4) == len(raw):
        return raw[4:]
    return raw


_WKB_DIMENSIONS: Final = {0: 2, 1: 3, 2: 3, 3: 4}  # ISO WKB type code thousands: XY, XYZ, XYM, XYZM
_WKB_COUNT: Final = (struct.Struct(">I"), struct.Struct("<I"))  # by the byte-order byte: 0 big-endian, 1 little


def _wkb_end(data: bytes, pos: int, depth: int = 0) -> int | None:
    """Where the WKB geometry starting at ``pos`` ends, or None when the bytes there are not one."""
    if depth > 32 or pos + 5 > len(data) or data[pos] > 1:
        return None
    count = _WKB_COUNT[data[pos]]
    code = count.unpack_from(data, pos + 1)[0]
    kind, dims = code % 1000, _WKB_DIMENSIONS.get(code // 1000)
    if dims is None or not 1 <= kind <= 7:
        return None
    pos += 5
    if kind == 1:  # point
        pos += 8 * dims
        return pos if pos <= len(data) else None
    if pos + 4 > len(data):
        return None
    n = count.unpack_from(data, pos)[0]
    pos += 4
    if kind == 2:  # linestring: n points
        pos += 8 * dims * n
    elif kind == 3:  # polygon: n rings of points
        for _ in range(n):
            if pos + 4 > len(data):
                return None
            pos += 4 + 8 * dims * count.unpack_from(data, pos)[0]
    else:  # multi-point, -linestring, -polygon, collection: n geometries
        for _ in range(n):
            end = _wkb_end(data, pos, depth + 1)
            if end is None:
                return None
            pos = end
    return pos if pos <= len(data) else None


def decimal_text(value: Decimal | int | str, scale: int | None) -> str:
    """DECIMAL text with exactly ``scale`` fraction digits (plain notation, never an exponent)."""
    number = value if isinstance(value, Decimal) else Decimal(value)
    if scale is not None:
        number = number.quantize(Decimal(1).scaleb(-scale), context=DECIMAL_CONTEXT)
    return format(number, "f")


def decimal_from_unscaled(unscaled: bytes, scale: int) -> str:
    """Kafka Connect / Avro decimal bytes: big-endian two's complement unscaled value."""
    number = int.from_bytes(unscaled, "big", signed=True)
    if scale <= 0:
        return str(number * 10**-scale)
    # Plain digit arithmetic: exact at any size and several times faster than Decimal.
    digits = str(abs(number)).rjust(scale + 1, "0")
    return f"{'-' if number < 0 else ''}{digits[:-scale]}.{digits[-scale:]}"


def unscaled_bytes(text: str, scale: int) -> bytes:
    """The inverse of :func:`decimal_from_unscaled` (minimal length, as Kafka Connect writes it)."""
    unscaled = int(Decimal(text).scaleb(scale, DECIMAL_CONTEXT))
    length = max(1, (unscaled + (unscaled < 0)).bit_length() // 8 + 1)
    return unscaled.to_bytes(length, "big", signed=True)


def _fraction(micros: int, fsp: int | None) -> str:
    if fsp:
        return f".{micros:06d}"[: fsp + 1]
    return f".{micros:06d}" if micros else ""


def date_text(days: int) -> str:
    return (EPOCH_DATE + dt.timedelta(days=days)).isoformat()


def datetime_text(moment: dt.datetime, fsp: int | None = None) -> str:
    # isoformat: four-digit years below 1000 (strftime's %Y does not pad) and much faster.
    return moment.isoformat(" ", "seconds") + _fraction(moment.microsecond, fsp)


def datetime_text_from_micros(micros: int, fsp: int | None = None) -> str:
    """A zone-less DATETIME given as micros since the epoch read as UTC (Debezium, Avro)."""
    return datetime_text(EPOCH + dt.timedelta(microseconds=micros), fsp)


def timestamp_text(moment: dt.datetime, fsp: int | None = None) -> str:
    """An instant as canonical UTC text; a naive ``moment`` is taken to be UTC already."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    return moment.isoformat("T", "seconds") + _fraction(moment.microsecond, fsp) + "Z"


def timestamp_text_from_micros(micros: int, fsp: int | None = None) -> str:
    return timestamp_text(EPOCH + dt.timedelta(microseconds=micros), fsp)


def time_text_from_micros(micros: int, fsp: int | None = None) -> str:
    """MySQL TIME: a signed duration that may exceed 24 hours."""
    sign = "-" if micros < 0 else ""
    seconds, frac = divmod(abs(micros), 1_000_000)
    minutes, sec = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    return f"{sign}{hours:02d}:{minute:02d}:{sec:02d}{_fraction(frac, fsp)}"


def micros_from_time_text(text: str) -> int:
    sign = -1 if text.startswith("-") else 1
    clock, _, frac = text.lstrip("-").partition(".")
    hours, minutes, seconds = (int(p) for p in clock.split(":"))
    return sign * (((hours * 60 + minutes) * 60 + seconds) * 1_000_000 + int((frac + "000000")[:6] or 0))


def parse_datetime_text(text: str) -> dt.datetime:
    """``YYYY-MM-DD[ T]HH:MM:SS[.f…][Z|±hh:mm]``; more than six fraction digits are cut to micros."""
    body = text.strip()
    zone = ""
    if body.endswith("Z"):
        body, zone = body[:-1], "+00:00"
    elif len(body) > 19 and body[-6] in "+-" and body[-3] == ":":
        body, zone = body[:-6], body[-6:]
    head, _, frac = body.partition(".")
    moment = dt.datetime.fromisoformat(head.replace(" ", "T") + ("." + (frac + "000000")[:6] if frac else "")
                                       + zone)
    return moment


def micros_from_datetime_text(text: str) -> int:
    """Micros since the epoch of a zone-less DATETIME (read as UTC) or of an instant with a zone."""
    moment = parse_datetime_text(text)
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    delta = moment - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def days_from_date_text(text: str) -> int:
    return (dt.date.fromisoformat(text) - EPOCH_DATE).days


@lru_cache(maxsize=64)
def zone(name: str) -> dt.tzinfo:
    if name.upper() in ("UTC", "Z", "GMT"):
        return UTC
    if name[:1] in "+-":
        hours, _, minutes = name[1:].partition(":")
        offset = dt.timedelta(hours=int(hours), minutes=int(minutes or 0))
        return dt.timezone(-offset if name[0] == "-" else offset)
    return ZoneInfo(name)


# What zone() reads, for a person who gave it something else.
ZONE_FORMS: Final = "a zone name (Asia/Shanghai), UTC, or an offset from UTC (+08:00, -5)"


def checked_zone(name: str, setting: str) -> dt.tzinfo:
    """:func:`zone` of a zone the user set (``setting`` names it, e.g. ``canal-json: option timestamp-zone``), to be
    called when the setting is given. A name it cannot read is a ValueError that names the setting, the value and
    the forms accepted, where zone() raises whatever failed: the zone database's KeyError or OSError, int()'s
    complaint about an offset."""
    try:
        return zone(name)
    except (KeyError, ValueError, OSError):
        raise ValueError(f"{setting} takes {ZONE_FORMS}, not {name!r}") from None


def is_zero_date(text: str) -> bool:
    return text.startswith("0000-00-00")


def go_wall_to_utc(wall: dt.datetime, zone: dt.tzinfo) -> dt.datetime:
    """A naive wall time in ``zone`` as naive UTC, read the way Go's ``time.Date`` reads it (TiDB and TiCDC
    convert with it). In a DST fold Go keeps the offset in effect at the wall time taken as UTC when the
    result lies in that offset's period: the later offset east of UTC, the earlier one west of it, where
    Python's ``fold=0`` (and Java's ``ZonedDateTime.of``) always takes the earlier one."""
    offset = wall.replace(tzinfo=UTC).astimezone(zone).utcoffset()
    utc = wall - offset
    actual = utc.replace(tzinfo=UTC).astimezone(zone).utcoffset()
    return utc if actual == offset else wall - actual


def _wall(text: str) -> tuple[dt.datetime, str]:
    head, _, frac = text.partition(".")
    return dt.datetime.fromisoformat(head.replace(" ", "T")), ("." + frac if frac else "")


def local_timestamp_to_utc(text: str, source_zone: str, *, rule: FoldRule = "java") -> str:
    """A TIMESTAMP that the producer rendered in its own zone, as canonical UTC text. A wall time in a DST
    fold or gap is read by the producer's ``rule``: ``java`` (Canal, Debezium, DTS) takes the earlier
    offset, ``go`` (TiCDC) Go's (:func:`go_wall_to_utc`). Zero dates cannot be converted and stay as the
    producer wrote them."""
    if is_zero_date(text):
        return text
    wall, fraction = _wall(text)
    if rule == "go":
        moment = go_wall_to_utc(wall, zone(source_zone))
    else:
        moment = wall.replace(tzinfo=zone(source_zone)).astimezone(UTC)
    return _utc_text(moment, fraction)


def other_readings(text: str, source_zone: str) -> list[str]:
    """The UTC texts a wall time in a DST fold or gap of ``source_zone`` can also mean, besides the
    one :func:`local_timestamp_to_utc` with ``rule="go"`` gives; empty outside folds and gaps."""
    if is_zero_date(text):
        return []
    wall, fraction = _wall(text)
    tz = zone(source_zone)
    chosen = go_wall_to_utc(wall, tz)
    readings = {wall - wall.replace(tzinfo=tz, fold=fold).utcoffset() for fold in (0, 1)} - {chosen}
    return [_utc_text(moment, fraction) for moment in sorted(readings)]


def _utc_text(moment: dt.datetime, fraction: str) -> str:
    """Canonical TIMESTAMP text of a UTC moment, with the fraction digits the producer wrote."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + fraction + "Z"


def utc_timestamp_to_local(text: str, target_zone: str) -> str:
    """The inverse of :func:`local_timestamp_to_utc`, for encoders."""
    if is_zero_date(text):
        return text
    head, _, frac = text.rstrip("Z").partition(".")
    moment = dt.datetime.fromisoformat(head).replace(tzinfo=UTC).astimezone(zone(target_zone))
    return moment.strftime("%Y-%m-%d %H:%M:%S") + ("." + frac if frac else "")


def enum_value(index: int, t: SqlType) -> str | int:
    """ENUM index (1-based; 0 is MySQL's empty/invalid value) → label when the type lists labels."""
    if not t.members:
        return index
    return t.members[index - 1] if 0 < index <= len(t.members) else ""


def enum_index(value: str | int, t: SqlType) -> int:
    if isinstance(value, int):
        return value
    return t.members.index(value) + 1 if value in t.members else 0


def set_value(mask: int, t: SqlType) -> str | int:
    """SET bitmask (bit k = k-th member) → comma-joined labels when the type lists labels."""
    if not t.members:
        return mask
    return ",".join(m for i, m in enumerate(t.members) if mask >> i & 1)


def set_mask(value: str | int, t: SqlType) -> int:
    if isinstance(value, int):
        return value
    labels = set(value.split(",")) if value else set()
    return sum(1 << i for i, m in enumerate(t.members) if m in labels)


def from_text(text: str | None, t: SqlType, timestamp_zone: str | None = None, *, rule: FoldRule = "java") -> Any:
    """A value rendered as text by Canal/TiCDC (every value a string) → canonical value.

    Binary values arrive as ISO-8859-1 characters, one per byte. TIMESTAMP text is in the producer's
    zone: with ``timestamp_zone`` it becomes UTC text (a DST fold read by ``rule``), otherwise it stays as given.
    """
    if text is None:
        return None
    family = t.family
    try:
        if family in (T.INTEGER, T.BIT, T.YEAR):
            return int(text)
        if family in (T.FLOAT, T.DOUBLE):
            return float(text)
        if family == T.DECIMAL:
            return decimal_text(text, t.scale) if "e" in text or "E" in text else text
        if family == T.BINARY:
            return b64(text.encode("latin-1"))
        if family == T.TIMESTAMP and timestamp_zone:
            return local_timestamp_to_utc(text, timestamp_zone, rule=rule)
        if family == T.ENUM:
            return enum_value(int(text), t) if text.isdigit() else text
        if family == T.SET:
            return set_value(int(text), t) if text.isdigit() else text
        if family == T.BOOLEAN:
            return text.lower() in ("1", "true", "t")
    except (ValueError, InvalidOperation, UnicodeEncodeError) as exc:
        raise BadValue(f"value {text[:60]!r} does not fit type {type_name(t)}") from exc
    return text


def to_text(value: Any, t: SqlType, timestamp_zone: str | None = None) -> str | None:
    """The inverse of :func:`from_text`, for encoders: canonical value → Canal/TiCDC text."""
    if value is None:
        return None
    family = t.family
    if family == T.BINARY:
        return unb64(value).decode("latin-1")
    if family == T.TIMESTAMP and timestamp_zone and isinstance(value, str) and value.endswith("Z"):
        return utc_timestamp_to_local(value, timestamp_zone)
    if family == T.ENUM:
        return str(enum_index(value, t))
    if family == T.SET:
        return str(set_mask(value, t))
    if family in (T.FLOAT, T.DOUBLE):
        return java_float_text(value)
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def non_finite(value: Any) -> bool:
    """A float NaN or infinity (``x - x`` is 0.0 for every other float)."""
    return type(value) is float and value - value != 0.0


def java_float_text(value: float) -> str:
    """Java's ``Double.toString``, as Canal writes FLOAT/DOUBLE: shortest round-trip digits, at least
    one fraction digit, scientific notation outside [1e-3, 1e7)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    text = repr(float(value))
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return text
    sign, digits, exponent = Decimal(text).normalize().as_tuple()
    coeff = "".join(map(str, digits))
    return f"{'-' if sign else ''}{coeff[0]}.{coeff[1:] or '0'}E{len(coeff) - 1 + int(exponent)}"


def type_name(t: SqlType) -> str:
    return T.type_text(t)

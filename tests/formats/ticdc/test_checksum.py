"""The TiCDC row checksum against every worked example of ticdc-checksum.md §7, the spec's reference
implementation (§6, used here as an independent oracle), and bit-flip detection."""

from __future__ import annotations

import math
import struct
import zlib
from datetime import UTC, datetime
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cdclake.formats.ticdc.checksum import (
    ChecksumInputError,
    RowChecksum,
    column_encoder,
    encode_value,
    expected_checksum,
    fold_readings,
    join_allowed,
    row_checksum,
    split_allowed,
    timestamp_to_utc,
    verdict,
)
from cdclake.model import values as V

ABC = ("a", "b", "c")


# --- §7 worked examples ----------------------------------------------------------------------------


def test_upstream_vector_example_0():
    # pingcap/ticdc's Avro decoder test: crc32.ChecksumIEEE(little-endian uint64 42)
    assert encode_value("INT", 42) == bytes.fromhex("2a00000000000000")
    assert row_checksum([("INT", 42, ())]) == zlib.crc32(struct.pack("<Q", 42)) == 227844599 == 0x0D94A1F7


@pytest.mark.parametrize(
    ("row", "hexes", "expected"),
    [
        ([("INT", 1, ()), ("TEXT", "aa", ())], ["0100000000000000", "020000006161"], 1194275474),
        ([("INT", 1, ()), ("TEXT", None, ())], ["0100000000000000", ""], 2844319735),
        ([("INT", 1, ()), ("TEXT", "", ())], ["0100000000000000", "00000000"], 3765471744),
        (
            [("BIGINT", -1, ()), ("BIGINT UNSIGNED", "18446744073709551615", ())],
            ["ffffffffffffffff", "ffffffffffffffff"],
            1068746266,
        ),
        (
            [("INT", 1, ()), ("TiDBVECTORFloat32", "[1,2,3]", ())],
            ["0100000000000000", "030000000000803f0000004000004040"],
            3270986539,
        ),
        ([("INT", 7, ()), ("DOUBLE", math.nan, ())], ["0700000000000000", "0000000000000000"], 289583904),
    ],
    ids=["1-id-and-varchar", "1b-null", "1c-empty-string", "2-bigint-and-unsigned", "5-vector", "6-nan"],
)
def test_spec_examples(row, hexes, expected):
    assert [encode_value(t, v, a).hex() for t, v, a in row] == hexes
    assert row_checksum(row) == expected


def test_spec_example_4_timestamp_converted_from_server_zone():
    row = [("INT", 1, ()), ("TIMESTAMP", "2020-02-20 10:20:20", ())]
    assert encode_value("TIMESTAMP", "2020-02-20 10:20:20", server_zone="Asia/Shanghai").hex() == (
        "13000000323032302d30322d32302030323a32303a3230"
    )
    assert row_checksum(row, server_zone="Asia/Shanghai") == 1289062007 == 0x4CD58677
    assert row_checksum(row, server_zone="UTC") == 400594880  # the unconverted text, as the spec notes


def test_spec_example_3_many_types_running_crc():
    rows = [
        ("INT", 2, (), "0200000000000000", 654825492),
        ("INT", -3, (), "fdffffffffffffff", 1834510654),
        ("BIGINT UNSIGNED", "18446744073709551615", (), "ffffffffffffffff", 777170435),
        ("FLOAT", struct.unpack("<f", struct.pack("<f", 3.14))[0], (), "00000060b81e0940", 870067643),
        ("DOUBLE", 2.718281828, (), "9b91048b0abf0540", 256879072),
        ("DECIMAL", "2021.1208", (), "09000000323032312e31323038", 3833717094),
        ("DATE", "2020-02-20", (), "0a000000323032302d30322d3230", 4272160266),
        (
            "DATETIME",
            "2020-02-20 02:20:20.123",
            (),
            "17000000323032302d30322d32302030323a32303a32302e313233",
            1568438924,
        ),
        ("TIMESTAMP", "2020-02-20 02:20:20", (), "13000000323032302d30322d32302030323a32303a3230", 1383487700),
        ("TIME", "02:20:20", (), "0800000030323a32303a3230", 2443364957),
        ("YEAR", 2020, (), "e407000000000000", 3118682859),
        ("TEXT", "测试", (), "06000000e6b58be8af95", 3924404098),
        ("BLOB", bytes.fromhex("89504E470D0A1A0A"), (), "0800000089504e470d0a1a0a", 1797532131),
        ("ENUM", "b", ABC, "0200000000000000", 44205989),
        ("SET", "b,c", ABC, "0600000000000000", 574949631),
        ("BIT", b"\x41", (), "4100000000000000", 1898295840),
        ("JSON", '{"key1": "value1"}', (), "120000007b226b657931223a202276616c756531227d", 100501873),
        ("INT", None, (), "", 100501873),
    ]
    crc = 0
    for tidb_type, value, allowed, hexed, running in rows:
        encoded = encode_value(tidb_type, value, allowed)
        assert encoded.hex() == hexed, tidb_type
        crc = zlib.crc32(encoded, crc)
        assert crc == running, tidb_type
    assert row_checksum((t, v, a) for t, v, a, _, _ in rows) == 100501873 == 0x05FD8971
    compiled = RowChecksum([column_encoder(t, a) for t, _, a, _, _ in rows])
    assert compiled([v for _, v, _, _, _ in rows]) == 100501873


# --- individual rules ------------------------------------------------------------------------------


def test_integer_encoding_is_little_endian_u64():
    # §8: the documentation's example is misleading; the bytes are little-endian
    assert encode_value("BIGINT", 0x0123456789ABCDEF).hex() == "efcdab8967452301"
    assert encode_value("BIGINT UNSIGNED", -1) == encode_value("BIGINT UNSIGNED", "18446744073709551615")


def test_float_rules():
    assert encode_value("FLOAT", math.inf) == encode_value("DOUBLE", -math.inf) == bytes(8)
    assert encode_value("DOUBLE", -0.0) != encode_value("DOUBLE", 0.0)


def test_precise_mode_decimal_is_rendered_with_scale():
    encoder = column_encoder("DECIMAL", scale=4)
    assert encoder(Decimal("2021.12")) == encoder("2021.1200") == bytes.fromhex("09000000") + b"2021.1200"


def test_enum_and_set_rules():
    assert encode_value("ENUM", "", ABC) == bytes(8)  # TiDB's invalid ENUM value, index 0
    assert encode_value("SET", "", ABC) == bytes(8)
    assert encode_value("SET", "a,c", ABC) == struct.pack("<Q", 5)  # the seed's example: 0b101
    with pytest.raises(ChecksumInputError, match="ENUM value 'z' is not one of"):
        encode_value("ENUM", "z", ABC)
    with pytest.raises(ChecksumInputError, match="SET member 'z'"):
        encode_value("SET", "a,z", ABC)


def test_bit_accepts_minimal_and_full_width_bytes():
    assert encode_value("BIT", b"\x00\x00\x00\x00\x00\x00\x00\x41") == encode_value("BIT", b"\x41")
    assert encode_value("BIT", b"\x00") == bytes(8)
    with pytest.raises(ChecksumInputError, match="wider than 64 bits"):
        encode_value("BIT", b"\x01" + bytes(8))


def test_allowed_escaping():
    assert split_allowed("a\\,b,c") == ("a,b", "c")
    assert split_allowed("") == ()
    assert split_allowed("a,,b") == ("a", "", "b")
    assert join_allowed(["a,b", "c"]) == "a\\,b,c"


def test_timestamp_conversion_keeps_fraction_digits_and_zero():
    assert timestamp_to_utc("2020-02-20 10:20:20.120", "Asia/Shanghai") == "2020-02-20 02:20:20.120"
    assert timestamp_to_utc("2020-01-01 01:00:00", "+02:00") == "2019-12-31 23:00:00"
    assert timestamp_to_utc("0000-00-00 00:00:00.000", "Asia/Shanghai") == "0000-00-00 00:00:00.000"
    with pytest.raises(ChecksumInputError, match="not YYYY-MM-DD"):
        timestamp_to_utc("yesterday", "+02:00")


@pytest.mark.parametrize(
    ("wall", "zone", "utc"),
    [
        # autumn folds east of UTC: Go picks the offset in effect at the wall time read as UTC, the later one
        ("2021-10-31 02:30:00", "Europe/Berlin", "2021-10-31 01:30:00"),
        ("2021-10-31 01:30:00.25", "Europe/London", "2021-10-31 01:30:00.25"),
        ("2021-04-04 02:30:00", "Australia/Sydney", "2021-04-03 16:30:00"),
        # west of UTC Go picks the earlier one; times next to a fold are unambiguous
        ("2021-11-07 01:30:00", "America/New_York", "2021-11-07 05:30:00"),
        ("2021-10-31 01:30:00", "Europe/Berlin", "2021-10-30 23:30:00"),
        ("2021-10-31 03:30:00", "Europe/Berlin", "2021-10-31 02:30:00"),
    ],
)
def test_timestamp_in_a_dst_fold_is_read_as_go_reads_it(wall, zone, utc):
    # TiCDC hashes ConvertTimeZone(tz → UTC) of the wall text, which goes through Go's time.Date: its lookup
    # takes the zone offset at the wall time read as UTC and keeps it when the result lies in that offset's
    # period (spec §4 calls the choice ambiguous; Go's code makes it deterministic).
    assert timestamp_to_utc(wall, zone) == utc


@pytest.mark.parametrize(
    ("wall", "zone", "go", "java"),
    [
        ("2021-10-31 02:30:00.5", "Europe/Berlin", "2021-10-31T01:30:00.5Z", "2021-10-31T00:30:00.5Z"),
        ("2021-11-07 01:30:00", "America/New_York", "2021-11-07T05:30:00Z", "2021-11-07T05:30:00Z"),
        ("2021-03-28 02:30:00", "Europe/Berlin", "2021-03-28T01:30:00Z", "2021-03-28T01:30:00Z"),
        ("2021-07-01 12:00:00", "Europe/Berlin", "2021-07-01T10:00:00Z", "2021-07-01T10:00:00Z"),
        ("0000-00-00 00:00:00", "Europe/Berlin", "0000-00-00 00:00:00", "0000-00-00 00:00:00"),
    ],
)
def test_decoded_timestamp_takes_the_producers_fold_rule(wall, zone, go, java):
    # TiCDC's values must be the instants its checksum hashes (Go's rule); Java producers take the earlier offset
    assert V.local_timestamp_to_utc(wall, zone, rule="go") == go
    assert V.local_timestamp_to_utc(wall, zone) == java
    if go.endswith("Z"):
        assert timestamp_to_utc(wall, zone) == go[:-1].replace("T", " ")


def test_fold_readings_find_the_reading_of_each_timestamp_that_matches():
    zone = "Europe/Berlin"
    checksum = RowChecksum([column_encoder("INT"), *[column_encoder("TIMESTAMP", server_zone=zone)] * 3])
    row = [1, "2021-10-31 02:30:00", "2021-10-31 02:15:00", "2021-07-01 12:00:00"]
    # TiCDC hashed the second column with Go's reading (CET), the first with the other one (CEST)
    hashed = row_checksum([("INT", 1, ()), ("TEXT", "2021-10-31 00:30:00", ()), ("TEXT", "2021-10-31 01:15:00", ()),
                           ("TEXT", "2021-07-01 10:00:00", ())])
    assert checksum(row) != hashed
    assert fold_readings(checksum, row, (1, 2, 3), zone, hashed) == {1: "2021-10-31T00:30:00Z"}
    assert fold_readings(checksum, row, (1, 2, 3), zone, hashed ^ 1) is None
    assert fold_readings(checksum, row, (3,), zone, hashed) is None  # not in a fold: nothing to try


def test_bit_given_as_an_integer_out_of_range_is_an_input_error():
    # the encoder accepts integers (canonical BIT values) as well as Avro bytes
    with pytest.raises(ChecksumInputError, match="wider than 64 bits"):
        encode_value("BIT", 1 << 64)
    with pytest.raises(ChecksumInputError, match="negative"):
        encode_value("BIT", -1)
    assert encode_value("BIT", (1 << 64) - 1) == bytes([255]) * 8


def test_bad_inputs():
    with pytest.raises(ValueError, match="unknown TiDB type 'GEOMETRY'"):
        column_encoder("GEOMETRY")
    with pytest.raises(ChecksumInputError, match="non-numeric"):
        encode_value("TiDBVECTORFloat32", "[1,x]")
    with pytest.raises(ChecksumInputError, match="beyond float32"):
        encode_value("TiDBVECTORFloat32", "[1e300]")
    with pytest.raises(ValueError, match="not an unsigned 32-bit number"):
        expected_checksum("-1")
    with pytest.raises(ValueError, match="not an unsigned 32-bit number"):
        expected_checksum("4294967296")


def test_expected_checksum_and_verdict():
    assert [expected_checksum(x) for x in (None, "", "0", "1194275474")] == [None, None, None, 1194275474]
    assert verdict(5, 5).ok is True
    assert verdict(5, 6).ok is False
    flagged = verdict(5, 5, corrupted=True)
    assert (flagged.expected, flagged.actual, flagged.ok) == (5, 5, False)


# --- properties ------------------------------------------------------------------------------------


def _reference_ts_to_utc(s, tz):
    # ticdc-checksum.md §6 reference implementation, as written in the spec
    if s.startswith("0000-00-00"):
        return s
    base, _, frac = s.partition(".")
    zone = ZoneInfo(tz) if tz[0] not in "+-" else datetime.strptime(tz.replace(":", ""), "%z").tzinfo
    d = datetime.strptime(base, "%Y-%m-%d %H:%M:%S").replace(microsecond=int((frac + "000000")[:6]), tzinfo=zone)
    u = d.astimezone(UTC)
    out = u.strftime("%Y-%m-%d %H:%M:%S")
    return out + ("." + f"{u.microsecond:06d}"[: len(frac)] if frac else "")


def _reference_encode(t, v, allowed, server_tz):
    def u64(x):
        return struct.pack("<Q", x & 0xFFFFFFFFFFFFFFFF)

    def lv(b):
        return struct.pack("<I", len(b)) + b

    if v is None:
        return b""
    if t in ("INT", "INT UNSIGNED", "BIGINT", "YEAR"):
        return u64(v)
    if t == "BIGINT UNSIGNED":
        return u64(int(v))
    if t in ("FLOAT", "DOUBLE"):
        x = float(v)
        if x != x or x in (float("inf"), float("-inf")):
            x = 0.0
        return struct.pack("<d", x)
    if t == "BIT":
        return u64(int.from_bytes(v, "big"))
    if t == "ENUM":
        return u64(allowed.index(v) + 1)
    if t == "SET":
        return u64(sum(1 << allowed.index(n) for n in v.split(",")) if v else 0)
    if t == "BLOB":
        return lv(bytes(v))
    if t in ("TEXT", "DECIMAL", "DATE", "DATETIME", "TIME", "JSON"):
        return lv(v.encode("utf-8"))
    if t == "TIMESTAMP":
        return lv(_reference_ts_to_utc(v, server_tz).encode("ascii"))
    xs = [float(x) for x in v.strip()[1:-1].split(",") if x.strip()]
    return struct.pack("<I", len(xs)) + b"".join(struct.pack("<f", x) for x in xs)


def _fsp_text(draw, fmt, moment):
    fsp = draw(st.integers(0, 6))
    text = moment.strftime(fmt)
    return text + ("." + f"{moment.microsecond:06d}"[:fsp] if fsp else "")


@st.composite
def wire_value(draw, tidb_type):
    """A value of ``tidb_type`` as it arrives in a TiCDC Avro datum (checksum mode: string DECIMAL and
    BIGINT UNSIGNED)."""
    if tidb_type == "INT":
        return draw(st.integers(-(2**31), 2**31 - 1))
    if tidb_type == "INT UNSIGNED":
        return draw(st.integers(0, 2**32 - 1))
    if tidb_type == "BIGINT":
        return draw(st.integers(-(2**63), 2**63 - 1))
    if tidb_type == "BIGINT UNSIGNED":
        return str(draw(st.integers(0, 2**64 - 1)))
    if tidb_type == "YEAR":
        return draw(st.sampled_from([0, *range(1901, 2156)]))
    if tidb_type == "FLOAT":
        return draw(st.floats(width=32, allow_nan=False, allow_infinity=False))
    if tidb_type == "DOUBLE":
        return draw(st.floats(allow_nan=False, allow_infinity=False))
    if tidb_type == "DECIMAL":
        scale = draw(st.integers(0, 10))
        return f"{Decimal(draw(st.integers(-(10**20), 10**20))).scaleb(-scale):.{scale}f}"
    if tidb_type == "BIT":
        return draw(st.integers(0, 2**64 - 1)).to_bytes(8, "big").lstrip(b"\x00") or b"\x00"
    if tidb_type == "ENUM":
        return draw(st.sampled_from(ABC))
    if tidb_type == "SET":
        return ",".join(m for m in ABC if draw(st.booleans()))
    if tidb_type == "TEXT":
        return draw(st.text(st.characters(exclude_categories=("Cs",)), max_size=20))
    if tidb_type == "BLOB":
        return draw(st.binary(max_size=20))
    if tidb_type == "JSON":
        return draw(st.sampled_from(['{"a": 1}', "[1, 2]", "null", '"x"']))
    moment = draw(st.datetimes(datetime(1971, 1, 1), datetime(2037, 12, 31)))
    if tidb_type == "DATE":
        return moment.strftime("%Y-%m-%d")
    if tidb_type in ("DATETIME", "TIMESTAMP"):
        return _fsp_text(draw, "%Y-%m-%d %H:%M:%S", moment)
    if tidb_type == "TIME":
        return _fsp_text(draw, "%H:%M:%S", moment)
    return "[" + ",".join(repr(x) for x in draw(st.lists(st.floats(width=32, min_value=-1e6, max_value=1e6)))) + "]"


TYPES = (
    "INT", "INT UNSIGNED", "BIGINT", "BIGINT UNSIGNED", "YEAR", "FLOAT", "DOUBLE", "DECIMAL", "BIT", "ENUM",
    "SET", "TEXT", "BLOB", "JSON", "DATE", "DATETIME", "TIMESTAMP", "TIME", "TiDBVECTORFloat32",
)  # fmt: skip


@st.composite
def checksum_rows(draw, max_rows=25):
    types = draw(st.lists(st.sampled_from(TYPES), min_size=1, max_size=12))
    allowed = [ABC if t in ("ENUM", "SET") else () for t in types]
    count = draw(st.integers(1, max_rows))
    rows = [[draw(st.none() | wire_value(t)) for t in types] for _ in range(count)]
    return types, allowed, rows


@given(checksum_rows(), st.sampled_from(["UTC", "+08:00", "-03:30"]))
@settings(max_examples=200, deadline=None)
def test_thousands_of_rows_agree_with_the_reference(data, zone):
    types, allowed, rows = data
    compiled = RowChecksum([column_encoder(t, a, server_zone=zone) for t, a in zip(types, allowed, strict=True)])
    for row in rows:
        expected = zlib.crc32(
            b"".join(_reference_encode(t, v, list(a), zone) for t, v, a in zip(types, row, allowed, strict=True))
        )
        assert compiled(row) == expected
        assert verdict(expected, compiled(row)).ok


def _flip(tidb_type, value, bit):
    """``value`` with one bit of its value flipped (in its natural binary form)."""
    if tidb_type in ("INT", "BIGINT"):
        width = 32 if tidb_type == "INT" else 64
        flipped = (value & (2**width - 1)) ^ (1 << bit % width)
        return flipped - 2**width if flipped >> (width - 1) else flipped
    if tidb_type in ("INT UNSIGNED", "YEAR"):
        return value ^ (1 << bit % (32 if tidb_type == "INT UNSIGNED" else 16))
    if tidb_type == "BIGINT UNSIGNED":
        return str(int(value) ^ (1 << bit % 64))
    if tidb_type in ("FLOAT", "DOUBLE"):
        fmt, width = ("<f", 32) if tidb_type == "FLOAT" else ("<d", 64)
        (raw,) = struct.unpack("<I" if width == 32 else "<Q", struct.pack(fmt, value))
        return struct.unpack(fmt, struct.pack("<I" if width == 32 else "<Q", raw ^ (1 << bit % width)))[0]
    if tidb_type == "BIT":
        return (int.from_bytes(value, "big") ^ (1 << bit % 64)).to_bytes(8, "big").lstrip(b"\x00") or b"\x00"
    if tidb_type == "ENUM":
        index = ABC.index(value) + 1
        flipped = index ^ (1 << bit % 2)
        assume(1 <= flipped <= 3)
        return ABC[flipped - 1]
    if tidb_type == "SET":
        mask = sum(1 << ABC.index(m) for m in value.split(",")) if value else 0
        mask ^= 1 << bit % 3
        return ",".join(m for i, m in enumerate(ABC) if mask >> i & 1)
    data = value if isinstance(value, bytes) else value.encode("utf-8")
    assume(data)
    position = bit % (len(data) * 8)
    flipped = bytearray(data)
    flipped[position // 8] ^= 1 << position % 8
    if isinstance(value, bytes):
        return bytes(flipped)
    try:
        return bytes(flipped).decode("utf-8")
    except UnicodeDecodeError:
        assume(False)


@given(checksum_rows(max_rows=1), st.data())
@settings(max_examples=200, deadline=None)
def test_flipping_any_bit_of_a_column_value_is_detected(data, draw):
    types, allowed, rows = data
    row = rows[0]
    candidates = [
        i for i, (t, v) in enumerate(zip(types, row, strict=True)) if v is not None and t != "TiDBVECTORFloat32"
    ]
    assume(candidates)
    column = draw.draw(st.sampled_from(candidates))
    compiled = RowChecksum([column_encoder(t, a) for t, a in zip(types, allowed, strict=True)])
    changed = list(row)
    changed[column] = _flip(types[column], row[column], draw.draw(st.integers(0, 10_000)))
    assume(not (isinstance(changed[column], float) and not math.isfinite(changed[column])))
    try:
        changed_crc = compiled(changed)
    except ChecksumInputError:
        return  # the flipped value is no longer a valid value of the type: detected as well
    assert changed_crc != compiled(row)

"""The compiled canal-json decoder (cdclake.native._canal) against the Python decoder it stands in for: whatever the
records hold, the decoding tasks' changelog is the same row for row and byte for byte, whether the compiled
path decoded a record or left it to Python; and it does decode the usual messages of every producer."""

from __future__ import annotations

import json
import math
import struct
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdclake import formats
from cdclake import simulator as workload
from cdclake.model import values as V
from cdclake.model.records import Record, read_file
from cdclake.model.types import parse_type
from cdclake.native import compiled
from cdclake.sources.files import records_to_arrow
from cdclake.spark import changelog as CL
from tests.helpers.strategies import canonical_value, columns_of

CHUNK = 64  # several Arrow batches per task, so that layouts and tallies carry across batches
_ORDER = [(name, "ascending") for name in ("status", "topic", "partition", "offset", "seq", "key")]


def _changelog(records: list[Record], options: dict[str, str], reduce: bool, compiled: bool) -> pa.Table:
    fmt = formats.create("canal-json", options)
    chunks = [records[i:i + CHUNK] for i in range(0, len(records), CHUNK)]
    if compiled:
        batches = CL.decode_arrow_task(fmt, [records_to_arrow(c) for c in chunks], reduce)
    else:
        batches = CL.decode_task(fmt, chunks, reduce)
    return CL.flat(pa.Table.from_batches(list(batches), schema=CL.CHANGELOG_ARROW)).sort_by(_ORDER)


def assert_same_changelog(records: list[Record], options: dict[str, str] | None = None, reduce: bool = False) -> None:
    python = _changelog(records, options or {}, reduce, compiled=False)
    compiled = _changelog(records, options or {}, reduce, compiled=True)
    assert compiled.num_rows == python.num_rows
    for name in python.column_names:
        if not compiled[name].equals(python[name]):
            pairs = [(c, p) for c, p in zip(compiled[name].to_pylist(), python[name].to_pylist(), strict=True)
                     if c != p]
            pytest.fail(f"column {name} differs: {pairs[:3]}")


def compiled_share(records: list[Record], options: dict[str, str] | None = None) -> float:
    """The share of row messages the compiled path decoded itself."""
    fmt = formats.create("canal-json", options or {})
    rows = [i for i, r in enumerate(records) if r.value and json.loads(r.value).get("isDdl") is False
            and json.loads(r.value).get("type") in ("INSERT", "UPDATE", "DELETE", "INIT")]
    batch = records_to_arrow(records)
    compiled = fmt.decode_arrow(batch.column("value"), batch.column("offset"))
    assert compiled is not None
    taken = set(range(len(records))) - set(compiled.left.tolist())
    return len(taken & set(rows)) / max(1, len(rows))


# ----------------------------------------------------------------------------------------- simulated producers

@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10**6), flavour=st.sampled_from(["tidb", "canal", "dts"]),
       zone=st.sampled_from(["UTC", "", "Asia/Shanghai"]), reduce=st.booleans())
def test_simulated_workloads_give_the_same_changelog(seed, flavour, zone, reduce):
    generated = workload.generate("canal-json", events=400, tables=2, seed=seed, partitions=2, replays=0.1,
                                  options={"flavour": flavour, "timestamp-zone": zone or "UTC"})
    records = list(generated.records)
    assert_same_changelog(records, {"timestamp-zone": zone}, reduce)


@pytest.mark.parametrize("flavour", ["tidb", "canal", "dts"])
def test_the_compiled_path_decodes_every_producers_usual_rows(flavour):
    generated = workload.generate("canal-json", events=1000, tables=3, seed=11, options={"flavour": flavour})
    records = list(generated.records)
    # What it leaves: values such as -0 or 1e-400 in a float column, which the Python path decides.
    assert compiled_share(records) > 0.97


def test_a_zone_other_than_utc_leaves_timestamp_tables_to_python():
    generated = workload.generate("canal-json", events=200, tables=1, seed=1, options={"flavour": "tidb"})
    records = list(generated.records)
    assert compiled_share(records, {"timestamp-zone": "Asia/Shanghai"}) == 0  # every table has TIMESTAMP columns
    assert_same_changelog(records, {"timestamp-zone": "Asia/Shanghai"})


# ------------------------------------------------------------------------------------------- hostile messages

_ODD_TEXTS = ["", "-0", "0", "007", "+1", " 1", "1.0", "1e5", "1E5", "-0.0", "0.0", "nan", "NaN", "Infinity",
              "1e400", "1e-400", "99999999999999999999", "-99999999999999999999", "1.5e-5", "-1.5e-05", "0.00001",
              "1e16", "123456789012345678901234567890.5", "0000-00-00 00:00:00", "2020-02-30 00:00:00",
              "2020-02-29 23:59:59", "2021-02-29 00:00:00", "2020-01-01 24:00:00", "2020-01-01 00:00:60",
              "2020-01-01 00:00:00.", "2020-01-01 00:00:00.123", "2020-01-01T00:00:00", "0001-01-01 00:00:00",
              "0000-01-01 00:00:00", "12:34:56", "abc", "a,b", "é", "\x00", "\x7f", "\u0100", "ÿþ", 'a"b\\c',
              "\U0001f642", "1", "2", "3", "64", "255", "true", "TRUE", "t", "T", "yes", "١٢"]


def _texts(t: str, odd: bool) -> st.SearchStrategy[str]:
    """Texts a producer may write for a value of type ``t`` and, when ``odd``, texts it should not."""
    sql_type = parse_type(t)
    wrong = st.one_of(st.sampled_from(_ODD_TEXTS), st.text(max_size=6))
    if t in _NO_CANONICAL:
        return wrong if odd else st.sampled_from(["1", "2", "0", "a", "true"])
    canonical = canonical_value(sql_type)
    def text(v: object) -> str | None:
        return V.to_text(v, sql_type, "UTC")

    # Canal's Java float text, TiCDC's plain notation, Python's repr.
    renderings = st.one_of(
        canonical.map(text),
        canonical.map(lambda v: format(Decimal(repr(v)), "f") if isinstance(v, float) else text(v)),
        canonical.map(lambda v: repr(v) if isinstance(v, float) else text(v)))
    return st.one_of(renderings, wrong) if odd else renderings


_NO_CANONICAL = ("enum", "set", "boolean", "money")  # types tests/helpers/strategies.py has no values of
_TYPES = ("tinyint", "int unsigned", "bigint unsigned", "decimal(10,2)", "float", "double", "bit(8)", "date",
          "datetime(3)", "timestamp(6)", "time", "year", "varchar(20)", "varbinary(8)", "json",
          "enum('a','b','c')", "set('x','y','z')", "enum", "set", "boolean", "geometry", "money")


@st.composite
def messages(draw: st.DrawFn, clean: bool = False) -> bytes:
    """A Canal-JSON message: what producers write (``clean``); or half of them that with one thing wrong, the
    others with anything wrong anywhere."""
    hostile = not clean and draw(st.booleans())
    flaw = draw(st.integers(0, 12)) if not hostile and not clean else None

    def pick(good: Any, bad: list[Any], where: int) -> Any:
        return draw(st.sampled_from([good, *bad])) if hostile or flaw == where else good

    columns = columns_of(tuple(draw(st.lists(st.sampled_from(_TYPES), min_size=1, max_size=5, unique=True))))
    names = [c.name for c in columns]

    def row() -> dict[str, Any]:
        chosen = draw(st.lists(st.sampled_from(names), unique=True)) if pick(False, [True], 0) else names
        values: dict[str, Any] = {}
        for c in columns:
            if c.name in chosen:
                values[c.name] = draw(st.none() | _texts(c.type, odd=pick(False, [True], 1)))
                if pick(False, [True], 2):
                    values[c.name] = draw(st.sampled_from([1, 1.5, [], {}, True]))
        if pick(False, [True], 3):
            values["extra"] = "x"
        return values

    kind = draw(st.sampled_from(["INSERT", "UPDATE", "DELETE", "INIT"]))
    kind = pick(kind, ["QUERY", "TIDB_WATERMARK", "ERASE", "BOGUS"], 4)
    count = pick(draw(st.integers(1, 3)), [0], 5)
    message: dict[str, Any] = {
        "database": pick(draw(st.sampled_from(["db", "", None, "dé"])), [1], 6),
        "table": pick("t", ["", None], 6), "type": kind, "isDdl": pick(False, [None, True, 0], 7),
        "mysqlType": {c.name: c.type for c in columns},
        "pkNames": pick(draw(st.sampled_from([["id"], ["id", names[-1]]])), [None, [], ["nope"]], 8),
        "sqlType": {c.name: 4 for c in columns}, "sql": "", "id": 1, "ts": 2,
        "data": [row() for _ in range(count)] if pick(True, [False], 5) else None,
    }
    if kind == "UPDATE" or draw(st.booleans()):
        old_count = pick(count, [count - 1, count + 1], 9)
        message["old"] = [{k: v for k, v in row().items() if draw(st.booleans())} for _ in range(old_count)]
    es = pick(draw(st.sampled_from([1_700_000_000_000, 5])), [None, "absent", 1.5, -5, 10**20], 10)
    if es != "absent":
        message["es"] = es
    tidb = pick(draw(st.sampled_from(["absent", None, {"commitTs": 449_000_000_000_000_000}])),
                [{"commitTs": 449_000_000_000_000_001, "onlyHandleKey": True}, {"watermarkTs": 5}], 10)
    if tidb != "absent":
        message["_tidb"] = tidb
    gtid = draw(st.sampled_from(["absent", None, "", "3E11FA47-71CA-11E1-9E33-C80AA9429562:23", "0-1-42", "x:y"]))
    if gtid != "absent":
        message["gtid"] = gtid
    members = list(message.items())
    if draw(st.booleans()):
        members = draw(st.permutations(members))
    text = json.dumps(dict(members), ensure_ascii=draw(st.booleans()),
                      separators=draw(st.sampled_from([(",", ":"), (", ", ": ")])))
    if pick(False, [True], 11):  # a member twice
        text = text[:-1] + ', "table": "u"}'
    if pick(False, [True], 12):  # a broken message
        text = text[: draw(st.integers(0, len(text)))]
    return text.encode()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(messages(), min_size=1, max_size=12), st.sampled_from(["UTC", ""]), st.booleans())
def test_any_messages_give_the_same_changelog(values, zone, reduce):
    records = [Record(value=v, topic="t", partition=i % 2, offset=i) for i, v in enumerate(values)]
    assert_same_changelog(records, {"timestamp-zone": zone}, reduce)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(messages(clean=True), min_size=1, max_size=8), st.booleans())
def test_the_compiled_path_takes_every_usual_message(values, reduce):
    records = [Record(value=v, topic="t", offset=i) for i, v in enumerate(values)]
    assert compiled_share(records) == 1
    assert_same_changelog(records, reduce=reduce)


@pytest.mark.parametrize("zone", ["UTC", ""])
def test_every_odd_text_in_every_type_gives_the_same_changelog(zone):
    # One value in an otherwise usual message: taken by the compiled path exactly, or left to Python.
    values = [json.dumps({"type": "UPDATE", "isDdl": False, "database": "d", "table": "t", "es": 1, "pkNames": ["id"],
                          "mysqlType": {"id": "bigint", "c": type_text}, "data": [{"id": "1", "c": text}],
                          "old": [{"id": "0", "c": text}]}).encode()
              for type_text in (*_TYPES, "bigint") for text in _ODD_TEXTS]
    records = [Record(value=v, offset=i) for i, v in enumerate(values)]
    assert 0.3 < compiled_share(records, {"timestamp-zone": zone}) < 1
    assert_same_changelog(records, {"timestamp-zone": zone})


@pytest.mark.parametrize("escaped", [r"a\"b\\c\n\r\t\b\f", r"\u001f\u0000x", r"\/", r"\u0041", r"\u001F", r"\u000a",
                                     r"\u0009", r"\u0022", r"\u005c", r"\u00e9", r"\ud83d\ude42", r"x\\u0041"])
def test_every_spelling_of_an_escape_gives_the_same_changelog(escaped):
    # A text whose escapes are all as msgspec writes them is copied; any other spelling is written again.
    for type_text in ("varchar(20)", "json", "varbinary(20)"):
        value = ('{"type": "INSERT", "isDdl": false, "database": "d", "table": "t", "es": 1, "pkNames": ["id"], '
                 f'"mysqlType": {{"id": "bigint", "s": "{type_text}"}}, "data": [{{"id": "1", "s": "{escaped}"}}]}}')
        records = [Record(value=value.encode(), offset=0)]
        if type_text != "varbinary(20)":  # binary holds characters up to U+00FF only; others are Python's to fail
            assert compiled_share(records) == 1
        assert_same_changelog(records)


def test_escaped_text_and_floats_are_written_as_msgspec_writes_them():
    columns = {"id": "bigint", "s": "varchar(10)", "d": "double", "b": "varbinary(4)"}
    rows = [{"id": "1", "s": 'a"b\\c\n\u0001é\U0001f642', "d": "0.000015", "b": "\u00ff\u0000A"},
            {"id": "2", "s": "x", "d": "1.5E-7", "b": ""}, {"id": "3", "s": "", "d": "12345678901234567890", "b": "é"}]
    values = [json.dumps({"type": "INSERT", "isDdl": False, "database": "d", "table": "t", "es": 1, "pkNames": ["id"],
                          "mysqlType": columns, "data": [row]}, ensure_ascii=ascii_only).encode()
              for row in rows for ascii_only in (True, False)]
    records = [Record(value=v, offset=i) for i, v in enumerate(values)]
    assert compiled_share(records) == 1
    assert_same_changelog(records)


# Plain notation of every length: up to 15 significant digits the compiled path copies the text, beyond it
# prints the parsed double again; leading zeros, trailing zeros and tiny or huge values sit at the border.
_PLAIN_NUMBERS = st.one_of(
    st.from_regex(r"-?(0|[1-9][0-9]{0,19})(\.[0-9]{1,22})?", fullmatch=True),
    st.builds(lambda zeros, digits: f"0.{'0' * zeros}{digits}", st.integers(0, 8), st.integers(1, 10**8)))


@settings(max_examples=300, deadline=None)
@given(st.lists(_PLAIN_NUMBERS, min_size=1, max_size=6), st.sampled_from(["double", "float"]))
def test_floats_in_plain_notation_are_written_as_msgspec_writes_them(texts, float_type):
    values = [json.dumps({"type": "INSERT", "isDdl": False, "database": "d", "table": "t", "es": 1,
                          "pkNames": ["id"], "mysqlType": {"id": "bigint", "f": float_type},
                          "data": [{"id": str(i), "f": text}]}).encode() for i, text in enumerate(texts)]
    records = [Record(value=v, offset=i) for i, v in enumerate(values)]
    assert_same_changelog(records)
    if not any(float(text) == 0 for text in texts):  # a zero's sign is the Python path's to decide
        assert compiled_share(records) == 1


def _compiled_doubles(texts: list[str]) -> list[float]:
    """The doubles the compiled path writes for texts in a DOUBLE column, all in one message's rows; every
    message must be its own to decode."""
    value = json.dumps({"type": "INSERT", "isDdl": False, "database": "d", "table": "t", "es": 1, "pkNames": ["id"],
                        "mysqlType": {"id": "bigint", "f": "double"},
                        "data": [{"id": str(i), "f": text} for i, text in enumerate(texts)]}).encode()
    batch = records_to_arrow([Record(value=value, offset=0)])
    decoded = formats.create("canal-json").decode_arrow(batch.column("value"), batch.column("offset"))
    assert decoded is not None and not len(decoded.left)
    return [float(json.loads(after)["f"]) for after in decoded.columns["after"].to_pylist()]


def _bits(value: float) -> bytes:
    return struct.pack("<d", value)


def _near_midpoint(d: float, digits: int) -> str:
    """The point halfway between d and the next double up, to ``digits`` significant digits: where reading
    a double is hardest to get right, as the text falls within a few units of a rounding boundary."""
    midpoint = (Decimal(d) + Decimal(math.nextafter(d, math.inf))) / 2
    return format(midpoint, f".{digits - 1}e")


_DOUBLES = st.floats(allow_nan=False, allow_infinity=False).filter(lambda d: d != 0 and math.isfinite(
    math.nextafter(d, math.inf)))
# Every way a producer writes a double, and the texts that sit on a rounding boundary: Python's repr, TiCDC's
# plain notation (hundreds of digits for tiny and huge values), 1 to 25 significant digits, midpoints.
_DOUBLE_TEXTS = st.one_of(
    _DOUBLES.map(repr),
    _DOUBLES.map(lambda d: format(Decimal(repr(d)), "f")),
    st.builds(lambda d, digits: f"{d:.{digits - 1}e}", _DOUBLES, st.integers(1, 25)),
    st.builds(_near_midpoint, _DOUBLES, st.integers(15, 21)),
    st.builds(lambda d, digits: format(Decimal(_near_midpoint(d, digits)), "f"), _DOUBLES, st.integers(15, 21)),
).filter(lambda text: float(text) != 0 and math.isfinite(float(text)))  # zeros' signs and overflow: Python's


@settings(max_examples=300, deadline=None)
@given(st.lists(_DOUBLE_TEXTS, min_size=1, max_size=50))
def test_the_compiled_path_reads_every_double_as_python_does(texts):
    assert [_bits(d) for d in _compiled_doubles(texts)] == [_bits(float(t)) for t in texts]


def test_doubles_at_the_edges_of_each_way_of_reading_them():
    texts = [
        "9007199254740992", "9007199254740993", "9007199254740995", "1e22", "1e23", "123456789e-22", "3e-23",
        "9999999999999999999", "99999999999999999999", "1.7976931348623157e308", "1.7976931348623158e308",
        "2.2250738585072014e-308", "2.2250738585072011e-308", "4.9406564584124654e-324", "1e-342", "1e-343",
        "2.4703282292062328e-324", "0.1", "0.30000000000000004", "100000000000000000000000", "1" + "0" * 300,
        "0." + "0" * 300 + "123", "1.000000000000000000000000000000001", "-5e-324", "8.98846567431158e307",
    ]
    texts += [_near_midpoint(d, digits) for d in (1.0, 0.1, 2.0**-1022, 1e300, 5e-324, 9007199254740992.0)
              for digits in (17, 18, 19, 20)]
    assert [_bits(d) for d in _compiled_doubles(texts)] == [_bits(float(t)) for t in texts]


def test_the_table_of_powers_of_five_is_each_power_scaled_and_truncated():
    table = compiled.powers_of_five(-342, 308)
    for q, (high, low, shift) in zip(range(-342, 309), struct.iter_unpack("=QQq", table), strict=True):
        scaled = high << 64 | low
        exact = Fraction(5) ** q * Fraction(2) ** shift
        assert 2**127 <= scaled < 2**128
        assert scaled <= exact < scaled + 1


_TRICKY = 'ab "\\/\n\x01\x1f\x7f\x80é€\U0001f642'


def _insert(text: str, ascii_only: bool, identity: int = 1) -> bytes:
    return json.dumps({"type": "INSERT", "isDdl": False, "database": "d", "table": "t", "es": 1, "pkNames": ["id"],
                       "mysqlType": {"id": "bigint", "s": "varchar(100)", "b": "varbinary(100)"},
                       "data": [{"id": str(identity), "s": text, "b": text}]}, ensure_ascii=ascii_only).encode()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from(_TRICKY), max_size=70), min_size=1, max_size=6), st.booleans())
def test_long_texts_with_escapes_anywhere_give_the_same_changelog(texts, ascii_only):
    # Strings are scanned sixteen bytes at a time: a quote, backslash, control or non-ASCII character may fall
    # anywhere in a block or straddle two.
    records = [Record(value=_insert(text, ascii_only, i), offset=i) for i, text in enumerate(texts)]
    assert_same_changelog(records)


@pytest.mark.parametrize("bad", [b"\xff", b"\x80", b"\xc3", b"\xed\xa0\x80"])
def test_a_byte_that_is_not_utf8_anywhere_in_a_long_text_fails_its_message(bad):
    records = []
    for length in range(40):
        clean = _insert("x" * length, True)
        start = clean.rindex(b'"s": "') + 6  # the row's, not mysqlType's
        for at in range(start, start + length + 1):
            records.append(Record(value=clean[:at] + bad + clean[at:], offset=len(records)))
    assert_same_changelog(records)
    batch = records_to_arrow(records)
    compiled = formats.create("canal-json").decode_arrow(batch.column("value"), batch.column("offset"))
    assert compiled is not None and len(compiled.left) == len(records)  # each left to Python, which fails it


def test_a_layout_seen_before_is_recognised_by_its_bytes_alone():
    # mysqlType, pkNames and sqlType are compared with the last ones checked, byte for byte: a layout that
    # differs in one byte, or another spelling of the same layout, must still be told apart.
    layouts = [{"id": "bigint", "c": "int"}, {"id": "bigint", "c": "varchar(4)"}, {"id": "bigint", "c": "int"},
               {"id": "bigint", "c": "int", "d": "int"}, {"c": "int", "id": "bigint"}]
    values = []
    for i, layout in enumerate(layouts * 2):
        row = {name: "1" if "int" in t else "x" for name, t in layout.items()}
        values.append(json.dumps({"type": "INSERT", "isDdl": False, "database": "d", "table": "t", "es": i,
                                  "pkNames": ["id"] if i % 3 else ["id", "c"], "mysqlType": layout,
                                  "sqlType": {name: i % 2 for name in layout}, "data": [row]},
                                 separators=(",", ":") if i % 2 else (", ", ": ")).encode())
    records = [Record(value=v, offset=i) for i, v in enumerate(values)]
    assert compiled_share(records) == 1
    assert_same_changelog(records)


@pytest.mark.parametrize("start", [0, 1, 3, 8, 13])
def test_a_slice_of_a_batch_decodes_as_the_same_records_alone(start):
    # Spark may hand over a batch that is a view into a larger one (an offset into its buffers, a validity
    # bitmap starting mid-byte), with tombstones among the records.
    generated = workload.generate("canal-json", events=60, tables=2, seed=5, options={"flavour": "tidb"})
    records = [Record(value=None if i % 7 == 3 else r.value, topic="t", offset=i)
               for i, r in enumerate(generated.records)]
    whole = records_to_arrow(records)
    sliced = whole.slice(start, 40)
    alone = records_to_arrow(records[start:start + 40])
    fmt = formats.create("canal-json")
    got = [pa.Table.from_batches(list(CL.decode_arrow_task(fmt, [batch])), schema=CL.CHANGELOG_ARROW)
           for batch in (sliced, alone)]
    assert got[0].num_rows > 30
    assert got[0].equals(got[1])
    compiled = fmt.decode_arrow(sliced.column("value"), sliced.column("offset"))
    assert compiled is not None and len(compiled.records) > 20  # the slice went through the compiled path


# --------------------------------------------------------------------------------------------------- corpus

@pytest.mark.parametrize("name", ["flink/canal-data.txt", "flink/canal-data-filter-table.txt",
                                  "flink/canal-data-with-init.txt"])
def test_corpus_gives_the_same_changelog(corpus, name):
    records = [line.record for line in read_file(corpus / name) if line.record is not None]
    assert_same_changelog(records)
    assert compiled_share(records) > 0.5


def test_a_batch_with_a_record_ordered_by_its_partition_takes_the_python_path():
    # Without es or a commit ts, a DDL is ordered by its partition's commit ts before it, read in order.
    ddl = json.dumps({"type": "ERASE", "isDdl": True, "database": "d", "table": "t", "sql": "DROP TABLE t"}).encode()
    row = json.dumps({"type": "INSERT", "isDdl": False, "database": "d", "table": "t", "es": 7, "pkNames": ["id"],
                      "mysqlType": {"id": "int"}, "data": [{"id": "1"}]}).encode()
    records = [Record(value=v, offset=i) for i, v in enumerate([row, ddl, row])]
    assert_same_changelog(records)
    log = CL.flat(pa.Table.from_batches(list(CL.decode_arrow_task(formats.create("canal-json"),
                                                                  [records_to_arrow(records)]))))
    ddl_row = log.filter(pc.equal(log["kind"], "ddl")).to_pylist()[0]
    assert ddl_row["commit_ts"] is None and ddl_row["partition_ts"] == 7

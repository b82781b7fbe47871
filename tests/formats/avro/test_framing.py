from __future__ import annotations

import re
import zlib
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdclake.formats.avro import framing as confluent
from cdclake.formats.avro.framing import ApicurioId, frame, unframe
from cdclake.formats.base import DecodeError
from cdclake.model.records import Record


def test_frame_layout_matches_spec():
    # ticdc-avro.md §12: key of id=1 with key schema id 1 is 00 00000001 02
    assert frame(1, b"\x02") == bytes.fromhex("000000000102")
    assert frame(0x01020304, b"") == b"\x00\x01\x02\x03\x04"


@given(st.integers(0, 2**31 - 1), st.binary(max_size=64))
@settings(max_examples=200)
def test_frame_unframe_round_trip(schema_id, payload):
    assert unframe(frame(schema_id, payload)) == (schema_id, payload)


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x00\x00\x00\x01"])
def test_unframe_rejects_short_input(data):
    with pytest.raises(DecodeError, match="shorter than the 5-byte Confluent header"):
        unframe(data)


def test_unframe_rejects_wrong_magic():
    with pytest.raises(DecodeError, match="0x01, neither the Confluent magic byte 0x00 nor the AWS Glue header"):
        unframe(b"\x01\x00\x00\x00\x01\x02")


def test_a_message_of_apicurio_native_framing_says_how_to_make_its_producer_write_confluents():
    # Apicurio's default: the bare datum, the schema id in a Kafka header; the datum may start anywhere.
    with pytest.raises(DecodeError, match=r"first byte is 0x02.*Apicurio Registry's own framing.*framing=apicurio"):
        unframe(b"\x02\x06abc")


def _headers(headers: list[tuple[str, bytes]]) -> Callable[[str], bytes | None]:
    return Record(value=None, headers=headers).header


def _long(number: int) -> bytes:
    return number.to_bytes(8, "big", signed=True)


@given(st.integers(1, 2**63 - 1), st.binary(max_size=32), st.sampled_from(["key", "value"]),
       st.sampled_from(["globalId", "contentId"]))
@settings(max_examples=200)
def test_an_apicurio_id_in_a_header_leaves_the_value_the_bare_datum(number, datum, part, kind):
    headers = [("other", b"x"), (f"apicurio.{part}.{kind}", _long(number))]
    schema_id, readable = confluent.apicurio_framed(datum, _headers(headers), part)
    assert schema_id == ApicurioId(kind, number) and readable[confluent.HEADER_SIZE:] == datum


@given(st.integers(1, 2**63 - 1), st.binary(max_size=32))
@settings(max_examples=200)
def test_an_apicurio_id_in_eight_bytes_is_a_global_id(number, datum):
    # Apicurio 2.x (its Kafka Connect converter too): 0x00, the id as a big-endian long, the datum.
    data = b"\x00" + _long(number) + datum
    if number < 2**32:  # else its first 4 bytes are not zero, and it reads as 4-byte id (Apicurio reads it so too)
        schema_id, readable = confluent.apicurio_framed(data, _headers([]), "value")
        assert schema_id == ApicurioId("globalId", number) and readable[confluent.HEADER_SIZE:] == datum
        assert confluent.apicurio_framed(data, _headers([]), "value", "contentId")[0] == ApicurioId("contentId", number)


@given(st.integers(1, 2**31 - 1), st.binary(max_size=32))
@settings(max_examples=200)
def test_an_apicurio_id_in_four_bytes_is_a_content_id(number, datum):
    # Apicurio 3.x: Confluent's layout, with a content id
    schema_id, readable = confluent.apicurio_framed(frame(number, datum), _headers([]), "key")
    assert schema_id == ApicurioId("contentId", number) and readable[confluent.HEADER_SIZE:] == datum
    framed = confluent.apicurio_framed(frame(number, datum), _headers([]), "key", "globalId")
    assert framed[0] == ApicurioId("globalId", number)


@pytest.mark.parametrize(("data", "headers", "reason"), [
    (b"\x02\x04", [], r"no header apicurio.value.globalId or .contentId, and the value does not start with"),
    (b"\x00\x00\x00", [], r"does not start with Apicurio's magic byte 0x00 and an id"),
    (b"\x00\x00\x00\x00\x00\x01", [], r"shorter than Apicurio's 9-byte header"),
    (b"\x02", [("apicurio.value.globalId", b"\x01")], r"header apicurio.value.globalId holds 1 byte\(s\)"),
    (b"\x02", [("apicurio.value.contentId", _long(3)), ("apicurio.value.encoding", b"JSON")],
     r"apicurio.value.encoding says b'JSON': only Avro's BINARY encoding is read"),
    (b"\x02", [("apicurio.key.globalId", _long(3))], r"no header apicurio.value.globalId"),  # the key's, not ours
])
def test_bad_apicurio_framing_is_a_decode_error(data, headers, reason):
    with pytest.raises(DecodeError, match=reason):
        confluent.apicurio_framed(data, _headers(headers), "value")


@given(st.uuids(), st.binary(max_size=64))
@settings(max_examples=200)
def test_glue_frame_unframe_round_trip(version, payload):
    data = frame(version, payload)
    assert data[:2] == b"\x03\x00" and data[2:18] == version.bytes  # ticdc-avro.md §3: 18-byte Glue header
    assert unframe(data) == (version, payload)
    compressed = b"\x03\x05" + version.bytes + zlib.compress(payload)
    assert unframe(compressed) == (version, payload)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x03\x00" + bytes(15), "message of 17 byte(s) starting 0x03 is shorter than the 18-byte AWS Glue header"),
        (b"\x03\x02" + bytes(16) + b"\x02", "AWS Glue header names compression 2: only 0 (none) and 5 (zlib)"),
        (b"\x03\x05" + bytes(16) + b"not zlib", "marked zlib-compressed does not decompress"),
        (b"\x03\x05" + bytes(16) + zlib.compress(b"\x02" * 100)[:-6], "marked zlib-compressed is truncated"),
    ],
)
def test_bad_glue_headers_are_decode_errors(data, reason):
    with pytest.raises(DecodeError, match=re.escape(reason)):
        unframe(data)


def test_a_glue_datum_that_inflates_beyond_the_limit_is_refused(monkeypatch):
    monkeypatch.setattr(confluent, "GLUE_MAX_DATUM", 2**20)
    bomb = b"\x03\x05" + bytes(16) + zlib.compress(bytes(2**20 + 1))
    with pytest.raises(DecodeError, match="inflates to more than 1 MiB"):
        unframe(bomb)
    assert unframe(b"\x03\x05" + bytes(16) + zlib.compress(bytes(2**20)))[1] == bytes(2**20)

"""Reading Avro's binary encoding: varints, and the scaffolding of the readers generated per schema."""

from __future__ import annotations


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """A multi-byte Avro varint starting at ``pos`` (readers inline the one-byte case): its raw value,
    before zig-zag decoding, and the position after it. Shared by the generated Avro readers."""
    byte = data[pos]
    result = byte & 0x7F
    shift = 7
    pos += 1
    while byte >= 0x80:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if shift > 70:
            raise ValueError("varint longer than 10 bytes")
    return result, pos

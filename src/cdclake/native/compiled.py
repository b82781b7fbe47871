"""The compiled twins of cdclake's hot paths (C extensions that setup.py builds where a compiler is present):
``_records`` reads captured-records files, ``_canal`` decodes Canal-JSON row messages, ``_images`` makes the
row images of every other format the changelog's texts; they share ``common.h``. Each leaves to the Python
code whatever it cannot read exactly as that code does, so results never depend on whether it was built;
only speed does."""

from __future__ import annotations

import importlib.util
import logging
import struct

import pyarrow as pa

EXTENSIONS = ("cdclake.native._canal", "cdclake.native._images", "cdclake.native._records")

logger = logging.getLogger("cdclake")


def missing() -> list[str]:
    """The compiled twins that were not built for this Python."""
    return [name for name in EXTENSIONS if importlib.util.find_spec(name) is None]


def warn_if_missing() -> None:
    if absent := missing():
        logger.warning("%s not built (no C compiler or Python headers at install): those paths run in Python, "
                       "several times slower; reinstall cdclake where a compiler is present", ", ".join(absent))


def variable_array(kind: pa.DataType, buffers: tuple[bytes | None, bytes, bytes, int]) -> pa.Array:
    """A binary or string column from an extension's (validity, int32 offsets, data, null count): no validity
    (None or empty) means no nulls, a null count of -1 that Arrow counts them."""
    valid, offsets, data, nulls = buffers
    return pa.Array.from_buffers(kind, len(offsets) // 4 - 1, [
        pa.py_buffer(valid) if valid else None, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls)


def powers_of_five(lowest: int, highest: int) -> bytes:
    """``_canal``'s table for reading doubles: for each q, floor(5^q * 2^shift) with the shift that puts it in
    [2^127, 2^128), as (high word, low word, shift) in this machine's layout. Made here from exact integers
    at import, so that the C source holds no table of constants to trust."""
    rows = []
    for q in range(lowest, highest + 1):
        if q >= 0:
            shift = 128 - (5**q).bit_length()
            scaled = 5**q << shift if shift >= 0 else 5**q >> -shift
        else:
            # 2^shift / 5^-q lies in (2^127, 2^128): 5^-q is no power of two.
            shift = 127 + (5**-q).bit_length()
            scaled = (1 << shift) // 5**-q
        rows.append(struct.pack("=QQq", scaled >> 64, scaled & (2**64 - 1), shift))
    return b"".join(rows)

"""The reader generated per TiCDC Avro writer schema: one walk over the bytes that yields canonical values and
the row checksum together.

fastavro plus a converter pass plus a checksum pass costs three walks over a row and a Python call per
value. For the schema shapes TiCDC writes, a reader is generated per schema ID that walks the bytes once,
producing canonical values and the checksum as it goes. It is only an optimisation: any exception in it
(truncated data, a bad union branch, an ENUM name not in ``allowed``…) sends the record through the
reference path (fastavro + converters + RowChecksum), which gives the exact result or error; the tests
compare both paths on every generated row. It is built on the shared scaffolding of
:mod:`cdclake.formats.avro.reader`, not on its schema-driven reader, because the checksum and the
conversions are fused into each column's read.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any, Final

from cdclake.formats.avro.reader import Emitter, bytes_code, long_code, skip_varint
from cdclake.formats.ticdc.avro_schema import (
    CHECKSUM_FIELDS,
    COMMIT_TS_FIELD,
    EXTENSION_FIELDS,
    PHYSICAL_TIME_FIELD,
    U64,
    Col,
    Plan,
)
from cdclake.model import values as V

_LENGTH_CHECKSUM: Final = "crc = _crc(raw, _crc(_u32(n), crc))"


def _emit_column(out: Emitter, depth: int, i: int, col: Col, avro: dict[str, Any], zone_utc: bool,
                 checksum: bool, encoder: Any) -> bool:  # fmt: skip
    """Read column ``i`` into ``v{i}``; False when the type is not one the generator knows."""
    var = f"v{i}"
    base = avro.get("type")
    t = col.tidb_type
    lines: list[str] = []
    enc = out.bind(f"_e{i}", encoder)
    if base in ("int", "long"):
        out.emit(depth, *long_code(var))
        if t == "BIGINT UNSIGNED":
            lines.append(f"if {var} < 0: {var} += {U64}")
        if checksum:
            lines.append(f"crc = _crc(_q({var} & {0xFFFF_FFFF_FFFF_FFFF}), crc)")
    elif base in ("float", "double"):
        size, unpack = (4, "_f32") if base == "float" else (8, "_f64")
        lines.append(f"{var} = {unpack}(data, p)[0]")
        if checksum:
            lines.append(f"crc = _crc(_d({var}) if {var} - {var} == 0.0 else _ZERO8, crc)")
        lines.append(f"p += {size}")
    elif base in ("string", "bytes"):
        out.emit(depth, *bytes_code("raw"))
        logical = avro.get("logicalType")
        if base == "bytes" and logical == "decimal":
            scale = out.bind(f"_s{i}", int(avro.get("scale", 0)))
            lines.append(f"{var} = _unscaled(raw, {scale})")
            if checksum:
                lines += ["raw = " + var + ".encode()", "n = len(raw)", _LENGTH_CHECKSUM]
        elif base == "bytes" and t == "BIT":
            lines.append(f"{var} = _from_bytes(raw, 'big')")
            if checksum:
                lines.append(f"crc = _crc(_q({var}), crc)")
        elif base == "bytes":
            if t != "BLOB":
                return False
            lines.append(f"{var} = _b64(raw)")
            if checksum:
                lines.append(_LENGTH_CHECKSUM)
        elif t == "BIGINT UNSIGNED":
            lines += [f"{var} = int(raw)", f"if not 0 <= {var} < {U64}: raise ValueError('out of range')"]
            if checksum:
                lines.append(f"crc = _crc(_q({var}), crc)")
        elif t == "TIMESTAMP" and zone_utc:
            lines += [
                f"{var} = raw.decode()",
                f"if not {var}.startswith('0000-00-00'): {var} = {var}.replace(' ', 'T', 1) + 'Z'",
            ]
            if checksum:
                lines.append(_LENGTH_CHECKSUM)
        elif t in ("TEXT", "DECIMAL", "DATE", "DATETIME", "TIME", "JSON"):
            lines.append(f"{var} = raw.decode()")
            if checksum:
                lines.append(_LENGTH_CHECKSUM)
        elif t in ("ENUM", "SET", "TiDBVECTORFloat32", "TIMESTAMP"):
            lines.append(f"{var} = raw.decode()")
            if checksum:
                lines.append(f"crc = _crc({enc}({var}), crc)")
            if col.convert is not None:
                lines.append(f"{var} = {out.bind(f'_c{i}', col.convert)}({var})")
        else:
            return False
    else:
        return False
    out.emit(depth, *lines)
    return True


_TAIL_TYPES: Final = {f["name"]: f["type"] for f in (*EXTENSION_FIELDS, *CHECKSUM_FIELDS)}
_TAIL_VARS: Final = dict(zip(_TAIL_TYPES, ("op", "ts", "phys", "expected", "corrupted", "version"), strict=True))


def compile_reader(raw: dict[str, Any], plan: Plan, zone_utc: bool) -> Any:
    """A generated reader for the writer schema ``raw`` of ``plan``, or None when its shape is not one the
    generator handles."""
    fields = raw["fields"]
    encoders = plan.checksum.encoders
    ncols = len(plan.cols)
    checksum = plan.has_checksum
    out = Emitter()
    out.emit(0, "def read(data, _crc=_crc, _q=_q, _u32=_u32, _varint=_varint):", "    p = 5", "    crc = 0")
    for var in _TAIL_VARS.values():
        out.emit(1, f"{var} = None")
    for i, (field, col) in enumerate(zip(fields[:ncols], plan.cols, strict=True)):
        avro = field["type"]
        if isinstance(avro, list):
            if len(avro) != 2 or "null" not in avro:
                return None
            null_byte = 2 * avro.index("null")
            value_byte = 2 - null_byte
            branch = next(b for b in avro if b != "null")
            out.emit(
                1, "u = data[p]", "p += 1", f"if u == {null_byte}:", f"    v{i} = None", f"elif u == {value_byte}:"
            )
            if not _emit_column(out, 2, i, col, branch, zone_utc, checksum, encoders[i]):
                return None
            out.emit(1, "else:", "    raise ValueError('bad union branch')")
        elif not _emit_column(out, 1, i, col, avro, zone_utc, checksum, encoders[i]):
            return None
    tail_names = {f.get("name") for f in fields[ncols:]}
    for field in fields[ncols:]:
        name = field.get("name")
        if field.get("type") != _TAIL_TYPES.get(name):
            return None  # _ticdc_before, or a reserved name with another type: the reference path
        var = _TAIL_VARS[name]
        if field["type"] == "string":
            out.emit(1, *bytes_code("raw"))
            out.emit(1, f"{var} = raw.decode()")
        elif field["type"] == "boolean":
            out.emit(1, f"{var} = data[p] != 0", "p += 1")
        elif name == PHYSICAL_TIME_FIELD and COMMIT_TS_FIELD in tail_names:
            # always commit_ts >> 18 (the TSO's physical part): skip the bytes instead of decoding them
            out.emit(1, "p = _varint_end(data, p).end()", "phys = ts >> 18")
        else:
            out.emit(1, *long_code(var))
    names = ", ".join(f"{c.name!r}: v{i}" for i, c in enumerate(plan.cols))
    out.emit(
        1,
        "if p != len(data):",
        "    raise ValueError('length')",
        f"return {{{names}}}, None, op, ts, phys, expected, corrupted, {'crc' if checksum else 'None'}, ''",
    )
    out.env.update(
        _crc=zlib.crc32, _u32=struct.Struct("<I").pack, _q=struct.Struct("<Q").pack, _d=struct.Struct("<d").pack,
        _ZERO8=bytes(8), _unscaled=V.decimal_from_unscaled, _from_bytes=int.from_bytes, _b64=V.b64,
        _varint_end=skip_varint,
    )  # fmt: skip
    return out.compile(f"<ticdc-avro reader {plan.table}>")

"""Reading Avro's binary encoding, shared by every Avro format: varints and zig-zag longs, length-prefixed
bytes, array and map block counts, and the scaffolding of the readers generated per schema.

A generated reader is straight-line Python for one writer schema that walks the bytes once: per-value
dispatch dominates the cost of a generic reader in Python. :class:`Emitter` collects its lines and bindings;
:func:`long_code` and :func:`bytes_code` are the inline reads every generator uses (the one-byte cases inline,
the rest through :func:`read_varint`); :func:`compile_reader` generates a whole reader for a schema of the
shapes Kafka Connect writes. A generated reader is only ever a fast path: the formats send a record it cannot
read (any exception) through fastavro or their own generic reader, which gives the exact value or error.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from typing import Any, Final

from cdclake.formats.avro.names import lookup, register

_F32: Final = struct.Struct("<f").unpack_from
_F64: Final = struct.Struct("<d").unpack_from

#: The match of a whole varint at a position (``.end()`` is the position after it): skips one without decoding.
skip_varint: Final = re.compile(rb"[\x80-\xff]{0,9}[\x00-\x7f]").match


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """A multi-byte Avro varint starting at ``pos`` (readers inline the one-byte case): its raw value,
    before zig-zag decoding, and the position after it."""
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


def read_long(data: bytes, pos: int) -> tuple[int, int]:
    """The zig-zag varint ``int``/``long`` at ``pos``, and the position after it."""
    b = data[pos]
    pos += 1
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos
    n = b & 0x7F
    shift = 7
    while True:
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return (n >> 1) ^ -(n & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError(f"varint longer than 10 bytes at byte {pos}")


def read_length(data: bytes, pos: int) -> tuple[int, int]:
    """The length of the ``bytes``/``string`` at ``pos``, and the position of its payload."""
    b = data[pos]
    if b < 0x80 and not b & 1:
        return b >> 1, pos + 1
    n, pos = read_long(data, pos)
    if n < 0:
        raise ValueError(f"negative length {n} at byte {pos}")
    return n, pos


def read_bytes(data: bytes, pos: int) -> tuple[bytes, int]:
    """The length-prefixed ``bytes``/``string`` at ``pos``, and the position after it; IndexError when the
    data ends first."""
    n, pos = read_length(data, pos)
    end = pos + n
    if end > len(data):
        raise IndexError("truncated bytes")
    return data[pos:end], end


def block_count(data: bytes, pos: int) -> tuple[int, int]:
    """The item count of an array or map block at ``pos`` (0 ends the value), and the position after it."""
    n, pos = read_long(data, pos)
    if n < 0:  # a negative count is followed by the block's byte size
        _, pos = read_long(data, pos)
        n = -n
    return n, pos


def zigzag(n: int) -> bytes:
    """The Avro encoding of the ``long`` ``n``."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# --- generated readers -------------------------------------------------------------------------------


def long_code(var: str, pos: str = "p") -> list[str]:
    """Lines reading the ``long`` at ``data[pos]`` into ``var`` (one and two bytes inline)."""
    return [f"{var} = data[{pos}]", f"if {var} < 128:", f"    {pos} += 1", f"elif data[{pos} + 1] < 128:",
            f"    {var} = ({var} & 127) | data[{pos} + 1] << 7", f"    {pos} += 2", "else:",
            f"    {var}, {pos} = _varint(data, {pos})", f"{var} = ({var} >> 1) ^ -({var} & 1)"]


def bytes_code(var: str, pos: str = "p", length: str = "n", then: str = "") -> list[str]:
    """Lines reading the ``bytes``/``string`` payload at ``data[pos]`` into ``var`` (followed by ``then``, e.g.
    ``.decode()``), its length into ``length``. No bounds check: a payload past the end is short, and a reader
    that ends by checking its position, or by indexing the byte after the value, fails on it."""
    return [f"{length} = data[{pos}]", f"if {length} < 128 and not {length} & 1:", f"    {length} >>= 1",
            f"    {pos} += 1", "else:", f"    {length}, {pos} = _length(data, {pos})", f"e = {pos} + {length}",
            f"{var} = data[{pos}:e]{then}", f"{pos} = e"]


class Emitter:
    """The source lines of one generated function and the names it uses (the inline reads' helpers bound)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.env: dict[str, Any] = {"_varint": read_varint, "_long": read_long, "_length": read_length,
                                    "_f32": _F32, "_f64": _F64}

    def bind(self, name: str, value: Any) -> str:
        self.env[name] = value
        return name

    def emit(self, depth: int, *lines: str) -> None:
        self.lines.extend("    " * depth + line for line in lines)

    def compile(self, filename: str, name: str = "read") -> Any:
        """The function ``name`` the lines define; ``filename`` names it in tracebacks."""
        namespace = dict(self.env)
        exec(compile("\n".join(self.lines), filename, "exec"), namespace)
        return namespace[name]


class _Unsupported(Exception):
    """A schema shape :class:`_SchemaReader` does not handle (arrays, maps): the caller's reference path reads it."""


PRIMITIVES: Final = frozenset(("int", "long", "float", "double", "boolean", "string", "bytes"))


class _SchemaReader(Emitter):
    """Generates the reading of a value of a schema: records (as dicts), unions, primitives, enums, fixed."""

    def __init__(self) -> None:
        super().__init__()
        self.names: dict[str, Any] = {}
        self.count = 0

    def var(self) -> str:
        self.count += 1
        return f"v{self.count}"

    def node(self, schema: Any, var: str, depth: int, namespace: str) -> None:
        if isinstance(schema, list):
            branch = self.var()
            self.emit(depth, *long_code(branch))
            for index, member in enumerate(schema):
                self.emit(depth, f"{'if' if index == 0 else 'elif'} {branch} == {index}:")
                self.node(member, var, depth + 1, namespace)
            self.emit(depth, "else:", "    raise ValueError('union branch')")
            return
        if isinstance(schema, str):
            if schema in PRIMITIVES or schema == "null":
                self.primitive(schema, var, depth)
                return
            target = lookup(self.names, schema, namespace)
            if target is None:
                raise _Unsupported(schema)
            schema = target
        kind = schema.get("type")
        if isinstance(kind, list | dict) or kind in PRIMITIVES or kind == "null":
            self.node(kind, var, depth, namespace)
        elif kind == "record":
            namespace = register(schema, self.names, namespace)
            members = []
            for member in schema["fields"]:
                value = self.var()
                self.node(member["type"], value, depth, namespace)
                members.append(f"{member['name']!r}: {value}")
            self.emit(depth, f"{var} = {{{', '.join(members)}}}")
        elif kind == "enum":
            register(schema, self.names, namespace)
            symbols = self.bind(f"_s{self.count}", tuple(schema["symbols"]))
            self.emit(depth, *long_code(var))
            self.emit(depth, f"if {var} < 0: raise ValueError('enum index')", f"{var} = {symbols}[{var}]")
        elif kind == "fixed":
            register(schema, self.names, namespace)
            size = int(schema["size"])
            self.emit(depth, f"if p + {size} > end: raise ValueError('short')", f"{var} = data[p:p + {size}]",
                      f"p += {size}")
        else:
            raise _Unsupported(kind)

    def primitive(self, kind: str, var: str, depth: int) -> None:
        if kind == "null":
            self.emit(depth, f"{var} = None")
        elif kind in ("int", "long"):
            self.emit(depth, *long_code(var))
        elif kind == "boolean":
            self.emit(depth, f"{var} = data[p] != 0", "p += 1")
        elif kind in ("float", "double"):
            size = 4 if kind == "float" else 8
            self.emit(depth, f"{var} = _f{size * 8}(data, p)[0]", f"p += {size}")
        else:
            self.emit(depth, *bytes_code(var, then=".decode()" if kind == "string" else ""))


def compile_reader(schema: Any, filename: str = "<avro reader>") -> Callable[[bytes], Any] | None:
    """A reader of a framed datum (from offset 5, as :func:`cdclake.formats.avro.framing.readable` gives it)
    written with ``schema``, read as fastavro reads it without logical types; None when the schema has a shape
    the generator does not handle. The datum must use the data to its end."""
    gen = _SchemaReader()
    try:
        gen.node(schema, "datum", 1, "")
    except _Unsupported:
        return None
    gen.lines[:0] = ["def read(data):", "    p = 5", "    end = len(data)"]
    gen.emit(1, "if p != end: raise ValueError('length')", "return datum")
    return gen.compile(filename)

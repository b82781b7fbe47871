"""A generated reader per shape of column map (names, type codes, flags): the fast path of TiCDC Open Protocol
row images, which the general path in ``open.py`` backs for every column map it refuses."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cdclake.formats.ticdc.open_protocol import Col, Converter, _Mismatch, to_float
from cdclake.model.events import Column


class Plan:
    """How to read one shape of column map: its columns, key columns and the values that need converting."""

    __slots__ = ("columns", "converts", "flags", "handles", "keys", "legacy", "names", "read", "type_codes",
                 "types")

    def __init__(self, names: tuple[str, ...], columns: list[Column], keys: list[str],
                 converts: list[tuple[str, Converter]]) -> None:
        self.names = names
        self.columns = columns
        self.keys = keys
        self.converts = converts
        self.types = {c.name: c.type for c in columns}
        # The shape this plan was made for, to check the next column map of these names against.
        self.type_codes: list[int] = []
        self.flags: list[int | None] = []
        self.legacy = False
        self.handles: list[bool] = []
        self.read: Callable[[dict[str, Col]], dict[str, Any] | None] = no_reader

    def compile(self) -> None:
        """Generate :attr:`read`: the image of a column map of this plan's names, or ``None`` when a type
        code, flag or value does not fit the plan (the general path then decides, and names any error).

        One generated function per shape checks every column and builds the row in one go, where the
        general path loops over the columns several times. The checks are those of the general path's
        plan match (type codes, flags, and handle bits in the flag-less encoding)."""
        checks, fields, converts = [], [], []
        scope: dict[str, Any] = {"Mismatch": _Mismatch}
        convert_of = dict(self.converts)
        for i, name in enumerate(self.names):
            flags = self.flags[i]
            checks += [f"c{i}.t != {self.type_codes[i]!r}",
                       f"c{i}.f is not None" if flags is None else f"c{i}.f != {flags!r}"]
            if self.legacy:
                checks.append(f"c{i}.h is not {self.handles[i]!r}")
            convert = convert_of.get(name)
            if convert is None:
                fields.append(f"{name!r}: c{i}.v")
                continue
            scope[f"f{i}"] = convert
            # like the general path, a float needs no to_float
            keep = f"v{i} is None or type(v{i}) is float" if convert is to_float else f"v{i} is None"
            converts += [f"        v{i} = c{i}.v", f"        if not ({keep}):", f"            v{i} = f{i}(v{i})"]
            fields.append(f"{name!r}: v{i}")
        lines = ["def read(cols):"]
        if self.names:
            lines.append("    " + ", ".join(f"c{i}" for i in range(len(self.names))) + ", = cols.values()")
            lines += [f"    if {' or '.join(checks)}:", "        return None"]
        if converts:
            lines += ["    try:", *converts, "    except Exception:",
                      "        return None"]
        lines.append("    return {" + ", ".join(fields) + "}")
        source = "\n".join(lines) + "\n"
        exec(compile(source, "<ticdc-open image reader>", "exec"), scope)
        self.read = scope["read"]


def no_reader(cols: dict[str, Col]) -> None:
    return None

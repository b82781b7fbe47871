"""Avro names: resolving references to named types (records, enums, fixed) within a schema, and TiCDC's
sanitizing of SQL names into Avro names, which the TiCDC and Debezium encoders both write."""

from __future__ import annotations

from typing import Any


def register(schema: dict[str, Any], names: dict[str, Any], namespace: str) -> str:
    """Record the named type's full name for later references; the namespace its members inherit."""
    name = str(schema.get("name", ""))
    if "." in name:
        full = name
    else:
        namespace = schema.get("namespace", namespace) or ""
        full = f"{namespace}.{name}" if namespace else name
    names[full] = schema
    return full.rpartition(".")[0]


def lookup(names: dict[str, Any], name: str, namespace: str) -> Any:
    """The named type a reference means, or None: an unqualified reference names a type of the enclosing
    namespace first."""
    target = names.get(f"{namespace}.{name}") if namespace and "." not in name else None
    return target or names.get(name)


def sanitize(name: str) -> str:
    """TiCDC's Avro name sanitizing (ticdc-avro.md §5), one ``_`` per replaced code point."""
    out = []
    for i, ch in enumerate(name):
        ascii_letter = ch.isascii() and (ch.isalpha() or ch == "_")
        if i == 0:
            if ascii_letter:
                out.append(ch)
            elif ch.isascii() and ch.isdigit():
                out.append("_" + ch)
            else:
                out.append("_")
        else:
            out.append(ch if ascii_letter or (ch.isascii() and ch.isdigit()) else "_")
    return "".join(out)

"""Wire formats: each turns Kafka records into canonical change events and back.

Adding a format takes one module and one line here. A format subclasses :class:`Format`, names itself,
declares its options once (they become CLI flags and pipeline keys), and implements ``decode_record``
(one record → its events) and ``encode`` (events → records)::

    from cdclake.model.events import ChangeEvent, INSERT, ROW
    from cdclake.formats.base import DecodeError, Format, Option
    import msgspec

    class Tiny(Format):
        name = "tiny-json"
        options = (Option("database", "db", "Database name to report"),)

        def decode_record(self, record):
            msg = msgspec.json.decode(record.value)
            if "row" not in msg:
                raise DecodeError("no 'row' member")
            return [ChangeEvent(kind=ROW, op=INSERT, database=self.settings["database"],
                                table=msg["table"], after=msg["row"])]

        def encode(self, events):
            return [Record(value=msgspec.json.encode({"table": e.table, "row": e.after})) for e in events]

Then register it below as ``"tiny-json": "cdclake.formats.tiny"`` with ``FORMAT = Tiny`` at the end of
the module. Test it with the round trip in ``tests/formats/``: random rows → encode → decode.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from cdclake.formats.base import Decoded, DecodeError, Failure, Format, Option

__all__ = ["DecodeError", "Decoded", "Failure", "Format", "Option", "create", "get", "looks_like", "names"]

if TYPE_CHECKING:
    from cdclake.model.records import Record

_MODULES: dict[str, str] = {
    "canal-json": "cdclake.formats.canal.json",
    "debezium-avro": "cdclake.formats.debezium.avro",
    "debezium-json": "cdclake.formats.debezium.json",
    "dts-avro": "cdclake.formats.dts.avro",
    "shareplex-json": "cdclake.formats.shareplex.json",
    "ticdc-open": "cdclake.formats.ticdc.open",
    "ticdc-avro": "cdclake.formats.ticdc.avro",
}


def names() -> list[str]:
    return sorted(_MODULES)


def get(name: str) -> type[Format]:
    """The format class registered under ``name`` (modules load on first use)."""
    module = _MODULES.get(name)
    if module is None:
        raise ValueError(f"unknown format {name!r}; known formats: {', '.join(names())}")
    return importlib.import_module(module).FORMAT


def create(name: str, options: dict[str, Any] | None = None) -> Format:
    return get(name)(**(options or {}))


def create_decoder(name: str, options: dict[str, Any] | None = None) -> Format:
    """:func:`create`, for reading a producer's messages: a format whose messages name their schemas in a
    registry needs it named, or every message would be a dead letter for want of it."""
    fmt = create(name, options)
    if "registry" in fmt.settings and not fmt.settings["registry"]:
        raise ValueError(f"format {name} needs the registry option: the producer's schema registry (an http(s):// "
                         f"URL, glue://REGION, or a folder of <id>.avsc files)")
    return fmt


def looks_like(records: list[Record]) -> list[str]:
    """The formats that decode every one of ``records`` (a few that failed in another format) into events, with
    their default options: a hint at the format they were written in. Formats that need a schema registry are left
    out: their records name schemas that only the producer's registry has."""
    found = []
    for name in names():
        fmt = create(name)
        if "registry" in fmt.settings:
            continue
        try:
            result = fmt.decode(records, more=False)
        except Exception:  # a hint only: a format that cannot read them is not one of them
            continue
        if result.events and not result.failures:
            found.append(name)
    return found

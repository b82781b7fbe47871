"""Wire formats: each turns Kafka records into canonical change events and back.

Each format family is a package, ``formats/<family>/``, with a few files of one role each (as Flink's
flink-json formats and TiCDC's codecs have): the Format itself (``json.py``, ``open.py``, ``avro.py``: options
and decoding), and beside it, where the format is large enough to need them, its encoder (``encoder.py``),
the protocol's vocabulary (``open_protocol.py``: codes, flags, value converters), or the parts two converters
of one family share (``debezium/``: ``schema``, ``converters``, ``envelope``, ``encoder``, ``options``).
What every format uses lives in :mod:`cdclake.formats.base` (the :class:`Format` interface, :class:`Option`,
``decode_message``, ``reason``), the Avro framing and registries in ``formats/avro/``, claim-check files in
:mod:`cdclake.formats.claim_check`. The compiled twins of hot paths are in :mod:`cdclake.native`.

Adding a format takes one module and one line here. A format subclasses :class:`Format`, names itself,
declares its options once (they become CLI flags and pipeline keys), and implements ``decode_record``
(one record → its events) and ``encode`` (events → records)::

    import msgspec

    from cdclake.formats.base import Format, Option, decode_message
    from cdclake.model.events import INSERT, ROW, ChangeEvent
    from cdclake.model.records import Record

    class _Message(msgspec.Struct):
        table: str
        row: dict

    _decoder = msgspec.json.Decoder(_Message)

    class Tiny(Format):
        name = "tiny-json"
        options = (Option("database", "db", "Database name to report"),)

        def decode_record(self, record):
            msg = decode_message(_decoder, record.value, "tiny-json")  # a DecodeError says what is wrong
            return [ChangeEvent(kind=ROW, op=INSERT, database=self.settings["database"],
                                table=msg.table, after=msg.row)]

        def encode(self, events):
            return [Record(value=msgspec.json.encode({"table": e.table, "row": e.after})) for e in events]

    FORMAT = Tiny

Save it as ``formats/tiny/json.py``, register it below as ``"tiny-json": "cdclake.formats.tiny.json"``, and
test it in ``tests/formats/tiny/test_json.py`` with the round trip: random rows → encode → decode. A format
grows files only when a role outgrows the Format's module (an encoder, a protocol's tables, a generated
fast path), each importing from ``base``, ``model``, ``native`` and its siblings, never from the Format module.
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

"""The one interface every wire format implements, and its options."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, NamedTuple

import msgspec
import numpy as np
import pyarrow as pa

from cdclake.errors import DecodeError
from cdclake.model.events import ChangeEvent, Source
from cdclake.model.records import Record


class Option(msgspec.Struct, frozen=True):
    """A format option, declared once: it is the CLI's ``--option name=value`` and the pipeline file's
    ``[source.options]`` key, validated and converted here."""

    name: str
    default: Any
    help: str
    choices: tuple[str, ...] = ()

    def parse(self, value: Any) -> Any:
        if isinstance(self.default, bool):
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(f"option {self.name} takes true or false, not {value!r}")
            return text in ("true", "1", "yes")
        if isinstance(self.default, int):
            try:
                return int(value)
            except (TypeError, ValueError):
                raise ValueError(f"option {self.name} takes a whole number, not {value!r}") from None
        text = "" if value is None else str(value)
        if self.choices and text not in self.choices:
            raise ValueError(f"option {self.name} takes one of {', '.join(self.choices)}, not {value!r}")
        return text


class Failure(msgspec.Struct):
    """A record that could not be decoded: dead-letter material."""

    record: Record
    format: str
    reason: str

    def describe(self) -> str:
        return f"{self.format}: record {self.record.where()}: {self.reason}"


class Decoded(msgspec.Struct):
    """What a batch of records became. Every record is accounted for: it produced events, failed, or
    was skipped by design (a tombstone, a NOOP, a heartbeat)."""

    events: list[ChangeEvent] = msgspec.field(default_factory=list)
    failures: list[Failure] = msgspec.field(default_factory=list)
    skipped: int = 0
    # Records whose decoding needs a later record of their partition (a SharePlex UPDATE BEFORE whose UPDATE
    # AFTER is not read yet): only from ``decode(records, more=True)``, for the caller to decode again with
    # what follows them.
    waiting: list[Record] = msgspec.field(default_factory=list)


def layout_id(columns_json: bytes) -> int:
    """The changelog's name for a column list (its JSON): changes carry this instead of the list itself, which
    is the same for every change of a table and as long as a row image."""
    return int.from_bytes(hashlib.blake2b(columns_json, digest_size=8).digest(), "little", signed=True)


class CompiledRows(NamedTuple):
    """Events a compiled path decoded straight into changelog columns (see :meth:`Format.decode_arrow`)."""

    records: np.ndarray  # int32: the input row each event came from, in input order
    columns: dict[str, pa.Array]  # op, database, table, key, before_key, after, layout, commit_ts, position,
    #                               ts_ms, seq: as the changelog holds them (spark/changelog.py)
    left: np.ndarray  # int32: the input rows it did not decode, which decode() then takes
    layouts: dict[int, bytes]  # the column lists its events name (layout id -> JSON)


class Format:
    """Base of every wire format. A subclass sets ``name`` and ``options`` and implements
    :meth:`decode_record` and :meth:`encode`; a format with a faster whole-batch path overrides
    :meth:`decode`. Formats know nothing of Spark: the same object decodes inside Spark's executors."""

    name: ClassVar[str]
    options: ClassVar[tuple[Option, ...]] = ()
    # Exceptions that must stop the run instead of dead-lettering the record (e.g. a detected corruption
    # under ``corruption-handling=error``); ``decode`` re-raises them.
    fatal: ClassVar[tuple[type[Exception], ...]] = ()

    def __init__(self, **options: Any) -> None:
        declared = {o.name: o for o in self.options}
        unknown = set(options) - set(declared)
        if unknown:
            known = ", ".join(declared) or "none"
            raise ValueError(f"{self.name}: unknown option(s) {', '.join(sorted(unknown))} (known: {known})")
        self.settings: dict[str, Any] = {
            name: option.parse(options[name]) if name in options else option.default
            for name, option in declared.items()
        }

    @property
    def reads_headers(self) -> bool:
        """Whether decoding reads the records' Kafka headers: sources that drop them for speed keep them then."""
        return False

    def decode(self, records: Sequence[Record], more: bool = False) -> Decoded:
        """Decode a batch: every record ends as its events, a failure or a skip, or, where ``more`` records of
        their partitions follow, as waiting for them. This is the hot loop of every format, so attribute look-ups
        are hoisted out of it."""
        out = Decoded()
        events, failures, name = out.events, out.failures, self.name
        decode_record, fatal = self.decode_record, self.fatal
        for record in records:
            try:
                got = decode_record(record)
            except fatal:
                raise
            except Exception as exc:
                failures.append(Failure(record, name, reason(exc)))
                continue
            if not got:
                out.skipped += 1
                continue
            source = Source(name, record.topic, record.partition, record.offset)
            for event in got:
                if event.source is None:
                    event.source = source
            events.extend(got)
        return out

    def decode_arrow(self, values: pa.Array, offsets: pa.Array) -> CompiledRows | None:
        """A compiled fast path over an Arrow batch of record values and offsets, or ``None`` where the format
        has none. It must decode each record it takes exactly as :meth:`decode` does, and leave the rest."""
        return None

    def decode_record(self, record: Record) -> list[ChangeEvent]:
        """The events of one record; ``[]`` when the record carries no change by design."""
        raise NotImplementedError

    def encode(self, events: Iterable[ChangeEvent]) -> list[Record]:
        """Records a real producer of this format would write for these events."""
        raise NotImplementedError


_UNNAMEABLE = re.compile(r'["\\\x00-\x1f]')


def struct_name_ok(name: str) -> bool:
    """Whether a msgspec struct field can be renamed to ``name``: msgspec refuses quotes, backslashes and
    control characters, which upstream column names may hold (such rows are read as plain objects)."""
    return _UNNAMEABLE.search(name) is None


def reason(exc: BaseException) -> str:
    """A one-line reason for a person: the message of our own errors, the type and message otherwise."""
    if isinstance(exc, DecodeError | ValueError) and str(exc):
        return str(exc)
    if isinstance(exc, RecursionError):  # only a message's nesting (JSON, a schema) recurses that deep
        return "the message nests deeper than it can be decoded"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def decode_message(decoder: msgspec.json.Decoder, value: bytes, what: str) -> Any:
    """``value`` read by a format's typed JSON ``decoder``; a failure is a :class:`DecodeError` that says whether
    the text is no JSON at all or JSON of another shape than a ``what`` message."""
    try:
        return decoder.decode(value)
    except msgspec.ValidationError as exc:
        raise DecodeError(f"not a {what} message: {exc}") from None
    except msgspec.DecodeError as exc:
        raise DecodeError(f"invalid JSON: {exc}") from None


def parse_options(format_cls: type[Format], pairs: Iterable[str]) -> dict[str, str]:
    """``KEY=VALUE`` strings (CLI ``--option``) into a dict; validation happens in the format."""
    options: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"{format_cls.name}: option {pair!r} is not KEY=VALUE")
        options[name.strip()] = value
    return options


def option_help(format_cls: type[Format]) -> Mapping[str, str]:
    return {o.name: f"{o.help} (default: {o.default!r})" for o in format_cls.options}

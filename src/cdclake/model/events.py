"""The canonical change event: the one language every format decodes into and encodes from.

Values inside ``key``, ``before`` and ``after`` are *canonical values* (see :mod:`cdclake.model.values`): the
exact JSON form that ``cdclake decode`` prints, so an event is ready to print or to compare as it is.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from cdclake.model.values import java_float_text, non_finite

ROW: Final = "row"
DDL: Final = "ddl"
RESOLVED: Final = "resolved"
TRUNCATE: Final = "truncate"
KINDS: Final = (ROW, DDL, RESOLVED, TRUNCATE)

INSERT: Final = "c"
UPDATE: Final = "u"  # also an upsert whose kind the source cannot tell
DELETE: Final = "d"
READ: Final = "r"  # snapshot read
OPS: Final = (INSERT, UPDATE, DELETE, READ)

UNKNOWN_TYPE: Final = "unknown"

Row = dict[str, Any]


class Column(msgspec.Struct, frozen=True):
    """A column as the message describes it; ``type`` is the source's type text (MySQL vocabulary)."""

    name: str
    type: str = UNKNOWN_TYPE
    key: bool = False
    nullable: bool | None = None


class Checksum(msgspec.Struct):
    expected: int | None
    actual: int | None
    ok: bool | None


class Source(msgspec.Struct):
    """Where the message came from: the Kafka coordinates, or a file and line for replayed data."""

    format: str
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None


# Not tracked by the cyclic GC: an event holds only canonical values, columns and its source, so it is never
# part of a reference cycle, and untracked events spare every decode batch most of its collection time.
class ChangeEvent(msgspec.Struct, kw_only=True, gc=False):
    kind: str
    op: str | None = None
    database: str | None = None
    table: str | None = None
    key: Row | None = None
    before: Row | None = None
    after: Row | None = None
    columns: list[Column] | None = None
    commit_ts: int | None = None
    position: str | None = None
    ts_ms: int | None = None
    ddl: str | None = None
    checksum: Checksum | None = None
    source: Source | None = None

    def key_of(self) -> Row | None:
        """The event's key columns, taken from its explicit key or from the row images."""
        if self.key is not None:
            return self.key
        names = [c.name for c in self.columns or () if c.key]
        image = self.after if self.after is not None else self.before
        if not names or image is None:
            return None
        return {name: image.get(name) for name in names}


def complete_before(after: Row, partial_before: Row) -> Row:
    """A whole before image from a partial one (Canal ``old``, SharePlex ``key``): unchanged columns
    take their value from the after image, keeping the after image's column order."""
    before = {**after, **partial_before}
    return {name: before[name] for name in (*after, *(n for n in partial_before if n not in after))}


def pad_position(*parts: int | str, width: int = 20) -> str:
    """A position string whose text order is the numeric order of its parts, so that positions of one
    source compare as strings (in Spark SQL as well as in Python)."""
    return "/".join(str(p).zfill(width) if isinstance(p, int) else p for p in parts)


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(ChangeEvent)


def _finite_or_text(row: Row | None) -> Row | None:
    """The row with each float NaN or infinity as its text: JSON has no number for them, and msgspec writes null,
    which reads as SQL NULL."""
    if row is None or not any(non_finite(v) for v in row.values()):
        return row
    return {k: java_float_text(v) if non_finite(v) else v for k, v in row.items()}


def to_json(event: ChangeEvent) -> bytes:
    """The canonical event JSON. A float NaN or infinity, which JSON cannot write as a number, is the string
    ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``."""
    images = (event.key, event.before, event.after)
    texts = tuple(_finite_or_text(image) for image in images)
    if all(text is image for text, image in zip(texts, images, strict=True)):
        return _encoder.encode(event)
    return _encoder.encode(msgspec.structs.replace(event, key=texts[0], before=texts[1], after=texts[2]))


def from_json(data: bytes | str) -> ChangeEvent:
    return _decoder.decode(data)

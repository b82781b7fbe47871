"""Record DataFrames → changelog DataFrames, decoded in the executors with ``mapInArrow``.

The format modules run unchanged inside the Python workers, over Arrow batches of Kafka records. Every
record comes out accounted for: as its events (``status = 'event'``), as a dead letter with its raw
bytes and reason (``'failed'``), or as ``'skipped'`` when it carries no change by design (a tombstone,
a heartbeat). Row images and column lists travel as JSON text (``before``, ``after``, ``columns``):
building nested Arrow values in Python costs more than the decoding itself, while Spark parses JSON in
the JVM when the planner needs it (``AFTER_MAP``). Values are typed later per table.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import from_arrow_schema

from cdclake import formats
from cdclake.events import UNKNOWN_TYPE, ChangeEvent, Row, Source
from cdclake.formats.base import Format
from cdclake.records import Record

RECORD_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
                 "timestampType int, headers array<struct<key:string,value:binary>>")

AFTER_MAP = "map<string,string>"
CHANGELOG_ARROW = pa.schema([
    ("status", pa.string()), ("kind", pa.string()), ("op", pa.string()),
    ("database", pa.string()), ("table", pa.string()),
    ("key", pa.string()), ("before_key", pa.string()),
    ("before", pa.string()), ("after", pa.string()), ("columns", pa.string()),
    ("commit_ts", pa.int64()), ("position", pa.string()), ("ts_ms", pa.int64()), ("ddl", pa.string()),
    ("checksum_ok", pa.bool_()), ("checksum_expected", pa.int64()), ("checksum_actual", pa.int64()),
    ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()), ("seq", pa.int32()),
    ("error", pa.string()), ("raw_key", pa.binary()), ("raw_value", pa.binary()), ("format", pa.string()),
])

_json = msgspec.json.Encoder()
_formats: dict[tuple[str, tuple[tuple[str, str], ...]], Format] = {}


def _format(name: str, options: dict[str, str]) -> Format:
    """One format object per worker process, so its schema and converter caches stay warm."""
    cache_key = (name, tuple(sorted(options.items())))
    if cache_key not in _formats:
        _formats[cache_key] = formats.create(name, options)
    return _formats[cache_key]


def key_text(names: list[str] | None, image: Row | None) -> bytes | None:
    """A row's identity as canonical JSON (UTF-8); tables without a key are identified by the whole row."""
    if image is None:
        return None
    if names is None:
        return _json.encode(image)
    return _json.encode([image.get(n) for n in names])


def _image_json(image: Row | None, untyped: bool) -> bytes | None:
    """A row image as JSON. Spark re-renders a JSON number read as text (``1e16`` → ``1.0E16``), which is
    harmless where a type casts it back, but a column without a type keeps the text: there floats travel
    as their exact Python text."""
    if image is None:
        return None
    if untyped:
        image = {k: repr(v) if type(v) is float else v for k, v in image.items()}
    return _json.encode(image)


class _Layout(msgspec.Struct):
    """What the changelog needs of a column list, worked out once per list: a format hands the same list
    to every event of a schema."""

    columns: list[Any] | None  # held so that its id is not reused while cached
    text: bytes | None
    untyped: bool
    key_names: list[str]


class _Layouts(dict[int, _Layout]):
    def of(self, columns: list[Any] | None) -> _Layout:
        layout = self.get(id(columns))
        if layout is None or layout.columns is not columns:
            if columns is None:
                layout = _Layout(None, None, True, [])
            else:
                layout = _Layout(columns, _json.encode(columns),
                                 any(c.type == UNKNOWN_TYPE for c in columns), [c.name for c in columns if c.key])
            self[id(columns)] = layout
        return layout


def _event_columns(events: list[ChangeEvent]) -> dict[str, list[Any]]:
    """The changelog columns of decoded events, built column by column: this runs once per change, so
    every per-event step that a whole column can do at once is done that way."""
    layouts = _Layouts()
    encode = _json.encode
    # JSON stays in msgspec's UTF-8 bytes: Arrow takes them as they are (see _batch).
    keys: list[bytes | None] = []
    before_keys: list[bytes | None] = []
    befores: list[bytes | None] = []
    afters: list[bytes | None] = []
    texts: list[bytes | None] = []
    seqs: list[int] = []
    previous: Source | None = None
    seq = 0
    for event in events:
        layout = layouts.of(event.columns)
        names: list[str] | None = layout.key_names or (list(event.key) if event.key else None)
        key, before, after = event.key, event.before, event.after
        if key is not None and names is not None and all(n in key for n in names):
            keys.append(encode([key[n] for n in names]))
        else:
            keys.append(key_text(names, after if after is not None else before))
        before_keys.append(key_text(names, before) if after is not None else None)
        if layout.untyped:
            befores.append(_image_json(before, True))
            afters.append(_image_json(after, True))
        else:
            befores.append(None if before is None else encode(before))
            afters.append(None if after is None else encode(after))
        texts.append(layout.text)
        # An event's rank among the events of its record: a record's events come together, sharing one
        # Source as a rule (compared by value when a format made one per event).
        source = event.source
        same = previous is not None and source is not None and (source is previous or (
            source.offset == previous.offset and source.partition == previous.partition
            and source.topic == previous.topic))
        seq = seq + 1 if same else 0
        seqs.append(seq)
        previous = source
    sources = [e.source or _NO_SOURCE for e in events]
    checksums = [e.checksum for e in events]
    return {
        "status": ["event"] * len(events), "kind": [e.kind for e in events], "op": [e.op for e in events],
        "database": [e.database for e in events], "table": [e.table for e in events],
        "key": keys, "before_key": before_keys, "before": befores, "after": afters, "columns": texts,
        "commit_ts": [e.commit_ts for e in events], "position": [e.position for e in events],
        "ts_ms": [e.ts_ms for e in events], "ddl": [e.ddl for e in events],
        "checksum_ok": [c.ok if c else None for c in checksums],
        "checksum_expected": [c.expected if c else None for c in checksums],
        "checksum_actual": [c.actual if c else None for c in checksums],
        "topic": [s.topic for s in sources], "partition": [s.partition for s in sources],
        "offset": [s.offset for s in sources], "seq": seqs,
        "format": [s.format or None for s in sources],
    }


_NO_SOURCE = Source("")


def _record_columns(rows: list[tuple[Record, str, str | None]], fmt: str) -> dict[str, list[Any]]:
    """The changelog rows of records that failed or carry no change."""
    return {
        "status": [status for _, status, _ in rows],
        "topic": [r.topic for r, _, _ in rows], "partition": [r.partition for r, _, _ in rows],
        "offset": [r.offset for r, _, _ in rows], "seq": [0] * len(rows),
        "error": [error for _, _, error in rows], "raw_key": [r.key for r, _, _ in rows],
        "raw_value": [r.value if status == "failed" else None for r, status, _ in rows],
        "format": [fmt] * len(rows),
    }


# Columns that _event_columns fills with JSON as UTF-8 bytes: a binary array viewed as text takes them without
# the decode to str and the encode back that a string array would cost.
_JSON_BYTES = frozenset({"key", "before_key", "before", "after", "columns"})


def _array(name: str, values: list[Any], kind: pa.DataType) -> pa.Array:
    if name in _JSON_BYTES and kind == pa.string():
        return pa.array(values, pa.binary()).view(pa.string())
    return pa.array(values, kind)


def _batch(columns: dict[str, list[Any]], rows: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [_array(f.name, columns[f.name], f.type) if f.name in columns else pa.nulls(rows, f.type)
         for f in CHANGELOG_ARROW], schema=CHANGELOG_ARROW)


def decode_batch(fmt: Format, records: list[Record]) -> pa.RecordBatch:
    """Decode one batch of records into one changelog batch (plain Python + Arrow; testable alone)."""
    decoded = fmt.decode(records)
    events = decoded.events
    out = _batch(_event_columns(events), len(events))
    seqs = out.column("seq")
    producing = len(events) - pc.sum(pc.not_equal(seqs, 0)).as_py() if events else 0
    if producing == len(records) and not decoded.failures and not decoded.skipped:
        return out  # every record made events (both counts agree): nothing else to account for
    failed = {id(f.record): f.reason for f in decoded.failures}
    made = {(s.topic, s.partition, s.offset) for s in (e.source for e in events) if s is not None}
    rows = [(r, "failed", failed[id(r)]) if id(r) in failed else (r, "skipped", None) for r in records
            if id(r) in failed or (r.topic, r.partition, r.offset) not in made]
    return pa.concat_batches([out, _batch(_record_columns(rows, fmt.name), len(rows))])


def records_from_arrow(batch: pa.RecordBatch) -> list[Record]:
    n = batch.num_rows
    names = batch.schema.names
    timestamps: list[int | None] = [None] * n
    if "timestamp" in names:
        timestamps = pc.divide(batch.column("timestamp").cast(pa.int64()), 1000).to_pylist()
    headers: list[list[tuple[str, bytes | None]]] = [[] for _ in range(n)]
    if "headers" in names:
        column = batch.column("headers")
        if pc.sum(pc.list_value_length(column)).as_py():
            headers = [[(h["key"], h["value"]) for h in row] if row else [] for row in column.to_pylist()]
    return [Record(key=key, value=value, topic=topic, partition=partition, offset=offset, timestamp=ts,
                   headers=h)
            for key, value, topic, partition, offset, ts, h in zip(
                batch.column("key").to_pylist(), batch.column("value").to_pylist(),
                batch.column("topic").to_pylist(), batch.column("partition").to_pylist(),
                batch.column("offset").to_pylist(), timestamps, headers, strict=True)]


def decode(records: DataFrame, format_name: str, options: dict[str, str] | None = None) -> DataFrame:
    """The changelog of a record DataFrame (columns as Spark's Kafka source gives them)."""
    opts = dict(options or {})
    formats.create(format_name, opts)  # fail fast on the driver for a bad name or option

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fmt = _format(format_name, opts)
        for batch in batches:
            if batch.num_rows:
                yield decode_batch(fmt, records_from_arrow(batch))

    return records.mapInArrow(run, from_arrow_schema(CHANGELOG_ARROW))

"""Record DataFrames → changelog DataFrames, decoded in the executors with ``mapInArrow``.

The format modules run unchanged inside the Python workers, over Arrow batches of Kafka records. Every
record comes out accounted for: as its events (``status = 'event'``), as a dead letter with its raw
bytes and reason (``'failed'``), or as ``'skipped'`` when it carries no change by design (a tombstone,
a heartbeat). Row images and column lists travel as JSON text (``before``, ``after``, ``columns``):
building nested Arrow values in Python costs more than the decoding itself, while Spark parses JSON in
the JVM when the planner needs it (``AFTER_MAP``, ``COLUMNS_TYPE``). Values are typed later per table.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import from_arrow_schema

from cdclake import formats
from cdclake.events import UNKNOWN_TYPE, ChangeEvent, Row
from cdclake.formats.base import Format
from cdclake.records import Record

RECORD_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
                 "timestampType int, headers array<struct<key:string,value:binary>>")

AFTER_MAP = "map<string,string>"
COLUMNS_TYPE = "array<struct<name:string,type:string,key:boolean,nullable:boolean>>"
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


def key_names(event: ChangeEvent) -> list[str] | None:
    named = [c.name for c in event.columns or () if c.key]
    if named:
        return named
    return list(event.key) if event.key else None


def key_text(names: list[str] | None, image: Row | None) -> str | None:
    """A row's identity as canonical JSON; tables without a key are identified by the whole row."""
    if image is None:
        return None
    if names is None:
        return _json.encode(image).decode()
    return _json.encode([image.get(n) for n in names]).decode()


def _image_json(image: Row | None, untyped: bool) -> str | None:
    """A row image as JSON. Spark re-renders a JSON number read as text (``1e16`` → ``1.0E16``), which is
    harmless where a type casts it back, but a column without a type keeps the text: there floats travel
    as their exact Python text."""
    if image is None:
        return None
    if untyped:
        image = {k: repr(v) if type(v) is float else v for k, v in image.items()}
    return _json.encode(image).decode()


class _ColumnsJson(dict[int, tuple[Any, str, bool]]):
    """Column lists as JSON (and whether a column lacks a type), once per list: a format hands the same
    list to every event of a schema."""

    def of(self, columns: list[Any] | None) -> tuple[str | None, bool]:
        if columns is None:
            return None, True
        cached = self.get(id(columns))
        if cached is None or cached[0] is not columns:
            untyped = any(c.type == UNKNOWN_TYPE for c in columns)
            cached = (columns, _json.encode(columns).decode(), untyped)
            self[id(columns)] = cached
        return cached[1], cached[2]


def _empty_columns() -> dict[str, list[Any]]:
    return {name: [] for name in CHANGELOG_ARROW.names}


def _event_rows(out: dict[str, list[Any]], event: ChangeEvent, seq: int, columns_json: _ColumnsJson) -> None:
    names = key_names(event)
    columns_text, untyped = columns_json.of(event.columns)
    if event.key is not None and names is not None and all(n in event.key for n in names):
        key = _json.encode([event.key[n] for n in names]).decode()
    else:
        key = key_text(names, event.after if event.after is not None else event.before)
    source = event.source
    checksum = event.checksum
    values = {
        "status": "event", "kind": event.kind, "op": event.op, "database": event.database,
        "table": event.table, "key": key,
        "before_key": key_text(names, event.before) if event.after is not None else None,
        "before": _image_json(event.before, untyped), "after": _image_json(event.after, untyped),
        "columns": columns_text,
        "commit_ts": event.commit_ts, "position": event.position, "ts_ms": event.ts_ms, "ddl": event.ddl,
        "checksum_ok": checksum.ok if checksum else None,
        "checksum_expected": checksum.expected if checksum else None,
        "checksum_actual": checksum.actual if checksum else None,
        "topic": source.topic if source else None, "partition": source.partition if source else None,
        "offset": source.offset if source else None, "seq": seq,
        "error": None, "raw_key": None, "raw_value": None, "format": source.format if source else None,
    }
    for name, column in out.items():
        column.append(values[name])


def _record_row(out: dict[str, list[Any]], record: Record, status: str, fmt: str, error: str | None) -> None:
    values = {"status": status, "topic": record.topic, "partition": record.partition, "offset": record.offset,
              "seq": 0, "error": error, "raw_key": record.key,
              "raw_value": record.value if status == "failed" else None, "format": fmt}
    for name, column in out.items():
        column.append(values.get(name))


def decode_batch(fmt: Format, records: list[Record]) -> pa.RecordBatch:
    """Decode one batch of records into one changelog batch (plain Python + Arrow; testable alone)."""
    decoded = fmt.decode(records)
    out = _empty_columns()
    produced: set[tuple[str, int, int]] = set()
    columns_json = _ColumnsJson()
    seq_of: dict[tuple[str, int, int], int] = {}
    for event in decoded.events:
        source = event.source
        coords = (source.topic or "", source.partition or 0, source.offset or 0) if source else ("", 0, 0)
        seq = seq_of.get(coords, 0)
        seq_of[coords] = seq + 1
        produced.add(coords)
        _event_rows(out, event, seq, columns_json)
    failed = {id(f.record): f for f in decoded.failures}
    for record in records:
        failure = failed.get(id(record))
        if failure is not None:
            _record_row(out, record, "failed", fmt.name, failure.reason)
        elif (record.topic, record.partition, record.offset) not in produced:
            _record_row(out, record, "skipped", fmt.name, None)
    return pa.RecordBatch.from_pydict(out, schema=CHANGELOG_ARROW)


def records_from_arrow(batch: pa.RecordBatch) -> list[Record]:
    columns = batch.to_pydict()
    timestamps = batch.column("timestamp").cast(pa.int64()).to_pylist() if "timestamp" in columns else None
    records = []
    for i in range(batch.num_rows):
        headers = columns["headers"][i] if "headers" in columns else None
        records.append(Record(
            key=columns["key"][i], value=columns["value"][i], topic=columns["topic"][i],
            partition=columns["partition"][i], offset=columns["offset"][i],
            timestamp=None if timestamps is None or timestamps[i] is None else timestamps[i] // 1000,
            headers=[(h["key"], h["value"]) for h in headers] if headers else [],
        ))
    return records


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

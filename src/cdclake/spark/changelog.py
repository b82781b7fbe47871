"""Record DataFrames → changelog DataFrames, decoded in the executors with ``mapInArrow``; or, by the same
task code (:func:`decode_arrow_task`), inside cdclake's own sources as they read (see
:class:`cdclake.spark.sources.Decoding`).

The format modules run unchanged inside the Python workers, over Arrow batches of Kafka records. Every
record comes out accounted for: as its events (``status = 'event'``), as a dead letter with its raw
bytes and reason (``'failed'``), or as ``'skipped'`` when it carries no change by design (a tombstone,
a heartbeat). Row images travel as JSON text (``after``; of the image before an update, only its key:
``before_key``), every value a string or null: building nested Arrow values in Python costs more than the
decoding itself, while Spark parses JSON in the JVM when the planner needs it (``AFTER_MAP``). Values are
typed later per table. A change names its column list by id (``layout``); each task lists the lists it named
once, as ``status = 'layout'`` rows with the JSON in ``columns``, since a list is the same for every change of
a table and as long as a row image.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from cdclake import formats
from cdclake.formats.base import CompiledRows, Decoded, Failure, Format, layout_id
from cdclake.model import types as T
from cdclake.model.events import DELETE, ROW, UNKNOWN_TYPE, UPDATE, ChangeEvent, Row, Source
from cdclake.model.records import Record
from cdclake.model.types import parse_type
from cdclake.model.values import java_float_text, non_finite
from cdclake.sources.files import UNREADABLE_HEADER
from cdclake.spark.session import task_slots

try:
    from cdclake.native import _images
except ImportError:  # built where a compiler was at hand; the Python twin gives the same bytes
    _images = None

RECORD_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
                 "timestampType int, headers array<struct<key:string,value:binary>>")

INPUT = "input"

# The record column that carries a captured-records reader's reason for a line it could not read.
UNREADABLE = "unreadable"

AFTER_MAP = "map<string,string>"
# What only some rows carry, nested in one column (``detail``): for a change of a compiled decoder it is one null,
# which the JVM converts from Arrow and copies row by row far cheaper than thirteen null columns (figures:
# benchmarks/results.md, "Measurements behind the code").
DETAIL_ARROW = pa.struct([
    # A change's column list as JSON: on the task's 'layout' rows, and on a change only where it was held by
    # resolved-ts mode, or written by an older cdclake (a change names its list by id, ``layout``).
    ("columns", pa.string()),
    ("ddl", pa.string()),
    ("checksum_ok", pa.bool_()), ("checksum_expected", pa.int64()), ("checksum_actual", pa.int64()),
    # status = 'failed' or 'skipped': the record itself (its value only when it failed), and why it failed.
    ("error", pa.string()), ("raw_key", pa.binary()), ("raw_value", pa.binary()),
    # An event without a commit ts: its partition's latest commit ts before it, in this task.
    ("partition_ts", pa.int64()),
    # status = 'tally': what a task read of a partition (offsets first_offset..offset, records, events).
    ("first_offset", pa.int64()), ("records", pa.int64()), ("events", pa.int64()),
    # status = 'input': what a source that decodes its own records read in one task (see cdclake.spark.sources).
    ("input", pa.string()),
])
DETAIL = "detail"
CHANGELOG_ARROW = pa.schema([
    ("status", pa.string()), ("kind", pa.string()), ("op", pa.string()),
    ("database", pa.string()), ("table", pa.string()),
    # The before image itself never reaches the lake: only the key it had (``before_key``).
    ("key", pa.string()), ("before_key", pa.string()), ("after", pa.string()),
    ("layout", pa.int64()), ("commit_ts", pa.int64()), ("position", pa.string()), ("ts_ms", pa.int64()),
    ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()), ("seq", pa.int32()),
    ("format", pa.string()),
    (DETAIL, DETAIL_ARROW),
])
# The changelog with its details as columns of their own, as held changes are kept in the lake.
FLAT_ARROW = pa.schema([*CHANGELOG_ARROW.remove(CHANGELOG_ARROW.get_field_index(DETAIL)), *DETAIL_ARROW])
CHANGELOG_SCHEMA = from_arrow_schema(CHANGELOG_ARROW)
HEADERS_ARROW = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
# What a held change keeps of its record beside its key and value, for the dead letter it may become.
HELD_ARROW = pa.schema([*FLAT_ARROW, ("raw_headers", HEADERS_ARROW), ("raw_timestamp", pa.timestamp("us", tz="UTC")),
                        ("raw_timestamp_type", pa.int32())])


def _keep_freed_memory() -> None:
    """glibc's malloc hands a freed block of more than 128 KiB back to the kernel, and the next batch's buffers are
    new pages that the kernel must zero again: a decoding task allocates and frees such buffers for every Arrow
    batch (the decoder's columns, Arrow's concatenations and takes). Keeping up to 512 MiB of them spares a task
    most of those page faults and much of its system time (figures: benchmarks/results.md)."""
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc: nothing to tune
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    mallopt(m_mmap_threshold, 32 << 20)  # glibc's largest
    mallopt(m_trim_threshold, 512 << 20)


_keep_freed_memory()
_json = msgspec.json.Encoder()
_formats: dict[tuple[str, tuple[tuple[str, str], ...]], Format] = {}


def cached_format(name: str, options: dict[str, str]) -> Format:
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


def _image_json(image: Row | None, untyped: bool, floats: tuple[str, ...] = ()) -> bytes | None:
    """A row image as a JSON object of texts and nulls. Spark reads a string into its map of texts as it is, but
    a number, true or false through a JSON writer made for that value: nearly half of its parsing time went there
    (and it re-renders ``1e16`` as ``1.0E16``). A float is msgspec's shortest text, as the compiled decoder writes
    it; in a column without a type, its exact Python text. This runs for every change, so a typed image is
    encoded as it is and then made texts by ``_images.image_texts`` where that was built, about twice as fast as
    its Python twin, :func:`_image_texts`, which gives the same bytes. ``floats`` names the image's FLOAT and
    DOUBLE columns: msgspec writes a NaN or an infinity as null, so an image holding one is made texts in Python,
    which writes Java's text for it."""
    if image is None:
        return None
    if untyped:
        return _image_texts(image, untyped=True)
    if _images is not None and not (floats and any(non_finite(image.get(name)) for name in floats)):
        try:
            return _images.image_texts(_json.encode(image))
        except ValueError:  # a value nested deeper than the C scanner follows: the Python twin has no limit
            pass
    return _image_texts(image, untyped=False)


def _image_texts(image: Row, untyped: bool) -> bytes:
    return _json.encode({k: v if v is None or type(v) is str else _value_text(v, untyped) for k, v in image.items()})


def _value_text(value: Any, untyped: bool) -> Any:
    kind = type(value)
    if kind is float:
        if non_finite(value):  # the text Spark casts back to it ("NaN", "-Infinity")
            return java_float_text(value)
        return repr(value) if untyped else _json.encode(value).decode()
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return str(value)
    if kind is dict or kind is list:
        return _json.encode(value).decode()
    return value  # bytes and the like, which msgspec writes as a string


class _Layout(msgspec.Struct):
    """What the changelog needs of a column list, worked out once per list: a format hands the same list
    to every event of a schema."""

    columns: list[Any] | None  # held so that its id is not reused while cached
    text: bytes | None
    id: int | None  # layout_id(text)
    untyped: bool
    key_names: list[str]
    floats: tuple[str, ...]  # the FLOAT and DOUBLE columns (see _image_json)


class _Layouts(dict[int, _Layout]):
    def of(self, columns: list[Any] | None) -> _Layout:
        layout = self.get(id(columns))
        if layout is None or layout.columns is not columns:
            if columns is None:
                layout = _Layout(None, None, None, True, [], ())
            else:
                text = _json.encode(columns)
                layout = _Layout(columns, text, layout_id(text), any(c.type == UNKNOWN_TYPE for c in columns),
                                 [c.name for c in columns if c.key],
                                 tuple(c.name for c in columns if parse_type(c.type).family in (T.FLOAT, T.DOUBLE)))
            self[id(columns)] = layout
        return layout


class _Entry(msgspec.Struct, array_like=True, gc=False):
    """A decoded event on its way into the changelog, with what the reduction and the planner need of it."""

    event: ChangeEvent
    key: bytes | None
    before_key: bytes | None
    rank: int  # the event's rank among the events of its record
    partition_ts: int | None  # without a commit ts of its own: the partition's latest commit ts before it


class _Tally(msgspec.Struct, gc=False):
    """What one task read of one partition: the planner's counts, offsets and commit ts come from these."""

    first_offset: int
    offset: int
    commit_ts: int | None = None
    records: int = 0
    events: int = 0


# What a task's reduction holds at most (Arrow's bytes of the changes it refers to), before it reduces them and, if
# over half remains, sends them on. By bytes, so that a table of wide rows holds as much memory as one of narrow
# ones. The more a task holds, the fewer times each change is sorted and the fewer leave the task; 192 MiB holds
# some 430,000 of the benchmark's changes (about 450 bytes each; figures: benchmarks/results.md).
MAX_HELD_BYTES = 192 << 20


class _Task:
    """The changelog of one task's records (one Spark input partition, read in offset order).

    With ``reduce``, each key's row changes are reduced to the newest, by the planner's own order
    (commit ts, position, partition, offset, rank), before they leave the worker, so the JVM and the
    planner handle a fraction of them. The lake ends the same: the newest change carries the whole row,
    and a TRUNCATE or DROP TABLE between two changes buries what is older than it by sequence, whichever
    changes reach it. Only RENAME TABLE moves rows between tables: a batch with one is planned again
    unreduced (see pipeline). Changes without a commit ts are not reduced: their order comes from their
    partition's commit ts before them, which the planner completes across tasks.

    The reduction works on the changelog's Arrow columns (a sort in Arrow's C++), not on Python objects:
    holding a task's decoded events as objects until it ends would cost about as much as decoding them."""

    def __init__(self, fmt: Format, reduce: bool, max_held_bytes: int = MAX_HELD_BYTES) -> None:
        self.fmt, self.reduce, self.max_held_bytes = fmt, reduce, max_held_bytes
        self.layouts = _Layouts()
        self.tallies: dict[tuple[str | None, int | None], _Tally] = {}
        self.held: list[_Held] = []  # reducible row changes, waiting for their keys' newer ones
        self.compiled_layouts: dict[int, bytes] = {}  # the column lists the compiled path's changes named
        self.waiting: list[Record] = []  # records the format decodes with the next batch's (see Decoded.waiting)

    def add(self, records: list[Record]) -> Iterator[pa.RecordBatch]:
        """The changelog of these records, as far as it is final (reduced changes wait for :meth:`finish`)."""
        self._count_records(records)
        records, decoded = self._decode_after_waiting(records)
        yield from self._changes(records, decoded, [])

    def _decode_after_waiting(self, records: list[Record]) -> tuple[list[Record], Decoded]:
        """The records decoded after the ones that waited for them; returns those decoded to the end, and the
        decoding, whose new waiting records are kept for the next batch."""
        if self.waiting:
            records = [*self.waiting, *records]
        decoded = self._decode(records, more=True)
        self.waiting = decoded.waiting
        if self.waiting:
            waiting = {id(r) for r in self.waiting}
            records = [r for r in records if id(r) not in waiting]
        return records, decoded

    def add_arrow(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        """:meth:`add` for an Arrow batch of records: a format's compiled path (see ``Format.decode_arrow``)
        decodes what it can into changelog columns, and only the records it leaves become Python records."""
        compiled = None if _has_unreadable(batch) else self.fmt.decode_arrow(batch.column("value"),
                                                                              batch.column("offset"))
        if compiled is None or not len(compiled.records):
            yield from self.add(records_from_arrow(batch))
            return
        records = records_from_arrow(batch.take(pa.array(compiled.left))) if len(compiled.left) else []
        # A format with a compiled path (Canal-JSON) leaves no record waiting for the next batch.
        decoded = self._decode(records, more=False)
        if any(e.commit_ts is None for e in decoded.events):
            # Ordered by their partition's commit ts before them, which counts records in read order.
            yield from self.add(records_from_arrow(batch))
            return
        self._count_batch(batch)
        self.compiled_layouts.update(compiled.layouts)
        yield from self._changes(records, decoded, [self._compiled_changes(batch, compiled)])

    def _decode(self, records: list[Record], more: bool) -> Decoded:
        """The format's decoding of the records, except a line of a captured-records file that its reader could
        not read: that is no message of the format, so it fails with the reader's reason unseen by the decoder."""
        unreadable = {id(r): reason for r in records
                      if r.headers and (reason := r.header(UNREADABLE_HEADER)) is not None}
        if not unreadable:
            return self._fit_int64(records, self.fmt.decode(records, more))
        readable = [r for r in records if id(r) not in unreadable]
        decoded = self._fit_int64(readable, self.fmt.decode(readable, more))
        failures = [Failure(r, self.fmt.name, unreadable[id(r)].decode(errors="replace")) for r in records
                    if id(r) in unreadable]
        return Decoded(decoded.events, decoded.failures + failures, decoded.skipped, decoded.waiting)

    def _fit_int64(self, records: list[Record], decoded: Decoded) -> Decoded:
        """The records whose events carry a commit ts or event time no 64-bit integer holds (as the changelog's
        columns must) become failures with that reason, instead of stopping the task."""
        misfits: dict[tuple[str | None, int | None, int | None], str] = {}
        for event in decoded.events:
            for name, value in (("commit ts", event.commit_ts), ("ts_ms", event.ts_ms)):
                if value is not None and value not in _INT64:
                    misfits[_coordinates(event.source)] = f"{name} {value} does not fit a 64-bit integer"
        if not misfits:
            return decoded
        failures = [Failure(r, self.fmt.name, misfits[(r.topic, r.partition, r.offset)]) for r in records
                    if (r.topic, r.partition, r.offset) in misfits]
        return Decoded([e for e in decoded.events if _coordinates(e.source) not in misfits],
                       decoded.failures + failures, decoded.skipped, decoded.waiting)

    def _changes(self, records: list[Record], decoded: Decoded,
                 compiled: list[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        entries = self._entries(decoded.events)
        rows = _unproductive(records, decoded, entries)
        if entries:
            compiled = [*compiled, _batch(_event_columns(entries, self.layouts), len(entries))]
        for changes in compiled:
            passing = self._hold(changes) if self.reduce else changes
            if passing.num_rows:
                yield passing
        if sum(h.changes.nbytes for h in self.held) > self.max_held_bytes:
            self.held = [_Held(_newest(self.held), None)]
            if self.held[0].changes.nbytes > self.max_held_bytes // 2:  # bounded memory: the planner finishes it
                yield from self._flush()
        if rows:
            yield _batch(_record_columns(rows, self.fmt.name), len(rows))

    def _compiled_changes(self, batch: pa.RecordBatch, compiled: CompiledRows) -> pa.RecordBatch:
        """The changelog rows of compiled events, with their records' coordinates; counts them per partition."""
        records = pa.array(compiled.records)
        n = len(records)
        columns = {**compiled.columns, "status": pa.repeat("event", n), "kind": pa.repeat(ROW, n),
                   "format": pa.repeat(self.fmt.name, n),
                   **{name: batch.column(name).take(records) for name in ("topic", "partition", "offset")}}
        for (topic, partition), count, commit_ts in _per_partition(
                columns["topic"], columns["partition"], columns["commit_ts"], ("count", "max")):
            tally = self.tallies[(topic, partition)]  # _count_batch made it
            tally.events += count
            if commit_ts is not None and (tally.commit_ts is None or commit_ts > tally.commit_ts):
                tally.commit_ts = commit_ts
        return _assemble(columns, n)

    def _count_batch(self, batch: pa.RecordBatch) -> None:
        """:meth:`_count_records` on the batch's columns."""
        for (topic, partition), first, last, records in _per_partition(
                batch.column("topic"), batch.column("partition"), batch.column("offset"), ("min", "max", "count")):
            tally = self.tallies.get((topic, partition))
            if tally is None:
                tally = self.tallies[(topic, partition)] = _Tally(first, last)
            tally.first_offset = min(tally.first_offset, first)
            tally.offset = max(tally.offset, last)
            tally.records += records

    def finish(self) -> Iterator[pa.RecordBatch]:
        if self.waiting:
            records, self.waiting = self.waiting, []
            yield from self._changes(records, self._decode(records, more=False), [])
        yield from self._flush()
        listed = {**self.compiled_layouts,
                  **{layout.id: layout.text for layout in self.layouts.values() if layout.id is not None}}
        if listed:
            ids = sorted(listed)
            yield _batch({"status": ["layout"] * len(ids), "layout": ids, "columns": [listed[i] for i in ids],
                          "seq": [0] * len(ids), "format": [self.fmt.name] * len(ids)}, len(ids))
        if self.tallies:
            tallies = list(self.tallies.items())
            yield _batch({
                "status": ["tally"] * len(tallies), "topic": [tp[0] for tp, _ in tallies],
                "partition": [tp[1] for tp, _ in tallies], "offset": [t.offset for _, t in tallies],
                "first_offset": [t.first_offset for _, t in tallies], "commit_ts": [t.commit_ts for _, t in tallies],
                "records": [t.records for _, t in tallies], "events": [t.events for _, t in tallies],
                "seq": [0] * len(tallies), "format": [self.fmt.name] * len(tallies),
            }, len(tallies))

    def _flush(self) -> Iterator[pa.RecordBatch]:
        if self.held:
            newest = _newest(self.held)
            self.held = []
            yield newest

    def _hold(self, changes: pa.RecordBatch) -> pa.RecordBatch:
        """Holds the reducible row changes, with a delete of the old key for each update that changed its
        key (as the planner makes of it); returns the changes that pass unreduced."""
        reducible = pc.fill_null(pc.and_(pc.and_(pc.equal(changes["kind"], ROW),
                                                 pc.greater_equal(changes["commit_ts"], 0)),
                                         pc.is_valid(changes["key"])), False)
        passing = changes.filter(pc.invert(reducible))
        if not passing.num_rows:  # as a rule: the batch is held whole, not copied
            self.held.append(_Held(changes, None))
        elif passing.num_rows < changes.num_rows:
            self.held.append(_Held(changes, pc.indices_nonzero(reducible)))
        moved = changes.filter(pc.fill_null(pc.and_(
            reducible, pc.and_(pc.equal(changes["op"], UPDATE), pc.not_equal(changes["before_key"], changes["key"]))),
            False))
        if moved.num_rows:
            n = moved.num_rows
            replaced = {"key": moved["before_key"], "before_key": pa.nulls(n, pa.string()),
                        "op": pa.array([DELETE] * n, pa.string()), "after": pa.nulls(n, pa.string())}
            self.held.append(_Held(pa.RecordBatch.from_arrays(
                [replaced.get(f.name, moved.column(f.name)) for f in CHANGELOG_ARROW], schema=CHANGELOG_ARROW), None))
        return passing

    def _count_records(self, records: list[Record]) -> None:
        for r in records:
            tally = self.tallies.get((r.topic, r.partition))
            if tally is None:
                tally = self.tallies[(r.topic, r.partition)] = _Tally(r.offset, r.offset)
            tally.offset = max(tally.offset, r.offset)
            tally.first_offset = min(tally.first_offset, r.offset)
            tally.records += 1

    def _entries(self, events: list[ChangeEvent]) -> list[_Entry]:
        """Each event with its key, the key before an update, its rank in its record and, without a commit
        ts, its partition's latest commit ts before it; counts each partition's events and commit ts."""
        layouts, encode, tallies = self.layouts, _json.encode, self.tallies
        entries: list[_Entry] = []
        previous: Source | None = None
        rank = 0
        for event in events:
            layout = layouts.of(event.columns)
            names: list[str] | None = layout.key_names or (list(event.key) if event.key else None)
            key, before, after = event.key, event.before, event.after
            if key is not None and names is not None and all(n in key for n in names):
                key_bytes = encode([key[n] for n in names])
            else:
                key_bytes = key_text(names, after if after is not None else before)
            before_key = key_text(names, before) if after is not None else None
            # A record's events come together, sharing one Source as a rule (compared by value when a format
            # made one per event).
            source = event.source or _NO_SOURCE
            same = previous is not None and (source is previous or (
                source.offset == previous.offset and source.partition == previous.partition
                and source.topic == previous.topic))
            rank = rank + 1 if same else 0
            previous = source
            # The partition's tally (made for its records) holds its latest commit ts so far.
            tally = tallies.get((source.topic, source.partition))
            if tally is None:  # a format that named other coordinates than its record's
                tally = tallies[(source.topic, source.partition)] = _Tally(source.offset or 0, source.offset or 0)
            commit_ts = event.commit_ts
            entries.append(_Entry(event, key_bytes, before_key, rank, tally.commit_ts if commit_ts is None else None))
            tally.events += 1
            if commit_ts is not None and (tally.commit_ts is None or commit_ts > tally.commit_ts):
                tally.commit_ts = commit_ts
        return entries


_INT64 = range(-(2**63), 2**63)


def _coordinates(source: Source | None) -> tuple[str | None, int | None, int | None]:
    source = source or _NO_SOURCE
    return source.topic, source.partition, source.offset


def _one_partition(topic: pa.Array, partition: pa.Array) -> tuple[str, int] | None:
    """The one partition all these records are of, as those of a task's batch are as a rule; None if not."""
    if not len(topic) or topic.null_count or partition.null_count:
        return None
    first_topic, first_partition = topic[0].as_py(), partition[0].as_py()
    bounds = pc.min_max(partition)
    if bounds["min"].as_py() != bounds["max"].as_py() or not pc.all(pc.equal(topic, first_topic)).as_py():
        return None
    return first_topic, first_partition


def _per_partition(topic: pa.Array, partition: pa.Array, values: pa.Array,
                   aggregates: tuple[str, ...]) -> Iterator[tuple[Any, ...]]:
    """((topic, partition), aggregate, …) of ``values`` for each partition present. Grouping costs Arrow a
    query plan per call, a tenth of a task's work outside decoding, so a batch of one partition is not grouped."""
    one = _one_partition(topic, partition)
    if one is not None:
        yield (one, *(len(values) - values.null_count if a == "count" else getattr(pc, a)(values).as_py()
                      for a in aggregates))
        return
    grouped = pa.table({"topic": topic, "partition": partition, "v": values}).group_by(
        ["topic", "partition"]).aggregate([("v", a) for a in aggregates])
    columns = [grouped[f"v_{a}"].to_pylist() for a in aggregates]
    yield from zip(zip(grouped["topic"].to_pylist(), grouped["partition"].to_pylist(), strict=True), *columns,
                   strict=True)


class _Held(NamedTuple):
    """Row changes held for the reduction: the rows ``rows`` of ``changes`` (all of them when ``None``)."""

    changes: pa.RecordBatch
    rows: pa.Array | None


_IDENTITY = ["database", "table", "key"]
# The planner's order of one key's changes, each column with the value that a missing one counts as.
_ORDER: dict[str, str | int | None] = {"commit_ts": None, "position": "", "partition": 0, "offset": 0, "seq": None}


def _newest(held: list[_Held]) -> pa.RecordBatch:
    """Each table's keys' newest change among the held ones, by the planner's order (ties: the first read).
    Only the small ordering columns are combined and sorted, the identity by dictionary codes (a sort on
    integers, several times cheaper than on the texts); the wide ones (row images, column lists) are copied
    once, for the changes that remain."""
    parts = []
    for number, (changes, rows) in enumerate(held):
        part = pa.table({**{name: changes[name] for name in _IDENTITY},
                         **{name: changes[name] if missing is None else pc.fill_null(changes[name], missing)
                            for name, missing in _ORDER.items()},
                         "held": np.full(changes.num_rows, number), "row": np.arange(changes.num_rows)})
        parts.append(part if rows is None else part.take(rows))
    order = pa.concat_tables(parts).combine_chunks()
    if not order.num_rows:
        return held[0].changes.slice(0, 0)
    identity = pa.table({name: order[name].dictionary_encode().combine_chunks().indices for name in _IDENTITY})
    ranking = pc.sort_indices(pa.table({**{name: identity[name] for name in _IDENTITY},
                                        **{name: order[name] for name in _ORDER}}),
                              [(name, "ascending") for name in _IDENTITY] + [(name, "descending") for name in _ORDER])
    ranked = identity.take(ranking)
    # The first of each run of equal (database, table, key) is that key's newest change.
    later, earlier = ranked.slice(1), ranked.slice(0, ranked.num_rows - 1)
    starts = functools.reduce(pc.or_, (_differs(later[name], earlier[name]) for name in _IDENTITY))
    kept = order.select(["held", "row"]).take(
        ranking.filter(pa.concat_arrays([pa.array([True]), starts.combine_chunks()])))
    taken = [changes.take(kept.filter(pc.equal(kept["held"], number))["row"].combine_chunks())
             for number, (changes, _) in enumerate(held)]
    return pa.concat_batches(taken)


def _differs(a: pa.ChunkedArray, b: pa.ChunkedArray) -> pa.ChunkedArray:
    """Element-wise inequality where two nulls are equal."""
    return pc.if_else(pc.and_(pc.is_null(a), pc.is_null(b)), False, pc.fill_null(pc.not_equal(a, b), True))


def _event_columns(entries: list[_Entry], layouts: _Layouts) -> dict[str, list[Any]]:
    """The changelog columns of decoded events, built column by column: this runs once per change, so
    every per-event step that a whole column can do at once is done that way."""
    # JSON stays in msgspec's UTF-8 bytes: Arrow takes them as they are (see _batch).
    afters: list[bytes | None] = []
    ids: list[int | None] = []
    for entry in entries:
        layout = layouts.of(entry.event.columns)
        afters.append(_image_json(entry.event.after, layout.untyped, layout.floats))
        ids.append(layout.id)
    events = [entry.event for entry in entries]
    sources = [e.source or _NO_SOURCE for e in events]
    checksums = [e.checksum for e in events]
    return {
        "status": ["event"] * len(events), "kind": [e.kind for e in events], "op": [e.op for e in events],
        "database": [e.database for e in events], "table": [e.table for e in events],
        "key": [entry.key for entry in entries], "before_key": [entry.before_key for entry in entries],
        "after": afters, "layout": ids,
        "commit_ts": [e.commit_ts for e in events], "position": [e.position for e in events],
        "ts_ms": [e.ts_ms for e in events], "ddl": [e.ddl for e in events],
        "checksum_ok": [c.ok if c else None for c in checksums],
        "checksum_expected": [c.expected if c else None for c in checksums],
        "checksum_actual": [c.actual if c else None for c in checksums],
        "topic": [s.topic for s in sources], "partition": [s.partition for s in sources],
        "offset": [s.offset for s in sources], "seq": [entry.rank for entry in entries],
        "partition_ts": [entry.partition_ts for entry in entries],
        "format": [s.format or None for s in sources],
    }


_NO_SOURCE = Source("")


def _has_unreadable(batch: pa.RecordBatch) -> bool:
    if UNREADABLE in batch.schema.names:
        return batch.column(UNREADABLE).null_count < batch.num_rows
    if "headers" not in batch.schema.names:
        return False
    names = pc.list_flatten(batch.column("headers")).field("key")
    return len(names) > 0 and pc.any(pc.equal(names, UNREADABLE_HEADER)).as_py() is True


def _unproductive(records: list[Record], decoded: Decoded,
                  entries: list[_Entry]) -> list[tuple[Record, str, str | None]]:
    """The records that failed or made no event, each with its status and reason (by the ranks of the batch's
    events, a batch whose every record made events needs no search)."""
    if not decoded.failures and not decoded.skipped and (
            sum(1 for e in entries if e.rank == 0) == len(records)):
        return []
    failed = {id(f.record): f.reason for f in decoded.failures}
    made = {(s.topic, s.partition, s.offset) for s in (e.source for e in decoded.events) if s is not None}
    return [(r, "failed", failed[id(r)]) if id(r) in failed else (r, "skipped", None) for r in records
            if id(r) in failed or (r.topic, r.partition, r.offset) not in made]


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
_JSON_BYTES = frozenset({"key", "before_key", "after", "columns"})


def _array(name: str, values: list[Any], kind: pa.DataType) -> pa.Array:
    if name in _JSON_BYTES and kind == pa.string():
        return pa.array(values, pa.binary()).view(pa.string())
    return pa.array(values, kind)


def _batch(columns: dict[str, list[Any]], rows: int) -> pa.RecordBatch:
    return _assemble({name: _array(name, values, FLAT_ARROW.field(name).type) for name, values in columns.items()},
                     rows)


def _assemble(columns: dict[str, pa.Array], rows: int) -> pa.RecordBatch:
    """A changelog batch from any of its flat columns (:data:`FLAT_ARROW`; the others null): the details
    nested, their struct null in every row that has none."""
    details = [columns.get(f.name) for f in DETAIL_ARROW]
    given = [array for array in details if array is not None and array.null_count < len(array)]
    if given:
        none = functools.reduce(pc.and_, (pc.is_null(array) for array in given))
        detail = pa.StructArray.from_arrays(
            [pa.nulls(rows, f.type) if array is None else array
             for array, f in zip(details, DETAIL_ARROW, strict=True)], fields=list(DETAIL_ARROW), mask=none)
    else:
        detail = pa.nulls(rows, DETAIL_ARROW)
    return pa.RecordBatch.from_arrays(
        [detail if f.name == DETAIL else columns[f.name] if f.name in columns else pa.nulls(rows, f.type)
         for f in CHANGELOG_ARROW], schema=CHANGELOG_ARROW)


def nested(flat: pa.Table) -> pa.Table:
    """Changes as the lake holds them (:data:`FLAT_ARROW`; a snapshot held by an older cdclake lacks the newer
    columns) in the changelog's own shape."""
    batches = [_assemble({name: batch.column(name).cast(FLAT_ARROW.field(name).type)
                          for name in batch.schema.names if name in FLAT_ARROW.names}, batch.num_rows)
               for batch in flat.to_batches()]
    return pa.Table.from_batches(batches, schema=CHANGELOG_ARROW)


def flat(changelog: pa.Table | pa.RecordBatch) -> pa.Table:
    """The changelog with its details as columns of their own (:data:`FLAT_ARROW`)."""
    table = (pa.Table.from_batches([changelog]) if isinstance(changelog, pa.RecordBatch) else changelog).flatten()
    return table.rename_columns([name.removeprefix(f"{DETAIL}.") for name in table.column_names]).select(
        FLAT_ARROW.names)


def detail(name: str) -> F.Column:
    """A field of a changelog DataFrame's ``detail``, named as its flat column."""
    return F.col(f"{DETAIL}.{name}").alias(name)


def flat_frame(changelog: DataFrame) -> DataFrame:
    """The changelog with its details as columns of their own (:data:`FLAT_ARROW`)."""
    return changelog.select(*[detail(f.name) if f.name in DETAIL_ARROW.names else F.col(f.name) for f in FLAT_ARROW])


def decode_task(fmt: Format, batches: Iterable[list[Record]], reduce: bool = False) -> Iterator[pa.RecordBatch]:
    """The changelog of one task's records, batch by batch (plain Python + Arrow; testable alone)."""
    task = _Task(fmt, reduce)
    for records in batches:
        if records:
            yield from task.add(records)
    yield from task.finish()


def decode_arrow_task(fmt: Format, batches: Iterable[pa.RecordBatch], reduce: bool = False) -> Iterator[pa.RecordBatch]:
    """:func:`decode_task` over Arrow batches of records, as the executors read them (a format's compiled path
    decodes them where it has one)."""
    task = _Task(fmt, reduce)
    for batch in batches:
        if batch.num_rows:
            yield from task.add_arrow(batch)
    yield from task.finish()


def input_row(described: str, format_name: str) -> pa.RecordBatch:
    """The changelog row naming what one task of a decoding source read, so that its records can be read again."""
    return _batch({"status": [INPUT], "input": [described], "seq": [0], "format": [format_name]}, 1)


def decode_batch(fmt: Format, records: list[Record], reduce: bool = False) -> pa.RecordBatch:
    """The changelog of one batch of records, in one Arrow batch."""
    return pa.concat_batches([_batch({}, 0), *decode_task(fmt, [records], reduce)])


def records_from_arrow(batch: pa.RecordBatch) -> list[Record]:
    n = batch.num_rows
    names = batch.schema.names
    timestamps: list[int | None] = [None] * n
    if "timestamp" in names:
        timestamps = pc.divide(batch.column("timestamp").cast(pa.int64()), 1000).to_pylist()
    headers: list[list[tuple[str, bytes | None]]] = [[] for _ in range(n)]
    if UNREADABLE in names and _has_unreadable(batch):
        headers = [[(UNREADABLE_HEADER, reason)] if reason is not None else []
                   for reason in batch.column(UNREADABLE).to_pylist()]
    elif "headers" in names:
        column = batch.column("headers")
        if pc.sum(pc.list_value_length(column)).as_py():
            headers = [[(h["key"], h["value"]) for h in row] if row else [] for row in column.to_pylist()]
    return [Record(key=key, value=value, topic=topic, partition=partition, offset=offset, timestamp=ts,
                   headers=h)
            for key, value, topic, partition, offset, ts, h in zip(
                batch.column("key").to_pylist(), batch.column("value").to_pylist(),
                batch.column("topic").to_pylist(), batch.column("partition").to_pylist(),
                batch.column("offset").to_pylist(), timestamps, headers, strict=True)]


def decode(records: DataFrame, format_name: str, options: dict[str, str] | None = None,
           reduce: bool = False) -> DataFrame:
    """The changelog of a record DataFrame (columns as Spark's Kafka source gives them). With ``reduce``,
    each task sends only each key's newest row change (see :class:`_Task`), plus its tallies."""
    opts = dict(options or {})
    fmt = formats.create(format_name, opts)  # fail fast on the driver for a bad name or option

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from decode_arrow_task(cached_format(format_name, opts), batches, reduce)

    return decoder_input(records, fmt.reads_headers).mapInArrow(run, CHANGELOG_SCHEMA)


def _load_in_worker(batches: Iterator[pa.RecordBatch], in_use: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]
                    ) -> Iterator[pa.RecordBatch]:
    from cdclake.spark import sources  # noqa: F401 -- what a task that reads cdclake's sources unpickles first

    for name, options in in_use:
        cached_format(name, dict(options))
    yield from batches


def load_python_workers(spark: SparkSession, in_use: Iterable[tuple[str, dict[str, str]]]) -> None:
    """Starts a Python worker per task slot and loads cdclake's sources and the formats ``in_use`` into it, as a
    decoding task would: Spark keeps the workers for its next Python tasks (``spark.python.worker.reuse``)."""
    slots = task_slots(spark)
    loaded = tuple((name, tuple(sorted(options.items()))) for name, options in in_use)
    spark.range(slots, numPartitions=slots).mapInArrow(functools.partial(_load_in_worker, in_use=loaded),
                                                       "id long").collect()


def raw_records(records: DataFrame, marked: bool = False) -> DataFrame:
    """Each record as a dead letter keeps it: coordinates, key, value, headers (in order, duplicates kept), timestamp
    and its type; null where the records lack them (Kafka's read without headers). ``marked``: records of the
    captured-records reader, whose mark of a line it could not read is no header of the record (a replay would fail
    on it again)."""
    headers: Any = F.col("headers")
    if "headers" not in records.columns:
        headers = F.lit(None).cast("array<struct<key:string,value:binary>>")
    elif marked:
        headers = F.filter("headers", lambda header: header["key"] != F.lit(UNREADABLE_HEADER))
    timestamp = F.col("timestamp") if "timestamp" in records.columns else F.lit(None).cast("timestamp")
    kind = F.col("timestampType") if "timestampType" in records.columns else F.lit(None).cast("int")
    return records.select("topic", "partition", "offset", "key", "value", headers.alias("headers"),
                          timestamp.alias("timestamp"), kind.alias("timestamp_type"))


def decoder_input(records: DataFrame, headers: bool = False) -> DataFrame:
    """The record columns the decoder reads (see :func:`records_from_arrow`): only these cross to Python, as
    each column costs the JVM a conversion per row. The headers cross whole only for a format that reads them
    (``headers``); otherwise only the reason a captured-records reader gives for a line it could not read
    (``UNREADABLE``) crosses, as the headers cost much: Spark converts a list column whose values are null (as
    its Kafka source gives a record without headers) in time growing with the square of the Arrow batch's rows
    (figures: benchmarks/results.md)."""
    columns: list[Any] = [name for name in ("key", "value", "topic", "partition", "offset", "timestamp")
                          if name in records.columns]
    if "headers" in records.columns and headers:
        columns.append("headers")
    elif "headers" in records.columns:
        reason = F.filter("headers", lambda header: header["key"] == F.lit(UNREADABLE_HEADER))
        columns.append(F.try_element_at(reason, F.lit(1))["value"].alias(UNREADABLE))
    return records.select(*columns)

"""Directories of captured-records files and message-per-line files, as a Spark source.

Order within a directory is file name, then line: the equivalent of one Kafka partition's offsets. So
files must arrive in name order (as log segments do); a file that sorts before one already read is not
read. The source's offset is ``{"file": name, "line": n}``: everything before line ``n`` of the file named
``name`` in the input (and every file sorting before it) has been read.

Registered with Spark as the Python data source ``cdclake-files`` (batch and streaming), with options
``path``, ``maxRecordsPerBatch`` and ``minPartitions``; its rows have the columns of Spark's Kafka source.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import math
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa

from cdclake.model.records import (
    KIND_LINES,
    Captured,
    Record,
    RecordFileError,
    is_captured_file,
    is_json,
    parse_captured_line,
    parse_captured_lines,
)
from cdclake.native.compiled import variable_array

try:
    from cdclake.native import _records
except ImportError:  # built where a compiler was at hand (setup.py's optional extension); Python reads alike
    _records = None

logger = logging.getLogger(__name__)

UNREADABLE_HEADER = "__cdclake.unreadable"
BATCH_ROWS = 20_000
COUNT_BLOCK = 1 << 20
NEWLINE = ord("\n")

RECORD_ARROW = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
])


def list_files(path: str) -> list[str]:
    """The data files of a directory in read order (a single file is its own list); names starting with
    ``.`` or ``_`` are bookkeeping of other tools and are left alone."""
    root = Path(path)
    if root.is_file():
        return [str(root)]
    if not root.is_dir():
        raise FileNotFoundError(f"input {path!r} is neither a file nor a directory")
    return sorted(str(p) for p in root.iterdir() if p.is_file() and not p.name.startswith((".", "_")))


def _lines(data: bytes, complete_only: bool) -> list[bytes]:
    """The lines of ``data`` that a :class:`LineCounter` counts (its model in the tests)."""
    lines = data.split(b"\n")
    last = lines.pop()
    if last and _counted(last, complete_only):
        lines.append(last)
    return lines


def _counted(last: bytes, complete_only: bool) -> bool:
    """Whether a file's last line, without its newline, is read: in follow, never yet (its writer may be at work);
    otherwise when it is whole (see :func:`_whole_last_line`)."""
    line = last.rstrip(b"\r")
    return not complete_only and (not line.strip() or is_json(line))


class _Scan(msgspec.Struct, frozen=True):
    """One counting pass over a file, valid while its size and mtime stay the same."""

    size: int
    mtime: float
    lines: int
    starts: list[tuple[int, int]]  # (line, byte offset where it starts), ascending


class LineCounter:
    """Line counts of files, cached by size and mtime so that polling a directory stays cheap; and, from the
    same pass, one known line start per block read, so that a reader can seek close to any line instead of
    reading every line before it."""

    def __init__(self, complete_only: bool) -> None:
        self.complete_only = complete_only
        self._cache: dict[str, _Scan] = {}

    def count(self, name: str) -> int:
        return self._scan(name).lines

    def seek_point(self, name: str, line: int) -> tuple[int, int]:
        """The nearest known (line, byte offset of its start) at or before ``line``."""
        starts = self._scan(name).starts
        return starts[bisect.bisect_right(starts, (line, math.inf)) - 1]

    def _scan(self, name: str) -> _Scan:
        stat = os.stat(name)
        cached = self._cache.get(name)
        if cached and cached.size == stat.st_size and cached.mtime == stat.st_mtime:
            return cached
        # A run counts every file before its first batch. Pieces of the file are counted side by side, each a
        # block at a time into a reused buffer (numpy and the reads let go of the GIL), which is faster than one
        # pass on more than one core (figures: benchmarks/results.md, "Measurements behind the code").
        size = stat.st_size
        blocks = -(-size // COUNT_BLOCK)
        pieces = max(1, min(SCAN_THREADS, blocks // 4))
        bounds = [blocks * i // pieces * COUNT_BLOCK for i in range(pieces)] + [size]
        if pieces == 1:
            counted = [_count_blocks(name, 0, size)]
        else:
            with ThreadPoolExecutor(pieces) as pool:
                counted = list(pool.map(_count_blocks, [name] * pieces, bounds[:-1], bounds[1:]))
        n, starts = 0, [(0, 0)]
        for position, newlines, first in itertools.chain.from_iterable(counted):
            if position and first >= 0:
                starts.append((n + 1, position + first + 1))  # the line after this block's first newline
            n += newlines
        if size and not self.complete_only:
            n += _whole_last_line(name, size)
        self._cache[name] = _Scan(size, stat.st_mtime, n, starts)
        return self._cache[name]


SCAN_THREADS = min(4, os.cpu_count() or 1)


def _whole_last_line(name: str, size: int) -> bool:
    """Whether a file ends in a line without its newline that is whole: JSON that parses, as every line of a
    message or captured-records file is. A run without follow reads such a line; one cut short (its writer still
    at work) waits, as in follow, for the rest of it: read now, it would go to the dead letters as a fragment,
    and the run after would start past it and never read it whole. Said in the log, since it may also be a
    fragment that no one completes."""
    tail = b""
    with open(name, "rb", buffering=0) as handle:
        end = size
        while end > 0 and b"\n" not in tail:
            begin = max(0, end - TAIL_BLOCK)
            handle.seek(begin)
            tail = handle.read(end - begin) + tail
            end = begin
    line = tail.rpartition(b"\n")[2]
    if not line:
        return False  # the file ends in its newline (or was cut meanwhile)
    if _counted(line, complete_only=False):
        return True
    logger.warning("%s ends in %d bytes without a newline that are not whole JSON: read once the line is complete",
                   name, len(line))
    return False


TAIL_BLOCK = 1 << 16


def _count_blocks(name: str, begin: int, end: int) -> list[tuple[int, int, int]]:
    """Of each block of bytes ``[begin, end)`` of a file: (where it starts, its newlines, the offset of its first
    newline or -1). numpy counts newlines about three times faster than bytearray.count."""
    buffer = bytearray(COUNT_BLOCK)
    view, octets, newlines = memoryview(buffer), np.frombuffer(buffer, np.uint8), np.empty(COUNT_BLOCK, np.bool_)
    counted = []
    with open(name, "rb", buffering=0) as handle:
        handle.seek(begin)
        position = begin
        while position < end and (size := handle.readinto(view[:min(COUNT_BLOCK, end - position)])):
            counted.append((position, int(np.count_nonzero(np.equal(octets[:size], NEWLINE, out=newlines[:size]))),
                            buffer.find(b"\n", 0, size)))
            position += size
    return counted


def position(offset: dict[str, Any]) -> tuple[str, int]:
    """Where an offset stands in its input's order: (file name within the input, line). By name, not path: the
    same directory is the same input however a run spells it (``in`` or ``/data/in``), and an offset of an
    earlier version holds the path as its run spelled it."""
    return os.path.basename(offset["file"]), offset["line"]


def plan_range(files: list[str], counter: LineCounter, start: dict[str, Any],
               limit: int | None) -> tuple[dict[str, Any], list[tuple[str, int, int]]]:
    """From ``start``, the end offset and the (file, first line, end line) segments to read, taking at
    most ``limit`` lines."""
    segments: list[tuple[str, int, int]] = []
    start_name, start_line = position(start)
    end = {"file": start_name, "line": start_line}
    budget = limit if limit and limit > 0 else None
    for name in files:
        key = os.path.basename(name)
        if key < start_name:
            continue
        first = start_line if key == start_name else 0
        total = counter.count(name)
        if total <= first:
            end = {"file": key, "line": total}
            continue
        stop = total if budget is None else min(total, first + budget)
        segments.append((name, first, stop))
        end = {"file": key, "line": stop}
        if budget is not None:
            budget -= stop - first
            if budget <= 0:
                break
    if position(end) == (start_name, start_line):
        return dict(start), segments  # the same offset: another spelling of it would make Spark plan an empty batch
    # A later count above this one says files arrived out of order (see late_files).
    end["files"] = files_up_to(files, end["file"])
    return end, segments


def files_up_to(files: list[str], name: str) -> int:
    """How many of the files sort up to the one named ``name`` (within the input), that one included."""
    return sum(1 for listed in files if os.path.basename(listed) <= name)


def late_files(files: list[str], offset: dict[str, Any]) -> int:
    """How many files sort up to the offset's file beyond those that did when it was made: they arrived after the
    input had moved past their place, so they are never read."""
    return files_up_to(files, position(offset)[0]) - offset["files"] if "files" in offset else 0


def subdirectories(path: str) -> list[str]:
    """The directories in an input directory, which are not read (a parent directory given by mistake, say)."""
    root = Path(path)
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))) if (
        root.is_dir()) else []


def partitions(path: str) -> list[tuple[str, int]]:
    """The (topic, partition) pairs a directory holds, from the first readable record of each file: captured-records
    files name theirs; a message-per-line file is a partition of its own (topic = file name, partition 0)."""
    found: set[tuple[str, int]] = set()
    for name in list_files(path):
        lines = _first_lines(name, KIND_LINES)
        if not is_captured_file(lines):
            if lines:
                found.add((Path(name).name, 0))
            continue
        for line in lines:
            try:
                record = parse_captured_line(line)
            except RecordFileError:
                continue
            found.add((record.topic, record.partition))
            break
    return sorted(found)


def _first_lines(name: str, count: int) -> list[bytes]:
    """The file's first ``count`` non-empty lines, read without reading the rest."""
    with open(name, "rb") as handle:
        return list(itertools.islice((line.rstrip(b"\r\n") for line in handle if line.strip()), count))


def _is_captured(name: str) -> bool:
    """The kind of a file, from its first lines (see :func:`is_captured_file`)."""
    return is_captured_file(_first_lines(name, KIND_LINES))


def read_segment(name: str, first: int, stop: int, complete_only: bool = False,
                 seek: tuple[int, int] = (0, 0)) -> Iterator[pa.RecordBatch]:
    """Lines ``[first, stop)`` of a file as record batches. The file is streamed, a chunk of lines at a time:
    a batch that reads part of a large file holds only that part, never the whole file. ``seek`` is a known
    (line, byte offset) at or before ``first`` (see :meth:`LineCounter.seek_point`): reading starts there."""
    topic = Path(name).name
    # The file's first lines, not the segment's: a segment may start at an unreadable line of a captured-records
    # file, which must still become a record with the reason it is unreadable.
    captured = _is_captured(name)
    seek_line, seek_byte = seek
    # A large buffer: lines of a few KB would cost the default 8 KB one a read call every line or two.
    with open(name, "rb", buffering=1 << 20) as handle:
        handle.seek(seek_byte)
        lines = itertools.islice(handle, first - seek_line, stop - seek_line)
        index = first
        while chunk := list(itertools.islice(lines, BATCH_ROWS)):
            if not chunk[-1].endswith(b"\n") and not _counted(chunk[-1], complete_only):
                chunk.pop()  # a line still being written (the last): read once it is complete
                if not chunk:
                    break
            batch = captured_to_arrow(chunk) if captured else None
            if batch is not None:
                index += len(chunk)
                yield batch
                continue
            numbered = []
            for raw in chunk:
                ended = raw.endswith(b"\n")
                line = (raw[:-1] if ended else raw).rstrip(b"\r")
                if line.strip():
                    numbered.append((index, line))
                index += 1
            if not numbered:
                continue
            if not captured:
                yield records_to_arrow([Record(value=line, topic=topic, offset=i) for i, line in numbered])
                continue
            parsed = parse_captured_lines([line for _, line in numbered])
            yield records_to_arrow(parsed if parsed is not None
                                   else [_captured_or_unreadable(name, *n) for n in numbered])


def _captured_or_unreadable(name: str, index: int, line: bytes) -> Record:
    try:
        return parse_captured_line(line)
    except RecordFileError as exc:
        # Kept as a record, so that it reaches the dead letters with the reason instead of vanishing.
        return Record(value=line, topic=Path(name).name, offset=index,
                      headers=[(UNREADABLE_HEADER, f"{name}:{index + 1}: {exc}".encode())])


_HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])


def captured_to_arrow(lines: list[bytes]) -> pa.RecordBatch | None:
    """``records_to_arrow(parse_captured_lines(lines))`` in C, several times faster, for the non-blank lines
    (ends included, as read from the file); None without the C module or where it leaves the lines to the
    Python path: anything it does not read exactly as msgspec does, and blank lines only."""
    columns = _records.read_captured(lines) if _records is not None else None
    if columns is None:
        return None
    rows = columns["rows"]
    header_names, header_values = variable_array(pa.string(), columns["header_names"]), variable_array(
        pa.binary(), columns["header_values"])
    headers = pa.StructArray.from_arrays([header_names, header_values], fields=list(_HEADER))
    timestamp_valid = columns["timestamp_valid"]
    return pa.RecordBatch.from_arrays([
        variable_array(pa.binary(), columns["key"]),
        variable_array(pa.binary(), columns["value"]),
        variable_array(pa.string(), columns["topic"]),
        pa.Array.from_buffers(pa.int32(), rows, [None, pa.py_buffer(columns["partition"])]),
        pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(columns["offset"])]),
        pa.Array.from_buffers(RECORD_ARROW.field("timestamp").type, rows, [
            timestamp_valid and pa.py_buffer(timestamp_valid), pa.py_buffer(columns["timestamp"])],
            null_count=columns["timestamp_nulls"]),
        pa.repeat(pa.scalar(0, pa.int32()), rows),
        pa.Array.from_buffers(RECORD_ARROW.field("headers").type, rows,
                              [None, pa.py_buffer(columns["header_offsets"])], children=[headers]),
    ], schema=RECORD_ARROW)


def records_to_arrow(records: Sequence[Record] | Sequence[Captured]) -> pa.RecordBatch:
    offsets, names, values = [0], [], []
    for r in records:
        for name, value in r.headers:
            names.append(name)
            values.append(value)
        offsets.append(len(names))
    headers = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.StructArray.from_arrays(
        [pa.array(names, pa.string()), pa.array(values, pa.binary())], fields=list(_HEADER)))
    return pa.RecordBatch.from_arrays([
        pa.array([r.key for r in records], pa.binary()),
        pa.array([r.value for r in records], pa.binary()),
        pa.array([r.topic for r in records], pa.string()),
        pa.array([r.partition for r in records], pa.int32()),
        pa.array([r.offset for r in records], pa.int64()),
        pa.array([None if r.timestamp is None else r.timestamp * 1000 for r in records], pa.int64()).cast(
            pa.timestamp("us", tz="UTC")),
        pa.array([0] * len(records), pa.int32()),
        headers.cast(RECORD_ARROW.field("headers").type),
    ], schema=RECORD_ARROW)

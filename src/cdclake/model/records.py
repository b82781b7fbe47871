"""Kafka records, and the files they are captured to.

**Captured-records file** (``*.jsonl``): JSON Lines, one Kafka record per line::

    {"topic": "t", "partition": 0, "offset": 42, "timestamp": 1700000000000,
     "key": "<base64>|null", "value": "<base64>|null", "headers": [["name", "<base64>|null"], ...]}

**Message-per-line file**: any other text file; each non-empty line is one message value (JSON formats
only). Its records get topic = the file name, partition 0 and offset = the 0-based line index.

A file is a captured-records file when its first non-empty line is a JSON object with ``topic``,
``partition``, ``offset`` and ``value`` members; no message of any supported format has all four.
"""

from __future__ import annotations

import base64
import itertools
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec

from cdclake.errors import RecordFileError

Header = tuple[str, bytes | None]


class Record(msgspec.Struct, kw_only=True):
    """One Kafka record, with the same fields as Spark's Kafka source."""

    value: bytes | None
    key: bytes | None = None
    topic: str = ""
    partition: int = 0
    offset: int = 0
    timestamp: int | None = None  # epoch ms
    headers: list[Header] = msgspec.field(default_factory=list)

    def header(self, name: str) -> bytes | None:
        for header_name, header_value in self.headers:
            if header_name == name:
                return header_value
        return None

    def where(self) -> str:
        """Coordinates for error messages."""
        return f"{self.topic}[{self.partition}]@{self.offset}"


class Captured(msgspec.Struct):
    """A captured-records line as read: Record's fields, with the members the file format requires required
    (msgspec turns the base64 text into bytes, validating it)."""

    topic: str
    partition: int
    offset: int
    value: bytes | None
    key: bytes | None = None
    timestamp: int | None = None
    headers: list[tuple[str, bytes | None]] = msgspec.field(default_factory=list)


_captured_decoder = msgspec.json.Decoder(Captured)
_captured_array_decoder = msgspec.json.Decoder(list[Captured])
_encoder = msgspec.json.Encoder()
_CAPTURED_MEMBERS = (b'"topic"', b'"partition"', b'"offset"', b'"value"')


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def is_captured_line(line: bytes) -> bool:
    head = line.lstrip()
    return head.startswith(b"{") and all(member in head for member in _CAPTURED_MEMBERS)


# How many non-empty lines of a file may be looked at for one that is whole JSON (see is_captured_file).
KIND_LINES = 8


def is_json(line: bytes) -> bool:
    """Whether a line is whole JSON, as every line of a captured-records or message file is unless it was cut."""
    try:
        msgspec.json.decode(line)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return False
    return True


def is_captured_file(lines: Iterable[bytes]) -> bool:
    """Whether a file's lines (in order, newlines stripped) are captured records, by its first non-empty line that
    is whole JSON: a captured-records file whose first line was cut (a copy begun mid-record) is still one, and only
    that line is unreadable. Without such a line among the first KIND_LINES, by the first non-empty line."""
    first = list(itertools.islice((line for line in lines if line.strip()), KIND_LINES))
    whole = next((line for line in first if is_json(line)), first[0] if first else b"")
    return is_captured_line(whole)


def parse_captured_line(line: bytes) -> Record:
    try:
        c = _captured_decoder.decode(line)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # msgspec reports bad UTF-8 in a str member so
        raise RecordFileError(f"not a captured record: {exc}") from exc
    return Record(topic=c.topic, partition=c.partition, offset=c.offset, timestamp=c.timestamp, key=c.key,
                  value=c.value, headers=list(c.headers))


def parse_captured_lines(lines: list[bytes]) -> list[Captured] | None:
    """Many captured-records lines in one parse (several times faster than one parse per line), or None
    when any of them is not a captured record: the caller then reads them one by one to say which."""
    try:
        parsed = _captured_array_decoder.decode(b"[" + b",".join(lines) + b"]")
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None
    return parsed if len(parsed) == len(lines) else None  # a line holding two objects is no record


def captured_line(record: Record) -> bytes:
    return _encoder.encode({
        "topic": record.topic, "partition": record.partition, "offset": record.offset,
        "timestamp": record.timestamp, "key": _b64(record.key), "value": _b64(record.value),
        "headers": [[name, _b64(value)] for name, value in record.headers],
    })


class FileLine(msgspec.Struct):
    """A record read from a file, or the reason its line could not be read as one."""

    path: str
    line: int  # 1-based, for people
    record: Record | None
    error: str | None = None
    raw: bytes = b""


def read_file(path: str | os.PathLike[str]) -> Iterator[FileLine]:
    """The records of one captured-records or message-per-line file, in file order."""
    name = str(path)
    with open(path, "rb") as handle:
        lines = [raw.rstrip(b"\r") for raw in handle.read().split(b"\n")]
    captured = is_captured_file(lines)
    topic = Path(name).name
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        if not captured:
            yield FileLine(name, index + 1, Record(value=line, topic=topic, offset=index), raw=line)
            continue
        try:
            yield FileLine(name, index + 1, parse_captured_line(line), raw=line)
        except RecordFileError as exc:
            yield FileLine(name, index + 1, None, str(exc), raw=line)


def write_records(path: str | os.PathLike[str], records: Iterable[Record]) -> int:
    count = 0
    with open(path, "wb") as handle:
        for record in records:
            handle.write(captured_line(record) + b"\n")
            count += 1
    return count

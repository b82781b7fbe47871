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
import binascii
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec

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


class _Captured(msgspec.Struct):
    topic: str
    partition: int
    offset: int
    value: str | None
    key: str | None = None
    timestamp: int | None = None
    headers: list[tuple[str, str | None]] = msgspec.field(default_factory=list)


class RecordFileError(ValueError):
    pass


_captured_decoder = msgspec.json.Decoder(_Captured)
_encoder = msgspec.json.Encoder()
_CAPTURED_MEMBERS = (b'"topic"', b'"partition"', b'"offset"', b'"value"')


def _unb64(text: str | None) -> bytes | None:
    # binascii's strict mode checks what b64decode(validate=True) checks, several times faster.
    return None if text is None else binascii.a2b_base64(text, strict_mode=True)


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def is_captured_line(line: bytes) -> bool:
    head = line.lstrip()
    return head.startswith(b"{") and all(member in head for member in _CAPTURED_MEMBERS)


def parse_captured_line(line: bytes) -> Record:
    try:
        c = _captured_decoder.decode(line)
        headers = [(name, _unb64(value)) for name, value in c.headers]
        return Record(topic=c.topic, partition=c.partition, offset=c.offset, timestamp=c.timestamp,
                      key=_unb64(c.key), value=_unb64(c.value), headers=headers)
    except (msgspec.DecodeError, binascii.Error) as exc:
        raise RecordFileError(f"not a captured record: {exc}") from exc


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
        lines = handle.read().split(b"\n")
    captured: bool | None = None
    topic = Path(name).name
    for index, raw in enumerate(lines):
        line = raw.rstrip(b"\r")
        if not line.strip():
            continue
        if captured is None:
            captured = is_captured_line(line)
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

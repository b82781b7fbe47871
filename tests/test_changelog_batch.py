"""What the executors do to a batch of records, in plain Python: files read into record batches, and record
batches decoded into changelog batches in which every record is accounted for."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from cdclake import formats, workload
from cdclake.records import Record, captured_line
from cdclake.sources import files
from cdclake.spark.changelog import CHANGELOG_ARROW, decode_batch, records_from_arrow


def _canal(table: str, op: str, row_id: int, rows: int = 1) -> bytes:
    data = [{"id": str(row_id + i), "name": f"n{row_id + i}"} for i in range(rows)]
    return json.dumps({"database": "d", "table": table, "type": op, "isDdl": False, "es": 1, "ts": 1,
                       "pkNames": ["id"], "mysqlType": {"id": "bigint", "name": "varchar(8)"},
                       "data": data, "old": None}).encode()


def _read(path: Path) -> list[Record]:
    total = files.LineCounter(complete_only=False).count(str(path))
    return [r for batch in files.read_segment(str(path), 0, total) for r in records_from_arrow(batch)]


def test_captured_files_read_back_exactly_with_an_unreadable_line_kept_in_place(tmp_path):
    records = [Record(topic="t", partition=2, offset=10 + i, timestamp=1_700_000_000_000 + i,
                      key=None if i % 3 else f"k{i}".encode(), value=_canal("a", "INSERT", i),
                      headers=[("h", b"\x00\xff")] if i == 1 else []) for i in range(5)]
    lines = [captured_line(r) for r in records]
    lines.insert(2, b'{"topic": "t", "partition": 2, "offset": 99, "value": "not base64!"}')
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\n".join(lines[:4]) + b"\n\n" + b"\n".join(lines[4:]) + b"\n")
    read = _read(path)
    assert [r for r in read if r.offset != 2] == records
    (bad,) = [r for r in read if r.offset == 2]  # line index 2, kept so it reaches the dead letters
    assert bad.value == lines[2] and bad.header(files.UNREADABLE_HEADER).startswith(f"{path}:3: ".encode())


def test_a_segment_starting_at_a_corrupted_line_of_a_captured_file_is_still_read_as_captured_records(tmp_path):
    records = [Record(topic="t", partition=2, offset=10 + i, key=f"k{i}".encode(), value=_canal("a", "INSERT", i))
               for i in range(4)]
    lines = [captured_line(r) for r in records]
    torn = lines[2][:15]  # a torn write: not even recognisable as a captured record on its own
    lines.insert(2, torn)
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    read = [r for batch in files.read_segment(str(path), 2, len(lines)) for r in records_from_arrow(batch)]
    bad, *good = read
    assert good == records[2:]  # their own topic, partition and offset, not the file's name and line numbers
    assert (bad.topic, bad.offset, bad.value) == ("t.jsonl", 2, torn)
    assert bad.header(files.UNREADABLE_HEADER).startswith(f"{path}:3: not a captured record".encode())


def test_message_per_line_files_number_lines_from_zero_and_skip_blank_ones(tmp_path):
    path = tmp_path / "plain.txt"
    path.write_bytes(b"one\r\n\ntwo\nthree")
    assert [(r.offset, r.value, r.topic) for r in _read(path)] == [
        (0, b"one", "plain.txt"), (2, b"two", "plain.txt"), (3, b"three", "plain.txt")]


@given(st.lists(st.sampled_from([b"x", b"\n", b"\r\n", b"yy"]), max_size=12), st.booleans())
def test_line_counts_match_the_lines_read(tmp_path_factory, parts, complete_only):
    path = tmp_path_factory.mktemp("count") / "f"
    data = b"".join(parts)
    path.write_bytes(data)
    assert files.LineCounter(complete_only).count(str(path)) == len(files._lines(data, complete_only))


def test_every_record_is_accounted_for_and_events_ranked_within_their_record():
    fmt = formats.create("canal-json")
    values = [_canal("a", "INSERT", 1, rows=3), b"{broken", _canal("a", "DELETE", 1), None,
              _canal("b", "UPDATE", 7)]
    records = [Record(topic="t", partition=0, offset=i, key=b"k", value=v) for i, v in enumerate(values)]
    out = decode_batch(fmt, records).to_pylist()
    assert [(r["offset"], r["status"], r["seq"]) for r in out] == [
        (0, "event", 0), (0, "event", 1), (0, "event", 2), (2, "event", 0), (4, "event", 0),
        (1, "failed", 0), (3, "skipped", 0)]
    failed = out[5]
    assert failed["raw_value"] == b"{broken" and failed["raw_key"] == b"k" and "invalid JSON" in failed["error"]
    first = out[0]
    assert (first["key"], json.loads(first["after"]), first["before"]) == ("[1]", {"id": 1, "name": "n1"}, None)
    assert [c["name"] for c in json.loads(first["columns"])] == ["id", "name"]


def test_changelog_of_a_generated_stream_matches_the_events_one_by_one():
    generated = workload.generate("canal-json", events=300, tables=2, seed=4, partitions=2)
    fmt = formats.create("canal-json")
    batch = decode_batch(fmt, generated.records)
    assert batch.schema == CHANGELOG_ARROW
    events = fmt.decode(generated.records).events
    rows = [r for r in batch.to_pylist() if r["status"] == "event"]
    assert len(rows) == len(events) and len(batch) == len(rows)  # every record made events
    for row, event in zip(rows, events, strict=True):
        assert (row["op"], row["table"], row["commit_ts"], row["position"]) == (
            event.op, event.table, event.commit_ts, event.position)
        assert (json.loads(row["after"]) if row["after"] else None) == event.after
        names = [c.name for c in event.columns if c.key]
        image = event.after if event.after is not None else event.before
        assert json.loads(row["key"]) == [image[n] for n in names]


def test_record_batches_round_trip_through_arrow():
    records = [Record(topic="t", partition=1, offset=5, timestamp=1_700_000_000_123, key=b"k", value=b"v",
                      headers=[("a", b"1"), ("b", None)]),
               Record(topic="u", partition=0, offset=6, timestamp=None, key=None, value=None)]
    assert records_from_arrow(files.records_to_arrow(records)) == records
    assert records_from_arrow(files.records_to_arrow(records[1:])) == records[1:]


@given(st.lists(st.sampled_from([b"m1", b"", b"m2\r", b" "]), max_size=9), st.integers(0, 10), st.integers(0, 10),
       st.booleans(), st.booleans())
def test_a_segment_is_exactly_its_lines_whatever_the_chunking(tmp_path_factory, lines, first, stop, ended, complete):
    path = tmp_path_factory.mktemp("segment") / "plain.txt"
    data = b"\n".join(lines) + (b"\n" if ended else b"")
    path.write_bytes(data)
    whole = files._lines(data, complete)
    expected = [(i, whole[i].rstrip(b"\r")) for i in range(first, min(stop, len(whole))) if whole[i].strip()]
    for rows in (2, files.BATCH_ROWS):
        files.BATCH_ROWS, saved = rows, files.BATCH_ROWS
        try:
            got = [(r.offset, r.value) for b in files.read_segment(str(path), first, stop, complete)
                   for r in records_from_arrow(b)]
        finally:
            files.BATCH_ROWS = saved
        assert got == expected

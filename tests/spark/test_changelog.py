"""What the executors do to a batch of records, in plain Python: files read into record batches, and record
batches decoded into changelog batches in which every record is accounted for."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cdclake import formats
from cdclake import simulator as workload
from cdclake.model.records import KIND_LINES, Record, captured_line, is_captured_file
from cdclake.sources import files
from cdclake.spark import changelog
from cdclake.spark.changelog import CHANGELOG_ARROW, decode_arrow_task, decode_batch, decode_task, records_from_arrow


def _canal(table: str, op: str, row_id: int, rows: int = 1) -> bytes:
    data = [{"id": str(row_id + i), "name": f"n{row_id + i}"} for i in range(rows)]
    return json.dumps({"database": "d", "table": table, "type": op, "isDdl": False, "es": 1, "ts": 1,
                       "pkNames": ["id"], "mysqlType": {"id": "bigint", "name": "varchar(8)"},
                       "data": data, "old": None}).encode()


def _typed(texts: dict[str, str | None] | None, like: dict[str, Any] | None) -> dict[str, Any] | None:
    """A changelog image (every value text) read back as the values of the image ``like``: a float's text must
    parse to the float itself, an integer's and a flag's must be their JSON spelling."""
    if texts is None or like is None:
        return texts
    typed: dict[str, Any] = {}
    for name, text in texts.items():
        value = like.get(name)
        if text is None or isinstance(value, str) or value is None:
            typed[name] = text
        elif isinstance(value, float):
            typed[name] = float(text) if float(text) == value else text
        else:
            typed[name] = value if json.dumps(value) == text else text
    return typed


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


@pytest.mark.parametrize("arrow", [True, False], ids=["arrow batches", "python records"])
@pytest.mark.parametrize("name", ["canal-json", "debezium-json"])
def test_an_unreadable_line_of_a_captured_file_fails_with_the_reader_reason_and_is_never_decoded(tmp_path, name,
                                                                                                    arrow):
    # The second line is a message the format accepts, but not a captured record: applying it would invent a
    # change at coordinates the source never gave (the file's name and line).
    message = _canal("a", "INSERT", 7) if name == "canal-json" else json.dumps(
        {"before": None, "after": {"id": 7}, "op": "c", "ts_ms": 1,
         "source": {"db": "d", "table": "a", "ts_ms": 1, "connector": "mysql"}}).encode()
    assert formats.create(name).decode([Record(value=message)]).events
    good = Record(topic="t", partition=0, offset=5, value=message)
    path = tmp_path / "t.jsonl"
    path.write_bytes(captured_line(good) + b"\n" + message + b"\n" + b'{"topic": "t", "par\n')
    batches = list(files.read_segment(str(path), 0, 3))
    fmt = formats.create(name)
    log = changelog.flat(pa.Table.from_batches(list(decode_arrow_task(fmt, batches)) if arrow else
                                     list(decode_task(fmt, [[r for b in batches for r in records_from_arrow(b)]]))))
    rows = log.filter(pa.compute.is_in(log["status"], pa.array(["event", "failed"]))).to_pylist()
    assert [(r["status"], r["offset"]) for r in rows] == [("event", 5), ("failed", 1), ("failed", 2)]
    assert rows[1]["error"].startswith(f"{path}:2: not a captured record")
    assert rows[2]["error"].startswith(f"{path}:3: not a captured record")
    assert [r["raw_value"] for r in rows[1:]] == [message, b'{"topic": "t", "par']


def test_message_per_line_files_number_lines_from_zero_and_skip_blank_ones(tmp_path):
    path = tmp_path / "plain.txt"
    path.write_bytes(b'one\r\n\ntwo\n{"three": 3}')
    assert [(r.offset, r.value, r.topic) for r in _read(path)] == [
        (0, b"one", "plain.txt"), (2, b"two", "plain.txt"), (3, b'{"three": 3}', "plain.txt")]


@pytest.mark.parametrize("captured", [False, True])
def test_a_last_line_cut_short_waits_for_its_rest_and_is_then_read_whole(tmp_path, captured, caplog):
    # A run without follow reads a last line without its newline when it is whole; one whose writer is still at
    # work is left for the run after, which would otherwise start past its fragment and never read it whole.
    path = tmp_path / "t.jsonl"
    messages = [_canal("a", "INSERT", i) for i in range(3)]
    lines = [captured_line(Record(topic="t", offset=i, value=m)) if captured else m for i, m in enumerate(messages)]
    path.write_bytes(lines[0] + b"\n" + lines[1] + b"\n" + lines[2][:30])
    assert len(_read(path)) == 2
    assert f"{path} ends in 30 bytes without a newline that are not whole JSON" in caplog.text
    path.write_bytes(lines[0] + b"\n" + lines[1] + b"\n" + lines[2])
    assert [r.value for r in _read(path)] == messages


def test_an_offset_names_its_file_within_the_input_however_the_input_is_spelled(tmp_path):
    for name in ("a.jsonl", "b.jsonl"):
        (tmp_path / name).write_bytes(b"{}\n{}\n")
    counter = files.LineCounter(complete_only=False)
    relative = os.path.relpath(tmp_path)
    for spelled in (str(tmp_path), relative, f"{relative}/./"):
        listed = files.list_files(spelled)
        end, _ = files.plan_range(listed, counter, {"file": "", "line": 0}, 3)
        assert end == {"file": "b.jsonl", "line": 1, "files": 2}
        # An offset saved as an earlier version saved it, the path as that run spelled the input.
        for saved in ({"file": "a.jsonl", "line": 2}, {"file": f"elsewhere/{tmp_path.name}/a.jsonl", "line": 2}):
            assert files.plan_range(listed, counter, saved, None) == (
                {"file": "b.jsonl", "line": 2, "files": 2}, [(listed[1], 0, 2)])
        # Nothing new: the same offset back, as it was spelled (another would make Spark plan an empty batch).
        done = {"file": f"elsewhere/{tmp_path.name}/b.jsonl", "line": 2}
        assert files.plan_range(listed, counter, done, None) == (done, [])


def test_files_that_arrive_out_of_name_order_are_counted_as_never_read(tmp_path):
    for name in ("b.jsonl", "c.jsonl"):
        (tmp_path / name).write_bytes(b"{}\n")
    counter = files.LineCounter(complete_only=False)
    end, _ = files.plan_range(files.list_files(str(tmp_path)), counter, {"file": "", "line": 0}, None)
    assert end == {"file": "c.jsonl", "line": 1, "files": 2}
    assert files.late_files(files.list_files(str(tmp_path)), end) == 0
    (tmp_path / "a.jsonl").write_bytes(b"{}\n")
    (tmp_path / "d.jsonl").write_bytes(b"{}\n")
    (tmp_path / "records").mkdir()
    assert files.late_files(files.list_files(str(tmp_path)), end) == 1
    assert files.late_files(files.list_files(str(tmp_path)), {"file": "c.jsonl", "line": 1}) == 0  # an older offset
    assert files.subdirectories(str(tmp_path)) == ["records"]


def test_a_file_is_of_the_kind_its_first_whole_line_says():
    record = captured_line(Record(topic="t", offset=0, value=b"{}"))
    assert is_captured_file([record[20:], b"", record])  # a first line cut short
    assert is_captured_file([b"\xff\xfe", record])
    assert not is_captured_file([b'{"data": [1]}', record])
    assert not is_captured_file([record[20:], b'{"data": [1]}'])
    assert is_captured_file([record[:-2]] * KIND_LINES + [b'{"data": [1]}'])  # no whole line: the first decides
    assert not is_captured_file([b"", b"  "])


@given(st.lists(st.sampled_from([b"x", b"\n", b"\r\n", b"yy"]), max_size=40), st.booleans(), st.integers(1, 5),
       st.integers(1, 3))
def test_line_counts_match_the_lines_read(tmp_path_factory, parts, complete_only, block, threads):
    path = tmp_path_factory.mktemp("count") / "f"
    data = b"".join(parts)
    path.write_bytes(data)
    lines = files._lines(data, complete_only)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(files, "COUNT_BLOCK", block)  # many blocks, counted in pieces side by side
        patch.setattr(files, "SCAN_THREADS", threads)
        scan = files.LineCounter(complete_only)._scan(str(path))
    assert scan.lines == len(lines)
    # One known start per block after the first that holds a newline: the line after that newline.
    starts = [sum(map(len, lines[:i])) + i for i in range(len(lines) + 1)]
    assert scan.starts[0] == (0, 0) and all(starts[line] == offset for line, offset in scan.starts)
    assert [offset for _, offset in scan.starts[1:]] == [
        data.index(b"\n", at) + 1 for at in range(block, len(data), block) if b"\n" in data[at:at + block]]


def test_every_record_is_accounted_for_and_events_ranked_within_their_record():
    fmt = formats.create("canal-json")
    values = [_canal("a", "INSERT", 1, rows=3), b"{broken", _canal("a", "DELETE", 1), None,
              _canal("b", "UPDATE", 7)]
    records = [Record(topic="t", partition=0, offset=i, key=b"k", value=v) for i, v in enumerate(values)]
    out = changelog.flat(decode_batch(fmt, records)).to_pylist()
    assert [(r["offset"], r["status"], r["seq"]) for r in out] == [
        (0, "event", 0), (0, "event", 1), (0, "event", 2), (2, "event", 0), (4, "event", 0),
        (1, "failed", 0), (3, "skipped", 0), (None, "layout", 0), (4, "tally", 0)]
    tally = out[-1]
    assert (tally["topic"], tally["partition"], tally["first_offset"], tally["records"], tally["events"]) == (
        "t", 0, 0, 5, 5)
    failed = out[5]
    assert failed["raw_value"] == b"{broken" and failed["raw_key"] == b"k" and "invalid JSON" in failed["error"]
    first = out[0]
    # Every value of an image is text (Spark parses those fastest), the key's own values stay JSON.
    assert (first["key"], json.loads(first["after"]), first["before_key"]) == ("[1]", {"id": "1", "name": "n1"}, None)
    # Changes name their column list; the task lists it once.
    listed = out[-2]
    assert first["columns"] is None and {r["layout"] for r in out[:5]} == {listed["layout"]}
    assert [c["name"] for c in json.loads(listed["columns"])] == ["id", "name"]


_IMAGE_VALUES = st.recursive(
    # A NaN or an infinity never reaches the compiled twin (see test_a_nan_or_an_infinity_...).
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
    | st.binary(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=6)


@given(st.dictionaries(st.text(max_size=6), _IMAGE_VALUES, max_size=8))
def test_compiled_image_texts_are_the_python_twins_bytes(image):
    compiled = changelog._images.image_texts(changelog._json.encode(image))
    assert compiled == changelog._image_texts(image, untyped=False)
    assert all(v is None or type(v) is str for v in json.loads(compiled).values())


@pytest.mark.parametrize("special", [float("nan"), float("inf"), 1.5])
def test_an_image_is_made_texts_whether_or_not_the_compiled_twin_was_built(monkeypatch, special):
    image = {"id": 7, "f": 1e16, "g": special, "ok": True, "doc": {"a": ['"\\']}, "s": "x", "n": None}
    expected = {"id": "7", "f": "1e16", "g": {1.5: "1.5"}.get(special, "NaN" if special != special else "Infinity"),
                "ok": "true", "doc": '{"a":["\\"\\\\"]}', "s": "x", "n": None}
    assert json.loads(changelog._image_json(image, untyped=False, floats=("f", "g"))) == expected
    monkeypatch.setattr(changelog, "_images", None)
    assert json.loads(changelog._image_json(image, untyped=False, floats=("f", "g"))) == expected


@pytest.mark.parametrize("untyped", [False, True])
def test_a_nan_or_an_infinity_reaches_the_lake_as_the_text_spark_casts_back_to_it(untyped):
    # msgspec (and so the compiled twin's input) writes them as null, which would store NULL for a NaN.
    image = {"nan": float("nan"), "up": float("inf"), "down": float("-inf"), "one": 1.0}
    made = json.loads(changelog._image_json(image, untyped, floats=("nan", "up", "down", "one")))
    assert made == {"nan": "NaN", "up": "Infinity", "down": "-Infinity", "one": "1.0"}


def test_an_image_nested_deeper_than_the_compiled_scanner_follows_is_made_texts_in_python():
    deep: list = []
    for _ in range(100):
        deep = [deep]
    image = {"id": 1, "doc": deep}
    with pytest.raises(ValueError):
        changelog._images.image_texts(changelog._json.encode(image))
    made = changelog._image_json(image, untyped=False)
    assert made == changelog._image_texts(image, untyped=False) and json.loads(made)["doc"] == json.dumps(deep)


@pytest.mark.parametrize("text", [b"", b"[1]", b'{"a":1', b'{"a":1}x', b'{"a" 1}', b'{"a":tru}'])
def test_compiled_image_texts_refuses_what_is_no_compact_json_object(text):
    with pytest.raises(ValueError, match="not a compact JSON object"):
        changelog._images.image_texts(text)


def test_changelog_of_a_generated_stream_matches_the_events_one_by_one():
    generated = workload.generate("canal-json", events=300, tables=2, seed=4, partitions=2)
    fmt = formats.create("canal-json")
    batch = decode_batch(fmt, generated.records)
    assert batch.schema == CHANGELOG_ARROW
    events = fmt.decode(generated.records).events
    log = changelog.flat(batch).to_pylist()
    rows = [r for r in log if r["status"] == "event"]
    tallies = [r for r in log if r["status"] == "tally"]
    listed = {r["layout"]: json.loads(r["columns"]) for r in log if r["status"] == "layout"}
    # Every record made events; each table's column list is listed once.
    assert len(rows) == len(events) and len(batch) == len(rows) + len(tallies) + len(listed) and len(listed) == 2
    assert sum(t["records"] for t in tallies) == len(generated.records)
    assert sum(t["events"] for t in tallies) == len(events)
    assert {(t["partition"], t["first_offset"], t["offset"]) for t in tallies} == {
        (p, min(r.offset for r in generated.records if r.partition == p),
         max(r.offset for r in generated.records if r.partition == p)) for p in (0, 1)}
    for row, event in zip(rows, events, strict=True):
        assert (row["op"], row["table"], row["commit_ts"], row["position"]) == (
            event.op, event.table, event.commit_ts, event.position)
        assert _typed(json.loads(row["after"]) if row["after"] else None, event.after) == event.after
        assert [(c["name"], c["type"]) for c in listed[row["layout"]]] == [(c.name, c.type) for c in event.columns]
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


@given(st.lists(st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"")), max_size=40), st.integers(1, 9),
       st.integers(0, 45), st.integers(0, 45), st.integers(1, 6), st.booleans())
def test_tasks_that_seek_to_known_line_starts_read_exactly_their_lines(tmp_path_factory, lines, block, first, stop,
                                                                       min_tasks, ended):
    from cdclake.spark import sources as S

    path = tmp_path_factory.mktemp("seek") / "plain.txt"
    data = b"\n".join(lines) + (b"\n" if ended else b"")
    path.write_bytes(data)
    counter = files.LineCounter(complete_only=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(files, "COUNT_BLOCK", block)  # many blocks, so many known line starts
        total = counter.count(str(path))
    assert total == len(files._lines(data, False))
    for line, byte in counter._scan(str(path)).starts:
        assert byte == sum(len(x) + 1 for x in data.split(b"\n")[:line])  # really where that line starts
    whole = [line.rstrip(b"\r") for line in files._lines(data, False)]
    stop = min(stop, total)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(S, "MIN_TASK_LINES", 1)
        tasks = S._tasks([(str(path), first, stop)] if first < stop else [], counter, min_tasks, False)
    assert [(t.first, t.stop) for t in tasks] == sorted((t.first, t.stop) for t in tasks)
    assert sum(t.stop - t.first for t in tasks) == max(0, stop - first)
    assert len(tasks) == min(min_tasks, max(0, stop - first))
    sizes = [t.stop - t.first for t in tasks]
    assert not sizes or max(sizes) - min(sizes) <= 1  # no task of a few lines beside long ones
    got = [(r.offset, r.value) for t in tasks
           for b in files.read_segment(t.name, t.first, t.stop, seek=t.seek) for r in records_from_arrow(b)]
    assert got == [(i, whole[i]) for i in range(first, stop) if whole[i].strip()]


def test_tasks_share_the_lines_of_several_files_evenly_and_cut_at_each_file_end(tmp_path):
    from cdclake.spark import sources as S

    names = []
    for name, count in (("a", 30), ("b", 1), ("c", 9)):
        names.append(str(tmp_path / name))
        (tmp_path / name).write_bytes(b"".join(b"%d\n" % i for i in range(count)))
    counter = files.LineCounter(complete_only=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(S, "MIN_TASK_LINES", 1)
        tasks = S._tasks([(names[0], 5, 30), (names[1], 0, 1), (names[2], 0, 9)], counter, 2, False)
        few = S._tasks([(names[0], 0, 30)], counter, 64, False)
    # 35 lines in 2 shares: the cut at line 17 of them, and one at each file's end.
    assert [(Path(t.name).name, t.first, t.stop) for t in tasks] == [("a", 5, 22), ("a", 22, 30), ("b", 0, 1),
                                                                      ("c", 0, 9)]
    assert len(few) == 30  # never more tasks than lines
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(S, "MIN_TASK_LINES", 20)
        assert len(S._tasks([(names[0], 0, 30)], counter, 2, False)) == 1  # a task is worth its start-up
        patch.setattr(S, "MIN_TASK_LINES", 3)
        # 20 lines in 2 shares: the cut at line 10, 1 line past the end of "c", is left to that end.
        nearly_even = S._tasks([(names[2], 0, 9), (names[0], 0, 11)], counter, 2, False)
    assert [(Path(t.name).name, t.first, t.stop) for t in nearly_even] == [("c", 0, 9), ("a", 0, 11)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=6), st.integers(1, 8), st.integers(1, 8))
def test_tasks_cover_every_files_lines_once_and_only_whole_files_make_short_tasks(tmp_path_factory, lengths,
                                                                                  min_lines, min_tasks):
    from cdclake.spark import sources as S

    root = tmp_path_factory.mktemp("files")
    counter = files.LineCounter(complete_only=False)
    segments = []
    for number, length in enumerate(lengths):
        path = root / f"{number:04d}.jsonl"
        path.write_bytes(b"".join(b"%d\n" % i for i in range(length)))
        segments.append((str(path), 0, counter.count(str(path))))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(S, "MIN_TASK_LINES", min_lines)
        tasks = S._tasks(segments, counter, min_tasks, False)
    assert [(t.name, line) for t in tasks for line in range(t.first, t.stop)] == [
        (name, line) for name, first, stop in segments for line in range(first, stop)]
    whole = {(name, first, stop) for name, first, stop in segments}
    assert all(t.stop - t.first >= min_lines or (t.name, t.first, t.stop) in whole for t in tasks)


def _lake_state(rows: list[dict]) -> dict[tuple, tuple]:
    """What the planner and the sink make of a changelog, in plain Python: per table and key the newest row
    change by (sequence, partition, offset, rank), an update that leaves its key also deleting the old one;
    gone when it is a delete or older than the table's last TRUNCATE or DROP TABLE."""
    events = [r for r in rows if r["status"] == "event"]

    def seq(r: dict) -> str:
        timed = r["commit_ts"] is not None
        ts = r["commit_ts"] if timed else (r["partition_ts"] or 0)
        return f"{ts:020d}/" + ((r["position"] or "") if timed else f"~{r['offset']:020d}")

    buried: dict[tuple, str] = defaultdict(str)
    for r in events:
        if r["kind"] == "truncate" or (r["kind"] == "ddl" and r["ddl"].upper().startswith("DROP TABLE")):
            buried[(r["database"], r["table"])] = max(buried[(r["database"], r["table"])], seq(r))
    changes = []
    for r in events:
        if r["kind"] == "row":
            changes.append((r, r["key"], r["op"], r["after"]))
            if r["op"] == "u" and r["before_key"] is not None and r["before_key"] != r["key"]:
                changes.append((r, r["before_key"], "d", None))
    newest: dict[tuple, tuple] = {}
    for r, key, op, after in changes:
        order = (seq(r), r["partition"], r["offset"], r["seq"])
        identity = (r["database"], r["table"], key)
        if identity not in newest or order > newest[identity][0]:
            newest[identity] = (order, op, json.loads(after) if after else None)
    return {identity: (order, after) for identity, (order, op, after) in newest.items()
            if op != "d" and order[0] > buried[identity[:2]]}


def _tasks(records: list[Record]) -> list[list[Record]]:
    """The records as Spark reads them: one task per partition, in offset order."""
    by_partition: dict[tuple[str, int], list[Record]] = defaultdict(list)
    for r in records:
        by_partition[(r.topic, r.partition)].append(r)
    return [sorted(rs, key=lambda r: r.offset) for _, rs in sorted(by_partition.items())]


def _changelog(fmt: Any, tasks: list[list[Record]], reduce: bool, batch_rows: int = 50) -> list[dict]:
    rows: list[dict] = []
    for task in tasks:
        batches = [task[i:i + batch_rows] for i in range(0, len(task), batch_rows)]
        rows += [r for b in decode_task(fmt, batches, reduce) for r in changelog.flat(b).to_pylist()]
    return rows


@settings(max_examples=25, deadline=None)
# Open-source Canal and DTS send a key change as one update; TiCDC and Debezium as a delete and an insert.
@given(flavour=st.sampled_from([("canal-json", "tidb"), ("canal-json", None), ("dts-avro", None),
                                ("debezium-json", None), ("ticdc-open", None)]),
       seed=st.integers(0, 10_000), partitions=st.integers(1, 3), replays=st.sampled_from([0.0, 0.2]),
       ddl_rate=st.sampled_from([0.0, 0.05]), batch_rows=st.integers(1, 80))
def test_a_reduced_changelog_leads_to_the_same_lake(flavour, seed, partitions, replays, ddl_rate, batch_rows):
    format_name, canal_flavour = flavour
    options = {"flavour": canal_flavour} if canal_flavour else {}
    generated = workload.generate(format_name, events=400, tables=2, seed=seed, partitions=partitions,
                                  replays=replays, options=options, ddl_rate=ddl_rate, max_keys=30,
                                  key_change_rate=0.1)
    fmt = formats.create(format_name, options)
    tasks = _tasks(generated.records)
    full = _changelog(fmt, tasks, reduce=False, batch_rows=batch_rows)
    reduced = _changelog(fmt, tasks, reduce=True, batch_rows=batch_rows)
    assume(not any("RENAME" in (r["ddl"] or "").upper() for r in full))  # planned again unreduced: see pipeline
    assert _lake_state(reduced) == _lake_state(full)
    # Reduced means fewer rows (30 keys, 400 changes), and the same account of records and events.
    assert sum(r["status"] == "event" for r in reduced) < sum(r["status"] == "event" for r in full)

    def account(rows: list[dict]) -> tuple:
        tallies = sorted((t["topic"], t["partition"], t["first_offset"], t["offset"], t["commit_ts"], t["records"],
                          t["events"]) for t in rows if t["status"] == "tally")
        return tallies, sorted((r["offset"], r["status"]) for r in rows if r["status"] in ("failed", "skipped"))

    assert account(reduced) == account(full)
    assert sum(t[5] for t in account(full)[0]) == len(generated.records)


def test_memory_stays_bounded_by_flushing_the_newest_changes_early():
    generated = workload.generate("canal-json", events=500, tables=1, seed=2, options={"flavour": "tidb"},
                                  max_keys=200)
    fmt = formats.create("canal-json", {"flavour": "tidb"})
    from cdclake.spark import changelog as CL

    task = CL._Task(fmt, reduce=True, max_held_bytes=20_000)
    rows = [r for b in [*task.add(generated.records[:250]), *task.add(generated.records[250:]), *task.finish()]
            for r in b.to_pylist()]
    assert task.held == []
    full = _changelog(fmt, [generated.records], reduce=False)
    assert _lake_state(rows) == _lake_state(full)


def _untimed_canal(op: str, row_id: int, es: int | None) -> bytes:
    message = json.loads(_canal("a", op, row_id))
    message["es"] = es  # open-source Canal without es: the change has no commit ts
    return json.dumps(message).encode()


def test_a_change_without_commit_ts_gets_its_partition_latest_commit_ts_and_is_never_reduced():
    fmt = formats.create("canal-json")
    values = [_untimed_canal("INSERT", 1, 100), _untimed_canal("INSERT", 2, 300), _untimed_canal("UPDATE", 1, None),
              _untimed_canal("DELETE", 2, 200), _untimed_canal("DELETE", 1, None)]
    records = [Record(topic="t", partition=3, offset=10 + i, value=v) for i, v in enumerate(values)]
    for reduce in (False, True):
        rows = [r for r in changelog.flat(decode_batch(fmt, records, reduce)).to_pylist() if r["status"] == "event"]
        untimed = sorted((r["offset"], r["partition_ts"]) for r in rows if r["commit_ts"] is None)
        assert untimed == [(12, 300), (14, 300)]
        assert all(r["partition_ts"] is None for r in rows if r["commit_ts"] is not None)


_CHANGE = st.fixed_dictionaries({
    "database": st.sampled_from([None, "", "a"]), "table": st.sampled_from([None, "t", "u"]),
    "key": st.sampled_from(["[1]", "[2]", "[10]"]), "commit_ts": st.integers(0, 3),
    "position": st.sampled_from([None, "", "1", "10", "9"]), "partition": st.sampled_from([None, 0, 1]),
    "offset": st.sampled_from([None, 0, 5]), "seq": st.integers(0, 2)})


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(_CHANGE, max_size=12), min_size=1, max_size=4))
def test_the_arrow_reduction_keeps_each_key_newest_change_as_python_order_would(batches):
    """Nulls are one group apart from "" (database) and order as "" or 0 (position, partition, offset); among
    equal orders the first read stays."""
    from cdclake.spark import changelog as CL

    numbered = [[{**change, "after": f"{b}.{i}"} for i, change in enumerate(batch)] for b, batch in enumerate(batches)]
    held = [CL._Held(pa.RecordBatch.from_pylist(batch, schema=CHANGELOG_ARROW), None) for batch in numbered]
    expected: dict[tuple, tuple] = {}
    for change in (c for batch in numbered for c in batch):
        order = (change["commit_ts"], change["position"] or "", change["partition"] or 0, change["offset"] or 0,
                 change["seq"])
        identity = (change["database"], change["table"], change["key"])
        if identity not in expected or order > expected[identity][0]:
            expected[identity] = (order, change["after"])
    got = CL._newest(held).to_pylist()
    assert sorted(r["after"] for r in got) == sorted(after for _, after in expected.values())


_FLAT_VALUES = {pa.string(): st.none() | st.text(max_size=4), pa.binary(): st.none() | st.binary(max_size=4),
                pa.int64(): st.none() | st.integers(-(2**63), 2**63 - 1), pa.int32(): st.none() | st.integers(0, 9),
                pa.bool_(): st.none() | st.booleans()}


@settings(max_examples=100, deadline=None)
@given(st.lists(st.fixed_dictionaries({f.name: _FLAT_VALUES[f.type] for f in changelog.FLAT_ARROW}), max_size=6))
def test_details_nest_and_flatten_back_unchanged_and_are_null_in_a_row_without_any(rows):
    table = pa.Table.from_pylist(rows, schema=changelog.FLAT_ARROW)
    nested = changelog.nested(table)
    assert nested.schema == CHANGELOG_ARROW
    assert changelog.flat(nested).equals(table)
    assert [r["detail"] is None for r in nested.to_pylist()] == [
        all(r[name] is None for name in changelog.DETAIL_ARROW.names) for r in rows]


def test_changes_held_by_an_older_cdclake_read_with_the_columns_it_lacked_null():
    # It wrote no column list id (layout), no partition_ts and no input; Delta may give strings back as large ones.
    older = pa.table({"status": ["event"], "kind": ["row"], "key": pa.array(["[1]"], pa.large_string()),
                      "columns": ["[]"], "partition": pa.array([0], pa.int32()), "offset": [3], "raw_value": [b"v"]})
    (row,) = changelog.nested(older).to_pylist()
    assert (row["key"], row["offset"], row["layout"]) == ("[1]", 3, None)
    assert row["detail"] == {**dict.fromkeys(changelog.DETAIL_ARROW.names), "columns": "[]", "raw_value": b"v"}


@pytest.mark.parametrize("mixed", [True, False])
def test_the_compiled_paths_tallies_count_each_partition_whether_or_not_a_batch_mixes_them(mixed):
    # A task's Arrow batch holds one partition as a rule (counted without grouping), but may hold several.
    generated = workload.generate("canal-json", events=400, tables=2, seed=5, partitions=2)
    fmt = formats.create("canal-json")
    by_partition = [[r for r in generated.records if r.partition == p] for p in (0, 1)]
    batches = [files.records_to_arrow(b) for b in ([generated.records] if mixed else by_partition)]
    log = changelog.flat(pa.Table.from_batches(list(changelog.decode_arrow_task(fmt, batches)))).to_pylist()
    tallies = {t["partition"]: t for t in log if t["status"] == "tally"}
    for p, records in enumerate(by_partition):
        events = fmt.decode(records).events
        assert (tallies[p]["records"], tallies[p]["events"], tallies[p]["first_offset"], tallies[p]["offset"],
                tallies[p]["commit_ts"]) == (len(records), len(events), records[0].offset, records[-1].offset,
                                             max(e.commit_ts for e in events))
    assert sorted((r["partition"], r["offset"]) for r in log if r["status"] == "event") == sorted(
        (e.source.partition, e.source.offset) for e in fmt.decode(generated.records).events)


def test_a_shareplex_update_split_between_a_tasks_batches_is_paired():
    # UPDATE BEFORE, then UPDATE AFTER changing the key, as two records; a task reads them in batches of any size.
    def half(op: str, seq: int, data: dict) -> dict:
        return {"meta": {"op": op, "table": "O.T", "trans": "7", "seq": seq, "size": 3, "scn": "100",
                         "time": "2020-01-01T00:00:00"}, "data": data}

    messages = [half("ins", 1, {"ID": "1", "V": "a"}), half("updb", 2, {"ID": "1", "V": "a"}),
                half("upda", 3, {"ID": "2", "V": "b"}), half("ins", 4, {"ID": "3", "V": "c"})]
    records = [Record(value=json.dumps(m).encode(), topic="t", partition=0, offset=i) for i, m in enumerate(messages)]
    fmt = formats.create("shareplex-json", {"key-columns": "ID"})
    for size in range(1, len(records) + 1):
        batches = [records[i:i + size] for i in range(0, len(records), size)]
        for log in ([r for b in decode_task(fmt, batches) for r in changelog.flat(b).to_pylist()],
                    [r for b in decode_arrow_task(fmt, [files.records_to_arrow(b) for b in batches])
                     for r in changelog.flat(b).to_pylist()]):
            assert sorted((r["offset"], r["status"], r["op"], r["before_key"], r["key"]) for r in log
                          if r["status"] in ("event", "skipped", "failed")) == [
                (0, "event", "c", None, '["1"]'), (1, "skipped", None, None, None),
                (2, "event", "u", '["1"]', '["2"]'), (3, "event", "c", None, '["3"]')], size
            (tally,) = [r for r in log if r["status"] == "tally"]
            assert (tally["records"], tally["events"]) == (4, 3)
    # A BEFORE that ends the task's records fails there, once.
    log = [r for b in decode_task(fmt, [records[:1], records[1:2]]) for r in changelog.flat(b).to_pylist()]
    assert [(r["offset"], r["status"]) for r in log if r["status"] == "failed"] == [(1, "failed")]

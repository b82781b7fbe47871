"""cdclake status: where each table is, which tables it cannot read, dead letters by what went wrong."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from click.testing import Result
from deltalake import write_deltalake
from typer.testing import CliRunner

from cdclake.cli.main import app
from cdclake.lake.delta import DeltaSink
from cdclake.lake.layout import DEAD_LETTERS
from cdclake.model.records import Record, read_file

# The last change applied to db.t: commit ts 1714521600065, then a Canal position (transaction, offset 204, row 7)
# padded for ordering.
LAST_SEQ = "00000001714521600065/00000000000000000000/00000000000000000204/00000000000000000007"


def _lake(lake: Path, *tables: str) -> None:
    """A lake with these tables of two rows each, and a batch's progress that applied LAST_SEQ to each."""
    for name in tables:
        write_deltalake(str(lake / name.replace(".", "/")), pa.table({"id": [1, 2]}))
    DeltaSink(str(lake), "main").record_progress(
        {"tables": {name: {"last_seq": LAST_SEQ, "stopped": None} for name in tables}}, 0)


def _status(lake: Path) -> Result:
    return CliRunner().invoke(app, ["status", str(lake)])


def test_status_shows_the_whole_last_applied_position(tmp_path):
    _lake(tmp_path, "db.t")
    result = _status(tmp_path)
    assert result.exit_code == 0, result.output
    line = result.output.splitlines()[1].split()
    assert line[:4] == ["db.t", "2", "1714521600065", "0/204/7"]  # the offset, without the padding's zeros


def test_status_refuses_a_directory_that_is_no_lake(tmp_path):
    (tmp_path / "records").mkdir()
    (tmp_path / "records" / "0001.jsonl").write_text("{}\n")
    for path in (tmp_path / "records", tmp_path / "mistyped"):
        result = _status(path)
        assert result.exit_code == 2, result.output
        assert result.output.startswith(f"cdclake: {path}: ") and len(result.output.splitlines()) == 1
    (tmp_path / "new" / "_cdclake").mkdir(parents=True)  # a lake before its first table
    result = _status(tmp_path / "new")
    assert result.exit_code == 0 and "(no tables)" in result.output


def test_status_names_the_tables_it_cannot_read_and_shows_the_others(tmp_path):
    _lake(tmp_path, "db.broken_log", "db.lost_file", "db.fine")
    with (tmp_path / "db" / "broken_log" / "_delta_log" / "00000000000000000000.json").open("a") as log:
        log.write("{not json\n")
    for data in (tmp_path / "db" / "lost_file").glob("*.parquet"):
        data.unlink()
    result = _status(tmp_path)
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.exception  # not a crash
    lines = result.output.splitlines()
    assert lines[1].startswith("db.broken_log") and "could not be read: " in lines[1]
    assert lines[2].split()[:4] == ["db.fine", "2", "1714521600065", "0/204/7"]
    assert lines[3].startswith("db.lost_file") and "could not be read: " in lines[3] and "not found" in lines[3]
    assert lines[4:] == ["dead letters: 0"]  # one line each, no traceback or Rust backtrace


def test_status_names_a_lake_table_of_its_own_it_cannot_read(tmp_path):
    _lake(tmp_path, "db.t")
    for log in (tmp_path / "_cdclake" / "progress" / "_delta_log").glob("*.json"):
        log.write_text("{not json\n")
    result = _status(tmp_path)
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.exception  # not a crash
    lines = result.output.splitlines()
    assert lines[1].split()[:3] == ["db.t", "2", "-"]  # rows still counted; where it is, unknown
    assert lines[2].startswith("_cdclake/progress") and "could not be read: " in lines[2]
    assert lines[3:] == ["dead letters: 0"]


def test_dead_letters_of_several_formats_are_written_one_format_at_a_time(tmp_path):
    _lake(tmp_path, "db.t")
    runner = CliRunner()
    listed = runner.invoke(app, ["dead-letters", str(tmp_path)])
    assert listed.exit_code == 0 and listed.stdout == "" and "0 dead letters" in listed.output
    rows = [{"topic": "a", "partition": 0, "offset": 5, "key": None, "value": b"x", "format": "canal-json",
             "reason": "invalid JSON", "pipeline": "main.one", "batch": 0, "recorded_at": None},
            {"topic": "b", "partition": 1, "offset": 7, "key": b"k", "value": b"\x00y", "format": "dts-avro",
             "reason": "bad Avro", "pipeline": "other.two", "batch": 3, "recorded_at": None}]
    write_deltalake(str(tmp_path / "_cdclake" / "dead_letters"), pa.Table.from_pylist(rows, schema=DEAD_LETTERS))
    out = tmp_path / "dead.jsonl"
    mixed = runner.invoke(app, ["dead-letters", str(tmp_path), "--write", str(out)])
    assert mixed.exit_code == 2 and "2 formats (canal-json, dts-avro): choose one with --format" in mixed.output
    assert not out.exists()
    one = runner.invoke(app, ["dead-letters", str(tmp_path), "--format", "dts-avro", "--write", str(out)])
    assert one.exit_code == 0 and one.stdout == "b:1:7  dts-avro  pipeline other.two batch 3  bad Avro\n"
    (line,) = read_file(out)
    assert line.record == Record(key=b"k", value=b"\x00y", topic="b", partition=1, offset=7)
    by_name = runner.invoke(app, ["dead-letters", str(tmp_path), "--pipeline", "main"])
    assert by_name.stdout.startswith("a:0:5  canal-json  pipeline main.one") and "1 dead letter\n" in by_name.output
    assert runner.invoke(app, ["dead-letters", str(tmp_path), "--pipeline", "mai"]).stdout == ""
    for log in (tmp_path / "_cdclake" / "dead_letters" / "_delta_log").glob("*.json"):
        log.write_text("{not json\n")
    damaged = runner.invoke(app, ["dead-letters", str(tmp_path)])
    assert damaged.exit_code == 2 and isinstance(damaged.exception, SystemExit), damaged.exception
    assert "dead_letters could not be read: " in damaged.output


# The dead-letter table as cdclake wrote it before its records' headers and timestamps were kept.
OLD_DEAD_LETTERS = pa.schema([f for f in DEAD_LETTERS if f.name not in ("headers", "timestamp", "timestamp_type")])


def test_a_lake_with_the_earlier_dead_letter_table_gains_headers_and_timestamps_and_lists_its_old_rows(tmp_path):
    old = {"topic": "a", "partition": 0, "offset": 5, "key": b"k", "value": b"x", "format": "canal-json",
           "reason": "invalid JSON", "pipeline": "main.one", "batch": 0, "recorded_at": 0}
    write_deltalake(str(tmp_path / "_cdclake" / "dead_letters"), pa.Table.from_pylist([old], schema=OLD_DEAD_LETTERS))
    out = tmp_path / "dead.jsonl"
    listed = CliRunner().invoke(app, ["dead-letters", str(tmp_path), "--write", str(out)])  # before the upgrade's
    assert listed.exit_code == 0, listed.output
    assert [line.record for line in read_file(out)] == [Record(key=b"k", value=b"x", topic="a", offset=5)]
    headers = [("h", b"\x00"), ("h", None), ("", b"")]
    new = {**old, "offset": 6, "batch": 1, "headers": [{"key": k, "value": v} for k, v in headers],
           "timestamp": 1_700_000_000_123_000, "timestamp_type": 1}
    rows = pa.Table.from_pylist([new], schema=DEAD_LETTERS).drop_columns(["pipeline", "batch", "recorded_at"])
    assert DeltaSink(str(tmp_path), "main.one").write_dead_letters(rows, 1, 1999) == 1
    written = CliRunner().invoke(app, ["dead-letters", str(tmp_path), "--write", str(out)])
    assert written.exit_code == 0, written.output
    assert written.stdout.splitlines() == ["a:0:5  canal-json  pipeline main.one batch 0  invalid JSON",
                                           "a:0:6  canal-json  pipeline main.one batch 1  invalid JSON"]
    assert [line.record for line in read_file(out)] == [
        Record(key=b"k", value=b"x", topic="a", offset=5),
        Record(key=b"k", value=b"x", topic="a", offset=6, timestamp=1_700_000_000_123, headers=headers)]

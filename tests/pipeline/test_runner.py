"""The pipeline through real Spark and real Delta tables: ordering, replays, tombstones, DDL, dead letters,
crashes at every step of a batch."""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from decimal import Decimal
from pathlib import Path

import pytest
from deltalake import DeltaTable
from typer.testing import CliRunner

from cdclake import formats
from cdclake.cli.main import app
from cdclake.lake.layout import TABLE_TOMBSTONE
from cdclake.lake.lock import one_batch_at_a_time
from cdclake.model.events import DDL, DELETE, INSERT, ROW, TRUNCATE, UPDATE, ChangeEvent, Column
from cdclake.model.records import Record, captured_line, write_records
from cdclake.pipeline import runner as pipeline
from cdclake.pipeline.batch import BatchApplier, BatchReport
from cdclake.pipeline.config import PipelineConfig, SourceConfig
from cdclake.pipeline.failures import stopping_error
from cdclake.pipeline.positions import SourceRead
from tests.helpers.crashes import CRASH_POINTS, crash_at_every_point_then_finish
from tests.helpers.lake import lake_rows

pytestmark = pytest.mark.spark

COLUMNS = [
    Column("id", "bigint", key=True, nullable=False),
    Column("name", "varchar(64)", nullable=True),
    Column("balance", "decimal(12,4)", nullable=True),
    Column("big", "bigint unsigned", nullable=True),
    Column("seen", "timestamp(6)", nullable=True),
    Column("born", "datetime(3)", nullable=True),
    Column("blob", "varbinary(16)", nullable=True),
    Column("flag", "tinyint(1)", nullable=True),
]


def row(i: int, version: int = 0) -> dict:
    return {"id": i, "name": f"user {i} v{version}", "balance": f"{i * 100 + version}.1234",
            "big": 18446744073709551615 - i, "seen": f"2024-05-01T10:00:0{version % 10}.123456Z",
            "born": "1999-12-31 23:59:59.125", "blob": "AAEC/w==", "flag": version % 2}


def change(op: str, ts: int, i: int, version: int = 0, before_version: int | None = None,
           table: str = "users", columns: list[Column] = COLUMNS) -> ChangeEvent:
    after = None if op == DELETE else row(i, version)
    before = row(i, before_version) if before_version is not None else (row(i, version) if op == DELETE else None)
    if after is not None:
        after = {c.name: after.get(c.name) for c in columns}
    if before is not None:
        before = {c.name: before.get(c.name) for c in columns}
    return ChangeEvent(kind=ROW, op=op, database="shop", table=table, key={"id": i}, before=before, after=after,
                       columns=columns, commit_ts=ts << 18)


def ddl(ts: int, statement: str, table: str = "users", kind: str = DDL) -> ChangeEvent:
    return ChangeEvent(kind=kind, database="shop", table=table, ddl=statement, commit_ts=ts << 18)


def records(events: list[ChangeEvent], start_offset: int = 0, partition: int = 0) -> list[Record]:
    out = formats.create("canal-json", {"flavour": "tidb"}).encode(events)
    for index, record in enumerate(out):
        record.topic, record.partition, record.offset = "cdc", partition, start_offset + index
    return out


def run(spark, input_dir: Path, lake: Path, name: str = "t", **source) -> pipeline.RunSummary:
    cfg = PipelineConfig(lake=str(lake), name=name, sources=[
        SourceConfig(format=source.pop("format", "canal-json"), input=str(input_dir), **source)])
    return pipeline.run(cfg, spark=spark)


@pytest.fixture(params=["decoded by the source", "records"])
def batches_of(request, monkeypatch) -> str:
    """Both ways a batch reaches the pipeline: as the changelog that cdclake's own sources decode as they read,
    and as records, which Spark's own Kafka source gives and the pipeline decodes (``mapInArrow``)."""
    if request.param == "records":
        monkeypatch.setattr(SourceRead, "decodes", property(lambda self: False))
    return request.param


def test_applies_typed_rows_exactly(spark, tmp_path, batches_of):
    events = [change(INSERT, 1000 + i, i) for i in range(1, 6)]
    events += [change(UPDATE, 2000, 2, version=1, before_version=0), change(DELETE, 2001, 3)]
    (tmp_path / "in").mkdir()
    write_records(tmp_path / "in" / "0001.jsonl", records(events))
    summary = run(spark, tmp_path / "in", tmp_path / "lake")
    assert summary.total("records") == len(events)
    assert summary.total("dead_letters") == 0
    rows = lake_rows(str(tmp_path / "lake"), "shop", "users")
    assert sorted(rows) == ["[1]", "[2]", "[4]", "[5]"]
    got = rows["[2]"]
    assert got["name"] == "user 2 v1"
    assert got["balance"] == Decimal("201.1234")
    assert got["big"] == Decimal(18446744073709551613)
    assert got["seen"] == dt.datetime(2024, 5, 1, 10, 0, 1, 123456, tzinfo=dt.UTC)
    assert got["born"] == dt.datetime(1999, 12, 31, 23, 59, 59, 125000)
    assert got["blob"] == b"\x00\x01\x02\xff"
    assert got["flag"] == 1
    schema = {f.name: str(f.type) for f in DeltaTable(str(tmp_path / "lake" / "shop" / "users")).schema().fields}
    assert schema["big"].startswith("PrimitiveType(\"decimal(20,0)")
    assert "timestamp_ntz" in schema["born"] and "\"timestamp\"" in schema["seen"]
    assert "byte" in schema["flag"]  # TINYINT(1) stays an integer, not a boolean


def _state(spark, tmp_path: Path, name: str, files: dict[str, list[Record]], **source) -> dict:
    root = tmp_path / name
    (root / "in").mkdir(parents=True)
    for file_name, recs in files.items():
        write_records(root / "in" / file_name, recs)
    run(spark, root / "in", root / "lake", **source)
    return lake_rows(str(root / "lake"), "shop", "users")


def test_shuffled_files_and_replays_give_the_same_state(spark, tmp_path):
    rng = random.Random(7)
    events, ts = [], 1000
    live: dict[int, int] = {}
    for _ in range(300):
        ts += 1
        i = rng.randrange(1, 40)
        if i not in live:
            live[i] = 0
            events.append(change(INSERT, ts, i))
        elif rng.random() < 0.3:
            events.append(change(DELETE, ts, i, version=live.pop(i)))
        else:
            live[i] += 1
            events.append(change(UPDATE, ts, i, version=live[i], before_version=live[i] - 1))
    recs = records(events)
    ordered = _state(spark, tmp_path, "ordered", {"all.jsonl": recs})
    assert sorted(ordered) == sorted(f"[{i}]" for i in live)
    # The same records spread over files whose name order is unrelated to the change order, plus
    # at-least-once redelivery of a fifth of them at later offsets.
    shuffled = recs[:]
    rng.shuffle(shuffled)
    replays = [Record(value=r.value, topic="cdc", partition=1, offset=10_000 + n)
               for n, r in enumerate(rng.sample(recs, len(recs) // 5))]
    pieces = {f"{chr(ord('a') + n)}.jsonl": shuffled[n::4] for n in range(4)} | {"z.jsonl": replays}
    assert _state(spark, tmp_path, "shuffled", pieces, max_records_per_batch=97) == ordered


def test_late_older_changes_do_not_resurrect_deleted_rows(spark, tmp_path):
    (tmp_path / "in").mkdir()
    write_records(tmp_path / "in" / "1.jsonl", records([change(INSERT, 10, 1), change(DELETE, 20, 1),
                                                        change(INSERT, 10, 2)]))
    run(spark, tmp_path / "in", tmp_path / "lake")
    assert sorted(lake_rows(str(tmp_path / "lake"), "shop", "users")) == ["[2]"]
    # Later batches bring changes older than what the lake holds: a stale update and insert of the
    # deleted row, and a stale update of the live one.
    write_records(tmp_path / "in" / "2.jsonl", records([
        change(UPDATE, 15, 1, version=3, before_version=0), change(INSERT, 5, 1, version=4),
        change(UPDATE, 9, 2, version=9, before_version=0)], start_offset=3))
    run(spark, tmp_path / "in", tmp_path / "lake")
    rows = lake_rows(str(tmp_path / "lake"), "shop", "users")
    assert sorted(rows) == ["[2]"]
    assert rows["[2]"]["name"] == "user 2 v0"
    # A newer insert after the delete is a real re-insert.
    write_records(tmp_path / "in" / "3.jsonl", records([change(INSERT, 30, 1, version=5)], start_offset=6))
    run(spark, tmp_path / "in", tmp_path / "lake")
    assert lake_rows(str(tmp_path / "lake"), "shop", "users")["[1]"]["name"] == "user 1 v5"


def test_an_input_spelled_another_way_is_the_same_input(spark, tmp_path, monkeypatch):
    # The checkpoint holds file names within the input, so a relative, an absolute and a dotted spelling of one
    # directory read on where the last run stopped: new files are neither skipped nor old ones read again.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in").mkdir()
    write_records(tmp_path / "in" / "1.jsonl", records([change(INSERT, 10, 1)]))
    first = run(spark, Path("in"), tmp_path / "lake")
    write_records(tmp_path / "in" / "2.jsonl", records([change(INSERT, 20, 2)], start_offset=1))
    second = run(spark, tmp_path / "in", tmp_path / "lake")
    write_records(tmp_path / "in" / "3.jsonl", records([change(INSERT, 30, 3)], start_offset=2))
    third = run(spark, Path("./in/../in"), tmp_path / "lake")
    assert [s.total("records") for s in (first, second, third)] == [1, 1, 1]
    assert sorted(lake_rows(str(tmp_path / "lake"), "shop", "users")) == ["[1]", "[2]", "[3]"]


def test_a_message_still_being_written_is_applied_whole_by_a_later_run(spark, tmp_path):
    (tmp_path / "in").mkdir()
    first_line, second_line = (captured_line(r) + b"\n" for r in records([change(INSERT, 10, 1),
                                                                             change(INSERT, 20, 2)]))
    path = tmp_path / "in" / "1.jsonl"
    path.write_bytes(first_line + second_line[:40])  # its writer is at work: no newline yet, not whole
    first = run(spark, tmp_path / "in", tmp_path / "lake")
    assert (first.total("records"), first.total("dead_letters")) == (1, 0)
    path.write_bytes(first_line + second_line)
    second = run(spark, tmp_path / "in", tmp_path / "lake")
    assert (second.total("records"), second.total("dead_letters")) == (1, 0)
    assert sorted(lake_rows(str(tmp_path / "lake"), "shop", "users")) == ["[1]", "[2]"]


def test_a_captured_file_whose_first_line_was_cut_loses_only_that_line(spark, tmp_path):
    (tmp_path / "in").mkdir()
    lines = [captured_line(r) for r in records([change(INSERT, 10, 1), change(INSERT, 20, 2)])]
    (tmp_path / "in" / "1.jsonl").write_bytes(lines[0][25:] + b"\n" + lines[1] + b"\n")
    summary = run(spark, tmp_path / "in", tmp_path / "lake")
    assert (summary.total("records"), summary.total("events"), summary.total("dead_letters")) == (2, 1, 1)
    assert sorted(lake_rows(str(tmp_path / "lake"), "shop", "users")) == ["[2]"]


def test_a_running_pipeline_forgets_tombstones_past_their_retention_between_batches(spark, tmp_path):
    (tmp_path / "in").mkdir()
    write_records(tmp_path / "in" / "1.jsonl", records([change(INSERT, 10, 1), change(INSERT, 11, 2),
                                                        change(DELETE, 20, 1), change(INSERT, 30, 3)]))
    tombstones = tmp_path / "lake" / "_cdclake" / "tombstones"
    seen: list[int] = []  # tombstones after each batch, while the run goes on

    def after(report: BatchReport) -> None:
        seen.append(DeltaTable(str(tombstones)).to_pyarrow_table().num_rows if tombstones.exists() else 0)

    def run_with(retention_hours: float, lake: Path) -> None:
        cfg = PipelineConfig(lake=str(lake), name="t", tombstone_retention_hours=retention_hours, sources=[
            SourceConfig(format="canal-json", input=str(tmp_path / "in"), max_records_per_batch=3)])
        pipeline.run(cfg, progress=after, spark=spark)

    run_with(0.0, tombstones.parent.parent)
    assert seen == [0, 0]  # the delete's tombstone, past a retention of 0 h, is forgotten in its own batch
    assert sorted(lake_rows(str(tmp_path / "lake"), "shop", "users")) == ["[2]", "[3]"]
    seen.clear()
    tombstones = tmp_path / "kept" / "_cdclake" / "tombstones"
    run_with(168.0, tombstones.parent.parent)
    assert seen == [1, 1]


def test_a_following_run_reads_every_source_and_a_signal_ends_it_after_the_batch(spark, tmp_path):
    # Before, the first source's query, which follows its input for ever, kept the run from starting the second.
    for source, table in (("a", "users"), ("b", "orders")):
        (tmp_path / source).mkdir()
        write_records(tmp_path / source / "1.jsonl", records([change(INSERT, 100 + i, i, table=table)
                                                              for i in range(1, 6)]))
    lake = tmp_path / "lake"
    cfg = PipelineConfig(lake=str(lake), name="t", follow=True, poll_seconds=0.2, sources=[
        SourceConfig(name=source, format="canal-json", input=str(tmp_path / source)) for source in ("a", "b")])
    reported: list[str] = []

    def signal_once_both_applied(report: BatchReport) -> None:
        reported.append(report.source)
        if len(reported) == 2:  # inside the second batch, before Spark has logged it done
            os.kill(os.getpid(), signal.SIGINT)

    handler = signal.getsignal(signal.SIGINT)
    summary = pipeline.run(cfg, progress=signal_once_both_applied, spark=spark)
    assert summary.signalled and sorted(reported) == ["a", "b"]
    assert signal.getsignal(signal.SIGINT) is handler
    for table in ("users", "orders"):
        assert sorted(lake_rows(str(lake), "shop", table)) == [f"[{i}]" for i in range(1, 6)]
    # Spark logged both batches done before their queries stopped: the next run has nothing to read again.
    cfg.follow = False
    assert pipeline.run(cfg, spark=spark).batches == []


def test_a_signal_leaves_the_batches_after_the_one_being_applied_to_the_next_run(spark, tmp_path):
    (tmp_path / "in").mkdir()
    write_records(tmp_path / "in" / "1.jsonl", records([change(INSERT, 10 + i, i) for i in range(1, 4)]))
    cfg = PipelineConfig(lake=str(tmp_path / "lake"), name="t", sources=[
        SourceConfig(format="canal-json", input=str(tmp_path / "in"), max_records_per_batch=1)])

    def signal_in_the_first_batch(report: BatchReport) -> None:
        if report.batch == 0:
            ours = signal.getsignal(signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            deadline = time.monotonic() + 10
            while signal.getsignal(signal.SIGINT) is ours and time.monotonic() < deadline:
                time.sleep(0.01)  # until the run's handler has seen it (it puts the previous one back)

    first = pipeline.run(cfg, progress=signal_in_the_first_batch, spark=spark)
    assert first.signalled and [b.batch for b in first.batches] == [0]
    assert sorted(lake_rows(str(tmp_path / "lake"), "shop", "users")) == ["[1]"]
    second = pipeline.run(cfg, spark=spark)
    assert not second.signalled and [b.batch for b in second.batches] == [1, 2]
    assert sorted(lake_rows(str(tmp_path / "lake"), "shop", "users")) == ["[1]", "[2]", "[3]"]


def test_a_following_run_whose_source_fails_stops_the_others_and_says_which_failed(spark, tmp_path, monkeypatch):
    for source, table in (("a", "users"), ("b", "orders")):
        (tmp_path / source).mkdir()
        write_records(tmp_path / source / "1.jsonl", records([change(INSERT, 100, 1, table=table)]))
    apply = BatchApplier._apply

    def failing_in_b(self, data, batch_id):
        if self.source.name == "b":
            raise OSError("the disk of b is full")
        return apply(self, data, batch_id)

    monkeypatch.setattr(BatchApplier, "_apply", failing_in_b)
    cfg = PipelineConfig(lake=str(tmp_path / "lake"), name="t", follow=True, poll_seconds=0.2, sources=[
        SourceConfig(name=source, format="canal-json", input=str(tmp_path / source)) for source in ("a", "b")])
    with pytest.raises(RuntimeError, match=r"source b failed: (?s:.*)the disk of b is full"):
        pipeline.run(cfg, spark=spark)
    assert not spark.streams.active


def test_a_run_stopped_by_its_registry_says_so_in_one_line(spark, tmp_path, monkeypatch):
    # The decoder's RegistryError is raised in an executor; Spark hands it back inside its own exception, with
    # hundreds of lines of JVM and Python traceback around it.
    import socket

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (tmp_path / "in").mkdir()
    encoder = formats.create("debezium-avro", {"registry": "memory:"})
    write_records(tmp_path / "in" / "1.jsonl", encoder.encode([change(INSERT, 100, 1)]))
    cfg = PipelineConfig(lake=str(tmp_path / "lake"), name="t", sources=[
        SourceConfig(format="debezium-avro", input=str(tmp_path / "in"),
                     options={"registry": f"http://127.0.0.1:{port}"})])
    with pytest.raises(Exception) as failed:  # whatever Spark wraps it in
        pipeline.run(cfg, spark=spark)
    said = f"schema registry http://127.0.0.1:{port} could not be reached"
    assert stopping_error(failed.value)[1].startswith(said)
    monkeypatch.setattr(pipeline, "run", lambda config, progress=None, say=None: (_ for _ in ()).throw(failed.value))
    result = CliRunner().invoke(app, ["run", "--format", "debezium-avro", "--input", str(tmp_path / "in"),
                                      "--lake", str(tmp_path / "lake"), "--option", f"registry=http://127.0.0.1:{port}"])
    assert result.exit_code == 4 and result.output.startswith(f"cdclake: stopped: {said}")
    assert result.output.count("\n") == 1


def test_batches_on_one_lake_are_applied_one_at_a_time(tmp_path):
    order: list[str] = []

    def second() -> None:
        with one_batch_at_a_time(str(tmp_path / "lake")):
            order.append("second")

    with one_batch_at_a_time(str(tmp_path / "lake")):
        waiting = threading.Thread(target=second)
        waiting.start()
        time.sleep(0.5)  # time for the thread to reach the lock
        with one_batch_at_a_time(str(tmp_path / "another lake")):
            order.append("another lake")
        order.append("first")
    waiting.join(10)
    assert order == ["another lake", "first", "second"]


def test_a_running_pipeline_compacts_the_lakes_own_tables_as_they_grow(spark, tmp_path, monkeypatch):
    monkeypatch.setattr("cdclake.lake.maintenance.COMPACT_AT_FILES", 3)
    (tmp_path / "in").mkdir()
    write_records(tmp_path / "in" / "1.jsonl", records([change(INSERT, 10 + i, i) for i in range(1, 5)]
                                                       + [change(DELETE, 20 + i, i) for i in range(1, 4)]))
    lake = tmp_path / "lake"
    cfg = PipelineConfig(lake=str(lake), name="t", sources=[
        SourceConfig(format="canal-json", input=str(tmp_path / "in"), max_records_per_batch=1)])
    assert len(pipeline.run(cfg, spark=spark).batches) == 7
    progress = DeltaTable(str(lake / "_cdclake" / "progress"))
    tombstones = DeltaTable(str(lake / "_cdclake" / "tombstones"))
    # A file a batch, compacted into one at the third: at most 3 after seven batches.
    assert len(progress.file_uris()) <= 3 and progress.to_pyarrow_table().num_rows == 7
    assert len(tombstones.file_uris()) == 1 and tombstones.to_pyarrow_table().num_rows == 3
    assert sorted(lake_rows(str(lake), "shop", "users")) == ["[4]"]


def test_key_change_moves_the_row(spark, tmp_path):
    moved = change(UPDATE, 20, 9, version=1)
    moved.before = {**moved.after, "id": 1, "name": "user 1 v0"}
    (tmp_path / "in").mkdir()
    write_records(tmp_path / "in" / "1.jsonl", records([change(INSERT, 10, 1), moved]))
    run(spark, tmp_path / "in", tmp_path / "lake")
    assert sorted(lake_rows(str(tmp_path / "lake"), "shop", "users")) == ["[9]"]


def test_ddl_add_drop_column_truncate_drop_table(spark, tmp_path):
    wide = [*COLUMNS, Column("email", "varchar(128)", nullable=True)]
    narrow = [c for c in wide if c.name != "balance"]

    def with_email(e: ChangeEvent) -> ChangeEvent:
        if e.after is not None:
            e.after["email"] = f"u{e.after['id']}@example.com"
        return e

    events = [change(INSERT, 10, 1), change(INSERT, 11, 2),
              ddl(12, "ALTER TABLE `shop`.`users` ADD COLUMN `email` varchar(128) NULL"),
              with_email(change(INSERT, 13, 3, columns=wide)),
              ddl(14, "ALTER TABLE shop.users DROP COLUMN balance"),
              change(INSERT, 15, 4, columns=narrow),
              change(INSERT, 16, 1, table="audit"), change(INSERT, 17, 2, table="audit"),
              ddl(18, "TRUNCATE TABLE shop.audit", table="audit", kind=TRUNCATE),
              change(INSERT, 19, 3, table="audit"),
              change(INSERT, 20, 1, table="tmp"), ddl(21, "DROP TABLE shop.tmp", table="tmp")]
    (tmp_path / "in").mkdir()
    write_records(tmp_path / "in" / "1.jsonl", records(events))
    run(spark, tmp_path / "in", tmp_path / "lake")
    lake = str(tmp_path / "lake")
    users = lake_rows(lake, "shop", "users")
    assert sorted(users) == ["[1]", "[2]", "[3]", "[4]"]
    assert "balance" not in users["[1]"]
    assert users["[1]"]["email"] is None and users["[3]"]["email"] == "u3@example.com"
    assert users["[4]"]["name"] == "user 4 v0"
    assert sorted(lake_rows(lake, "shop", "audit")) == ["[3]"]
    assert not (tmp_path / "lake" / "shop" / "tmp").exists()


def _non_finite_records(format_name: str) -> list[Record]:
    """Rows 1-3 inserted with NaN, +Infinity and -Infinity in a DOUBLE and a FLOAT; row 1 then updated to NaN again
    and row 2 to a plain number; as each producer writes them."""
    images = [(1, "NaN", "NaN"), (2, "Infinity", "-Infinity"), (3, "-Infinity", "Infinity"), (1, "NaN", "Infinity"),
              (2, "2.5", "0.5")]
    if format_name == "debezium-json":  # JsonConverter: Java's names as strings (JSON has no number for them)
        from tests.formats.debezium.test_json import field, message, mysql_source

        fields = [field("id", "int32", optional=False), field("d", "double"), field("f", "float")]
        key_schema = {"type": "struct", "name": "dbserver1.inventory.orders.Key", "optional": False,
                      "fields": [fields[0]]}
        out = []
        for pos, (i, d, f) in enumerate(images):
            after = {"id": i, "d": d if d.isalpha() or d[1:].isalpha() else float(d),
                     "f": f if f.isalpha() or f[1:].isalpha() else float(f)}
            value = message(fields, op="c" if pos < 3 else "u", after=after, before={**after} if pos >= 3 else None,
                            source=mysql_source(pos=1000 + pos, ts_ms=1700000000000 + pos))
            key = json.dumps({"schema": key_schema, "payload": {"id": i}}).encode()
            out.append(Record(key=key, value=value, topic="cdc", partition=0, offset=pos))
        return out
    columns = [Column("id", "bigint", key=True, nullable=False), Column("d", "double"), Column("f", "float")]
    events = [ChangeEvent(kind=ROW, op=INSERT if pos < 3 else UPDATE, database="inventory", table="orders",
                          key={"id": i}, after={"id": i, "d": float(d), "f": float(f)}, columns=columns,
                          commit_ts=(1000 + pos) << 18) for pos, (i, d, f) in enumerate(images)]
    return records(events)  # Canal (Java) writes Double.toString: "NaN", "Infinity", "-Infinity"


@pytest.mark.parametrize("format_name", ["debezium-json", "canal-json"])
def test_nan_and_the_infinities_reach_the_lake_as_themselves(spark, tmp_path, batches_of, format_name):
    (tmp_path / "in").mkdir()
    write_records(tmp_path / "in" / "0001.jsonl", _non_finite_records(format_name))
    summary = run(spark, tmp_path / "in", tmp_path / "lake", format=format_name)
    assert summary.total("dead_letters") == 0
    rows = lake_rows(str(tmp_path / "lake"), "inventory", "orders")
    assert math.isnan(rows["[1]"]["d"]) and rows["[1]"]["f"] == math.inf
    assert rows["[2]"] == {"id": 2, "d": 2.5, "f": 0.5}
    assert rows["[3]"] == {"id": 3, "d": -math.inf, "f": math.inf}


def test_bad_records_become_dead_letters_and_counts_add_up(spark, tmp_path, batches_of):
    good = records([change(INSERT, 10, 1), change(INSERT, 11, 2)])
    bad = [Record(value=b'{"truncated": ', topic="cdc", offset=2),
           Record(value=b'{"type": "NOPE", "isDdl": false, "database": "shop", "table": "users", "data": []}',
                  topic="cdc", offset=3)]
    (tmp_path / "in").mkdir()
    write_records(tmp_path / "in" / "1.jsonl", good + bad)
    # A message where a captured record belongs (a file mixed up by hand): no change of the source's.
    misplaced = records([change(INSERT, 12, 9)])[0].value
    with open(tmp_path / "in" / "1.jsonl", "ab") as captured:
        captured.write(misplaced + b"\n")
    (tmp_path / "in" / "2.txt").write_bytes(b"not json at all\n")
    summary = run(spark, tmp_path / "in", tmp_path / "lake")
    assert summary.total("records") == 6
    assert summary.total("failed") == 4 and summary.total("dead_letters") == 4
    assert summary.total("records") == len(good) + summary.total("failed") + summary.total("skipped")
    dead = DeltaTable(str(tmp_path / "lake" / "_cdclake" / "dead_letters")).to_pyarrow_table().to_pylist()
    assert sorted((d["topic"], d["offset"]) for d in dead) == [("1.jsonl", 4), ("2.txt", 0), ("cdc", 2), ("cdc", 3)]
    assert all(d["reason"] and d["format"] == "canal-json" for d in dead)
    (unreadable,) = [d for d in dead if d["topic"] == "1.jsonl"]
    assert unreadable["value"] == misplaced
    assert unreadable["reason"].startswith(f"{tmp_path / 'in' / '1.jsonl'}:5: not a captured record")
    assert {d["value"] for d in dead} >= {b'{"truncated": ', b"not json at all"}
    assert sorted(lake_rows(str(tmp_path / "lake"), "shop", "users")) == ["[1]", "[2]"]
    # What `cdclake status` says of it: the table's rows and last applied change, and the dead letters by reason.
    (tmp_path / "lake" / "notes.txt").write_text("a file beside the databases is no table")
    (tmp_path / "lake" / "scratch" / "empty").mkdir(parents=True)
    (tmp_path / "lake" / "scratch" / "notes.txt").write_text("nor is a file beside the tables")
    status = CliRunner().invoke(app, ["status", str(tmp_path / "lake")])
    assert status.exit_code == 0, status.output
    lines = status.output.splitlines()
    (table,) = [line.split() for line in lines if line.startswith("shop.users")]
    assert table[1:3] == ["2", str(11 << 18)] and table[4].startswith(dt.date.today().isoformat()[:4])
    assert not any(line.startswith(("scratch", "notes")) for line in lines)
    reasons = {line.split(maxsplit=1)[1]: int(line.split()[0]) for line in lines[lines.index("dead letters: 4") + 1:]}
    assert reasons == {"invalid JSON": 2, "unknown Canal event type 'NOPE'": 1, "not a captured record": 1}
    # `cdclake dead-letters` lists them, and writes them out as input that a run reads again.
    listed = CliRunner().invoke(app, ["dead-letters", str(tmp_path / "lake"), "--reason", "JSON", "--limit", "1",
                                      "--write", str(tmp_path / "replay" / "dead.jsonl")])
    assert listed.exit_code == 2 and "no such file or directory" in listed.output.lower()  # no such folder
    (tmp_path / "replay").mkdir()
    listed = CliRunner().invoke(app, ["dead-letters", str(tmp_path / "lake"), "--reason", "JSON", "--limit", "1",
                                      "--write", str(tmp_path / "replay" / "dead.jsonl")])
    assert listed.exit_code == 0, listed.output
    (line,) = listed.stdout.splitlines()
    assert line.split()[:5] == ["2.txt:0:0", "canal-json", "pipeline", "t.main", "batch"]
    assert line.endswith("invalid JSON: JSON is malformed: invalid character (byte 4)")
    assert "2 dead letters (1 listed; --limit 0 lists all)" in listed.output and "wrote 2 records" in listed.output
    replayed = run(spark, tmp_path / "replay", tmp_path / "lake", name="replay")
    assert (replayed.total("records"), replayed.total("failed")) == (2, 2)
    again = DeltaTable(str(tmp_path / "lake" / "_cdclake" / "dead_letters")).to_pyarrow_table().to_pylist()
    assert sorted((d["topic"], d["offset"], d["value"]) for d in again if d["pipeline"] == "replay.main") == sorted(
        (d["topic"], d["offset"], d["value"]) for d in dead if "JSON" in d["reason"])
    listed = CliRunner().invoke(app, ["dead-letters", str(tmp_path / "lake"), "--pipeline", "replay", "--limit", "0"])
    assert [line.split()[3] for line in listed.stdout.splitlines()] == ["replay.main"] * 2
    assert "2 dead letters" in listed.output and "listed" not in listed.output


def test_a_shareplex_update_whose_halves_spark_hands_to_python_apart_is_applied_whole(spark, tmp_path, monkeypatch):
    # Spark hands a task's records to Python in Arrow batches: of one record each here, so that an UPDATE BEFORE
    # and its UPDATE AFTER (which changes the key) come in two.
    monkeypatch.setattr(SourceRead, "decodes", property(lambda self: False))

    def half(op: str, seq: int, data: dict) -> bytes:
        return json.dumps({"meta": {"op": op, "table": "O.T", "trans": "7", "seq": seq, "size": 4, "scn": "100",
                                    "time": "2020-01-01T00:00:00"}, "data": data}).encode()

    (tmp_path / "in").mkdir()
    write_records(tmp_path / "in" / "1.jsonl", [Record(value=v, topic="sp", offset=i) for i, v in enumerate([
        half("ins", 1, {"ID": "1", "V": "a"}), half("ins", 2, {"ID": "5", "V": "e"}),
        half("updb", 3, {"ID": "1", "V": "a"}), half("upda", 4, {"ID": "2", "V": "b"})])])
    setting = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(setting)
    spark.conf.set(setting, "1")
    try:
        summary = run(spark, tmp_path / "in", tmp_path / "lake", format="shareplex-json",
                      options={"key-columns": "ID"})
    finally:
        spark.conf.set(setting, before)
    assert (summary.total("records"), summary.total("dead_letters"), summary.total("skipped")) == (4, 0, 1)
    assert {k: r["V"] for k, r in lake_rows(str(tmp_path / "lake"), "O", "T").items()} == {'["2"]': "b", '["5"]': "e"}


def test_a_run_leaves_nothing_cached_in_spark(spark, tmp_path):
    """Each batch caches its changelog and net changes while it plans and applies them; a pipeline that runs for
    days must free them batch by batch, or Spark's cache list and storage memory grow with every batch."""
    events = [change(INSERT, 1000 + i, i) for i in range(1, 40)] + [change(DELETE, 2000 + i, i) for i in range(1, 9)]
    (tmp_path / "in").mkdir()
    write_records(tmp_path / "in" / "0001.jsonl", records(events))
    spark.catalog.clearCache()
    summary = run(spark, tmp_path / "in", tmp_path / "lake", max_records_per_batch=10)
    assert len(summary.batches) == 5 and sorted(lake_rows(str(tmp_path / "lake"), "shop", "users")) == sorted(
        f"[{i}]" for i in range(9, 40))
    # PySpark has no public listing of cached plans: Spark's own cache manager answers.
    assert spark._jsparkSession.sharedState().cacheManager().isEmpty()


def test_a_run_that_starts_its_session_loads_its_formats_into_the_python_workers(spark, tmp_path):
    """A run that starts its own session (as ``cdclake run`` does) has the Python workers import cdclake's sources and
    build the pipeline's formats while its query starts; the later tasks find them there. A format and options no
    other test uses show that this run loaded them (its source has no input to decode). Here the run's session is
    the tests' own, already running."""
    import uuid

    events = [change(INSERT, 1000 + i, i) for i in range(1, 6)]
    (tmp_path / "in").mkdir()
    write_records(tmp_path / "in" / "0001.jsonl", records(events))
    marker = f"*=id_{uuid.uuid4().hex}"
    config = PipelineConfig(lake=str(tmp_path / "lake"), name="t", sources=[
        SourceConfig(format="canal-json", options={"flavour": "tidb"}, input=str(tmp_path / "in")),
        SourceConfig(name="other", format="shareplex-json", options={"key-columns": marker},
                     input=str(tmp_path / "none"))])
    (tmp_path / "none").mkdir()
    summary = pipeline.run(config)
    assert sum(b.events for b in summary.batches) == 5
    assert sorted(lake_rows(str(tmp_path / "lake"), "shop", "users")) == [f"[{i}]" for i in range(1, 6)]

    def loaded(batches):
        import sys

        import pyarrow as pa

        from cdclake.spark.changelog import _formats

        ready = ("shareplex-json", (("key-columns", marker),)) in _formats and "cdclake.spark.sources" in sys.modules
        for batch in batches:
            yield pa.RecordBatch.from_pydict({"ready": [ready] * batch.num_rows})

    # Spark hands out its idle workers oldest first, and other tests may have left more than two: enough tasks
    # to meet each.
    assert any(r.ready for r in spark.range(16, numPartitions=16).mapInArrow(loaded, "ready boolean").collect())
    assert spark.sparkContext.statusTracker().getJobIdsForGroup(pipeline.LOADING_GROUP)  # the run's loading job


def test_a_run_that_ends_before_its_workers_are_loaded_waits_for_the_loading(spark, tmp_path, monkeypatch):
    """A run of an empty input ends in about two seconds, before the loading job of its own session does. Cancelling
    that job killed its tasks mid-write, and their Python workers printed a BrokenPipeError traceback after the run's
    summary; the run now waits for it. Here the loading lasts until the run's queries have ended."""
    ended = tmp_path / "queries-ended"

    def loading_until_the_queries_end(session, in_use):
        def wait(batches, ended=str(ended)):
            import os
            import time

            for _ in range(600):
                if os.path.exists(ended):
                    break
                time.sleep(0.1)
            yield from batches

        # One task: the run's own tasks need the other core.
        session.range(1, numPartitions=1).mapInArrow(wait, "id long").collect()

    def run_sources_then_say_so(*args, **kwargs):
        try:
            return run_sources(*args, **kwargs)
        finally:
            ended.touch()

    run_sources = pipeline._run_sources
    monkeypatch.setattr(pipeline, "_run_sources", run_sources_then_say_so)
    monkeypatch.setattr(pipeline.CL, "load_python_workers", loading_until_the_queries_end)
    tracker = spark.sparkContext.statusTracker()
    earlier = set(tracker.getJobIdsForGroup(pipeline.LOADING_GROUP))
    (tmp_path / "in").mkdir()
    summary = pipeline.run(PipelineConfig(lake=str(tmp_path / "lake"), name="t", sources=[
        SourceConfig(format="canal-json", input=str(tmp_path / "in"))]))
    assert summary.total("records") == 0
    jobs = set(tracker.getJobIdsForGroup(pipeline.LOADING_GROUP)) - earlier
    assert jobs and [tracker.getJobInfo(job).status for job in jobs] == ["SUCCEEDED"] * len(jobs)


def test_maintenance_leaves_the_lake_equal_and_a_rerun_applies_nothing_twice(spark, tmp_path):
    events = [change(INSERT, 1000 + i, i) for i in range(1, 40)]
    events += [change(UPDATE, 2000 + i, i, version=1, before_version=0) for i in range(1, 40, 2)]
    events += [change(DELETE, 3000 + i, i, version=1) for i in range(1, 40, 5)]
    recs = records(events)
    recs.insert(7, Record(value=b"garbage", topic="cdc", offset=999))
    (tmp_path / "in").mkdir()
    write_records(tmp_path / "in" / "0001.jsonl", recs)
    lake = tmp_path / "lake"
    run(spark, tmp_path / "in", lake, max_records_per_batch=12)
    before = lake_rows(str(lake), "shop", "users")

    def files_on_disk(path: Path) -> int:
        return sum(1 for _ in path.glob("**/*.parquet"))

    tables = [lake / "shop" / "users", *(p.parent for p in (lake / "_cdclake").glob("*/_delta_log"))]
    markers = [DeltaTable(str(table)).transaction_version("cdclake:t.main") for table in tables]
    assert files_on_disk(lake / "_cdclake" / "progress") > 1 and all(markers)
    result = CliRunner().invoke(app, ["maintain", str(lake), "--retention-hours", "0"])
    assert result.exit_code == 0, result.output
    assert "_cdclake.progress:" in result.output and "shop.users:" in result.output
    for table in tables:
        assert files_on_disk(table) == len(DeltaTable(str(table)).file_uris()), table
    # The app-transaction markers that make a replayed batch harmless survive the maintenance commits.
    assert [DeltaTable(str(table)).transaction_version("cdclake:t.main") for table in tables] == markers
    assert files_on_disk(lake / "_cdclake" / "progress") == 1
    assert lake_rows(str(lake), "shop", "users") == before
    assert DeltaTable(str(lake / "_cdclake" / "dead_letters")).to_pyarrow_table()["value"].to_pylist() == [b"garbage"]

    # The pipeline goes on from where it was: new input applies once, the old is not read again.
    write_records(tmp_path / "in" / "0002.jsonl", records([change(DELETE, 4000, 2, version=1)], start_offset=1000))
    again = run(spark, tmp_path / "in", lake)
    assert again.total("records") == 1 and again.total("deleted") == 1
    assert sorted(lake_rows(str(lake), "shop", "users")) == sorted(k for k in before if k != "[2]")
    assert DeltaTable(str(lake / "_cdclake" / "dead_letters")).to_pyarrow_table().num_rows == 1


def test_crash_at_every_point_of_a_batch_is_applied_exactly_once(tmp_path):
    events = [change(INSERT, 100 + i, i) for i in range(1, 30)]
    events += [change(UPDATE, 200 + i, i, version=1, before_version=0) for i in range(1, 30, 2)]
    events += [change(DELETE, 300 + i, i, version=1) for i in range(1, 30, 3)]
    recs = records(events)
    recs.insert(17, Record(value=b"garbage", topic="cdc", offset=999))  # in the first batch, which every crash hits
    (tmp_path / "in").mkdir()
    write_records(tmp_path / "in" / "1.jsonl", recs)
    crash_at_every_point_then_finish(
        [sys.executable, "-m", "cdclake", "run", "--format", "canal-json", "--input", str(tmp_path / "in"),
         "--lake", str(tmp_path / "lake"), "--max-records-per-batch", "40",
         "--max-dead-letter-ratio", "1"])  # the garbage record's dead letter, not an exit 1
    rows = lake_rows(str(tmp_path / "lake"), "shop", "users")
    expected = {i for i in range(1, 30)} - set(range(1, 30, 3))
    assert sorted(rows) == sorted(f"[{i}]" for i in expected)
    for i in expected:
        assert rows[f"[{i}]"]["name"] == f"user {i} v{1 if i % 2 else 0}"
    dead = DeltaTable(str(tmp_path / "lake" / "_cdclake" / "dead_letters")).to_pyarrow_table()
    assert dead.num_rows == 1  # the garbage record, recorded once although its batch ran five times
    progress = DeltaTable(str(tmp_path / "lake" / "_cdclake" / "progress")).to_pyarrow_table().to_pylist()
    assert sorted(p["batch"] for p in progress) == list(range(len(progress)))  # each batch recorded once
    assert sum(p["records"] for p in progress) == len(recs)


def test_a_crash_between_the_clauses_of_a_statement_applies_each_clause_once(tmp_path):
    """Each clause of a DDL statement is a commit of its own, with a version of its own: with one version for the
    statement, a replay took the second clause for applied, and so did the first run (only the first clause of
    every statement reached the lake). The first crash also falls after a TRUNCATE was applied and before the
    batch records its tombstones: the replay records the table's tombstone, once."""
    narrow = [c for c in COLUMNS if c.name not in ("name", "balance")] + [Column("email", "varchar(128)")]
    last = change(INSERT, 14, 3, columns=narrow)
    assert last.after is not None
    last.after["email"] = "u3@example.com"
    events = [change(INSERT, 10, 1, table="audit"), change(INSERT, 11, 2, table="audit"),
              ddl(12, "TRUNCATE TABLE shop.audit", table="audit", kind=TRUNCATE), change(INSERT, 13, 3, table="audit"),
              change(INSERT, 10, 1), change(INSERT, 11, 2),
              ddl(12, "ALTER TABLE shop.users DROP COLUMN name, ADD COLUMN email varchar(128), DROP COLUMN balance"),
              last]
    (tmp_path / "in").mkdir()
    write_records(tmp_path / "in" / "1.jsonl", records(events))
    lake = tmp_path / "lake"
    crash_at_every_point_then_finish(
        [sys.executable, "-m", "cdclake", "run", "--format", "canal-json", "--input", str(tmp_path / "in"),
         "--lake", str(lake)], points=["between-clauses", *CRASH_POINTS])
    users = lake_rows(str(lake), "shop", "users")
    assert sorted(users) == ["[1]", "[2]", "[3]"]
    assert "name" not in users["[1]"] and "balance" not in users["[1]"]
    assert users["[1]"]["email"] is None and users["[3]"]["email"] == "u3@example.com"
    assert sorted(lake_rows(str(lake), "shop", "audit")) == ["[3]"]
    buried = DeltaTable(str(lake / "_cdclake" / "tombstones")).to_pyarrow_table().to_pylist()
    assert [(r["table"], r["_cdc_key"]) for r in buried] == [("audit", TABLE_TOMBSTONE)]


def test_a_rename_seen_in_one_partition_only_moves_the_rows_before_it(spark, tmp_path, batches_of):
    """Each task reduces its keys' changes; a RENAME that only another task saw falls between two changes of one
    key here, so the batch is planned again from every change."""
    rows = records([change(INSERT, 10, 1, version=1), change(INSERT, 30, 1, version=2)], partition=1)
    (tmp_path / "in").mkdir()
    write_records(tmp_path / "in" / "0.jsonl", records([ddl(20, "RENAME TABLE shop.users TO shop.archive")]))
    write_records(tmp_path / "in" / "1.jsonl", rows)
    summary = run(spark, tmp_path / "in", tmp_path / "lake")
    assert summary.total("records") == 3 and summary.total("events") == 3
    assert lake_rows(str(tmp_path / "lake"), "shop", "archive")["[1]"]["name"] == "user 1 v1"
    assert lake_rows(str(tmp_path / "lake"), "shop", "users")["[1]"]["name"] == "user 1 v2"


def test_renames_and_drops_change_the_tables_their_statements_name(spark, tmp_path):
    """Canal and TiCDC name a RENAME's message by the new table; a Canal message holds a whole statement, which may
    rename or drop several tables."""
    (tmp_path / "in").mkdir()
    write_records(tmp_path / "in" / "1.jsonl", records([change(INSERT, 10, 1), change(INSERT, 11, 2, table="audit"),
                                                        change(INSERT, 12, 3, table="orders"),
                                                        change(INSERT, 13, 5, table="carts"),
                                                        change(INSERT, 14, 6, table="extra")]))
    run(spark, tmp_path / "in", tmp_path / "lake")
    later = records([ddl(20, "RENAME TABLE shop.users TO shop.people, audit TO `audit log`"),
                     ddl(21, "DROP TABLE IF EXISTS shop.orders, carts, never_loaded", table="orders"),
                     change(INSERT, 22, 4, table="people")], start_offset=4)
    assert json.loads(later[0].value)["table"] == "people"  # as the producers write it
    write_records(tmp_path / "in" / "2.jsonl", later)
    summary = run(spark, tmp_path / "in", tmp_path / "lake")
    assert not summary.stopped
    lake = tmp_path / "lake"
    assert sorted(lake_rows(str(lake), "shop", "people")) == ["[1]", "[4]"]
    assert sorted(lake_rows(str(lake), "shop", "audit log")) == ["[2]"]
    assert not any((lake / "shop" / gone).exists() for gone in ("users", "audit", "orders", "carts", "never_loaded"))
    assert sorted(os.listdir(lake / "shop")) == ["audit~20log", "extra", "people"]  # names as lakepaths maps them
    # A rename onto a table the lake has stops the renamed table, and the record of its statement (which the event
    # names by the statement's first table) is a dead letter of it.
    write_records(tmp_path / "in" / "3.jsonl", records(
        [ddl(30, "RENAME TABLE shop.people TO shop.humans, shop.extra TO shop.`audit log`")], start_offset=8))
    assert run(spark, tmp_path / "in", tmp_path / "lake").stopped == {
        "shop.extra": "RENAME TABLE target shop.audit log already exists in the lake"}
    assert sorted(lake_rows(str(lake), "shop", "humans")) == ["[1]", "[4]"]
    (dead,) = DeltaTable(str(lake / "_cdclake" / "dead_letters")).to_pyarrow_table().to_pylist()
    assert dead["offset"] == 8 and dead["reason"].startswith("table shop.extra stopped: RENAME TABLE target")


@pytest.mark.parametrize("batches", [1, 2])
def test_the_swap_that_online_schema_change_tools_end_with_moves_every_table(spark, tmp_path, batches):
    """gh-ost and pt-online-schema-change end with ``RENAME TABLE t TO _t_del, _t_gho TO t`` (Canal sends the
    statement in one message, TiCDC as two), and rows of the new t follow, in the same batch or the next."""
    (tmp_path / "in").mkdir()
    write_records(tmp_path / "in" / "1.jsonl", records(
        [change(INSERT, 10, 1), change(INSERT, 11, 1, table="_users_gho"), change(INSERT, 12, 2, table="_users_gho")]))
    run(spark, tmp_path / "in", tmp_path / "lake")
    swap = [ddl(20, "RENAME TABLE shop.users TO shop._users_del, shop._users_gho TO shop.users"),
            change(UPDATE, 21, 2, version=1, before_version=0)]
    for index in range(batches):
        part = swap if batches == 1 else swap[index:index + 1]
        write_records(tmp_path / "in" / f"{index + 2}.jsonl", records(part, start_offset=3 + index))
        assert not run(spark, tmp_path / "in", tmp_path / "lake").stopped
    lake = tmp_path / "lake"
    users = lake_rows(str(lake), "shop", "users")
    assert sorted(users) == ["[1]", "[2]"]
    assert users["[1]"]["name"] == "user 1 v0" and users["[2]"]["name"] == "user 2 v1"
    assert sorted(lake_rows(str(lake), "shop", "_users_del")) == ["[1]"]
    assert sorted(os.listdir(lake / "shop")) == ["users", "~5fusers_del"]


def test_changes_of_a_partition_read_behind_a_table_rename_reach_the_renamed_table(spark, tmp_path):
    """Canal and DTS send DDL to the first partition only: another partition's changes from before a RENAME TABLE
    may arrive batches after it, under the old name. They go to the new table (not to a table the old name would
    make anew), a delete before the rename still buries an older change of its key, and a later table of the old
    name keeps its own changes."""
    (tmp_path / "in").mkdir()
    write_records(tmp_path / "in" / "0.jsonl", records([
        change(INSERT, 10, 1), change(INSERT, 11, 2), change(DELETE, 13, 2),
        ddl(20, "RENAME TABLE shop.users TO shop.people"), change(INSERT, 21, 3, table="people")]))
    run(spark, tmp_path / "in", tmp_path / "lake")
    write_records(tmp_path / "in" / "1.jsonl", records([
        change(INSERT, 12, 2, version=1), change(UPDATE, 15, 1, version=1, before_version=0), change(INSERT, 16, 4),
        change(INSERT, 25, 1, version=7)], partition=1))  # the last after the rename: the new users table's own
    summary = run(spark, tmp_path / "in", tmp_path / "lake")
    assert not summary.stopped and summary.total("records") == 4
    lake = tmp_path / "lake"
    people = lake_rows(str(lake), "shop", "people")
    assert sorted(people) == ["[1]", "[3]", "[4]"] and people["[1]"]["name"] == "user 1 v1"
    users = lake_rows(str(lake), "shop", "users")
    assert sorted(users) == ["[1]"] and users["[1]"]["name"] == "user 1 v7"


def test_a_rename_onto_the_rows_a_partition_read_ahead_brought_merges_the_two(spark, tmp_path):
    """A partition read ahead of the one with a RENAME TABLE brought, in an earlier batch, changes of the new name:
    the lake has that table when the rename comes. The renamed table's rows join it, each key keeping its latest
    change, and a key deleted after the rename stays deleted. A table with older rows than the rename is another
    table, and the rename onto it still stops (see test_renames_and_drops_change_the_tables_their_statements_name)."""
    (tmp_path / "in").mkdir()
    write_records(tmp_path / "in" / "0.jsonl", records([change(INSERT, 10, 1), change(INSERT, 11, 2),
                                                        change(INSERT, 12, 5)]))
    write_records(tmp_path / "in" / "1.jsonl", records([
        change(INSERT, 21, 3, table="people"), change(UPDATE, 22, 1, version=1, before_version=0, table="people"),
        change(DELETE, 23, 2, table="people")], partition=1))
    run(spark, tmp_path / "in", tmp_path / "lake")
    lake = tmp_path / "lake"
    assert sorted(lake_rows(str(lake), "shop", "people")) == ["[1]", "[3]"]
    write_records(tmp_path / "in" / "2.jsonl", records([ddl(20, "RENAME TABLE shop.users TO shop.people",
                                                            table="people"),
                                                        change(UPDATE, 24, 3, version=2, before_version=0,
                                                               table="people")], start_offset=3))
    summary = run(spark, tmp_path / "in", tmp_path / "lake")
    assert not summary.stopped and summary.total("dead_letters") == 0
    people = lake_rows(str(lake), "shop", "people")
    assert sorted(people) == ["[1]", "[3]", "[5]"]
    assert [people[k]["name"] for k in ("[1]", "[3]", "[5]")] == ["user 1 v1", "user 3 v2", "user 5 v0"]
    assert not (lake / "shop" / "users").exists()
    assert DeltaTable(str(lake / "shop" / "people")).metadata().configuration["cdclake.renamedFrom"] == "shop.users"
    # A late change of the old name from before the rename goes to the merged table, and is buried where it should.
    write_records(tmp_path / "in" / "3.jsonl", records([change(UPDATE, 13, 2, version=3, before_version=0),
                                                        change(UPDATE, 14, 5, version=3, before_version=0)],
                                                       start_offset=3, partition=1))
    assert not run(spark, tmp_path / "in", tmp_path / "lake").stopped
    people = lake_rows(str(lake), "shop", "people")
    assert sorted(people) == ["[1]", "[3]", "[5]"] and people["[5]"]["name"] == "user 5 v3"


def test_a_crash_at_every_point_of_a_batch_that_renames_tables_applies_each_rename_once(tmp_path):
    """A replay of a batch after its renames were applied found the renamed tables gone: their rows before the rename
    made them anew, and the rename then stopped on its target. A rename now marks the table before it moves it, and a
    replay that finds the mark on the target skips what came before it."""
    events = [change(INSERT, 10, 1), change(INSERT, 11, 2, table="_users_gho"),
              ddl(12, "RENAME TABLE shop.users TO shop._users_del"),
              change(UPDATE, 13, 2, version=1, before_version=0, table="_users_gho"),
              ddl(14, "RENAME TABLE shop._users_gho TO shop.users"), change(INSERT, 15, 3)]
    (tmp_path / "in").mkdir()
    write_records(tmp_path / "in" / "1.jsonl", records(events))
    lake = tmp_path / "lake"
    crash_at_every_point_then_finish(
        [sys.executable, "-m", "cdclake", "run", "--format", "canal-json", "--input", str(tmp_path / "in"),
         "--lake", str(lake)], points=["before-rename", "after-rename", *CRASH_POINTS])
    users = lake_rows(str(lake), "shop", "users")
    assert sorted(users) == ["[2]", "[3]"] and users["[2]"]["name"] == "user 2 v1"
    assert sorted(lake_rows(str(lake), "shop", "_users_del")) == ["[1]"]
    assert not (lake / "shop" / "_users_gho").exists() and not (lake / "_cdclake" / "dead_letters").exists()


def test_a_crash_at_every_point_of_a_rename_onto_rows_read_ahead_merges_them_once(spark, tmp_path):
    (tmp_path / "in").mkdir()
    write_records(tmp_path / "in" / "0.jsonl", records([change(INSERT, 10, 1), change(INSERT, 11, 2)]))
    write_records(tmp_path / "in" / "1.jsonl", records([
        change(INSERT, 21, 3, table="people"), change(DELETE, 23, 2, table="people")], partition=1))
    lake = tmp_path / "lake"
    run(spark, tmp_path / "in", lake, name="default")
    write_records(tmp_path / "in" / "2.jsonl", records([
        ddl(20, "RENAME TABLE shop.users TO shop.people", table="people"),
        change(UPDATE, 24, 1, version=2, before_version=0, table="people")], start_offset=2))
    crash_at_every_point_then_finish(
        [sys.executable, "-m", "cdclake", "run", "--format", "canal-json", "--input", str(tmp_path / "in"),
         "--lake", str(lake)], points=["before-rename", "during-rename-merge", "after-rename-merge", "after-rename",
                                       *CRASH_POINTS])
    people = lake_rows(str(lake), "shop", "people")
    assert sorted(people) == ["[1]", "[3]"] and people["[1]"]["name"] == "user 1 v2"
    assert not (lake / "shop" / "users").exists() and not (lake / "_cdclake" / "dead_letters").exists()
    renames = DeltaTable(str(lake / "_cdclake" / "renames")).to_pyarrow_table().to_pylist()
    assert [(r["table"], r["new_table"]) for r in renames] == [("users", "people")]


def test_rows_of_a_partition_read_behind_a_rename_land_under_the_new_name(spark, tmp_path, caplog):
    """TiCDC's Canal-JSON sends DDL to partition 0 only. Partition 1 is read behind it here: its rows written before
    the rename arrive in the next run, under the old name. They update the renamed column, not a revived old one."""
    renamed = [Column("full_name", "varchar(64)") if c.name == "name" else c for c in COLUMNS]

    def under_new_name(event: ChangeEvent) -> ChangeEvent:
        assert event.after is not None
        event.after["full_name"] = event.after.pop("name", None) or f"user {event.key['id']} renamed"
        return event

    (tmp_path / "in").mkdir()
    write_records(tmp_path / "in" / "0.jsonl", records([
        change(INSERT, 10, 1), ddl(20, "ALTER TABLE shop.users RENAME COLUMN name TO full_name"),
        under_new_name(change(INSERT, 30, 2, columns=renamed))]))
    write_records(tmp_path / "in" / "1.jsonl", records([change(INSERT, 12, 5)], partition=1))
    with caplog.at_level(logging.INFO, logger="cdclake.pipeline.batch"):
        run(spark, tmp_path / "in", tmp_path / "lake")
    assert "batch 0 of main: shop.users: renamed column name to full_name" in caplog.text  # what the DDL did, said
    write_records(tmp_path / "in" / "1b.jsonl", records(
        [change(UPDATE, 15, 5, version=1, before_version=0), change(UPDATE, 16, 1, version=2, before_version=0)],
        start_offset=1, partition=1))
    summary = run(spark, tmp_path / "in", tmp_path / "lake")
    assert summary.total("records") == 2 and not summary.stopped
    rows = lake_rows(str(tmp_path / "lake"), "shop", "users")
    assert all("name" not in row for row in rows.values())
    assert {key: row["full_name"] for key, row in rows.items()} == {
        "[1]": "user 1 v2", "[2]": "user 2 renamed", "[5]": "user 5 v1"}


def test_a_table_that_cannot_go_on_stops_alone_and_every_record_of_it_is_a_dead_letter(spark, tmp_path, batches_of):
    (tmp_path / "in").mkdir()
    write_records(tmp_path / "in" / "1.jsonl", records([change(INSERT, 10, 1), change(INSERT, 11, 1, table="audit")]))
    run(spark, tmp_path / "in", tmp_path / "lake")
    # A swap of column names is not applied to lake tables: users stops, before either rename; audit goes on. Three
    # updates of one key, which a reduction would fold into one change, each stay accounted for.
    later = [ddl(20, "ALTER TABLE shop.users RENAME COLUMN name TO balance, RENAME COLUMN balance TO name"),
             *[change(UPDATE, 21 + v, 1, version=v + 1, before_version=v) for v in range(3)],
             change(INSERT, 30, 2, table="audit")]
    later_records = records(later, start_offset=2)
    for record in later_records:  # a dead letter keeps them, for its replay
        record.headers = [("h", b"\x00%d" % record.offset), ("h", None)]
        record.timestamp = 1_700_000_000_000 + record.offset
    write_records(tmp_path / "in" / "2.jsonl", later_records)
    summary = run(spark, tmp_path / "in", tmp_path / "lake")
    (stopped,) = [b.stopped for b in summary.batches if b.stopped]
    assert stopped["shop.users"] == ("renaming column name to balance in the statement that also renames or drops "
                                     "balance is not applied to lake tables")
    lake = tmp_path / "lake"
    assert lake_rows(str(lake), "shop", "users")["[1]"]["name"] == "user 1 v0"
    assert sorted(lake_rows(str(lake), "shop", "audit")) == ["[1]", "[2]"]
    dead = DeltaTable(str(lake / "_cdclake" / "dead_letters")).to_pyarrow_table().to_pylist()
    assert sorted(d["offset"] for d in dead) == [2, 3, 4, 5]
    assert all("table shop.users stopped" in d["reason"] for d in dead)
    assert sorted((d["offset"], d["headers"], d["timestamp"].timestamp()) for d in dead) == [
        (o, [{"key": "h", "value": b"\x00%d" % o}, {"key": "h", "value": None}], 1_700_000_000 + o / 1000)
        for o in (2, 3, 4, 5)]
    assert summary.stopped == stopped
    # It stays stopped, also past a batch that did not read it: a later batch's changes of it are dead letters too.
    write_records(tmp_path / "in" / "3.jsonl", records([change(INSERT, 35, 3, table="audit")], start_offset=6))
    assert run(spark, tmp_path / "in", tmp_path / "lake").stopped == stopped
    write_records(tmp_path / "in" / "4.jsonl", records([change(UPDATE, 40, 1, version=9, before_version=3),
                                                        change(UPDATE, 41, 1, version=10, before_version=9)],
                                                       start_offset=7))
    assert run(spark, tmp_path / "in", tmp_path / "lake").stopped == stopped
    dead = DeltaTable(str(lake / "_cdclake" / "dead_letters")).to_pyarrow_table().to_pylist()
    assert sorted(d["offset"] for d in dead) == [2, 3, 4, 5, 7, 8]
    assert lake_rows(str(lake), "shop", "users")["[1]"]["name"] == "user 1 v0"
    assert sorted(lake_rows(str(lake), "shop", "audit")) == ["[1]", "[2]", "[3]"]


def test_a_later_batch_with_shorter_values_keeps_the_wider_lake_type(spark, tmp_path):
    # TiCDC's canal-json states no DECIMAL precision: each batch infers it from its values.
    (tmp_path / "in").mkdir()
    write_records(tmp_path / "in" / "1.jsonl", records([change(INSERT, 10, 90_000)]))
    run(spark, tmp_path / "in", tmp_path / "lake")
    write_records(tmp_path / "in" / "2.jsonl", records([change(INSERT, 20, 1)], start_offset=1))
    summary = run(spark, tmp_path / "in", tmp_path / "lake")
    assert not any(b.stopped for b in summary.batches)
    rows = lake_rows(str(tmp_path / "lake"), "shop", "users")
    assert rows["[1]"]["balance"] == Decimal("100.1234")
    assert rows["[90000]"]["balance"] == Decimal("9000000.1234")


def _wait_for(check, timeout_s: float = 180.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"not reached within {timeout_s:.0f}s")


def _rows_now(lake: Path) -> dict[str, dict]:
    path = lake / "shop" / "users"
    return lake_rows(str(lake), "shop", "users") if DeltaTable.is_deltatable(str(path)) else {}


def test_follow_applies_files_as_they_grow_and_never_reads_a_half_written_line(tmp_path):
    inserts = records([change(INSERT, 100 + i, i) for i in range(1, 11)])
    changes = records([change(UPDATE, 200 + i, i, version=1, before_version=0) for i in range(1, 11, 2)]
                      + [change(DELETE, 300 + i, i) for i in (2, 4)], start_offset=len(inserts))
    (tmp_path / "in").mkdir()
    first = tmp_path / "in" / "1.jsonl"
    write_records(first, inserts)
    whole = first.read_bytes()
    cut = whole.rstrip(b"\n").rfind(b"\n") + 1 + 40  # the last record's line, half written
    first.write_bytes(whole[:cut])
    lake = tmp_path / "lake"
    process = subprocess.Popen([sys.executable, "-m", "cdclake", "run", "--format", "canal-json", "--input",
                                str(tmp_path / "in"), "--lake", str(lake), "--follow"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        _wait_for(lambda: len(_rows_now(lake)) == 9)
        time.sleep(3)  # a few more polls: the half line must still not be read
        assert sorted(_rows_now(lake)) == [f"[{i}]" for i in range(1, 10)]
        assert not DeltaTable.is_deltatable(str(lake / "_cdclake" / "dead_letters")) or not DeltaTable(
            str(lake / "_cdclake" / "dead_letters")).to_pyarrow_table().num_rows
        with open(first, "ab") as handle:
            handle.write(whole[cut:])
        write_records(tmp_path / "in" / "2.jsonl", changes)
        expected = {f"[{i}]": f"user {i} v{i % 2}" for i in range(1, 11) if i not in (2, 4)}
        _wait_for(lambda: {k: r["name"] for k, r in _rows_now(lake).items()} == expected)
        process.send_signal(signal.SIGINT)  # Ctrl-C: how a following run ends
        output = process.communicate(timeout=120)[0].decode(errors="replace")
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, output
    assert "stopping after the batches being applied (SIGINT)" in output and "\nstopped: " in output, output
    assert "Traceback" not in output and "Exception" not in output, output
    dead = lake / "_cdclake" / "dead_letters"
    assert not DeltaTable.is_deltatable(str(dead)) or not DeltaTable(str(dead)).to_pyarrow_table().num_rows, output


def test_cdclake_run_says_what_it_did_and_nothing_of_sparks_start_up(tmp_path):
    (tmp_path / "in").mkdir()
    write_records(tmp_path / "in" / "1.jsonl", records([change(INSERT, 10, 1)]))
    done = subprocess.run([sys.executable, "-m", "cdclake", "run", "--format", "canal-json", "--input",
                           str(tmp_path / "in"), "--lake", str(tmp_path / "lake")],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    # No log4j profile, host address or log level lines, nor the JVM's note of the incubator module Spark adds.
    lines = done.stderr.splitlines()
    assert [line.split(" ")[1] if line[:2].isdigit() else line.split(" ")[0] for line in lines] == [
        "starting", "batch", "done:"], done.stderr  # each progress line after the time it was said
    assert re.fullmatch(r"\d\d:\d\d:\d\d batch 0 \[main\]: 1 record, 1 event, \+1 ~0 -0 rows, 0 dead letters, "
                        r"0 skipped, [\d.]+s \([\d,]+ records/s; read\+decode\+plan [\d.]+s, apply [\d.]+s\)",
                        lines[1]), lines[1]
    assert re.fullmatch(r"done: 1 batch, 1 record, 1 event, 1 inserted, 0 updated, 0 deleted, 0 dead letters, "
                        r"0 skipped in [\d.]+s \([\d,]+ records/s\)", lines[-1]), lines[-1]


def test_cdclake_run_with_dead_letters_says_which_command_lists_them(tmp_path):
    (tmp_path / "in").mkdir()
    write_records(tmp_path / "in" / "1.jsonl", [*records([change(INSERT, 10, 1)]),
                                                Record(value=b"not json", topic="cdc", offset=1)])
    done = subprocess.run([sys.executable, "-m", "cdclake", "run", "--format", "canal-json", "--input",
                           str(tmp_path / "in"), "--lake", str(tmp_path / "lake"), "--name", "orders"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 1, done.stderr  # a dead letter is a data error, unless --max-dead-letter-ratio allows it
    lines = done.stderr.splitlines()
    assert lines[-3].startswith("done: 1 batch, 2 records, 1 event, 1 inserted") and "1 dead letter," in lines[-3]
    assert lines[-2] == f"the dead letters, with why: cdclake dead-letters {tmp_path / 'lake'} --pipeline orders"
    assert lines[-1] == "cdclake: 1 of 2 records (50%) could not be decoded, more than max_dead_letter_ratio = 0 allows"
    listed = subprocess.run(lines[-2].split(": ", 1)[1].split(), capture_output=True, text=True, check=False,
                            env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"})
    assert listed.returncode == 0 and listed.stdout.startswith("cdc:0:1  canal-json  pipeline orders.main"), listed


def test_a_signal_to_the_runs_whole_process_group_ends_it_cleanly(tmp_path):
    # As `timeout` or `kill -- -PGID` send it: before, it also reached Spark's JVM, and the run ended in a traceback.
    (tmp_path / "in").mkdir()
    write_records(tmp_path / "in" / "1.jsonl", records([change(INSERT, 10, 1)]))
    with subprocess.Popen([sys.executable, "-m", "cdclake", "run", "--format", "canal-json", "--input",
                           str(tmp_path / "in"), "--lake", str(tmp_path / "lake"), "--follow"],
                          stderr=subprocess.PIPE, text=True, start_new_session=True) as run:
        assert run.stderr is not None
        watchdog = threading.Timer(300, run.kill)
        watchdog.start()
        lines = []
        for line in run.stderr:
            lines.append(line)
            if " batch 0 " in line:
                break
        os.killpg(run.pid, signal.SIGTERM)
        rest = run.stderr.read()
        watchdog.cancel()
        assert run.wait(timeout=60) == 0, "".join(lines) + rest
    assert "Traceback" not in rest and rest.strip().splitlines()[-1].startswith("stopped: 1 batch, 1 record,"), rest


@pytest.mark.parametrize("signal_number", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_while_kafka_is_waited_for_at_start_ends_the_run(tmp_path, signal_number):
    # No batch is running to finish first: the run must not go on waiting for a broker that is down.
    with subprocess.Popen([sys.executable, "-m", "cdclake", "run", "--format", "canal-json", "--kafka",
                           "127.0.0.1:9", "--topic", "t", "--lake", str(tmp_path / "lake")],
                          stderr=subprocess.PIPE, text=True) as run:
        assert run.stderr is not None
        watchdog = threading.Timer(120, run.kill)  # the run would retry for 600 s
        watchdog.start()
        for line in run.stderr:
            if "unreachable" in line:
                break
        run.send_signal(signal_number)
        rest = run.stderr.read()
        watchdog.cancel()
        assert run.wait(timeout=60) == 130
    assert rest.strip().endswith("cdclake: interrupted"), rest


# Starts a pipeline run in its own session and prints the highest tier the session's JVM compiles code to.
JIT_TIER = """
import os, sys, threading, time
from pyspark import SparkContext
from cdclake.pipeline import runner as pipeline
from cdclake.pipeline.config import PipelineConfig, SourceConfig
config = PipelineConfig(lake=sys.argv[2], sources=[SourceConfig(format="canal-json", input=sys.argv[3])],
                        follow=sys.argv[1] == "follow")
threading.Thread(target=pipeline.run, args=(config,), daemon=True).start()
for _ in range(1200):
    if SparkContext._active_spark_context is not None:
        break
    time.sleep(0.1)
jvm = SparkContext._active_spark_context._jvm
kind = jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
options = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(kind)
print(options.getVMOption("TieredStopAtLevel").getValue(), options.getVMOption("ReservedCodeCacheSize").getValue())
sys.stdout.flush()
os._exit(0)
"""


@pytest.mark.parametrize(("mode", "tier"), [("once", "1"), ("follow", "4")])
def test_a_run_that_stops_once_caught_up_compiles_quickly_and_a_following_one_fully(tmp_path, mode, tier):
    """Either way with room for the compiled code of a long run: with the quick compiler alone Java reserves 48 MB,
    which a run of 300,000 events with 160 DDL statements filled, and compiling stopped."""
    (tmp_path / "in").mkdir()
    write_records(tmp_path / "in" / "1.jsonl", records([change(INSERT, 10, 1)]))
    done = subprocess.run([sys.executable, "-c", JIT_TIER, mode, str(tmp_path / "lake"), str(tmp_path / "in")],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.split() == [tier, str(240 << 20)]


def test_a_run_killed_before_its_first_batch_was_logged_starts_again(spark, tmp_path):
    # A kill while Spark writes its first offset-log entry leaves the temporary file behind; Spark then
    # refuses to plan batch 0 into an offsets directory that is not empty.
    offsets = tmp_path / "lake" / "_cdclake" / "checkpoints" / "t" / "main" / "spark" / "offsets"
    offsets.mkdir(parents=True)
    (offsets / ".0.5b7e1c3a-killed.tmp").write_text("v1\n")
    (tmp_path / "in").mkdir()
    write_records(tmp_path / "in" / "1.jsonl", records([change(INSERT, 10, 1), change(INSERT, 11, 2)]))
    summary = run(spark, tmp_path / "in", tmp_path / "lake")
    assert summary.total("inserted") == 2
    assert sorted(lake_rows(str(tmp_path / "lake"), "shop", "users")) == ["[1]", "[2]"]

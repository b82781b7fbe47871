"""A following `cdclake run --metrics-port` serves what its own progress lines say, and stops serving when it ends."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error

import pytest

from cdclake.model.events import DELETE, INSERT, UPDATE
from cdclake.model.records import Record, write_records
from tests.helpers.kafka_broker import free_port
from tests.pipeline.test_metrics import scrape
from tests.pipeline.test_runner import change, records

pytestmark = pytest.mark.spark

PROGRESS = re.compile(r"batch \d+ \[main\]: (\d+) records, \d+ events, \+(\d+) ~(\d+) -(\d+) rows, (\d+) dead letters?"
                      r".*, (\d+) skipped")


def _scrape_until(port: int, done, timeout_s: float = 300.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            got = scrape(port)
        except (urllib.error.URLError, ConnectionError):  # not serving yet: Spark is starting
            got = None
        if got is not None and done(got):
            return got
        time.sleep(0.5)
    raise AssertionError(f"the metrics did not get there within {timeout_s:.0f}s")


def test_a_following_run_serves_the_numbers_of_its_progress_lines(tmp_path):
    (tmp_path / "in").mkdir()
    inserts = records([change(INSERT, 100 + i, i) for i in range(1, 9)])
    write_records(tmp_path / "in" / "1.jsonl", [*inserts, Record(value=b"not json", topic="cdc", offset=len(inserts))])
    port = free_port()
    run = subprocess.Popen([sys.executable, "-m", "cdclake", "run", "--format", "canal-json", "--input",
                            str(tmp_path / "in"), "--lake", str(tmp_path / "lake"), "--name", "shop", "--follow",
                            "--metrics-port", str(port), "--max-dead-letter-ratio", "1"],  # the bad record's exit 1
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def records_total(got: dict) -> float:
        return sum(v for (name, _), v in got.items() if name == "cdclake_records_total")

    try:
        _scrape_until(port, lambda got: records_total(got) == 9)
        write_records(tmp_path / "in" / "2.jsonl", records(
            [change(UPDATE, 200 + i, i, version=1, before_version=0) for i in (1, 2, 3)]
            + [change(DELETE, 300 + i, i) for i in (4, 5)], start_offset=len(inserts) + 1))
        got = _scrape_until(port, lambda got: records_total(got) == 14)
        run.send_signal(signal.SIGINT)
        output = run.communicate(timeout=120)[0]
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 0, output
    lines = [[int(n) for n in m.groups()] for m in PROGRESS.finditer(output)]
    assert lines, output
    read, inserted, updated, deleted, dead, skipped = (sum(column) for column in zip(*lines, strict=True))

    def value(name: str, **labels: str) -> float:
        return got.get((name, tuple(sorted({"pipeline": "shop", **labels}.items()))), 0.0)

    assert value("cdclake_records_total", source="main", outcome="dead_letter") == dead == 1
    assert value("cdclake_records_total", source="main", outcome="skipped") == skipped
    assert value("cdclake_records_total", source="main", outcome="applied") == read - dead - skipped == 13
    assert [value("cdclake_rows_total", table="shop.users", change=c) for c in ("insert", "update", "delete")] == [
        inserted, updated, deleted] == [8, 3, 2]
    assert value("cdclake_batch_seconds_count", source="main", phase="total") == len(lines)
    assert value("cdclake_last_commit_ts", table="shop.users") == 305 << 18  # the last change's commit ts
    assert value("cdclake_tables_stopped") == 0
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass

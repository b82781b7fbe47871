"""``cdclake run --kafka`` while its broker is killed (SIGKILL) mid-run, stays down with connections refused,
and is started again on the same port: the run waits, says plainly that it is waiting for the broker, picks
up again and applies every record exactly once.

Twice: the broker comes back with its log, as Apache Kafka does; and without it (its storage wiped, as when
an empty broker replaces it at the same address), when the test refills it with exactly the records it had, at
the same partitions and offsets (the same records produced again, in the same order, onto topics recreated
with the same partitions). That broker answers empty for a moment first (EMPTY_S, then the refill takes its
own time), so the run is sure to look in on a broker that has fewer records than when the run started: it
must wait for them rather than stop as if caught up (before the fix it did: it ended "done" with only the
batches applied before the kill).

Like test_crash_recovery, the run is a subprocess (its output is what a user sees, including what the Spark
Python workers that talk to Kafka print), and this module starts no Spark in the test process."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from cdclake import simulator as workload
from cdclake.simulator.lakecheck import differences as lake_differences
from tests.helpers.kafka_broker import batches_logged

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

BATCH = 150  # records per batch: small, so the run is mid-way when the broker dies
DOWN_S = 3.0  # the broker stays down at least this long, and until the run says it is waiting for it
EMPTY_S = 2.0  # the restarted broker answers empty this long before the refill starts


def _progress(lake: Path) -> list[dict]:
    path = lake / "_cdclake" / "progress"
    if not DeltaTable.is_deltatable(str(path)):
        return []
    return DeltaTable(str(path)).to_pyarrow_table(columns=["batch", "records"]).to_pylist()


def _since(log: Path, offset: int) -> str:
    return log.read_bytes()[offset:].decode(errors="replace")


def _refused(servers: str) -> bool:
    """Whether connecting to the broker's port is refused (nothing listens there)."""
    host, port = servers.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return False
    except ConnectionRefusedError:
        return True


@pytest.mark.parametrize("with_log", [True, False], ids=["with-its-log", "without-its-log"])
def test_a_broker_restarted_mid_run_is_waited_for_and_nothing_is_lost(own_broker, tmp_path, with_log):
    broker = own_broker
    # Debezium JSON: a topic per table, three partitions, 10% redeliveries.
    generated = workload.generate("debezium-json", events=300, tables=3, seed=7, partitions=3, replays=0.1)
    for record in generated.records:
        record.topic = f"restart.{record.topic}"
    published = broker.publish(generated.records, 3)
    lake, log = tmp_path / "lake", tmp_path / "run.log"
    command = [sys.executable, "-m", "cdclake", "run", "--format", "debezium-json", "--kafka", broker.servers,
               "--topic", ",".join(sorted(published)), "--lake", str(lake), "--max-records-per-batch", str(BATCH),
               "--name", "restart"]
    # What the run says while the broker is down: a metadata request or a read retrying, naming the servers.
    waiting = re.compile(rf"Kafka at {re.escape(broker.servers)}( unreachable while |: waiting ).*retrying")
    started = time.monotonic()
    with open(log, "ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            # Killed once the run has applied a batch, so that it dies mid-run: inside the next batch (its
            # planning, read or merges) or between two.
            deadline = time.monotonic() + 180
            while batches_logged(log) < 1 and process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            assert process.poll() is None and batches_logged(log) >= 1, log.read_text()[-3000:]
            before = len(log.read_bytes())
            broker.kill()
            killed_at = time.monotonic()
            applied_at_kill = sum(p["records"] for p in _progress(lake))
            assert _refused(broker.servers)
            # Down for DOWN_S, and until the run has said it is waiting (bounded).
            deadline = killed_at + 60
            while process.poll() is None and time.monotonic() < deadline and (
                    time.monotonic() - killed_at < DOWN_S or not waiting.search(_since(log, before))):
                time.sleep(0.2)
            said = _since(log, before)
            assert process.poll() is None, "the run ended while the broker was down:\n" + said[-3000:]
            assert _refused(broker.servers)
            down_s = time.monotonic() - killed_at
            broker.restart(without_log=not with_log)
            if not with_log:
                time.sleep(EMPTY_S)
                # The same records at the same partitions and offsets, as the broker had them.
                assert broker.publish(generated.records, 3) == published
            returncode = process.wait(240)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
    output = log.read_text(errors="replace")
    assert returncode == 0, output[-3000:]
    assert waiting.search(said), f"nothing said while the broker was down {down_s:.0f}s:\n{said[-3000:]}"
    assert 0 < applied_at_kill < len(generated.records)  # killed mid-run
    progress = _progress(lake)
    assert len({p["batch"] for p in progress}) == len(progress)  # no batch recorded twice
    assert sum(p["records"] for p in progress) == len(generated.records)  # every record exactly once
    problems = lake_differences(str(lake), generated.expected, generated.key_names)
    assert not problems, "\n".join(problems)
    print(f"killed after {applied_at_kill} of {len(generated.records)} records, down {down_s:.0f}s, run "
          f"{time.monotonic() - started:.0f}s; while down it said:\n{said}")

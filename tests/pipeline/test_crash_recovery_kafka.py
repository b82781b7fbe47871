"""``cdclake run --kafka`` killed with SIGKILL at random moments, again and again, then restarted until caught
up: the Delta tables equal the simulation's final state and the lake counts every Kafka record exactly once
(no change lost, none applied twice). Some restarts also lose Spark's checkpoint, so the lake alone says
where to resume.

This module starts its own Spark (in each `python -m cdclake run`) and none in the test process: it runs
before the modules that use the in-process session, so one JVM runs at a time."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from cdclake import formats
from cdclake import simulator as workload
from cdclake.simulator.lakecheck import differences as lake_differences
from tests.helpers.kafka_broker import batches_logged

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

KILLS = 10
BATCH = 120  # records per batch: small, so that kills land inside and between batches


def _progress(lake: Path) -> list[dict]:
    path = lake / "_cdclake" / "progress"
    if not DeltaTable.is_deltatable(str(path)):
        return []
    return DeltaTable(str(path)).to_pyarrow_table(columns=["batch", "records"]).to_pylist()


def _kill(process: subprocess.Popen) -> None:
    """SIGKILL the run and everything it started (its Spark JVM and Python workers), as a crash would."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(30)


def _wait_for_a_batch(process: subprocess.Popen, log: Path, seen: int, limit_s: float) -> bool:
    """Wait until the run logs one more applied batch (True), or ends, or the limit passes (False)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and process.poll() is None:
        if batches_logged(log) > seen:
            return True
        time.sleep(0.2)
    return False


def test_sigkill_at_random_moments_loses_and_repeats_nothing(broker, tmp_path):
    rng = random.Random(20240501)
    # Debezium JSON: a topic per table, the record key's partition (a key change's delete can land on
    # another partition than its insert), 10% redeliveries.
    prefix = broker.topic(1, "crash")
    generated = workload.generate("debezium-json", events=1000, tables=3, seed=5, partitions=3, replays=0.1)
    for record in generated.records:
        record.topic = f"{prefix}.{record.topic}"
    broker.publish(generated.records, 3)
    topics = sorted({r.topic for r in generated.records})
    assert len(topics) == 3
    lake = tmp_path / "lake"
    command = [sys.executable, "-m", "cdclake", "run", "--format", "debezium-json", "--kafka", broker.servers,
               "--topic", ",".join(topics), "--lake", str(lake), "--max-records-per-batch", str(BATCH),
               "--name", "crash"]
    log = tmp_path / "runs.log"
    kills, after_a_batch = 0, 0
    started = time.monotonic()
    with open(log, "ab") as out:
        while kills < KILLS:
            seen = batches_logged(log)
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            # A random moment: during start-up (most runs: they are cheap), or a random time after the run
            # applied a batch (inside the next batch's read, decode, merges or progress commit, or between
            # batches); start-up costs most of a run here, so only a few runs get that far.
            if kills % 3 != 1:
                time.sleep(rng.uniform(1.0, 12.0))
            elif _wait_for_a_batch(process, log, seen, 180):
                time.sleep(rng.uniform(0.0, 5.0))
            if process.poll() is not None:
                assert process.returncode == 0, log.read_text()[-3000:]
                break  # caught up before it could be killed
            _kill(process)
            kills += 1
            after_a_batch += batches_logged(log) > seen
            if kills % 4 == 3:  # now and then Spark's checkpoint is lost as well
                shutil.rmtree(lake / "_cdclake" / "checkpoints", ignore_errors=True)
        final = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, timeout=600, check=False)
    assert final.returncode == 0, log.read_text()[-3000:]
    elapsed = time.monotonic() - started
    assert kills >= KILLS, f"the run finished after {kills} kills: give it more records"
    assert after_a_batch >= 3, f"only {after_a_batch} of {kills} runs applied a batch before being killed"
    progress = _progress(lake)
    assert len({p["batch"] for p in progress}) == len(progress)  # no batch recorded twice
    assert sum(p["records"] for p in progress) == len(generated.records)  # every record exactly once
    problems = lake_differences(str(lake), generated.expected, generated.key_names)
    assert not problems, "\n".join(problems)
    print(f"{kills} kills ({after_a_batch} after a batch) and a final run: {elapsed:.0f}s")


def test_sigkill_with_every_format_in_one_pipeline(broker, tmp_path):
    """Every registered format as one source of a single pipeline (sources run one after another), killed at
    random moments at least ten times: each kill lands in whichever format's batches were running."""
    from tests.pipeline.test_kafka import _generate

    rng = random.Random(20261122)
    lake = tmp_path / "lake"
    sources, expected, keys, counts = [], {}, {}, {}
    for index, name in enumerate(formats.names()):
        profile = workload.profile_for(name, {})
        generated, decode = _generate(name, {}, tmp_path / name, 400, 3 if profile.ordered else 1,
                                      0.1 if profile.replay_safe else 0.0, broker.topic(1, f"k{index}"),
                                      databases=(f"db{index}",))  # one database per format: tables apart
        broker.publish(generated.records, 3 if profile.ordered else 1)
        topics = sorted({r.topic for r in generated.records})
        options = "".join(f'"{k}" = "{v}", ' for k, v in decode.items()).rstrip(", ")
        sources.append(f'[[source]]\nname = "{name}"\nformat = "{name}"\nkafka = "{broker.servers}"\n'
                       f"topics = {topics!r}\nmax_records_per_batch = {BATCH}\noptions = {{ {options} }}\n")
        counts[f"crash.{name}"] = len(generated.records)
        expected[name], keys[name] = generated.expected, generated.key_names
    (tmp_path / "PIPELINE.toml").write_text(f'name = "crash"\nlake = "{lake}"\n\n' + "\n".join(sources))
    command = [sys.executable, "-m", "cdclake", "run", str(tmp_path / "PIPELINE.toml")]
    log = tmp_path / "runs.log"
    kills, after_a_batch = 0, 0
    with open(log, "ab") as out:
        while kills < KILLS:
            seen = batches_logged(log)
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            # Every other run is killed at a random moment after it applied a batch (inside a later batch of
            # the same or the next format's source), the others at a random moment, mostly during start-up.
            if kills % 2 == 1 and _wait_for_a_batch(process, log, seen, 240):
                time.sleep(rng.uniform(0.0, 8.0))
            elif kills % 2 == 0:
                time.sleep(rng.uniform(2.0, 20.0))
            if process.poll() is not None:
                assert process.returncode == 0, log.read_text()[-3000:]
                break
            _kill(process)
            kills += 1
            after_a_batch += batches_logged(log) > seen
        final = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, timeout=900, check=False)
    assert final.returncode == 0, log.read_text()[-3000:]
    assert kills >= KILLS, f"the run finished after {kills} kills: give it more records"
    assert after_a_batch >= 3, f"only {after_a_batch} of {kills} runs applied a batch before being killed"
    progress = DeltaTable(str(lake / "_cdclake" / "progress")).to_pyarrow_table(
        columns=["pipeline", "batch", "records"]).to_pylist()
    assert len({p["pipeline"] for p in progress}) == len(counts)  # every format's source applied batches
    for pipeline_id, records in counts.items():
        mine = [p for p in progress if p["pipeline"] == pipeline_id]
        assert len({p["batch"] for p in mine}) == len(mine), pipeline_id  # no batch recorded twice
        assert sum(p["records"] for p in mine) == records, pipeline_id  # every record exactly once
    for name in formats.names():
        problems = lake_differences(str(lake), expected[name], keys[name])
        assert not problems, f"{name}:\n" + "\n".join(problems)

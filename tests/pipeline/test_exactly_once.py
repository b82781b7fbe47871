"""Exactly once without Spark's checkpoint: a run crashed in the middle of a batch, then restarted with the
checkpoint deleted, with another checkpoint, with another batch size or with more input, leaves the lake equal to
the workload simulator's state. The lake, not the checkpoint, says where a restart goes on: a new checkpoint numbers
its batches above every app-transaction marker of the lake, and a files source skips the records the lake's
committed batches read."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable

from cdclake import simulator as workload
from cdclake.model.events import INSERT, TRUNCATE, Column
from cdclake.model.records import write_records
from cdclake.simulator.lakecheck import differences
from tests.helpers.lake import lake_rows
from tests.pipeline.test_runner import COLUMNS, change, ddl, records

pytestmark = pytest.mark.spark


def _workload(seed: int = 5, changes: int = 700) -> tuple[list, dict, dict]:
    """Two tables' changes interleaved in one partition, with a few DDL statements; the records, and the state."""
    profile = workload.profile_for("canal-json", {"flavour": "tidb"})
    db = workload.Database(seed=seed, tables=2, profile=profile, max_txn_rows=4, ddl_rate=0.01)
    events = []
    while len(events) < changes:
        events += db.run(1)
    records = workload.emit(events, "canal-json", partitions=1, seed=seed, options={"flavour": "tidb"},
                            profile=profile)
    return records, db.expected(), db.key_names()


def _run(data: Path, lake: Path, batch: int, checkpoint: Path | None = None, failpoint: str | None = None,
         options: tuple[str, ...] = ("--option", "flavour=tidb")) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "cdclake", "run", "--format", "canal-json", *options, "--input", str(data),
               "--lake", str(lake), "--max-records-per-batch", str(batch)]
    if checkpoint is not None:
        command += ["--checkpoint", str(checkpoint)]
    env = {name: value for name, value in os.environ.items() if name != "CDCLAKE_FAILPOINT"}
    if failpoint is not None:
        env["CDCLAKE_FAILPOINT"] = failpoint
    return subprocess.run(command, env=env, capture_output=True, timeout=600, check=False)


@pytest.mark.parametrize("restart", ["checkpoint-deleted", "new-checkpoint", "larger-batches", "more-input"])
def test_a_restart_after_a_crash_mid_batch_applies_every_change_once(tmp_path, restart):
    """The issue's scenario: the first table merged, the crash, then a restart whose batch covers more records
    (before, the restart reused the crashed batch's number and the first table skipped the larger batch: a key
    missing, one too many, stale values)."""
    records, expected, keys = _workload()
    data, lake = tmp_path / "in", tmp_path / "lake"
    data.mkdir()
    cut = len(records) if restart != "more-input" else len(records) * 2 // 3
    write_records(data / "0001.jsonl", records[:cut])
    crashed = _run(data, lake, 150, failpoint="after-merge:3")
    assert crashed.returncode == 86, crashed.stderr.decode()[-2000:]
    # The crash fell after some table's step of a batch whose progress is not recorded: a restart must redo it.
    checkpoint = lake / "_cdclake" / "checkpoints" / "default"
    if restart == "checkpoint-deleted":
        shutil.rmtree(checkpoint)
    if restart == "more-input":
        write_records(data / "0002.jsonl", records[cut:])
    finished = _run(data, lake, 150 if restart == "more-input" else 100_000,
                    checkpoint=tmp_path / "elsewhere" if restart == "new-checkpoint" else None)
    assert finished.returncode == 0, finished.stderr.decode()[-2000:]
    if restart == "more-input":  # another checkpoint still, now that more input is there, and other batches
        shutil.rmtree(checkpoint)
        again = _run(data, lake, 1000)
        assert again.returncode == 0, again.stderr.decode()[-2000:]
    assert not differences(str(lake), expected, keys), "\n".join(differences(str(lake), expected, keys))
    progress = DeltaTable(str(lake / "_cdclake" / "progress")).to_pyarrow_table().to_pylist()
    assert len({p["batch"] for p in progress}) == len(progress)
    assert sum(p["records"] for p in progress) == len(records)  # each record read by one committed batch


def test_ddl_applied_before_a_crash_is_harmless_when_its_batch_is_replayed_under_a_new_version(tmp_path):
    """The batch is applied whole but for its progress row, then the checkpoint is lost: the restart applies every
    step again under a new batch number, which no marker skips. ADD COLUMN finds its column, RENAME COLUMN its new
    name, a TRUNCATE replayed after the newer inserts keeps them, and RENAME TABLE is known by its statement."""
    narrow = [c for c in COLUMNS if c.name != "name"] + [Column("title", "varchar(64)"),
                                                         Column("email", "varchar(128)")]
    events = [change(INSERT, 10, 1), change(INSERT, 11, 2),
              ddl(12, "ALTER TABLE shop.users ADD COLUMN email varchar(128)"),
              change(INSERT, 13, 1, table="orders"), change(INSERT, 14, 2, table="orders"),
              ddl(15, "ALTER TABLE shop.orders ADD COLUMN email varchar(128), RENAME COLUMN name TO title",
                  table="orders"),
              ddl(16, "TRUNCATE TABLE shop.orders", table="orders", kind=TRUNCATE),
              change(INSERT, 17, 3, table="orders", columns=narrow),
              ddl(18, "RENAME TABLE shop.users TO shop.people"), change(INSERT, 19, 3, table="people")]
    data, lake = tmp_path / "in", tmp_path / "lake"
    data.mkdir()
    write_records(data / "1.jsonl", records(events))
    crashed = _run(data, lake, 0, failpoint="before-dead-letters", options=())
    assert crashed.returncode == 86, crashed.stderr.decode()[-2000:]
    shutil.rmtree(lake / "_cdclake" / "checkpoints")
    finished = _run(data, lake, 0, options=())
    assert finished.returncode == 0, finished.stderr.decode()[-2000:]
    people = lake_rows(str(lake), "shop", "people")
    assert sorted(people) == ["[1]", "[2]", "[3]"] and people["[1]"]["name"] == "user 1 v0"
    assert not (lake / "shop" / "users").exists()
    orders = lake_rows(str(lake), "shop", "orders")
    assert sorted(orders) == ["[3]"]
    assert "name" not in orders["[3]"] and orders["[3]"]["title"] is None and orders["[3]"]["email"] is None
    progress = DeltaTable(str(lake / "_cdclake" / "progress")).to_pyarrow_table().to_pylist()
    assert [p["records"] for p in progress] == [len(events)]

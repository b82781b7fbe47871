"""``consistency = "resolved-ts"``: a table never shows part of a transaction, whatever order the partitions
are read in, and the published consistent-up-to commit ts only grows — within a run and across restarts.

The workload's transactions span keys and tables, so their rows land in different partitions; the record
files are cut into chunks of different sizes per partition and read in an interleaved order, so some
partitions run far ahead of others. After every batch the lake must equal the simulation's state folded
up to the commit ts the batch published."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable

from cdclake import simulator as workload
from cdclake.lake.layout import CONSISTENT_UP_TO
from cdclake.model.events import RESOLVED, ChangeEvent
from cdclake.model.records import Record, write_records
from cdclake.pipeline import runner as pipeline
from cdclake.pipeline.batch import BatchReport
from cdclake.pipeline.config import PipelineConfig, SourceConfig
from cdclake.pipeline.inspection import collect
from cdclake.simulator.lakecheck import differences
from tests.helpers.crashes import crash_at_every_point_then_finish

pytestmark = pytest.mark.spark

# (format, options, records per batch): a Canal-JSON record holds one row, a TiCDC Open Protocol message about
# three, so Canal-JSON reads three times the records for a batch of about the same number of changes.
FORMATS = [("ticdc-open", {}, 19), ("canal-json", {"flavour": "tidb"}, 57)]


def _simulate(name: str, options: dict, seed: int) -> tuple[list[ChangeEvent], list[Record], list]:
    """The changes, their records, and the expected state (with the tables' key names) after each commit
    ts, as the format delivers values (e.g. ENUM numbers for TiCDC)."""
    profile = workload.profile_for(name, options)
    db = workload.Database(seed=seed, tables=3, profile=profile, resolved_every=4, max_txn_rows=6, ddl_rate=0.01)
    changes: list[ChangeEvent] = []
    states: list[tuple[int, dict, dict]] = [(0, {}, {})]
    while len(changes) < 900:
        changes += db.run(1)  # one transaction (or DDL) at a time
        states.append((db.last_commit_ts, {t: {k: dict(r) for k, r in rows.items()}
                                           for t, rows in db.expected().items()}, db.key_names()))
    changes.append(ChangeEvent(kind=RESOLVED, commit_ts=db.last_commit_ts))  # the changefeed keeps resolving
    records = workload.emit(changes, name, partitions=3, seed=seed, options=options, profile=profile)
    return changes, records, states


def _write_uneven(records: list[Record], out: Path, first: int = 0, count: int | None = None) -> int:
    """Each partition's records cut into chunks of a partition-specific size, the chunks of all partitions
    interleaved by file name: partition 0 runs ahead, partition 2 lags. Writes chunk files ``first`` to
    ``first + count`` (all when ``count`` is None); returns how many chunk files exist in all."""
    per_partition: list[list[list[Record]]] = []
    for partition, size in ((0, 23), (1, 7), (2, 4)):
        mine = [r for r in records if r.partition == partition]
        per_partition.append([mine[i:i + size] for i in range(0, len(mine), size)])
    # Round robin over the partitions, each partition's chunks in their order (a partition is a log).
    order = [chunk for turn in itertools.zip_longest(*per_partition) for chunk in turn if chunk]
    out.mkdir(parents=True, exist_ok=True)
    for rank, chunk in enumerate(order):
        if rank >= first and (count is None or rank < first + count):
            write_records(out / f"chunk-{rank:05d}.jsonl", chunk)
    return len(order)


def _state_at(states: list[tuple[int, dict, dict]], commit_ts: int) -> tuple[dict, dict]:
    """The expected state once every transaction up to ``commit_ts`` is applied, and its key names; a table
    the simulation had at any time and not then must be empty or absent."""
    tables = {ident for _, state, _ in states for ident in state}
    _, at, keys = max((item for item in states if item[0] <= commit_ts), key=lambda item: item[0])
    return {**{ident: {} for ident in tables}, **at}, keys


def _published(lake: Path) -> dict[str, int]:
    found = {}
    for path in sorted(lake.glob("*/*/_delta_log")):
        if path.parent.parent.name.startswith("_"):
            continue
        value = DeltaTable(str(path.parent)).metadata().configuration.get(CONSISTENT_UP_TO)
        if value is not None:
            found[f"{path.parent.parent.name}.{path.parent.name}"] = int(value)
    return found


class Watcher:
    """Checks the lake after every batch (problems are collected: the check runs inside Spark's batch)."""

    def __init__(self, lake: Path, states: list[tuple[int, dict, dict]]) -> None:
        self.lake, self.states = lake, states
        self.consistent: list[int] = []
        self.held: list[int] = []
        self.problems: list[str] = []
        self.published: dict[str, int] = {}

    def __call__(self, report: BatchReport) -> None:
        ts = report.consistent_ts or 0
        self.consistent.append(ts)
        self.held.append(report.held)
        wrong = differences(str(self.lake), *_state_at(self.states, ts))
        if wrong:
            self.problems.append(f"batch {report.batch} (consistent up to {ts}): " + "; ".join(wrong[:3]))
        for table, value in _published(self.lake).items():
            if value < self.published.get(table, 0) or value > ts:
                self.problems.append(f"batch {report.batch}: {table} published {value} after "
                                     f"{self.published.get(table)}, batch watermark {ts}")
            self.published[table] = value


def _config(lake: Path, data: Path, name: str, options: dict, batch: int = 19) -> PipelineConfig:
    return PipelineConfig(lake=str(lake), name="consistent", sources=[
        SourceConfig(format=name, input=str(data), options=options, max_records_per_batch=batch,
                     consistency="resolved-ts")])


@pytest.mark.parametrize(("name", "options", "batch"), FORMATS, ids=[n for n, _, _ in FORMATS])
def test_no_half_applied_transaction_with_partitions_read_unevenly(spark, tmp_path, name, options, batch):
    changes, records, states = _simulate(name, options, seed=5)
    assert len({r.partition for r in records}) == 3
    _write_uneven(records, tmp_path / "data")
    watcher = Watcher(tmp_path / "lake", states)
    decode_options = {}  # the decoder tells the flavours apart by itself
    spark.catalog.clearCache()
    summary = pipeline.run(_config(tmp_path / "lake", tmp_path / "data", name, decode_options, batch), watcher,
                           spark)
    # Every batch freed what it cached (its records, changelog, held and net changes).
    assert spark._jsparkSession.sharedState().cacheManager().isEmpty()

    assert not watcher.problems, "\n".join(watcher.problems[:10])
    assert watcher.consistent == sorted(watcher.consistent)
    assert any(watcher.held), "the uneven reading must have held changes back at some point"
    last_ts = max(e.commit_ts or 0 for e in changes)
    assert watcher.consistent[-1] == last_ts and watcher.held[-1] == 0
    assert summary.total("dead_letters") == 0
    final = differences(str(tmp_path / "lake"), *_state_at(states, last_ts))
    assert not final, "\n".join(final)
    assert set(_published(tmp_path / "lake").values()) == {last_ts}
    status = collect(str(tmp_path / "lake"))["tables"]
    assert {info.get("consistent_ts") for info in status.values() if info["rows"]} == {last_ts}


def test_held_changes_survive_a_restart(spark, tmp_path):
    changes, records, states = _simulate("ticdc-open", {}, seed=9)
    for r in records:  # a held change keeps them, for the dead letter it may become
        r.headers, r.timestamp = [("h", b"%d:%d" % (r.partition, r.offset)), ("h", None)], 1_700_000_000_000 + r.offset
    data, lake = tmp_path / "data", tmp_path / "lake"
    total = _write_uneven(records, data, 0, 0)
    _write_uneven(records, data, 0, total // 2)
    watcher = Watcher(lake, states)
    pipeline.run(_config(lake, data, "ticdc-open", {}), watcher, spark)
    assert watcher.held[-1] > 0, "the first run must end with changes held for later"
    held = DeltaTable(str(lake / "_cdclake" / "held")).to_pyarrow_table().to_pylist()
    assert held and all(h["raw_headers"] == [{"key": "h", "value": b"%d:%d" % (h["partition"], h["offset"])},
                                             {"key": "h", "value": None}]
                        and h["raw_timestamp"].timestamp() == 1_700_000_000 + h["offset"] / 1000 for h in held)
    first_run = list(watcher.consistent)

    _write_uneven(records, data, total // 2, None)  # the rest arrives; a new run (a restart) takes over
    pipeline.run(_config(lake, data, "ticdc-open", {}), watcher, spark)

    assert not watcher.problems, "\n".join(watcher.problems[:10])
    assert watcher.consistent == sorted(watcher.consistent) and len(watcher.consistent) > len(first_run)
    last_ts = max(e.commit_ts or 0 for e in changes)
    assert watcher.consistent[-1] == last_ts and watcher.held[-1] == 0
    final = differences(str(lake), *_state_at(states, last_ts))
    assert not final, "\n".join(final)


def test_resolved_ts_needs_a_format_that_sends_resolved_timestamps(tmp_path):
    source = SourceConfig(format="debezium-json", input=str(tmp_path), consistency="resolved-ts")
    with pytest.raises(ValueError, match="resolved timestamps"):
        source.validate()
    with pytest.raises(ValueError, match="consistency must be one of"):
        SourceConfig(format="ticdc-open", input=str(tmp_path), consistency="eventual").validate()


def test_crash_with_held_changes_is_applied_exactly_once(tmp_path):
    changes, records, states = _simulate("ticdc-open", {}, seed=3)
    data, lake = tmp_path / "data", tmp_path / "lake"
    _write_uneven(records, data)

    def changes_were_held(point: str) -> None:
        assert DeltaTable.is_deltatable(str(lake / "_cdclake" / "held")), f"{point}: the crash came with changes held"

    crash_at_every_point_then_finish(
        [sys.executable, "-m", "cdclake", "run", "--format", "ticdc-open", "--input", str(data), "--lake", str(lake),
         "--max-records-per-batch", "19", "--consistency", "resolved-ts"], changes_were_held)
    last_ts = max(e.commit_ts or 0 for e in changes)
    final = differences(str(lake), *_state_at(states, last_ts))
    assert not final, "\n".join(final)
    progress = sorted(DeltaTable(str(lake / "_cdclake" / "progress")).to_pyarrow_table().to_pylist(),
                      key=lambda p: p["batch"])
    assert len({p["batch"] for p in progress}) == len(progress)
    assert sum(p["records"] for p in progress) == len(records)  # every record counted once
    assert progress[-1]["held"] == 0 and progress[-1]["consistent_ts"] == last_ts

"""The crash matrix: ``cdclake run`` killed at every commit boundary of a batch (every named failpoint, see
:mod:`cdclake.support.failpoints`), at more than its first hit, then run to the end: the lake equals the workload
simulator's state, and every record is counted by one batch.

The workload: TiCDC Open Protocol over three partitions read unevenly, ``consistency = "resolved-ts"`` (changes
held and released, consistency published), three tables with a three-way RENAME TABLE swap, small batches. The
default run kills one process per point, each at the point's second hit (the renames' at their first), each
starting from what the kills before it left. ``--crash-matrix=full`` (``make crash-matrix``) first counts the hits
of each point in a whole run, then kills a run on a new lake at every hit of every point in turn and runs it to the
end: the default run deselects it, and says so. Not in this workload, and covered by their own tests in
``test_pipeline.py`` at their first hit: ``between-clauses`` (the simulator writes one clause a statement),
``after-rename-merge`` and ``during-rename-merge`` (a rename onto rows a partition read ahead)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable

from cdclake.simulator.lakecheck import differences
from tests.helpers.crashes import crash, point_hits, run_to_the_end
from tests.pipeline.test_consistency import _simulate, _state_at, _write_uneven

pytestmark = pytest.mark.spark

# Every point a batch of this workload passes, in the order a batch passes them (the renames' within the merges).
POINTS = ["before-merge", "before-rename", "after-rename", "after-merge", "after-hold", "after-tombstones",
          "before-consistency", "after-consistency", "before-dead-letters", "after-dead-letters", "after-progress",
          "after-forget-held", "before-checkpoint"]
ONCE_A_RUN = {"before-rename", "after-rename"}  # the swap's three renames fall in one batch
SEED, RECORDS_PER_BATCH = 1, 8


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict, int]:
    """The input directory, the expected state and its key names, and the count of records."""
    changes, records, states = _simulate("ticdc-open", {}, seed=SEED)
    data = tmp_path_factory.mktemp("crash-matrix") / "in"
    _write_uneven(records, data)
    expected, keys = _state_at(states, max(e.commit_ts or 0 for e in changes))
    return data, expected, keys, len(records)


def _command(data: Path, lake: Path) -> list[str]:
    return [sys.executable, "-m", "cdclake", "run", "--format", "ticdc-open", "--input", str(data), "--lake",
            str(lake), "--max-records-per-batch", str(RECORDS_PER_BATCH), "--consistency", "resolved-ts"]


def _check(lake: Path, expected: dict, keys: dict, records: int, what: str) -> list[str]:
    problems = [f"{what}: {d}" for d in differences(str(lake), expected, keys)]
    progress = DeltaTable(str(lake / "_cdclake" / "progress")).to_pyarrow_table().to_pylist()
    if len({p["batch"] for p in progress}) != len(progress):
        problems.append(f"{what}: a batch recorded twice")
    if sum(p["records"] for p in progress) != records:
        problems.append(f"{what}: {sum(p['records'] for p in progress)} records counted, not {records}")
    return problems


@pytest.mark.crash_matrix_subset
def test_a_kill_at_every_point_of_a_batch_then_a_run_to_the_end_applies_every_change_once(workload, tmp_path):
    data, expected, keys, records = workload
    command = _command(data, tmp_path / "lake")
    for point in POINTS:  # the renames first (they fall in an early batch): the kills before would pass them
        crash(command, f"{point}:{1 if point in ONCE_A_RUN else 2}")
    run_to_the_end(command)
    problems = _check(tmp_path / "lake", expected, keys, records, "after every kill")
    assert not problems, "\n".join(problems)


@pytest.mark.crash_matrix_full
def test_a_kill_at_every_hit_of_every_point_then_a_run_to_the_end_applies_every_change_once(workload, tmp_path):
    data, expected, keys, records = workload
    hits = point_hits(_command(data, tmp_path / "counted"), tmp_path / "hits")
    assert set(POINTS) <= set(hits), f"points this workload never passes: {set(POINTS) - set(hits)}"
    problems = _check(tmp_path / "counted", expected, keys, records, "no kill")
    for point in POINTS:
        for hit in range(1, hits[point] + 1):
            lake = tmp_path / f"{point}-{hit}"
            crash(_command(data, lake), f"{point}:{hit}")
            run_to_the_end(_command(data, lake), f"{point}:{hit}")
            problems += _check(lake, expected, keys, records, f"killed at {point}:{hit}")
    assert not problems, "\n".join(problems)

"""Where a run with a new or lost checkpoint goes on (``positions.base_version``, the files source's ``applied``
option); the real path is ``tests/pipeline/test_exactly_once.py``."""

from __future__ import annotations

import json

import pyarrow as pa

from cdclake.pipeline.positions import base_version
from cdclake.spark.sources import _applied, _unapplied


class Lake:
    """A sink whose progress says batch 4 and whose tables hold a marker of batch 6, a crash cut short."""

    def last_batch(self) -> int:
        return 4

    def last_marked_batch(self) -> int:
        return 6


def test_a_new_checkpoint_numbers_its_batches_above_every_marker_of_the_lake(tmp_path):
    assert base_version(str(tmp_path / "new"), Lake()) == 7  # type: ignore[arg-type]
    assert json.loads((tmp_path / "new" / "cdclake.json").read_text()) == {"base_version": 7}


def test_a_checkpoint_whose_spark_part_logged_no_batch_is_new(tmp_path):
    (tmp_path / "cdclake.json").write_text('{"base_version": 2}')
    (tmp_path / "spark" / "offsets").mkdir(parents=True)
    (tmp_path / "spark" / "offsets" / ".0.tmp").write_text("")
    assert base_version(str(tmp_path), Lake()) == 7  # type: ignore[arg-type]
    (tmp_path / "spark" / "offsets" / "0").write_text("")  # Spark goes on from its batches: so do the versions
    assert base_version(str(tmp_path), Lake()) == 7  # type: ignore[arg-type]
    (tmp_path / "cdclake.json").write_text('{"base_version": 2}')
    assert base_version(str(tmp_path), Lake()) == 2  # type: ignore[arg-type]


def test_the_records_the_lake_applied_are_skipped_by_topic_partition_and_offset():
    records = pa.record_batch({"topic": ["a", "a", "a:0", "b", "c"], "partition": pa.array([0, 0, 1, 1, 0], pa.int32()),
                               "offset": pa.array([3, 4, 0, 2, 0], pa.int64())})
    applied = _applied({"applied": json.dumps({"a:0": 3, "a:0:1": 0, "b:1": 1})})
    (kept,) = _unapplied(iter([records]), applied)
    assert kept.to_pydict() == {"topic": ["a", "b", "c"], "partition": [0, 1, 0], "offset": [4, 2, 0]}
    assert list(_unapplied(iter([records.slice(0, 1)]), applied)) == []  # a batch applied whole yields nothing
    assert _applied({}) == {}

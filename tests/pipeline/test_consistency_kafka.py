"""``consistency = "resolved-ts"`` reading a real broker whose partitions fill at different paces: after
every batch of every run (each run a restart), the lake equals the simulation's state at the commit ts the
batch published, and that commit ts only grows."""

from __future__ import annotations

import pytest

from cdclake.pipeline import runner as pipeline
from cdclake.pipeline.config import PipelineConfig, SourceConfig
from cdclake.simulator.lakecheck import differences
from tests.pipeline.test_consistency import Watcher, _simulate, _state_at

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

PACE = {0: 2, 1: 3, 2: 5}  # partition → the number of rounds its records are published in


def test_resolved_ts_with_partitions_filled_unevenly(spark, broker, tmp_path):
    changes, records, states = _simulate("ticdc-open", {}, seed=13)
    topic = broker.topic(3, "rts")
    for record in records:
        record.topic = topic
    lake = tmp_path / "lake"
    config = PipelineConfig(lake=str(lake), name="rts", sources=[
        SourceConfig(format="ticdc-open", kafka=broker.servers, topics=[topic], max_records_per_batch=40,
                     consistency="resolved-ts")])
    config.validate()
    watcher = Watcher(lake, states)
    rounds = max(PACE.values())
    for turn in range(rounds):
        batch = []
        for partition, pace in PACE.items():
            mine = [r for r in records if r.partition == partition]
            size = -(-len(mine) // pace)
            batch += mine[turn * size:(turn + 1) * size]
        broker.publish(batch, 3)
        pipeline.run(config, watcher, spark)

    assert not watcher.problems, "\n".join(watcher.problems[:10])
    assert watcher.consistent == sorted(watcher.consistent)
    assert any(watcher.held)
    last_ts = max(e.commit_ts or 0 for e in changes)
    assert watcher.consistent[-1] == last_ts and watcher.held[-1] == 0
    final = differences(str(lake), *_state_at(states, last_ts))
    assert not final, "\n".join(final)

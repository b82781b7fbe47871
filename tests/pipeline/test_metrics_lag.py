"""The Kafka lag the metrics serve: a partition's end offset minus the next offset the lake is to apply."""

from __future__ import annotations

import time

import pytest

from cdclake.model.records import Record
from cdclake.pipeline import config as C
from cdclake.pipeline import metrics
from cdclake.pipeline.batch import BatchReport
from tests.helpers.kafka_broker import free_port
from tests.pipeline.test_metrics import scrape

pytestmark = pytest.mark.kafka


def test_the_lag_of_each_partition_a_batch_read(broker):
    topic = broker.topic(partitions=2)
    broker.publish([Record(value=b"x", topic=topic, partition=p) for p in (0, 1) for _ in range(5 + p * 3)])
    port = free_port()
    config = C.PipelineConfig(lake="/l", name="pay", metrics_port=port, sources=[
        C.SourceConfig("ticdc-open", name="k", kafka=broker.servers, topics=[topic])])
    with metrics.serving(config, None) as progress:
        progress(BatchReport("k", 0, offsets={f"{topic}:0": 1, f"{topic}:1": 7}))
        got = scrape(port)
        assert got[("cdclake_source_lag_records", (("partition", "0"), ("pipeline", "pay"), ("topic", topic)))] == 3
        assert got[("cdclake_source_lag_records", (("partition", "1"), ("pipeline", "pay"), ("topic", topic)))] == 0
        progress(BatchReport("k", 1, offsets={f"{topic}:0": 4, f"{topic}:1": None}))  # partition 0 caught up
        got = scrape(port)
        assert got[("cdclake_source_lag_records", (("partition", "0"), ("pipeline", "pay"), ("topic", topic)))] == 0


def test_a_broker_out_of_reach_leaves_the_lag_out_and_the_run_going(monkeypatch, caplog):
    monkeypatch.setattr(metrics, "LAG_RETRY_S", 1.0)
    port, nobody = free_port(), free_port()
    config = C.PipelineConfig(lake="/l", name="pay", metrics_port=port, sources=[
        C.SourceConfig("ticdc-open", name="k", kafka=f"127.0.0.1:{nobody}", topics=["t"])])
    seen = []
    started = time.monotonic()
    with metrics.serving(config, seen.append) as progress:
        progress(BatchReport("k", 0, records=2, offsets={"t:0": 1}))
        got = scrape(port)
    assert time.monotonic() - started < 30 and len(seen) == 1
    assert got[("cdclake_records_total", (("outcome", "applied"), ("pipeline", "pay"), ("source", "k")))] == 2
    assert not [key for key in got if key[0] == "cdclake_source_lag_records"]
    assert "metrics: the end offsets of source k" in caplog.text

"""Records produced in multi-record batches, as any tuned producer sends them, are all readable up to the
partition's high watermark. The tests' former broker (Tansu) reported the base offset of the last batch as the
end, so a reader that stops at "what is there" missed the tail: this is the check that the broker is honest."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer

from cdclake.sources import kafka as K

pytestmark = pytest.mark.kafka

RECORDS = 3000


def test_every_record_of_multi_record_batches_is_read_up_to_the_watermark(broker):
    topic = broker.topic(2, "batches")
    stats: list[dict] = []
    producer = Producer({"bootstrap.servers": broker.servers, "linger.ms": 5, "enable.idempotence": True,
                         "statistics.interval.ms": 100, "stats_cb": lambda text: stats.append(json.loads(text))})
    for n in range(RECORDS):
        producer.produce(topic, value=b"%d" % n, partition=n % 2)
    assert producer.flush(30) == 0
    producer.poll(0.5)  # the last statistics, taken after the flush
    batches = max(s["topics"][topic]["batchcnt"]["max"] for s in stats if topic in s.get("topics", {}))
    assert batches > 1, "the producer sent one record per batch: nothing is tested"
    # The end of each partition, asked once, as a run plans its batch; then that range read.
    with K.KafkaClient(broker.settings()) as client:
        end = client.latest([(topic, 0), (topic, 1)])
    assert end == {topic: {0: RECORDS // 2, 1: RECORDS // 2}}
    read = [r.value for rng in K.ranges({}, end) for chunk in K.read_records(broker.settings(), rng) for r in chunk]
    assert sorted(read, key=int) == [b"%d" % n for n in range(RECORDS)]

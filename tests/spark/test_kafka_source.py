"""The ``cdclake-kafka`` Spark data source: the columns of Spark's Kafka source, batch reads of exact ranges,
streams that respect maxOffsetsPerTrigger and see new partitions, and connector = "spark" without its jar."""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest

from cdclake import formats
from cdclake.model.events import INSERT, ROW, ChangeEvent, Column
from cdclake.model.records import Record
from cdclake.pipeline import runner as pipeline
from cdclake.pipeline.config import PipelineConfig, SourceConfig
from cdclake.sources.files import UNREADABLE_HEADER
from cdclake.spark import changelog as CL
from cdclake.spark.changelog import RECORD_SCHEMA
from cdclake.spark.sources import reread

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

# Spark's own Kafka source (KafkaRecordToRowConverter): these columns, in this order, headers only on request.
SPARK_KAFKA_COLUMNS = [("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"),
                       ("offset", "bigint"), ("timestamp", "timestamp"), ("timestampType", "int")]
SPARK_HEADERS = ("headers", "array<struct<key:string,value:binary>>")


def _records(topic: str, partitions: int, per_partition: int) -> list[Record]:
    return [Record(topic=topic, partition=p, offset=i, key=f"k{i}".encode() if i % 3 else None,
                   value=f"{topic}/{p}/{i}".encode(), timestamp=1_714_521_600_000 + i,
                   headers=[("n", str(i).encode())] if i % 2 else [])
            for p in range(partitions) for i in range(per_partition)]


def _reader(spark, broker, **options):
    reader = spark.read.format("cdclake-kafka").option("kafka.bootstrap.servers", broker.servers)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def test_batch_read_has_sparks_kafka_columns_and_exact_records(spark, broker):
    topic = broker.topic(3, "batch")
    records = _records(topic, 3, 25)
    broker.publish(records, 3)
    plain = _reader(spark, broker, subscribe=topic)
    assert [(f.name, f.dataType.simpleString()) for f in plain.schema.fields] == SPARK_KAFKA_COLUMNS
    full = _reader(spark, broker, subscribe=topic, includeHeaders="true")
    assert [(f.name, f.dataType.simpleString()) for f in full.schema.fields] == [*SPARK_KAFKA_COLUMNS, SPARK_HEADERS]
    assert full.schema.simpleString() == spark.createDataFrame([], RECORD_SCHEMA).schema.simpleString()
    rows = sorted(full.collect(), key=lambda r: (r.partition, r.offset))
    assert [(r.topic, r.partition, r.offset, r.key, r.value) for r in rows] == \
        [(r.topic, r.partition, r.offset, r.key, r.value) for r in records]
    assert rows[1].timestamp == dt.datetime(2024, 5, 1, 0, 0, 0, 1000)  # session time zone is UTC
    assert rows[1].timestampType == 0 and [(h.key, h.value) for h in rows[1].headers] == [("n", b"1")]
    # Exact ranges: startingOffsets/endingOffsets per partition (-2 earliest, -1 latest), one Spark
    # partition per Kafka partition range.
    ranged = _reader(spark, broker, subscribe=topic, startingOffsets=f'{{"{topic}": {{"0": 5, "1": -2, "2": 20}}}}',
                     endingOffsets=f'{{"{topic}": {{"0": 10, "1": 3, "2": -1}}}}')
    assert ranged.rdd.getNumPartitions() == 3
    got = sorted((r.partition, r.offset) for r in ranged.select("partition", "offset").collect())
    assert got == [(0, o) for o in range(5, 10)] + [(1, o) for o in range(3)] + [(2, o) for o in range(20, 25)]


def test_subscribe_pattern_reads_every_matching_topic(spark, broker):
    first, second = broker.topic(1, "pat"), broker.topic(2, "pat")
    broker.publish(_records(first, 1, 4) + _records(second, 2, 3), 1)
    prefix = first[:4]
    df = _reader(spark, broker, subscribePattern=f"({first}|{second})")
    assert sorted(df.groupBy("topic").count().collect()) == sorted([(first, 4), (second, 6)])
    assert _reader(spark, broker, subscribePattern=prefix).count() == 0  # whole names only


def test_stream_respects_max_offsets_per_trigger_and_reads_everything_once(spark, broker, tmp_path):
    topic = broker.topic(3, "stream")
    records = _records(topic, 3, 60)
    broker.publish(records, 3)
    batches: list[list[tuple[int, int]]] = []

    def collect(df, batch_id):
        batches.append([(r.partition, r.offset) for r in df.select("partition", "offset").collect()])

    query = (spark.readStream.format("cdclake-kafka").option("kafka.bootstrap.servers", broker.servers)
             .option("subscribe", topic).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "50")
             .load().writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(processingTime="0 seconds").start())
    deadline = time.monotonic() + 180
    try:  # (availableNow would read everything in one batch: the limit holds for ordinary triggers)
        while sum(map(len, batches)) < len(records) and time.monotonic() < deadline and query.isActive:
            time.sleep(0.5)
        time.sleep(2)  # any batch beyond the last record would show up now
    finally:
        query.stop()
    assert query.exception() is None
    seen = [pair for batch in batches for pair in batch]
    assert sorted(seen) == sorted((r.partition, r.offset) for r in records)  # each exactly once
    assert all(len(batch) <= 50 for batch in batches) and len([b for b in batches if b]) >= 4
    first = batches[0]
    assert sorted({p for p, _ in first}) == [0, 1, 2]  # shared over the partitions, not one after another


def test_spark_connector_without_its_jar_is_a_clear_error(spark, broker, tmp_path):
    topic = broker.topic(1, "jar")
    config = PipelineConfig(lake=str(tmp_path / "lake"), name="jar", sources=[
        SourceConfig(format="canal-json", kafka=broker.servers, topics=[topic], connector="spark")])
    config.validate()
    with pytest.raises(ValueError, match=r"connector = \"spark\" needs Spark's Kafka connector on the classpath"):
        pipeline.run(config, spark=spark)


def test_a_decoding_read_gives_the_changelog_of_its_records_and_reads_them_again(spark, broker):
    """Option ``decode``: the changelog of the records, decoded in the task that reads them, as the pipeline reads
    its Kafka sources; its ``input`` rows read the same records again (for a batch that renames or stops a table)."""
    topic = broker.topic(2, "decode")
    fmt = formats.create("canal-json")
    columns = [Column("id", "bigint", key=True, nullable=False)]
    events = [ChangeEvent(kind=ROW, op=INSERT, database="d", table="t", key={"id": i}, after={"id": i},
                          columns=columns, commit_ts=(100 + i) << 18) for i in range(30)]
    records = fmt.encode(events)
    for i, record in enumerate(records):
        record.topic, record.partition = topic, i % 2
    records.append(Record(topic=topic, partition=1, value=b"{not json"))
    # A producer's header named as the captured-records reader marks a line it could not read: no failure here.
    records[3].headers = [(UNREADABLE_HEADER, b"set by a producer")]
    broker.publish(records, 2)
    plain = _reader(spark, broker, subscribe=topic, includeHeaders="true")
    decoded = _reader(spark, broker, subscribe=topic, includeHeaders="true", decode="canal-json", reduce="true")
    assert decoded.schema == CL.CHANGELOG_SCHEMA
    changes = decoded.filter("status = 'event'").toArrow()
    assert sorted(json.loads(k)[0] for k in changes["key"].to_pylist()) == list(range(30))
    (failed,) = decoded.filter("status = 'failed'").collect()
    assert (failed.partition, failed.detail.raw_value) == (1, b"{not json")
    inputs = [r.detail[CL.INPUT] for r in decoded.filter(f"status = '{CL.INPUT}'").collect()]
    assert sorted((json.loads(i)["partition"], json.loads(i)["end"]) for i in inputs) == [(0, 15), (1, 16)]
    again = reread(spark, "cdclake-kafka", {"kafka.bootstrap.servers": broker.servers, "subscribe": topic,
                                            "includeHeaders": "true", "decode": "canal-json"}, inputs)
    assert again.schema == plain.schema
    assert sorted((r.partition, r.offset, r.value) for r in again.collect()) == \
        sorted((r.partition, r.offset, r.value) for r in plain.collect())

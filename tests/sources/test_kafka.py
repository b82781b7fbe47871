"""cdclake.sources.kafka against a real broker: settings and redaction, starting offsets, planning ranges
under a limit, topic patterns, reading exact ranges, and what happens when the broker is away or short."""

from __future__ import annotations

import logging
import re
import threading
import time

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdclake.model.records import Record
from cdclake.sources import kafka as K
from cdclake.sources.files import RECORD_ARROW
from tests.helpers.kafka_broker import free_port

pytestmark = pytest.mark.kafka

SECRET = "s3cr3t-Pa55"


# ------------------------------------------------------------------------------------------ settings

def test_secrets_never_show_but_reach_the_client():
    s = K.ClientSettings("b1:9092,b2:9092", {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                                             "sasl.username": "cdc", "sasl.password": SECRET,
                                             "ssl.key.password": SECRET + "2", "ssl.ca.location": "/ca.pem"})
    for text in (repr(s), str(s), str(s.redacted()), f"{s}"):
        assert SECRET not in text and "***" in text
    assert s.redacted()["sasl.username"] == "cdc" and s.redacted()["ssl.ca.location"] == "/ca.pem"
    assert s.redacted()["bootstrap.servers"] == "b1:9092,b2:9092"
    assert s.config()["sasl.password"] == SECRET and s.config()["bootstrap.servers"] == "b1:9092,b2:9092"
    assert s.scrub(f"bad password {SECRET} for cdc") == "bad password *** for cdc"


def test_a_java_jaas_config_becomes_librdkafka_settings_and_back():
    jaas = f'org.apache.kafka.common.security.scram.ScramLoginModule required username="cdc" password="{SECRET}";'
    s = K.ClientSettings("b:9092", {"sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": jaas})
    config = s.config()
    assert config["sasl.username"] == "cdc" and config["sasl.password"] == SECRET
    assert "sasl.jaas.config" not in config  # librdkafka does not know it
    assert SECRET not in repr(s)
    direct = K.ClientSettings("b:9092", {"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "cdc",
                                         "sasl.password": 'p"w'})
    java = direct.java_options()
    assert java["sasl.jaas.config"] == ('org.apache.kafka.common.security.scram.ScramLoginModule required '
                                        'username="cdc" password="p\\"w";')
    assert "sasl.password" not in java
    assert K.ClientSettings("b:9092", {"sasl.jaas.config": java["sasl.jaas.config"]}).config()["sasl.password"] == 'p"w'
    with pytest.raises(ValueError, match="PlainLoginModule or ScramLoginModule") as info:
        K.ClientSettings("b:9092", {"sasl.jaas.config": f'com.example.Login required token="{SECRET}";'})
    assert SECRET not in str(info.value)


def test_settings_librdkafka_refuses_are_a_clear_error_without_secrets(broker):
    s = K.ClientSettings(broker.servers, {"ssl.truststore.location": "/x.jks", "sasl.password": SECRET})
    with pytest.raises(ValueError, match=r"ssl\.truststore\.location") as info:
        K.KafkaClient(s).topics()
    assert SECRET not in str(info.value) and "librdkafka" in str(info.value)
    with pytest.raises(ValueError, match="bootstrap servers are required"):
        K.ClientSettings(" ")


def test_spark_options_are_read_like_sparks_kafka_source():
    opts = K.SourceOptions.parse({"kafka.bootstrap.servers": "b:9092", "Subscribe": "a, b,a",
                                  "startingOffsets": '{"a": {"0": 5, "1": -2}}', "MAXOFFSETSPERTRIGGER": "100",
                                  "includeHeaders": "TRUE", "kafka.sasl.password": SECRET, "retryTimeoutMs": "1500"},
                                 streaming=True)
    assert opts.subscription.topics == ("a", "b")
    assert opts.starting == {"a": {0: 5, 1: -2}} and opts.ending == "latest"
    assert opts.max_offsets == 100 and opts.include_headers and opts.fail_on_data_loss
    assert opts.settings.options == {"sasl.password": SECRET} and opts.settings.retry_timeout_s == 1.5
    assert SECRET not in repr(opts)
    stream_default = K.SourceOptions.parse({"kafka.bootstrap.servers": "b", "subscribePattern": "cdc-.*"},
                                           streaming=True)
    assert stream_default.starting == "latest" and stream_default.subscription.pattern == "cdc-.*"
    assert K.SourceOptions.parse({"kafka.bootstrap.servers": "b", "subscribe": "a"}, streaming=False).starting \
        == "earliest"
    bad = [({"subscribe": "a"}, "kafka.bootstrap.servers is required"),
           ({"kafka.bootstrap.servers": "b"}, "exactly one of the options subscribe and subscribePattern"),
           ({"kafka.bootstrap.servers": "b", "subscribe": "a", "subscribePattern": "a"}, "exactly one"),
           ({"kafka.bootstrap.servers": "b", "assign": '{"a":[0]}'}, "assign .* not supported"),
           ({"kafka.bootstrap.servers": "b", "subscribePattern": "("}, "not a regular expression"),
           ({"kafka.bootstrap.servers": "b", "subscribe": "a", "startingOffsets": "newest"}, "earliest, latest or"),
           ({"kafka.bootstrap.servers": "b", "subscribe": "a", "startingOffsets": '{"a": {"x": 1}}'}, "bad offset"),
           ({"kafka.bootstrap.servers": "b", "subscribe": "a", "startingOffsets": '{"a": {"0": -3}}'}, "bad offset"),
           ({"kafka.bootstrap.servers": "b", "subscribe": "a", "startingOffsets": '{"a": '}, "not JSON"),
           ({"kafka.bootstrap.servers": "b", "subscribe": "a", "endingOffsets": "earliest"}, "endingOffsets"),
           ({"kafka.bootstrap.servers": "b", "subscribe": "a", "maxOffsetsPerTrigger": "ten"}, "positive number"),
           ({"kafka.bootstrap.servers": "b", "subscribe": "a", "failOnDataLoss": "maybe"}, "true or false")]
    for options, message in bad:
        with pytest.raises(ValueError, match=message):
            K.SourceOptions.parse(options, streaming=True)


# ------------------------------------------------------------------------------------------ planning

def test_plan_end_shares_a_limit_fairly():
    start = {"a": {0: 0, 1: 0, 2: 0}}
    latest = {"a": {0: 10, 1: 500, 2: 500}}
    assert K.plan_end(start, latest, None) == latest
    assert K.plan_end(start, latest, 100) == {"a": {0: 10, 1: 45, 2: 45}}
    assert K.plan_end(start, latest, 2) == {"a": {0: 0, 1: 1, 2: 1}}  # the remainder goes to those furthest behind
    assert K.plan_end(start, latest, 5000) == latest
    # A partition missing from latest (topic deleted) keeps its offset; one past the end stays where it is;
    # one missing from start begins at latest (the caller fills new partitions with their earliest offset).
    assert K.plan_end({"a": {0: 7, 1: 9}, "gone": {0: 3}}, {"a": {0: 20, 1: 4, 2: 8}}, None) == \
        {"a": {0: 20, 1: 9, 2: 8}, "gone": {0: 3}}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=1, max_size=8),
       st.integers(1, 3000))
def test_plan_end_never_exceeds_the_limit_and_starves_nobody(pairs, limit):
    start = {"t": {p: first for p, (first, _) in enumerate(pairs)}}
    latest = {"t": {p: first + extra for p, (first, extra) in enumerate(pairs)}}
    end = K.plan_end(start, latest, limit)["t"]
    take = {p: end[p] - start["t"][p] for p in end}
    lag = {p: latest["t"][p] - start["t"][p] for p in end}
    assert all(0 <= take[p] <= lag[p] for p in take)
    assert sum(take.values()) == min(limit, sum(lag.values()))
    short = [p for p in take if take[p] < lag[p]]  # partitions left with more to read took the most
    assert all(take[p] >= take[q] - 1 for p in short for q in take)


def test_ranges_between_offsets():
    assert K.ranges({"a": {0: 5, 1: 9}}, {"a": {0: 8, 1: 9, 2: 4}}) == [
        K.Range("a", 0, 5, 8), K.Range("a", 2, K.EARLIEST, 4)]
    assert str(K.Range("a", 2, K.EARLIEST, 4)) == "a[2] offsets earliest..3"
    assert K.ranges({"a": {0: 5}}, {"a": {0: 5, 1: 0}}) == []


# ------------------------------------------------------------------------------------------ against the broker

def _records(topic: str, partitions: int, per_partition: int) -> list[Record]:
    out = []
    for p in range(partitions):
        for i in range(per_partition):
            out.append(Record(topic=topic, partition=p, key=None if i % 5 == 0 else f"k{p}-{i}".encode(),
                              value=None if i % 7 == 3 else f"v{p}-{i}".encode(), timestamp=1_714_521_600_000 + i,
                              headers=[("h", f"{i}".encode()), ("empty", None)] if i % 2 else []))
    return out


def _same(got: list[Record], want: list[Record]) -> None:
    assert [(r.topic, r.partition, r.offset, r.key, r.value, r.timestamp, r.headers) for r in got] == \
        [(r.topic, r.partition, r.offset, r.key, r.value, r.timestamp, r.headers) for r in want]


@pytest.fixture(scope="module")
def topic3(broker):
    """A topic of 3 partitions with 40 records each (offsets 0..39), and the records."""
    topic = broker.topic(3, "src")
    records = _records(topic, 3, 40)
    acked = broker.publish(records, 3)
    assert acked == {topic: {0: 40, 1: 40, 2: 40}}
    for p in range(3):
        for offset, record in enumerate(r for r in records if r.partition == p):
            record.offset = offset
    return topic, records


def test_topics_and_starting_offsets(broker, topic3):
    topic, _ = topic3
    other = broker.topic(2, "src")
    with K.KafkaClient(broker.settings()) as client:
        assert client.partitions(K.Subscription.of(topic)) == [(topic, 0), (topic, 1), (topic, 2)]
        both = client.partitions(K.Subscription.of(f"{topic},{other},missing-topic"))
        assert both == sorted([(topic, p) for p in range(3)] + [(other, 0), (other, 1)])
        parts = client.partitions(K.Subscription.of(pattern=re.escape(topic)))
        assert parts == [(topic, 0), (topic, 1), (topic, 2)]
        # The pattern matches whole names only.
        assert client.partitions(K.Subscription.of(pattern=topic[:-2])) == []
        assert {t for t, _ in client.partitions(K.Subscription.of(pattern="src-.*"))} >= {topic, other}
        parts = client.partitions(K.Subscription.of(topic))
        assert client.resolve("earliest", parts) == {topic: {0: 0, 1: 0, 2: 0}}
        assert client.resolve("latest", parts) == {topic: {0: 40, 1: 40, 2: 40}}
        assert client.resolve(K.parse_start(f'{{"{topic}": {{"0": 7, "1": -1}}}}'), parts) == \
            {topic: {0: 7, 1: 40, 2: 0}}  # partition 2 is not named: earliest
        assert client.resolve(K.parse_start(f'{{"{topic}": {{"2": -2}}}}'), parts, missing=K.LATEST) == \
            {topic: {0: 40, 1: 40, 2: 0}}


def test_reads_exact_ranges(broker, topic3):
    topic, records = topic3
    s = broker.settings()
    by_partition = {p: [r for r in records if r.partition == p] for p in range(3)}
    got = [r for chunk in K.read_records(s, K.Range(topic, 1, 5, 17)) for r in chunk]
    _same(got, by_partition[1][5:17])
    chunks = list(K.read_records(s, K.Range(topic, 2, K.EARLIEST, 40), chunk=7))
    assert all(len(c) <= 7 for c in chunks)
    _same([r for c in chunks for r in c], by_partition[2])
    assert list(K.read_records(s, K.Range(topic, 0, 12, 12))) == []
    batches = list(K.read_arrow(s, K.Range(topic, 0, 38, 40)))
    table = pa.Table.from_batches(batches)
    assert table.schema == RECORD_ARROW
    assert table.column("offset").to_pylist() == [38, 39]
    assert table.column("timestampType").to_pylist() == [0, 0]  # CreateTime, as Spark numbers it
    assert table.column("headers").to_pylist()[1] == [{"key": "h", "value": b"39"}, {"key": "empty", "value": None}]
    plain = pa.Table.from_batches(list(K.read_arrow(s, K.Range(topic, 0, 0, 3), include_headers=False)))
    assert plain.schema.names == RECORD_ARROW.names[:-1] and plain.num_rows == 3


def test_a_range_past_the_log_end_is_data_loss_not_a_silent_skip(broker, topic3, caplog):
    topic, records = topic3
    short = broker.settings(retry_timeout_s=2.5)
    with pytest.raises(K.DataLoss, match=rf"{topic}\[0\] offsets 30..49 was planned, but the partition ends at "
                                         r"offset 40.*failOnDataLoss=false"):
        list(K.read_records(short, K.Range(topic, 0, 30, 50)))
    with caplog.at_level(logging.WARNING, logger="cdclake.kafka"):
        got = [r for c in K.read_records(short, K.Range(topic, 0, 30, 50), fail_on_data_loss=False) for r in c]
    _same(got, [r for r in records if r.partition == 0][30:])
    assert "skipping them (failOnDataLoss=false)" in caplog.text
    # Starting past the end: the broker has nothing there yet (it says so at once, every time it is asked);
    # waited for, for the retry window only, then named.
    started = time.monotonic()
    with pytest.raises(K.KafkaSourceError, match=rf"{topic}\[1\]"):
        list(K.read_records(short, K.Range(topic, 1, 45, 50)))
    assert time.monotonic() - started < 15


def test_an_unreachable_broker_is_retried_then_named_without_secrets(caplog):
    servers = f"127.0.0.1:{free_port()}"  # nothing listens there
    s = K.ClientSettings(servers, {"sasl.password": SECRET}, retry_timeout_s=4, request_timeout_s=1)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="cdclake.kafka"), \
            pytest.raises(K.KafkaUnavailable, match=rf"Kafka at {servers} unreachable for \d+s") as info:
        K.KafkaClient(s).topics()
    assert 3.5 <= time.monotonic() - started < 15
    assert "retrying in" in caplog.text and servers in caplog.text
    assert SECRET not in caplog.text and SECRET not in str(info.value)
    with pytest.raises(K.KafkaUnavailable, match=rf"Kafka at {servers}: no records of t\[0\] offsets 0..9"):
        list(K.read_records(s, K.Range("t", 0, 0, 10)))


def test_a_frozen_broker_is_waited_for_and_nothing_is_lost(broker, monkeypatch, caplog):
    topic = broker.topic(1, "frozen")
    records = _records(topic, 1, 300)
    broker.publish(records, 1)
    for offset, record in enumerate(records):
        record.offset = offset
    monkeypatch.setattr(K, "WARN_EVERY_S", 1.0)
    got: list[Record] = []
    thaw = threading.Timer(4.0, lambda: None)
    with caplog.at_level(logging.WARNING, logger="cdclake.kafka"):
        with broker.paused():
            reader = threading.Thread(target=lambda: got.extend(
                r for c in K.read_records(broker.settings(), K.Range(topic, 0, 0, 300), chunk=50) for r in c))
            reader.start()
            thaw.start()
            thaw.join()
            assert reader.is_alive() and not got  # nothing answers while frozen
        reader.join(60)
        assert not reader.is_alive()
        with K.KafkaClient(broker.settings()) as client:
            assert client.latest([(topic, 0)]) == {topic: {0: 300}}
    _same(got, records)
    assert f"Kafka at {broker.servers}: waiting" in caplog.text


def test_produce_keeps_keys_headers_timestamps_and_order(broker):
    topic = broker.topic(2, "prod")
    records = [Record(topic=topic, partition=i % 2, key=b"k%d" % i, value=b"v%d" % i, timestamp=1_700_000_000_000 + i,
                      headers=[("a", b"1")]) for i in range(30)]
    acked = broker.publish(records)
    assert acked == {topic: {0: 15, 1: 15}}
    got = [r for p in (0, 1) for c in K.read_records(broker.settings(), K.Range(topic, p, 0, 15)) for r in c]
    assert [(r.partition, r.key, r.value, r.timestamp, r.headers) for r in got] == \
        [(r.partition, r.key, r.value, r.timestamp, r.headers) for r in sorted(records, key=lambda r: r.partition)]
    with pytest.raises(K.KafkaSourceError, match=f"topic {topic} has 2 partitions, 3 are needed"):
        K.ensure_topics(broker.settings(), {topic: 3})


def test_retrying_backs_off_on_transient_errors_only(caplog):
    from confluent_kafka import KafkaError, KafkaException

    s = K.ClientSettings("b:9092", {"sasl.password": SECRET}, retry_timeout_s=60)
    now = [0.0]
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    answers = iter([KafkaException(KafkaError(KafkaError._TRANSPORT, f"refused ({SECRET})")),
                    KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN)), "ok"])

    def call() -> str:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    with caplog.at_level(logging.WARNING, logger="cdclake.kafka"):
        assert K.retrying(s, "asking", call, sleep=sleep, clock=lambda: now[0]) == "ok"
    assert sleeps == [0.5, 1.0]
    assert caplog.text.count("Kafka at b:9092 unreachable while asking") == 2 and SECRET not in caplog.text

    def denied() -> None:
        raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "not allowed"))

    with pytest.raises(K.KafkaSourceError, match="Kafka at b:9092: asking failed: not allowed"):
        K.retrying(s, "asking", denied, sleep=sleep, clock=lambda: now[0])
    assert sleeps == [0.5, 1.0]  # no retry for an error that will not pass

    def down() -> None:
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "refused"))

    with pytest.raises(K.KafkaUnavailable, match=r"unreachable for 6\ds while asking: refused; giving up"):
        K.retrying(s, "asking", down, sleep=sleep, clock=lambda: now[0])
    assert max(sleeps) == 10.0  # the backoff is capped

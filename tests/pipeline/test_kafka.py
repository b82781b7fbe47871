"""The pipeline reading Kafka: a simulated database's workload → a broker (several partitions, replays) →
``cdclake run`` → Delta tables equal to the simulation's final state; resuming where the lake says after the
Spark checkpoint is lost; a broker that freezes mid-run; ``capture`` then ``run --input`` gives the same
tables as reading the topic."""

from __future__ import annotations

import itertools
import shutil
import threading
from pathlib import Path

import pytest
from deltalake import DeltaTable
from typer.testing import CliRunner

from cdclake import formats
from cdclake import simulator as workload
from cdclake.cli.main import app
from cdclake.formats.avro import registry as confluent
from cdclake.model.records import Record, read_file
from cdclake.pipeline import runner as pipeline
from cdclake.pipeline.config import PipelineConfig, SourceConfig
from cdclake.pipeline.failures import stopping_error
from cdclake.simulator.lakecheck import differences as lake_differences
from cdclake.sources.files import UNREADABLE_HEADER
from tests.helpers.lake import lake_rows
from tests.helpers.registries import APICURIO_FORMS, FakeRegistry, as_apicurio_framed

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

# Every registered format, and the variants that change what arrives.
CASES = [(name, {}) for name in formats.names()] + [
    ("canal-json", {"flavour": "tidb"}),
    ("debezium-json", {"schemas-enable": "false"}),
]
ENCODER_ONLY = {"flavour", "schemas-enable"}  # what the producer was; the decoder reads either


def _ids(cases: list[tuple[str, dict]]) -> list[str]:
    return [name + "".join(f"-{v}" for v in options.values()) for name, options in cases]


def _generate(name: str, options: dict, root: Path, events: int, partitions: int, replays: float,
              prefix: str, **settings) -> tuple[workload.Generated, dict]:
    """A workload in this format, its records renamed onto topics no other test uses; and the options the
    decoder needs."""
    options = dict(options)
    if "registry" in {o.name for o in formats.get(name).options}:
        options["registry"] = str(root / "registry")
    generated = workload.generate(name, events=events, tables=3, seed=11, options=options, partitions=partitions,
                                  replays=replays, **settings)
    for record in generated.records:
        record.topic = f"{prefix}.{record.topic}"
    decode = {k: v for k, v in options.items() if k not in ENCODER_ONLY and k in {o.name for o in
                                                                                    formats.get(name).options}}
    return generated, decode


def _topics(records: list[Record]) -> list[str]:
    return sorted({r.topic for r in records})


def _kafka_config(lake: Path, broker, name: str, topics: list[str], decode: dict, **source) -> PipelineConfig:
    config = PipelineConfig(lake=str(lake), name="kafka", sources=[
        SourceConfig(format=name, kafka=broker.servers, topics=topics, options=decode, **source)])
    config.validate()
    return config


def _applied_records(lake: Path) -> int:
    progress = DeltaTable(str(lake / "_cdclake" / "progress")).to_pyarrow_table(columns=["records"])
    return sum(progress.column("records").to_pylist())


def test_canal_json_through_three_partitions_with_replays(spark, broker, tmp_path):
    name, options = "canal-json", {"flavour": "tidb"}  # TiCDC's canal-json orders replays and key moves
    generated, decode = _generate(name, options, tmp_path, 1500, 3, 0.1, broker.topic(1, "cj"))
    assert generated.manifest["records"] > 1500 * 1.05  # the replays are there
    broker.publish(generated.records, 3)
    config = _kafka_config(tmp_path / "lake", broker, name, _topics(generated.records), decode,
                           max_records_per_batch=700)
    summary = pipeline.run(config, spark=spark)
    assert summary.total("records") == len(generated.records)
    assert summary.total("dead_letters") == 0 and len(summary.batches) >= 2
    problems = lake_differences(str(tmp_path / "lake"), generated.expected, generated.key_names)
    assert not problems, "\n".join(problems)
    # Caught up: a second run finds nothing new and changes nothing.
    again = pipeline.run(config, spark=spark)
    assert again.total("records") == 0
    assert _applied_records(tmp_path / "lake") == len(generated.records)


@pytest.mark.parametrize(("name", "options"), CASES, ids=_ids(CASES))
def test_every_format_through_kafka_reaches_the_expected_state(spark, broker, tmp_path, name, options):
    profile = workload.profile_for(name, options)
    # Formats that cannot order a key's changes across partitions (or make a redelivery harmless) are given
    # what they can be correct with: one partition, no replays (`cdclake generate` says the same).
    partitions = 3 if profile.ordered else 1
    replays = 0.1 if profile.replay_safe else 0.0
    generated, decode = _generate(name, options, tmp_path, 1500, partitions, replays, broker.topic(1, "f"))
    broker.publish(generated.records, partitions)
    config = _kafka_config(tmp_path / "lake", broker, name, _topics(generated.records), decode)
    summary = pipeline.run(config, spark=spark)
    assert summary.total("records") == len(generated.records)
    assert summary.total("dead_letters") == 0
    problems = lake_differences(str(tmp_path / "lake"), generated.expected, generated.key_names)
    assert not problems, "\n".join(problems)


def _by_partition(records: list[Record]) -> dict[tuple[str, int], list[Record]]:
    out: dict[tuple[str, int], list[Record]] = {}
    for record in records:
        out.setdefault((record.topic, record.partition), []).append(record)
    return out


def test_a_lost_checkpoint_resumes_where_the_lake_stopped(spark, broker, tmp_path):
    generated, decode = _generate("canal-json", {"flavour": "tidb"}, tmp_path, 1200, 3, 0.1, broker.topic(1, "ck"))
    parts = _by_partition(generated.records)
    first = [r for rs in parts.values() for r in rs[: len(rs) // 2]]
    rest = [r for rs in parts.values() for r in rs[len(rs) // 2:]]
    broker.publish(first, 3)
    lake = tmp_path / "lake"
    config = _kafka_config(lake, broker, "canal-json", _topics(generated.records), decode)
    assert pipeline.run(config, spark=spark).total("records") == len(first)
    shutil.rmtree(config.checkpoint_dir())  # Spark's checkpoint is gone; the lake remembers
    broker.publish(rest, 3)
    resumed = pipeline.run(config, spark=spark)
    assert resumed.total("records") == len(rest)  # not one record of the first half again, none skipped
    assert _applied_records(lake) == len(generated.records)
    problems = lake_differences(str(lake), generated.expected, generated.key_names)
    assert not problems, "\n".join(problems)


def test_a_start_at_the_latest_offset_holds_until_a_batch_reads_past_it(spark, broker, tmp_path):
    """``starting_offsets = "latest"``: the first run pins the end it found, so what arrives before the next run
    is read by it, though the first run had nothing to read (a run every hour from cron, say)."""
    generated, decode = _generate("canal-json", {"flavour": "tidb"}, tmp_path, 900, 2, 0.0, broker.topic(1, "lt"))
    parts = _by_partition(generated.records)
    before = [r for rs in parts.values() for r in rs[: len(rs) // 3]]
    broker.publish(before, 2)
    config = _kafka_config(tmp_path / "lake", broker, "canal-json", _topics(generated.records), decode,
                           starting_offsets="latest")
    assert pipeline.run(config, spark=spark).total("records") == 0  # it starts at the end
    arrived = [r for rs in parts.values() for r in rs[len(rs) // 3: 2 * len(rs) // 3]]
    broker.publish(arrived, 2)
    assert pipeline.run(config, spark=spark).total("records") == len(arrived)
    broker.publish([r for rs in parts.values() for r in rs[2 * len(rs) // 3:]], 2)
    assert pipeline.run(config, spark=spark).total("records") == len(generated.records) - len(before) - len(arrived)
    assert _applied_records(tmp_path / "lake") == len(generated.records) - len(before)


def test_a_kafka_source_that_cannot_be_read_fails_before_spark_starts(broker, tmp_path, monkeypatch):
    def no_spark(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("Spark was started for a run that could not read its source")

    monkeypatch.setattr(pipeline, "get_session", no_spark)
    topic = broker.topic(1, "pre")
    for source, message in [
        ({"topic_pattern": "no-such-prefix-.*"}, r"has no topic matching 'no-such-prefix-\.\*'"),
        ({"topics": [topic, f"{topic}x"]}, rf"has no topic {topic}x$"),
        ({"topics": [topic], "starting_offsets": f'{{"{topic}": {{"1": 0}}}}'}, rf"name {topic}\[1\], which"),
    ]:
        config = PipelineConfig(lake=str(tmp_path / "lake"), name="kafka", sources=[
            SourceConfig(format="canal-json", kafka=broker.servers, **source)])
        with pytest.raises(ValueError, match=message):
            pipeline.run(config)


def test_a_broker_down_longer_than_the_retry_window_stops_the_run(spark, broker, tmp_path):
    generated, decode = _generate("canal-json", {}, tmp_path, 1500, 2, 0.0, broker.topic(1, "rw"))
    broker.publish(generated.records, 2)
    config = _kafka_config(tmp_path / "lake", broker, "canal-json", _topics(generated.records), decode,
                           max_records_per_batch=100, kafka_retry_seconds=2)
    assert config.sources[0].client_settings().retry_timeout_s == 2
    stop = threading.Event()

    def freeze() -> None:  # the default window would wait 600 s: the test's timeout says the 2 s were kept
        if not stop.wait(3):
            with broker.paused():
                stop.wait(60)

    outage = threading.Thread(target=freeze)
    outage.start()
    try:
        with pytest.raises(Exception) as failure:  # Spark wraps the source's error
            pipeline.run(config, spark=spark)
    finally:
        stop.set()
        outage.join()
    assert f"Kafka at {broker.servers}" in (stopping_error(failure.value) or ("", ""))[1], failure.value
    progress = tmp_path / "lake" / "_cdclake" / "progress"
    assert not progress.exists() or _applied_records(tmp_path / "lake") < len(generated.records)


def test_a_broker_frozen_mid_run_is_waited_for(spark, broker, tmp_path):
    generated, decode = _generate("debezium-json", {}, tmp_path, 900, 3, 0.0, broker.topic(1, "fz"))
    broker.publish(generated.records, 3)
    config = _kafka_config(tmp_path / "lake", broker, "debezium-json", _topics(generated.records), decode,
                           max_records_per_batch=150)
    froze = threading.Event()

    def freeze() -> None:
        if stop.wait(3):
            return
        with broker.paused():
            froze.set()
            stop.wait(5)

    stop = threading.Event()
    outage = threading.Thread(target=freeze)
    outage.start()
    try:
        summary = pipeline.run(config, spark=spark)
    finally:
        stop.set()
        outage.join()
    assert froze.is_set(), "the run ended before the broker froze: make the workload larger"
    assert summary.total("records") == len(generated.records)
    problems = lake_differences(str(tmp_path / "lake"), generated.expected, generated.key_names)
    assert not problems, "\n".join(problems)


def _tables(lake: Path, expected: dict) -> dict:
    return {ident: lake_rows(str(lake), *ident) for ident, rows in expected.items() if rows}


def test_capture_then_run_input_gives_the_tables_of_the_topic(spark, broker, tmp_path):
    generated, decode = _generate("canal-json", {"flavour": "tidb"}, tmp_path, 800, 3, 0.1, broker.topic(1, "cap"))
    broker.publish(generated.records, 3)
    (topic,) = _topics(generated.records)
    runner = CliRunner()
    captured = tmp_path / "captured"
    result = runner.invoke(app, ["capture", "--kafka", broker.servers, "--topic", topic, "--out", str(captured)])
    assert result.exit_code == 0, result.output
    assert f"captured {len(generated.records):,} records from 3 partitions of topic(s) {topic}" in result.output
    assert sorted(p.name for p in captured.iterdir()) == [f"{topic}.{p:04d}.jsonl" for p in range(3)]
    from_topic, from_files = tmp_path / "lake-topic", tmp_path / "lake-files"
    pipeline.run(_kafka_config(from_topic, broker, "canal-json", [topic], decode), spark=spark)
    files_config = PipelineConfig(lake=str(from_files), name="files", sources=[
        SourceConfig(format="canal-json", input=str(captured), options=decode)])
    summary = pipeline.run(files_config, spark=spark)
    assert summary.total("records") == len(generated.records)
    assert _tables(from_files, generated.expected) == _tables(from_topic, generated.expected)
    problems = lake_differences(str(from_files), generated.expected, generated.key_names)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", ["canal-json", "debezium-avro"])
def test_a_message_with_a_header_named_as_the_file_reader_marks_a_line_is_applied(spark, broker, tmp_path, name):
    """Only the captured-records reader marks a line it could not read, with a header of its own name; a Kafka
    message that carries a header of that name is decoded and applied like any other, also by a format that reads
    headers: Debezium Avro with Apicurio Registry's framing (debezium.md §3), its ids in headers (2.x serializers'
    default), in 8 bytes (2.x's Kafka Connect converter) and in 4 (3.x), mixed as in a migration, each schema fetched
    by the executors from the registry's core API."""
    partitions = 2 if workload.profile_for(name, {}).ordered else 1
    generated, decode = _generate(name, {}, tmp_path, 300, partitions, 0.0, broker.topic(1, "hdr"))
    with FakeRegistry() as apicurio:
        if name == "debezium-avro":
            schemas = confluent.registry_from(decode["registry"])
            forms = itertools.cycle(APICURIO_FORMS)
            generated.records = [reframed for record in generated.records
                                 for reframed in as_apicurio_framed([record], schemas, apicurio, next(forms))]
            decode = {"registry": apicurio.url(), "framing": "apicurio"}
        for record in generated.records[::3]:
            record.headers = [*record.headers, (UNREADABLE_HEADER, b"set by a producer")]
        broker.publish(generated.records, partitions)
        config = _kafka_config(tmp_path / "lake", broker, name, _topics(generated.records), decode)
        summary = pipeline.run(config, spark=spark)
    assert summary.total("records") == len(generated.records) and summary.total("dead_letters") == 0
    problems = lake_differences(str(tmp_path / "lake"), generated.expected, generated.key_names)
    assert not problems, "\n".join(problems)


def test_dead_letters_of_kafka_keep_the_headers_and_timestamps_for_a_replay(spark, broker, tmp_path):
    """Read by cdclake's connector, which reads headers only for a format that decodes them: a dead letter's record
    is read again with them (but a header named as the file reader marks a line, which the connector drops)."""
    topic = broker.topic(1, "dead")
    sent = [Record(value=b'{"truncated": ' + b"%d" % i, key=b"k%d" % i, topic=topic, offset=i,
                   timestamp=1_700_000_000_000 + i,
                   headers=[("h", b"\x00%d" % i), (UNREADABLE_HEADER, None), ("h", b"")]) for i in range(3)]
    broker.publish(sent)
    summary = pipeline.run(_kafka_config(tmp_path / "lake", broker, "canal-json", [topic], {}), spark=spark)
    assert summary.total("dead_letters") == 3
    out = tmp_path / "dead.jsonl"
    written = CliRunner().invoke(app, ["dead-letters", str(tmp_path / "lake"), "--limit", "0", "--write", str(out)])
    assert written.exit_code == 0, written.output
    for record in sent:
        record.headers = [h for h in record.headers if h[0] != UNREADABLE_HEADER]
    assert sorted((line.record for line in read_file(out)), key=lambda r: r.offset) == sent
    kinds = DeltaTable(str(tmp_path / "lake" / "_cdclake" / "dead_letters")).to_pyarrow_table()["timestamp_type"]
    assert kinds.to_pylist() == [0, 0, 0]  # CreateTime, as the producer set them

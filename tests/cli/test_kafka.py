"""The command line and PIPELINE.toml for Kafka: `generate --kafka`, `capture`, the Kafka flags of `run`, and
the Kafka keys of a pipeline file."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from cdclake.cli.main import app
from cdclake.model.records import Record, read_file
from cdclake.pipeline import config as C
from cdclake.sources import kafka as K

pytestmark = pytest.mark.kafka

SECRET = "s3cr3t-Pa55"


def _read_all(broker, topic: str, partitions: int) -> list[Record]:
    with K.KafkaClient(broker.settings()) as client:
        end = client.latest([(topic, p) for p in range(partitions)])
    return [r for rng in K.ranges({}, end) for chunk in K.read_records(broker.settings(), rng) for r in chunk]


def test_generate_produces_the_records_it_writes(broker, tmp_path):
    out = tmp_path / "gen"
    result = CliRunner().invoke(app, ["generate", "--format", "ticdc-open", "--out", str(out), "--events", "400",
                                      "--partitions", "3", "--replays", "0.1", "--kafka", broker.servers])
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert f"produced {manifest['records']:,} records to Kafka at {broker.servers}: cdclake-sim (3 partitions each)" \
        in result.output
    with K.KafkaClient(broker.settings()) as client:
        assert client.partitions(K.Subscription.of("cdclake-sim")) == [("cdclake-sim", p) for p in range(3)]
    written = [line.record for path in sorted((out / "records").iterdir()) for line in read_file(path)]
    produced = _read_all(broker, "cdclake-sim", 3)
    # The same records, each in the partition and at the offset the simulated producer gave it.
    assert [(r.partition, r.offset, r.key, r.value, r.headers) for r in produced] == \
        [(r.partition, r.offset, r.key, r.value, r.headers) for r in written]


def test_capture_takes_at_most_max_records_shared_over_partitions(broker, tmp_path):
    topic = broker.topic(3, "capmax")
    broker.publish([Record(topic=topic, partition=p, value=b"%d" % i) for p in range(3) for i in range(10)], 3)
    out = tmp_path / "cap"
    result = CliRunner().invoke(app, ["capture", "--kafka", broker.servers, "--topic", topic, "--out", str(out),
                                      "--max-records", "10", "--starting-offsets", f'{{"{topic}": {{"1": 8}}}}'])
    assert result.exit_code == 0, result.output
    counts = {p.name: sum(1 for _ in read_file(p)) for p in sorted(out.iterdir())}
    # Partition 1 has 2 records left: it gives them all; the other two share the rest.
    assert counts == {f"{topic}.0000.jsonl": 4, f"{topic}.0001.jsonl": 2, f"{topic}.0002.jsonl": 4}
    assert f"{topic}[1] offsets 8..9: 2 records" in result.output
    assert f"captured 10 records from 3 partitions of topic(s) {topic}" in result.output
    lines = [line.record for line in read_file(out / f"{topic}.0001.jsonl")]
    assert [(r.topic, r.partition, r.offset, r.value) for r in lines] == [(topic, 1, 8, b"8"), (topic, 1, 9, b"9")]


def test_capture_says_when_a_start_is_past_a_partitions_end(broker, tmp_path, caplog):
    topic = broker.topic(2, "past")
    broker.publish([Record(topic=topic, partition=p, value=b"%d" % i) for p in range(2) for i in range(3)], 2)
    result = CliRunner().invoke(app, ["capture", "--kafka", broker.servers, "--topic", topic, "--out",
                                      str(tmp_path / "cap"), "--starting-offsets", f'{{"{topic}": {{"1": 9}}}}'])
    assert result.exit_code == 0, result.output
    assert "captured 3 records from 1 partition" in result.output
    assert f"{topic}[1]: starting offset 9 is past the partition's end 3: nothing captured from it" in caplog.text


def test_capture_and_run_say_plainly_what_is_wrong(broker, tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["capture", "--kafka", broker.servers, "--topic", "no-such-topic", "--out",
                                 str(tmp_path / "x")])
    assert result.exit_code == 2 and "has no topic no-such-topic" in result.output
    topic = broker.topic(2, "named")
    result = runner.invoke(app, ["capture", "--kafka", broker.servers, "--topic", f"{topic},{topic}x", "--out",
                                 str(tmp_path / "x")])
    assert result.exit_code == 2 and f"has no topic {topic}x" in result.output, result.output  # not {topic} alone
    for offsets, named in ((f'{{"{topic}x": {{"0": 1}}}}', f"{topic}x[0]"),
                           (f'{{"{topic}": {{"2": 0}}}}', f"{topic}[2]")):
        result = runner.invoke(app, ["capture", "--kafka", broker.servers, "--topic", topic, "--out",
                                     str(tmp_path / "x"), "--starting-offsets", offsets])
        assert result.exit_code == 2, result.output  # not the other partitions from earliest without a word
        assert f"starting offsets name {named}, which the subscription at Kafka" in result.output
    result = runner.invoke(app, ["capture", "--kafka", broker.servers, "--out", str(tmp_path / "x")])
    assert result.exit_code == 2 and "either topics or a topic pattern" in result.output
    result = runner.invoke(app, ["capture", "--kafka", broker.servers, "--topic", "t", "--out", str(tmp_path),
                                 "--kafka-option", f"sasl.password{SECRET}"])
    assert result.exit_code == 2 and "expected KEY=VALUE" in result.output
    result = runner.invoke(app, ["capture", "--kafka", broker.servers, "--topic", "t", "--out", str(tmp_path),
                                 "--kafka-option", f"sasl.jaas.config=x password=\"{SECRET}\""])
    assert result.exit_code == 2 and SECRET not in result.output
    (tmp_path / "in").mkdir()
    for args, message in [
        (["--input", str(tmp_path / "in"), "--kafka", broker.servers, "--topic", "t"], "one of --input and --kafka"),
        ([], "one of --input and --kafka"),
        (["--kafka", broker.servers], "either topics or a topic pattern"),
        (["--kafka", broker.servers, "--topic", "t", "--starting-offsets", "oldest"], "earliest, latest or JSON"),
        (["--kafka", broker.servers, "--topic", "t", "--connector", "flink"], "connector must be one of"),
        (["--kafka", broker.servers, "--topic-pattern", "(", "--topic", "t"], "either topics or a topic pattern"),
    ]:
        result = runner.invoke(app, ["run", "--format", "canal-json", "--lake", str(tmp_path / "lake"), *args])
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output, (args, result.output)


def test_an_unreachable_kafka_is_given_up_after_the_retry_window(tmp_path):
    # Nothing listens on port 9: without the flag, run and capture would retry for 10 minutes.
    for command in (["run", "--format", "canal-json", "--lake", str(tmp_path / "lake")],
                    ["capture", "--out", str(tmp_path / "out")]):
        done = subprocess.run([sys.executable, "-m", "cdclake", *command, "--kafka", "127.0.0.1:9", "--topic", "t",
                               "--kafka-retry-seconds", "1.5"], capture_output=True, text=True, timeout=120,
                              check=False)
        assert done.returncode == 4, done.stderr  # unreachable, not a usage error (2)
        assert done.stderr.strip().splitlines()[-1].startswith("cdclake: Kafka at 127.0.0.1:9 unreachable for ")
        assert "giving up" in done.stderr and "Spark" not in done.stderr, done.stderr


def test_generate_refuses_a_misspelt_kafka_setting_before_it_simulates(tmp_path):
    result = CliRunner().invoke(app, ["generate", "-f", "canal-json", "--out", str(tmp_path / "gen"), "--kafka",
                                      "127.0.0.1:9", "--kafka-option", "linger.msec=5"])
    assert result.exit_code == 2 and "linger.msec" in result.output and "refused" in result.output, result.output
    assert not (tmp_path / "gen").exists()


def test_pipeline_file_kafka_keys(tmp_path):
    path = tmp_path / "PIPELINE.toml"
    path.write_text(f"""
lake = "{tmp_path / 'lake'}"
[[source]]
name = "pay"
format = "ticdc-open"
kafka = "b1:9092,b2:9092"
topics = ["a", "b"]
starting_offsets = {{ a = {{ "0" = 42 }} }}
max_records_per_batch = 1000
kafka_retry_seconds = 30
[source.kafka_options]
"security.protocol" = "SASL_SSL"
"sasl.password" = "{SECRET}"
"enable.ssl.certificate.verification" = false

[[source]]
name = "orders"
format = "canal-json"
kafka = "b1:9092"
topic_pattern = "orders-.*"
connector = "spark"
""")
    config = C.load(str(path))
    config.validate()
    pay, orders = config.sources
    assert (pay.kafka, pay.topics, pay.input, pay.max_records_per_batch) == ("b1:9092,b2:9092", ["a", "b"], None, 1000)
    assert json.loads(pay.starting_offsets) == {"a": {"0": 42}}
    assert K.parse_start(pay.starting_offsets) == {"a": {0: 42}}
    assert pay.kafka_options == {"security.protocol": "SASL_SSL", "sasl.password": SECRET,
                                 "enable.ssl.certificate.verification": "false"}
    assert SECRET not in repr(config) and pay.connector == "cdclake"
    assert (orders.topic_pattern, orders.topics, orders.connector, orders.starting_offsets) == \
        ("orders-.*", [], "spark", "earliest")
    assert (pay.client_settings().retry_timeout_s, orders.client_settings().retry_timeout_s) == (30, 600)
    for wrong, message in (("0", "retry window must be more than 0 seconds, not 0"),
                           ('"soon"', "'kafka_retry_seconds' must be a number, not 'soon'")):
        path.write_text(path.read_text().replace("kafka_retry_seconds = 30", f"kafka_retry_seconds = {wrong}"))
        with pytest.raises(ValueError, match=message):
            C.load(str(path)).validate()
        path.write_text(path.read_text().replace(f"kafka_retry_seconds = {wrong}", "kafka_retry_seconds = 30"))
    path.write_text(path.read_text().replace('connector = "spark"', 'connector = "flink"'))
    with pytest.raises(ValueError, match="source orders: connector must be one of cdclake, spark"):
        C.load(str(path)).validate()
    path.write_text(f'lake = "{tmp_path}"\n[[source]]\nformat = "canal-json"\ntopics = "a,b"\n')
    with pytest.raises(ValueError, match="give either input or kafka"):
        C.load(str(path)).validate()
    path.write_text(f'lake = "{tmp_path}"\n[[source]]\nformat = "canal-json"\ninput = "{tmp_path}"\n'
                    'kafka_retry_seconds = 5\n')
    with pytest.raises(ValueError, match="topics and kafka_retry_seconds need kafka"):
        C.load(str(path)).validate()


def test_docstring_example_of_the_pipeline_file_loads(tmp_path):
    text = C.__doc__.split("```toml", 1)[1].split("```", 1)[0]
    path = tmp_path / "PIPELINE.toml"
    path.write_text(text)
    config = C.load(str(path))
    kafka_source = next(s for s in config.sources if s.kafka)
    assert kafka_source.topics == ["tidb-payments"] and kafka_source.kafka_options["sasl.mechanism"] == "SCRAM-SHA-512"
    assert config.sources[0].input == "/data/in/orders" and config.sources[0].kafka is None


@pytest.mark.spark
def test_a_run_caught_up_with_its_topic_says_only_that(broker, tmp_path):
    """A second run with nothing new starts no query: one started only to be stopped left Spark's helper process for
    the source to fail connecting to it, with a traceback on the console."""
    topic = broker.topic(1, "idle")
    broker.publish([Record(topic=topic, value=json.dumps({
        "database": "d", "table": "t", "type": "INSERT", "isDdl": False, "es": 1, "ts": 2, "pkNames": ["id"],
        "mysqlType": {"id": "bigint"}, "data": [{"id": "1"}], "old": None}).encode())])
    command = [sys.executable, "-m", "cdclake", "run", "--format", "canal-json", "--kafka", broker.servers,
               "--topic", topic, "--lake", str(tmp_path / "lake")]
    jvm = "WARNING: Using incubator modules: jdk.incubator.vector"
    for summary in ("done: 1 batch, 1 record", "done: 0 batches, 0 records"):
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0, done.stderr
        lines = [line for line in done.stderr.splitlines() if line != jvm]
        said = [line.split(" ", 1)[1] if line[:2].isdigit() else line for line in lines]  # past the time
        assert said[-1].startswith(summary) and all(line.startswith(("starting Spark", "batch ", "done: "))
                                                    for line in said), \
            done.stderr

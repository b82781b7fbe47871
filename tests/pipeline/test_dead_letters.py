"""Dead letters keep everything a replay needs: `cdclake dead-letters --write` gives back each record byte for byte
(key, value, headers in order with duplicates, timestamp), and `cdclake run --input` of that file applies them once
their cause is fixed. Through real Spark, real Delta tables and a real registry on loopback."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from cdclake import simulator as workload
from cdclake.cli.main import app
from cdclake.formats.avro import registry as confluent
from cdclake.model.records import Record, captured_line, read_file, write_records
from cdclake.pipeline import runner as pipeline
from cdclake.pipeline.config import PipelineConfig, SourceConfig
from cdclake.pipeline.positions import SourceRead
from cdclake.simulator.lakecheck import differences
from tests.helpers.registries import FakeRegistry, as_apicurio_framed

pytestmark = pytest.mark.spark


def _run(spark, input_dir, lake, registry: str, name: str) -> pipeline.RunSummary:
    return pipeline.run(PipelineConfig(lake=str(lake), name=name, sources=[
        SourceConfig(format="debezium-avro", input=str(input_dir),
                     options={"registry": registry + "/apis/registry/v3", "framing": "apicurio"})]), spark=spark)


@pytest.mark.parametrize("batches_of", ["decoded by the source", "records"])
def test_dead_letters_written_out_are_the_records_byte_for_byte_and_replay(spark, tmp_path, monkeypatch, batches_of):
    if batches_of == "records":  # as Spark's own Kafka source hands a batch over: the pipeline decodes it
        monkeypatch.setattr(SourceRead, "decodes", property(lambda self: False))
    schemas = str(tmp_path / "schemas")
    generated = workload.generate("debezium-avro", events=30, tables=2, seed=7, options={"registry": schemas})
    with FakeRegistry() as apicurio, FakeRegistry() as empty:
        # Apicurio 2.x's default framing: the schema's id in a header. Each record also gets a timestamp and headers
        # of its producer's around the registry's: one name twice, a null value, an empty name, bytes of no text.
        framed = as_apicurio_framed(generated.records, confluent.registry_from(schemas), apicurio, "headers")
        originals = [Record(key=r.key, value=r.value, topic=r.topic, partition=r.partition, offset=r.offset,
                            timestamp=1_700_000_000_000 + 7 * i,
                            headers=[("trace", b"\x00\xff\n"), *r.headers, ("trace", None), ("", b"")])
                     for i, r in enumerate(framed)]
        (tmp_path / "in").mkdir()
        write_records(tmp_path / "in" / "records.jsonl", originals)
        # A registry without the schemas: every record that carries a change is a dead letter.
        first = _run(spark, tmp_path / "in", tmp_path / "lake", empty.url(), "first")
        failed = [r for r in originals if r.value is not None]  # a Debezium tombstone carries no change
        assert first.total("dead_letters") == len(failed) == first.total("failed") > 20

        (tmp_path / "replay").mkdir()
        out = tmp_path / "replay" / "dead.jsonl"
        written = CliRunner().invoke(app, ["dead-letters", str(tmp_path / "lake"), "--limit", "0", "--write", str(out)])
        assert written.exit_code == 0, written.output
        lines = [line for line in out.read_bytes().split(b"\n") if line]
        key = lambda r: (r.topic, r.partition, r.offset)  # noqa: E731
        assert sorted(lines) == sorted(captured_line(r) for r in failed)
        assert sorted((f.record for f in read_file(out)), key=key) == sorted(failed, key=key)

        # With the registry that has them, the file applies: the lake reaches the workload's state.
        replayed = _run(spark, tmp_path / "replay", tmp_path / "lake", apicurio.url(), "replay")
    assert (replayed.total("records"), replayed.total("dead_letters")) == (len(failed), 0)
    problems = differences(str(tmp_path / "lake"), generated.expected, generated.key_names)
    assert not problems, "\n".join(problems)

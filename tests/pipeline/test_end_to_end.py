"""Every registered format, end to end: a simulated database's random workload (inserts, updates, deletes,
key changes, DDL, several tables, every column type the format carries) → records in files →
the pipeline on Spark → Delta tables equal to the simulation's own final state, value for value."""

from __future__ import annotations

import itertools
import json

import pytest

from cdclake import formats
from cdclake import simulator as workload
from cdclake.formats.avro import registry as confluent
from cdclake.pipeline import runner as pipeline
from cdclake.pipeline.config import PipelineConfig, SourceConfig
from cdclake.simulator.lakecheck import differences
from tests.helpers.registries import APICURIO_FORMS, FakeRegistry, as_apicurio_framed

pytestmark = pytest.mark.spark

# (format, options): every registered format, and the variants that change what arrives.
CASES = [(name, {}) for name in formats.names()] + [
    ("canal-json", {"flavour": "tidb"}),
    ("debezium-json", {"schemas-enable": "false"}),
    ("debezium-avro", {"time-precision-mode": "structured"}),
    # schemas in the AWS Glue Schema Registry (its stand-in on loopback), fetched by each executor
    ("ticdc-avro", {"registry": "glue"}),
    ("debezium-avro", {"registry": "glue"}),
]


def _options(name: str, options: dict, root, request: pytest.FixtureRequest) -> dict:
    if options.get("registry") == "glue":
        return {**options, "registry": request.getfixturevalue("glue_registry")}
    if "registry" in {o.name for o in formats.get(name).options}:
        return {**options, "registry": str(root / "registry")}
    return dict(options)


@pytest.mark.parametrize(("name", "options"), CASES, ids=[f"{n}{'-' + '-'.join(o.values()) if o else ''}"
                                                         for n, o in CASES])
def test_workload_reaches_the_expected_state(spark, tmp_path, request, name, options):
    options = _options(name, options, tmp_path, request)
    profile = workload.profile_for(name, options)
    generated = workload.generate(name, events=3000, tables=3, seed=11, options=options,
                                  partitions=3 if profile.ordered else 1,
                                  replays=0.1 if profile.replay_safe else 0.0)
    workload.write_generated(tmp_path / "data", generated)
    if options.get("registry", "").startswith("glue://"):
        assert {r.key[:2] for r in generated.records if r.key} == {b"\x03\x00"}  # Glue's framing
    encoder_only = {k: v for k, v in options.items() if k not in {"flavour", "schemas-enable"}}
    decode_options = {k: v for k, v in encoder_only.items()
                      if k in {o.name for o in formats.get(name).options}}
    config = PipelineConfig(lake=str(tmp_path / "lake"), name="e2e", sources=[
        SourceConfig(format=name, input=str(tmp_path / "data" / "records"), options=decode_options,
                     max_records_per_batch=1500)])
    summary = pipeline.run(config, spark=spark)
    assert summary.total("dead_letters") == 0
    assert summary.total("records") == generated.manifest["records"]
    problems = differences(str(tmp_path / "lake"), generated.expected, generated.key_names)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", sorted(n for n in formats.names() if workload.DDL_KINDS[0] in
                                         workload.profile_for(n, {}).ddl))
def test_a_workload_heavy_with_ddl_reaches_the_expected_state(spark, tmp_path, name):
    """One transaction in 25 a DDL statement (columns added, dropped and renamed, tables truncated, dropped, made
    again, renamed and swapped), over three partitions read a few hundred records a batch, so that a batch holds
    several statements and a partition is often read ahead of the one with the statement. Open-source Canal's
    messages cannot order the changes of two partitions within one millisecond (its profile is not ``ordered``):
    it has one partition."""
    settings = {"tables": 3, "seed": 3, "ddl_rate": 0.04}
    partitions = 3 if workload.profile_for(name, {}).ordered else 1
    generated = workload.generate(name, events=1500, partitions=partitions, **settings)
    # The same simulation again, for its statements: each kind of them, renames of both forms too.
    events = workload.Database(profile=workload.profile_for(name, {}), **settings).run(1500)
    ddl = [e.ddl for e in events if e.ddl]
    statements = " ".join(ddl)
    for kind in ("ADD COLUMN", "DROP COLUMN", "RENAME COLUMN", "CHANGE COLUMN", "TRUNCATE", "DROP TABLE",
                 "RENAME TABLE"):
        assert kind in statements
    # A swap of two tables' names: three renames in a row.
    assert any(all(s.startswith("RENAME TABLE") for s in ddl[i:i + 3]) for i in range(len(ddl) - 2))
    workload.write_generated(tmp_path / "data", generated)
    config = PipelineConfig(lake=str(tmp_path / "lake"), name="ddl", sources=[
        SourceConfig(format=name, input=str(tmp_path / "data" / "records"), max_records_per_batch=300)])
    summary = pipeline.run(config, spark=spark)
    assert summary.total("dead_letters") == 0 and not summary.stopped
    problems = differences(str(tmp_path / "lake"), generated.expected, generated.key_names)
    assert not problems, "\n".join(problems)


def test_schemaless_debezium_json_with_its_column_types_stated_reaches_the_expected_state(spark, tmp_path):
    # Without schemas, the column-types option gives back what the schema would say: every column type of the
    # simulator, not only those whose JSON values are already canonical, arrives value for value.
    generated = workload.generate("debezium-json", events=3000, tables=3, seed=12, options={"schemas-enable": "false"},
                                  types=workload.DEFAULT_PROFILE.types)
    assert len({t for columns in generated.manifest["column_types"].values() for t in columns.values()}) > 20
    workload.write_generated(tmp_path / "data", generated)
    (tmp_path / "types.json").write_text(json.dumps(generated.manifest["column_types"]))
    config = PipelineConfig(lake=str(tmp_path / "lake"), name="e2e", sources=[
        SourceConfig(format="debezium-json", input=str(tmp_path / "data" / "records"),
                     options={"column-types": str(tmp_path / "types.json")}, max_records_per_batch=1500)])
    summary = pipeline.run(config, spark=spark)
    assert summary.total("dead_letters") == 0
    problems = differences(str(tmp_path / "lake"), generated.expected, generated.key_names)
    assert not problems, "\n".join(problems)


def test_debezium_avro_of_apicurio_framing_reaches_the_expected_state(spark, tmp_path):
    # debezium.md §3: Apicurio Registry's own framing, its ids in Kafka headers (2.x serializers' default), in 8 bytes
    # (2.x's Kafka Connect converter) and in 4 (3.x), mixed as while producers migrate; the executors fetch each
    # schema from the registry's core API by the id's kind.
    schemas = str(tmp_path / "registry")
    generated = workload.generate("debezium-avro", events=3000, tables=3, seed=13, options={"registry": schemas})
    forms = itertools.cycle(APICURIO_FORMS)
    with FakeRegistry() as apicurio:
        generated.records = [reframed for record in generated.records for reframed in
                             as_apicurio_framed([record], confluent.registry_from(schemas), apicurio, next(forms))]
        assert sum(bool(r.headers) for r in generated.records) > 1000
        workload.write_generated(tmp_path / "data", generated)
        config = PipelineConfig(lake=str(tmp_path / "lake"), name="e2e", sources=[
            SourceConfig(format="debezium-avro", input=str(tmp_path / "data" / "records"),
                         options={"registry": apicurio.url() + "/apis/registry/v3", "framing": "apicurio"},
                         max_records_per_batch=1500)])
        summary = pipeline.run(config, spark=spark)
    assert summary.total("dead_letters") == 0
    assert summary.total("records") == len(generated.records)
    problems = differences(str(tmp_path / "lake"), generated.expected, generated.key_names)
    assert not problems, "\n".join(problems)

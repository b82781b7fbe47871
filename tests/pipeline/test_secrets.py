"""Secrets stay secret: a registry password given in its URL appears nowhere a run leaves text behind (Spark's
plans and event log, the lake, the checkpoint, the run's output), plainly or URL-quoted. A real run (`cdclake run`
in a process of its own, its Spark session with an event log) against a registry on loopback that requires the
password."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest

from cdclake import simulator as workload
from cdclake.formats.avro import registry as confluent
from cdclake.lake.delta import DeltaSink
from cdclake.model.records import write_records
from cdclake.pipeline.config import PipelineConfig, SourceConfig
from cdclake.pipeline.positions import source_read
from cdclake.spark import sources
from tests.helpers.registries import FakeRegistry, as_apicurio_framed

pytestmark = pytest.mark.spark


def _holding(root: Path, secrets: list[bytes]) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and any(s in path.read_bytes() for s in secrets):
            found.append(str(path.relative_to(root)))
    return found


def test_a_registry_password_appears_nowhere_a_run_leaves_text(tmp_path):
    password = f"pw:{uuid.uuid4().hex}/@%"
    secrets = [password.encode(), quote(password, safe="").encode(), quote(password).encode()]
    schemas = str(tmp_path / "schemas")
    generated = workload.generate("debezium-avro", events=20, tables=1, seed=3, options={"registry": schemas})
    with FakeRegistry(auth=("reader", password)) as registry:
        framed = as_apicurio_framed(generated.records, confluent.registry_from(schemas), registry, "headers")
        (tmp_path / "in").mkdir()
        write_records(tmp_path / "in" / "records.jsonl", framed)
        url = registry.url(f"reader:{quote(password, safe='')}") + "/apis/registry/v3"
        (tmp_path / "events").mkdir()
        (tmp_path / "pipeline.toml").write_text(f"""
name = "secretive"
lake = "{tmp_path / 'lake'}"
checkpoint = "{tmp_path / 'checkpoint'}"
[spark.conf]
"spark.eventLog.enabled" = "true"
"spark.eventLog.dir" = "{tmp_path / 'events'}"
"spark.eventLog.compress" = "false"
[[source]]
format = "debezium-avro"
input = "{tmp_path / 'in'}"
options = {{ "registry" = "{url}", "framing" = "apicurio" }}
""")
        done = subprocess.run([sys.executable, "-m", "cdclake", "run", str(tmp_path / "pipeline.toml")],
                              check=False, capture_output=True, timeout=600,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
    output = done.stdout + done.stderr
    assert done.returncode == 0, output.decode(errors="replace")
    assert any(path == "GET" for path, _ in registry.requests)  # the executors fetched the schemas with it
    assert b"0 dead letters" in output or b"dead letters" not in output, output.decode(errors="replace")
    logged = b"".join(p.read_bytes() for p in (tmp_path / "events").rglob("*") if p.is_file())
    assert b"MicroBatchScan" in logged and registry.url().encode() not in output  # the search reads the plans
    assert not any(s in output for s in secrets), output.decode(errors="replace")
    for place in ("lake", "checkpoint", "events"):
        assert not _holding(tmp_path / place, secrets), place


def test_a_registry_password_is_not_in_the_plans_of_a_source_that_decodes(spark, tmp_path):
    password = f"pw-{uuid.uuid4().hex}"
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "records.jsonl").write_bytes(b"")
    config = PipelineConfig(lake=str(tmp_path / "lake"), name="secretive", sources=[SourceConfig(
        format="debezium-avro", input=str(tmp_path / "in"),
        options={"registry": f"http://reader:{password}@127.0.0.1:9/apis/registry/v3", "framing": "apicurio"})])
    read = source_read(spark, config.sources[0], config, DeltaSink(config.lake, "secretive"))
    assert read.decodes
    stream = read.stream(spark)
    plans = stream._jdf.queryExecution().toString()
    assert "cdclake-files" in plans and "decodeOptions" in plans  # what Spark shows of the source's options
    assert password not in plans


def test_a_sealed_option_is_read_only_from_the_class_that_holds_it():
    text = '{"registry": "http://reader:pw@127.0.0.1:9"}'
    sealed = sources.seal(text)
    assert sealed.startswith(sources.SEALED) and "pw" not in sealed and sources.seal(text) == sealed
    assert sources.seal(text + " ") != sealed
    holding = type("FilesDataSource", (sources.FilesDataSource,), {"sealed": {sealed: text}})
    assert holding({"decodeOptions": sealed, "decode": "debezium-avro"}).options["decodeOptions"] == text
    assert holding({"decodeOptions": "{}"}).options["decodeOptions"] == "{}"  # given as it is: as before
    for other in (sources.SEALED + "0" * 32, sources.SEALED, sealed + "x"):
        with pytest.raises(ValueError, match="do not hold"):
            holding({"decodeOptions": other})

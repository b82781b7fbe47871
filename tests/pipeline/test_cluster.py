"""The pipeline on a Spark standalone cluster: the README's "On a cluster" commands start a master and two workers
(one core each, every executor a JVM and Python workers of its own in its worker's directory) and run
``cdclake run PIPELINE.toml`` with ``[spark] master``; the run reads the shared Kafka test broker and writes a
local lake, which must equal the workload simulator's state with every record counted once. One run reads through
Spark's own Kafka connector, whose jars reach the executors through ``spark.jars``; in another a worker is killed
in the middle of a batch. (A lake on object storage is issue 56's item 1.)"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from deltalake import DeltaTable

from cdclake.simulator.lakecheck import differences
from cdclake.spark import jars
from tests.helpers.spark_cluster import Cluster, readme_pipeline, run_command, start_cluster
from tests.pipeline.test_kafka import _generate, _topics

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

RUN_TIMEOUT_S = 300.0
KILL_TIMEOUT_S = 180.0  # the run reaches the batch where the worker is killed within this


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    started = start_cluster(tmp_path_factory.mktemp("cluster"))
    try:
        yield started
    finally:
        started.stop()


def _toml(value: object) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value)  # strings and numbers: JSON's forms are TOML's


def _write_pipeline(cluster: Cluster, lake: Path, source: dict[str, object], conf: dict[str, str]) -> None:
    """The pipeline file the README's ``cdclake run PIPELINE.toml`` reads: the README's ``[spark]`` tables with
    ``conf`` added to its ``[spark.conf]``, and one source."""
    spark = readme_pipeline(cluster).rstrip("\n")
    assert re.findall(r"^\[.*\]$", spark, re.MULTILINE)[-1] == "[spark.conf]", spark  # where conf goes on
    lines = ["name = \"cluster\"", f"lake = {_toml(str(lake))}", "", spark,
             *(f"{_toml(k)} = {_toml(v)}" for k, v in conf.items()), "",
             "[[source]]", *(f"{k} = {_toml(v)}" for k, v in source.items())]
    Path(cluster.values["PIPELINE.toml"]).write_text("\n".join(lines) + "\n")


def _workload(broker, folder: Path, prefix: str, connector: str) -> tuple[object, dict[str, object]]:
    generated, decode = _generate("canal-json", {"flavour": "tidb"}, folder, 800, 3, 0.1, broker.topic(1, prefix))
    broker.publish(generated.records, 3)
    source = {"name": "orders", "format": "canal-json", "kafka": broker.servers,
              "topics": _topics(generated.records), "options": decode, "max_records_per_batch": 400,
              "connector": connector}
    return generated, source


@contextlib.contextmanager
def _running(cluster: Cluster, log: Path, **env: str) -> Iterator[subprocess.Popen]:
    """The README's ``cdclake run`` line, running in a process group of its own; killed if it outlives the block
    (its driver JVM, in a group of its own, ends with it)."""
    with open(log, "wb") as out:
        run = subprocess.Popen(cluster.script(run_command()), stdin=subprocess.DEVNULL, stdout=out,
                               stderr=subprocess.STDOUT, env={**cluster.environment(), **env}, process_group=0)
    try:
        yield run
    finally:
        if run.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(run.pid, signal.SIGKILL)
            run.wait(10)


def _finish(run: subprocess.Popen, log: Path) -> int:
    try:
        return run.wait(RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"cdclake run took over {RUN_TIMEOUT_S:.0f} s:\n{log.read_text()[-3000:]}") from None


def _run_to_the_end(cluster: Cluster, log: Path) -> int:
    with _running(cluster, log) as run:
        return _finish(run, log)


def _problems(lake: Path, generated) -> list[str]:
    """How the lake differs from the simulator's final state, and any record not counted exactly once."""
    problems = differences(str(lake), generated.expected, generated.key_names)
    progress = DeltaTable(str(lake / "_cdclake" / "progress")).to_pyarrow_table().to_pylist()
    if len({p["batch"] for p in progress}) != len(progress):
        problems.append("a batch recorded twice")
    if (counted := sum(p["records"] for p in progress)) != len(generated.records):
        problems.append(f"{counted} records counted, not {len(generated.records)}")
    return problems


def _ran_tasks(cluster: Cluster, worker: int) -> bool:
    """Whether the executor of the latest run on worker ``worker`` ran tasks."""
    logs = cluster.executor_logs(worker)
    return bool(logs) and "Running task" in logs[-1].read_text(errors="replace")


def test_the_readme_commands_run_a_kafka_pipeline_on_the_cluster(cluster, broker, tmp_path):
    """Spark's own Kafka connector, whose jars (``make jars``) are not in pyspark: ``spark.jars`` takes them to the
    driver and the executors."""
    found = jars.cached("spark")
    assert found, f"Spark's jars are not in {jars.CACHE / 'spark'}: run `make jars` first"
    generated, source = _workload(broker, tmp_path, "cluster", "spark")
    _write_pipeline(cluster, tmp_path / "lake", source, {"spark.jars": ",".join(found)})
    log = tmp_path / "run.log"
    status = _run_to_the_end(cluster, log)
    assert status == 0, log.read_text()[-5000:]
    problems = _problems(tmp_path / "lake", generated)
    assert not problems, "\n".join(problems)
    # Both workers' executors ran tasks, each in its own directory (its stdout, stderr and fetched jars).
    assert _ran_tasks(cluster, 0) and _ran_tasks(cluster, 1), cluster.logs()
    for worker in (0, 1):
        executor = cluster.executor_logs(worker)[-1].parent
        assert any(path.name.startswith("spark-sql-kafka") for path in executor.glob("*.jar")), list(executor.iterdir())


def test_a_worker_killed_in_the_middle_of_a_batch_loses_no_change_and_repeats_none(cluster, broker, tmp_path):
    """Worker 1 and its executor are killed (SIGKILL to its process group) once the first batch has started writing
    the lake (its first ``before-merge``, seen in the failpoint log): the batch's remaining steps need the cached
    changelog and shuffle files the dead executor held. Spark computes them again on the other worker; should the
    run fail instead, a second run, on the one worker left, finishes. Either way the lake equals the simulator's
    state, and each record is counted by one batch."""
    generated, source = _workload(broker, tmp_path, "cluster-kill", "cdclake")
    _write_pipeline(cluster, tmp_path / "lake", source, {})
    passed = tmp_path / "points"
    log = tmp_path / "run.log"
    with _running(cluster, log, CDCLAKE_FAILPOINT_LOG=str(passed)) as run:
        deadline = time.monotonic() + KILL_TIMEOUT_S
        while not (passed.is_file() and "before-merge" in passed.read_text()):
            if run.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the run never reached a batch's first merge:\n{log.read_text()[-5000:]}")
            time.sleep(0.05)
        assert _ran_tasks(cluster, 0), f"worker 1 ran no task before the batch:\n{cluster.logs()}"
        cluster.kill_worker(0)
        assert "before-checkpoint" not in passed.read_text()  # the batch was not done when the worker died
        status = _finish(run, log)
    assert "Lost executor" in log.read_text(), log.read_text()[-5000:]  # the driver saw it go
    if status != 0:
        again = tmp_path / "again.log"
        assert _run_to_the_end(cluster, again) == 0, again.read_text()[-5000:]
    problems = _problems(tmp_path / "lake", generated)
    assert not problems, "\n".join(problems) + "\n" + log.read_text()[-3000:]

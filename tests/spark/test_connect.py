"""The pipeline through Spark Connect: ``[spark] remote`` in PIPELINE.toml. A Connect server is started here
(``remote = "local[2]"``), so the batches run in the server's foreachBatch worker, as on a cluster; the CLI
still shows each batch and the summary (read back from the lake), and the tables equal the expected state.
A second source renames a table, so its batch reads its records again in that worker. Runs ``cdclake run`` in
its own process: one JVM per process."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cdclake import workload
from cdclake.events import INSERT
from cdclake.lakecheck import differences
from cdclake.records import write_records
from tests.lake import lake_rows
from tests.spark.test_pipeline import change, ddl, records

pytestmark = pytest.mark.spark


def test_pipeline_runs_through_spark_connect(tmp_path):
    generated = workload.generate("canal-json", events=600, tables=2, seed=4, options={"flavour": "tidb"},
                                  partitions=2)
    workload.write_generated(tmp_path / "data", generated)
    # As in test_pipeline: a RENAME that only one task sees falls between two changes of a key in another task.
    renamed = tmp_path / "renamed"
    renamed.mkdir()
    rows = records([change(INSERT, 10, 1, version=1), change(INSERT, 30, 1, version=2)])
    for record in rows:
        record.partition = 1
    write_records(renamed / "0.jsonl", records([ddl(20, "RENAME TABLE shop.users TO shop.archive")]))
    write_records(renamed / "1.jsonl", rows)
    lake = tmp_path / "lake"
    (tmp_path / "PIPELINE.toml").write_text(f"""
name = "connect"
lake = "{lake}"

[spark]
remote = "local[2]"

[[source]]
format = "canal-json"
input = "{tmp_path / 'data' / 'records'}"
max_records_per_batch = {generated.manifest["records"] // 2 + 1}

[[source]]
name = "renamed"
format = "canal-json"
input = "{renamed}"
""")
    run = subprocess.run([sys.executable, "-m", "cdclake", "run", str(tmp_path / "PIPELINE.toml")],
                         capture_output=True, timeout=900, check=False)
    log = run.stderr.decode()
    assert run.returncode == 0, log[-3000:]
    assert log.count("\nbatch ") + log.startswith("batch ") == 3, log[-3000:]
    assert f"done: 3 batches, {generated.manifest['records'] + 3} records" in log
    problems = differences(str(lake), generated.expected, generated.key_names)
    assert not problems, "\n".join(problems)
    assert lake_rows(str(lake), "shop", "archive")["[1]"]["name"] == "user 1 v1"
    assert lake_rows(str(lake), "shop", "users")["[1]"]["name"] == "user 1 v2"

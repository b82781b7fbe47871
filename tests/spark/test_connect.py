"""The pipeline through Spark Connect: ``[spark] remote`` in PIPELINE.toml. A Connect server is started here
(``remote = "local[2]"``), so the batches run in the server's foreachBatch worker, as on a cluster; the CLI
still shows each batch and the summary (read back from the lake), and the tables equal the expected state.
A second source renames a table, so its batch reads its records again in that worker. A third brings one batch of
many DDL statements of a table and a chain of renames, and a fourth a late change of the chain's first name: a
plan built one expression per statement or per rename was nested deeper than Spark Connect takes. Runs
``cdclake run`` in its own process: one JVM per process."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from cdclake import simulator as workload
from cdclake.model.events import INSERT, UPDATE
from cdclake.model.records import write_records
from cdclake.simulator.lakecheck import differences
from tests.helpers.lake import lake_rows
from tests.pipeline.test_runner import change, ddl, records

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
    history = tmp_path / "history"
    history.mkdir()
    added = [ddl(200 + n, f"ALTER TABLE shop.wide ADD COLUMN c{n} INT", table="wide") for n in range(60)]
    renamed_on = [ddl(500 + n, f"RENAME TABLE shop.t{n} TO shop.t{n + 1}", table=f"t{n}") for n in range(40)]
    write_records(history / "0.jsonl", records([change(INSERT, 100, 1, table="wide"), *added[:30],
                                                change(UPDATE, 300, 1, version=1, before_version=0, table="wide"),
                                                *added[30:], change(INSERT, 400, 2, table="wide"),
                                                change(INSERT, 450, 1, table="t0"), *renamed_on]))
    late = tmp_path / "late"
    late.mkdir()
    write_records(late / "1.jsonl", records([change(UPDATE, 460, 1, version=2, before_version=0, table="t0")],
                                            partition=1))
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

[[source]]
name = "history"
format = "canal-json"
input = "{history}"

[[source]]
name = "late"
format = "canal-json"
input = "{late}"
""")
    run = subprocess.run([sys.executable, "-m", "cdclake", "run", str(tmp_path / "PIPELINE.toml")],
                         capture_output=True, timeout=900, check=False)
    log = run.stderr.decode()
    assert run.returncode == 0, log[-3000:]
    assert len(re.findall(r"^\d\d:\d\d:\d\d batch ", log, re.MULTILINE)) == 5, log[-3000:]
    assert f"done: 5 batches, {generated.manifest['records'] + 3 + 104 + 1:,} records" in log
    problems = differences(str(lake), generated.expected, generated.key_names)
    assert not problems, "\n".join(problems)
    assert lake_rows(str(lake), "shop", "archive")["[1]"]["name"] == "user 1 v1"
    assert lake_rows(str(lake), "shop", "users")["[1]"]["name"] == "user 1 v2"
    wide = lake_rows(str(lake), "shop", "wide")
    assert {key: row["name"] for key, row in wide.items()} == {"[1]": "user 1 v1", "[2]": "user 2 v0"}
    assert "c59" in wide["[1]"]
    assert lake_rows(str(lake), "shop", "t40")["[1]"]["name"] == "user 1 v2"
    assert not (lake / "shop" / "t0").exists()

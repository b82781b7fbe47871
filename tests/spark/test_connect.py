"""The pipeline through Spark Connect: ``[spark] remote`` in PIPELINE.toml. A Connect server is started here
(``remote = "local[2]"``), so the batches run in the server's foreachBatch worker, as on a cluster; the CLI
still shows each batch and the summary (read back from the lake), and the tables equal the expected state.
Runs ``cdclake run`` in its own process: one JVM per process."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cdclake import workload
from cdclake.lakecheck import differences

pytestmark = pytest.mark.spark


def test_pipeline_runs_through_spark_connect(tmp_path):
    generated = workload.generate("canal-json", events=600, tables=2, seed=4, options={"flavour": "tidb"},
                                  partitions=2)
    workload.write_generated(tmp_path / "data", generated)
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
""")
    run = subprocess.run([sys.executable, "-m", "cdclake", "run", str(tmp_path / "PIPELINE.toml")],
                         capture_output=True, timeout=900, check=False)
    log = run.stderr.decode()
    assert run.returncode == 0, log[-3000:]
    assert log.count("\nbatch ") + log.startswith("batch ") == 2, log[-3000:]
    assert f"done: 2 batches, {generated.manifest['records']} records" in log
    problems = differences(str(lake), generated.expected, generated.key_names)
    assert not problems, "\n".join(problems)

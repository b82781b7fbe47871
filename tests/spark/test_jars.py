"""Spark's own connectors that ``make jars`` fetches (jars/spark/pom.xml) fit the installed pyspark: a session
with them writes a Delta table through delta-spark, MERGEs into it, and reads a topic of the test broker with
Spark's ``kafka`` source. In a Python of its own: the test process's Spark session has other jars."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from deltalake import DeltaTable

from cdclake.model.records import Record
from cdclake.spark import jars

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

SESSION = """
import json, sys
from pyspark.sql import SparkSession

jars, lake, servers, topic = sys.argv[1:]
spark = (SparkSession.builder.master("local[1]").config("spark.driver.extraClassPath", jars)
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "1")
         .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
         .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
         .getOrCreate())
spark.range(5).selectExpr("id", "'old' AS v").write.format("delta").save(lake)
spark.sql(f"MERGE INTO delta.`{lake}` t USING (SELECT 3L AS id, 'new' AS v UNION ALL SELECT 9L, 'new') s "
          "ON t.id = s.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
delta = [list(r) for r in spark.read.format("delta").load(lake).orderBy("id").collect()]
kafka = (spark.read.format("kafka").option("kafka.bootstrap.servers", servers).option("subscribe", topic)
         .option("startingOffsets", "earliest").load().selectExpr("CAST(value AS STRING)", "offset").collect())
print(json.dumps({"delta": delta, "kafka": sorted([list(r) for r in kafka], key=lambda r: r[1])}))
spark.stop()
"""


def test_spark_with_the_fetched_jars_merges_into_delta_and_reads_kafka(broker, tmp_path):
    found = jars.cached("spark")
    assert found, f"Spark's jars are not in {jars.CACHE / 'spark'}: run `make jars` first"
    topic = broker.topic(1, "sparkjars")
    broker.publish([Record(topic=topic, value=b"record %d" % n) for n in range(3)])
    lake = tmp_path / "delta"
    done = subprocess.run([sys.executable, "-c", SESSION, os.pathsep.join(found), str(lake), broker.servers, topic],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-5000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    expected = [[0, "old"], [1, "old"], [2, "old"], [3, "new"], [4, "old"], [9, "new"]]
    assert seen["delta"] == expected
    assert seen["kafka"] == [[f"record {n}", n] for n in range(3)]
    # The table delta-spark wrote is one delta-rs (the lake's own writer) reads as written.
    assert sorted(DeltaTable(str(lake)).to_pyarrow_table().to_pylist(), key=lambda r: r["id"]) == \
        [{"id": i, "v": v} for i, v in expected]

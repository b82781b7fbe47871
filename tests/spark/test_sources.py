"""``cdclake-files`` with the option ``decode``: the changelog of its records, decoded in the task that reads
them, equal to decoding the records it gives without the option; and its ``input`` rows read the same
records again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdclake import formats
from cdclake.model.events import DELETE, INSERT, ROW, UPDATE, ChangeEvent, Column
from cdclake.model.records import Record, write_records
from cdclake.pipeline.config import PipelineConfig, SourceConfig
from cdclake.pipeline.positions import source_read
from cdclake.spark import changelog as CL
from cdclake.spark.sources import reread

pytestmark = pytest.mark.spark

OPTIONS = {"flavour": "tidb"}
COLUMNS = [Column("id", "bigint", key=True, nullable=False), Column("note", "varchar(32)", nullable=True)]


def _change(op: str, ts: int, i: int, note: str) -> ChangeEvent:
    image = {"id": i, "note": note}
    return ChangeEvent(kind=ROW, op=op, database="d", table="t", key={"id": i}, before=image if op != INSERT else None,
                       after=None if op == DELETE else image, columns=COLUMNS, commit_ts=ts << 18)


def _input(root: Path) -> Path:
    """Two captured-records files of two partitions, with repeated keys (for the reduction), a message that
    does not decode, and a line that is no captured record; and a message-per-line file."""
    fmt = formats.create("canal-json", OPTIONS)
    root.mkdir()
    for partition in (0, 1):
        events = [_change(INSERT if v == 0 else UPDATE, 10 * v + partition + 1, i, f"p{partition} v{v}")
                  for v in range(3) for i in range(partition, 40, 2)]
        events.append(_change(DELETE, 99, partition, "gone"))
        out = fmt.encode(events)
        for offset, record in enumerate(out):
            record.topic, record.partition, record.offset = "cdc", partition, offset
        out.insert(5, Record(value=b'{"truncated": ', topic="cdc", partition=partition, offset=len(out)))
        write_records(root / f"{partition}.jsonl", out)
    with open(root / "0.jsonl", "ab") as captured:
        captured.write(b"not a captured record\n")
    (root / "2.txt").write_bytes(fmt.encode([_change(INSERT, 7, 100, "plain")])[0].value + b"\n")
    return root


def _rows(df) -> list[str]:
    """Rows as comparable text, in no particular order (the order of a task's output is not part of it)."""
    return sorted(repr(sorted(r.items())) for r in df.toArrow().to_pylist())


@pytest.mark.parametrize("reduce", [False, True])
def test_a_source_that_decodes_gives_the_changelog_of_its_records(spark, tmp_path, reduce):
    path = str(_input(tmp_path / "in"))
    records = spark.read.format("cdclake-files").option("path", path).option("minPartitions", "3").load()
    decoded = (spark.read.format("cdclake-files").option("path", path).option("minPartitions", "3")
               .option("decode", "canal-json").option("decodeOptions", json.dumps(OPTIONS))
               .option("reduce", str(reduce).lower()).load())
    assert decoded.schema == CL.CHANGELOG_SCHEMA
    ours = decoded.filter(f"status != '{CL.INPUT}'")
    expected = CL.decode(records, "canal-json", OPTIONS, reduce=reduce)
    assert _rows(ours) == _rows(expected)
    statuses = {r["status"]: r["n"] for r in ours.groupBy("status").count().withColumnRenamed("count", "n").collect()}
    assert statuses["failed"] == 3  # two messages that do not decode, one line that is no captured record
    events = sum(r.detail["events"] for r in ours.filter("status = 'tally'").collect())
    # Reduced: each file is one task's, with 20 keys each, and the message-per-line file's one.
    assert statuses["event"] == (41 if reduce else events)


def test_the_input_rows_of_a_decoded_batch_read_its_records_again(spark, tmp_path):
    path = str(_input(tmp_path / "in"))
    options = {"path": path, "minPartitions": "3"}
    records = spark.read.format("cdclake-files").options(**options).load()
    decoded = spark.read.format("cdclake-files").options(**options, decode="canal-json", reduce="true").load()
    inputs = [r.detail[CL.INPUT] for r in decoded.filter(f"status = '{CL.INPUT}'").collect()]
    assert len(inputs) == records.rdd.getNumPartitions() >= 3
    again = reread(spark, "cdclake-files", {**options, "decode": "canal-json", "reduce": "true"}, inputs)
    assert again.schema == records.schema and _rows(again) == _rows(records)
    # One input alone reads only its own records.
    first = json.loads(inputs[0])
    some = reread(spark, "cdclake-files", options, inputs[:1]).toArrow()
    assert 0 < some.num_rows < records.count()
    assert set(some["topic"].to_pylist()) <= {"cdc", Path(first["name"]).name}


def test_a_decoding_read_with_an_unknown_format_or_option_fails_when_loaded(spark, tmp_path):
    path = str(_input(tmp_path / "in"))
    with pytest.raises(Exception, match="no-such-format"):
        spark.read.format("cdclake-files").option("path", path).option("decode", "no-such-format").load()
    with pytest.raises(Exception, match="flavour"):
        (spark.read.format("cdclake-files").option("path", path).option("decode", "canal-json")
         .option("decodeOptions", json.dumps({"flavour": "nope"})).load())


def test_the_pipeline_reads_a_long_file_in_a_task_per_core(spark, tmp_path):
    """One task per core that runs tasks (the session is local[2]): each task reduces the keys it read, so more,
    smaller tasks than cores would only hand the planner more changes of the same keys."""
    root = tmp_path / "in"
    root.mkdir()
    (root / "0.txt").write_bytes(b'{"n": 1}\n' * 30_000)
    source = SourceConfig(format="canal-json", input=str(root))
    read = source_read(spark, source, PipelineConfig(lake=str(tmp_path / "lake"), sources=[source]), None)
    records = spark.read.format(read.data_source).options(**read.options).load()
    assert records.rdd.getNumPartitions() == spark.sparkContext.defaultParallelism == 2
    assert records.count() == 30_000

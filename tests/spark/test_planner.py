"""The planner alone, on hand-made changelogs."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from cdclake import formats
from cdclake.formats.base import layout_id
from cdclake.lake.sink import Rename
from cdclake.model.events import ChangeEvent, Column
from cdclake.sources.files import UNREADABLE_HEADER
from cdclake.spark.changelog import AFTER_MAP, FLAT_ARROW, RECORD_SCHEMA, decode, flat, nested
from cdclake.spark.planner import RowStep, _segment_expr, plan, renamed_away
from tests.helpers.registries import FakeRegistry, as_apicurio_framed

pytestmark = pytest.mark.spark


def changelog(spark, rows: list[dict], tasks: list[list[dict]] | None = None):
    """A changelog as the decoding tasks make it: the rows, each task's tally of its partition, and for a change
    without commit ts its partition's latest commit ts before it in the task. By default one task reads all."""
    full = []
    for task in tasks or [rows]:
        latest = None
        for r in task:
            full.append({**r, "partition_ts": latest if r["commit_ts"] is None else None})
            if r["commit_ts"] is not None:
                latest = max(latest or 0, r["commit_ts"])
        full.append({"status": "tally", "topic": "t", "partition": 0, "first_offset": min(r["offset"] for r in task),
                     "offset": max(r["offset"] for r in task), "commit_ts": latest,
                     "records": len({r["offset"] for r in task}), "events": len(task)})
    full = [{name: r.get(name) for name in FLAT_ARROW.names} for r in full]
    return spark.createDataFrame(nested(pa.Table.from_pylist(full, schema=FLAT_ARROW)))


def row(op: str, key: int, offset: int, commit_ts: int | None, name: str = "x") -> dict:
    image = json.dumps({"id": key, "name": name})
    return {"status": "event", "kind": "row", "op": op, "database": "d", "table": "t", "key": f"[{key}]",
            "after": None if op == "d" else image, "before": image if op == "d" else None,
            "columns": json.dumps([{"name": "id", "type": "bigint", "key": True, "nullable": False},
                                   {"name": "name", "type": "varchar(8)", "key": False, "nullable": True}]),
            "commit_ts": commit_ts, "position": f"{offset:020d}", "topic": "t", "partition": 0, "offset": offset,
            "seq": 0}


def net(batch_plan) -> dict[str, tuple[str, str]]:
    (step,) = [s for s in batch_plan.tables[("d", "t")] if isinstance(s, RowStep)]
    return {r["_cdc_key"]: (r["_cdc_op"], r["_cdc_seq"]) for r in step.changes.toArrow().to_pylist()}


def test_a_delete_without_commit_ts_follows_the_changes_before_it_in_its_partition(spark):
    first = plan(changelog(spark, [row("c", 1, 0, 500), row("c", 2, 1, 600), row("d", 1, 2, None)]))
    changes = net(first)
    assert changes["[1]"][0] == "d"
    assert changes["[1]"][1] > f"{500:020d}/{0:020d}"  # newer than the insert it deletes
    assert first.partition_ts == {"t:0": 600}
    # In the next batch the delete of key 2 has nothing before it but what the first batch saw.
    second = plan(changelog(spark, [row("d", 2, 3, None)]), first.partition_ts)
    assert net(second)["[2]"][1] > f"{600:020d}/"


def test_a_delete_without_commit_ts_follows_what_an_earlier_task_read_of_its_partition(spark):
    """Two files of one partition are two tasks: the later task alone never saw the commit ts before it."""
    first, second = [row("c", 1, 0, 500), row("c", 2, 1, 600)], [row("d", 1, 2, None)]
    batch = plan(changelog(spark, first + second, tasks=[first, second]))
    assert net(batch)["[1]"] == ("d", f"{600:020d}/~{2:020d}")
    assert (batch.records, batch.counts, batch.offsets) == (3, {"event": 3}, {"t:0": 2})


def test_a_column_list_named_by_id_or_carried_by_the_change_reads_alike(spark):
    carried = row("c", 1, 0, 100)  # as a change held by resolved-ts mode keeps it
    text = carried["columns"]
    named = {**row("c", 2, 1, 200), "columns": None, "layout": layout_id(text.encode())}
    listed = {"status": "layout", "layout": named["layout"], "columns": text}
    log = changelog(spark, [carried, named]).unionByName(
        spark.createDataFrame(nested(pa.Table.from_pylist([{n: listed.get(n) for n in FLAT_ARROW.names}],
                                                          schema=FLAT_ARROW))))
    batch = plan(log)
    (step,) = batch.tables[("d", "t")]
    assert [(c.name, c.type) for c in step.columns] == [("id", "bigint"), ("name", "varchar(8)")]
    assert set(net(batch)) == {"[1]", "[2]"} and batch.counts == {"event": 2}  # a listing is no record
    with pytest.raises(RuntimeError, match="no decoding task listed"):
        plan(changelog(spark, [named]))


def test_a_type_stated_only_for_null_gives_way_to_the_type_stated_with_values(spark):
    """DTS states a stand-in type for a NULL value: where a segment's changes name several column lists, a column
    takes its type from the lists whose changes give it a value, even when the latest change's list says else."""
    def listing(name_type: str) -> str:
        return json.dumps([{"name": "id", "type": "bigint", "key": True, "nullable": False},
                           {"name": "name", "type": name_type, "key": False, "nullable": True}])

    valued = {**row("c", 1, 0, 100), "after": json.dumps({"id": 1, "name": "5"}), "columns": listing("int")}
    stand_in = {**row("c", 2, 1, 200), "after": json.dumps({"id": 2, "name": None}), "columns": listing("varchar(8)")}
    (step,) = plan(changelog(spark, [valued, stand_in])).tables[("d", "t")]
    assert [(c.name, c.type) for c in step.columns] == [("id", "bigint"), ("name", "int")]
    got = sorted(step.changes.toArrow().to_pylist(), key=lambda r: r["id"])
    assert [(r["id"], r["name"]) for r in got] == [(1, 5), (2, None)]
    # One column list states every type alike, values or not.
    (alone,) = plan(changelog(spark, [stand_in])).tables[("d", "t")]
    assert [(c.name, c.type) for c in alone.columns] == [("id", "bigint"), ("name", "varchar(8)")]


def test_an_update_that_changes_the_key_deletes_the_old_key_unless_it_comes_back(spark):
    def update(key: int, before: int, offset: int, commit_ts: int) -> dict:
        return {**row("u", key, offset, commit_ts), "before_key": f"[{before}]"}

    # Unreduced, as the planner gets it in resolved-ts mode: the old key's delete is the planner's to make.
    rows = [row("c", 1, 0, 500), update(9, 1, 1, 600), row("c", 2, 2, 700), update(2, 2, 3, 800),
            row("c", 5, 4, 900), update(6, 5, 5, 950), row("c", 5, 6, 990)]
    changes = net(plan(changelog(spark, rows)))
    seq = {offset: f"{ts:020d}/{offset:020d}" for offset, ts in ((1, 600), (3, 800), (5, 950), (6, 990))}
    assert changes == {"[1]": ("d", seq[1]), "[9]": ("u", seq[1]), "[2]": ("u", seq[3]), "[6]": ("u", seq[5]),
                       "[5]": ("c", seq[6])}


def test_replays_collapse_and_the_newest_change_wins(spark):
    rows = [row("c", 1, 0, 100, "a"), row("u", 1, 1, 300, "c"), row("u", 1, 2, 200, "b"),
            row("c", 1, 3, 100, "a")]
    (step,) = plan(changelog(spark, rows)).tables[("d", "t")]
    got = step.changes.toArrow().to_pylist()
    assert [(r["_cdc_op"], r["name"]) for r in got] == [("u", "c")]


def test_lake_types_agree_between_spark_casts_and_ddl_columns(spark):
    """A column added by DDL (Arrow type from lake_types) must have the type the Spark casts give rows."""
    from cdclake.model.events import Column
    from cdclake.model.types import parse_type
    from cdclake.simulator import ALL_TYPES
    from cdclake.spark.lake_types import arrow_type
    from cdclake.spark.planner import typed_changes

    columns = [Column(f"c{i}", t) for i, t in enumerate(ALL_TYPES)]
    frame = (changelog(spark, [row("c", 1, 0, 5)]).withColumn("_cdc_seq", F.lit("0"))
             .withColumn("after", F.from_json("after", AFTER_MAP)))
    schema = typed_changes(frame, columns).toArrow().schema
    for column in columns:
        assert schema.field(column.name).type == arrow_type(parse_type(column.type)), column.type


@pytest.mark.parametrize("headers", ["null", "empty", "others"])
def test_records_decode_whatever_their_headers_and_an_unreadable_line_keeps_its_reason(spark, headers):
    """Spark's Kafka source gives null headers to a record without any; the captured-records reader marks a line
    it could not read with a header among the others; only that reason reaches the decoder."""
    fmt = formats.create("canal-json")
    values = [json.dumps({"database": "d", "table": "t", "type": "INSERT", "isDdl": False, "es": 1, "ts": 2,
                          "pkNames": ["id"], "mysqlType": {"id": "bigint"}, "sqlType": {"id": -5},
                          "data": [{"id": str(i)}], "old": None}).encode() for i in range(3)]
    others = {"null": None, "empty": [], "others": [{"key": "trace", "value": b"x"}]}[headers]
    unreadable = [*(others or []), {"key": UNREADABLE_HEADER, "value": b"in.jsonl:2: not a captured record"}]
    rows = [{"key": None, "value": v, "topic": "in.jsonl", "partition": 0, "offset": i, "timestamp": None,
             "timestampType": None, "headers": unreadable if i == 1 else others} for i, v in enumerate(values)]
    records = spark.createDataFrame(rows, RECORD_SCHEMA)
    out = flat(decode(records, fmt.name).where("status in ('event', 'failed')").orderBy("offset").toArrow()).to_pylist()
    assert [(r["status"], r["offset"]) for r in out] == [("event", 0), ("failed", 1), ("event", 2)]
    assert out[1]["error"] == "in.jsonl:2: not a captured record" and out[1]["raw_value"] == values[1]
    assert [json.loads(r["after"])["id"] for r in (out[0], out[2])] == ["0", "2"]


def test_records_decode_with_their_headers_for_a_format_that_reads_them(spark):
    """Debezium Avro of Apicurio's framing names each schema in a Kafka header: Spark's Kafka source gives them to
    the decoder whole (and the captured-records reader's mark still makes a dead letter)."""
    encoder = formats.create("debezium-avro", {"registry": "memory:"})
    events = [ChangeEvent(kind="row", op="c", database="d", table="t", after={"id": i}, commit_ts=i,
                          columns=[Column("id", "bigint", key=True, nullable=False)]) for i in range(3)]
    with FakeRegistry() as apicurio:
        records = as_apicurio_framed(encoder.encode(events), encoder.registry(), apicurio, "headers")[:3]
        rows = [{"key": r.key, "value": r.value, "topic": "t", "partition": 0, "offset": i, "timestamp": None,
                 "timestampType": None, "headers": [{"key": k, "value": v} for k, v in r.headers]}
                for i, r in enumerate(records)]
        rows[1]["headers"].append({"key": UNREADABLE_HEADER, "value": b"in.jsonl:2: not a captured record"})
        log = decode(spark.createDataFrame(rows, RECORD_SCHEMA), "debezium-avro",
                     {"registry": apicurio.url(), "framing": "apicurio"})
        out = flat(log.where("status in ('event', 'failed')").orderBy("offset").toArrow()).to_pylist()
    assert [(r["status"], r["offset"]) for r in out] == [("event", 0), ("failed", 1), ("event", 2)]
    assert out[1]["error"] == "in.jsonl:2: not a captured record"
    assert [json.loads(r["after"])["id"] for r in (out[0], out[2])] == ["0", "2"]  # values cross as text


def test_types_are_inferred_per_table_and_segment_in_one_batch(spark):
    """One job infers every table's and segment's types: a column named alike in each is typed by its own values."""
    def change(table: str, key: int, offset: int, v_type: str, v: str | None) -> dict:
        return {**row("c", key, offset, 100 + offset), "table": table, "after": json.dumps({"id": key, "v": v}),
                "columns": json.dumps([{"name": "id", "type": "bigint", "key": True, "nullable": False},
                                       {"name": "v", "type": v_type, "key": False, "nullable": True}])}

    add_column = {**row("c", 0, 4, 104), "kind": "ddl", "op": None, "key": None, "after": None, "columns": None,
                  "table": "money", "ddl": "ALTER TABLE money ADD COLUMN note text"}
    batch = plan(changelog(spark, [
        change("money", 1, 0, "decimal", "12.5"), change("money", 2, 1, "decimal", "-0003.25"),
        change("untyped", 1, 2, "", "7"), change("untyped", 2, 3, "", "-12"),
        add_column,  # a barrier: the changes after it are a segment of their own
        change("money", 3, 5, "decimal", "123456.125"),
        change("counts", 1, 6, "int", "3000000000"), change("counts", 2, 7, "int", "-1"),
        change("words", 1, 8, "", "7"), change("words", 2, 9, "", "seven"),
        change("empty", 1, 10, "int", None),
    ]))

    def typed(table: str) -> list[tuple[int, str, set[str]]]:
        return [(s.segment, dict((c.name, c.type) for c in s.columns)["v"], s.nulls_only)
                for s in batch.tables[("d", table)] if isinstance(s, RowStep)]

    assert typed("money") == [(0, "decimal(4,2)", set()), (1, "decimal(9,3)", set())]
    assert typed("untyped") == [(0, "bigint", set())]
    assert typed("counts") == [(0, "bigint", set())]
    assert typed("words") == [(0, "text", set())]
    assert typed("empty") == [(0, "int", {"v"})]


def test_batches_whose_changes_all_have_a_commit_ts_reuse_the_code_spark_compiled(spark):
    """The term for changes without a commit ts names the batch's offsets and commit ts as literals, which Spark
    writes into the code it generates: a running pipeline compiled its largest stage anew every batch. Without
    such changes it is left out, so a batch that differs from the one before only in those compiles nothing."""
    codegen = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()

    def batch(base: int, carried: dict[str, int]) -> int:
        log = changelog(spark, [row("c", 1, base, 500 + base), row("u", 1, base + 1, 600 + base),
                                row("c", 2, base + 2, 700 + base)]).persist()
        compiled = codegen.getCount()
        planned = plan(log, carried)
        assert net(planned) == {"[1]": ("u", f"{600 + base:020d}/{base + 1:020d}"),
                                "[2]": ("c", f"{700 + base:020d}/{base + 2:020d}")}
        planned.release()
        log.unpersist()
        return codegen.getCount() - compiled

    batch(0, {})
    batch(1000, {"t:0": 700})  # the first batch with something carried
    assert batch(2000, {"t:0": 1700}) == 0


def test_renames_and_segments_name_tables_whatever_their_names_hold(spark):
    """The planner writes table names into SQL as string literals: a quote, a backslash or a backquote in one stays
    the name."""
    odd = "o'dd\\na`me é"
    changes = spark.createDataFrame([("db", odd, "5"), ("db", odd, "9"), ("db", "x", "1"), (None, None, "1")],
                                    "database string, `table` string, _cdc_seq string")
    moved = renamed_away(changes, [Rename("db", odd, "7", "db2", odd + "2")])
    assert [(r["database"], r["table"], r["_renamed"]) for r in moved.collect()] == [
        ("db2", odd + "2", True), ("db", odd, False), ("db", "x", False), (None, None, False)]
    segments = changes.withColumn("segment", _segment_expr({("db", odd): ["3", "6"], ("db", "x"): ["1"]}))
    assert [r["segment"] for r in segments.collect()] == [1, 2, 0, 0]

"""The planner: a batch's changelog → per-table steps, in Spark SQL so that it scales out.

Per table and key, changes are ordered by the source's own sequence — ``_cdc_seq`` = commit_ts (20
digits) + ``/`` + position — never by arrival. Replays collapse (same key, same sequence), each key is
reduced to its net change per segment, and an update that moves a row to another key becomes a delete
of the old key and an insert of the new one. DDL events are barriers: they cut a table's changes into
segments, applied in order with the DDL between them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from cdclake import ddl as DDL
from cdclake import types as T
from cdclake.events import Column
from cdclake.spark.lake_types import cast_sql
from cdclake.types import parse_type

TableName = tuple[str, str]


@dataclass
class RowStep:
    segment: int
    columns: list[Column]
    changes: DataFrame  # typed columns + _cdc_key, _cdc_op, _cdc_seq, _cdc_commit_ts, _cdc_position, _cdc_ts_ms


@dataclass
class DdlStep:
    segment: int  # the DDL ends this segment
    statement: str
    kind: str  # "ddl" or "truncate"
    seq: str
    actions: list[DDL.Action]


Step = RowStep | DdlStep


@dataclass
class BatchPlan:
    tables: dict[TableName, list[Step]]
    table_order: list[TableName]
    dead_letters: DataFrame
    counts: dict[str, int]
    last_seq: dict[TableName, str]
    partition_ts: dict[str, int]


# A change without a commit ts (a TiCDC Avro delete is a bare tombstone) happened after everything
# before it in its partition: it takes the partition's latest commit ts so far and sorts after that
# commit's changes ("~" follows every digit).
SEQ = ("concat(lpad(cast(coalesce(commit_ts, _partition_ts, 0) AS STRING), 20, '0'), '/', "
       "CASE WHEN commit_ts IS NULL THEN concat('~', lpad(cast(offset AS STRING), 20, '0')) "
       "ELSE coalesce(position, '') END)")


def _segment_expr(ddls: dict[TableName, list[str]]) -> F.Column:
    """Which segment a row falls in: how many of its table's DDL sequences precede it."""
    expr = F.lit(0)
    for (database, table), seqs in ddls.items():
        inner = F.lit(0)
        for index, seq in enumerate(sorted(seqs)):
            inner = F.when(F.col("_cdc_seq") > F.lit(seq), F.lit(index + 1)).otherwise(inner)
        expr = F.when((F.col("database") == database) & (F.col("table") == table), inner).otherwise(expr)
    return expr


def merge_columns(latest: list[dict], others: list[list[dict]]) -> list[Column]:
    """The latest event's columns, then any other column this segment's events carried."""
    seen: dict[str, Column] = {}
    for group in [latest, *others]:
        for c in group or ():
            if c["name"] not in seen:
                seen[c["name"]] = Column(c["name"], c["type"] or "unknown", bool(c["key"]), c["nullable"])
    return list(seen.values())


_INTEGER_TEXT = r"^-?(0|[1-9][0-9]{0,17})$"


def infer_types(part: DataFrame, columns: list[Column]) -> list[Column]:
    """Types the message did not state, from the values: DECIMAL without precision gets the digits its
    values need; an untyped column whose values are all plain integers is BIGINT, else text. The sink
    widens a lake column when a later batch needs more."""
    probes, todo = [], []
    for c in columns:
        t = parse_type(c.type)
        value = F.col("after").getItem(c.name)
        if t.family == T.DECIMAL and t.length is None:
            todo.append(c)
            probes += [F.max(F.length(F.regexp_extract(value, r"^-?0*([0-9]*)", 1))).alias(f"i{len(todo)}"),
                       F.max(F.length(F.regexp_extract(value, r"\.([0-9]*)$", 1))).alias(f"s{len(todo)}")]
        elif t.family == T.UNKNOWN:
            todo.append(c)
            probes += [F.bool_and(value.isNull() | value.rlike(_INTEGER_TEXT)).alias(f"i{len(todo)}"),
                       F.lit(0).alias(f"s{len(todo)}")]
    if not todo:
        return columns
    found = part.agg(*probes).first()
    inferred: dict[str, str] = {}
    for n, c in enumerate(todo, start=1):
        if parse_type(c.type).family == T.DECIMAL:
            scale = found[f"s{n}"] or 0
            precision = max(1, (found[f"i{n}"] or 0) + scale)
            inferred[c.name] = f"decimal({precision},{scale})" if precision <= 38 else "text"
        else:
            inferred[c.name] = "bigint" if found[f"i{n}"] is not False else "text"
    return [Column(c.name, inferred.get(c.name, c.type), c.key, c.nullable) for c in columns]


def typed_changes(net: DataFrame, columns: list[Column]) -> DataFrame:
    projections = [
        "key AS _cdc_key", "op AS _cdc_op", "_cdc_seq", "commit_ts AS _cdc_commit_ts",
        "position AS _cdc_position", "ts_ms AS _cdc_ts_ms",
    ]
    for c in columns:
        literal = c.name.replace("\\", "\\\\").replace("'", "\\'")
        projections.append(f"{cast_sql(f'after[{chr(39)}{literal}{chr(39)}]', parse_type(c.type))} AS "
                           f"`{c.name.replace('`', '``')}`")
    return net.selectExpr(*projections)


def partition_commit_ts(events: DataFrame, carried: dict[str, int]) -> DataFrame:
    """Each event with the latest commit ts seen in its partition up to it, starting from what earlier
    batches saw (``carried``, by ``topic:partition``)."""
    so_far = Window.partitionBy("topic", "partition").orderBy("offset", "seq").rowsBetween(
        Window.unboundedPreceding, Window.currentRow)
    before = F.lit(None).cast("long")
    for coords, ts in carried.items():
        topic, _, partition = coords.rpartition(":")
        before = F.when((F.col("topic") == topic) & (F.col("partition") == int(partition)), F.lit(ts)).otherwise(
            before)
    return events.withColumn("_partition_ts", F.greatest(F.max("commit_ts").over(so_far), before))


def plan(changelog: DataFrame, carried_ts: dict[str, int] | None = None) -> BatchPlan:
    """Plan one batch. The changelog should be persisted by the caller: it is read several times."""
    counts = {row["status"]: row["count"] for row in changelog.groupBy("status").count().collect()}
    events = changelog.filter(F.col("status") == "event")
    partition_ts: dict[str, int] = dict(carried_ts or {})
    if events.filter(F.col("commit_ts").isNull()).limit(1).count():
        events = partition_commit_ts(events, partition_ts)
    else:
        events = events.withColumn("_partition_ts", F.lit(None).cast("long"))
    for r in events.groupBy("topic", "partition").agg(F.max("commit_ts").alias("ts")).collect():
        if r["ts"] is not None:
            coords = f"{r['topic']}:{r['partition']}"
            partition_ts[coords] = max(partition_ts.get(coords, 0), r["ts"])
    events = events.withColumn("_cdc_seq", F.expr(SEQ)).drop("_partition_ts")

    # DDL broadcast to several partitions (TiCDC) arrives more than once: apply each statement once.
    control_rows = (events.filter(F.col("kind").isin("ddl", "truncate"))
                    .select("database", "table", "kind", "ddl", "_cdc_seq").distinct()
                    .orderBy("_cdc_seq").collect())
    ddls: dict[TableName, list[str]] = defaultdict(list)
    steps: dict[TableName, list[Step]] = defaultdict(list)
    for r in control_rows:
        name = (r["database"] or "", r["table"] or "")
        if not name[1]:
            continue  # database-level DDL: nothing in the lake to change
        actions = [DDL.Truncate()] if r["kind"] == "truncate" else DDL.parse(r["ddl"] or "")
        steps[name].append(DdlStep(len(ddls[name]), r["ddl"] or "", r["kind"], r["_cdc_seq"], actions))
        ddls[name].append(r["_cdc_seq"])

    rows = events.filter(F.col("kind") == "row").withColumn("segment", _segment_expr(ddls))
    moved = rows.filter((F.col("op") == "u") & F.col("before_key").isNotNull() & (F.col("before_key") != F.col("key")))
    rows = rows.unionByName(moved.withColumn("key", F.col("before_key")).withColumn("op", F.lit("d"))
                            .withColumn("after", F.lit(None).cast("map<string,string>")))
    latest_first = Window.partitionBy("database", "table", "segment", "key").orderBy(
        F.desc("_cdc_seq"), F.desc("partition"), F.desc("offset"), F.desc("seq"))
    net = rows.withColumn("_rank", F.row_number().over(latest_first)).filter("_rank = 1").drop("_rank")
    net = net.persist()

    groups = (net.groupBy("database", "table", "segment")
              .agg(F.max_by("columns", "_cdc_seq").alias("latest"), F.collect_set("columns").alias("all"),
                   F.max("_cdc_seq").alias("last"))
              .collect())
    last_seq: dict[TableName, str] = {}
    for g in groups:
        name = (g["database"] or "", g["table"] or "")
        part = net.filter((F.col("database") == name[0]) & (F.col("table") == name[1])
                          & (F.col("segment") == g["segment"]))
        columns = infer_types(part, merge_columns(g["latest"], g["all"]))
        steps[name].append(RowStep(g["segment"], columns, typed_changes(part, columns)))
        last_seq[name] = max(last_seq.get(name, ""), g["last"])
    for name, table_steps in steps.items():
        # Rows of a segment come before the DDL that closes it.
        table_steps.sort(key=lambda s: (s.segment, isinstance(s, DdlStep)))
        ddl_seqs = [s.seq for s in table_steps if isinstance(s, DdlStep)]
        if ddl_seqs:
            last_seq[name] = max(last_seq.get(name, ""), *ddl_seqs)

    dead = changelog.filter(F.col("status") == "failed").select(
        "topic", "partition", "offset", F.col("raw_key").alias("key"), F.col("raw_value").alias("value"),
        "format", F.col("error").alias("reason"))
    return BatchPlan(dict(steps), _order_tables(steps), dead, counts, last_seq, partition_ts)


def _order_tables(steps: dict[TableName, list[Step]]) -> list[TableName]:
    """Tables in a stable order, a rename's target after its source."""
    order = sorted(steps)
    for source, table_steps in steps.items():
        for step in table_steps:
            if isinstance(step, DdlStep):
                for action in step.actions:
                    if isinstance(action, DDL.RenameTable):
                        target = (action.database or source[0], action.table)
                        if target in order and order.index(target) < order.index(source):
                            order.remove(target)
                            order.insert(order.index(source) + 1, target)
    return order

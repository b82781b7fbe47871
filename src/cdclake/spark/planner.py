"""The planner: a batch's changelog → per-table steps, in Spark SQL so that it scales out.

Per table and key, changes are ordered by the source's own sequence — ``_cdc_seq``, laid out by
:mod:`cdclake.model.seq` — never by arrival. Replays collapse (same key, same sequence), each key is
reduced to its net change per segment, and an update that moves a row to another key becomes a delete
of the old key and an insert of the new one. DDL events are barriers: they cut a table's changes into
segments, applied in order with the DDL between them.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import NamedTuple

from pyspark.sql import DataFrame, Row, Window
from pyspark.sql import functions as F

from cdclake.lake.sink import Rename
from cdclake.model import ddl as DDL
from cdclake.model import seq as cdc_seq
from cdclake.model import types as T
from cdclake.model.ddl import TableName
from cdclake.model.events import Column
from cdclake.model.types import parse_type
from cdclake.spark.changelog import AFTER_MAP, INPUT, detail
from cdclake.spark.lake_types import cast_sql

Group = tuple[str | None, str | None, int]  # the net changes of one segment of a table: database, table, segment


@dataclass
class RowStep:
    group: Group
    columns: list[Column]
    net: DataFrame  # the batch's net changes, of every group
    nulls_only: set[str]  # columns NULL in every change: their lake type wins over the stated one

    @property
    def segment(self) -> int:
        return self.group[2]

    @cached_property
    def changes(self) -> DataFrame:
        """Typed columns + _cdc_key, _cdc_op, _cdc_seq, _cdc_commit_ts, _cdc_position, _cdc_ts_ms. Made when first
        read, not by the planner: Spark analyses each DataFrame as it is made (about 50 ms for the filter and
        projection of a table of 40 columns), and the pipeline reads the steps' changes on threads beside the
        merges, where a batch of many tables pays that side by side instead of one table after another."""
        return typed_changes(group_changes(self.net, self.group), self.columns)


@dataclass
class DdlStep:
    segment: int  # the DDL ends this segment
    statement: str
    kind: str  # "ddl" or "truncate"
    seq: str
    actions: list[DDL.Action]
    clause: int = 0  # of the statement, for one that changes several tables (RENAME TABLE a TO b, c TO d)

    def renames(self) -> DDL.RenameTable | None:
        return next((a for a in self.actions if isinstance(a, DDL.RenameTable)), None)


Step = RowStep | DdlStep


class Run(NamedTuple):
    """Steps ``first`` to ``end`` (exclusive) of a table's steps, applied one after another."""
    name: TableName
    first: int
    end: int


@dataclass
class BatchPlan:
    tables: dict[TableName, list[Step]]
    runs: list[Run]  # the order the steps are applied in (see _runs)
    dead_letters: DataFrame
    counts: dict[str, int]
    last_seq: dict[TableName, str]
    partition_ts: dict[str, int]
    records: int  # the records behind the changelog (by its tallies)
    offsets: dict[str, int]  # the last offset per "topic:partition"
    net: DataFrame  # the net changes the row steps read, cached until :meth:`release`
    renamed_away: bool = False  # changes of a table renamed in an earlier batch went to its new name

    def release(self) -> None:
        """Frees the cached net changes once the steps are applied: a running pipeline plans a batch after
        another, and every cached plan would stay in Spark's cache list (which each later query is matched
        against) and in its storage memory."""
        self.net.unpersist()

    def renames_tables(self) -> bool:
        return any(isinstance(step, DdlStep) and step.renames() for steps in self.tables.values() for step in steps)

    def steps(self, run: Run) -> list[Step]:
        return self.tables[run.name][run.first:run.end]


# The summary's status for events without a commit ts. Only a batch that has some needs partition_commit_ts, which
# names the batch's offsets and commit ts as literals: Spark writes those into the code it generates, so every
# batch of a running pipeline compiled its largest stage anew (4 classes a batch, and the JVM's JIT after them),
# where a batch without such events keeps the same code and Spark's compiled classes from the batches before.
TIMELESS = "timeless"

# Each change's _cdc_seq (layout: cdclake.model.seq); a change without a commit ts takes its partition's latest so far
# (``_partition_ts``, see partition_commit_ts).
SEQ = cdc_seq.sql("commit_ts", "_partition_ts", "position", "offset")


def commit_ts_of(last_seq: dict[str, str]) -> dict[str, int]:
    """Each table's commit ts from its last ``_cdc_seq``, by the table's ``database.table``."""
    return {name: ts for name, last in last_seq.items() if (ts := cdc_seq.commit_ts(last)) is not None}


# What the net reduction carries on: the lake needs no more of a change.
_NET_COLUMNS = ("database", "table", "segment", "key", "op", "after", "layout", "columns", "_cdc_seq", "commit_ts",
                "position", "ts_ms", "partition", "offset", "seq")


def renamed_away(events: DataFrame, renames: Sequence[Rename]) -> DataFrame:
    """The changes of a table older than a RENAME TABLE of it that the lake applied in an earlier batch (a partition
    read behind the one with the statement brings them) go to the new table, and on through its later renames.
    Adds ``_renamed``: whether a rename took the change (even back to its own name)."""
    renamed_to = case_sql([(f"{of_table(database, table)} AND _cdc_seq < {sql_string(below)}",
                            f"array({sql_string(new_database)}, {sql_string(new_table)})")
                           for database, table, below, new_database, new_table in rename_bounds(renames)],
                          "CAST(NULL AS ARRAY<STRING>)")
    renamed = F.col("_renamed_to")
    return (events.withColumn("_renamed_to", renamed_to)
            .withColumn("database", F.coalesce(renamed[0], F.col("database")))
            .withColumn("table", F.coalesce(renamed[1], F.col("table")))
            .withColumn("_renamed", renamed.isNotNull()).drop("_renamed_to"))


def rename_bounds(renames: Sequence[Rename]) -> list[tuple[str, str, str, str, str]]:
    """Where each change of a renamed table ends: (database, table, below, new database, new table), a change of
    the table whose sequence is below ``below`` (and not below an earlier bound of the table) ending under the new
    name, after every rename later than it, in their order. One flat list, read as a single CASE: a chain of
    expressions per rename grew with the lake's history, and Spark Connect refuses a plan nested that deep."""
    final: dict[TableName, TableName] = {}
    bounds: dict[tuple[TableName, str], TableName] = {}
    for rename in reversed(renames):  # the renames later than a change, composed from the last one back
        old = (rename.database, rename.table)
        new = (rename.new_database, rename.new_table)
        final[old] = bounds[(old, rename.seq)] = final.get(new, new)
    return [(*old, below, *new) for (old, below), new in sorted(bounds.items())]


def case_sql(branches: Sequence[tuple[str, str]], otherwise: str) -> F.Column:
    """CASE WHEN condition THEN value … ELSE ``otherwise`` END, of SQL texts: one expression however many branches
    (Spark Connect refuses a plan nested about fifty expressions deep), which Spark parses in one call. Made of
    Column objects, each branch took a dozen calls into the JVM: 4.4 s for a batch with 160 DDL statements."""
    whens = " ".join(f"WHEN {condition} THEN {value}" for condition, value in branches)
    return F.expr(f"CASE {whens} ELSE {otherwise} END" if whens else otherwise)


def sql_string(text: str) -> str:
    """A Spark SQL string literal of the text: the one way a value reaches Spark SQL text (names reach it only as
    Column aliases). With Spark's default ``spark.sql.parser.escapedStringLiterals=false`` a backslash starts an
    escape (``\\'``, ``\\\\``, ``\\u0027``), so both it and the quote are escaped (a doubled quote would be two
    adjacent literals, which Spark joins); ``$`` is written ``\\u0024``, since Spark replaces ``${name}`` in the
    text of every expression it parses (``spark.sql.variable.substitute``), inside literals too."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("$", "\\u0024") + "'"


def of_table(database: str, table: str) -> str:
    """SQL: the change is of this table."""
    return f"`database` = {sql_string(database)} AND `table` = {sql_string(table)}"


def _segment_expr(ddls: dict[TableName, list[str]]) -> F.Column:
    """Which segment a row falls in: how many of its table's DDL sequences precede it."""
    return case_sql([(f"{of_table(database, table)} AND _cdc_seq > {sql_string(seq)}", str(index + 1))
                     for (database, table), seqs in ddls.items()
                     for index, seq in reversed(list(enumerate(sorted(seqs))))], "0")


def _layout_columns(layout: Row, listed: dict[int, str], valued: dict[tuple, set[str]] | None = None) -> list[dict]:
    """A change's column list (JSON text, the same for every change of a schema, so parsed once per layout
    on the driver rather than per change in Spark): its own, or the one its decoding task listed under its
    id. With ``valued`` (see :func:`_valued_columns`), only the columns that its changes give a value, since a
    type stated for NULL may be a stand-in."""
    columns = _parse_columns(_layout_text(layout, listed))
    if valued is None:
        return columns
    names = valued.get((layout["layout"], layout["columns"]), set())
    return [c for c in columns if c["name"] in names]


def _layout_text(layout: Row, listed: dict[int, str]) -> str | None:
    if layout["columns"] is not None or layout["layout"] is None:
        return layout["columns"]
    if layout["layout"] not in listed:
        raise RuntimeError(f"a change names column list {layout['layout']}, which no decoding task listed")
    return listed[layout["layout"]]


def _listed_layouts(rows: list[Row]) -> dict[int, str]:
    """The column lists the decoding tasks listed ('layout' rows), by id."""
    listed: dict[int, str] = {}
    for r in rows:
        if listed.setdefault(r["layout"], r["columns"]) != r["columns"]:
            raise RuntimeError(f"two column lists share the id {r['layout']}: {listed[r['layout']]!r}, "
                               f"{r['columns']!r}")
    return listed


def group_changes(net: DataFrame, group: Group) -> DataFrame:
    """The net changes of one (database, table, segment)."""
    database, table, segment = group
    return net.filter((F.col("database") == (database or "")) & (F.col("table") == (table or ""))
                      & (F.col("segment") == segment))


def _step_columns(net: DataFrame, group: Group, latest: Row, layouts: list[Row], listed: dict[int, str]
                  ) -> list[Column]:
    """The columns of a segment's changes (see :func:`merge_columns`). Where they name one column list, it states
    every type, so which columns have values changes nothing; only where lists differ are the images read for
    that (one small job)."""
    columns = _layout_columns(latest, listed)
    if len({_layout_text(lay, listed) for lay in layouts}) <= 1:
        return merge_columns(columns, [], columns, [])
    valued = _valued_columns(group_changes(net, group))
    return merge_columns(_layout_columns(latest, listed, valued),
                         [_layout_columns(lay, listed, valued) for lay in layouts],
                         columns, [_layout_columns(lay, listed) for lay in layouts])


def _valued_columns(part: DataFrame) -> dict[tuple, set[str]]:
    """By column list (layout, columns), the columns that some change with that list gives a value."""
    names = F.map_keys(F.map_filter("after", lambda _, value: value.isNotNull()))
    found: dict[tuple, set[str]] = defaultdict(set)
    for r in part.select("layout", "columns", F.explode(names).alias("name")).distinct().collect():
        found[(r["layout"], r["columns"])].add(r["name"])
    return found


@lru_cache(maxsize=256)
def _parse_columns(text: str | None) -> list[dict]:
    return json.loads(text) if text else []


def merge_columns(latest_valued: list[dict], valued: list[list[dict]], latest: list[dict],
                  others: list[list[dict]]) -> list[Column]:
    """The columns of the latest event, then any other column this segment's events carried; each typed
    as the events that gave it a value state it (the latest first, widened to hold the others')."""
    stated: dict[str, str] = {}
    for group in [latest_valued, *valued]:
        for c in group or ():
            name, type_text = c["name"], c["type"] or "unknown"
            stated[name] = type_text if name not in stated else T.type_text(
                T.wider(parse_type(stated[name]), parse_type(type_text)))
    seen: dict[str, Column] = {}
    for group in [latest, *others]:
        for c in group or ():
            if c["name"] not in seen:
                type_text = stated.get(c["name"], c["type"] or "unknown")
                seen[c["name"]] = Column(c["name"], type_text, bool(c["key"]), c["nullable"])
    return list(seen.values())


_INTEGER_TEXT = r"^-?(0|[1-9][0-9]{0,17})$"


def _probe(column: Column) -> str | None:
    """What a column's values must be read for, beyond whether it has any: see :func:`infer_types`."""
    t = parse_type(column.type)
    if t.family == T.DECIMAL and t.length is None:
        return "digits"
    return {T.UNKNOWN: "integer_text", T.INTEGER: "range"}.get(t.family)


def infer_types(net: DataFrame, groups: dict[Group, list[Column]]) -> dict[Group, tuple[list[Column], set[str]]]:
    """Types the message did not state, from the values: DECIMAL without precision gets the digits its
    values need; an untyped column whose values are all plain integers is BIGINT, else text; an integer
    column whose values exceed its stated type (DTS states no signedness) gets a type that holds them. The sink
    widens a lake column when a later batch needs more. Also returns the columns that are NULL in every
    row here: their stated type carries no information (a producer may state a stand-in type for NULL),
    so the sink keeps the lake's type for them.

    One job for every (database, table, segment) group of the batch: the values are read as (name, value)
    pairs, so the work grows with the values, not with the groups times their columns. A probe runs on the
    values of the names that need it in some group (an unneeded result elsewhere is ignored)."""
    names: dict[str, set[str]] = defaultdict(set)
    for columns in groups.values():
        for c in columns:
            if probe := _probe(c):
                names[probe].add(c.name)

    def where(probe: str, value: F.Column) -> F.Column:
        return F.when(F.col("name").isin(sorted(names[probe])), value)

    value = F.col("value")
    number = F.expr("try_cast(value AS DECIMAL(20,0))")
    aggregates = [F.count(value).alias("n")]
    if names["digits"]:
        aggregates += [F.max(where("digits", F.length(F.regexp_extract(value, r"^-?0*([0-9]*)", 1)))).alias("i"),
                       F.max(where("digits", F.length(F.regexp_extract(value, r"\.([0-9]*)$", 1)))).alias("s")]
    if names["integer_text"]:
        aggregates.append(F.bool_and(where("integer_text", value.isNull() | value.rlike(_INTEGER_TEXT)))
                          .alias("plain"))
    if names["range"]:
        aggregates += [F.min(where("range", number)).alias("lo"), F.max(where("range", number)).alias("hi")]
    found: dict[Group, dict[str, dict]] = defaultdict(dict)
    pairs = net.select("database", "table", "segment", F.explode("after").alias("name", "value"))
    for r in pairs.groupBy("database", "table", "segment", "name").agg(*aggregates).collect():
        found[(r["database"], r["table"], r["segment"])][r["name"]] = r.asDict()
    return {group: _typed(columns, found[group]) for group, columns in groups.items()}


def _typed(columns: list[Column], found: dict[str, dict]) -> tuple[list[Column], set[str]]:
    typed: list[Column] = []
    for c in columns:
        seen = found.get(c.name, {})
        type_text = c.type
        probe = _probe(c)
        if probe == "digits":
            scale = seen.get("s") or 0
            precision = max(1, (seen.get("i") or 0) + scale)
            type_text = f"decimal({precision},{scale})" if precision <= 38 else "text"
        elif probe == "integer_text":
            type_text = "bigint" if seen.get("plain") is not False else "text"
        elif probe == "range" and seen.get("lo") is not None:
            holding = T.integer_type_for(int(seen["lo"]), int(seen["hi"]))
            type_text = T.type_text(T.wider(parse_type(c.type), holding))
        typed.append(Column(c.name, type_text, c.key, c.nullable))
    return typed, {c.name for c in columns if not found.get(c.name, {}).get("n")}


def typed_changes(net: DataFrame, columns: list[Column]) -> DataFrame:
    """The typed lake rows, plus ``_cdc_unfit``: the columns whose value the lake type cannot hold (never
    turned into NULL silently; MySQL zero dates are the documented exception)."""
    projections = [F.expr(text) for text in (
        "key AS _cdc_key", "op AS _cdc_op", "_cdc_seq", "commit_ts AS _cdc_commit_ts",
        "position AS _cdc_position", "ts_ms AS _cdc_ts_ms")]
    checks = []
    for c in columns:
        literal = sql_string(c.name)
        text = f"after[{literal}]"
        typed = cast_sql(text, parse_type(c.type))
        projections.append(F.expr(typed).alias(c.name))  # a name in SQL text would be parsed, ${…} replaced
        if typed != text:
            checks.append(f"CASE WHEN {text} IS NOT NULL AND {typed} IS NULL AND {text} NOT LIKE '0000-00-00%' "
                          f"THEN {literal} END")
    projections.append(F.expr(f"concat_ws(',', {', '.join(checks)}) AS _cdc_unfit" if checks else "'' AS _cdc_unfit"))
    return net.select(*projections)


def partition_commit_ts(tallies: list[Row], carried: dict[str, int]) -> F.Column:
    """For a change without a commit ts: the latest commit ts of its partition before it. The decoding task
    gave it the latest in the task (``partition_ts``); earlier tasks of the same partition in this batch
    (their tallies end before its offset) and earlier batches (``carried``, by ``topic:partition``) may have
    seen later ones."""
    def here(topic: str, partition: int) -> F.Column:
        return (F.col("topic") == topic) & (F.col("partition") == partition)

    candidates = [detail("partition_ts")]
    # A partition that one task read needs no term of its own: that task saw everything before its changes.
    tasks_per_partition = Counter((t["topic"], t["partition"]) for t in tallies)
    candidates += [F.when(here(t["topic"], t["partition"]) & (F.col("offset") > t["offset"]), F.lit(t["commit_ts"]))
                   for t in tallies if tasks_per_partition[(t["topic"], t["partition"])] > 1
                   and t["commit_ts"] is not None]
    for coords, ts in carried.items():
        topic, _, partition = coords.rpartition(":")
        candidates.append(F.when(here(topic, int(partition)), F.lit(ts)))
    return F.greatest(*candidates) if len(candidates) > 1 else candidates[0]


def plan(changelog: DataFrame, carried_ts: dict[str, int] | None = None, renames: Sequence[Rename] = ()) -> BatchPlan:
    """Plan one batch. The changelog should be persisted by the caller: it is read several times. ``renames``: the
    RENAME TABLEs the lake applied before (see :func:`renamed_away`)."""
    # The tallies, the column lists and the counts of records without events, in one small job.
    tally = F.struct("topic", "partition", detail("first_offset"), "offset", "commit_ts", detail("records"),
                     detail("events"))
    listing = F.struct("layout", detail("columns"))
    # Events without a commit ts are counted too: only they need partition_commit_ts (see there).
    timeless = (F.col("status") == "event") & F.col("commit_ts").isNull()
    summary = (changelog.filter(~F.col("status").isin("event", INPUT) | timeless)
               .groupBy(F.when(timeless, F.lit(TIMELESS)).otherwise(F.col("status")).alias("status"),
                        F.when(F.col("status") == "tally", tally).alias("tally"),
                        F.when(F.col("status") == "layout", listing).alias("listed"))
               .agg(F.count(F.lit(1)).alias("rows")).collect())
    counts: dict[str, int] = defaultdict(int)
    offsets: dict[str, int] = {}
    partition_ts: dict[str, int] = dict(carried_ts or {})
    tallies = [r["tally"] for r in summary if r["tally"] is not None]
    listed = _listed_layouts([r["listed"] for r in summary if r["listed"] is not None])
    for r in summary:
        if r["tally"] is None and r["listed"] is None:
            counts[r["status"]] += r["rows"]
    for t in tallies:
        counts["event"] += t["events"]
        coords = f"{t['topic']}:{t['partition']}"
        offsets[coords] = max(offsets.get(coords, t["offset"]), t["offset"])
        if t["commit_ts"] is not None:
            partition_ts[coords] = max(partition_ts.get(coords, 0), t["commit_ts"])
    timeless_events = counts.pop(TIMELESS, 0)
    partition_ts_of_timeless = (partition_commit_ts(tallies, dict(carried_ts or {})) if timeless_events
                                else F.lit(None).cast("bigint"))
    events = (changelog.filter(F.col("status") == "event")
              .withColumn("_partition_ts", partition_ts_of_timeless)
              .withColumn("_cdc_seq", F.expr(SEQ)).drop("_partition_ts"))
    # A task reduces each key's changes by table: a batch with changes of the new table under the old name is
    # planned again from every change (see pipeline), as one with a RENAME is.
    events = renamed_away(events, renames)
    moved = bool(renames) and bool(events.filter("_renamed").limit(1).count())
    events = events.drop("_renamed")

    # DDL broadcast to several partitions (TiCDC) arrives more than once: apply each statement once.
    control_rows = (events.filter(F.col("kind").isin("ddl", "truncate"))
                    .select("database", "table", "kind", detail("ddl"), "_cdc_seq").distinct()
                    .orderBy("_cdc_seq").collect())
    ddls: dict[TableName, list[str]] = defaultdict(list)
    steps: dict[TableName, list[Step]] = defaultdict(list)
    for r in control_rows:
        named = (r["database"] or "", r["table"] or "")
        if not named[1]:
            continue  # database-level DDL: nothing in the lake to change
        by_table = [(named, [DDL.Truncate()])] if r["kind"] == "truncate" else DDL.by_table(r["ddl"] or "", *named)
        for clause, (name, actions) in enumerate(by_table):
            steps[name].append(DdlStep(len(ddls[name]), r["ddl"] or "", r["kind"], r["_cdc_seq"], actions, clause))
            ddls[name].append(r["_cdc_seq"])

    rows = (events.filter(F.col("kind") == "row").withColumn("segment", _segment_expr(ddls))
            .withColumn("columns", detail("columns")))
    # An update that moves a row also deletes its old key: one more row made from the same row (an explode, not a
    # union, which would scan the cached changelog a second time).
    moves = F.coalesce((F.col("op") == "u") & (F.col("before_key") != F.col("key")), F.lit(False))
    old = F.col("_old_key")
    rows = (rows.withColumn("_old_key", F.explode(F.when(moves, F.array(F.lit(False), F.lit(True)))
                                                  .otherwise(F.array(F.lit(False)))))
            .withColumn("key", F.when(old, F.col("before_key")).otherwise(F.col("key")))
            .withColumn("op", F.when(old, F.lit("d")).otherwise(F.col("op")))
            .withColumn("after", F.when(old, F.lit(None).cast("string")).otherwise(F.col("after"))))
    # The hash leads the window's sort: Spark sorts by a prefix of the first column, and a batch's changes share
    # their database and table, so with those first nearly every comparison read on into the rows' strings.
    identity = F.xxhash64("database", "table", "segment", "key").alias("_identity")
    latest_first = Window.partitionBy("_identity", "database", "table", "segment", "key").orderBy(
        F.desc("_cdc_seq"), F.desc("partition"), F.desc("offset"), F.desc("seq"))
    # Images are parsed after the reduction to net changes: only the changes that reach the lake pay for it.
    net = (rows.select(*_NET_COLUMNS, identity).withColumn("_rank", F.row_number().over(latest_first))
           .filter("_rank = 1").drop("_rank", "_identity").withColumn("after", F.from_json("after", AFTER_MAP))
           .persist())

    layout = F.struct("layout", "columns")
    groups = (net.groupBy("database", "table", "segment")
              .agg(F.max_by(layout, "_cdc_seq").alias("latest"), F.collect_set(layout).alias("layouts"),
                   F.max("_cdc_seq").alias("last"))
              .collect())
    last_seq: dict[TableName, str] = {}
    merged: dict[Group, list[Column]] = {}
    for g in groups:
        group = (g["database"], g["table"], g["segment"])
        layouts = sorted(g["layouts"], key=lambda lay: _layout_text(lay, listed) or "")
        merged[group] = _step_columns(net, group, g["latest"], layouts, listed)
        name = (g["database"] or "", g["table"] or "")
        last_seq[name] = max(last_seq.get(name, ""), g["last"])
    for group, (columns, nulls_only) in infer_types(net, merged).items():
        name = (group[0] or "", group[1] or "")
        steps[name].append(RowStep(group, columns, net, nulls_only))
    for name, table_steps in steps.items():
        # Rows of a segment come before the DDL that closes it.
        table_steps.sort(key=lambda s: (s.segment, isinstance(s, DdlStep)))
        ddl_seqs = [s.seq for s in table_steps if isinstance(s, DdlStep)]
        if ddl_seqs:
            last_seq[name] = max(last_seq.get(name, ""), *ddl_seqs)

    dead = changelog.filter(F.col("status") == "failed").select(
        "topic", "partition", "offset", detail("raw_key").alias("key"), detail("raw_value").alias("value"), "format",
        detail("error").alias("reason"))
    return BatchPlan(dict(steps), _runs(steps), dead, dict(counts), last_seq, partition_ts,
                     sum(t["records"] for t in tallies), offsets, net, moved)


# Sorts after every sequence: the steps after a table's last rename go after every rename.
_AFTER_RENAMES = "\U0010ffff"


def _runs(steps: dict[TableName, list[Step]]) -> list[Run]:
    """The order the steps are applied in: each table's steps in their order, in runs that end with each RENAME
    TABLE of it, the runs in the order of the renames that end them, then the rest of each table in name order.
    So a table renamed onto a name comes before the name's later rows, and a table renamed away comes before
    another takes its name (the swap that gh-ost and pt-online-schema-change end with)."""
    runs: list[tuple[tuple[str, int, TableName], Run]] = []
    for name in sorted(steps):
        first = 0
        for index, step in enumerate(steps[name]):
            if isinstance(step, DdlStep) and step.renames():
                runs.append(((step.seq, step.clause, name), Run(name, first, index + 1)))
                first = index + 1
        if first < len(steps[name]):
            runs.append(((_AFTER_RENAMES, 0, name), Run(name, first, len(steps[name]))))
    return [run for _, run in sorted(runs)]

"""The one quoting function of each SQL dialect that a message's values reach: delta-rs predicates (DataFusion SQL,
``lake.store.sql_literal``) and Spark SQL (``spark.planner.sql_string``), with hostile text: each
literal must mean its text exactly, whatever quotes, backslashes, escapes, newlines or NULs it holds."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from cdclake.lake.store import sql_literal
from cdclake.spark.planner import sql_string

HOSTILE = ["", "'", "''", "a' OR '1'='1", "z' OR '1'<'2", "\\", "\\'", "a\\", "\\\\'", "\\u0027", "\\x27", "\\047",
           "\\n", "\n", "\r\n", "\t", "\x00", "a\x00b", "--", "/*", "*/", "'; DROP TABLE t; --", '"', "`",
           "${x}", "$", "${system:user.name}", "\\${x}",
           "é😀", "\u202e", "0000000000000000000001/mysql'bin/00000000000000000002"]


@pytest.mark.parametrize("value", HOSTILE)
def test_a_delta_rs_predicate_literal_means_its_text(tmp_path, value):
    values = sorted(set(HOSTILE))
    write_deltalake(str(tmp_path), pa.table({"s": values}))
    table = DeltaTable(str(tmp_path))
    assert table.delete(f"s = {sql_literal(value)}")["num_deleted_rows"] == 1
    table.delete(f"s < {sql_literal(value)}")
    left = DeltaTable(str(tmp_path)).to_pyarrow_table()["s"].to_pylist()
    assert sorted(left) == [v for v in values if v > value]


def test_a_delta_rs_literal_refuses_text_utf8_cannot_hold():
    with pytest.raises(UnicodeEncodeError):
        sql_literal("\udc80")


@pytest.mark.spark
def test_a_spark_sql_literal_means_its_text(spark):
    from pyspark.sql import functions as F

    from cdclake.spark.planner import case_sql

    one = spark.range(1)
    assert list(one.select(*[F.expr(sql_string(v)) for v in HOSTILE]).collect()[0]) == HOSTILE
    assert list(one.selectExpr(*[sql_string(v) for v in HOSTILE]).collect()[0]) == HOSTILE
    chosen = spark.range(len(HOSTILE)).select(
        "id", case_sql([(f"id = {i}", sql_string(v)) for i, v in enumerate(HOSTILE)], "NULL")).collect()
    assert [value for _, value in sorted(chosen)] == HOSTILE


@pytest.mark.spark
def test_typed_changes_keep_hostile_column_names(spark):
    from cdclake.model.events import Column
    from cdclake.spark.planner import typed_changes

    names = ["${x}", "a`b", "x y", "é", "'", "\\"]
    net = spark.createDataFrame([("k", "i", "s", 1, "p", 2, {n: "1" for n in names})],
                                "key string, op string, _cdc_seq string, commit_ts long, position string, "
                                "ts_ms long, after map<string,string>")
    typed = typed_changes(net, [Column(n, "bigint") for n in names])
    assert typed.columns[6:-1] == names and list(typed.collect()[0])[6:-1] == [1] * len(names)


@pytest.mark.parametrize("name", [n for n in HOSTILE if n])  # MySQL has no empty name
def test_a_statement_written_with_a_quoted_name_names_exactly_that_table(name):
    from cdclake.model import ddl

    assert ddl.split_qualified(ddl.qualified("db", name)) == ("db", name)
    assert ddl.by_table(f"RENAME TABLE `db`.`t` TO {ddl.qualified(name, name)}", "db", "t") == [
        (("db", "t"), [ddl.RenameTable(database=name, table=name)])]

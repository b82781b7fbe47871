"""DDL statements as the lake follows them: what :func:`cdclake.model.ddl.parse` reads from a statement, and what the
Delta sink does with each action on a real Delta table (the pipeline's own path: ``test_pipeline.py``'s DDL tests
and the generated workloads of ``test_end_to_end.py``, which rename columns too)."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from cdclake.lake.delta import DeltaSink, TableStopped
from cdclake.model import ddl as DDL


@pytest.mark.parametrize(("statement", "actions"), [
    ("ALTER TABLE t ADD COLUMN `a b` int NULL", [DDL.AddColumn("a b", "int")]),
    ("ALTER TABLE t ADD (a int, b varchar(8) NOT NULL)", [DDL.AddColumn("a", "int"), DDL.AddColumn("b", "varchar(8)")]),
    ("ALTER TABLE t DROP COLUMN a, DROP b", [DDL.DropColumn("a"), DDL.DropColumn("b")]),
    ("ALTER TABLE t MODIFY COLUMN a bigint unsigned DEFAULT 0", [DDL.ModifyColumn("a", "bigint unsigned")]),
    ("ALTER TABLE t CHANGE a a bigint", [DDL.ModifyColumn("a", "bigint")]),
    ("ALTER TABLE t CHANGE COLUMN a `b` decimal(12,2) NOT NULL", [DDL.ModifyColumn("a", "decimal(12,2)", "b")]),
    ("ALTER TABLE t RENAME COLUMN `a` TO `b c`", [DDL.RenameColumn("a", "b c")]),
    ("ALTER TABLE t RENAME COLUMN a TO b, RENAME COLUMN c TO a",
     [DDL.RenameColumn("a", "b"), DDL.RenameColumn("c", "a")]),
    # MySQL renames at once; the lake, clause after clause, would merge a into b before b moves away.
    ("ALTER TABLE t RENAME COLUMN a TO b, RENAME COLUMN b TO a",
     [DDL.Unsupported("renaming column a to b in the statement that also renames or drops b is not applied to lake "
                      "tables")]),
    ("ALTER TABLE t CHANGE a B int, DROP COLUMN b",
     [DDL.Unsupported("renaming column a to B in the statement that also renames or drops b is not applied to lake "
                      "tables")]),
    ("ALTER TABLE t CHANGE a b int, ADD a text", [DDL.ModifyColumn("a", "int", "b"), DDL.AddColumn("a", "text")]),
    ("ALTER TABLE t RENAME TO u", [DDL.RenameTable(None, "u")]),
    ("ALTER TABLE t ADD INDEX i (a), ALTER COLUMN a SET DEFAULT 1", []),
    ("TRUNCATE TABLE t", [DDL.Truncate()]),
])
def test_a_statement_reads_as_the_actions_the_lake_follows(statement, actions):
    assert DDL.parse(statement) == actions


def changes(rows: list[dict], at: int | None = None) -> pa.Table:
    """Inserts of ``rows``; each row's sequence is its id's, or ``at``."""
    count = len(rows)
    return pa.table({"_cdc_key": [f"[{r['id']}]" for r in rows], "_cdc_op": ["i"] * count,
                     "_cdc_seq": [f"{at or r['id']:020d}/" for r in rows], "_cdc_commit_ts": [r["id"] for r in rows],
                     "_cdc_position": [""] * count, "_cdc_ts_ms": [0] * count,
                     **{name: [r[name] for r in rows] for name in rows[0]}})


@pytest.mark.parametrize(("statement", "message", "changes"), [
    # Canal and TiCDC name a rename's message by its new table.
    ("RENAME TABLE `shop`.`users` TO `shop`.`people`", ("shop", "people"),
     [(("shop", "users"), [DDL.RenameTable("shop", "people")])]),
    ("rename table shop.users to archive.people", ("archive", "people"),
     [(("shop", "users"), [DDL.RenameTable("archive", "people")])]),
    ("ALTER TABLE users RENAME TO people", ("shop", "people"),
     [(("shop", "users"), [DDL.RenameTable("shop", "people")])]),
    ("ALTER TABLE users RENAME AS people, ADD COLUMN c int", ("shop", "people"),
     [(("shop", "users"), [DDL.AddColumn("c", "int"), DDL.RenameTable("shop", "people")])]),
    ("/* gh-ost */ RENAME TABLE t TO _t_del, _t_gho TO t", ("shop", "_t_del"),
     [(("shop", "t"), [DDL.RenameTable("shop", "_t_del")]), (("shop", "_t_gho"), [DDL.RenameTable("shop", "t")])]),
    ("RENAME TABLE t TO", ("shop", "t"), [(("shop", "t"), [DDL.Unsupported("RENAME TABLE statement not understood: "
                                                                            "RENAME TABLE t TO")])]),
    ("DROP TABLE IF EXISTS a, other.`b, c` CASCADE", ("shop", "a"),
     [(("shop", "a"), [DDL.DropTable()]), (("other", "b, c"), [DDL.DropTable()])]),
    # Otherwise the message's table, as the producers state it.
    ("DROP TABLE `other`.`a`", ("shop", "a"), [(("shop", "a"), [DDL.DropTable()])]),
    ("ALTER TABLE t ADD COLUMN c int", ("shop", "t"), [(("shop", "t"), [DDL.AddColumn("c", "int")])]),
])
def test_a_statement_changes_the_tables_it_names(statement, message, changes):
    assert DDL.by_table(statement, *message) == changes
    assert DDL.changed_table(statement, *message) == changes[0][0]


@pytest.mark.parametrize(("statement", "event", "message"), [
    ("RENAME TABLE shop.users TO shop.people", ("shop", "users"), ("shop", "people")),
    ("RENAME TABLE a TO b, c TO d", ("shop", "a"), ("shop", "b")),
    ("ALTER TABLE users RENAME TO people", ("shop", "users"), ("shop", "people")),
    ("ALTER TABLE users ADD COLUMN c int", ("shop", "users"), ("shop", "users")),
])
def test_an_encoder_names_a_statement_as_canal_and_ticdc_do(statement, event, message):
    assert DDL.message_table(statement, *event) == message
    assert DDL.changed_table(statement, *message) == event


@pytest.fixture
def sink(tmp_path) -> DeltaSink:
    sink = DeltaSink(str(tmp_path / "lake"), "p")
    sink.apply_rows("d", "t", changes([{"id": 1, "name": "a", "score": pa.scalar(7, pa.int32())},
                                       {"id": 2, "name": None, "score": pa.scalar(None, pa.int32())}]), 1001)
    return sink


def table_of(sink: DeltaSink) -> pa.Table:
    return DeltaTable(sink.table_uri("d", "t")).to_pyarrow_table().sort_by("id")


def test_a_renamed_column_keeps_its_values_and_type_and_a_replay_renames_nothing_twice(sink):
    assert sink.apply_ddl("d", "t", DDL.RenameColumn("name", "full_name"), 1002, "s") == \
        "renamed column name to full_name"
    table = table_of(sink)
    assert "name" not in table.column_names and table["full_name"].to_pylist() == ["a", None]
    assert sink.apply_ddl("d", "t", DDL.RenameColumn("name", "full_name"), 1002, "s") == "already applied"
    # A later statement renaming it back is a new clause, with a later version.
    assert sink.apply_ddl("d", "t", DDL.RenameColumn("full_name", "Name"), 1003, "s") == \
        "renamed column full_name to Name"
    assert table_of(sink)["Name"].to_pylist() == ["a", None]


def test_change_column_renames_and_widens_in_one_commit(sink):
    before = DeltaTable(sink.table_uri("d", "t")).version()
    assert sink.apply_ddl("d", "t", DDL.ModifyColumn("score", "bigint", "points"), 1002, "s", pa.int64()) == \
        "renamed column score to points"
    table = DeltaTable(sink.table_uri("d", "t"))
    assert table.version() == before + 1
    data = table.to_pyarrow_table().sort_by("id")
    assert data.schema.field("points").type == pa.int64() and data["points"].to_pylist() == [7, None]


def test_a_rename_onto_a_column_that_rows_read_ahead_brought_keeps_each_rows_latest_value(sink):
    """A partition read ahead of the one with the statement brought rows under the new name first."""
    sink.apply_rows("d", "t", changes([{"id": 2, "full_name": "b", "score": pa.scalar(8, pa.int32())},
                                       {"id": 3, "full_name": "c", "score": pa.scalar(9, pa.int32())}], at=5), 1002)
    assert sink.apply_ddl("d", "t", DDL.RenameColumn("name", "Full_Name"), 1003, f"{4:020d}/") == \
        "renamed column name to Full_Name"
    table = table_of(sink)
    assert [n for n in table.column_names if not n.startswith("_cdc")] == ["id", "Full_Name", "score"]
    assert table["Full_Name"].to_pylist() == ["a", "b", "c"]  # row 1 was written before the rename, 2 and 3 after


@pytest.mark.parametrize(("action", "lake_type", "reason"), [
    (DDL.RenameColumn("score", "seen"), None, "column score cannot be renamed to seen: the lake table has a column "
                                              "seen of type timestamp.*, which cannot hold its values"),
    (DDL.ModifyColumn("score", "tinyint", "points"), pa.int8(), "column points cannot change from int32 to int8"),
    (DDL.RenameColumn("name", "nickname"), None, "column name cannot be renamed to nickname: the lake table has a "
                                                 "column nickname with values that rows written before the rename"),
])
def test_a_rename_that_would_lose_values_stops_the_table_and_changes_nothing(sink, action, lake_type, reason):
    sink.apply_rows("d", "t", changes([{"id": 3, "seen": dt.datetime(2024, 5, 1, tzinfo=dt.UTC),
                                        "nickname": "c"}]), 1002)
    before = table_of(sink)
    with pytest.raises(TableStopped, match=reason):
        sink.apply_ddl("d", "t", action, 1003, "s", lake_type)
    assert table_of(sink) == before


def test_renaming_a_column_the_lake_never_had_changes_nothing(sink):
    assert sink.apply_ddl("d", "t", DDL.RenameColumn("nickname", "alias"), 1002, "s") == "no such column"
    assert sink.apply_ddl("d", "u", DDL.RenameColumn("nickname", "alias"), 1002, "s") == "no lake table yet"


# -- the types of columns that a table's first rows leave NULL ----------------------------------------------------
def test_deletes_of_a_table_the_lake_has_not_make_no_table(tmp_path):
    sink = DeltaSink(str(tmp_path / "lake"), "p")
    deletes = changes([{"id": 1, "blob": None}]).set_column(1, "_cdc_op", pa.array(["d"]))
    assert sink.apply_rows("d", "t", deletes, 1001) == {"inserted": 0, "updated": 0, "deleted": 0}
    assert not DeltaTable.is_deltatable(sink.table_uri("d", "t"))


@pytest.mark.parametrize("values", [pa.array([b"\xff\x00"], pa.binary()), pa.array([7], pa.int64())],
                         ids=["bytes", "integers"])
def test_a_text_column_that_never_held_a_value_takes_the_type_of_the_first_values(tmp_path, values):
    """A producer may state a stand-in type for NULL (DTS cannot tell a NULL BLOB from a NULL TEXT): the lake column
    made from it is not the column's type, and the first values bring theirs, unchanged, rather than as text."""
    sink = DeltaSink(str(tmp_path / "lake"), "p")
    sink.apply_rows("d", "t", changes([{"id": 1, "c": pa.scalar(None, pa.string())}]), 1001, {"c"})
    sink.apply_rows("d", "t", changes([{"id": 2, "c": values[0]}]), 2001)
    table = table_of(sink)
    assert table.schema.field("c").type == values.type and table["c"].to_pylist() == [None, values[0].as_py()]


def test_bytes_that_are_not_text_stop_the_table_of_a_text_column_with_values(tmp_path):
    sink = DeltaSink(str(tmp_path / "lake"), "p")
    sink.apply_rows("d", "t", changes([{"id": 1, "c": "text"}]), 1001)
    with pytest.raises(TableStopped, match="column c: its values cannot become string"):
        sink.apply_rows("d", "t", changes([{"id": 2, "c": b"\xff"}]), 2001)
    assert table_of(sink)["c"].to_pylist() == ["text"]
    # Bytes that are text (a BLOB column made TEXT) become text.
    sink.apply_rows("d", "t", changes([{"id": 2, "c": b"caf\xc3\xa9"}]), 3001)
    assert table_of(sink)["c"].to_pylist() == ["text", "café"]


# -- rows of a partition read behind the one that sent the statement ----------------------------------------------
def test_older_rows_under_a_renamed_or_dropped_columns_old_name_do_not_bring_it_back(sink):
    """A partition read behind the one with the statements brings rows written before them, in a later batch."""
    sink.apply_ddl("d", "t", DDL.RenameColumn("name", "nick"), 1002, f"{10:020d}/")
    sink.apply_ddl("d", "t", DDL.RenameColumn("nick", "alias"), 1003, f"{11:020d}/")
    sink.apply_ddl("d", "t", DDL.DropColumn("score"), 1004, f"{12:020d}/")
    late = changes([{"id": 1, "name": "a5", "score": pa.scalar(5, pa.int32())},
                    {"id": 2, "name": "b6", "score": pa.scalar(6, pa.int32())}], at=5)
    sink.apply_rows("d", "t", late, 2001)
    table = table_of(sink)
    assert [n for n in table.column_names if not n.startswith("_cdc")] == ["id", "alias"]
    assert table["alias"].to_pylist() == ["a5", "b6"]
    # A row written after the statements that carries a column of the old name has a new column of that name.
    sink.apply_rows("d", "t", changes([{"id": 3, "name": "c", "alias": "z"}], at=20), 3001)
    table = table_of(sink)
    assert table["name"].to_pylist() == [None, None, "c"] and table["alias"].to_pylist() == ["a5", "b6", "z"]


# -- rewrites of tables of many files ------------------------------------------------------------------------------
def test_a_rewrite_goes_through_every_file_and_a_value_that_stops_it_in_any_file_changes_nothing(tmp_path):
    """A dropped, renamed or retyped column rewrites the table a batch of rows at a time (a table larger than memory
    fits): a value that cannot take the new type, in a file read after others were written, still stops the table
    before the rewrite's commit."""
    sink = DeltaSink(str(tmp_path / "lake"), "p")
    for batch in range(1, 5):
        ids = range(batch * 10, batch * 10 + 10)
        sink.apply_rows("d", "t", changes([{"id": i, "name": f"n{i}", "score": pa.scalar(i if batch == 4 else None,
                                                                                         pa.int32())} for i in ids]),
                        batch * 1000 + 1)
    table = DeltaTable(sink.table_uri("d", "t"))
    assert len(table.file_uris()) >= 4
    before, version = table_of(sink), table.version()
    with pytest.raises(TableStopped, match="column score cannot change from int32 to int8 without loss"):
        sink.apply_ddl("d", "t", DDL.ModifyColumn("score", "tinyint"), 5001, "s", pa.int8())
    assert DeltaTable(sink.table_uri("d", "t")).version() == version and table_of(sink) == before
    assert sink.apply_ddl("d", "t", DDL.DropColumn("name"), 5001, "s") == "dropped column name"
    assert table_of(sink) == before.drop_columns(["name"])

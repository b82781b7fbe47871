"""Hostile names and positions through ``cdclake run`` (its own Spark, real Delta tables): nothing is written outside
the lake, the lake's own tables keep their schema, innocent tables of the same batch are right, every hostile record
is applied under its mapped name (RENAME TABLE and DROP TABLE too) and ``cdclake status`` shows the source's names; a
TRUNCATE whose position holds SQL deletes only older rows, and one whose position holds a lone quote does not stop
the run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from typer.testing import CliRunner

from cdclake import formats
from cdclake.cli.main import app
from cdclake.lake import paths as lakepaths
from cdclake.lake.layout import DEAD_LETTERS, PROGRESS, TOMBSTONES
from cdclake.model.events import DDL, INSERT, ROW, TRUNCATE, ChangeEvent, Column
from cdclake.model.records import write_records
from tests.helpers.lake import lake_rows

pytestmark = pytest.mark.spark

COLUMNS = [Column("id", "bigint", key=True, nullable=False), Column("v", "varchar(32)", nullable=True)]
HOSTILE = [("../../../elsewhere", "escaped"), ("_cdclake", "progress"), ("_cdclake", "dead_letters"), (".", ".."),
           ("..", "."), ("a/b", "c\\d"), ("shop", "Users"), ("shop", "USERS"), ("", "t"),
           ("shop", "_history"), ("d" * 300, "long"), ("%2e%2e", "a=b"), ("shop", "é😀\x00'\"`")]
INNOCENT = [("shop", "users"), ("shop", "orders")]
# The file name of a binlog position: SQL that made the TRUNCATE's delete take every row, and a lone quote.
INJECTED = "z' OR '1'<'2"


def _row(database: str, table: str, ts: int, i: int, position: str | None = None) -> ChangeEvent:
    return ChangeEvent(kind=ROW, op=INSERT, database=database, table=table, key={"id": i},
                       after={"id": i, "v": f"{database}.{table}:{i}"}, columns=COLUMNS, commit_ts=ts,
                       position=position, ts_ms=ts)


def _binlog(file: str, pos: int) -> str:
    return f"{file}/{pos:020d}/{0:020d}"


def _tree(root: Path, skip: set[Path]) -> dict[str, int]:
    """Every path under ``root`` but those under ``skip``, with its size (directories: 0)."""
    found = {}
    for path in sorted(root.rglob("*")):
        if not any(path == s or s in path.parents for s in skip):
            found[str(path.relative_to(root))] = 0 if path.is_dir() else path.stat().st_size
    return found


def test_hostile_names_and_positions_through_cdclake_run(tmp_path):
    lake = tmp_path / "x" / "y" / "lake"  # three levels down: "../../../elsewhere" would land in tmp_path
    canal, debezium = tmp_path / "in" / "canal", tmp_path / "in" / "debezium"
    canal.mkdir(parents=True)
    lake.parent.mkdir(parents=True)
    debezium.mkdir(parents=True)
    names = HOSTILE + INNOCENT
    events = [_row(d, t, (100 + n) << 18, i) for n, (d, t) in enumerate([*names, ("shop", "")]) for i in (1, 2)]
    # DDL whose names are hostile too: a RENAME TABLE out of the lake, a DROP TABLE of the lake's own dead letters
    events += [ChangeEvent(kind=DDL, database="..", table="moved", ddl="RENAME TABLE `..`.`.` TO `../..`.`moved`",
                           commit_ts=200 << 18),
               ChangeEvent(kind=DDL, database="_cdclake", table="dead_letters", commit_ts=201 << 18,
                           ddl="DROP TABLE `_cdclake`.`dead_letters`")]
    write_records(canal / "1.jsonl", formats.create("canal-json", {"flavour": "tidb"}).encode(events))
    # Debezium MySQL: each table gets a row older and a row newer than its TRUNCATE, which arrives in a later batch.
    late = [_row("db", "injected", 1000, 1, _binlog("f", 1)), _row("db", "injected", 3000, 2, _binlog("f", 3)),
            _row("db", "quoted", 1000, 1, _binlog("f", 1)), _row("db", "quoted", 3000, 2, _binlog("f", 3)),
            ChangeEvent(kind=TRUNCATE, database="db", table="injected", commit_ts=2000, ts_ms=2000,
                        position=_binlog(INJECTED, 2)),
            ChangeEvent(kind=TRUNCATE, database="db", table="quoted", commit_ts=2000, ts_ms=2000,
                        position=_binlog("mysql'bin", 2))]
    write_records(debezium / "1.jsonl", formats.create("debezium-json", {}).encode(late))
    config = tmp_path / "PIPELINE.toml"
    config.write_text(f'name = "hostile"\nlake = "{lake}"\nmax_dead_letter_ratio = 1\n'  # some are dead letters
                      f'[[source]]\nname = "canal"\nformat = "canal-json"\ninput = "{canal}"\n'
                      f'[[source]]\nname = "debezium"\nformat = "debezium-json"\ninput = "{debezium}"\n'
                      f'max_records_per_batch = 4\n')
    before = _tree(tmp_path, {lake, tmp_path / "in"})

    done = subprocess.run([sys.executable, "-m", "cdclake", "run", str(config)], capture_output=True, text=True,
                          timeout=600, check=False)

    assert done.returncode == 0, done.stderr
    assert _tree(tmp_path, {lake, tmp_path / "in"}) == before  # nothing written, moved or deleted outside the lake
    own = {"progress": PROGRESS, "dead_letters": DEAD_LETTERS, "tombstones": TOMBSTONES}
    for name, schema in own.items():
        path = lake / "_cdclake" / name
        if DeltaTable.is_deltatable(str(path)):
            assert pa.schema(DeltaTable(str(path)).schema().to_arrow()).names == schema.names, name
    dead = DeltaTable(str(lake / "_cdclake" / "dead_letters")).to_pyarrow_table(columns=["offset", "reason"])
    assert dead.to_pylist() == [{"offset": offset, "reason": "INSERT message without table"}  # the empty table name
                                for offset in (2 * len(names), 2 * len(names) + 1)]
    # each source table → where its rows are now: the DROP took the table named _cdclake.dead_letters, not the lake's
    now = {name: name for name in names if name != ("_cdclake", "dead_letters")}
    now[("..", ".")] = ("../..", "moved")
    for (database, table), where in now.items():
        assert sorted(lake_rows(str(lake), *where).values(), key=str) == [
            {"id": i, "v": f"{database}.{table}:{i}"} for i in (1, 2)], (database, table)
    assert sorted(lakepaths.lake_tables(str(lake))) == sorted([*now.values(), ("db", "injected"), ("db", "quoted")])
    for entry in os.listdir(lake):
        assert entry == "_cdclake" or lakepaths.source(entry) is not None or "~~" in entry
    # the late TRUNCATEs deleted the older row only
    assert sorted(lake_rows(str(lake), "db", "injected")) == ["[2]"]
    assert sorted(lake_rows(str(lake), "db", "quoted")) == ["[2]"]

    shown = CliRunner().invoke(app, ["status", str(lake)])
    assert shown.exit_code == 0, shown.output
    assert "../../../elsewhere.escaped " in shown.output and "_cdclake.progress " in shown.output
    assert "shop.Users " in shown.output and "shop.USERS " in shown.output and "a/b.c\\d " in shown.output

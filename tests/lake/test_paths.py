"""The mapping of source names to lake path segments, with hostile names: total, injective (also where case is not
told apart), reversible, and never a path of its own nor one of the lake's reserved names."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cdclake.lake import paths as L
from cdclake.lake.delta import DeltaSink

# Any str, lone surrogates included; also long ones, whose encoding passes the segment limit.
names = st.text(st.characters(codec=None, exclude_categories=()), max_size=40) | st.text(max_size=400)
HOSTILE = ["", ".", "..", "...", "/", "a/b", "../../../elsewhere", "\\", "a\\b", "\x00", "a\x00b", "_cdclake",
           "_history", "_delta_log", ".hidden", "-rf", "~", "~2e", "%2e%2e", "a=b", "CON", "Users", "users",
           "\udc80", "\ud83d\ude00", "😀", "é", "e\u0301", " ", "\n", "x" * 300, "é" * 200, "~" * 100]


def _check_segment(seg: str) -> None:
    assert seg not in (".", "..") and seg
    assert not any(c in seg for c in "/\\\x00%=.:") and not seg.startswith(("_", ".", "-"))
    assert seg == seg.lower() and seg.isascii() and len(seg.encode()) <= L.MAX_SEGMENT


@settings(max_examples=2000)
@given(names)
@example("")
@example("..")
@example("_cdclake")
@example("\udfff")
def test_every_name_has_a_safe_segment_that_gives_the_name_back(name):
    seg = L.segment(name)
    _check_segment(seg)
    assert L.source(seg) == name if "~~" not in seg else L.source(seg) is None  # hashed: its table names it


@settings(max_examples=2000)
@given(names, names)
def test_two_names_never_share_a_segment_not_even_by_case(a, b):
    if a != b:
        assert L.segment(a).casefold() != L.segment(b).casefold()


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names(name):
    seg = L.segment(name)
    _check_segment(seg)
    assert L.source(seg) in (name, None)
    assert len({L.segment(n).lower() for n in HOSTILE}) == len(set(HOSTILE))


def test_plain_names_of_an_earlier_lake_map_to_themselves_and_the_rest_is_escaped():
    assert [L.segment(n) for n in ("shop", "order_items", "t1", "a-b")] == ["shop", "order_items", "t1", "a-b"]
    assert [L.segment(n) for n in ("", "_x", "Users", "a.b", "..", "a/b", "-x")] == [
        "~", "~5fx", "~55sers", "a~2eb", "~2e~2e", "a~2fb", "~2dx"]


@pytest.mark.parametrize("segment", ["_", "Users", "a.b", "..", "~", "~5", "~zz", "~5fx~", "a~2Fb", "_x",
                                     "~ff", "a%2fb", "~c3", "x~~" + "0" * 31])
def test_only_segments_the_mapping_makes_are_read_back(segment):
    if segment == "~":
        assert L.source(segment) == ""
        return
    with pytest.raises(ValueError):
        L.source(segment)


def test_a_long_name_is_hashed_and_read_back_from_its_table(tmp_path):
    database, table = "d" * 300, "T" * 90
    sink = DeltaSink(str(tmp_path), "p")
    uri = sink.table_uri(database, table)
    assert os.path.dirname(uri) == str(tmp_path / L.segment(database)) and L.source(L.segment(database)) is None
    sink.writer.ensure_table(uri, pa.schema([("id", pa.int64())]), None, L.stated_name(database, table))
    assert json.loads(DeltaTable(uri).metadata().name) == [database, table]
    assert L.lake_tables(str(tmp_path)) == [(database, table)] and not L.foreign_tables(str(tmp_path))
    DeltaTable(uri).alter.set_table_properties({L.SOURCE_NAME: L.stated_name("x", "y" * 300)},
                                               raise_if_not_exists=False)
    assert L.lake_tables(str(tmp_path)) == [(database, table)]  # a rename's name, before its move: the table's own


def test_tables_of_an_earlier_cdclake_with_other_names_are_refused_not_re_mapped(tmp_path):
    for database, table in (("shop", "users"), ("_", "t"), ("Shop", "a.b")):
        write_deltalake(str(tmp_path / database / table), pa.table({"id": [1]}))
    (tmp_path / "_cdclake" / "progress").mkdir(parents=True)
    assert L.lake_tables(str(tmp_path)) == [("shop", "users")]
    assert L.foreign_tables(str(tmp_path)) == ["Shop/a.b", "_/t"]
    refusal = L.refuse_foreign(str(tmp_path))
    assert "\n" not in refusal and "Shop/a.b (and 1 more)" in refusal and "move it to ~53hop/a~2eb" in refusal


def test_run_status_and_maintain_refuse_a_lake_with_names_of_an_earlier_cdclake_in_one_line(tmp_path):
    from typer.testing import CliRunner

    from cdclake.cli.main import app

    lake = tmp_path / "lake"
    write_deltalake(str(lake / "_" / "t"), pa.table({"id": [1]}))  # an empty database, as cdclake wrote it before
    (tmp_path / "in").mkdir()
    before = sorted(p.name for p in lake.rglob("*"))
    for args in (["status", str(lake)], ["maintain", str(lake)], ["dead-letters", str(lake)],
                 ["run", "--format", "canal-json", "--input", str(tmp_path / "in"), "--lake", str(lake)]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert result.output == (f"cdclake: {lake}: table directory _/t is not named as this cdclake names tables; "
                                 f"move it to ~/t or run `cdclake migrate-names {lake}` (see the README's 'Lake "
                                 f"layout')\n"), args
    assert sorted(p.name for p in lake.rglob("*")) == before  # refused, not re-mapped


def test_migrate_names_moves_the_tables_of_an_earlier_cdclake_where_they_belong(tmp_path):
    from typer.testing import CliRunner

    from cdclake.cli.main import app

    lake = tmp_path / "lake"
    old = {("_", "t"): "", ("Shop", "Users"): "Shop", ("shop", "a.b"): "shop", ("shop", "ok"): "shop",
           ("shop", "L" * 200): "shop"}
    for database, table in old:
        write_deltalake(str(lake / database / table), pa.table({"id": [len(table)]}))
    result = CliRunner().invoke(app, ["migrate-names", str(lake)])
    assert result.exit_code == 0, result.output
    assert sorted(L.lake_tables(str(lake))) == sorted((source, table) for (_, table), source in old.items())
    for (_, table), source in old.items():
        assert DeltaTable(L.table_path(str(lake), source, table)).to_pyarrow_table()["id"].to_pylist() == [len(table)]
    assert sorted(os.listdir(lake)) == ["shop", "~", "~53hop"] and not L.refuse_foreign(str(lake))
    assert CliRunner().invoke(app, ["migrate-names", str(lake)]).output == "0 tables moved\n"


def test_status_shows_each_source_name_on_one_line_with_what_a_terminal_acts_on_escaped():
    from cdclake.cli.status import render

    names = ["../x.t", "shop.a\nb", "shop.\x1b[2Jc", "shop.\udc80", "shop.é😀"]
    lines = render({"tables": {n: {"rows": 1} for n in names}, "unreadable": {}, "dead_letters": {}}).splitlines()
    assert [line.split(" ")[0] for line in lines[1:-1]] == [
        "../x.t", "shop.a\\nb", "shop.\\x1b[2Jc", "shop.\\udc80", "shop.é😀"]


def test_the_lakes_own_paths_are_under_its_reserved_directory():
    assert L.own_path("/lake/", "progress") == "/lake/_cdclake/progress"
    assert L.own_root("s3://bucket/lake/") == "s3://bucket/lake/_cdclake"
    first, second = L.discard_path("/lake"), L.discard_path("/lake")
    assert first.startswith("/lake/_cdclake/discarded/") and second.startswith("/lake/_cdclake/discarded/")
    assert first != second

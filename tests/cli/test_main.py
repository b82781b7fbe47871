"""The command line as a user meets it: help, version, exit codes, conflicting flags, paths that are not lakes."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pyarrow as pa
import typer.main
import typer.rich_utils
from click.testing import Result
from deltalake import DeltaTable, write_deltalake
from typer.testing import CliRunner

from cdclake.cli.main import UNREACHABLE, USAGE, app
from cdclake.lake.delta import DeltaSink
from cdclake.lake.layout import RENAMED_TO
from cdclake.model.records import read_file


def test_every_command_renders_its_help_with_each_options_help_and_default(monkeypatch):
    monkeypatch.setattr(typer.rich_utils, "MAX_WIDTH", 1000)  # each option on one line
    commands = typer.main.get_command(app).commands
    assert len(commands) >= 12
    for name, command in commands.items():
        result = CliRunner().invoke(app, [name, "--help"])
        assert result.exit_code == 0, (name, result.output)  # a MarkupError crash exits 1
        lines = result.output.splitlines()
        for param in command.params:
            if param.name == "help":
                continue
            row = " ".join(next(line for line in lines if {param.opts[0], f"{param.opts[0]}..."}
                                & set(line.strip("│ ").split()[:4])).split())
            # Escaped for rich, shown as written (e.g. "[/REGISTRY]", "[default: 600]").
            assert " ".join(param.help.replace("\\[", "[").split()) in row, (name, param.name, row)
            flag_alone = getattr(param, "is_flag", False) and not param.secondary_opts  # --all: typer shows none
            if param.default not in (None, "", []) and param.show_default is not False and not flag_alone:
                shown = (param.opts[0] if param.default else param.secondary_opts[0]).lstrip("-") \
                    if getattr(param, "is_bool_flag", False) and param.secondary_opts else str(param.default)
                assert f"[default: {shown}]" in row, (name, param.name, row)


def test_version():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.startswith("cdclake 0.")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again on return: nothing listens there


def _one_line_error(result: Result, code: int, text: str) -> None:
    assert result.exit_code == code, (result.exit_code, result.output)
    assert isinstance(result.exception, SystemExit), result.exception  # said, not crashed
    assert result.output.startswith("cdclake: ") and len(result.output.splitlines()) == 1, result.output
    assert text in result.output, result.output


def test_kafka_unreachable_is_not_a_usage_error(tmp_path):
    result = CliRunner().invoke(app, [
        "run", "--format", "canal-json", "--kafka", f"127.0.0.1:{_closed_port()}", "--topic", "t",
        "--lake", str(tmp_path / "lake"), "--kafka-retry-seconds", "1"])
    _one_line_error(result, UNREACHABLE, "unreachable")
    assert UNREACHABLE == 4


def test_kafka_flags_with_an_input_directory_are_an_error(tmp_path):
    (tmp_path / "in").mkdir()
    for flags in (["--connector", "spark"], ["--topic", "t"], ["--starting-offsets", "latest"]):
        result = CliRunner().invoke(app, ["run", "--format", "canal-json", "--input", str(tmp_path / "in"),
                                          "--lake", str(tmp_path / "lake"), *flags])
        _one_line_error(result, USAGE, f"{flags[0]} for Kafka: --input reads files")
    assert not (tmp_path / "lake").exists()  # refused before anything was made


def test_commands_on_a_lake_refuse_a_directory_that_is_none(tmp_path):
    write_deltalake(str(tmp_path / "someone" / "table"), pa.table({"id": [1]}))  # a Delta table, not a lake
    for command in (["status"], ["maintain"], ["dead-letters"]):
        result = CliRunner().invoke(app, [*command, str(tmp_path)])
        _one_line_error(result, USAGE, f"{tmp_path}: not a cdclake lake")


def test_dead_letters_of_a_pipeline_the_lake_does_not_know(tmp_path):
    DeltaSink(str(tmp_path), "shop.orders").record_progress({"tables": {}}, 0)
    result = CliRunner().invoke(app, ["dead-letters", str(tmp_path), "--pipeline", "nope"])
    _one_line_error(result, USAGE, "has no pipeline 'nope' (its pipelines: shop)")
    known = CliRunner().invoke(app, ["dead-letters", str(tmp_path), "--pipeline", "shop"])
    assert known.exit_code == 0 and "0 dead letters" in known.output, known.output


def test_status_sorts_and_leaves_out_dropped_and_renamed_tables_unless_all_and_speaks_json(tmp_path):
    seq = "00000001714521600065/00000000000000000000/00000000000000000204/00000000000000000007"
    for name in ("db.zeta", "db.alpha", "db.old"):
        write_deltalake(str(tmp_path / name.replace(".", "/")), pa.table({"id": [1, 2]}))
    DeltaTable(str(tmp_path / "db" / "old")).alter.set_table_properties({RENAMED_TO: "db.alpha"},
                                                                     raise_if_not_exists=False)
    DeltaSink(str(tmp_path), "main").record_progress({"tables": {
        name: {"last_seq": seq, "stopped": None} for name in ("db.zeta", "db.alpha", "db.old", "db.dropped")}}, 0)
    shown = CliRunner().invoke(app, ["status", str(tmp_path)])
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert [line.split()[0] for line in lines[1:4]] == ["db.alpha", "db.zeta", "(2"], shown.output
    assert lines[3] == "(2 dropped or renamed tables not shown: --all)"
    every = CliRunner().invoke(app, ["status", str(tmp_path), "--all"]).output.splitlines()
    assert [line.split()[0] for line in every[1:5]] == ["db.alpha", "db.dropped", "db.old", "db.zeta"], every
    assert every[2].split()[1] == "0" and every[2].endswith("DROPPED (no lake table)"), every
    assert every[3].endswith("RENAMED to db.alpha"), every
    as_json = CliRunner().invoke(app, ["status", str(tmp_path), "--json"])
    state = json.loads(as_json.output)
    assert as_json.exit_code == 0 and list(state["tables"]) == ["db.alpha", "db.dropped", "db.old", "db.zeta"]
    assert state["tables"]["db.old"]["renamed_to"] == "db.alpha" and state["tables"]["db.dropped"]["gone"] is True


def test_decode_of_debezium_values_without_kafka_keys_warns_and_names_a_misread_format(tmp_path):
    generated = tmp_path / "gen"
    assert CliRunner().invoke(app, ["generate", "--format", "debezium-json", "--out", str(generated), "--events",
                                    "10"]).exit_code == 0
    captured = sorted((generated / "records").iterdir())
    values = [line.record.value for path in captured for line in read_file(path) if line.record.value]
    (tmp_path / "values.txt").write_bytes(b"".join(value + b"\n" for value in values))
    keyless = CliRunner().invoke(app, ["decode", "--format", "debezium-json", str(tmp_path / "values.txt")])
    assert keyless.exit_code == 0, keyless.output
    assert f"warning: {len(values)} records without a Kafka key: debezium-json takes a row's key from it" \
        in keyless.stderr
    keyed = CliRunner().invoke(app, ["decode", "--format", "debezium-json", *map(str, captured)])
    assert keyed.exit_code == 0 and "warning" not in keyed.stderr, keyed.stderr
    misread = CliRunner().invoke(app, ["decode", "--format", "canal-json", *map(str, captured)])
    assert misread.exit_code == 1 and misread.stdout == ""
    assert misread.stderr.splitlines()[-1] == (
        "hint: none of the records decoded as canal-json; they look like debezium-json (--format debezium-json)")


def test_a_schema_registry_that_is_down_stops_a_run_before_spark_starts(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "1.txt").write_bytes(b"\x00\x00\x00\x00\x01\x02\n")
    port = _closed_port()
    result = CliRunner().invoke(app, ["run", "--format", "debezium-avro", "--input", str(tmp_path / "in"), "--lake",
                                      str(tmp_path / "lake"), "--option", f"registry=http://127.0.0.1:{port}"])
    assert "starting Spark" not in result.output, result.output
    _one_line_error(result, UNREACHABLE, f"cdclake: stopped: schema registry http://127.0.0.1:{port} could not be "
                                         "reached (URLError: ")


WRITER = """
import sys, time
import pyarrow as pa
from deltalake import write_deltalake
from cdclake.lake.delta import DeltaSink
sink, i = DeltaSink(sys.argv[1], "p.main"), 0
while True:
    write_deltalake(sys.argv[1] + "/db/t", pa.table({"id": [i]}), mode="append")
    sink.record_progress({"tables": {"db.t": {"last_seq": f"{i:020d}/", "stopped": None}}}, i)
    i += 1
"""


def test_status_beside_a_run_writing_the_lake_never_aborts(tmp_path):
    # Before, about one `cdclake status` in forty ended "terminate called without an active exception" (exit 134)
    # after printing everything: a C++ destructor of pyarrow's at exit.
    lake = tmp_path / "lake"
    write_deltalake(str(lake / "db" / "t"), pa.table({"id": [-1]}))
    (lake / "_cdclake").mkdir()
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(lake)])
    try:
        codes = [subprocess.run([sys.executable, "-m", "cdclake", "status", str(lake)], capture_output=True,
                                text=True, timeout=60, check=False) for _ in range(20)]
    finally:
        writer.kill()
        writer.wait()
    assert [done.returncode for done in codes] == [0] * 20, [done.stderr for done in codes if done.returncode]
    assert all(done.stdout.splitlines()[1].startswith("db.t ") for done in codes)

"""Reading PIPELINE.toml: every value has the type its key needs, or the error names the key."""

from __future__ import annotations

import pytest

from cdclake.pipeline import config as C

SOURCE = '[[source]]\nformat = "canal-json"\ninput = "/data/in"\n'


def _load(tmp_path, text: str) -> C.PipelineConfig:
    path = tmp_path / "PIPELINE.toml"
    path.write_text(text)
    return C.load(str(path))


@pytest.mark.parametrize(("text", "message"), [
    ('lake = 5\n' + SOURCE, "'lake' must be a string, not 5"),
    ('lake = "/l"\nfollow = "maybe"\n' + SOURCE, "'follow' must be true or false, not 'maybe'"),
    ('lake = "/l"\nfollow = 1\n' + SOURCE, "'follow' must be true or false, not 1"),
    ('lake = "/l"\npoll_seconds = "fast"\n' + SOURCE, "'poll_seconds' must be a number, not 'fast'"),
    ('lake = "/l"\ntombstone_retention_hours = true\n' + SOURCE,
     "'tombstone_retention_hours' must be a number, not True"),
    ('lake = "/l"\n' + SOURCE + 'max_records_per_batch = "abc"\n',
     "source 1: 'max_records_per_batch' must be a whole number, not 'abc'"),
    ('lake = "/l"\n' + SOURCE + 'max_records_per_batch = 1.5\n',
     "source 1: 'max_records_per_batch' must be a whole number, not 1.5"),
    ('lake = "/l"\n' + SOURCE + 'options = "x"\n', "source 1: 'options' must be a table, not 'x'"),
    ('lake = "/l"\n' + SOURCE + 'kafka_options = ["a"]\n', "source 1: 'kafka_options' must be a table"),
    ('lake = "/l"\n[spark]\nmaster = 7\n' + SOURCE, "[spark] 'master' must be a string, not 7"),
    ('lake = "/l"\n[[source]]\nformat = "canal-json"\nkafka = "h:9092"\ntopics = ["a", 7]\n',
     "source 1: 'topics' must be a list of strings or a string, not ['a', 7]"),
    ('lake = "/l"\n[[source]]\nformat = "canal-json"\nkafka = "h:9092"\ntopics = 5\n',
     "source 1: 'topics' must be a list of strings or a string, not 5"),
    ('lake = "/l"\nsource = [1]\n', "source 1: must be a table ([[source]]), not 1"),
])
def test_a_value_of_the_wrong_type_is_an_error_that_names_its_key(tmp_path, text, message):
    with pytest.raises(ValueError) as raised:
        _load(tmp_path, text)
    assert message in str(raised.value)


def test_numbers_and_true_or_false_are_also_read_from_their_text(tmp_path):
    config = _load(tmp_path, 'lake = "/l"\nfollow = "False"\npoll_seconds = "0.5"\n' + SOURCE
                   + 'max_records_per_batch = "1000"\n')
    assert (config.follow, config.poll_seconds, config.sources[0].max_records_per_batch) == (False, 0.5, 1000)
    config = _load(tmp_path, 'lake = "/l"\nfollow = true\npoll_seconds = 2\n' + SOURCE)
    assert (config.follow, config.poll_seconds, config.sources[0].max_records_per_batch) == (True, 2.0, 0)


@pytest.mark.parametrize(("text", "message"), [
    ('lake = "/l"\npoll_seconds = 0\n' + SOURCE, "poll_seconds must be more than 0, not 0.0"),
    ('lake = "/l"\ntombstone_retention_hours = -1\n' + SOURCE, "tombstone_retention_hours must be 0 or more"),
    ('lake = "/l"\n' + SOURCE.replace('"/data/in"', '"."') + 'max_records_per_batch = -3\n',
     "source source1: max_records_per_batch must be 0 (no limit) or more, not -3"),
    # without a registry every Avro message would be a dead letter
    ('lake = "/l"\n' + SOURCE.replace("canal-json", "ticdc-avro").replace('"/data/in"', '"."'),
     "format ticdc-avro needs the registry option"),
    ('lake = "/l"\n' + SOURCE.replace("canal-json", "debezium-avro").replace('"/data/in"', '"."')
     + '[source.options]\nregistry = ""\n', "format debezium-avro needs the registry option"),
])
def test_a_value_out_of_its_range_is_an_error(tmp_path, text, message):
    with pytest.raises(ValueError) as raised:
        _load(tmp_path, text).validate()
    assert message in str(raised.value)


def test_run_with_a_pipeline_file_takes_follow_and_no_other_flag(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from cdclake.cli.main import app
    from cdclake.pipeline import runner as pipeline

    ran: list[C.PipelineConfig] = []
    monkeypatch.setattr(pipeline, "run",
                        lambda config, progress=None, say=None: ran.append(config) or pipeline.RunSummary())
    path = tmp_path / "PIPELINE.toml"
    path.write_text(f'lake = "{tmp_path / "lake"}"\n' + SOURCE.replace('"/data/in"', f'"{tmp_path}"'))
    runner = CliRunner()
    result = runner.invoke(app, ["run", str(path), "--lake", str(tmp_path / "other"), "-o", "flavour=tidb"])
    assert result.exit_code == 2 and "leave out --lake, --option" in result.output and not ran
    assert runner.invoke(app, ["run", str(path)]).exit_code == 0
    assert runner.invoke(app, ["run", str(path), "--follow"]).exit_code == 0
    assert [(config.lake, config.follow) for config in ran] == [(str(tmp_path / "lake"), False),
                                                                (str(tmp_path / "lake"), True)]


def test_a_run_that_ends_with_tables_stopped_names_them_and_exits_3(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from cdclake.cli.main import STOPPED_TABLES, app
    from cdclake.pipeline import runner as pipeline
    from cdclake.pipeline.batch import BatchReport

    def run(config, progress=None, say=None):
        report = BatchReport("main", 4, records=14, events=7, failed=6, skipped=1, dead_letters=12,
                                      stopped={"shop.users": "a narrowing type change"})
        progress(report)
        return pipeline.RunSummary([report], stopped=dict(report.stopped))

    monkeypatch.setattr(pipeline, "run", run)
    (tmp_path / "in").mkdir()
    result = CliRunner().invoke(app, ["run", "--format", "canal-json", "--input", str(tmp_path / "in"),
                                      "--lake", str(tmp_path / "lake")])
    assert result.exit_code == STOPPED_TABLES == 3
    # 14 records = 7 with events + 6 failed + 1 skipped; the dead letters are the failed and the stopped table's.
    assert "12 dead letters (6 of stopped tables), 1 skipped" in result.output
    assert "table shop.users is STOPPED, its records go to the dead letters: a narrowing type change" in result.output


@pytest.mark.parametrize(("failure", "said"), [
    # Spark writing its offset log into a lake on a read-only mount (as it printed it, then 120 lines more).
    ("[STREAM_FAILED] Query [id = 9] terminated with exception: /l/_cdclake/checkpoints/default/main/spark/offsets/"
     ".1.3281f4db.tmp (Read-only file system) SQLSTATE: XXKST\n=== Streaming Query ===",
     "cannot write /l/_cdclake/checkpoints/default/main/spark/offsets/.1.3281f4db.tmp: Read-only file system"),
    # delta-rs on the same mount, and on a full disk.
    ('Could not create local directory: ro/lake/x/y\nError: Os { code: 30, kind: ReadOnlyFilesystem, message: '
     '"Read-only file system" }', "cannot write ro/lake/x/y: Read-only file system"),
    ("Generic LocalFileSystem error: Unable to open file /d/shop/t/part-1.parquet: No space left on device (os error "
     "28)", "cannot write /d/shop/t/part-1.parquet: No space left on device"),
])
def test_a_run_the_machine_refuses_to_write_says_where_and_why_in_a_line(tmp_path, monkeypatch, failure, said):
    from typer.testing import CliRunner

    from cdclake.cli.main import app
    from cdclake.pipeline import runner as pipeline

    def run(config, progress=None, say=None):
        raise RuntimeError(failure)

    monkeypatch.setattr(pipeline, "run", run)
    (tmp_path / "in").mkdir()
    result = CliRunner().invoke(app, ["run", "--format", "canal-json", "--input", str(tmp_path / "in"),
                                      "--lake", str(tmp_path / "lake")])
    assert (result.exit_code, result.output) == (2, f"cdclake: {said}\n")
    # Any other failure is not dressed up as one.
    monkeypatch.setattr(pipeline, "run", lambda config, progress=None, say=None: 1 / 0)
    assert isinstance(CliRunner().invoke(app, ["run", "--format", "canal-json", "--input", str(tmp_path / "in"),
                                               "--lake", str(tmp_path / "lake")]).exception, ZeroDivisionError)


@pytest.mark.parametrize(("spark", "message"), [
    ('mastr = "spark://x:7077"', "[spark] unknown key(s) mastr (known: conf, master, remote)"),
    ('confg = { "spark.executor.memory" = "8g" }', "[spark] unknown key(s) confg"),
])
def test_a_typo_in_the_spark_table_is_an_error(tmp_path, spark, message):
    with pytest.raises(ValueError) as raised:
        _load(tmp_path, f'lake = "/l"\n{SOURCE}[spark]\n{spark}\n')
    assert message in str(raised.value)


def test_the_spark_table_keeps_its_keys(tmp_path):
    config = _load(tmp_path, 'lake = "/l"\n[spark]\nmaster = "spark://x:7077"\nconf = { "a.b" = 1 }\n' + SOURCE)
    assert (config.spark_master, config.spark_conf) == ("spark://x:7077", {"a.b": "1"})


@pytest.mark.parametrize(("content", "message"), [
    (b'lake = "/l\n', "not valid TOML: Illegal character '\\n' (at line 1, column 11)"),
    (b'\xff\xfelake = "/l"\n', "not valid TOML: not UTF-8 text (byte 0xff at offset 0)"),
    (None, "no such file"),
    ("a directory", "cannot be read: Is a directory"),
])
def test_a_file_that_cannot_be_read_is_a_one_line_error_that_names_it(tmp_path, content, message):
    path = tmp_path / "x.toml"
    if content == "a directory":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    with pytest.raises(ValueError) as raised:
        C.load(str(path))
    assert str(raised.value) == f"{path}: {message}"


def test_a_bad_timestamp_zone_of_a_source_fails_validation(tmp_path):
    config = _load(tmp_path, 'lake = "/l"\n' + SOURCE.replace('"/data/in"', f'"{tmp_path}"')
                   + 'options = { "timestamp-zone" = "+ab" }\n')
    with pytest.raises(ValueError, match=r"canal-json: option timestamp-zone takes .*\+08:00.*, not '\+ab'"):
        config.validate()


@pytest.mark.parametrize(("text", "message"), [
    ('lake = "/l\n', "not valid TOML"),
    ('lake = "/l"\n[spark]\nmastr = "x"\n' + SOURCE, "[spark] unknown key(s) mastr"),
    ('lake = "/l"\n' + SOURCE.replace('"/data/in"', '"."') + 'options = { "timestamp-zone" = "Mars/Base" }\n',
     "not 'Mars/Base'"),
    (None, "no such file"),
])
def test_run_turns_a_bad_pipeline_file_into_one_line_and_exit_2(tmp_path, text, message):
    from typer.testing import CliRunner

    from cdclake.cli.main import app

    path = tmp_path / "PIPELINE.toml"
    if text is not None:
        path.write_text(text)
    result = CliRunner().invoke(app, ["run", str(path)])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("cdclake: ") and result.output.count("\n") == 1 and message in result.output


@pytest.mark.parametrize("format_name", ["canal-json", "ticdc-open", "ticdc-avro"])
@pytest.mark.parametrize("zone", ["Mars/Olympus", "UTC+8", "+ab", "+25", "America", "../etc/passwd"])
def test_a_bad_timestamp_zone_is_a_value_error_that_names_the_option_and_the_forms_accepted(format_name, zone):
    from cdclake import formats
    from cdclake.model import values as V

    with pytest.raises(ValueError) as raised:
        formats.create(format_name, {"timestamp-zone": zone})
    assert str(raised.value) == f"{format_name}: option timestamp-zone takes {V.ZONE_FORMS}, not {zone!r}"


@pytest.mark.parametrize("format_name", ["canal-json", "ticdc-open"])
def test_cli_rejects_a_bad_timestamp_zone_in_one_line(tmp_path, format_name):
    from typer.testing import CliRunner

    from cdclake.cli.main import app
    from cdclake.model import values as V

    result = CliRunner().invoke(app, ["decode", "--format", format_name, "-o", "timestamp-zone=UTC+8",
                                      str(tmp_path / "none.jsonl")])
    assert result.exit_code == 2
    assert result.output == f"cdclake: {format_name}: option timestamp-zone takes {V.ZONE_FORMS}, not 'UTC+8'\n"

"""``cdclake verify`` through the command line, on captured-records files and a schema directory."""

from __future__ import annotations

import io

import fastavro
from typer.testing import CliRunner

from cdclake.cli.main import app
from cdclake.formats.avro.framing import frame
from cdclake.formats.avro.registry.directory import DirectoryRegistry
from cdclake.formats.ticdc.avro import TicdcAvro
from cdclake.model.events import DELETE, INSERT, ROW, ChangeEvent, Column
from cdclake.model.records import Record, write_records

TSO = 415508878783938562
CHECKSUM_OPTIONS = {
    "enable-tidb-extension": "true",
    "decimal-handling-mode": "string",
    "bigint-unsigned-handling-mode": "string",
    "integrity-check-level": "correctness",
}
COLUMNS = [Column("id", "int", True, False), Column("val", "varchar(10)", False, True)]


def _events():
    return [
        ChangeEvent(
            kind=ROW,
            op=INSERT,
            database="test",
            table="t",
            columns=COLUMNS,
            after={"id": i, "val": "aa"},
            commit_ts=TSO + i,
        )
        for i in range(1, 4)
    ] + [ChangeEvent(kind=ROW, op=DELETE, database="test", table="t", columns=COLUMNS, key={"id": 1})]


def _tamper(registry_dir, record: Record, **changes) -> Record:
    """The record with fields of its value datum changed, re-encoded with the same schema."""
    registry = DirectoryRegistry(registry_dir)
    schema_id = int.from_bytes(record.value[1:5], "big")
    parsed = registry.schema(schema_id)
    datum = fastavro.schemaless_reader(io.BytesIO(record.value[5:]), parsed, None)
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, {**datum, **changes})
    return Record(key=record.key, value=frame(schema_id, out.getvalue()), topic=record.topic, offset=record.offset)


def _write(tmp_path, tampered: bool):
    schemas = tmp_path / "schemas"
    records = TicdcAvro(registry=str(schemas), **CHECKSUM_OPTIONS).encode(_events())
    if tampered:
        records[1] = _tamper(schemas, records[1], val="ab")  # data changed after the checksum was taken
        records[2] = _tamper(schemas, records[2], _tidb_corrupted=True)
        records.append(Record(key=b"\x00\x00", value=b"", topic="test_t", offset=9))
    path = tmp_path / "records.jsonl"
    write_records(path, records)
    return schemas, path


def test_verify_clean_file_exits_zero(tmp_path):
    schemas, path = _write(tmp_path, tampered=False)
    result = CliRunner().invoke(app, ["verify", "--format", "ticdc-avro", "--registry", str(schemas), str(path)])
    assert result.exit_code == 0, result.output
    assert "4 records: 3 rows checked, 3 ok, 0 mismatched, 0 flagged corrupted, 1 skipped, 0 failed to decode" in (
        result.stdout
    )
    assert "skipped 1: delete: a tombstone carries only the key" in result.stdout


def test_verify_reports_mismatched_flagged_and_failed_rows(tmp_path):
    schemas, path = _write(tmp_path, tampered=True)
    result = CliRunner().invoke(app, ["verify", "-f", "ticdc-avro", "--registry", str(schemas), str(path)])
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0].startswith(
        f'{path}:2: mismatch: test.t key={{"id":2}} commit_ts={TSO + 2}: row checksum mismatch: the message says '
    )
    assert lines[1] == (
        f'{path}:3: flagged corrupted: test.t key={{"id":3}} commit_ts={TSO + 3}: TiCDC flagged '
        "the row as corrupted (_tidb_corrupted)"
    )
    assert lines[2] == (
        f"{path}:5: failed: test_t[0]@9: message of 2 byte(s) is shorter than the 5-byte Confluent header"
    )
    assert (
        lines[3] == "5 records: 3 rows checked, 1 ok, 1 mismatched, 1 flagged corrupted, 1 skipped, 1 failed to decode"
    )


def test_verify_needs_a_format_with_checksums_and_the_registry(tmp_path):
    _schemas, path = _write(tmp_path, tampered=False)
    result = CliRunner().invoke(app, ["verify", "--format", "canal-json", str(path)])
    assert result.exit_code == 2
    assert "format canal-json carries no row checksum to verify" in result.output
    result = CliRunner().invoke(app, ["verify", "--format", "ticdc-avro", str(path)])
    assert result.exit_code == 2
    assert "format ticdc-avro needs the registry option" in result.output
    result = CliRunner().invoke(
        app, ["verify", "--format", "ticdc-avro", "--registry", str(tmp_path / "none"), str(path)]
    )
    assert result.exit_code == 4  # a registry that cannot be read: it stops at once, rather than failing every record
    assert f"cdclake: ticdc-avro: stopped: schema directory {tmp_path / 'none'} is no directory" in result.output
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(
        app, ["verify", "--format", "ticdc-avro", "--registry", str(tmp_path / "empty"), str(path)]
    )
    assert result.exit_code == 1
    assert "schema id 1 is not in schema directory" in result.stdout
    assert "0 rows checked" in result.stdout


def test_decode_stops_on_corruption_under_error_handling(tmp_path):
    schemas, path = _write(tmp_path, tampered=True)
    args = ["decode", "-f", "ticdc-avro", "-o", f"registry={schemas}", str(path)]
    result = CliRunner().invoke(app, [*args, "-o", "corruption-handling=error"])
    assert result.exit_code == 1
    assert "cdclake: ticdc-avro: stopped: ticdc-avro: record test_t[0]@1: row checksum mismatch" in result.output
    quarantined = CliRunner().invoke(app, args)
    assert quarantined.exit_code == 1  # the default dead-letters the two corrupt rows and goes on
    assert "5 records: 2 events, 0 skipped, 3 failed" in quarantined.output


def test_decode_and_verify_name_a_directory_given_as_a_file(tmp_path):
    for command in (["decode", "--format", "canal-json"],
                    ["verify", "--format", "ticdc-avro", "--registry", "memory:"]):
        result = CliRunner().invoke(app, [*command, str(tmp_path)])
        assert result.exit_code == 2 and f"{tmp_path}: a directory; give its files ({tmp_path}/*)" in result.output
        result = CliRunner().invoke(app, [*command, str(tmp_path / "nope")])
        assert result.exit_code == 2 and f"{tmp_path / 'nope'}: no such file" in result.output

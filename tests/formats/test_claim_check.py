"""Hostile claim-check locations: a TiCDC ``ccl`` is message content and reaches no file outside the configured
claim-check directory, nor any file there that is not a regular file within the size limit."""

from __future__ import annotations

import base64
import os
import struct

import msgspec
import pytest

from cdclake import formats
from cdclake.formats.base import DecodeError
from cdclake.formats.claim_check import claim_check_name, read_claim_check
from cdclake.model.records import Record

SMALL = '{"u":{"a":{"t":1,"h":true,"f":11,"v":1}}}'
FULL_KEY = '{"ts":2,"scm":"test","tbl":"t","t":1}'
FULL_VALUE = '{"u":{"a":{"t":1,"h":true,"f":11,"v":7}}}'


def frame(key_json: str, value_json: str) -> Record:
    return Record(key=struct.pack(">QQ", 1, len(key_json)) + key_json.encode(),
                  value=struct.pack(">Q", len(value_json)) + value_json.encode())


def document() -> bytes:
    full = frame(FULL_KEY, FULL_VALUE)
    return msgspec.json.encode({"key": base64.b64encode(full.key).decode(),
                                "value": base64.b64encode(full.value).decode()})


def decode(location: str, directory: str, **options: object) -> formats.Decoded:
    key = msgspec.json.encode({"ts": 2, "scm": "test", "tbl": "t", "t": 1, "ohk": False, "ccl": location}).decode()
    fmt = formats.create("ticdc-open", {"claim-check-dir": directory, **options})
    return fmt.decode([frame(key, SMALL)])


@pytest.fixture
def layout(tmp_path):
    """A claim-check directory and, beside it, a valid claim-check document the messages must not reach."""
    store = tmp_path / "claims"
    store.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x").write_bytes(document())
    (outside / "passwd").write_bytes(document())
    return store, outside


def test_a_plain_name_in_the_directory_is_read(layout):
    store, _ = layout
    (store / "ok.json").write_bytes(document())
    out = decode("s3://bucket/prefix/ok.json", str(store))
    assert not out.failures and out.events[0].after == {"a": 7}


@pytest.mark.parametrize("location", ["../outside/x", "../x", "{outside}/x", "file://{outside}/x",
                                      "file:///etc/passwd", "/etc/passwd", "s3://other-bucket/x", "/dev/zero"])
def test_locations_elsewhere_never_reach_their_file(layout, location):
    store, outside = layout
    out = decode(location.format(outside=outside), str(store))
    assert not out.events  # the valid document outside the directory was not read
    assert "no claim-check file" in out.failures[0].reason


@pytest.mark.parametrize("location", ["", "a/", "a/..", "..", ".", "s3://b/a\\..\\x", "a\\b", "x\0y", "a/x\0"])
def test_names_that_are_not_plain_file_names_are_refused(layout, location):
    store, _ = layout
    with pytest.raises(DecodeError, match="plain file name"):
        claim_check_name(location)
    out = decode(location, str(store))
    assert not out.events and "plain file name" in out.failures[0].reason


def test_a_symlink_in_the_directory_is_not_followed(layout):
    store, outside = layout
    (store / "link.json").symlink_to(outside / "x")
    out = decode("link.json", str(store))
    assert not out.events and "symbolic link" in out.failures[0].reason


def test_a_fifo_is_refused_without_blocking(layout):
    store, _ = layout
    os.mkfifo(store / "pipe.json")  # nobody writes: opening it for reading would block without O_NONBLOCK
    out = decode("pipe.json", str(store))
    assert not out.events and "not a regular file" in out.failures[0].reason


def test_a_directory_is_refused(layout):
    store, _ = layout
    (store / "sub.json").mkdir()
    out = decode("sub.json", str(store))
    assert not out.events and "not a regular file" in out.failures[0].reason


def test_a_file_over_the_limit_is_refused(layout):
    store, _ = layout
    with open(store / "huge.json", "wb") as f:  # sparse: large without taking the disk
        f.truncate(65 * 1024 * 1024)
    out = decode("huge.json", str(store))
    assert not out.events and "more than the limit claim-check-max-bytes=67108864" in out.failures[0].reason
    (store / "small.json").write_bytes(document())
    out = decode("small.json", str(store), **{"claim-check-max-bytes": 10})
    assert not out.events and "more than the limit" in out.failures[0].reason


def test_reading_is_bounded_when_the_file_is_not_what_fstat_said(tmp_path):
    (tmp_path / "f").write_bytes(b"x" * 100)
    assert read_claim_check(str(tmp_path), "f", 100) == b"x" * 100
    with pytest.raises(DecodeError, match="limit"):
        read_claim_check(str(tmp_path), "f", 99)


def test_without_claim_check_dir_nothing_is_read(layout):
    _, outside = layout
    out = decode(str(outside / "x"), "")
    assert not out.events and "claim-check-dir is not set" in out.failures[0].reason


def test_cdclake_decode_reads_only_the_configured_claim_checks(layout, tmp_path):
    """Through the CLI's file reader: the good claim check is applied, each hostile one is reported with its
    reason, and nothing outside the directory is read (the valid documents beside it would decode)."""
    from typer.testing import CliRunner

    from cdclake.cli.main import app
    from cdclake.model.records import write_records

    store, outside = layout
    (store / "ok.json").write_bytes(document())
    (store / "link.json").symlink_to(outside / "x")
    locations = ["s3://bucket/ok.json", f"file://{outside}/x", "../outside/x", "/dev/zero", "link.json", "a/.."]
    records = []
    for offset, location in enumerate(locations):
        key = msgspec.json.encode({"ts": 2, "scm": "test", "tbl": "t", "t": 1, "ohk": False, "ccl": location})
        records.append(msgspec.structs.replace(frame(key.decode(), SMALL), topic="t", offset=offset))
    path = tmp_path / "in.jsonl"
    write_records(path, records)
    result = CliRunner().invoke(app, ["decode", "-f", "ticdc-open", "--option", f"claim-check-dir={store}",
                                      str(path)])
    events = [msgspec.json.decode(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [e["after"] for e in events] == [{"a": 7}]
    assert "6 records: 1 event, 0 skipped, 5 failed" in result.stderr
    for reason in ("no claim-check file x", "no claim-check file zero", "symbolic link", "plain file name"):
        assert reason in result.stderr

"""The compiled twins: built here (CI installs with a compiler), and said so when they are not."""

from __future__ import annotations

import logging

import pyarrow as pa

from cdclake.native import compiled


def test_every_compiled_twin_was_built():
    assert compiled.missing() == []


def test_a_twin_that_was_not_built_is_named_in_a_warning(monkeypatch, caplog):
    monkeypatch.setattr(compiled, "EXTENSIONS", (*compiled.EXTENSIONS, "cdclake._absent"))
    with caplog.at_level(logging.WARNING, logger="cdclake"):
        compiled.warn_if_missing()
    assert "cdclake._absent not built" in caplog.text and "_canal" not in caplog.text


def test_nothing_is_said_when_every_twin_was_built(caplog):
    with caplog.at_level(logging.WARNING, logger="cdclake"):
        compiled.warn_if_missing()
    assert caplog.text == ""


def test_a_column_is_made_from_an_extensions_buffers_with_its_nulls_counted_or_given():
    made = pa.array(["ab", None, "", "ü"])
    valid, offsets, data = (b.to_pybytes() for b in made.buffers())
    for nulls in (1, -1):
        column = compiled.variable_array(pa.string(), (valid, offsets, data, nulls))
        assert column.equals(made) and column.null_count == 1
    assert compiled.variable_array(pa.binary(), (None, offsets, data, 0)).to_pylist() == [b"ab", b"", b"", "ü".encode()]

"""The README's demo: four simulated sources through one pipeline, read back, checked."""

from __future__ import annotations

import pytest

from cdclake.cli import demo

pytestmark = pytest.mark.spark


def test_demo_reaches_every_source_state_and_reads_back(spark, tmp_path):
    said: list[str] = []
    assert demo.run(tmp_path / "demo", events=150, seed=5, say=said.append)
    text = "\n".join(said)
    assert "Every table equals its source database's final state" in text
    assert "Polars: pl.read_delta(" in text and "DuckDB: " in text
    assert "dead letters: 0" in text
    for name, _, _ in demo.SOURCES:
        assert (tmp_path / "demo" / "lake" / name).is_dir()

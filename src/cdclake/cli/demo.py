"""``cdclake demo``: change streams in four wire formats → one Spark pipeline → Delta tables, read back by
DuckDB and Polars, and checked against the state the simulated source database ended in.

The sample data comes from the bundled simulator (:mod:`cdclake.simulator`): the same seed gives the same
records on every machine, so the demo needs nothing from the network.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from cdclake import formats
from cdclake import simulator as workload
from cdclake.pipeline.config import PipelineConfig, SourceConfig
from cdclake.simulator import lakecheck

# (source name, format, options): a TiCDC changefeed as Canal-JSON and as Open Protocol, a Debezium MySQL
# connector with the JSON converter, and an Alibaba DTS subscription in its Avro format.
SOURCES = (
    ("tidb_canal", "canal-json", {"flavour": "tidb"}),
    ("tidb_open", "ticdc-open", {}),
    ("mysql_debezium", "debezium-json", {}),
    ("mysql_dts", "dts-avro", {}),
)
TYPES = ("int unsigned", "bigint unsigned", "decimal(38,10)", "double", "datetime(6)", "timestamp(6)", "date",
         "varchar(255)", "varbinary(64)", "json", "enum('a','b','c d')", "bit(10)")


def prepare(root: Path, events: int, seed: int) -> tuple[PipelineConfig, dict[str, workload.Generated]]:
    """Simulate each source database and write its records under ``root/input/<source>``."""
    sources, generated = [], {}
    for name, fmt, options in SOURCES:
        encode_options = dict(options)
        profile = workload.profile_for(fmt, encode_options)
        types = tuple(t for t in TYPES if t in profile.types) or profile.types
        data = workload.generate(fmt, events=events, tables=2, seed=seed, partitions=3, options=encode_options,
                                 types=types, databases=(name,))
        workload.write_generated(root / "input" / name, data)
        decode_options = {k: v for k, v in options.items() if k in {o.name for o in formats.get(fmt).options}
                          and k != "flavour"}
        sources.append(SourceConfig(format=fmt, input=str(root / "input" / name / workload.RECORDS_DIR),
                                    name=name, options=decode_options))
        generated[name] = data
    return PipelineConfig(lake=str(root / "lake"), sources=sources, name="demo"), generated


def check(lake: str, generated: dict[str, workload.Generated]) -> list[str]:
    problems = []
    for data in generated.values():
        problems += lakecheck.differences(lake, data.expected, data.key_names)
    return problems


def read_back(lake: str, say: Callable[[str], None]) -> None:
    """Show the lake through tools other than Spark: DuckDB (over Arrow) and Polars."""
    import duckdb
    import polars as pl
    from deltalake import DeltaTable

    from cdclake.lake.delta import DeltaSink
    from cdclake.lake.paths import table_path

    shown: dict[str, str] = {}
    for database, table in DeltaSink(lake, "demo").tables():
        shown.setdefault(database, table)
    for database, table in list(shown.items())[:2]:
        path = table_path(lake, database, table)
        frame = pl.read_delta(path).drop([c for c in pl.read_delta(path).columns if c.startswith("_cdc_")])
        say(f"\nPolars: pl.read_delta({path!r}) → {frame.height} rows")
        say(str(frame.head(3)))
        dataset = DeltaTable(path).to_pyarrow_dataset()  # noqa: F841 - DuckDB scans the Arrow dataset by name
        summary = duckdb.sql("SELECT count(*) AS rows, min(_cdc_commit_ts) AS first_commit, "
                             "max(_cdc_commit_ts) AS last_commit FROM dataset").fetchall()[0]
        say(f"DuckDB: {database}.{table}: {summary[0]} rows, commit_ts {summary[1]} … {summary[2]}")


def run(root: Path, events: int = 2000, seed: int = 1, say: Callable[[str], None] = print) -> bool:
    from cdclake import pipeline
    from cdclake.cli.status import render
    from cdclake.pipeline.batch import BatchReport

    if root.exists():
        shutil.rmtree(root)
    config, generated = prepare(root, events, seed)
    say(f"Simulated {len(SOURCES)} source databases ({events} changes each) under {root / 'input'}")

    def progress(report: BatchReport) -> None:
        say(f"  batch {report.batch} [{report.source}]: {report.records} records, {report.events} events, "
            f"+{report.inserted} ~{report.updated} -{report.deleted} rows, {report.dead_letters} dead letters, "
            f"{report.seconds:.1f}s")

    summary = pipeline.run(config, progress=progress)
    say(f"Applied {summary.total('events')} change events from {summary.total('records')} records in "
        f"{len(summary.batches)} batches: {summary.total('inserted')} inserted, {summary.total('updated')} "
        f"updated, {summary.total('deleted')} deleted, {summary.total('dead_letters')} dead letters\n")
    say(render(pipeline.status(config.lake)))
    read_back(config.lake, say)
    problems = check(config.lake, generated)
    if problems:
        say("\nThe lake differs from the source databases' final state:\n  " + "\n  ".join(problems))
        return False
    say(f"\nEvery table equals its source database's final state, value for value. Lake: {config.lake}")
    return True

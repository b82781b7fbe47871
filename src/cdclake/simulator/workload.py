"""Generated data sets: records, expected state and a manifest, as `cdclake generate` writes them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import msgspec

from cdclake.model.events import (
    ROW,
    Row,
)
from cdclake.model.records import Record, write_records
from cdclake.simulator.database import Database
from cdclake.simulator.oracle import KeyTuple, State, key_of, state_rows
from cdclake.simulator.producer import emit
from cdclake.simulator.profiles import profile_for

# ---------------------------------------------------------------------------------------------------------
# Generated data sets: records, expected state and a manifest, as `cdclake generate` writes them

class Generated(msgspec.Struct):
    """A simulation's output for one format: the records to deliver, the state they must lead to."""

    records: list[Record]
    expected: State
    key_names: dict[tuple[str, str], list[str]]
    manifest: dict[str, Any]


def generate(format_name: str, *, events: int = 10_000, tables: int = 3, seed: int = 0, partitions: int = 1,
             replays: float = 0.0, options: Mapping[str, Any] | None = None, **settings: Any) -> Generated:
    """Simulate ``events`` changes for a format and emit them as its producer would."""
    profile = profile_for(format_name, options)
    db = Database(seed=seed, tables=tables, profile=profile, **settings)
    changes = db.run(events)
    records = emit(changes, format_name, partitions=partitions, replay_fraction=replays, seed=seed,
                   options=options, profile=profile)
    expected = db.expected()
    counts: dict[str, int] = {}
    for event in changes:
        name = f"{event.kind}:{event.op}" if event.kind == ROW else event.kind
        counts[name] = counts.get(name, 0) + 1
    manifest = {
        "format": format_name, "options": dict(options or {}), "seed": seed, "tables": tables,
        "partitions": partitions, "replays": replays, "events": len(changes), "event_counts": counts,
        "records": len(records), "expected_rows": sum(len(rows) for rows in expected.values()),
        "profile": profile.to_dict(), "column_types": db.column_types(),
    }
    return Generated(records, expected, db.key_names(), manifest)


RECORDS_DIR: Final = "records"
EXPECTED_DIR: Final = "expected"
MANIFEST: Final = "manifest.json"


def write_generated(out: str | os.PathLike[str], generated: Generated) -> list[Path]:
    """Write a generated data set under ``out``: ``records/<topic>.<partition>.jsonl`` captured-records
    files (one per topic-partition, in offset order, so that sorted file names then lines give every
    partition in offset order), ``expected/<database>.<table>.jsonl`` (canonical rows in key order, one JSON
    object per line) and ``manifest.json``. Returns the record files."""
    root = Path(out)
    (root / RECORDS_DIR).mkdir(parents=True, exist_ok=True)
    (root / EXPECTED_DIR).mkdir(parents=True, exist_ok=True)
    by_partition: dict[tuple[str, int], list[Record]] = {}
    for record in generated.records:
        by_partition.setdefault((record.topic, record.partition), []).append(record)
    files = []
    for (topic, partition), records in sorted(by_partition.items()):
        path = root / RECORDS_DIR / f"{topic}.{partition:04d}.jsonl"
        write_records(path, sorted(records, key=lambda rec: rec.offset))
        files.append(path)
    encoder = msgspec.json.Encoder()
    tables = {}
    for ident in sorted(generated.expected):
        rows = state_rows(generated.expected[ident])
        (root / EXPECTED_DIR / f"{ident[0]}.{ident[1]}.jsonl").write_bytes(
            b"".join(encoder.encode(row) + b"\n" for row in rows))
        tables[f"{ident[0]}.{ident[1]}"] = {"rows": len(rows), "key": generated.key_names.get(ident, [])}
    manifest = {**generated.manifest, "files": [str(p.relative_to(root)) for p in files], "expected": tables}
    (root / MANIFEST).write_bytes(msgspec.json.format(msgspec.json.encode(manifest)) + b"\n")
    return files


def read_expected(out: str | os.PathLike[str]) -> State:
    """The expected state of a data set that :func:`write_generated` wrote, keyed like :func:`fold`'s."""
    root = Path(out)
    manifest = msgspec.json.decode((root / MANIFEST).read_bytes())
    state: State = {}
    for name, table in manifest["expected"].items():
        database, _, table_name = name.partition(".")
        rows: dict[KeyTuple, Row] = {}
        for line in (root / EXPECTED_DIR / f"{name}.jsonl").read_bytes().splitlines():
            row = msgspec.json.decode(line)
            rows[key_of({k: row[k] for k in table["key"]})] = row
        state[(database, table_name)] = rows
    return state

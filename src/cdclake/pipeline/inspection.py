"""What a lake holds, read for ``cdclake status`` and ``cdclake dead-letters``: per table rows, last applied change and
batch time; dead letters by reason; the tables that could not be read, and why."""

from __future__ import annotations

import os
import re
from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError

from cdclake.errors import LakeError
from cdclake.lake.layout import CONSISTENT_UP_TO, DEAD_LETTERS, RENAMED_TO
from cdclake.lake.paths import lake_tables, own_path, own_root, refuse_foreign, table_path
from cdclake.lake.progress import read_history
from cdclake.lake.store import read_dataset
from cdclake.model.records import Record

# What reading a damaged table raises: a log entry that is no JSON or a log without its first entry (DeltaError), a
# data file deleted (OSError) or one that is no Parquet (ArrowException).
DAMAGED = (DeltaError, OSError, pa.ArrowException)


def _open(uri: str) -> DeltaTable | None:
    try:
        return DeltaTable(uri)
    except TableNotFoundError:
        return None


def first_line(exc: Exception) -> str:
    """The error's first line: delta-rs follows its message with a Rust backtrace."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _read(uri: str, columns: list[str]) -> pa.Table | None:
    table = _open(uri)
    return None if table is None else table.to_pyarrow_table(columns=columns)


def is_lake(lake: str) -> bool:
    """Whether a local directory is a lake: a run makes its ``_cdclake`` directory before anything else. Delta
    tables at ``<database>/<table>`` alone do not make one (``/tmp`` may hold some of other programs)."""
    return os.path.isdir(own_root(lake))


def check_lake(lake: str) -> None:
    """Raises ValueError, saying why, unless ``lake`` is a local directory that a run has made a lake of, holding no
    table under a name of an earlier cdclake (``cdclake migrate-names`` moves those)."""
    if not os.path.isdir(lake):
        raise ValueError(f"{lake}: no such lake directory")
    refused = refuse_foreign(lake)
    if refused:
        raise ValueError(refused)
    if not is_lake(lake):
        raise ValueError(f"{lake}: not a cdclake lake (no _cdclake directory: no run has written to it)")


def check_pipeline(lake: str, pipeline: str) -> None:
    """Raises ValueError, naming the lake's pipelines, unless ``pipeline`` (a run's ``--name``, or ``NAME.SOURCE``)
    has recorded a batch or a dead letter in the lake."""
    known = pipelines(lake)
    if not has_pipeline(known, pipeline):
        raise ValueError(f"{lake} has no pipeline {pipeline!r} (its pipelines: "
                         f"{', '.join(sorted({n.split('.')[0] for n in known})) or 'none yet'})")


def pipelines(lake: str) -> list[str]:
    """The pipelines (``NAME.SOURCE``) that have recorded a batch or a dead letter in the lake."""
    names: set[str] = set()
    for own in ("progress", "dead_letters"):
        table = _read(own_path(lake, own), ["pipeline"])
        if table is not None:
            names.update(pc.unique(table["pipeline"]).to_pylist())
    return sorted(name for name in names if name)


def has_pipeline(names: list[str], pipeline: str) -> bool:
    """Whether ``pipeline`` (a run's ``--name``, or ``NAME.SOURCE``) is among ``names``, as :func:`dead_letters`
    selects them."""
    return any(name == pipeline or name.startswith(f"{pipeline}.") for name in names)


def collect(lake: str) -> dict[str, Any]:
    tables: dict[str, dict[str, Any]] = {}
    for database, table in lake_tables(lake):
        name = f"{database}.{table}"
        try:
            dt = _open(table_path(lake, database, table))
            if dt is not None:
                tables[name] = {"rows": dt.to_pyarrow_dataset().count_rows()}
                renamed = dt.metadata().configuration.get(RENAMED_TO)
                if renamed is not None:
                    tables[name]["renamed_to"] = renamed
                consistent = dt.metadata().configuration.get(CONSISTENT_UP_TO)
                if consistent is not None:
                    tables[name]["consistent_ts"] = int(consistent)
        except DAMAGED as exc:
            tables[name] = {"rows": None, "unreadable": first_line(exc)}
    unreadable: dict[str, str] = {}  # the lake's own tables that could not be read, and why
    latest: dict[str, dict[str, Any]] = {}  # by table: the state its last batch left, of whichever pipeline
    try:
        progress = _open(own_path(lake, "progress"))
        if progress is not None:
            for pipeline in progress.to_pyarrow_table(columns=["pipeline"])["pipeline"].unique().to_pylist():
                for name, state in read_history(progress, pipeline).tables.items():
                    if (state.get("finished_at") or "") >= (latest.get(name, {}).get("finished_at") or ""):
                        latest[name] = state
    except DAMAGED as exc:
        unreadable["_cdclake/progress"] = first_line(exc)
    for name, state in latest.items():
        info = tables.setdefault(name, {"rows": 0, "gone": True})  # applied to, and no lake table now: dropped
        commit_ts, _, position = (state.get("last_seq") or "").partition("/")
        info["commit_ts"] = int(commit_ts) if commit_ts.isdigit() else None
        info["position"] = position or None
        info["last_batch_at"] = state.get("finished_at")
        info["stopped"] = state.get("stopped")
    reasons: Counter[str] = Counter()
    try:
        dead = _read(own_path(lake, "dead_letters"), ["reason"])
    except DAMAGED as exc:
        dead, unreadable["_cdclake/dead_letters"] = None, first_line(exc)
    if dead is not None:
        for item in pc.value_counts(dead["reason"]).to_pylist():
            reasons[_reason_class(item["values"])] += item["counts"]
    return {"tables": dict(sorted(tables.items())), "unreadable": unreadable,
            "dead_letters": dict(reasons.most_common())}


# Where a reader's reason starts by naming the file and line it could not read ("<path>:<line>: …"); not a URL's
# host and port ("http://host:8081: …").
_LOCATION = re.compile(r"^(?!\S*://)\S+?:\d+: ")


def _reason_class(reason: str | None) -> str:
    """Dead letters grouped by what went wrong, not by each record's details (nor by the line a reason names)."""
    return _LOCATION.sub("", reason or "unknown", count=1).split(": ")[0][:80]


def dead_letters(lake: str, reason: str | None = None, pipeline: str | None = None,
                 format_name: str | None = None, with_bytes: bool = False) -> pa.Table:
    """The lake's dead letters that match (``reason``: a part of it; ``pipeline``: its name, or name.source), in the
    order they were recorded; their keys, values and headers only ``with_bytes`` (they may be large, and many). A
    damaged dead-letter table is a :class:`~cdclake.errors.LakeError` that says so in a line."""
    try:
        return _dead_letters(lake, reason, pipeline, format_name, with_bytes)
    except DAMAGED as exc:
        raise LakeError(f"{own_path(lake, 'dead_letters')} could not be read: {first_line(exc)}") \
            from exc


def _dead_letters(lake: str, reason: str | None, pipeline: str | None, format_name: str | None,
                  with_bytes: bool) -> pa.Table:
    table = _open(own_path(lake, "dead_letters"))
    if table is None:
        return DEAD_LETTERS.empty_table()
    where = pc.scalar(True)
    if pipeline is not None:  # the column names the pipeline and its source: NAME.SOURCE
        where = where & ((pc.field("pipeline") == pipeline) | pc.starts_with(pc.field("pipeline"), f"{pipeline}."))
    if format_name is not None:
        where = where & (pc.field("format") == format_name)
    if reason is not None:
        where = where & pc.match_substring(pc.field("reason"), reason)
    wanted = [f for f in DEAD_LETTERS if with_bytes or f.name not in ("key", "value", "headers")]
    present = set(pa.schema(table.schema().to_arrow()).names)  # a lake of an earlier cdclake lacks the newer columns
    read = read_dataset(table, [f.name for f in wanted if f.name in present], where)
    read = pa.table([read[f.name] if f.name in present else pa.nulls(read.num_rows, f.type) for f in wanted],
                    names=[f.name for f in wanted])
    return read.sort_by(
        [(name, "ascending") for name in ("recorded_at", "pipeline", "batch", "topic", "partition", "offset")])


def dead_letter_records(dead: pa.Table) -> list[Record]:
    """The dead letters as the records they were, where they were read: a captured-records file of them is input
    that ``cdclake run`` reads again."""
    millis = pc.divide(dead["timestamp"].cast(pa.int64()), 1000).to_pylist()  # Kafka's are ms, Spark's us
    return [Record(key=row["key"], value=row["value"], topic=row["topic"] or "", partition=row["partition"] or 0,
                   offset=row["offset"] or 0, timestamp=ms,
                   headers=[(h["key"], h["value"]) for h in row["headers"] or []])
            for row, ms in zip(dead.select(["key", "value", "topic", "partition", "offset", "headers"]).to_pylist(),
                               millis, strict=True)]

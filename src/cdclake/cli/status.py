"""What a lake holds: per table rows, last applied change and batch time; dead letters by reason; the tables
that could not be read, and why."""

from __future__ import annotations

import os
import re
from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError

from cdclake.lake.layout import CONSISTENT_UP_TO, DEAD_LETTERS, RENAMED_TO
from cdclake.lake.paths import lake_tables, table_path
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
    return os.path.isdir(os.path.join(lake, "_cdclake"))


def pipelines(lake: str) -> list[str]:
    """The pipelines (``NAME.SOURCE``) that have recorded a batch or a dead letter in the lake."""
    names: set[str] = set()
    for own in ("progress", "dead_letters"):
        table = _read(os.path.join(lake, "_cdclake", own), ["pipeline"])
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
        progress = _open(os.path.join(lake, "_cdclake", "progress"))
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
        dead = _read(os.path.join(lake, "_cdclake", "dead_letters"), ["reason"])
    except DAMAGED as exc:
        dead, unreadable["_cdclake/dead_letters"] = None, first_line(exc)
    if dead is not None:
        for item in pc.value_counts(dead["reason"]).to_pylist():
            reasons[_reason_class(item["values"])] += item["counts"]
    return {"tables": dict(sorted(tables.items())), "unreadable": unreadable,
            "dead_letters": dict(reasons.most_common())}


def unreadable_tables(state: dict[str, Any]) -> list[str]:
    """The tables, the lake's own among them, that could not be read."""
    return [name for name, info in state["tables"].items() if "unreadable" in info] + list(state["unreadable"])


# Where a reader's reason starts by naming the file and line it could not read ("<path>:<line>: …"); not a URL's
# host and port ("http://host:8081: …").
_LOCATION = re.compile(r"^(?!\S*://)\S+?:\d+: ")


def _reason_class(reason: str | None) -> str:
    """Dead letters grouped by what went wrong, not by each record's details (nor by the line a reason names)."""
    return _LOCATION.sub("", reason or "unknown", count=1).split(": ")[0][:80]


def _readable(position: str | None) -> str:
    """A position without the zeros that pad its numeric parts so that positions compare as text
    (``events.pad_position``): 00000000000000000000/00000000000000000204/00000000000000000007 reads 0/204/7."""
    if not position:
        return "-"
    return "/".join((part.lstrip("0") or "0") if part.isdigit() else part for part in position.split("/"))


def shown(name: str) -> str:
    """A source's name as one line of text: its own characters, with those a terminal would act on escaped."""
    return name if name.isprintable() else "".join(
        c if c.isprintable() else c.encode("unicode_escape", "backslashreplace").decode("ascii") for c in name)


def _former(info: dict[str, Any]) -> str | None:
    """What became of a table the lake no longer holds under its name: renamed, or dropped."""
    if info.get("renamed_to"):
        return f"RENAMED to {info['renamed_to']}"
    return "DROPPED (no lake table)" if info.get("gone") else None


def render(state: dict[str, Any], everything: bool = False) -> str:
    """The state as a table, by name; the tables dropped or renamed only with ``everything``."""
    former = {name: _former(info) for name, info in state["tables"].items()}
    hidden = [] if everything else [name for name, what in former.items() if what]
    state = {**state, "tables": {name: info for name, info in state["tables"].items() if name not in hidden}}
    positions = {name: _readable(info.get("position")) for name, info in state["tables"].items()}
    width = max([len("position"), *map(len, positions.values())])
    lines = [f"{'table':40} {'rows':>10} {'commit_ts':>20}  {'position':{width}} last batch"]
    for table, info in state["tables"].items():
        name = shown(table)
        if "unreadable" in info:
            lines.append(f"{name:40} could not be read: {info['unreadable']}")
            continue
        flag = f"  STOPPED: {info['stopped']}" if info.get("stopped") else ""
        if former[table]:
            flag = f"  {former[table]}{flag}"
        if info.get("consistent_ts") is not None:
            flag += f"  consistent up to commit_ts {info['consistent_ts']}"
        lines.append(f"{name:40} {info['rows']:>10} {info.get('commit_ts') or '-'!s:>20}  "
                     f"{positions[table]:{width}} {info.get('last_batch_at') or '-'}{flag}")
    if not state["tables"]:
        lines.append("(no tables)")
    if hidden:
        lines.append(f"({len(hidden):,} dropped or renamed table{'' if len(hidden) == 1 else 's'} not shown: --all)")
    lines.extend(f"{name:40} could not be read: {why}" for name, why in state["unreadable"].items())
    total = sum(state["dead_letters"].values())
    lines.append(f"dead letters: {total}")
    lines.extend(f"  {count:>8}  {reason}" for reason, count in state["dead_letters"].items())
    return "\n".join(lines)


def dead_letters(lake: str, reason: str | None = None, pipeline: str | None = None,
                 format_name: str | None = None, with_bytes: bool = False) -> pa.Table:
    """The lake's dead letters that match (``reason``: a part of it; ``pipeline``: its name, or name.source), in the
    order they were recorded; their keys, values and headers only ``with_bytes`` (they may be large, and many)."""
    table = _open(os.path.join(lake, "_cdclake", "dead_letters"))
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


def dead_letter_lines(dead: pa.Table) -> list[str]:
    return [f"{row['topic']}:{row['partition']}:{row['offset']}  {row['format']}  pipeline {row['pipeline']} "
            f"batch {row['batch']}  {row['reason']}"
            for row in dead.select(["topic", "partition", "offset", "format", "pipeline", "batch", "reason"])
            .to_pylist()]


def dead_letter_records(dead: pa.Table) -> list[Record]:
    """The dead letters as the records they were, where they were read: a captured-records file of them is input
    that ``cdclake run`` reads again."""
    millis = pc.divide(dead["timestamp"].cast(pa.int64()), 1000).to_pylist()  # Kafka's are ms, Spark's us
    return [Record(key=row["key"], value=row["value"], topic=row["topic"] or "", partition=row["partition"] or 0,
                   offset=row["offset"] or 0, timestamp=ms,
                   headers=[(h["key"], h["value"]) for h in row["headers"] or []])
            for row, ms in zip(dead.select(["key", "value", "topic", "partition", "offset", "headers"]).to_pylist(),
                               millis, strict=True)]

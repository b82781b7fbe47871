"""What a lake holds: per table rows, last applied change and batch time; dead letters by reason."""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from typing import Any

import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from cdclake.sinks.delta import CONSISTENT_UP_TO, lake_tables


def _open(uri: str) -> DeltaTable | None:
    try:
        return DeltaTable(uri)
    except TableNotFoundError:
        return None


def collect(lake: str) -> dict[str, Any]:
    tables: dict[str, dict[str, Any]] = {}
    for database, table in lake_tables(lake):
        dt = _open(os.path.join(lake, database, table))
        if dt is not None:
            tables[f"{database}.{table}"] = {"rows": dt.to_pyarrow_dataset().count_rows()}
            consistent = dt.metadata().configuration.get(CONSISTENT_UP_TO)
            if consistent is not None:
                tables[f"{database}.{table}"]["consistent_ts"] = int(consistent)
    progress = _open(os.path.join(lake, "_cdclake", "progress"))
    if progress is not None:
        log = progress.to_pyarrow_table(columns=["finished_at", "tables"]).sort_by("finished_at").to_pylist()
        for entry in log:
            for name, state in json.loads(entry["tables"]).items():
                info = tables.setdefault(name, {"rows": 0})
                commit_ts, _, position = (state.get("last_seq") or "").partition("/")
                info["commit_ts"] = int(commit_ts) if commit_ts.isdigit() else None
                info["position"] = position or None
                info["last_batch_at"] = entry["finished_at"].isoformat()
                info["stopped"] = state.get("stopped")
    reasons: Counter[str] = Counter()
    dead = _open(os.path.join(lake, "_cdclake", "dead_letters"))
    if dead is not None:
        column = dead.to_pyarrow_table(columns=["reason"])["reason"]
        for item in pc.value_counts(column).to_pylist():
            reasons[_reason_class(item["values"])] += item["counts"]
    return {"tables": tables, "dead_letters": dict(reasons.most_common())}


# Where a reader's reason starts by naming the file and line it could not read ("<path>:<line>: …"); not a URL's
# host and port ("http://host:8081: …").
_LOCATION = re.compile(r"^(?!\S*://)\S+?:\d+: ")


def _reason_class(reason: str | None) -> str:
    """Dead letters grouped by what went wrong, not by each record's details (nor by the line a reason names)."""
    return _LOCATION.sub("", reason or "unknown", count=1).split(": ")[0][:80]


def render(state: dict[str, Any]) -> str:
    lines = [f"{'table':40} {'rows':>10} {'commit_ts':>20}  {'position':30} last batch"]
    for name, info in state["tables"].items():
        flag = f"  STOPPED: {info['stopped']}" if info.get("stopped") else ""
        if info.get("consistent_ts") is not None:
            flag += f"  consistent up to commit_ts {info['consistent_ts']}"
        lines.append(f"{name:40} {info['rows']:>10} {info.get('commit_ts') or '-'!s:>20}  "
                     f"{(info.get('position') or '-')[:30]:30} {info.get('last_batch_at') or '-'}{flag}")
    if not state["tables"]:
        lines.append("(no tables)")
    total = sum(state["dead_letters"].values())
    lines.append(f"dead letters: {total}")
    lines.extend(f"  {count:>8}  {reason}" for reason, count in state["dead_letters"].items())
    return "\n".join(lines)

"""``cdclake status`` and ``cdclake dead-letters`` as text: the state :func:`cdclake.pipeline.status` reads, and
the dead letters :func:`cdclake.pipeline.dead_letters` selects."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa


def unreadable_tables(state: dict[str, Any]) -> list[str]:
    """The tables, the lake's own among them, that could not be read."""
    return [name for name, info in state["tables"].items() if "unreadable" in info] + list(state["unreadable"])


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


def dead_letter_lines(dead: pa.Table) -> list[str]:
    return [f"{row['topic']}:{row['partition']}:{row['offset']}  {row['format']}  pipeline {row['pipeline']} "
            f"batch {row['batch']}  {row['reason']}"
            for row in dead.select(["topic", "partition", "offset", "format", "pipeline", "batch", "reason"])
            .to_pylist()]

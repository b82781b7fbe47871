"""Folding events into table state, the planner's contract in plain Python, and comparing states: the test
oracle."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cdclake.model import ddl as ddl_actions
from cdclake.model import seq
from cdclake.model.events import (
    DDL,
    DELETE,
    RESOLVED,
    ROW,
    TRUNCATE,
    ChangeEvent,
    Row,
)

# ---------------------------------------------------------------------------------------------------------
# Folding events into table state: the planner's contract, in plain Python


KeyTuple = tuple[tuple[str, Any], ...]  # a row's key: (column, value) pairs sorted by column name
State = dict[tuple[str, str], dict[KeyTuple, Row]]  # per (database, table): key → row

def key_of(key: Mapping[str, Any]) -> KeyTuple:
    return tuple(sorted(key.items()))


def _event_key(event: ChangeEvent, image: Row | None) -> KeyTuple | None:
    names = [c.name for c in event.columns or () if c.key] or list(event.key or ())
    if image is None or not names:
        return key_of(event.key) if event.key else None
    return key_of({name: image.get(name) for name in names})


def fold(events: Iterable[ChangeEvent]) -> State:
    """The state a correct pipeline reaches from these events, by the planner's contract: one stable sort
    by (commit_ts, position), so a redelivered copy with the same commit_ts and position lands next to its
    original and re-applies the same change; inserts and updates write their whole after image, an update
    whose key changes deletes the old key, deletes remove the key. DDL is applied as :func:`cdclake.model.ddl.parse`
    reads it (ADD COLUMN gives present rows a NULL column, DROP COLUMN removes it, RENAME and CHANGE COLUMN
    rename it, TRUNCATE empties the table,
    DROP TABLE removes it, RENAME TABLE moves it); every action is idempotent, so a redelivered or broadcast
    DDL is harmless.

    A change without a commit ts (a TiCDC Avro delete is a bare tombstone) happened after everything before
    it in its Kafka partition: it takes the latest commit ts seen so far in that partition (resolved
    timestamps included) and sorts after that commit's changes, in offset order. Events are taken to be in
    offset order within each partition, as decoding a partition's records gives them."""
    latest: dict[tuple[str | None, int | None], int] = {}
    keyed: list[tuple[tuple[int, str], ChangeEvent]] = []
    for event in events:
        source = event.source
        where = (source.topic, source.partition) if source is not None else (None, None)
        if event.commit_ts is not None:
            if event.commit_ts > latest.get(where, 0):
                latest[where] = event.commit_ts
            if event.kind != RESOLVED:
                keyed.append(((event.commit_ts, event.position or ""), event))
        elif event.kind != RESOLVED:
            offset = source.offset if source is not None and source.offset is not None else 0
            keyed.append(((latest.get(where, 0), f"{seq.NO_TS}{offset:0{seq.TS_DIGITS}d}"), event))
    keyed.sort(key=lambda item: item[0])
    state: State = {}
    for _, event in keyed:
        ident = (event.database or "", event.table or "")
        if event.kind == ROW:
            rows = state.setdefault(ident, {})
            if event.op == DELETE:
                key = _event_key(event, event.before)
                if key is not None:
                    rows.pop(key, None)
                continue
            if event.after is None:
                continue
            new_key = _event_key(event, event.after)
            if event.before is not None:
                old_key = _event_key(event, event.before)
                if old_key is not None and old_key != new_key:
                    rows.pop(old_key, None)
            if new_key is not None:
                rows[new_key] = event.after
        elif event.kind == TRUNCATE:
            state[ident] = {}
        elif event.kind == DDL:
            for name, actions in ddl_actions.by_table(event.ddl or "", *ident):
                for action in actions:
                    _apply(state, name, action)
    return state


def _apply(state: State, ident: tuple[str, str], action: ddl_actions.Action) -> None:
    rows = state.get(ident, {})
    if isinstance(action, ddl_actions.Truncate):
        state[ident] = {}
    elif isinstance(action, ddl_actions.DropTable):
        state.pop(ident, None)
    elif isinstance(action, ddl_actions.RenameTable):
        if ident in state:  # a copy of the statement (broadcast, redelivered) finds it moved
            state[(action.database or ident[0], action.table)] = state.pop(ident)
    elif isinstance(action, ddl_actions.AddColumn):
        for key, row in rows.items():
            if action.name not in row:
                rows[key] = {**row, action.name: None}
    elif isinstance(action, ddl_actions.DropColumn):
        for key, row in rows.items():
            if action.name in row:
                rows[key] = {n: v for n, v in row.items() if n != action.name}
    elif isinstance(action, ddl_actions.ModifyColumn | ddl_actions.RenameColumn) and action.new_name:
        for key, row in rows.items():
            rows[key] = {(action.new_name if n == action.name else n): v for n, v in row.items()}


def _sort_key(key: KeyTuple) -> tuple[Any, ...]:
    return tuple((name, type(value).__name__, value) for name, value in key)


def state_rows(rows: Mapping[KeyTuple, Row]) -> list[Row]:
    """The rows of one table in key order."""
    try:
        ordered = sorted(rows.items(), key=lambda item: _sort_key(item[0]))
    except TypeError:  # keys of mixed types: any fixed order will do
        ordered = sorted(rows.items(), key=lambda item: repr(item[0]))
    return [row for _, row in ordered]


def state_tables(state: State) -> dict[tuple[str, str], list[Row]]:
    return {ident: state_rows(rows) for ident, rows in state.items()}


def diff_states(expected: State, actual: State, *, limit: int = 20) -> list[str]:
    """Differences between two states, one line each for a person (at most ``limit``); ``[]`` when equal.
    A table with no rows equals a missing table."""
    problems: list[str] = []
    for ident in sorted(set(expected) | set(actual)):
        want, got = expected.get(ident) or {}, actual.get(ident) or {}
        if want == got:
            continue
        missing = [k for k in want if k not in got]
        extra = [k for k in got if k not in want]
        changed = [k for k in want if k in got and got[k] != want[k]]
        problems.append(f"{'.'.join(ident)}: {len(want)} rows expected, {len(got)} present: {len(missing)} "
                        f"missing, {len(extra)} unexpected, {len(changed)} different")
        problems += [f"  missing {dict(k)}" for k in missing[:3]]
        problems += [f"  unexpected {dict(k)}" for k in extra[:3]]
        for k in changed[:5]:
            row, other = want[k], got[k]
            columns = [*row, *(c for c in other if c not in row)]
            changes = {c: (row.get(c, "<absent>"), other.get(c, "<absent>")) for c in columns
                       if row.get(c, "<absent>") != other.get(c, "<absent>")}
            problems.append(f"  {dict(k)}: column: (expected, actual) {changes}")
    return problems[:limit]

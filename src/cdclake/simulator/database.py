"""The simulated upstream database: tables with a column of every type, random transactions of inserts,
updates, deletes, key changes and DDL, each change recorded as a canonical event; its tables are the expected
state."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from cdclake.model import ddl as ddl_actions
from cdclake.model import types as T
from cdclake.model import values as V
from cdclake.model.events import (
    DDL,
    DELETE,
    INSERT,
    RESOLVED,
    ROW,
    TRUNCATE,
    UPDATE,
    ChangeEvent,
    Column,
    Row,
    pad_position,
)
from cdclake.model.types import parse_type
from cdclake.simulator.oracle import KeyTuple, State, key_of
from cdclake.simulator.profiles import (
    BINLOG_EVENTS_PER_FILE,
    DDL_KINDS,
    DEFAULT_PROFILE,
    DROP_COLUMN,
    DROP_TABLE,
    ORACLE_FIRST_SCN,
    RENAME_COLUMN,
    RENAME_TABLE,
    START_MS,
    TRUNCATE_TABLE,
    Profile,
    tso,
)
from cdclake.simulator.values import Gen, value_generator

# ---------------------------------------------------------------------------------------------------------
# The simulated database

Values = tuple[Any, ...]  # the key values of a row in the simulated table, in key-column order


class _Table:
    """One table of the simulated database: its schema and its current rows."""

    def __init__(self, database: str, name: str, columns: list[Column], composite: bool) -> None:
        self.database = database
        self.name = name
        self.columns = columns
        self.key_names = [c.name for c in columns if c.key]
        self.composite = composite
        self.rows: dict[Values, Row] = {}
        self.keys: list[Values] = []  # the keys of ``rows``, for O(1) random choice
        self.slot: dict[Values, int] = {}
        self.gens: dict[str, Gen] = {c.name: value_generator(c.type) for c in columns if not c.key}
        self.next_column = len(columns)

    def put(self, key: Values, row: Row) -> None:
        if key not in self.rows:
            self.slot[key] = len(self.keys)
            self.keys.append(key)
        self.rows[key] = row

    def remove(self, key: Values) -> None:
        del self.rows[key]
        index = self.slot.pop(key)
        last = self.keys.pop()
        if index < len(self.keys):
            self.keys[index] = last
            self.slot[last] = index

    def clear(self) -> None:
        self.rows.clear()
        self.keys.clear()
        self.slot.clear()

    def key_dict(self, key: Values) -> Row:
        return dict(zip(self.key_names, key, strict=True))

    def set_columns(self, columns: list[Column]) -> None:
        self.columns = columns
        self.gens = {c.name: value_generator(c.type) for c in columns if not c.key}


_quote = ddl_actions.quote


def create_table_sql(database: str, table: str, columns: Sequence[Column]) -> str:
    parts = [f"{_quote(c.name)} {c.type}{' NOT NULL' if c.nullable is False else ' NULL'}" for c in columns]
    keys = ", ".join(_quote(c.name) for c in columns if c.key)
    return f"CREATE TABLE {_quote(database)}.{_quote(table)} ({', '.join(parts)}, PRIMARY KEY ({keys}))"


class Database:
    """A simulated upstream database, deterministic from ``seed``.

    ``tables`` tables spread over ``databases``; every third table has a composite key ``(tenant int,
    code varchar(32))``, the others ``id bigint``. Non-key columns: one per type of ``types`` (default: the
    profile's types). ``ddl_rate`` is the chance that a transaction is a DDL statement instead (only kinds
    the profile delivers); ``resolved_every`` is the number of transactions between resolved timestamps
    (when the profile delivers them). ``max_keys`` caps the live rows over all tables: once a table holds its
    share, an insert becomes an update, so that a long run keeps changing the same keys.
    """

    def __init__(self, *, seed: int = 0, tables: int = 3, profile: Profile = DEFAULT_PROFILE,
                 types: Sequence[str] | None = None, databases: Sequence[str] = ("sim",),
                 ddl_rate: float = 0.002, resolved_every: int = 50, max_txn_rows: int = 8,
                 key_change_rate: float = 0.05, max_keys: int | None = None) -> None:
        if tables < 1:
            raise ValueError("a simulated database needs at least one table")
        self.profile = profile
        self.random = random.Random(seed)
        self.types = tuple(types if types is not None else profile.types)
        self.ddl_kinds = tuple(k for k in DDL_KINDS if k in profile.ddl)
        self.ddl_rate = ddl_rate if self.ddl_kinds else 0.0
        self.resolved_every = resolved_every if profile.resolved else 0
        self.max_txn_rows = max_txn_rows
        self.key_change_rate = key_change_rate
        self.max_keys_per_table = None if max_keys is None else max(1, max_keys // tables)
        self.tables: dict[tuple[str, str], _Table] = {}
        self.dropped: list[tuple[str, str]] = []
        self.physical_ms = START_MS
        self.logical = 0
        self.last_commit_ts = 0
        self.lsn = 0  # the change log's sequence number: one per change, the source of ``position``
        self.txns = 0
        self.next_id = 1
        self.next_table = tables  # the number in the next new table name
        self.freed: list[tuple[tuple[str, str], Values]] = []  # deleted keys, sometimes inserted again
        for i in range(tables):
            database = databases[i % len(databases)]
            name = f"t{i}"
            self.tables[(database, name)] = self._new_table(database, name, composite=i % 3 == 1)

    # -- schema ------------------------------------------------------------------------------------------

    def _new_table(self, database: str, name: str, composite: bool) -> _Table:
        if composite:
            columns = [Column("tenant", "int", key=True, nullable=False),
                       Column("code", "varchar(32)", key=True, nullable=False)]
        else:
            columns = [Column("id", "bigint", key=True, nullable=False)]
        columns += [Column(f"c{i}_{parse_type(text).name}", text, nullable=True) for i, text in enumerate(self.types)]
        return _Table(database, name, columns, composite)

    # -- the clock ---------------------------------------------------------------------------------------

    def _commit(self) -> int:
        step = int(self.random.random() * 4)
        if step:
            self.physical_ms += step
            self.logical = 0
        else:
            self.logical += 1
        commit_ts = tso(self.physical_ms, self.logical)
        self.last_commit_ts = commit_ts
        return commit_ts if self.profile.clock == "tso" else self.physical_ms

    def _position(self, seq: int) -> str:
        """The place of the ``seq``-th (1-based) change of the current transaction in the source's log."""
        self.lsn += 1
        style = self.profile.position
        if style == "scn":
            # Oracle: the commit SCN (unique per transaction), the transaction id, the change's place in it.
            xid = f"{self.txns % 10 + 1}.{self.txns % 32}.{self.txns}"
            return pad_position(ORACLE_FIRST_SCN + self.txns * 8, xid, seq)
        if style in ("binlog", "dts"):
            # One rows event per change; files rotate every million events, positions are byte offsets.
            number, index = divmod(self.lsn, BINLOG_EVENTS_PER_FILE)
            if style == "dts":
                return pad_position(number + 1, 4 + index * 256, self.lsn)
            return pad_position(f"mysql-bin.{number + 1:06d}", 4 + index * 256, 0)
        return pad_position(self.lsn)

    # -- running -----------------------------------------------------------------------------------------

    def run(self, events: int) -> list[ChangeEvent]:
        """At least ``events`` more change events (whole transactions), in commit order."""
        out: list[ChangeEvent] = []
        while len(out) < events:
            self.txns += 1
            r = self.random
            if self.dropped and r.random() < 0.05:
                out.append(self._recreate())
            elif self.ddl_rate and r.random() < self.ddl_rate:
                out.extend(self._ddl())
            else:
                out.extend(self._transaction())
            if self.resolved_every and self.txns % self.resolved_every == 0:
                out.append(ChangeEvent(kind=RESOLVED, commit_ts=self.last_commit_ts))
        return out

    def _transaction(self) -> list[ChangeEvent]:
        r = self.random
        size = 1 + int(r.random() * self.max_txn_rows) if r.random() > 0.01 else r.randint(20, 200)
        commit_ts = self._commit()
        ts_ms = self.physical_ms
        touched: set[tuple[tuple[str, str], Values]] = set()
        live = list(self.tables.values())
        events = []
        for _ in range(size):
            table = live[int(r.random() * len(live))]
            roll = r.random()
            full = self.max_keys_per_table is not None and len(table.keys) >= self.max_keys_per_table
            if not table.keys or (roll < 0.4 and not full):
                event = self._insert(table, touched)
            elif roll < 0.85:
                event = self._update(table, touched)
            else:
                event = self._delete(table, touched)
            if event is not None:
                event.commit_ts = commit_ts
                event.ts_ms = ts_ms
                event.position = self._position(len(events) + 1)
                events.append(event)
        return events

    def _fresh_key(self, table: _Table, touched: set[tuple[tuple[str, str], Values]]) -> Values:
        r = self.random
        ident = (table.database, table.name)
        if self.freed and r.random() < 0.1:
            index = r.randrange(len(self.freed))
            owner, key = self.freed[index]
            if (owner == ident and len(key) == len(table.key_names) and key not in table.rows
                    and (ident, key) not in touched):
                self.freed[index] = self.freed[-1]
                self.freed.pop()
                return key
        self.next_id += 1
        return (1 + int(r.random() * 5), f"k{self.next_id}") if table.composite else (self.next_id,)

    def _free(self, table: _Table, key: Values) -> None:
        self.freed.append(((table.database, table.name), key))
        if len(self.freed) > 4096:  # only recently deleted keys come back
            del self.freed[:2048]

    def _row(self, table: _Table, key: Values) -> Row:
        r = self.random
        chance = r.random
        row = table.key_dict(key)
        for name, gen in table.gens.items():
            row[name] = None if chance() < 0.1 else gen(r)
        return row

    def _pick(self, table: _Table, touched: set[tuple[tuple[str, str], Values]]) -> Values | None:
        # One change per row per transaction (TiDB collapses more into one), so that a row's changes are
        # ordered by commit_ts alone wherever the format gives nothing finer.
        ident = (table.database, table.name)
        for _ in range(4):
            key = table.keys[int(self.random.random() * len(table.keys))]
            if (ident, key) not in touched:
                touched.add((ident, key))
                return key
        return None

    def _insert(self, table: _Table, touched: set[tuple[tuple[str, str], Values]]) -> ChangeEvent | None:
        key = self._fresh_key(table, touched)
        if key in table.rows:
            return None
        touched.add(((table.database, table.name), key))
        row = self._row(table, key)
        table.put(key, row)
        return ChangeEvent(kind=ROW, op=INSERT, database=table.database, table=table.name,
                           key=table.key_dict(key), after=row, columns=table.columns)

    def _update(self, table: _Table, touched: set[tuple[tuple[str, str], Values]]) -> ChangeEvent | None:
        r = self.random
        key = self._pick(table, touched)
        if key is None:
            return None
        before = table.rows[key]
        after = dict(before)
        names = list(table.gens)
        if names:
            count = len(names)
            changed = (names if r.random() < 0.05
                       else [names[int(r.random() * count)] for _ in range(1 + int(r.random() * 3))])
            for name in changed:
                after[name] = None if r.random() < 0.1 else table.gens[name](r)
        new_key = key
        if r.random() < self.key_change_rate:
            candidate = self._fresh_key(table, touched)
            if candidate not in table.rows:
                new_key = candidate
                touched.add(((table.database, table.name), new_key))
                after.update(table.key_dict(new_key))
                table.remove(key)
                self._free(table, key)
        table.put(new_key, after)
        return ChangeEvent(kind=ROW, op=UPDATE, database=table.database, table=table.name,
                           key=table.key_dict(new_key), before=before, after=after, columns=table.columns)

    def _delete(self, table: _Table, touched: set[tuple[tuple[str, str], Values]]) -> ChangeEvent | None:
        key = self._pick(table, touched)
        if key is None:
            return None
        before = table.rows[key]
        table.remove(key)
        self._free(table, key)
        return ChangeEvent(kind=ROW, op=DELETE, database=table.database, table=table.name,
                           key=table.key_dict(key), before=before, columns=table.columns)

    def _ddl_event(self, table: _Table, statement: str, columns: list[Column] | None) -> ChangeEvent:
        commit_ts = self._commit()
        return ChangeEvent(kind=DDL, database=table.database, table=table.name, ddl=statement,
                           columns=columns, commit_ts=commit_ts, ts_ms=self.physical_ms,
                           position=self._position(1))

    def _ddl(self) -> list[ChangeEvent]:
        r = self.random
        live = list(self.tables.values())
        table = live[r.randrange(len(live))]
        kind = self.ddl_kinds[r.randrange(len(self.ddl_kinds))]
        where = f"{_quote(table.database)}.{_quote(table.name)}"
        droppable = [c for c in table.columns if not c.key]
        if kind == DROP_COLUMN and len(droppable) > 2:
            gone = droppable[r.randrange(len(droppable))].name
            columns = [c for c in table.columns if c.name != gone]
            table.set_columns(columns)
            for key, row in list(table.rows.items()):
                table.rows[key] = {name: value for name, value in row.items() if name != gone}
            return [self._ddl_event(table, f"ALTER TABLE {where} DROP COLUMN {_quote(gone)}", columns)]
        if kind == RENAME_COLUMN and droppable:
            old = droppable[r.randrange(len(droppable))]
            name = f"c{table.next_column}_{parse_type(old.type).name}"
            table.next_column += 1
            columns = [msgspec.structs.replace(c, name=name) if c is old else c for c in table.columns]
            table.set_columns(columns)
            for key, row in list(table.rows.items()):
                table.rows[key] = {(name if n == old.name else n): value for n, value in row.items()}
            clause = (f"RENAME COLUMN {_quote(old.name)} TO {_quote(name)}" if r.random() < 0.5
                      else f"CHANGE COLUMN {_quote(old.name)} {_quote(name)} {old.type}")
            return [self._ddl_event(table, f"ALTER TABLE {where} {clause}", columns)]
        if kind == TRUNCATE_TABLE:
            table.clear()
            event = self._ddl_event(table, f"TRUNCATE TABLE {where}", table.columns)
            if self.profile.truncate_kind == TRUNCATE:
                event.kind, event.ddl = TRUNCATE, None
            return [event]
        if kind == RENAME_TABLE:
            if len(live) == 1 or r.random() < 0.5:
                return [self._rename_table(table, f"t{self._new_number()}")]
            other = r.choice([t for t in live if t is not table])
            names, through = (table.name, other.name), f"t{self._new_number()}"
            # One statement a table, as TiCDC sends RENAME TABLE a TO c, b TO a, c TO b.
            return [self._rename_table(table, through), self._rename_table(other, names[0]),
                    self._rename_table(table, names[1])]
        if kind == DROP_TABLE and len(self.tables) > 1:
            ident = (table.database, table.name)
            del self.tables[ident]
            self.dropped.append(ident)
            self.freed = [(owner, key) for owner, key in self.freed if owner != ident]
            return [self._ddl_event(table, f"DROP TABLE {where}", None)]
        # ADD COLUMN, also the fallback when the chosen DDL cannot run on this table
        text = self.types[r.randrange(len(self.types))] if self.types else "int"
        name = f"c{table.next_column}_{parse_type(text).name}"
        table.next_column += 1
        columns = [*table.columns, Column(name, text, nullable=True)]
        table.set_columns(columns)
        for key, row in list(table.rows.items()):
            table.rows[key] = {**row, name: None}
        return [self._ddl_event(table, f"ALTER TABLE {where} ADD COLUMN {_quote(name)} {text} NULL", columns)]

    def _new_number(self) -> int:
        self.next_table += 1
        return self.next_table - 1

    def _rename_table(self, table: _Table, name: str) -> ChangeEvent:
        old, new = (table.database, table.name), (table.database, name)
        where = f"{_quote(table.database)}.{_quote(table.name)}"
        event = self._ddl_event(table, f"RENAME TABLE {where} TO {_quote(table.database)}.{_quote(name)}", None)
        del self.tables[old]
        table.name = name
        self.tables[new] = table
        self.freed = [(new if owner == old else owner, key) for owner, key in self.freed]
        return event

    def _recreate(self) -> ChangeEvent:
        database, name = self.dropped.pop(0)
        table = self._new_table(database, name, composite=self.random.random() < 0.3)
        self.tables[(database, name)] = table
        return self._ddl_event(table, create_table_sql(database, name, table.columns), table.columns)

    # -- the oracle --------------------------------------------------------------------------------------

    def state(self) -> State:
        """The current rows of every table, as canonical values."""
        return {ident: {key_of(table.key_dict(key)): row for key, row in table.rows.items()}
                for ident, table in self.tables.items()}

    def expected(self) -> State:
        """What a correct pipeline holds for each table: the current rows as the profile's format delivers
        them (``state_tables`` orders them by key)."""
        out: State = {}
        for ident, table in self.tables.items():
            deliver = _deliverers(self.profile, table.columns)
            rows: dict[KeyTuple, Row] = {}
            for canonical in table.rows.values():
                row = _delivered(canonical, deliver) if deliver else canonical
                rows[key_of({name: row[name] for name in table.key_names})] = row
            out[ident] = rows
        return out

    def key_names(self) -> dict[tuple[str, str], list[str]]:
        return {ident: list(table.key_names) for ident, table in self.tables.items()}

    def column_types(self) -> dict[str, dict[str, str]]:
        """Each table's columns and their types now, as ``{"database.table": {"column": "type"}}``."""
        return {f"{table.database}.{table.name}": {c.name: c.type for c in table.columns}
                for table in self.tables.values()}


def _deliverers(profile: Profile, columns: Sequence[Column]) -> dict[str, Callable[[Any], Any]]:
    """Per column, how the format's delivered value differs from the canonical one (none: identical)."""
    out: dict[str, Callable[[Any], Any]] = {}
    for column in columns:
        t = parse_type(column.type)
        if profile.text_values:
            out[column.name] = lambda v, t=t: v if isinstance(v, str) else V.to_text(v, t)
        elif profile.timestamps == "local" and t.family == T.TIMESTAMP:
            out[column.name] = _as_local_text
        elif profile.fractions == "micros" and t.family in (T.DATETIME, T.TIME) and t.fsp:
            out[column.name] = _as_micros_fraction
        elif not profile.labels and t.family == T.ENUM:
            out[column.name] = lambda v, t=t: V.enum_index(v, t)
        elif not profile.labels and t.family == T.SET:
            out[column.name] = lambda v, t=t: V.set_mask(v, t)
    return out


def _as_micros_fraction(value: str) -> str:
    head, _, fraction = value.partition(".")
    return f"{head}.{fraction.ljust(6, '0')}" if fraction.strip("0") else head


def _as_local_text(value: str) -> str:
    return V.utc_timestamp_to_local(value, "UTC")


def _delivered(row: Row, deliver: Mapping[str, Callable[[Any], Any]]) -> Row:
    return {name: (deliver[name](value) if name in deliver and value is not None else value)
            for name, value in row.items()}


def simulate(events: int, *, profile: Profile = DEFAULT_PROFILE, seed: int = 0, tables: int = 3,
             **settings: Any) -> tuple[list[ChangeEvent], State]:
    """``events`` change events of a fresh simulated database and the expected final state."""
    db = Database(seed=seed, tables=tables, profile=profile, **settings)
    return db.run(events), db.expected()

"""A simulated upstream MySQL/TiDB database: the oracle for tests, benchmarks and the demo.

Modules: :mod:`.profiles` (what each format delivers), :mod:`.values` (random values per type), :mod:`.database`
(the database and its transactions), :mod:`.oracle` (events folded into state, states compared), :mod:`.producer`
(events as the producer's Kafka records), :mod:`.workload` (data sets as `cdclake generate` writes them) and
:mod:`.lakecheck` (a lake compared with a state). The names below are the simulator's public surface.

:class:`Database` holds tables with a column of every type the formats carry, runs random transactions of
inserts, updates, deletes, primary-key changes and DDL, and records each change as a canonical
:class:`~cdclake.model.events.ChangeEvent` (whole before/after images, ``columns``, ``key``, one ``commit_ts`` per
transaction, a ``position`` per change, resolved timestamps between transactions). Its tables *are* the
expected final state: nothing in it goes through a decoder or the pipeline.

A :class:`Profile` per format says what that format carries (column types, DDL, resolved timestamps, ENUM/SET
labels) and how its producer lays records out (topics, partitioning, DDL/resolved broadcast, key-change split),
so that the events a simulation produces for a format are what the format can deliver and
:meth:`Database.expected` describes what a correct pipeline ends up with. :func:`emit` turns events into the
Kafka records the real producer would write, through the format's own ``encode``::

    db = Database(seed=7, profile=profile_for("ticdc-open"))
    events = db.run(10_000)
    records = emit(events, "ticdc-open", partitions=3, replay_fraction=0.05, seed=7)
    assert diff_states(db.expected(), fold(formats.create("ticdc-open").decode(records).events)) == []
"""

from cdclake.simulator.database import Database, create_table_sql, simulate
from cdclake.simulator.oracle import KeyTuple, State, diff_states, fold, key_of, state_rows, state_tables
from cdclake.simulator.producer import (
    DEFAULT_TOPIC,
    emit,
    key_partition,
    murmur2,
    record_key_partition,
    route,
    split_key_changes,
    topic_name,
)
from cdclake.simulator.profiles import (
    ADD_COLUMN,
    ALL_TYPES,
    DDL_KINDS,
    DEFAULT_PROFILE,
    DROP_COLUMN,
    DROP_TABLE,
    PROFILES,
    RENAME_COLUMN,
    RENAME_TABLE,
    START_MS,
    TRUNCATE_TABLE,
    Profile,
    profile_for,
    tso,
)
from cdclake.simulator.values import value_generator
from cdclake.simulator.workload import (
    EXPECTED_DIR,
    MANIFEST,
    RECORDS_DIR,
    Generated,
    generate,
    read_expected,
    write_generated,
)

__all__ = [
    "ADD_COLUMN", "ALL_TYPES", "DDL_KINDS", "DEFAULT_PROFILE", "DEFAULT_TOPIC", "DROP_COLUMN", "DROP_TABLE",
    "EXPECTED_DIR", "MANIFEST", "PROFILES", "RECORDS_DIR", "RENAME_COLUMN", "RENAME_TABLE", "START_MS",
    "TRUNCATE_TABLE", "Database", "Generated", "KeyTuple", "Profile", "State", "create_table_sql", "diff_states",
    "emit", "fold", "generate", "key_of", "key_partition", "murmur2", "profile_for", "read_expected",
    "record_key_partition", "route", "simulate", "split_key_changes", "state_rows", "state_tables", "topic_name",
    "tso", "value_generator", "write_generated",
]

"""What each format delivers and how its producer lays records out: the simulator's profiles, with the
DDL kinds, the simulated clock and the column types a simulation draws from."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec

from cdclake.model import types as T
from cdclake.model.events import (
    DDL,
    TRUNCATE,
)
from cdclake.model.types import parse_type

# One column of every MySQL/TiDB type family the formats carry (tests/helpers/strategies.py uses the same list).
ALL_TYPES: tuple[str, ...] = (
    "tinyint", "tinyint unsigned", "smallint", "smallint unsigned", "mediumint", "mediumint unsigned",
    "int", "int unsigned", "bigint", "bigint unsigned", "decimal(10,2)", "decimal(38,10)", "decimal(65,0)",
    "float", "double", "bit(1)", "bit(10)", "bit(64)", "date", "datetime", "datetime(3)", "datetime(6)",
    "timestamp", "timestamp(6)", "time", "time(6)", "year", "char(10)", "varchar(255)", "text",
    "binary(16)", "varbinary(64)", "blob", "json", "enum('a','b','c d')", "set('x','y','z')",
)

# DDL a simulation may run; a profile lists the ones its format delivers.
ADD_COLUMN: Final = "add_column"
DROP_COLUMN: Final = "drop_column"
TRUNCATE_TABLE: Final = "truncate"
DROP_TABLE: Final = "drop_table"  # followed, some transactions later, by CREATE TABLE of the same name
RENAME_COLUMN: Final = "rename_column"  # RENAME COLUMN or CHANGE COLUMN, of a column outside the key
RENAME_TABLE: Final = "rename_table"  # to a new name, or two tables swap names through a third (as gh-ost ends)
DDL_KINDS: Final = (ADD_COLUMN, DROP_COLUMN, TRUNCATE_TABLE, DROP_TABLE, RENAME_COLUMN, RENAME_TABLE)

TSO_LOGICAL_BITS: Final = 18
START_MS: Final = 1_714_521_600_000  # 2024-05-01T00:00:00Z, the simulated clock's start
BINLOG_EVENTS_PER_FILE: Final = 1_000_000
ORACLE_FIRST_SCN: Final = 14_589_063_118_712


def tso(physical_ms: int, logical: int = 0) -> int:
    """A TiDB timestamp oracle value: physical milliseconds above 18 logical bits."""
    return physical_ms << TSO_LOGICAL_BITS | logical


# ---------------------------------------------------------------------------------------------------------
# Profiles: what each format carries and how its producer routes records

class Profile(msgspec.Struct, frozen=True, kw_only=True):
    """What one format delivers, and how its real producer lays records out in Kafka.

    What arrives:

    - ``types``: the column types the format carries losslessly (a simulation uses only these).
    - ``labels``: ENUM/SET arrive as labels, else as integers.
    - ``text_values``: every value arrives as text (``values.to_text``), with no types.
    - ``timestamps``: TIMESTAMP arrives as canonical ``utc`` text, or as the ``local`` wall-clock text the
      producer wrote (the simulated server runs in UTC) when the decoder is not told the producer's zone.
    - ``fractions``: DATETIME/TIME fractions have the column's ``fsp`` digits, or are ``micros``: six digits,
      none when the fraction is zero (DTS's broken-down DateTime).
    - ``ddl``: the DDL kinds delivered (:data:`DDL_KINDS`); ``truncate_kind``: TRUNCATE as a ``ddl``
      statement or as a ``truncate`` event; ``resolved``: resolved timestamps are delivered.

    What the source and producer do:

    - ``clock``: ``tso`` (commit_ts is a TiDB TSO) or ``ms`` (commit time in epoch ms: MySQL, Oracle).
    - ``position``: how the source reports a change's place in its log, which the encoder writes back into
      the message: ``sequence`` (one padded number), ``binlog`` (file name, byte offset, row: Debezium's
      ``source.file/pos/row``), ``dts`` (file number, offset, record id: DTS's ``sourcePosition`` and ``id``)
      or ``scn`` (commit SCN, transaction id, place in the transaction: SharePlex's ``scn/trans/seq``).
    - ``topics``: one ``single`` topic, or one per ``table``.
    - ``partition_by``: ``event`` (the producer hashes the row's key values, as TiCDC's index-value dispatcher
      and Canal's partitionHash do) or ``record-key`` (Kafka's default partitioner on the record's key bytes,
      as Kafka Connect does: a key change's delete goes to the old key's partition).
    - ``ddl_to`` / ``resolved_to``: the partitions a DDL or resolved record goes to: ``all``, ``first``, or
      ``key`` (where a row of its table without key values would go).
    - ``split_key_changes``: an update that changes the key is sent as a delete of the old key and an insert
      of the new one (TiCDC does this for every MQ protocol).

    What a pipeline can make of it:

    - ``replay_safe``: a redelivered record decodes to the same commit_ts+position, or to one whose
      re-application cannot change the state, so replays leave the state unchanged.
    - ``ordered``: (commit_ts, position) orders one key's changes across partitions (a key change can move a
      row to another partition).
    """

    types: tuple[str, ...] = ALL_TYPES
    labels: bool = True
    text_values: bool = False
    timestamps: str = "utc"
    fractions: str = "fsp"
    clock: str = "tso"
    position: str = "sequence"
    ddl: frozenset[str] = frozenset()
    truncate_kind: str = DDL
    resolved: bool = False
    topics: str = "single"
    partition_by: str = "event"
    ddl_to: str = "all"
    resolved_to: str = "all"
    split_key_changes: bool = False
    replay_safe: bool = True
    ordered: bool = True

    def to_dict(self) -> dict[str, Any]:
        out = msgspec.to_builtins(self)
        out["ddl"] = sorted(self.ddl)
        return out


_DEBEZIUM_NO_SCHEMA_TYPES: Final = tuple(
    t for t in ALL_TYPES
    if parse_type(t).family in (T.INTEGER, T.DOUBLE, T.TEXT, T.JSON, T.ENUM, T.SET, T.TIMESTAMP, T.YEAR)
    and t != "bigint unsigned")

# The one table of format profiles. A format without an entry gets DEFAULT_PROFILE (rows only, every type).
PROFILES: dict[str, Profile] = {
    # Open-source Canal: MySQL binlog, commit time with second resolution and no binlog position, so
    # neither replays nor a key moving across partitions can be ordered.
    "canal-json": Profile(clock="ms", position="binlog", ddl=frozenset(DDL_KINDS), ddl_to="first",
                          replay_safe=False, ordered=False),
    "ticdc-open": Profile(labels=False, timestamps="local", ddl=frozenset(DDL_KINDS), resolved=True,
                          split_key_changes=True),
    # TiCDC Avro without its extension carries no commit ts (and deletes never do): order is the Kafka log's.
    "ticdc-avro": Profile(topics="table", partition_by="record-key", split_key_changes=True, replay_safe=False),
    "debezium-json": Profile(clock="ms", position="binlog", topics="table", partition_by="record-key"),
    "debezium-avro": Profile(clock="ms", position="binlog", topics="table", partition_by="record-key"),
    "dts-avro": Profile(clock="ms", position="dts", fractions="micros", ddl=frozenset(DDL_KINDS), ddl_to="first"),
    # SharePlex (Oracle through DTS) sends every value as text and no types.
    "shareplex-json": Profile(clock="ms", position="scn", text_values=True, ddl=frozenset({TRUNCATE_TABLE}),
                              truncate_kind=TRUNCATE, ddl_to="key"),
}
DEFAULT_PROFILE: Final = Profile()

# Options that change what a format delivers: (format, option, value) → profile fields to replace. The value
# is matched lower-cased; "*" matches any non-empty value that has no entry of its own.
PROFILE_OPTIONS: dict[tuple[str, str, str], dict[str, Any]] = {
    ("ticdc-open", "timestamp-zone", "*"): {"timestamps": "utc"},
    # TiCDC's canal-json: commit TSO in _tidb, watermarks, base-type mysqlType (ENUM/SET as integers).
    ("canal-json", "flavour", "tidb"): {"labels": False, "clock": "tso", "position": "sequence", "resolved": True,
                                        "split_key_changes": True, "replay_safe": True, "ordered": True},
    ("debezium-json", "schemas-enable", "false"): {"types": _DEBEZIUM_NO_SCHEMA_TYPES},
}


def profile_for(format_name: str, options: Mapping[str, Any] | None = None) -> Profile:
    """The profile of a format under the given options (unknown formats get :data:`DEFAULT_PROFILE`)."""
    profile = PROFILES.get(format_name, DEFAULT_PROFILE)
    for name, value in (options or {}).items():
        text = str(value).lower()
        changes = PROFILE_OPTIONS.get((format_name, name, text))
        if changes is None and text:
            changes = PROFILE_OPTIONS.get((format_name, name, "*"))
        if changes:
            profile = msgspec.structs.replace(profile, **changes)
    return profile

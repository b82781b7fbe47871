"""Events as the real producer's Kafka records: topics, partitioning (Kafka's murmur2), DDL and resolved-ts
broadcast, key-change splits, replays."""

from __future__ import annotations

import random
import zlib
from collections.abc import Mapping, Sequence
from typing import Any, Final

import msgspec

from cdclake.formats.base import Format
from cdclake.model.events import (
    DELETE,
    INSERT,
    RESOLVED,
    ROW,
    UPDATE,
    ChangeEvent,
)
from cdclake.model.records import Record
from cdclake.simulator.profiles import Profile, profile_for

# ---------------------------------------------------------------------------------------------------------
# Emitting events as the real producer's Kafka records

DEFAULT_TOPIC: Final = "cdclake-sim"


def topic_name(profile: Profile, ident: tuple[str, str] | None, prefix: str = DEFAULT_TOPIC) -> str:
    """The topic a producer writes to when its encoder does not name one: one per changefeed, or one per
    table (``<prefix>.<database>.<table>``, Debezium's and the Avro dispatchers' layout)."""
    if profile.topics == "table" and ident is not None:
        return f"{prefix}.{ident[0]}.{ident[1]}"
    return prefix


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 hash (``org.apache.kafka.common.utils.Utils.murmur2``) as a signed 32-bit int."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = length & ~3
    rest = length % 4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def record_key_partition(key: bytes | None, partitions: int) -> int:
    """Kafka's default partitioner for a keyed record; unkeyed records stay on partition 0 (the real
    producer spreads them by batch, which no consumer may rely on)."""
    if key is None or partitions <= 1:
        return 0
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def key_partition(database: str | None, table: str | None, key: Mapping[str, Any] | None, partitions: int) -> int:
    """The partition of a row by the hash of its table and key values (stable across runs and machines,
    unlike Python's ``hash``), as TiCDC's index-value dispatcher and Canal's ``partitionHash`` spread rows."""
    if partitions <= 1:
        return 0
    values = [v for _, v in sorted((key or {}).items())]
    return zlib.crc32(msgspec.json.encode([database, table, *values])) % partitions


_Group = tuple[tuple[str, str] | None, int]  # (the table whose topic it is, or None for a single topic; partition)


def route(events: Sequence[ChangeEvent], profile: Profile, partitions: int) -> dict[_Group, list[ChangeEvent]]:
    """The events each (topic, partition) of the producer receives, in order: rows by key hash (a key
    change by its new key), DDL and resolved timestamps as the profile's producer broadcasts them."""
    per_table = profile.topics == "table"
    tables = sorted({(e.database or "", e.table or "") for e in events if e.kind != RESOLVED and e.table})
    topic_ids: list[tuple[str, str] | None] = list(tables) if per_table else [None]
    groups: dict[_Group, list[ChangeEvent]] = {}

    def send(event: ChangeEvent, topic_id: tuple[str, str] | None, to: str, partition: int) -> None:
        targets = range(partitions) if to == "all" else (0,) if to == "first" else (partition,)
        for p in targets:
            groups.setdefault((topic_id, p), []).append(event)

    for event in events:
        ident = (event.database or "", event.table or "")
        topic_id = ident if per_table else None
        if event.kind == ROW:
            image = event.after if event.after is not None else event.before
            key = event.key if event.key is not None else event.key_of()
            if key is None and image is not None:
                key = image
            partition = key_partition(event.database, event.table, key, partitions)
            groups.setdefault((topic_id, partition), []).append(event)
        elif event.kind == RESOLVED:
            for tid in topic_ids:
                send(event, tid, profile.resolved_to, 0)
        else:
            send(event, topic_id, profile.ddl_to, key_partition(event.database, event.table, None, partitions))
    return groups


def emit(events: Sequence[ChangeEvent], format_name: str | Format, *, partitions: int = 1,
         replay_fraction: float = 0.0, seed: int = 0, options: Mapping[str, Any] | None = None,
         profile: Profile | None = None, topic_prefix: str = DEFAULT_TOPIC) -> list[Record]:
    """The Kafka records a real producer of a format writes for these events, ordered by (topic,
    partition, offset): the format's own ``encode`` makes each partition's records from the events routed
    to it (see :func:`route`); offsets increase from 0 per (topic, partition). With ``replay_fraction`` > 0,
    about that fraction of records is delivered again a little later at new offsets (at-least-once
    redelivery: a producer retry or restart re-sends short runs of records).

    ``format_name`` may be a format object instead (made with ``options``), e.g. to decode with the same
    object when its schema registry lives in the process."""
    from cdclake import formats

    if partitions < 1:
        raise ValueError("partitions must be at least 1")
    if not 0.0 <= replay_fraction <= 1.0:
        raise ValueError("replay fraction must be between 0 and 1")
    fmt = format_name if isinstance(format_name, Format) else formats.create(format_name, dict(options or {}))
    profile = profile or profile_for(fmt.name, options)
    by_record_key = profile.partition_by == "record-key"
    if profile.split_key_changes:
        events = split_key_changes(events)
    groups = route(events, profile, 1 if by_record_key else partitions)
    encoded: dict[_Group, list[Record]] = {}
    named: dict[tuple[str, str] | None, str] = {}
    for group in sorted(groups, key=lambda g: (g[0] or ("", ""), g[1])):
        batch = groups[group]
        records = fmt.encode(batch)
        _stamp(records, batch)
        encoded[group] = records
        for record in records:
            if record.topic:
                named.setdefault(group[0], record.topic)
                break
    r = random.Random(seed)
    by_partition: dict[tuple[str, int], list[Record]] = {}
    for (topic_id, partition), records in encoded.items():
        default = named.get(topic_id) or topic_name(profile, topic_id, topic_prefix)
        for record in records:
            record.topic = record.topic or default
            record.partition = record_key_partition(record.key, partitions) if by_record_key else partition
            by_partition.setdefault((record.topic, record.partition), []).append(record)
    out: list[Record] = []
    for where in sorted(by_partition):
        records = _with_replays(by_partition[where], replay_fraction, r) if replay_fraction else by_partition[where]
        for offset, record in enumerate(records):
            record.offset = offset
        out.extend(records)
    return out


def split_key_changes(events: Sequence[ChangeEvent]) -> list[ChangeEvent]:
    """Updates that change the key as a delete of the old key then an insert of the new one, in the same
    transaction, as TiCDC sends them; their positions extend the update's, so they keep its place."""
    out: list[ChangeEvent] = []
    for event in events:
        if event.kind == ROW and event.op == UPDATE and event.before is not None and event.after is not None:
            names = [c.name for c in event.columns or () if c.key] or list(event.key or ())
            old_key = {name: event.before.get(name) for name in names}
            if names and old_key != {name: event.after.get(name) for name in names}:
                position = event.position or ""
                out.append(msgspec.structs.replace(event, op=DELETE, key=old_key, after=None,
                                                   position=f"{position}/0"))
                out.append(msgspec.structs.replace(event, op=INSERT, before=None, position=f"{position}/1"))
                continue
        out.append(event)
    return out


def _stamp(records: list[Record], events: Sequence[ChangeEvent]) -> None:
    """Give records their producer timestamp where the encoder left none: the event time of the matching
    event (exact when the encoder writes one record per event, proportional when it batches)."""
    times = [e.ts_ms for e in events if e.ts_ms is not None]
    if not times or not records:
        return
    latest = 0
    for i, record in enumerate(records):
        if record.timestamp is None:
            latest = max(latest, times[min(len(times) - 1, i * len(times) // len(records))])
            record.timestamp = latest


def _with_replays(records: list[Record], fraction: float, r: random.Random) -> list[Record]:
    n = len(records)
    target = round(n * fraction)
    later: dict[int, list[Record]] = {}
    replayed = 0
    while replayed < target:
        start = r.randrange(n)
        run = records[start:start + r.randint(1, min(8, target - replayed))]
        at = min(n - 1, start + len(run) - 1 + r.randint(0, 50))
        later.setdefault(at, []).extend(msgspec.structs.replace(rec) for rec in run)
        replayed += len(run)
    out: list[Record] = []
    for i, record in enumerate(records):
        out.append(record)
        out.extend(later.get(i, ()))
    return out

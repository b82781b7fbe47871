"""ticdc-avro decode throughput, events per second of CPU time on one core.

    .venv/bin/python benchmarks/ticdc_avro_decode.py

Tables: a typical 10-column table (bigint key, int, 2 varchar, decimal, enum, datetime, timestamp(3),
double, int unsigned) and the 37-column table of every type the test strategies cover. Modes: checksums
on (TiCDC ``integrity-check-level=correctness``, so string DECIMAL/BIGINT UNSIGNED and the extension) and
off. ``fastavro only`` is the floor of the reference path: one ``schemaless_reader`` call per value record
with nothing else done, for comparison.

Last results (2-core machine shared with other work, load average ≈1.5–2, Python 3.11, fastavro 1.13):
    10 columns, checksum on                 102,545 events/s   (fastavro only: 136,868 records/s)
    10 columns, checksum off                129,786 events/s   (fastavro only: 135,093 records/s)
    37 columns (every type), checksum on     39,211 events/s   (fastavro only:  44,555 records/s)
    37 columns (every type), checksum off     48,184 events/s   (fastavro only:  41,883 records/s)
A full decode (canonical values, checksum, events) costs about what fastavro alone needs to read the datum.
"""

from __future__ import annotations

import io
import random
import time

import fastavro

from cdclake.formats.ticdc.avro import TicdcAvro
from cdclake.model.events import INSERT, ROW, UPDATE, ChangeEvent, Column
from cdclake.simulator import ALL_TYPES, value_generator

N = 20_000
CHECKSUMS = {
    "enable-tidb-extension": "true",
    "decimal-handling-mode": "string",
    "bigint-unsigned-handling-mode": "string",
    "integrity-check-level": "correctness",
}
PLAIN = {"enable-tidb-extension": "true"}
TYPICAL = [
    Column("id", "bigint", True, False),
    Column("user_id", "int", False, False),
    Column("name", "varchar(64)"),
    Column("email", "varchar(128)"),
    Column("amount", "decimal(12,2)"),
    Column("status", "enum('new','paid','shipped')"),
    Column("created_at", "datetime"),
    Column("updated_at", "timestamp(3)"),
    Column("score", "double"),
    Column("flags", "int unsigned"),
]


def typical_rows(rng: random.Random) -> list[dict]:
    return [
        {"id": i, "user_id": rng.randint(1, 10**6), "name": f"user {i}", "email": f"user{i}@example.com",
         "amount": f"{rng.randint(0, 10**6) / 100:.2f}", "status": rng.choice(["new", "paid", "shipped"]),
         "created_at": "2024-05-01 12:34:56", "updated_at": "2024-05-01T12:34:56.789Z", "score": rng.random(),
         "flags": rng.randint(0, 2**32 - 1)}
        for i in range(N)
    ]  # fmt: skip


EVERY_TYPE = [Column("id", "bigint", True, False)] + [Column(f"c{i}", t) for i, t in enumerate(ALL_TYPES)]


def all_type_rows(rng: random.Random) -> list[dict]:
    generators = [(c.name, value_generator(c.type)) for c in EVERY_TYPE[1:]]
    return [
        {"id": i, **{name: None if rng.random() < 0.1 else make(rng) for name, make in generators}} for i in range(N)
    ]


def best_rate(fn, count: int, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return count / best


def measure(label: str, columns: list[Column], data: list[dict], options: dict) -> None:
    rng = random.Random(1)
    events = [ChangeEvent(kind=ROW, op=rng.choice([INSERT, UPDATE]), database="shop", table="t", columns=columns,
                          after=row, commit_ts=(1714567890000 + i) << 18) for i, row in enumerate(data)]  # fmt: skip
    encoder = TicdcAvro(**options)
    records = encoder.encode(events)
    decoder = TicdcAvro()
    decoder._registry = encoder.registry
    out = decoder.decode(records)
    assert not out.failures and len(out.events) == len(records)
    rate = best_rate(lambda: decoder.decode(records), len(records))
    schema_id = int.from_bytes(records[0].value[1:5], "big")
    parsed = encoder.registry.schema(schema_id)
    payloads = [r.value[5:] for r in records]
    floor = best_rate(lambda: [fastavro.schemaless_reader(io.BytesIO(p), parsed, None) for p in payloads], N)
    print(f"{label:<36} {rate:>10,.0f} events/s   (fastavro only: {floor:,.0f} records/s)")


def main() -> None:
    typical = typical_rows(random.Random(0))
    measure("10 columns, checksum on", TYPICAL, typical, CHECKSUMS)
    measure("10 columns, checksum off", TYPICAL, typical, PLAIN)
    every = all_type_rows(random.Random(0))
    measure("37 columns (every type), checksum on", EVERY_TYPE, every, CHECKSUMS)
    measure("37 columns (every type), checksum off", EVERY_TYPE, every, PLAIN)


if __name__ == "__main__":
    main()

"""Fuzzing every decoder with mutated real records.

Seeds are the corpus's real messages and what each format's own encoder writes for the workload simulator's
changes. Each mutant is decoded by the format's ``decode_record`` under a per-record deadline; ``Format.decode``
would turn any exception into a failure, so the harness looks at the exception itself. A record must give events,
a skip, or an intended error: a :class:`DecodeError` or :class:`BadValue` (which ``reason`` gives as their
message), or one of the format's fatal errors. Anything else (``KeyError``, ``TypeError``, ``RecursionError``, …,
which ``base.reason`` would word as ``"TypeName: message"``), a wrapped ``MemoryError``/``RecursionError``, or
a record that outlasts the deadline is a finding. The compiled paths are fuzzed too: ``_canal`` through
``decode_arrow`` (every record it takes must be one ``decode_record`` decodes into as many events), and
``_records`` through ``captured_to_arrow`` (what it reads must equal the Python reader's record).
"""

from __future__ import annotations

import base64
import random
import signal
import struct
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa

from cdclake import formats
from cdclake import simulator as W
from cdclake.formats.base import DecodeError, Format, reason
from cdclake.model import values as V
from cdclake.model.records import Record, captured_line, parse_captured_line
from cdclake.sources.files import captured_to_arrow

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"
DEADLINE_S = 5.0
# Errors whose wrapping in a DecodeError still means the decoder lost control.
_LOST: tuple[type[BaseException], ...] = (MemoryError, RecursionError, SystemError)
# Options each format is fuzzed with (registries get a folder by seeds()).
OPTIONS: dict[str, dict[str, str]] = {
    "canal-json": {}, "ticdc-open": {}, "ticdc-avro": {"enable-tidb-extension": "true"},
    "debezium-json": {}, "debezium-avro": {}, "dts-avro": {}, "shareplex-json": {},
}


class Hang(Exception):
    """A record outlasted the per-record deadline."""


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    def expire(signum: int, frame: Any) -> None:
        raise Hang(f"no result within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# ------------------------------------------------------------------------------------------------ seeds

def _corpus(name: str) -> list[Record]:
    lines = []
    if name == "canal-json":
        lines = [line for f in sorted((CORPUS / "flink").glob("canal-*.txt")) for line in f.read_bytes().splitlines()]
    elif name == "debezium-json":
        lines = [line for f in sorted((CORPUS / "flink").glob("debezium-*-data*.txt"))
                 for line in f.read_bytes().splitlines()]
        testdata = CORPUS / "tiflow" / "debezium-testdata"
        return [Record(value=line) for line in lines if line.startswith(b"{")] + [
            Record(key=(testdata / "datatype.dbz.key.json").read_bytes(),
                   value=(testdata / "datatype.dbz.json").read_bytes())]
    elif name == "ticdc-open":
        example = CORPUS / "tiflow" / "open-protocol-java-example"
        return [Record(key=k.read_bytes(), value=(example / "value" / k.name.replace("_key_", "_value_")).read_bytes())
                for k in sorted((example / "key").iterdir())]
    return [Record(value=line) for line in lines if line.startswith(b"{")]


def seeds(name: str, registry: Path, events: int = 400, seed: int = 5) -> tuple[Format, list[Record]]:
    """The decoder to fuzz and its seed records: the corpus's and the simulator's, through the format's encoder."""
    options = dict(OPTIONS[name])
    if "registry" in {o.name for o in formats.get(name).options}:
        options["registry"] = str(registry)
    db = W.Database(seed=seed, tables=3, profile=W.profile_for(name, options), ddl_rate=0.02, key_change_rate=0.1)
    changes = db.run(events)
    if "key-columns" in {o.name for o in formats.get(name).options}:
        options["key-columns"] = ";".join(f"{d}.{t}={','.join(k)}" for (d, t), k in db.key_names().items())
    records = W.emit(changes, name, partitions=2, seed=seed, options=options)
    return formats.create(name, options), _corpus(name) + records


# -------------------------------------------------------------------------------------------- mutations

_HUGE = (2**31, 2**31 - 1, 2**32, 2**62, 2**63 - 1)
_WRONG = (None, 0, -1, 2**70, -(2**70), 1e308, "", "x", [], {}, True, [None], {"": None})


def _zigzag(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _bytes_mutant(data: bytes, r: random.Random) -> bytes:
    if not data:
        return bytes(r.randrange(256) for _ in range(r.randrange(1, 16)))
    b = bytearray(data)
    choice = r.randrange(8)
    if choice == 0:  # bit flips
        for _ in range(r.randrange(1, 4)):
            i = r.randrange(len(b))
            b[i] ^= 1 << r.randrange(8)
    elif choice == 1:  # truncation
        del b[r.randrange(len(b)):]
    elif choice == 2:  # a chunk removed or repeated
        i = r.randrange(len(b))
        j = min(len(b), i + r.randrange(1, 64))
        b[i:j] = b"" if r.random() < 0.5 else b[i:j] * 2
    elif choice == 3:  # a huge Avro length (zigzag varint) written or inserted
        i = r.randrange(len(b))
        v = _zigzag(r.choice(_HUGE))
        b[i:i + (len(v) if r.random() < 0.5 else 0)] = v
    elif choice == 4:  # a huge 8-byte big-endian length prefix (TiCDC Open Protocol framing)
        i = r.randrange(0, max(1, len(b) - 7), 8 if r.random() < 0.7 else 1)
        b[i:i + 8] = struct.pack(">Q", r.choice((*_HUGE, 2**64 - 1)))
    elif choice == 5:  # interesting bytes
        i = r.randrange(len(b))
        b[i] = r.choice((0, 0x7F, 0x80, 0xFF, ord('"'), ord("\\"), ord("{"), ord("["), ord("-")))
    elif choice == 6:  # a giant number where a digit was
        digits = [i for i, c in enumerate(b) if 0x30 <= c <= 0x39]
        if digits:
            i = r.choice(digits)
            b[i:i + 1] = b"9" * r.choice((20, 40, 400, 5000)) + (b"e999" if r.random() < 0.3 else b"")
    else:  # deep nesting where a value starts
        i = r.randrange(len(b))
        depth = r.choice((100, 1000, 100_000))
        b[i:i] = b"[" * depth + b"]" * depth if r.random() < 0.5 else b'{"a":' * depth + b"1" + b"}" * depth
    return bytes(b)


def _paths(doc: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:8]):
            yield from _paths(v, (*path, i))


def _json_mutant(data: bytes, r: random.Random) -> bytes | None:
    """A structural mutation of a JSON document: a field removed, two values swapped, a value of a wrong type."""
    try:
        doc = msgspec.json.decode(data)
    except msgspec.DecodeError:
        return None
    paths = [p for p in _paths(doc) if p]
    if not paths:
        return None
    path = r.choice(paths)
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    choice = r.randrange(3)
    if choice == 0:
        del parent[last]
    elif choice == 1:
        other = r.choice(paths)
        holder = doc
        try:
            for part in other[:-1]:
                holder = holder[part]
            parent[last], holder[other[-1]] = holder[other[-1]], parent[last]
        except (KeyError, IndexError, TypeError):
            parent[last] = None
    else:
        parent[last] = r.choice(_WRONG)
    return msgspec.json.encode(doc)


def mutate(record: Record, r: random.Random) -> Record:
    """One mutant of a record: usually its value, sometimes its key or a header."""
    target = "key" if record.key is not None and r.random() < 0.2 else "value"
    data = getattr(record, target) or b""
    mutant = None
    if r.random() < 0.4 and data[:1] in (b"{", b"["):
        mutant = _json_mutant(data, r)
    if mutant is None:
        mutant = _bytes_mutant(data, r)
        for _ in range(r.choice((0, 0, 1, 2))):
            mutant = _bytes_mutant(mutant, r)
    return msgspec.structs.replace(record, **{target: mutant})


# ------------------------------------------------------------------------------------------------ checks

def check(fmt: Format, record: Record) -> str | None:
    """None when the record decodes to events, a skip or an intended error; otherwise what went wrong."""
    try:
        with deadline(DEADLINE_S):
            fmt.decode_record(record)
    except Hang as exc:
        return f"hang: {exc}"
    except Exception as exc:
        return unintended(exc, fmt)
    return None


def unintended(exc: Exception, fmt: Format) -> str | None:
    """What is wrong with the failure ``exc`` would be (None: an intended one). ``base.reason`` words an
    exception it does not expect as ``"TypeName: message"``; a plain ValueError keeps a message written for
    another purpose (``int()``'s digit limit, msgspec's field-name rules)."""
    cause = exc.__cause__ or exc.__context__
    if isinstance(exc, (DecodeError, V.BadValue, *fmt.fatal)) and isinstance(cause, _LOST):
        return f"{type(cause).__name__} wrapped in {type(exc).__name__}: {str(exc)[:200]} @ {_where(cause)}"
    why = reason(exc)
    if not why:
        return f"{type(exc).__name__} without a reason @ {_where(exc)}"
    if isinstance(exc, (DecodeError, V.BadValue, msgspec.DecodeError, *fmt.fatal)):
        return None
    if isinstance(exc, ValueError) or why.startswith(type(exc).__name__):
        return f"{type(exc).__name__}: {str(exc)[:200]} @ {_where(exc)}"
    return None


def _where(exc: BaseException) -> str:
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return f"{Path(tb.tb_frame.f_code.co_filename).name}:{tb.tb_lineno}" if tb else "?"


def check_canal_compiled(fmt: Format, records: list[Record]) -> list[str]:
    """``_canal``: every record the C path takes must be one ``decode_record`` decodes into as many events."""
    values = pa.array([rec.value for rec in records], pa.binary())
    offsets = pa.array(range(len(records)), pa.int64())
    try:
        with deadline(DEADLINE_S * 4):
            compiled = fmt.decode_arrow(values, offsets)
    except Exception as exc:  # one record would fail the whole batch
        return [f"decode_arrow raised {type(exc).__name__}: {str(exc)[:200]} @ {_where(exc)}"]
    if compiled is None:
        return []
    taken: dict[int, int] = {}
    for row in compiled.records.tolist():
        taken[row] = taken.get(row, 0) + 1
    left = set(compiled.left.tolist())
    found = []
    for row, count in taken.items():
        if row in left:
            found.append(f"_canal: record {row} both decoded and left")
            continue
        try:
            python = len(fmt.decode_record(records[row]))
        except Exception as exc:
            python = -1
            why = f"{type(exc).__name__}: {exc}"
        if python != count:
            found.append(f"_canal decoded {count} events of a record Python gives {python} "
                         f"({why if python < 0 else 'events'}): {base64.b64encode(records[row].value or b'')[:200]!r}")
    return found


def check_records_compiled(records: list[Record]) -> list[str]:
    """``_records``: the captured-records lines the C reader reads must be the records the Python reader reads."""
    found = []
    lines = [captured_line(rec) for rec in records]
    r = random.Random(len(lines))
    lines = [_bytes_mutant(line, r) if r.random() < 0.7 else line for line in lines]
    lines = [line for line in lines if line.strip()]
    if not lines:
        return []
    try:
        with deadline(DEADLINE_S * 4):
            batch = captured_to_arrow(lines)
    except Exception as exc:
        return [f"captured_to_arrow raised {type(exc).__name__}: {str(exc)[:200]} @ {_where(exc)}"]
    if batch is None:
        return []
    for i, line in enumerate(lines):
        try:
            python = parse_captured_line(line)
        except Exception as exc:
            found.append(f"_records read a line the Python reader refuses ({exc}): {line[:200]!r}")
            continue
        row = {name: batch.column(name)[i].as_py() for name in ("key", "value", "topic", "offset")}
        if row != {"key": python.key, "value": python.value, "topic": python.topic, "offset": python.offset}:
            found.append(f"_records read {row!r} where Python reads {python!r}")
    return found


class Report(msgspec.Struct):
    format: str
    records: int = 0
    seconds: float = 0.0
    findings: dict[str, int] = msgspec.field(default_factory=dict)
    examples: dict[str, str] = msgspec.field(default_factory=dict)


def fuzz(name: str, count: int, registry: Path, seed: int = 0, batch: int = 200,
         progress: Callable[[Report], None] | None = None) -> Report:
    """``count`` mutants of the format's seeds through its decoder (and the compiled paths that serve it)."""
    fmt, pool = seeds(name, registry, seed=seed + 5)
    r = random.Random(seed)
    report = Report(name)
    started = time.monotonic()

    def note(finding: str, record: Record) -> None:
        kind = finding.split(":", 1)[0] + " @ " + finding.rsplit("@ ", 1)[-1] if "@ " in finding else finding[:80]
        report.findings[kind] = report.findings.get(kind, 0) + 1
        if kind not in report.examples:
            report.examples[kind] = (f"{finding} | key={base64.b64encode(record.key or b'')[:300]!r} "
                                     f"value={base64.b64encode(record.value or b'')[:600]!r}")

    done = 0
    while done < count:
        mutants = [mutate(r.choice(pool), r) for _ in range(min(batch, count - done))]
        for record in mutants:
            finding = check(fmt, record)
            if finding is not None:
                note(finding, record)
        if name == "canal-json":
            for finding in check_canal_compiled(fmt, mutants):
                note(finding, mutants[0])
        if done % (batch * 25) == 0:
            for finding in check_records_compiled(mutants):
                note(finding, mutants[0])
        done += len(mutants)
        report.records = done
        if progress is not None and done % 50_000 < batch:
            report.seconds = round(time.monotonic() - started, 1)
            progress(report)
    report.seconds = round(time.monotonic() - started, 1)
    return report

"""Decode throughput of every registered format, in events per second of one core.

    .venv/bin/python benchmarks/decode.py [--events N] [--formats a,b] [--repeat 3] [--no-write]

For each format (and the option variants the goals name) the workload simulator makes N change events
(inserts, updates, deletes, key changes) of one typical 10-column table; the format's own encoder turns them
into records once (``workload.emit``, one partition); then ``fmt.decode(records)`` is timed in this process,
best of ``--repeat`` runs. Events/s is decoded events over the CPU time of the decode (``process_time``), so a
machine shared with other work measures one core's speed; wall time is shown beside it. A format below its
goal gets a quick profile (the functions where its decode spends the most time). The table is printed and
written into ``benchmarks/results.md`` between the ``decode`` markers, with the date, the machine and the goals
(issues #2 and #3).
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import gc
import io
import os
import platform
import pstats
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from cdclake import formats
from cdclake import simulator as W
from cdclake.formats.base import Format

RESULTS = Path(__file__).with_name("results.md")
START, END = "<!-- decode:start -->", "<!-- decode:end -->"

# The typical table: ``id bigint`` key plus these nine columns.
TYPES = ("int", "varchar(64)", "varchar(128)", "decimal(12,2)", "enum('new','paid','shipped')", "datetime",
         "timestamp(3)", "double", "int unsigned")

# Option variants worth a row of their own; every other format runs with its defaults.
VARIANTS: dict[str, list[dict[str, str]]] = {
    "canal-json": [{}, {"flavour": "tidb"}],
    "debezium-json": [{}, {"schemas-enable": "false"}],
    "ticdc-avro": [{"enable-tidb-extension": "true", "decimal-handling-mode": "string",
                    "bigint-unsigned-handling-mode": "string", "integrity-check-level": "correctness"}, {}],
}

# Goals (issues #2 and #3): events/s per core, for the variant each goal is stated for.
GOALS: dict[tuple[str, str], int] = {
    ("canal-json", "{}"): 300_000,
    ("debezium-json", "{}"): 100_000,  # JSON with schema
    ("ticdc-open", "{}"): 250_000,
    ("ticdc-avro", str(VARIANTS["ticdc-avro"][0])): 150_000,  # checksum on
    ("dts-avro", "{}"): 150_000,
}
PACKAGES = ("cdclake", "msgspec", "fastavro", "python-snappy", "lz4")


def workload(name: str, options: dict[str, str], events: int) -> tuple[Format, list[Any]]:
    """The format object and the records its encoder writes for ``events`` changes of the typical table."""
    profile = W.profile_for(name, options)
    types = tuple(t for t in TYPES if t in profile.types) or profile.types[:9]
    db = W.Database(seed=1, tables=1, profile=profile, types=types, ddl_rate=0.0, resolved_every=1000)
    changes = db.run(events)
    declared = {o.name for o in formats.get(name).options}
    settings = dict(options)
    if "registry" in declared and not settings.get("registry"):
        settings["registry"] = "memory:"  # the same object encodes and decodes, so the schemas are at hand
    if "key-columns" in declared:
        settings["key-columns"] = "id"  # formats whose messages do not name the key are told it
    fmt = formats.create(name, settings)
    return fmt, W.emit(changes, fmt, options=options, profile=profile)


def measure(fmt: Format, records: list[Any], repeat: int) -> tuple[int, float, float, int]:
    """(events, best CPU seconds, wall seconds of that run, failures) of decoding ``records``."""
    best = (float("inf"), 0.0)
    events = failures = 0
    for _ in range(repeat):
        gc.collect()
        wall, cpu = time.perf_counter(), time.process_time()
        out = fmt.decode(records)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        events, failures = len(out.events), len(out.failures)
        best = min(best, (cpu, wall))
    return events, best[0], best[1], failures


def profile_of(fmt: Format, records: list[Any], top: int = 6) -> list[str]:
    """Where one decode of ``records`` spends its time: the ``top`` functions by own time."""
    profiler = cProfile.Profile()
    profiler.runcall(fmt.decode, records)
    stream = io.StringIO()
    stats = pstats.Stats(profiler, stream=stream)
    total = sum(row[2] for row in stats.stats.values()) or 1.0  # type: ignore[attr-defined]
    rows = sorted(stats.stats.items(), key=lambda item: item[1][2], reverse=True)[:top]  # type: ignore[attr-defined]
    out = []
    for (path, line, function), (_, calls, own, cumulative, _) in rows:
        where = f"{Path(path).name}:{line}" if line else path
        out.append(f"{own / total:5.1%} own, {cumulative / total:5.1%} cumulative, {calls:>9,} calls  "
                   f"{function} ({where})")
    return out


def machine() -> str:
    versions = []
    for package in PACKAGES:
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            continue
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as handle:
            cpu = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), cpu)
    except OSError:
        pass
    load = f", load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    return (f"{os.cpu_count()} cores ({cpu}{load}), Python {platform.python_version()} on "
            f"{platform.system()} {platform.release()}; {', '.join(versions)}")


def label(options: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in options.items()) or "defaults"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=200_000, help="change events per format (default 200000)")
    parser.add_argument("--formats", default="", help="comma-separated format names (default: every one)")
    parser.add_argument("--repeat", type=int, default=3, help="decode runs per format; the best counts")
    parser.add_argument("--no-write", action="store_true", help=f"do not update {RESULTS.name}")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.formats.split(",") if n.strip()] or formats.names()
    unknown = sorted(set(names) - set(formats.names()))
    if unknown:
        parser.error(f"unknown format(s) {', '.join(unknown)}; known: {', '.join(formats.names())}")

    about = machine()
    print(about)
    rows: list[str] = []
    slow: list[str] = []
    for name in names:
        for options in VARIANTS.get(name, [{}]):
            goal = GOALS.get((name, str(options)))
            fmt, records = workload(name, options, args.events)
            events, cpu, wall, failures = measure(fmt, records, args.repeat)
            rate = events / cpu if cpu else float("inf")
            verdict = "" if goal is None else ("meets goal" if rate >= goal else "**below goal**")
            failed = f" ({failures} failures!)" if failures else ""
            rows.append(f"| {name} | {label(options)} | {len(records):,} | {events:,}{failed} | {cpu:.2f} | "
                        f"{wall:.2f} | **{rate:,.0f}** | {f'{goal:,}' if goal else '–'} {verdict} |")
            print(f"{name:16} {label(options):40} {events:>9,} events  {cpu:6.2f} s CPU  {wall:6.2f} s wall  "
                  f"{rate:>10,.0f} events/s{'  goal ' + format(goal, ',') if goal else ''} {verdict}{failed}")
            if goal is not None and rate < goal:
                lines = profile_of(fmt, records[: max(1, len(records) // 4)])
                slow.append(f"- **{name}** ({label(options)}): {rate:,.0f} events/s against {goal:,}. "
                            "Where one decode spends its time:\n" + "\n".join(f"  - `{line}`" for line in lines))
                print("  " + "\n  ".join(lines))
    if not args.no_write:
        write(section(rows, slow, about, args), RESULTS)
        print(f"written to {RESULTS}")
    return 0


def section(rows: list[str], slow: list[str], about: str, args: argparse.Namespace) -> str:
    columns = "id bigint (key), " + ", ".join(TYPES)
    lines = [
        START,
        "## Decode throughput (`benchmarks/decode.py`)",
        "",
        f"{dt.date.today().isoformat()}, {about}.",
        "",
        f"Workload: {args.events:,} change events per format from the workload simulator (inserts, updates, "
        f"deletes, key changes) of one table of 10 columns ({columns}), encoded once by the format's own "
        f"encoder into one partition; then `fmt.decode(records)` in one process, best of {args.repeat}. "
        "Events/s = decoded events / CPU seconds of the decode (one core); wall time beside it.",
        "",
        "| Format | Options | Records | Events | CPU s | Wall s | Events/s per core | Goal |",
        "|---|---|---:|---:|---:|---:|---:|---|",
        *rows,
        "",
        "Goals (issues #2/#3): Canal-JSON ≥ 300,000/s; Debezium JSON with schema ≥ 100,000/s; TiCDC Open Protocol "
        "≥ 250,000/s; TiCDC Avro ≥ 150,000/s with checksum on; DTS Avro ≥ 150,000/s.",
    ]
    if slow:
        lines += ["", "Below goal:", *slow]
    lines.append(END)
    return "\n".join(lines) + "\n"


def write(text: str, path: Path, start_marker: str = START, end_marker: str = END) -> None:
    """Replace a benchmark's section of ``path``, from ``start_marker`` to ``end_marker`` (``text`` holds them; other
    benchmarks own the rest of the file)."""
    current = path.read_text() if path.exists() else "# Benchmark results\n"
    start, end = current.find(start_marker), current.find(end_marker)
    if start != -1 and end > start:
        current = current[:start] + text.rstrip("\n") + current[end + len(end_marker):]
    else:
        current = current.rstrip("\n") + "\n\n" + text
    path.write_text(current if current.endswith("\n") else current + "\n")


if __name__ == "__main__":
    sys.exit(main())

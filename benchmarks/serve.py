"""One-off `cdclake run`s on their own against runs attached to `cdclake serve` (a Spark kept running).

Simulates the pipeline benchmark's workload (Canal-JSON, TiCDC flavour), starts `cdclake serve` on a free port,
lets it serve one run, then times `cdclake run PIPELINE.toml` three times each way, alternating: on its own (a new
JVM, the quick JIT of a run without --follow) and with `remote = "sc://localhost:PORT"`. Each lake must equal the
simulator's final state. Results go to benchmarks/results.md (section "serve").

    .venv/bin/python benchmarks/serve.py [--events 1000000] [--keys 100000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from decode import RESULTS, write  # noqa: E402
from pipeline import CDCLAKE, _data, command_run, host_reference  # noqa: E402


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(cache: Path, port: int) -> subprocess.Popen:
    """`cdclake serve`, once it has left its address for the runs."""
    server = subprocess.Popen([str(CDCLAKE), "serve", "--port", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env={**os.environ, "XDG_CACHE_HOME": str(cache)})
    address = cache / f"cdclake-{os.getuid()}" / f"spark-connect-{port}"
    for _ in range(1200):
        if address.exists():
            return server
        if server.poll() is not None:
            break
        time.sleep(0.5)
    server.kill()
    raise RuntimeError("cdclake serve did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cdclake-serve-bench-"))
    cache = work / "cache"
    server = None
    try:
        generated = _data(work / "data", args.events, args.keys)
        records = work / "data" / "records"
        host_before = host_reference()
        port = free_port()
        started = time.perf_counter()
        server = start_server(cache, port)
        server_start = time.perf_counter() - started
        remote = f"sc://localhost:{port}"
        first, problems = command_run(records, work / "first", generated, True, cache, remote)
        times: dict[str, list[float]] = {"alone": [], "attached": []}
        for n in range(3):
            for kind, seconds_of_kind in times.items():
                seconds, problems_here = command_run(records, work / f"{kind}-{n}", generated, True, cache,
                                                     remote if kind == "attached" else None)
                seconds_of_kind.append(seconds)
                problems += problems_here
        host_after = host_reference()
    finally:
        if server is not None:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=120)
        shutil.rmtree(work, ignore_errors=True)
    if problems:
        raise SystemExit("a lake differs from the simulator's final state:\n" + "\n".join(problems[:10]))
    events, messages = generated.manifest["events"], generated.manifest["records"]
    rows = []
    for kind, label in (("alone", "`cdclake run PIPELINE.toml` on its own (a new JVM, quick JIT)"),
                        ("attached", "the same, attached to `cdclake serve` (`remote = \"sc://localhost:PORT\"`)")):
        median = statistics.median(times[kind])
        runs = ", ".join(f"{t:.1f} s" for t in times[kind])
        rows.append(f"| {label}: {runs} | {median:.1f} | {events / median:,.0f} events/s |")
    section = f"""## Runs attached to `cdclake serve` (`benchmarks/serve.py --events {args.events}`)

{dt.date.today()}, {os.cpu_count()} cores, Python {platform.python_version()}. This host's speed before and after
(CPU s, best of 3; lower is faster): 10,000,000 Python additions {host_before[0]:.2f} and {host_after[0]:.2f};
CRC-32 over 256 MiB {host_before[1]:.2f} and {host_after[1]:.2f}.

{events:,} row changes over {args.keys:,} keys in {messages:,} Canal-JSON (TiCDC) messages (the rest are
resolved-ts messages), the pipeline benchmark's workload; the rate counts row changes. Each run went into a new
lake, which then equalled the simulator's final state. The server started in {server_start:.1f} s and served one
run first ({first:.1f} s), as it would have served the runs of the hours before; then the runs alternated.

| run (3 each, alternating) | median s | rate |
|---|---:|---:|
{chr(10).join(rows)}
"""
    start, end = "<!-- serve:start -->", "<!-- serve:end -->"
    write(f"{start}\n{section}{end}\n", RESULTS, start, end)
    print(section)


if __name__ == "__main__":
    main()

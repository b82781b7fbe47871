"""Peak memory of a column rewrite (DROP COLUMN, RENAME COLUMN, a widened type), against the table's size.

    .venv/bin/python benchmarks/rewrite.py [--rows 2000000,8000000,16000000] [--rows-per-file 500000] [--no-write]

For each size, a lake table of that many rows (a key, a 64-character text, a decimal, a timestamp and cdclake's
bookkeeping columns), one commit (file) per ``--rows-per-file`` rows, gets ``ALTER TABLE … DROP COLUMN`` through the
Delta sink (:meth:`cdclake.lake.delta.DeltaSink.apply_ddl`), in a new process whose peak resident memory is read
when it ends; a process that only opens the table is the floor. The sink rewrites the table a batch of rows at a
time, so the peak should grow with the size of a file, not with the table's; the table's size in memory (Arrow) is
shown beside it. The table is printed and written into ``benchmarks/results.md`` between the ``rewrite`` markers.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake

from decode import RESULTS, machine, write

START, END = "<!-- rewrite:start -->", "<!-- rewrite:end -->"

# Run in a new process: ``sys.argv[1]`` the lake, ``[2]`` "drop" or "open"; prints seconds and peak RSS in MiB. The
# peak is the process's own (VmHWM): getrusage's carries the parent's over from before the child's exec.
CHILD = """
import sys, time
from deltalake import DeltaTable
from cdclake.model import ddl
from cdclake.lake.delta import DeltaSink
lake, what = sys.argv[1], sys.argv[2]
started = time.perf_counter()
if what == "drop":
    DeltaSink(lake, "bench").apply_ddl("db", "t", ddl.DropColumn("note"), 1001, "~")
else:
    DeltaTable(lake + "/db/t").schema()
peak = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:")).split()[1]
print(time.perf_counter() - started, int(peak) / 1024)
"""


def make_table(uri: str, rows: int, per_file: int) -> int:
    """The table, a commit per ``per_file`` rows; returns its size in memory (Arrow bytes)."""
    size = 0
    for part in range(rows // per_file):
        ids = pa.array(range(part * per_file, (part + 1) * per_file), pa.int64())
        text = pc.cast(ids, pa.string())
        data = pa.table({
            "id": ids,
            "note": pc.utf8_lpad(text, 64, "n"),
            "amount": pc.cast(pc.divide(pc.cast(ids, pa.float64()), 100.0), pa.decimal128(12, 2)),
            "changed": pc.cast(pc.multiply(ids, 1_000_000), pa.timestamp("us", tz="UTC")),
            "_cdc_key": pc.binary_join_element_wise("[", text, "]", ""),
            "_cdc_seq": pc.binary_join_element_wise(pc.utf8_lpad(text, 20, "0"), "/", ""),
            "_cdc_commit_ts": ids,
            "_cdc_position": pa.array([""] * per_file, pa.string()),
            "_cdc_ts_ms": ids,
        })
        size += data.nbytes
        write_deltalake(uri, data, mode="append")
    return size


def child(lake: Path, what: str) -> tuple[float, float]:
    done = subprocess.run([sys.executable, "-c", CHILD, str(lake), what], capture_output=True, text=True, check=True)
    seconds, peak = done.stdout.split()
    return float(seconds), float(peak)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="2000000,8000000,16000000", help="table sizes, comma-separated")
    parser.add_argument("--rows-per-file", type=int, default=500_000, help="rows of each commit (file)")
    parser.add_argument("--no-write", action="store_true", help=f"do not update {RESULTS.name}")
    args = parser.parse_args()
    about = machine()
    print(about)
    lines: list[str] = []
    work = Path(tempfile.mkdtemp(prefix="cdclake-rewrite-"))
    try:
        for rows in (int(r) // args.rows_per_file * args.rows_per_file for r in args.rows.split(",")):
            lake = work / str(rows)
            started = time.perf_counter()
            size = make_table(str(lake / "db" / "t"), rows, args.rows_per_file)
            made = time.perf_counter() - started
            _, floor = child(lake, "open")
            seconds, peak = child(lake, "drop")
            table = DeltaTable(str(lake / "db" / "t"))
            if "note" in table.schema().to_arrow().names or table.to_pyarrow_dataset().count_rows() != rows:
                raise RuntimeError(f"the rewrite of {rows} rows lost rows or kept the column")
            lines.append(f"| {rows:,} | {rows // args.rows_per_file} | {size / 2**20:,.0f} | {floor:,.0f} | "
                         f"{peak:,.0f} | {seconds:.1f} |")
            print(f"{rows:,} rows ({size / 2**20:,.0f} MiB in memory, made in {made:.0f} s): opening peaks at "
                  f"{floor:,.0f} MiB; DROP COLUMN at {peak:,.0f} MiB in {seconds:.1f} s")
            shutil.rmtree(lake)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not args.no_write:
        write("\n".join([
            START, "## Column rewrites (`benchmarks/rewrite.py`)", "",
            f"{dt.date.today().isoformat()}, {about}.", "",
            f"A table written a file of {args.rows_per_file:,} rows at a time gets `DROP COLUMN` through the Delta "
            "sink, in a new process: its peak resident memory, against a process that only opens the table. The "
            "rewrite reads the table a row group at a time and writes files of delta-rs's target size, so its peak "
            "grows with the table only until the table fills such a file.", "",
            "| rows | files | table in memory (MiB) | opening it: peak (MiB) | DROP COLUMN: peak (MiB) | seconds |",
            "|---:|---:|---:|---:|---:|---:|", *lines, END, ""]), RESULTS, START, END)
        print(f"written to {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

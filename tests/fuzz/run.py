"""The fuzz run: ``python -m tests.fuzz.run --count 1000000`` (``make fuzz``) fuzzes every format in this process,
with its address space capped so that a decoder that allocates what a message declares fails instead of taking
the machine. One JSON report per format on stdout; exit status 1 when anything was found."""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
from pathlib import Path

import msgspec

from cdclake import formats
from tests.fuzz.harness import fuzz


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=1_000_000, help="mutants per format")
    parser.add_argument("--formats", default=",".join(formats.names()), help="comma-separated format names")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--memory-mb", type=int, default=1024, help="address-space cap (RLIMIT_AS), MiB; 0: none")
    args = parser.parse_args(argv)
    if args.memory_mb:
        cap = args.memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    found = False
    with tempfile.TemporaryDirectory(prefix="cdclake-fuzz-") as scratch:
        for name in args.formats.split(","):
            report = fuzz(name, args.count, Path(scratch) / name, seed=args.seed,
                          progress=lambda r: print(f"{r.format}: {r.records} records, {r.seconds} s, "
                                                   f"{sum(r.findings.values())} findings", file=sys.stderr, flush=True))
            found = found or bool(report.findings)
            print(msgspec.json.encode(report).decode(), flush=True)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

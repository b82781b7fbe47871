"""Crashing ``cdclake run`` at the pipeline's named failpoints (``CDCLAKE_FAILPOINT``, see
:mod:`cdclake.support.failpoints`), as the tests of exactly-once application do."""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path

CRASH_POINTS = ["before-merge", "after-merge", "before-dead-letters", "before-checkpoint"]


def _env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CDCLAKE_FAILPOINT")}
    return {**env, **settings}


def run_to_the_end(command: list[str], what: str = "the run") -> None:
    finished = subprocess.run(command, env=_env(), capture_output=True, timeout=900, check=False)
    assert finished.returncode == 0, f"{what}: " + finished.stderr.decode()[-2000:]


def crash(command: list[str], point: str) -> None:
    """Runs ``command`` to its death at ``point`` (``name`` or ``name:N``); fails where it does not get there."""
    crashed = subprocess.run(command, env=_env(CDCLAKE_FAILPOINT=point), capture_output=True, timeout=900,
                             check=False)
    assert crashed.returncode == 86, f"{point}: exit {crashed.returncode}, " + crashed.stderr.decode()[-2000:]


def point_hits(command: list[str], log: Path) -> Counter[str]:
    """How many times a whole run of ``command`` passes each point (it runs to the end)."""
    finished = subprocess.run(command, env=_env(CDCLAKE_FAILPOINT_LOG=str(log)), capture_output=True, timeout=900,
                              check=False)
    assert finished.returncode == 0, finished.stderr.decode()[-2000:]
    return Counter(log.read_text().split()) if log.exists() else Counter()


def crash_at_every_point_then_finish(command: list[str], after_crash: Callable[[str], None] | None = None,
                                     points: list[str] = CRASH_POINTS) -> None:
    """Run ``command`` once per crash point, each run dying at its point of the first batch that reaches it
    (the batch the previous crash left half done, replayed), then once to the end. Each crash starts from
    what the crashes before it left: one process per point rather than a crash and a clean rerun each, and
    every recovery but the last is itself interrupted."""
    for point in points:
        crash(command, point)
        if after_crash is not None:
            after_crash(point)
    run_to_the_end(command)

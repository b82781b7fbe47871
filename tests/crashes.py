"""Crashing ``cdclake run`` at the pipeline's named failpoints (``CDCLAKE_FAILPOINT``), as the tests of
exactly-once application do."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable

CRASH_POINTS = ["before-merge", "after-merge", "before-dead-letters", "before-checkpoint"]


def crash_at_every_point_then_finish(command: list[str], after_crash: Callable[[str], None] | None = None,
                                     points: list[str] = CRASH_POINTS) -> None:
    """Run ``command`` once per crash point, each run dying at its point of the first batch that reaches it
    (the batch the previous crash left half done, replayed), then once to the end. Each crash starts from
    what the crashes before it left: one process per point rather than a crash and a clean rerun each, and
    every recovery but the last is itself interrupted."""
    for point in points:
        crashed = subprocess.run(command, env={**os.environ, "CDCLAKE_FAILPOINT": point}, capture_output=True,
                                 timeout=600, check=False)
        assert crashed.returncode == 86, f"{point}: " + crashed.stderr.decode()[-2000:]
        if after_crash is not None:
            after_crash(point)
    finished = subprocess.run(command, capture_output=True, timeout=600, check=False)
    assert finished.returncode == 0, finished.stderr.decode()[-2000:]

"""Named points where ``cdclake run`` crashes on request: how the tests prove that a batch killed at any moment is
applied exactly once on the next run. ``CDCLAKE_FAILPOINT=name`` crashes at the point's first hit in the process,
``name:N`` at its Nth (a point such as ``after-merge`` is hit once per table step of a batch).
``CDCLAKE_FAILPOINT_LOG=FILE`` appends the name of every point passed to FILE: how the crash tests learn how many
hits of each point a run makes."""

from __future__ import annotations

import os
import threading
from collections import Counter

_hits: Counter[str] = Counter()
_counting = threading.Lock()


def wanted() -> tuple[str, int] | None:
    """The point ``CDCLAKE_FAILPOINT`` names and the hit to crash at; None when it names none."""
    setting = os.environ.get("CDCLAKE_FAILPOINT")
    if not setting:
        return None
    name, _, nth = setting.partition(":")
    return name, int(nth) if nth.isdigit() and int(nth) > 0 else 1


def failpoint(name: str) -> None:
    """Crash here, hard, at the hit of this point that ``CDCLAKE_FAILPOINT`` names."""
    log = os.environ.get("CDCLAKE_FAILPOINT_LOG")
    if log:
        with _counting, open(log, "a") as passed:
            passed.write(name + "\n")
    target = wanted()
    if target is None or target[0] != name:
        return
    with _counting:
        _hits[name] += 1
        if _hits[name] == target[1]:
            os._exit(86)

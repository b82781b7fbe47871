"""Named points where ``cdclake run`` crashes on request: how the tests prove that a batch killed at any moment is
applied exactly once on the next run."""

from __future__ import annotations

import os


def failpoint(name: str) -> None:
    """Crash here, hard, when ``CDCLAKE_FAILPOINT`` names this point."""
    if os.environ.get("CDCLAKE_FAILPOINT") == name:
        os._exit(86)

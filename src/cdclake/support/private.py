"""cdclake's private directory of this user: files only this user may write (sockets, tokens, locks)."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def private_directory(base: Path) -> Path:
    """cdclake's directory in ``base``, which only this user can write to."""
    home = base / f"cdclake-{os.getuid()}"
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    status = home.lstat()
    if not stat.S_ISDIR(status.st_mode) or status.st_uid != os.getuid() or status.st_mode & 0o077:
        raise PermissionError(f"{home} is not this user's private directory")
    return home

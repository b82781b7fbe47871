"""The lake's one-writer lock: one batch at a time applies changes to a lake on this machine."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from cdclake.support.private import private_directory

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def one_batch_at_a_time(lake: str) -> Iterator[None]:
    """Holds the lake while one batch is applied. The sources of a following pipeline run their queries at once,
    and two sources may write the same table: a batch that read the tombstones before another batch of the same
    keys recorded its own would bring deleted rows back, and both append to the lake's own tables. One batch at a
    time, each sees what the batches before it wrote, as the sources of a run without ``follow`` do one after
    another. A lock file, not a thread lock: with Spark Connect each query applies its batches in a process of its
    own on the server; and two runs on one lake on this machine take turns as well."""
    name = lake if "://" in lake else os.path.abspath(lake)
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    path = private_directory(Path(tempfile.gettempdir())) / f"lake-{digest}.lock"
    with open(path, "a+") as held:
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another batch holds it: say whose, as the wait may be long
            held.seek(0)
            holder = held.read().strip() or "another run"
            logger.warning("waiting for the run holding lake %s (%s) to finish its batch", name, holder)
            since = time.monotonic()
            fcntl.flock(held, fcntl.LOCK_EX)
            logger.warning("lake %s: waited %.1fs for the run holding it", name, time.monotonic() - since)
        held.truncate(0)
        held.write(f"pid {os.getpid()}, host {socket.gethostname()}")
        held.flush()
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)

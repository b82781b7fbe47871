"""SIGINT and SIGTERM during a run: the first ends it after the batches being applied, a second at once."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Iterator

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def stop_on_signal() -> Iterator[threading.Event]:
    """SIGINT (Ctrl-C) and SIGTERM set the event, which ends the run after the batches being applied, with its
    summary; a second signal acts as it would have without the run (Spark's SIGINT handler cancels the jobs and
    raises KeyboardInterrupt). A signal within :data:`SAME_SIGNAL_S` of the first is the same one delivered again:
    ``timeout`` and ``kill -- -PGID`` send it to the run and to its process group, which holds the run too.
    A KeyboardInterrupt raised inside a call to the JVM would print py4j's tracebacks and leave the batch half
    applied for the next run to finish. Handlers can only be set on the main thread: a run on another thread is
    stopped by its caller."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    first: list[float] = []  # when the first signal came

    def request_stop(number: int, _frame: object) -> None:
        if first:
            if time.monotonic() - first[0] < SAME_SIGNAL_S:
                return
            for each, handler in previous.items():
                signal.signal(each, handler)
            signal.raise_signal(number)  # as it would have been without the run
            return
        first.append(time.monotonic())
        stop.set()
        if _no_batch_yet.is_set():  # no batch to finish: a broker that is down would be waited for minutes
            raise KeyboardInterrupt
        logger.warning("stopping after the batches being applied (%s); again to stop at once",
                       signal.Signals(number).name)

    for number in previous:
        signal.signal(number, request_stop)
    try:
        yield stop
    finally:
        # Right after a signal, the same one delivered again may still come: a run that ends within the window
        # waits it out with ``request_stop`` in place, which swallows it, before the previous handler is back (else
        # the finished run would die of its own stop signal).
        if first:
            time.sleep(max(0.0, SAME_SIGNAL_S - (time.monotonic() - first[0])))
        for number, handler in previous.items():
            if signal.getsignal(number) is request_stop:  # not one set meanwhile (Spark's, as its session starts)
                signal.signal(number, handler)


# How long after a signal the same signal again counts as the first one delivered twice (see stop_on_signal).
SAME_SIGNAL_S = 1.0


# Set while a run starts Spark or asks Kafka where to start, before any batch: a signal then ends the run at once (see
# stop_on_signal).
_no_batch_yet = threading.Event()


@contextlib.contextmanager
def before_batches() -> Iterator[None]:
    _no_batch_yet.set()
    try:
        yield
    finally:
        _no_batch_yet.clear()

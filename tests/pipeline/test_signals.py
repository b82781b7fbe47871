"""SIGINT and SIGTERM during a run (``pipeline/signals.py``), in this process; whole runs are signalled in
``tests/pipeline/test_runner.py`` and ``tests/cli/test_run.py``."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from cdclake.pipeline.signals import SAME_SIGNAL_S, before_batches, stop_on_signal


def test_a_signal_sets_the_event_and_the_same_one_again_is_swallowed_and_the_handler_comes_back():
    handler = signal.getsignal(signal.SIGINT)
    with stop_on_signal() as stop:
        assert not stop.is_set()
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.is_set()
        os.kill(os.getpid(), signal.SIGINT)  # the same signal delivered again: nothing happens
        time.sleep(SAME_SIGNAL_S)
    assert signal.getsignal(signal.SIGINT) is handler


def test_a_signal_before_any_batch_ends_the_run_at_once():
    with pytest.raises(KeyboardInterrupt), stop_on_signal() as stop, before_batches():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)
    assert stop.is_set()


def test_without_a_signal_the_handlers_are_given_back():
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with stop_on_signal() as stop:
        pass
    assert not stop.is_set() and (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers


def test_a_run_that_ends_right_after_its_signal_still_swallows_the_second_delivery():
    # `timeout -s INT` and `kill -- -PGID` deliver one signal twice; a run that ends between the two must not die
    # of the second (CI saw such a run exit -2 after printing its summary).
    handler = signal.getsignal(signal.SIGINT)
    again = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    with stop_on_signal() as stop:
        os.kill(os.getpid(), signal.SIGINT)
        again.start()
    assert stop.is_set() and not again.is_alive()  # leaving waited out the window, the second came meanwhile
    assert signal.getsignal(signal.SIGINT) is handler

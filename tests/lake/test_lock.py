"""The lake's one-writer lock (``lake/lock.py``): a second holder waits, told whose turn it waits for; through
``cdclake run`` in ``tests/cli/test_run.py``."""

from __future__ import annotations

import logging
import threading
import time

from cdclake.lake.lock import one_batch_at_a_time


def test_a_second_holder_waits_for_the_first_and_says_whom_it_waits_for(tmp_path, caplog):
    lake = str(tmp_path / "lake")
    order: list[str] = []
    held = threading.Event()

    def first() -> None:
        with one_batch_at_a_time(lake):
            held.set()
            time.sleep(0.5)
            order.append("first")

    thread = threading.Thread(target=first)
    thread.start()
    held.wait(10)
    with caplog.at_level(logging.WARNING, logger="cdclake.lake.lock"), one_batch_at_a_time(lake):
        order.append("second")
    thread.join()
    assert order == ["first", "second"]
    assert f"waiting for the run holding lake {lake} (pid " in caplog.text
    assert f"lake {lake}: waited " in caplog.text


def test_other_lakes_are_not_waited_for(tmp_path):
    with one_batch_at_a_time(str(tmp_path / "a")), one_batch_at_a_time(str(tmp_path / "b")):
        pass

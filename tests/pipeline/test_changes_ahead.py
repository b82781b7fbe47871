"""The pipeline collects row steps' changes a few steps ahead, on threads (the real path: every pipeline test).
Here, with stand-in steps: each step's changes are collected once, in order, never more than ``ahead`` steps
ahead, the steps of a stopped table are left out, and a failing collection fails the step that needs it."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from cdclake.pipeline.batch import ChangesAhead


class Changes:
    def __init__(self, index: int, log: list[int], fail: bool = False) -> None:
        self.index, self.log, self.fail = index, log, fail

    def toArrow(self) -> pa.Table:
        self.log.append(self.index)
        if self.fail:
            raise RuntimeError(f"step {self.index} failed")
        return pa.table({"step": [self.index]})


class Step:
    def __init__(self, index: int, log: list[int], fail: bool = False) -> None:
        self.changes = Changes(index, log, fail)


def test_changes_come_in_order_at_most_ahead_steps_early_and_each_once():
    log: list[int] = []
    steps = [Step(i, log) for i in range(7)]
    with ChangesAhead(steps, ahead=2) as ahead:
        assert ahead.changes(steps[0])["step"].to_pylist() == [0]
        assert ahead.futures.keys() <= {1, 2} and ahead.submitted == 3
        assert ahead.changes(steps[1])["step"].to_pylist() == [1]
        # Steps 2 and 3 belong to a table that stopped: never asked for.
        assert ahead.changes(steps[4])["step"].to_pylist() == [4]
        assert ahead.futures.keys() <= {5, 6}
        assert ahead.submitted == 7
    # Step 3 may have been collected before the table stopped, or cancelled; no step twice.
    assert sorted(log) == sorted(set(log)) and {0, 1, 4} <= set(log) <= set(range(7))


def test_a_failing_collection_fails_the_step_that_needs_it_and_every_thread_is_done_after():
    log: list[int] = []
    steps = [Step(0, log), Step(1, log, fail=True), Step(2, log)]
    with ChangesAhead(steps, ahead=2) as ahead:
        ahead.changes(steps[0])
        with pytest.raises(RuntimeError, match="step 1 failed"):
            ahead.changes(steps[1])
    assert not [t for t in threading.enumerate() if t.name.startswith("cdclake-changes")]

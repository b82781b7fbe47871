"""``CDCLAKE_FAILPOINT=name`` and ``name:N``: a point crashes the process at its first or its Nth hit, and only
there; ``CDCLAKE_FAILPOINT_LOG`` lists every point passed."""

from __future__ import annotations

import pytest

from cdclake.support import failpoints


class Crashed(Exception):
    pass


@pytest.fixture
def crashes(monkeypatch):
    monkeypatch.setattr(failpoints, "_hits", failpoints.Counter())

    def exit_(code):
        raise Crashed(code)

    monkeypatch.setattr(failpoints.os, "_exit", exit_)
    return monkeypatch


@pytest.mark.parametrize("setting, crash_at", [("after-merge", 1), ("after-merge:1", 1), ("after-merge:3", 3),
                                               ("after-merge:0", 1), ("after-merge:x", 1)])
def test_a_point_crashes_at_the_hit_it_is_named_with(crashes, setting, crash_at):
    crashes.setenv("CDCLAKE_FAILPOINT", setting)
    for _ in range(1, crash_at):
        failpoints.failpoint("before-merge")
        failpoints.failpoint("after-merge")  # an earlier hit: no crash yet
    with pytest.raises(Crashed, match="86"):
        failpoints.failpoint("after-merge")


def test_no_point_named_no_crash_and_the_log_lists_every_point_passed(crashes, tmp_path):
    crashes.delenv("CDCLAKE_FAILPOINT", raising=False)
    crashes.setenv("CDCLAKE_FAILPOINT_LOG", str(tmp_path / "passed"))
    for name in ("before-merge", "after-merge", "before-merge"):
        failpoints.failpoint(name)
    assert (tmp_path / "passed").read_text().split() == ["before-merge", "after-merge", "before-merge"]
    crashes.setenv("CDCLAKE_FAILPOINT", "after-merge-not")
    failpoints.failpoint("after-merge")

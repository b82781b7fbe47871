from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import glue

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
CORPUS = FIXTURES / "corpus"  # real messages of other projects: provenance and licences in its MANIFEST.md
SPEC = FIXTURES / "spec"


@pytest.fixture(scope="session")
def corpus() -> Path:
    # A missing corpus must fail, not skip.
    assert CORPUS.is_dir(), f"the test corpus is missing at {CORPUS}"
    return CORPUS


@pytest.fixture(scope="session")
def glue_endpoint() -> Iterator[str]:
    with glue.glue_server() as endpoint:
        yield endpoint


_registry_names = itertools.count(1)


@pytest.fixture
def glue_registry(glue_endpoint: str) -> str:
    """The ``registry`` option naming a new, empty AWS Glue registry on the local stand-in."""
    return glue.create_registry(glue_endpoint, f"registry-{next(_registry_names)}")


_skipped: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped:
        _skipped.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # In CI a skipped test is missing work, not a pass.
    import os

    if os.environ.get("CI") and _skipped and session.exitstatus == 0:
        print(f"\n{len(_skipped)} test(s) skipped in CI: {', '.join(_skipped[:5])}")
        session.exitstatus = 1

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import glue

# One Spark session and one Kafka broker for the whole run, for every test that asks for them.
pytest_plugins = ["tests.helpers.spark_session", "tests.helpers.kafka_broker"]

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


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--crash-matrix", choices=("subset", "full"), default="subset",
                     help="subset (default): a kill at every point of a batch; full: at every hit of every point "
                          "as well (an hour or more; `make crash-matrix`)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The whole crash matrix takes an hour or more: deselected, visibly, unless asked for.
    full = config.getoption("--crash-matrix") == "full"
    left = [item for item in items if item.get_closest_marker("crash_matrix_full") is None or full]
    dropped = [item for item in items if item not in left]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = left
        _deselected_matrix.extend(item.nodeid for item in dropped)


_deselected_matrix: list[str] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _deselected_matrix:
        terminalreporter.write_line(f"deselected the full crash matrix ({', '.join(_deselected_matrix)}): "
                                    "--crash-matrix=full or `make crash-matrix` runs it")


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

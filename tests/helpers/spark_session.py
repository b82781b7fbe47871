from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from cdclake.spark.session import get_session
    from cdclake.spark.sources import register

    session = get_session(master="local[2]")
    register(session)
    yield session
    session.stop()

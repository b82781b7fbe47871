from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
CORPUS = SHARED / "corpus"
SPEC = SHARED / "spec"


@pytest.fixture(scope="session")
def corpus() -> Path:
    # The corpus sits beside the checkout (as in CI); a missing corpus must fail, not skip.
    assert CORPUS.is_dir(), f"the shared corpus is missing at {CORPUS}"
    return CORPUS

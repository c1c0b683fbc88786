"""Shared test fixtures: where the real fixtures live (../shared/fixtures beside the repo)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_FIXTURES = REPO.parent / "shared" / "fixtures"

# Test this checkout's code, also in the `python -m latscope` subprocesses some tests start, even
# when the installed (editable) latscope points at another checkout.
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH", "")) if p)


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not SHARED_FIXTURES.is_dir():
        pytest.fail(f"real fixtures not found at {SHARED_FIXTURES} (shared/ must sit beside the repo)")
    return SHARED_FIXTURES

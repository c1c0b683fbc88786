"""Shared test fixtures: where the real fixtures live (../shared/fixtures beside the repo)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_FIXTURES = REPO.parent / "shared" / "fixtures"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not SHARED_FIXTURES.is_dir():
        pytest.fail(f"real fixtures not found at {SHARED_FIXTURES} (shared/ must sit beside the repo)")
    return SHARED_FIXTURES

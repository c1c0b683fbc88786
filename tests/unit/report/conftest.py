"""Fixtures: a full report and its edge cases (see tests/report_samples.py)."""

from __future__ import annotations

from typing import Any

import pytest

from report_samples import (bare_report as _bare, full_report, healthy_report as _healthy,
                            hostile_report as _hostile, unreliable_client_report as _unreliable)


@pytest.fixture
def report() -> dict[str, Any]:
    return full_report()


@pytest.fixture
def bare_report() -> dict[str, Any]:
    return _bare()


@pytest.fixture
def healthy_report() -> dict[str, Any]:
    return _healthy()


@pytest.fixture
def hostile_report() -> dict[str, Any]:
    return _hostile()


@pytest.fixture
def unreliable_client_report() -> dict[str, Any]:
    return _unreliable()

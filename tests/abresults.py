"""A/B results as the findings engine takes them (``latscope.results.ABResult``), from the few
fields a test cares about; the rest get the values of an A/B that measured nothing."""

from __future__ import annotations

from typing import Any

from latscope.results import ABResult, section

_EMPTY: dict[str, Any] = {
    "finding_id": "f", "change": "c", "metric": "ttft_mean_ms", "load": 1, "arms": [],
    "a_values": [], "b_values": [], "a_mean": None, "b_mean": None, "change_pct": None,
    "ci95_pct": None, "helped": False, "verdict": None, "warmup_excluded": True,
    "prefix_cache_hit_rate": {}, "run_dirs": [], "note": ""}


def ab(**fields: Any) -> ABResult:
    """An ``ABResult`` with ``fields`` over the empty one (a dict's other keys are refused)."""
    return section({**_EMPTY, **fields}, ABResult)

"""What a merged summary (workers' statistics merged, ``RunStats.merge``) must share with the
one every record counted in one process gives."""

from __future__ import annotations

from typing import Any, Iterable

import pytest

EXACT = ("requests", "errors", "duration_s", "throughput", "tokens", "latency_origin", "goodput")
DISTRIBUTIONS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "send_lag_ms")


def assert_merged_summary(got: dict[str, Any], want: dict[str, Any],
                          exact: Iterable[str] = EXACT,
                          distributions: Iterable[str] = DISTRIBUTIONS) -> None:
    """Counts, windows and percentiles exact (the same values in another order); means and
    spreads summed in another order, so equal to ~1e-12; an error's example is the first one
    some worker saw, so only its kinds compare."""
    for key in exact:
        assert got.get(key) == want.get(key), key
    assert got.get("error_examples", {}).keys() == want.get("error_examples", {}).keys()
    for key in distributions:
        a, b = got[key], want[key]
        assert {k: v for k, v in a.items() if k not in ("mean", "std")} == \
            {k: v for k, v in b.items() if k not in ("mean", "std")}, key
        assert (a["mean"], a["std"]) == pytest.approx((b["mean"], b["std"]), rel=1e-9), key

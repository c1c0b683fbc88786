"""What a finding's ``impact`` is measured against, and the severity that follows from it.

A finding's impact is ``{"target": T, "share": 0..1, "value_ms": ..., "measured_at": ...}`` with
T one of ``IMPACT_TARGETS``. Two findings are comparable only when they share a target and were
measured on the same run (``measured_at``). A share outside 0..1 cannot be a real share: it is
refused here (``ImpossibleShare``), so that no report can print one.
"""

from __future__ import annotations

import math
from typing import Any

from latscope.errors import LatscopeError
from latscope.model import Severity

IMPACT_TARGETS = {
    "ttft_mean": "of mean client TTFT",
    # passive runs: no client of latscope's, the server's own TTFT (frontend arrival -> first
    # token) is the total (docs/passive.md)
    "server_ttft_mean": "of mean server TTFT",
    "ttft_p99": "of p99 TTFT",
    "e2e_mean": "of mean E2E",
    "tpot": "of TPOT",
    "throughput": "of throughput lost",
    "gpu_window": "of the GPU window",
    "gpu_time": "of the time (GPU telemetry)",
}
# Ranking order when findings are measured against different targets: the latency users feel
# first, the GPU's own time last (a GPU share says nothing about the request's latency by itself).
TARGET_ORDER = tuple(IMPACT_TARGETS)

# A share of the target at or above these is critical / a warning -- for a *fault* (something a
# flag, a setting or a deployment change removes). Where time goes by physics (prefill, decode)
# it is information, however large.
CRITICAL_SHARE = 0.5
WARNING_SHARE = 0.2
_TOLERANCE = 1e-6


class ImpossibleShare(LatscopeError):
    """A share outside 0..1: the inputs it came from disagree; it must not be reported."""


def make_impact(target: str, share: float, *, value_ms: float | None = None,
                measured_at: str = "") -> dict[str, Any]:
    if target not in IMPACT_TARGETS:
        raise ValueError(f"unknown impact target {target!r}: one of {', '.join(IMPACT_TARGETS)}")
    if share is None or not math.isfinite(share) or not -_TOLERANCE <= share <= 1 + _TOLERANCE:
        raise ImpossibleShare(f"share {share!r} of {target} is not between 0 and 1")
    out: dict[str, Any] = {"target": target, "share": round(min(1.0, max(0.0, share)), 4)}
    if value_ms is not None:
        out["value_ms"] = round(float(value_ms), 3)
    if measured_at:
        out["measured_at"] = measured_at
    return out


def severity_for_share(share: float, *, fault: bool = True) -> Severity:
    if not fault:
        return Severity.INFO
    if share >= CRITICAL_SHARE:
        return Severity.CRITICAL
    if share >= WARNING_SHARE:
        return Severity.WARNING
    return Severity.INFO


def describe(impact: dict[str, Any] | None) -> str:
    """``"81% of mean client TTFT (512.0 ms) at c=16 (the knee)"``: the one wording of an
    impact, used by the verdict, the terminal, report.md and report.html alike. Older run
    directories' ``{"metric": ..., "value": ...}`` read the same way; a share outside 0..1 is
    an impossible number and is never printed (the target is named, the share refused)."""
    if not impact:
        return ""
    target = impact.get("target") or impact.get("metric") or ""
    words = IMPACT_TARGETS.get(target, f"of {target}" if target else "")
    share = impact.get("share")
    value = impact.get("value_ms")
    unit = " ms" if value is not None else ""
    if value is None:
        value = impact.get("value")
    if isinstance(share, (int, float)) and math.isfinite(share) and 0 <= share <= 1:
        text = f"{share:.0%} {words}".strip()
    elif share is not None:
        text = f"{words.removeprefix('of ') or 'its target'}: share {share!r} refused (not 0..1)"
    else:
        text = words.removeprefix("of ")
    if isinstance(value, (int, float)):
        text += f" ({value:.1f}{unit})"
    if impact.get("measured_at"):
        text += f" {where_words(impact['measured_at'])}"
    return text.strip()


def where_words(where: str) -> str:
    """``at c=16 (the knee)``; a passive window's label (``the last 10 min of live traffic``,
    latscope.findings.traffic) reads ``over the last 10 min of live traffic``."""
    return f"over {where}" if where.startswith("the last ") else f"at {where}"

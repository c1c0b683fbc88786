"""The rules of an A/B proof that decide what it says: where it is run, whether its two arms
were comparable, what a fix that helped measured, and the one wording of its result.

The runs themselves are campaign's (``campaign.experiment``: arms alternated, warm-up excluded,
fresh prompts per run); what they mean is decided here, once, for the verdict, every renderer
and every caller.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from latscope.findings.impact import make_impact, severity_for_share
from latscope.model import Evidence, Finding
from latscope.results import ABResult, Guard

# Prefix-cache hit rates of two arms further apart than this make their latencies incomparable.
HIT_RATE_GAP = 0.05
# A queueing cause is proven at the lowest load where queueing is this share of TTFT or more:
# past it both arms saturate the engine and the difference drowns in the longer runs' noise.
QUEUE_PROOF_SHARE = 0.5
# The A/B metrics whose measured gain is a share of a latency target (lower is better)
AB_TARGETS = {"tpot_mean_ms": "tpot", "ttft_mean_ms": "ttft_mean", "e2e_mean_ms": "e2e_mean"}


@dataclass(frozen=True, slots=True)
class LoadSplit:
    """One measured load and the mean ms of each part of its TTFT (a sweep step's)."""

    load: float
    parts_ms: Mapping[str, float]


def proof_load(finding: Finding, steps: Sequence[LoadSplit], measured_at: int | None
               ) -> int | None:
    """The concurrency to A/B a finding's fix at: for a queueing cause, the lowest load whose
    queue is at least ``QUEUE_PROOF_SHARE`` of TTFT; otherwise where the finding was measured
    (``measured_at``)."""
    if finding.layer == "queue":
        for step in steps:
            ttft = step.parts_ms.get("ttft")
            if ttft and step.parts_ms.get("ttft.server.queue", 0.0) / ttft >= QUEUE_PROOF_SHARE:
                return int(step.load)
    return measured_at


def arms_caveat(hit_rates: Mapping[str, Sequence[float | None]]) -> str:
    """A caveat when the arms were not served alike by the prefix cache ("" when they were)."""
    means = {}
    for arm, rates in hit_rates.items():
        known = [r for r in rates if r is not None]
        if known:
            means[arm] = sum(known) / len(known)
    if len(means) == 2 and abs(means["A"] - means["B"]) > HIT_RATE_GAP:
        return (f"prefix-cache hit rates differ (A {means['A']:.0%}, B {means['B']:.0%}): the "
                "arms were not served alike, so the change is not the fix's alone")
    return ""


def ab_impact(exp: ABResult) -> dict[str, Any] | None:
    """What a fix that helped took off its metric, as the impact of the setting it changed:
    (A - B) / A of the two arms' means; None unless it helped a latency metric."""
    target = AB_TARGETS.get(exp.metric)
    a, b = exp.a_mean, exp.b_mean
    if not exp.helped or target is None or not a or b is None or b >= a:
        return None
    impact = make_impact(target, (a - b) / a, value_ms=a - b,
                         measured_at=f"c={exp.load}" if exp.load else "")
    impact["by"] = "ab"  # the A/B's two arms, not a split of one run
    return impact


def with_proof(f: Finding, exp: ABResult) -> Finding:
    """The A/B as evidence of its finding; a fix that helped also gives a finding whose cost no
    run measured its share: what the fix took off the metric (the H200's --enforce-eager: 78%
    of TPOT), so that it ranks, and is worded, as a measured cause, its severity raised to what
    that share makes it."""
    f = dataclasses.replace(f, evidence=f.evidence + [Evidence(
        "A/B: " + exp.change, experiment_text(exp), "",
        f"diagnose prove stage ({len(exp.arms)} runs)")])
    impact = ab_impact(exp)
    if impact is not None and (f.impact or {}).get("share") is None:
        worst = min(f.severity, severity_for_share(impact["share"]), key=lambda v: v.rank)
        f = dataclasses.replace(f, impact=impact, severity=worst)
    return f


def experiment_text(exp: ABResult, means: bool = False) -> str:
    """``"ttft_mean_ms -35.0% [95% CI -68.0% .. +33.0%]: did not measurably help; guard ..."``;
    with ``means``, the two arms' means first: ``"tpot_mean_ms 26.7 -> 5.8 ms (-78.1% ...)"``."""
    if exp.change_pct is None:
        return exp.note or exp.verdict or "not measured"
    change = f"{exp.change_pct:+.1f}%{_interval(exp.ci95_pct)}"
    if means and exp.a_mean is not None and exp.b_mean is not None:
        unit = " ms" if exp.metric.endswith("_ms") else ""
        change = f"{exp.a_mean:.1f} -> {exp.b_mean:.1f}{unit} ({change})"
    text = f"{exp.metric} {change}: {exp.words()}"
    guard = exp.guard
    if isinstance(guard, Guard) and guard.change_pct is not None:
        text += f"; {guard.metric} {guard.change_pct:+.1f}%{_interval(guard.ci95_pct)}"
    return text


def _interval(ci: Sequence[float] | None) -> str:
    return f" [95% CI {ci[0]:+.1f}% .. {ci[1]:+.1f}%]" if ci else ""

"""Knee of a throughput–latency curve, the highest load meeting an SLO, and the operating point.

The knee is found with Kneedle (Satopää et al., "Finding a 'Kneedle' in a Haystack", ICDCSW 2011)
applied to the curve *throughput against latency*: both are min–max normalised to [0, 1] over the
measured steps and the knee is the step that maximises ``throughput_n - latency_n``, i.e. the
step farthest above the chord from the cheapest to the most expensive point. Past the knee each
extra unit of throughput costs more latency than the curve averaged so far. Kneedle gives no
confidence of its own, so this module states one from three measured things: how pronounced the
knee is (the Kneedle difference), whether it survives leaving out any other step (and, when each
step carries a standard error, noise-perturbed resamples), and whether the sweep measured past it.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Callable, Sequence

import msgspec
import numpy as np

# A load as the sweep measured it: a concurrency stays an int (64, not 64.0, in sweep.json).
Number = int | float
# A step's flat metrics (``analysis.sweep.flatten_summary``): each a number, or None where the
# run did not measure it; an SLO term or an objective names one by its key.
Metrics = Mapping[str, float | None]

# A later step that adds at most this share of throughput counts as "saturated".
SATURATION_GAIN = 0.10
# Latency must grow by more than this share of its lowest value for a knee to exist.
MIN_LATENCY_GROWTH = 0.20
# Kneedle differences at or below this are a straight line within measurement noise.
MIN_DIFFERENCE = 0.05
METHOD = "kneedle (Satopää 2011) on normalised throughput vs latency"


@dataclass(frozen=True, slots=True)
class CurvePoint:
    """One measured step: the offered load and what it gave.

    ``throughput_se`` / ``latency_se`` are standard errors when known (from request resampling);
    they only feed the noise check of the confidence.
    """

    load: Number
    throughput: float
    latency: float
    throughput_se: float = 0.0
    latency_se: float = 0.0


class Knee(msgspec.Struct, kw_only=True):
    load: Number
    index: int  # index into the points as given (sorted by load)
    method: str
    score: float  # Kneedle difference at the knee, 0..1: 0 = a straight line, no knee
    stability: float  # share of refits (leave-one-out, noise resamples) that land on this load
    measured_past: bool  # a higher load was measured and showed the saturation
    confidence: str  # "high" | "medium" | "low"
    reasons: list[str] = []


def kneedle_index(throughput: Sequence[float], latency: Sequence[float]) -> int | None:
    """Index of the Kneedle knee of throughput (gain) against latency (cost), or None if flat."""
    y = np.asarray(throughput, dtype=float)
    x = np.asarray(latency, dtype=float)
    if no_knee_reason(y, x):
        return None
    x_n = (x - x.min()) / np.ptp(x)
    y_n = (y - y.min()) / np.ptp(y)
    diff = y_n - x_n
    # A curve this close to the chord has no knee: throughput and latency grow in proportion.
    return int(np.argmax(diff)) if diff.max() > MIN_DIFFERENCE else None


def no_knee_reason(throughput: Sequence[float] | np.ndarray,
                   latency: Sequence[float] | np.ndarray) -> str:
    """Why a curve has no knee to look for ("" if it may have one).

    Min–max normalisation stretches any range to [0, 1], so a latency that only wobbles with
    noise would look like a curve; a knee needs latency to have grown by ``MIN_LATENCY_GROWTH``.
    """
    y = np.asarray(throughput, dtype=float)
    x = np.asarray(latency, dtype=float)
    if len(y) < 3:
        return f"{len(y)} step(s): a knee needs at least 3"
    if np.ptp(x) <= MIN_LATENCY_GROWTH * max(x.min(), 1e-12):
        return (f"latency stayed within {MIN_LATENCY_GROWTH:.0%} of its lowest value: no load "
                "measured has saturated the server yet")
    if np.ptp(y) <= 0:
        return "throughput did not change with load"
    return ""


def _difference(points: Sequence[CurvePoint], index: int) -> float:
    y = np.array([p.throughput for p in points])
    x = np.array([p.latency for p in points])
    return float((y[index] - y.min()) / np.ptp(y) - (x[index] - x.min()) / np.ptp(x))


def _leave_one_out(points: Sequence[CurvePoint], knee_load: float) -> list[bool]:
    """For each step other than the knee: does the knee stay put when that step is dropped?"""
    agree = []
    for i, p in enumerate(points):
        if p.load == knee_load or len(points) < 4:
            continue
        rest = [q for j, q in enumerate(points) if j != i]
        idx = kneedle_index([q.throughput for q in rest], [q.latency for q in rest])
        agree.append(idx is not None and rest[idx].load == knee_load)
    return agree


def _noise_resamples(points: Sequence[CurvePoint], knee_load: float, n: int = 200,
                     seed: int = 0) -> list[bool]:
    """Perturb each step by its standard errors (normal) and refit; empty when none are known."""
    if not any(p.throughput_se or p.latency_se for p in points):
        return []
    rng = np.random.default_rng(seed)
    y = np.array([p.throughput for p in points])
    x = np.array([p.latency for p in points])
    y_se = np.array([p.throughput_se for p in points])
    x_se = np.array([p.latency_se for p in points])
    agree = []
    for _ in range(n):
        idx = kneedle_index(y + rng.normal(0, 1, len(y)) * y_se, x + rng.normal(0, 1, len(x)) * x_se)
        agree.append(idx is not None and points[idx].load == knee_load)
    return agree


def _saturation_seen(points: Sequence[CurvePoint], index: int) -> bool:
    """True when a higher load was measured and gave at most ``SATURATION_GAIN`` more throughput.

    That is the practitioners' knee: more load no longer buys throughput. A knee whose later
    steps still grow throughput is a point of diminishing returns, not (yet) saturation.
    """
    knee = points[index]
    return any(later.throughput <= knee.throughput * (1.0 + SATURATION_GAIN)
               for later in points[index + 1:])


def _not_saturated_reason(points: Sequence[CurvePoint], index: int) -> str:
    """Why saturation was not seen, with the measured gains, so the reason can be checked."""
    knee = points[index]
    later = points[index + 1:]
    if not later or knee.throughput <= 0:
        return ("no load above the knee was measured: saturation not yet seen, the knee may lie "
                "further right")
    gains = ", ".join(f"{p.load:g}: {p.throughput / knee.throughput - 1:+.0%}" for p in later)
    return (f"every load above the knee still gave more than {SATURATION_GAIN:.0%} more "
            f"throughput than the knee ({gains}): saturation not yet seen, the knee may lie "
            "further right")


def find_knee(points: Sequence[CurvePoint], latency_name: str = "latency") -> Knee | None:
    """The knee of a sweep's curve with a stated confidence; None with fewer than three steps.

    ``points`` may come in any order; they are sorted by load. Rules for the confidence label
    (heuristics, stated so users can judge them): *high* needs a Kneedle difference >= 0.2, >= 80%
    of refits agreeing and a measured step past the knee that shows saturation; *medium* needs the
    measured saturation and >= 50% agreement; anything else is *low*.
    """
    pts = sorted(points, key=lambda p: p.load)
    idx = kneedle_index([p.throughput for p in pts], [p.latency for p in pts])
    if idx is None:
        return None
    knee_load = pts[idx].load
    score = _difference(pts, idx)
    refits = _leave_one_out(pts, knee_load) + _noise_resamples(pts, knee_load)
    stability = sum(refits) / len(refits) if refits else 0.0
    past = _saturation_seen(pts, idx)
    reasons = [f"kneedle difference {score:.2f}",
               f"{stability:.0%} of {len(refits)} refits (leave-one-out"
               + (", noise resamples" if len(refits) > len(pts) else "") + ") agree"]
    if not past:
        reasons.append(_not_saturated_reason(pts, idx))
    if past and score >= 0.2 and stability >= 0.8:
        confidence = "high"
    elif past and stability >= 0.5:
        confidence = "medium"
    else:
        confidence = "low"
    return Knee(load=knee_load, index=idx, method=f"{METHOD} ({latency_name})", score=score,
                stability=stability, measured_past=past, confidence=confidence, reasons=reasons)


# --- SLOs ------------------------------------------------------------------------------------

_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt,
}
_SLO_TERM = re.compile(r"^\s*([A-Za-z0-9_.]+)\s*(<=|>=|<|>)\s*([0-9.eE+-]+)\s*$")


@dataclass(frozen=True, slots=True)
class SloTerm:
    metric: str  # a key of a step's metrics, e.g. "ttft_p99_ms"
    op: str
    limit: float

    def holds(self, metrics: Metrics) -> bool:
        value = metrics.get(self.metric)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return False  # not measured cannot count as met
        return _OPS[self.op](float(value), self.limit)

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.limit:g}"


def parse_slo(text: str | None) -> list[SloTerm]:
    """Step terms of an SLO in latscope's one grammar (``latscope.slo``): ``ttft_p99<=500`` is
    judged on the step's p99; a per-request term (``ttft<=500``) on its worst request."""
    from latscope.slo import parse

    return [SloTerm(t.step_key, t.op, t.limit) for t in parse(text)]


def meets_slo(metrics: Metrics, slo: Sequence[SloTerm]) -> bool:
    return all(term.holds(metrics) for term in slo)


def highest_load_meeting(steps: Sequence[tuple[Number, Metrics]],
                         slo: Sequence[SloTerm]) -> tuple[Number | None, bool]:
    """Highest measured load whose metrics meet every SLO term, and whether every lower load did.

    The second value is False when some lower load failed the SLO (a non-monotone curve, usually
    noise): the answer is then less trustworthy and the report says so.
    """
    ordered = sorted(steps, key=lambda s: s[0])
    met = [meets_slo(m, slo) for _, m in ordered]
    best = None
    for (load, _), ok in zip(ordered, met):
        if ok:
            best = load
    if best is None:
        return None, True
    monotone = all(ok for (load, _), ok in zip(ordered, met) if load <= best)
    return best, monotone


def operating_point(knee_load: float, *, backoff: float = 0.10, slo_load: float | None = None,
                    integer: bool = True) -> float:
    """The load to run at: ``backoff`` to the left of the knee, never above the SLO's limit."""
    point = knee_load * (1.0 - backoff)
    if slo_load is not None:
        point = min(point, slo_load)
    if integer:
        point = max(1, math.floor(point))
    return point


def interpolate(points: Sequence[CurvePoint], load: float) -> tuple[float, float] | None:
    """Throughput and latency at ``load`` by linear interpolation between measured steps."""
    pts = sorted(points, key=lambda p: p.load)
    if not pts or load < pts[0].load or load > pts[-1].load:
        return None
    loads = [p.load for p in pts]
    return (float(np.interp(load, loads, [p.throughput for p in pts])),
            float(np.interp(load, loads, [p.latency for p in pts])))

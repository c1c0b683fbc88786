"""Sweep orchestration: measure a server at growing load, stop early, bisect around the knee.

A sweep is a sequence of steps, each one load run (``measure(load) -> Step``) at one concurrency
(closed loop) or request rate (open loop). ``auto`` starts low and grows the load geometrically
until throughput stops growing (at most ``SATURATION_GAIN`` over the best step so far for
``patience`` steps, or a fall of more than ``collapse``), errors pass ``max_error_rate``, a
latency cap is passed or ``max_load`` is reached; then it measures the
geometric midpoints on either side of the Kneedle knee (``refine`` steps), instead of walking a
fixed grid. A list of loads is measured as given, with the same early stops. The caller's
``on_step`` runs after every step so results reach disk as they are gathered.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import msgspec
from msgspec import UnsetType

from latscope.analysis.knee import (
    SATURATION_GAIN,
    CurvePoint,
    Knee,
    Metrics,
    Number,
    SloTerm,
    find_knee,
    highest_load_meeting,
    interpolate,
    operating_point,
)
from latscope.errors import ConfigError
from latscope.runfiles import BenchSummary, Rates

# The latency the knee is read on: p50 E2E covers queueing, prefill and decode of a request.
KNEE_LATENCY = "e2e_p50_ms"
THROUGHPUT = "requests_per_s"


class Step(msgspec.Struct):
    """One measured load: flat metrics (see ``flatten_summary``), where the run lives, and the
    per-step latency decomposition (mean ms per component) when it could be computed."""

    load: Number
    metrics: dict[str, Number | None]
    run_dir: str = ""
    decomposition: dict[str, float] = {}
    stop_reason: str = ""  # why the sweep stopped after this step ("" if it did not)
    phase: str = "grow"  # grow | refine | list | remeasure


def flatten_summary(summary: BenchSummary) -> dict[str, Number | None]:
    """A run's summary as flat keys an SLO can name, e.g. ``ttft_p99_ms``: every value a number
    (or None where the run did not measure it)."""
    flat: dict[str, Number | None] = {}
    for metric, dist in (("ttft", summary.ttft_ms), ("itl", summary.itl_ms),
                         ("tpot", summary.tpot_ms), ("e2e", summary.e2e_ms)):
        for stat, value in dist.items():
            if stat != "count":
                flat[f"{metric}_{stat}_ms"] = value
    # the steady window's rates under their plain names; the overall ones (the drain counted)
    # as overall_*; the window's wording is not a metric
    thr = summary.throughput
    flat.update(_rates(thr))
    if isinstance(thr.overall, Rates):
        flat.update({f"overall_{k}": v for k, v in _rates(thr.overall).items()})
    req = summary.requests
    flat["requests_total"] = req.total
    flat["requests_failed"] = req.failed
    flat["error_rate"] = (req.failed / req.total) if req.total else None
    flat["duration_s"] = summary.duration_s
    return flat


def _rates(rates: Rates) -> dict[str, Number | None]:
    """A throughput's numbers (its window's wording is no metric; a key it lacks is left out)."""
    out: dict[str, Number | None] = {
        "requests_per_s": rates.requests_per_s, "output_tokens_per_s": rates.output_tokens_per_s,
        "total_tokens_per_s": rates.total_tokens_per_s}
    if not isinstance(rates.window_s, UnsetType):
        out["window_s"] = rates.window_s
    if isinstance(rates.window_requests, int):
        out["window_requests"] = rates.window_requests
    return out


def noise_estimates(summary: BenchSummary, metrics: Metrics) -> dict[str, float]:
    """Standard errors of the knee's two numbers, from the spread of E2E within the step.

    Median: 1.2533 * std / sqrt(n) (large-sample normal approximation). Throughput: by Little's
    law X = N / mean(E2E), so its relative error is that of the mean E2E, std / (mean * sqrt(n)).
    Approximations, used only to perturb the curve when judging the knee's stability.
    """
    e2e = summary.e2e_ms
    n, std, mean = e2e.get("count") or 0, e2e.get("std"), e2e.get("mean")
    if n < 2 or not std or not mean:
        return {}
    out = {"e2e_p50_ms_se": 1.2533 * std / math.sqrt(n)}
    throughput = metrics.get(THROUGHPUT)
    if throughput:
        out["requests_per_s_se"] = throughput * std / (mean * math.sqrt(n))
    return out


def curve(steps: Sequence[Step], latency: str = KNEE_LATENCY) -> list[CurvePoint]:
    """The throughput–latency curve of the steps that produced both numbers."""
    pts = []
    for s in steps:
        thr, lat = s.metrics.get(THROUGHPUT), s.metrics.get(latency)
        if thr is not None and lat is not None:
            pts.append(CurvePoint(s.load, float(thr), float(lat),
                                  float(s.metrics.get("requests_per_s_se") or 0.0),
                                  float(s.metrics.get(f"{latency}_se") or 0.0)))
    return pts


@dataclass(slots=True)
class StopRules:
    max_error_rate: float = 0.05
    latency_cap: SloTerm | None = None  # e.g. e2e_p99_ms<=30000: stop once it no longer holds
    max_load: float = 1024
    max_steps: int = 12
    # Consecutive steps without > SATURATION_GAIN more throughput before stopping: one noisy
    # step on a shared machine must not end the sweep ...
    patience: int = 2
    # ... unless throughput fell by more than this share of the best: a collapse, stop at once.
    collapse: float = 0.20


def _stalled_steps(throughputs: Sequence[float]) -> int:
    """How many trailing steps gained at most SATURATION_GAIN over every step before them."""
    count = 0
    for i in range(len(throughputs) - 1, 0, -1):
        if throughputs[i] > max(throughputs[:i]) * (1.0 + SATURATION_GAIN):
            break
        count += 1
    return count


def stop_reason(steps: Sequence[Step], rules: StopRules) -> str:
    """Why to stop after the last step, or "" to go on."""
    last = steps[-1]
    m = last.metrics
    if (m.get("error_rate") or 0.0) > rules.max_error_rate:
        return f"error rate {m['error_rate']:.1%} > {rules.max_error_rate:.0%}"
    if rules.latency_cap is not None and not rules.latency_cap.holds(m):
        return f"latency cap {rules.latency_cap} passed ({m.get(rules.latency_cap.metric)})"
    thr = [s.metrics.get(THROUGHPUT) or 0.0 for s in steps]
    if len(thr) > 1:
        best = max(thr[:-1])
        if thr[-1] < best * (1.0 - rules.collapse):
            return f"throughput fell {1 - thr[-1] / best:.0%} ({thr[-1]:.3g} req/s vs best {best:.3g})"
        stalled = _stalled_steps(thr)
        if stalled >= rules.patience:
            return (f"throughput grew <= {SATURATION_GAIN:.0%} for {stalled} step(s) "
                    f"({thr[-1]:.3g} req/s vs best {max(thr):.3g})")
    if last.load >= rules.max_load:
        return f"max load {rules.max_load:g} reached"
    if len(steps) >= rules.max_steps:
        return f"max steps {rules.max_steps} reached"
    return ""


def _midpoint(lo: float, hi: float, integer: bool) -> float | None:
    mid = math.sqrt(lo * hi)
    if integer:
        mid = round(mid)
        return mid if lo < mid < hi else None
    return mid if hi / lo > 1.1 else None  # rates closer than 10% are within noise of each other


def refine_candidates(steps: Sequence[Step], knee_load: float, integer: bool) -> list[float]:
    """Geometric midpoints between the knee and its measured neighbours, widest gap first."""
    loads = sorted(s.load for s in steps)
    i = loads.index(knee_load)
    gaps = []
    if i > 0:
        gaps.append((loads[i - 1], knee_load))
    if i + 1 < len(loads):
        gaps.append((knee_load, loads[i + 1]))
    gaps.sort(key=lambda g: g[1] / g[0], reverse=True)
    return [m for lo, hi in gaps if (m := _midpoint(lo, hi, integer)) is not None]


def run_sweep(measure: Callable[[float, str], Step], loads: Sequence[float] | None, *,
              start: float = 1, factor: float = 2.0, refine: int = 2, integer: bool = True,
              rules: StopRules | None = None,
              on_step: Callable[[list[Step]], None] = lambda steps: None,
              budget: Callable[[list[Step]], str] | None = None) -> list[Step]:
    """Measure steps (``loads`` as given, or ``auto`` when None) and return them by load.

    ``budget(steps)`` returns why the next step would not fit the caller's time budget ("" if it
    fits); it is asked after every step and before every refinement step."""
    rules = rules or StopRules()
    if factor <= 1 or start <= 0:
        raise ConfigError("sweep growth needs --factor > 1 and --start > 0")
    steps: list[Step] = []

    def take(load: float, phase: str) -> Step:
        step = measure(load, phase)
        step.phase = phase
        steps.append(step)
        return step

    plan = list(loads) if loads else None
    load = plan.pop(0) if plan else start
    while True:
        step = take(load, "list" if loads else "grow")
        step.stop_reason = stop_reason(steps, rules) or (budget(steps) if budget else "")
        on_step(steps)
        if step.stop_reason:
            break
        if plan is not None:
            if not plan:
                break
            load = plan.pop(0)
        else:
            nxt = max(load + 1, round(load * factor)) if integer else load * factor
            load = min(nxt, rules.max_load)
    if loads is None:
        _refine(take, steps, refine, integer, on_step, budget)
    return sorted(steps, key=lambda s: s.load)


def _refine(take: Callable[[float, str], Step], steps: list[Step], count: int, integer: bool,
            on_step: Callable[[list[Step]], None],
            budget: Callable[[list[Step]], str] | None = None) -> None:
    for _ in range(count):
        if budget and budget(steps):
            return
        knee = find_knee(curve(steps))
        if knee is None:
            return
        candidates = [c for c in refine_candidates(steps, knee.load, integer)
                      if c not in {s.load for s in steps}]
        if not candidates:
            return
        take(candidates[0], "refine")
        on_step(steps)


class SweepAnalysis(msgspec.Struct, kw_only=True):
    knee: Knee | None = None
    slo_load: Number | None = None
    slo_monotone: bool = True
    recommended: Number | None = None
    predicted: dict[str, float] | None = None  # interpolated throughput/latency at it
    grows_at_knee: dict[str, float] = {}  # decomposition component -> ms added past the knee
    latency: str = KNEE_LATENCY  # the latency metric the knee was read on


def analyse(steps: Sequence[Step], slo: Sequence[SloTerm], *, backoff: float = 0.10,
            integer: bool = True, latency: str = KNEE_LATENCY) -> SweepAnalysis:
    """Knee, highest load meeting the SLO, the operating point and what grows at the knee."""
    pts = curve(steps, latency)
    knee = find_knee(pts, latency)
    slo_load, monotone = (highest_load_meeting([(s.load, s.metrics) for s in steps], slo)
                          if slo else (None, True))
    recommended = predicted = None
    if knee is not None:
        recommended = operating_point(knee.load, backoff=backoff, slo_load=slo_load, integer=integer)
    elif slo_load is not None:
        recommended = slo_load
    if recommended is not None and (at := interpolate(pts, recommended)):
        predicted = {THROUGHPUT: at[0], latency: at[1]}
    return SweepAnalysis(knee=knee, slo_load=slo_load, slo_monotone=monotone,
                         recommended=recommended, predicted=predicted,
                         grows_at_knee=_growth_past(steps, knee.load) if knee else {},
                         latency=latency)


def _growth_past(steps: Sequence[Step], knee_load: float) -> dict[str, float]:
    """Per decomposition component: mean ms at the first step past the knee minus at the knee."""
    ordered = sorted(steps, key=lambda s: s.load)
    loads = [s.load for s in ordered]
    i = loads.index(knee_load)
    if i + 1 >= len(ordered):
        return {}
    at, past = ordered[i].decomposition, ordered[i + 1].decomposition
    growth = {k: past[k] - at[k] for k in at if k in past
              and isinstance(at[k], (int, float)) and isinstance(past[k], (int, float))}
    return dict(sorted(growth.items(), key=lambda kv: kv[1], reverse=True))

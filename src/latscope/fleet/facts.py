"""Each replica's window as typed facts: the latency histograms (mean with a bootstrap interval,
quantiles with their bucket), the load it carried, its queue, stalls, restarts and settings.

Arithmetic only: ``latscope.findings.fleet`` holds the rules that judge these facts. Every
figure is summed interval by interval (step to step), so a counter reset inside the window (a
restart) loses nothing before it and counts from zero after it, as Prometheus' ``increase``
does; the snapshots may come from Prometheus (``fleet.window``) or from latscope's own scrapes
(``fleet.replicas``) alike.

Intervals: a mean over the window is a ratio of sums (``_sum`` / ``_count`` deltas); its 95%
interval comes from a moving-block bootstrap over the window's step intervals (blocks, because a
queue that builds up makes neighbouring intervals alike), and a ratio of two replicas' means
from the same bootstrap drawn for both.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from latscope.model import MetricSnapshot
from latscope.server.metrics import (
    QuantileEstimate,
    bucket_quantile,
    counter_delta,
    histogram_delta,
    snapshot_value,
)

LATENCY = {"ttft": "vllm:time_to_first_token_seconds", "queue": "vllm:request_queue_time_seconds",
           "prefill": "vllm:request_prefill_time_seconds",
           "itl": "vllm:inter_token_latency_seconds", "e2e": "vllm:e2e_request_latency_seconds",
           "inference": "vllm:request_inference_time_seconds"}
DRAWS = 1000
MIN_INTERVALS = 4  # fewer step intervals give no bootstrap interval
_SEED = 20261206  # fixed: the same window gives the same intervals
# info series that describe requests in flight, not the replica's settings
_NOT_CONFIG = {"vllm:lora_requests_info"}


@dataclass(frozen=True, slots=True)
class Estimate:
    """A figure with its 95% interval (low / high None: too few intervals to draw one)."""

    value: float
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True, slots=True)
class LatencyFacts:
    """One latency histogram of one replica over the window (seconds)."""

    metric: str  # "ttft" | "queue" | ...
    family: str
    count: float
    sum_s: float
    mean: Estimate | None
    p50: QuantileEstimate | None
    p99: QuantileEstimate | None
    # per step interval, for intervals across replicas (the bootstrap of a ratio)
    sums: tuple[float, ...] = ()
    counts: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class TimelinePoint:
    t: float  # unix seconds, the interval's end
    requests_per_s: float | None
    ttft_mean_s: float | None
    queue_mean_s: float | None
    running: float | None
    waiting: float | None
    kv_usage: float | None


@dataclass(frozen=True, slots=True)
class ReplicaFacts:
    name: str
    labels: dict[str, str]
    first_t: float | None  # its first and last snapshot (unix s)
    last_t: float | None
    intervals: int
    vllm: bool  # any vllm:* series at all (not --disable-log-stats)
    latency: dict[str, LatencyFacts] = field(default_factory=dict)
    finished: float | None = None  # requests the replica finished in the window
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    preemptions: float | None = None
    # Little's law over the histograms' sums: mean requests in the queue and in the batch
    mean_waiting: float | None = None
    mean_running: float | None = None
    running_peak: float | None = None
    waiting_peak: float | None = None
    running_peak_queued: float | None = None  # the most that ran in a scrape with a queue
    kv_mean: float | None = None
    kv_peak: float | None = None
    stall_s: float = 0.0  # longest stretch with requests in flight and no token produced
    stall_at: float | None = None
    resets: tuple[float, ...] = ()  # when a counter went down (unix s)
    restarts: tuple[float, ...] = ()  # when process_start_time_seconds changed
    down: tuple[tuple[float, float], ...] = ()  # Prometheus could not scrape it (up == 0)
    config: dict[str, dict[str, str]] = field(default_factory=dict)  # *_info -> its labels
    timeline: tuple[TimelinePoint, ...] = ()

    @property
    def span_s(self) -> float:
        if self.first_t is None or self.last_t is None:
            return 0.0
        return self.last_t - self.first_t

    @property
    def up_s(self) -> float:
        """The span less the stretches Prometheus could not scrape it (a restart, an outage):
        the time it could serve."""
        if self.first_t is None or self.last_t is None:
            return 0.0
        first, last = self.first_t, self.last_t
        down = sum(max(0.0, min(b, last) - max(a, first)) for a, b in self.down)
        return max(0.0, self.span_s - down)

    def rate(self, value: float | None) -> float | None:
        """``value`` per second of the time the replica was up."""
        return value / self.up_s if value is not None and self.up_s > 0 else None


def replica_facts(name: str, labels: dict[str, str], snapshots: list[MetricSnapshot], *,
                  up: Sequence[tuple[float, float]] = (),
                  starts: Sequence[tuple[float, float]] = ()) -> ReplicaFacts:
    """The facts of one replica from its snapshots over the window (in time order)."""
    snaps = sorted(snapshots, key=lambda s: s.t_ns)
    pairs = list(zip(snaps, snaps[1:]))
    base = ReplicaFacts(name, dict(labels), snaps[0].wall_time if snaps else None,
                        snaps[-1].wall_time if snaps else None, len(pairs),
                        any(x.name.startswith("vllm:") for s in snaps for x in s.samples),
                        down=tuple(_down(list(up))), restarts=tuple(_restarts(list(starts))))
    if not pairs:
        return base
    latency = {m: f for m, fam in LATENCY.items() if (f := latency_facts(m, fam, pairs))}
    span = base.span_s
    queue, inference = latency.get("queue"), latency.get("inference")
    stall_s, stall_at = longest_stall(pairs)
    return dataclasses.replace(
        base, latency=latency, finished=window_counter(pairs, "vllm:request_success_total"),
        prompt_tokens=window_counter(pairs, "vllm:prompt_tokens_total"),
        generation_tokens=window_counter(pairs, "vllm:generation_tokens_total"),
        preemptions=window_counter(pairs, "vllm:num_preemptions_total"),
        mean_waiting=queue.sum_s / span if queue and span > 0 else None,
        mean_running=inference.sum_s / span if inference and span > 0 else None,
        **_gauges(snaps), stall_s=stall_s, stall_at=stall_at,
        resets=tuple(counter_resets(pairs)), config=config_labels(snaps[-1]),
        timeline=tuple(timeline(pairs)))


def window_counter(pairs: list[tuple[MetricSnapshot, MetricSnapshot]], name: str) -> float | None:
    """A counter's increase over the window, interval by interval (resets counted from zero)."""
    deltas = [d.delta for a, b in pairs if (d := counter_delta(a, b, name)) is not None]
    return float(sum(deltas)) if deltas else None


def latency_facts(metric: str, family: str, pairs: list[tuple[MetricSnapshot, MetricSnapshot]]
                  ) -> LatencyFacts | None:
    sums: list[float] = []
    counts: list[float] = []
    buckets: dict[float, float] = {}
    for a, b in pairs:
        d = histogram_delta(a, b, family)
        if d is None:
            continue
        sums.append(max(0.0, d.sum))
        counts.append(max(0.0, d.count))
        for le, c in d.buckets:
            buckets[le] = buckets.get(le, 0.0) + max(0.0, c)
    if not counts:
        return None
    total, total_sum = float(sum(counts)), float(sum(sums))
    cumulative = sorted(buckets.items())
    mean = None
    if total > 0:
        low, high = bootstrap_mean(np.array(sums), np.array(counts))
        mean = Estimate(total_sum / total, low, high)
    return LatencyFacts(metric, family, total, total_sum, mean,
                        bucket_quantile(cumulative, 0.5), bucket_quantile(cumulative, 0.99),
                        tuple(sums), tuple(counts))


def _block_indices(n: int, rng: np.random.Generator, draws: int = DRAWS) -> np.ndarray:
    """Moving-block bootstrap: ``draws`` rows of ``n`` interval indices, blocks of ~n^(1/3)."""
    block = max(1, round(n ** (1 / 3)))
    blocks = math.ceil(n / block)
    starts = rng.integers(0, n - block + 1, size=(draws, blocks))
    return (starts[:, :, None] + np.arange(block)).reshape(draws, -1)[:, :n]


def bootstrap_draws(sums: np.ndarray, counts: np.ndarray, seed: int = _SEED) -> np.ndarray | None:
    """The window mean (sum of sums / sum of counts) of each bootstrap draw; None with fewer
    than ``MIN_INTERVALS`` intervals. Draws whose intervals held no observation are NaN."""
    n = len(counts)
    if n < MIN_INTERVALS or counts.sum() <= 0:
        return None
    idx = _block_indices(n, np.random.default_rng(seed))
    s, c = sums[idx].sum(axis=1), counts[idx].sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(c > 0, s / np.where(c > 0, c, 1), np.nan)


def bootstrap_mean(sums: np.ndarray, counts: np.ndarray) -> tuple[float | None, float | None]:
    draws = bootstrap_draws(sums, counts)
    if draws is None or np.isnan(draws).all():
        return None, None
    low, high = np.nanpercentile(draws, [2.5, 97.5])
    return float(low), float(high)


def upper_median(values: np.ndarray, axis: int = 0) -> np.ndarray:
    """The middle value, or the higher of the two middle ones: a slow replica's yardstick that
    one fast outlier cannot lower (the others {15 ms, 139 ms} of ITL are 139 ms, not 77 ms: a
    near-idle replica's quick steps must not make a healthy one look slow)."""
    ordered = np.sort(values, axis=axis)
    return np.take(ordered, ordered.shape[axis] // 2, axis=axis)


def ratio_to_median(replica: LatencyFacts, others: list[LatencyFacts]) -> Estimate | None:
    """The replica's mean over the (upper) median of the others' means, with a 95% interval
    from the same bootstrap drawn for each replica (independent draws)."""
    means = np.array([o.mean.value for o in others if o.mean is not None])
    if replica.mean is None or not means.size or float(upper_median(means)) <= 0:
        return None
    point = replica.mean.value / float(upper_median(means))
    mine = bootstrap_draws(np.array(replica.sums), np.array(replica.counts))
    theirs = [bootstrap_draws(np.array(o.sums), np.array(o.counts), seed=_SEED + 1 + i)
              for i, o in enumerate(others) if o.mean is not None]
    if mine is None or any(t is None for t in theirs):
        return Estimate(point)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = mine / upper_median(np.vstack(theirs), axis=0)  # type: ignore[arg-type]
    ratios = ratios[np.isfinite(ratios)]
    if ratios.size < DRAWS // 2:
        return Estimate(point)
    low, high = np.percentile(ratios, [2.5, 97.5])
    return Estimate(point, float(low), float(high))


def chi2_sf(x: float, df: int) -> float:
    """P(X >= x) for X chi-square with ``df`` degrees of freedom: the regularized upper
    incomplete gamma Q(df/2, x/2), exact for whole and half-whole df/2 (no scipy import: 1-2 s
    of a 2-core box's start for one number)."""
    if x <= 0:
        return 1.0
    half = x / 2
    if df % 2 == 0:  # Q(n, h) = e^-h * sum_{k<n} h^k / k!
        term = total = math.exp(-half)
        for k in range(1, df // 2):
            term *= half / k
            total += term
        return min(1.0, total)
    total = math.erfc(math.sqrt(half))  # Q(1/2, h); then Q(s + 1, h) = Q(s, h) + h^s e^-h / G(s+1)
    s = 0.5
    while s < df / 2:
        total += math.exp(s * math.log(half) - half - math.lgamma(s + 1))
        s += 1
    return min(1.0, total)


def counter_resets(pairs: list[tuple[MetricSnapshot, MetricSnapshot]]) -> list[float]:
    """When a request counter went down (the replica's counters started again from zero)."""
    out = []
    for a, b in pairs:
        for name in ("vllm:request_success_total", "vllm:generation_tokens_total",
                     "vllm:time_to_first_token_seconds_count"):
            d = counter_delta(a, b, name)
            if d is not None and d.reset:
                out.append(b.wall_time)
                break
    return out


def _restarts(starts: list[tuple[float, float]]) -> list[float]:
    return [t for (_, v0), (t, v1) in zip(starts, starts[1:]) if v1 != v0]


def _down(up: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Stretches where Prometheus could not scrape the replica (``up`` 0), first to last."""
    out: list[tuple[float, float]] = []
    start = None
    for t, v in up:
        if v == 0 and start is None:
            start = t
        elif v != 0 and start is not None:
            out.append((start, t))
            start = None
    if start is not None:
        out.append((start, up[-1][0]))
    return out


def longest_stall(pairs: list[tuple[MetricSnapshot, MetricSnapshot]]
                  ) -> tuple[float, float | None]:
    """The longest run of intervals with requests in flight at both ends and no token computed
    (neither prompt nor generation tokens grew): seconds, and when it began."""
    best, best_at, run, run_at = 0.0, None, 0.0, None
    for a, b in pairs:
        busy = all((snapshot_value(s, "vllm:num_requests_running") or 0)
                   + (snapshot_value(s, "vllm:num_requests_waiting") or 0) > 0 for s in (a, b))
        tokens = [counter_delta(a, b, n) for n in ("vllm:generation_tokens_total",
                                                   "vllm:prompt_tokens_total")]
        idle = all(d is not None and d.delta == 0 and not d.reset for d in tokens)
        if busy and idle:
            run_at = a.wall_time if run_at is None else run_at
            run += b.wall_time - a.wall_time
            if run > best:
                best, best_at = run, run_at
        else:
            run, run_at = 0.0, None
    return best, best_at


def _gauges(snaps: list[MetricSnapshot]) -> dict[str, Any]:
    def values(name: str, combine=sum) -> list[float]:
        out = []
        for s in snaps:
            found = [x.value for x in s.samples if x.name == name]
            if found:
                out.append(float(combine(found)))
        return out

    running = values("vllm:num_requests_running")
    waiting = values("vllm:num_requests_waiting")
    kv = values("vllm:kv_cache_usage_perc", max)
    queued = [r for r, w in zip(running, waiting) if w > 0] if len(running) == len(waiting) else []
    return {"running_peak": max(running, default=None), "waiting_peak": max(waiting, default=None),
            "running_peak_queued": max(queued, default=None),
            "kv_mean": float(np.mean(kv)) if kv else None, "kv_peak": max(kv, default=None)}


def config_labels(snapshot: MetricSnapshot) -> dict[str, dict[str, str]]:
    """The settings a replica publishes as ``vllm:*_info`` series (``cache_config_info``...),
    without the labels every series of the replica carries (instance, job, engine, model)."""
    common: set[str] = set()
    for s in snapshot.samples:
        if s.name == "vllm:num_requests_running":
            common |= set(s.labels)
    out: dict[str, dict[str, str]] = {}
    for s in snapshot.samples:
        if s.name.startswith("vllm:") and s.name.endswith("_info") and s.name not in _NOT_CONFIG:
            out.setdefault(s.name, {}).update(
                {k: v for k, v in s.labels.items() if k not in common})
    return out


def timeline(pairs: list[tuple[MetricSnapshot, MetricSnapshot]]) -> list[TimelinePoint]:
    """Per step interval: requests finished per second, TTFT and queue means of the requests
    seen in it, and the gauges at its end (the fleet chart's one line per replica)."""
    out = []
    for a, b in pairs:
        dt = b.wall_time - a.wall_time
        done = counter_delta(a, b, "vllm:request_success_total")
        ttft = histogram_delta(a, b, LATENCY["ttft"])
        queue = histogram_delta(a, b, LATENCY["queue"])
        kv = [x.value for x in b.samples if x.name == "vllm:kv_cache_usage_perc"]
        out.append(TimelinePoint(
            b.wall_time, done.delta / dt if done is not None and dt > 0 else None,
            ttft.mean if ttft is not None else None, queue.mean if queue is not None else None,
            snapshot_value(b, "vllm:num_requests_running"),
            snapshot_value(b, "vllm:num_requests_waiting"), max(kv) if kv else None))
    return out

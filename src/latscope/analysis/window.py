"""A server's window of live traffic, from its ``/metrics`` scrapes alone: every scrape interval's
counter and histogram deltas, and the window's totals.

Pure: a list of ``MetricSnapshot``s in, a typed ``Window`` out (``latscope.analysis.traffic``
reads it into what the traffic was and where it spiked). Nothing here assumes who took the
scrapes: a live passive run, ``watch``, or a Prometheus range query rebuilt as snapshots (exact
step times, no per-scrape latency) give the same answer.

Why deltas and not gauges: ``num_requests_running`` / ``waiting`` are instants. Under a queue that
held 95% of TTFT on a 2-core box, most one-second samples read Waiting 0 (issue #53). Counters and
histogram ``_sum`` / ``_count`` integrate over every request instead; by Little's law the mean
number of requests in a phase over an interval is that phase's histogram ``_sum`` increase divided
by the interval's length (requests that finished in it, each counted with its whole time).

Faults a window survives, each kept in the ``Window`` for the report to say:
- a counter that went down (the server restarted): the interval counts from zero, as Prometheus'
  ``increase`` does (``Interval.reset``);
- a histogram whose ``le`` edges changed between two scrapes (a restart with other
  ``--custom-histogram-buckets``): that interval's count and sum stand, its buckets do not; the
  window's quantiles merge every interval on the edges they share (``bucket_changes``);
- scrapes missing (a timeout, the server gone for a while): an interval that spans the gap,
  longer than the others (``gaps``).
"""

from __future__ import annotations

import math
import statistics
from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field
from typing import Sequence

from latscope.model import MetricSnapshot
from latscope.server.metrics import QuantileEstimate, bucket_quantile, canonical_name

# histogram families read, by short name (vLLM 0.10-0.33; old names are mapped at parse time)
HISTOGRAMS = {
    "ttft": "vllm:time_to_first_token_seconds",
    "queue": "vllm:request_queue_time_seconds",
    "prefill": "vllm:request_prefill_time_seconds",
    "decode": "vllm:request_decode_time_seconds",
    "inference": "vllm:request_inference_time_seconds",
    "e2e": "vllm:e2e_request_latency_seconds",
    "itl": "vllm:inter_token_latency_seconds",
    "tpot": "vllm:request_time_per_output_token_seconds",
    "prompt_len": "vllm:request_prompt_tokens",
    "output_len": "vllm:request_generation_tokens",
    "step_tokens": "vllm:iteration_tokens_total",
}
COUNTERS = {
    "finished": "vllm:request_success_total",
    "prompt_tokens": "vllm:prompt_tokens_total",
    "generation_tokens": "vllm:generation_tokens_total",
    "preemptions": "vllm:num_preemptions_total",
    "prefix_queries": "vllm:prefix_cache_queries_total",
    "prefix_hits": "vllm:prefix_cache_hits_total",
}
GAUGES = {"running": "vllm:num_requests_running", "waiting": "vllm:num_requests_waiting",
          "kv": "vllm:kv_cache_usage_perc"}
# an interval this many times the median one spans scrapes that did not happen
GAP_FACTOR = 2.5
# counters whose fall between two scrapes means the server restarted
_RESET_WITNESSES = ("finished", "prompt_tokens", "generation_tokens")


@dataclass(frozen=True, slots=True)
class Hist:
    """One histogram's observations over an interval or the window (summed over engines).
    ``buckets`` are cumulative ``(le, count)``, +Inf last; None where the edges changed inside
    the interval (count and sum still hold)."""

    count: float
    sum: float
    buckets: tuple[tuple[float, float], ...] | None

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None

    def quantile(self, q: float) -> QuantileEstimate | None:
        return bucket_quantile(list(self.buckets), q) if self.buckets else None


@dataclass(frozen=True, slots=True)
class Interval:
    """What happened between two consecutive scrapes; ``t_s`` / ``end_s`` are seconds after
    the window's first scrape, ``end_wall`` the closing scrape's wall-clock time."""

    start_s: float
    end_s: float
    end_wall: float
    counters: dict[str, float]  # COUNTERS' short names -> increase
    hists: dict[str, Hist]  # HISTOGRAMS' short names -> observations (absent: not served)
    gauges: dict[str, float]  # GAUGES at the closing scrape (running/waiting summed, kv max)
    gauges_before: dict[str, float]  # at the opening scrape
    reset: bool = False  # a counter went down: the server restarted inside this interval
    edges_changed: tuple[str, ...] = ()  # histograms whose le edges changed in it
    gap: bool = False  # much longer than the median interval: scrapes are missing

    @property
    def dt_s(self) -> float:
        return self.end_s - self.start_s

    def mean_in(self, phase: str) -> float | None:
        """Requests in ``phase`` on average over the interval (Little's law: the phase's
        histogram sum increase / the interval's length)."""
        h = self.hists.get(phase)
        return h.sum / self.dt_s if h is not None and self.dt_s > 0 else None

    @property
    def arrivals(self) -> float | None:
        """Requests that arrived: finished + the growth of running + waiting (the gauges are
        exact at the two scrapes, whatever happened between them)."""
        if "finished" not in self.counters or not {"running", "waiting"} <= set(self.gauges) \
                or not {"running", "waiting"} <= set(self.gauges_before):
            return None
        grown = (self.gauges["running"] + self.gauges["waiting"]
                 - self.gauges_before["running"] - self.gauges_before["waiting"])
        return max(0.0, self.counters["finished"] + grown)

    @property
    def idle(self) -> bool:
        """Nothing finished, no token computed, nothing in the server at either end."""
        busy = sum(self.counters.get(k, 0.0) for k in ("finished", "prompt_tokens",
                                                        "generation_tokens"))
        inside = sum(g.get(k, 0.0) for g in (self.gauges, self.gauges_before)
                     for k in ("running", "waiting"))
        return busy == 0 and inside == 0


@dataclass(frozen=True, slots=True)
class Window:
    """The scrapes' intervals and the window's totals."""

    start_wall: float
    end_wall: float
    seconds: float
    scrapes: int
    interval_s: float | None  # the median interval between scrapes
    intervals: tuple[Interval, ...]
    counters: dict[str, float]  # summed over the intervals (resets handled per interval)
    hists: dict[str, Hist]  # merged over the intervals (on the edges they share)
    gauge_max: dict[str, float]  # the largest value each gauge read in any scrape
    has_vllm: bool
    served: tuple[str, ...]  # HISTOGRAMS / COUNTERS short names the server exposes
    resets: tuple[float, ...] = ()  # end_s of intervals with a counter reset
    bucket_changes: tuple[tuple[str, float], ...] = ()  # (family, end_s) where edges changed
    gaps: tuple[tuple[float, float], ...] = ()  # (start_s, end_s) of intervals spanning gaps
    notes: tuple[str, ...] = field(default_factory=tuple)

    def mean_in(self, phase: str) -> float | None:
        h = self.hists.get(phase)
        return h.sum / self.seconds if h is not None and self.seconds > 0 else None


class _Scrape:
    """One snapshot indexed once: counter/gauge values and histogram buckets by short name."""

    def __init__(self, snap: MetricSnapshot) -> None:
        self.t_ns, self.wall = snap.t_ns, snap.wall_time
        values: dict[str, list[float]] = defaultdict(list)
        buckets: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
        vllm = False
        wanted = _WANTED
        for s in snap.samples:
            name = canonical_name(s.name)
            vllm = vllm or name.startswith("vllm:")
            key = wanted.get(name)
            if key is None:
                continue
            if key[1] == "bucket":
                buckets[key[0]][_le(s.labels.get("le", "+Inf"))] += s.value
            else:
                values[f"{key[0]}:{key[1]}"].append(s.value)
        self.vllm = vllm
        self.values = {k: (max(v) if k == "kv:gauge" else sum(v)) for k, v in values.items()}
        self.buckets = {k: dict(v) for k, v in buckets.items()}

    def counter(self, short: str) -> float | None:
        return self.values.get(f"{short}:counter")

    def gauges(self) -> dict[str, float]:
        return {k: v for k in GAUGES if (v := self.values.get(f"{k}:gauge")) is not None}


def _le(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.inf


def _wanted() -> dict[str, tuple[str, str]]:
    out = {name: (short, "counter") for short, name in COUNTERS.items()}
    out.update({name: (short, "gauge") for short, name in GAUGES.items()})
    for short, family in HISTOGRAMS.items():
        out.update({family + "_bucket": (short, "bucket"), family + "_sum": (short, "sum"),
                    family + "_count": (short, "count")})
    return out


_WANTED = _wanted()


_INDEXED: OrderedDict[int, tuple[MetricSnapshot, _Scrape]] = OrderedDict()
_INDEXED_MAX = 256  # a few minutes of watch at 1 s; each holds its snapshot alive


def _indexed(snap: MetricSnapshot) -> _Scrape:
    """A snapshot's index, built once: ``watch`` reads the same scrapes every frame (the last
    minute's), and indexing is most of a window's cost (~1 ms a 50 kB page)."""
    hit = _INDEXED.get(id(snap))
    if hit is not None and hit[0] is snap:
        _INDEXED.move_to_end(id(snap))
        return hit[1]
    scrape = _Scrape(snap)
    _INDEXED[id(snap)] = (snap, scrape)  # the snapshot kept: its id is not reused meanwhile
    if len(_INDEXED) > _INDEXED_MAX:
        _INDEXED.popitem(last=False)
    return scrape


def build_window(snapshots: Sequence[MetricSnapshot]) -> Window:
    """The window of ``snapshots`` (sorted by time here; fewer than two give no interval)."""
    scrapes = [_indexed(s) for s in sorted(snapshots, key=lambda s: s.t_ns)]
    if not scrapes:
        return Window(0.0, 0.0, 0.0, 0, None, (), {}, {}, {}, False, ())
    t0 = scrapes[0].t_ns
    spans = [(b.t_ns - a.t_ns) / 1e9 for a, b in zip(scrapes, scrapes[1:])]
    median = statistics.median(spans) if spans else None
    intervals = tuple(_interval(a, b, t0, median) for a, b in zip(scrapes, scrapes[1:]))
    served = tuple(sorted({k for i in intervals for k in (*i.counters, *i.hists)}))
    return Window(
        start_wall=scrapes[0].wall, end_wall=scrapes[-1].wall,
        seconds=(scrapes[-1].t_ns - t0) / 1e9, scrapes=len(scrapes), interval_s=median,
        intervals=intervals, counters=_sum_counters(intervals), hists=_merge_hists(intervals),
        gauge_max=_gauge_max(scrapes), has_vllm=any(s.vllm for s in scrapes), served=served,
        resets=tuple(i.end_s for i in intervals if i.reset),
        bucket_changes=tuple((canonical_name(HISTOGRAMS[h]), i.end_s) for i in intervals
                             for h in i.edges_changed),
        gaps=tuple((i.start_s, i.end_s) for i in intervals if i.gap))


def _interval(a: _Scrape, b: _Scrape, t0: int, median: float | None) -> Interval:
    reset = any((x := a.counter(k)) is not None and (y := b.counter(k)) is not None and y < x
                for k in _RESET_WITNESSES)
    counters = {}
    for short in COUNTERS:
        end = b.counter(short)
        if end is None:
            continue
        start = 0.0 if reset else (a.counter(short) or 0.0)
        # a single counter that fell while the witnesses did not: its own restart, from zero
        counters[short] = end - start if end >= start else end
    hists, changed = {}, []
    for short in HISTOGRAMS:
        h, edges_changed = _hist_delta(a, b, short, reset)
        if h is not None:
            hists[short] = h
        if edges_changed:
            changed.append(short)
    start_s, end_s = (a.t_ns - t0) / 1e9, (b.t_ns - t0) / 1e9
    gap = median is not None and median > 0 and end_s - start_s > GAP_FACTOR * median
    return Interval(start_s, end_s, b.wall, counters, hists, b.gauges(), a.gauges(), reset,
                    tuple(changed), gap)


def _hist_delta(a: _Scrape, b: _Scrape, short: str, reset: bool) -> tuple[Hist | None, bool]:
    """The interval's observations, and whether the ``le`` edges changed in it. Edges change
    only when the server restarts (vLLM sets them at start): counted from zero the new edges'
    buckets hold; a restart the counters did not show (more observed since than before) leaves
    count and sum, not buckets."""
    end_count, end_sum = b.values.get(f"{short}:count"), b.values.get(f"{short}:sum")
    end_buckets = b.buckets.get(short)
    if end_count is None or end_sum is None or not end_buckets:
        return None, False
    start_count = a.values.get(f"{short}:count") or 0.0
    start_sum = a.values.get(f"{short}:sum") or 0.0
    start_buckets = a.buckets.get(short) or {}
    changed = bool(start_buckets) and set(start_buckets) != set(end_buckets)
    if reset or end_count < start_count:
        start_count, start_sum, start_buckets = 0.0, 0.0, {}
    buckets = None if changed and start_buckets else tuple(
        (le, end_buckets[le] - start_buckets.get(le, 0.0)) for le in sorted(end_buckets))
    return Hist(end_count - start_count, end_sum - start_sum, buckets), changed


def _sum_counters(intervals: Sequence[Interval]) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for i in intervals:
        for k, v in i.counters.items():
            out[k] += v
    return dict(out)


def merge_hists(hists: Sequence[Hist]) -> Hist | None:
    """Several intervals' observations as one: counts and sums add up; buckets are merged on
    the ``le`` edges every interval with buckets shares (cumulative counts at a shared edge
    are comparable; an edge one interval lacks is dropped, widening that bucket: the error
    bound grows, it is never hidden)."""
    if not hists:
        return None
    with_buckets = [h.buckets for h in hists if h.buckets is not None and h.count > 0]
    buckets = None
    if with_buckets:
        shared = set.intersection(*(set(le for le, _ in b) for b in with_buckets))
        totals: dict[float, float] = defaultdict(float)
        for b in with_buckets:
            for le, c in b:
                if le in shared:
                    totals[le] += c
        buckets = tuple(sorted(totals.items()))
    elif any(h.buckets is not None for h in hists):
        first = next(h.buckets for h in hists if h.buckets is not None)
        buckets = tuple((le, 0.0) for le, _ in first or ())
    return Hist(sum(h.count for h in hists), sum(h.sum for h in hists), buckets)


def _merge_hists(intervals: Sequence[Interval]) -> dict[str, Hist]:
    out = {}
    for short in HISTOGRAMS:
        merged = merge_hists([i.hists[short] for i in intervals if short in i.hists])
        if merged is not None:
            out[short] = merged
    return out


def _gauge_max(scrapes: Sequence[_Scrape]) -> dict[str, float]:
    out: dict[str, float] = {}
    for s in scrapes:
        for k, v in s.gauges().items():
            out[k] = max(out.get(k, v), v)
    return out


def sub_window(window: Window, start_s: float, end_s: float) -> list[Interval]:
    """The intervals that end inside ``[start_s, end_s]`` (the last minute of a watch)."""
    return [i for i in window.intervals if start_s < i.end_s <= end_s]


@dataclass(frozen=True, slots=True)
class BucketedQuantile:
    """A quantile with the bucket it lies in, scaled (ms, or tokens): upper None above the top
    finite bucket, the value then only a lower bound. Written as ``{"value", "lower",
    "upper"}``."""

    value: float
    lower: float
    upper: float | None


def bucketed(est: QuantileEstimate | None, scale: float = 1e3) -> BucketedQuantile | None:
    """A histogram's quantile estimate in ms (``scale``) with its bucket."""
    if est is None:
        return None
    upper = None if math.isinf(est.upper) else est.upper * scale
    return BucketedQuantile(est.value * scale, est.lower * scale, upper)

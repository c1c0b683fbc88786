"""What a window's live traffic was and where it spiked: ``window_facts(snapshots) -> WindowFacts``.

Pure, over ``latscope.analysis.window``'s intervals. Definitions (docs/passive.md):

- **arrivals**: per interval, requests finished + the growth of running + waiting (gauges exact
  at the two scrapes); the rate is arrivals / the window's length.
- **size mix**: prompt and output tokens per request from ``vllm:request_prompt_tokens`` /
  ``request_generation_tokens`` (p50 / p99 inside their buckets), else the token counters over
  the requests finished.
- **concurrency**: the mean number of requests in the server, running and queued, by Little's law
  (e2e, inference and queue histogram sums over the window's length), beside the gauges' peaks.
- **bursts**: intervals whose arrivals are at least ``BURST_FACTOR`` x the window's mean per
  interval and 3 standard deviations of a Poisson count above it (mean + 3 sqrt(mean)), so
  that a few requests landing together at a low rate are not called a burst; dispersion =
  variance / mean of arrivals per interval (1 for Poisson arrivals, above 1 bursty).
- **spikes**: runs of consecutive intervals whose mean TTFT is at least ``SPIKE_FACTOR`` x the
  median interval's (over intervals where a first token was served; at least
  ``SPIKE_MIN_INTERVALS`` such intervals), each with what was binding while it lasted.
- **stalls**: runs of intervals with requests in the server at both ends, and no token computed
  and no request finished, ``STALL_MIN_S`` long or more: the engine made no progress.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Sequence

from latscope.analysis.window import (
    BucketedQuantile,
    Hist,
    Interval,
    Window,
    bucketed,
    build_window,
    merge_hists,
)
from latscope.model import MetricSnapshot

# 3x, not 2x: a healthy CPU server at 2 req/s had one 1 s interval at 2.0x the median (four
# requests landing together), and nothing bound it
SPIKE_FACTOR = 3.0
SPIKE_MIN_INTERVALS = 4
BURST_FACTOR = 2.0
STALL_MIN_S = 5.0
KV_FULL = 0.90  # findings.server.KV_SATURATED: the KV cache is full from here
GPU_BUSY = 0.90  # the GPUs' busy share from which a spike's GPU is called binding
LATENCIES = ("ttft", "queue", "prefill", "decode", "e2e", "itl", "tpot")


@dataclass(frozen=True, slots=True)
class Latency:
    """One latency over the window: the exact mean (sum / count) and p50 / p99 inside buckets."""

    name: str
    family: str
    count: float
    mean_ms: float | None
    p50: BucketedQuantile | None  # in ms
    p99: BucketedQuantile | None
    smallest_bucket_ms: float | None  # the first finite edge: below it only the mean says


@dataclass(frozen=True, slots=True)
class Split:
    """Where the server's mean TTFT went (frontend arrival -> first token): queue, prefill and
    the rest (tokenization, IPC, output processing), exact means over the window."""

    ttft_ms: float
    queue_ms: float | None
    prefill_ms: float | None
    other_ms: float | None
    ttft_count: float
    phase_count: float | None  # requests the queue / prefill histograms counted

    def parts(self) -> list[tuple[str, float]]:
        return [(k, v) for k, v in (("queue", self.queue_ms), ("prefill", self.prefill_ms),
                                    ("other", self.other_ms)) if v is not None]


@dataclass(frozen=True, slots=True)
class Traffic:
    finished: float
    arrivals: float | None
    arrival_rps: float | None
    finished_rps: float | None
    peak_arrival_rps: float | None
    dispersion: float | None  # variance / mean of arrivals per interval
    bursts: int
    prompt_tokens_mean: float | None
    prompt_tokens_p50: BucketedQuantile | None  # in tokens
    prompt_tokens_p99: BucketedQuantile | None
    output_tokens_mean: float | None
    output_tokens_p50: BucketedQuantile | None
    output_tokens_p99: BucketedQuantile | None
    prompt_tps: float | None
    generation_tps: float | None
    prefix_hit_rate: float | None
    in_server_mean: float | None  # Little's law: e2e sum / window
    running_mean: float | None  # inference (scheduled -> last token) sum / window
    waiting_mean: float | None  # queue sum / window
    running_max: float | None
    waiting_max: float | None
    kv_max: float | None
    preemptions: float


@dataclass(frozen=True, slots=True)
class Spike:
    start_s: float
    end_s: float
    ttft_mean_ms: float
    ttft_p99: BucketedQuantile | None
    queue_share: float | None  # the spike's mean queue time / its mean TTFT
    waiting_max: float | None
    waiting_mean: float | None  # Little's law over the spike
    running_max: float | None
    kv_max: float | None
    preemptions: float
    arrival_rps: float | None
    binding: tuple[str, ...]  # what held requests back while it lasted, in words
    gpu_busy: float | None = None  # the server's GPUs, mean busy share while it lasted


@dataclass(frozen=True, slots=True)
class Stall:
    start_s: float
    end_s: float
    in_server: float  # running + waiting at its start

    @property
    def seconds(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True, slots=True)
class WindowFacts:
    """Everything the traffic rules read, and the report shows, about one window."""

    label: str
    window: Window
    traffic: Traffic
    latency: dict[str, Latency]
    split: Split | None
    spikes: tuple[Spike, ...]
    stalls: tuple[Stall, ...]
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def has_traffic(self) -> bool:
        t = self.traffic
        return t.finished > 0 or (self.window.counters.get("prompt_tokens") or 0) > 0 \
            or (self.window.counters.get("generation_tokens") or 0) > 0

    @property
    def budget_use(self) -> float | None:
        """The mean engine step's tokens over the token budget (``findings.server.budget_use``'s
        definition), over the window."""
        h = self.window.hists.get("step_tokens")
        mbt = self.max_num_batched_tokens
        if h is None or not mbt or h.count <= 0:
            return None
        return min(1.0, max(0.0, h.sum / (h.count * mbt)))


def window_facts(snapshots: Sequence[MetricSnapshot], *, label: str = "",
                 max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None,
                 gpu_util: Sequence[tuple[float, float]] = ()) -> WindowFacts:
    """The window of ``snapshots``, read. ``label`` names it in findings ("the last 30 s of
    live traffic"); the limits, when known (command line, log), and the server's GPUs' busy
    share (``(wall_time, util_pct)`` samples, this host only) name what was binding."""
    window = build_window(snapshots)
    label = label or f"the last {_duration(window.seconds)} of live traffic"
    latency = {k: _latency(k, window.hists[k]) for k in LATENCIES if k in window.hists}
    spikes = _spikes(window, _Limits(max_num_seqs, max_num_batched_tokens, tuple(gpu_util)))
    return WindowFacts(label, window, _traffic(window), latency, _split(window), spikes,
                       _stalls(window), max_num_seqs, max_num_batched_tokens, _notes(window))


def _duration(seconds: float) -> str:
    if seconds >= 90:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def _latency(name: str, h: Hist) -> Latency:
    from latscope.analysis.window import HISTOGRAMS

    edges = [le for le, _ in h.buckets or () if le != float("inf")]
    return Latency(name, HISTOGRAMS[name], h.count, h.mean * 1e3 if h.mean is not None else None,
                   bucketed(h.quantile(0.5)), bucketed(h.quantile(0.99)),
                   edges[0] * 1e3 if edges else None)


def _split(window: Window) -> Split | None:
    h = window.hists
    ttft = h.get("ttft")
    if ttft is None or not ttft.mean:
        return None
    queue, prefill = h.get("queue"), h.get("prefill")
    q = queue.mean * 1e3 if queue is not None and queue.mean is not None else None
    p = prefill.mean * 1e3 if prefill is not None and prefill.mean is not None else None
    total = ttft.mean * 1e3
    other = total - q - p if q is not None and p is not None else None
    return Split(total, q, p, other, ttft.count, queue.count if queue is not None else None)


def _traffic(window: Window) -> Traffic:
    c, secs, intervals = window.counters, window.seconds, window.intervals
    finished = c.get("finished", 0.0)
    arrivals = [a for i in intervals if (a := i.arrivals) is not None]
    rates = [a / i.dt_s for i in intervals if (a := i.arrivals) is not None and i.dt_s > 0]
    bursts = _bursts(intervals, sum(arrivals) / secs if arrivals and secs > 0 else 0.0)
    prompt, output = window.hists.get("prompt_len"), window.hists.get("output_len")
    queries = c.get("prefix_queries")
    return Traffic(
        finished=finished, arrivals=sum(arrivals) if arrivals else None,
        arrival_rps=sum(arrivals) / secs if arrivals and secs > 0 else None,
        finished_rps=finished / secs if secs > 0 else None,
        peak_arrival_rps=max(rates) if rates else None, dispersion=_dispersion(arrivals),
        bursts=bursts,
        prompt_tokens_mean=_per_request(prompt, c.get("prompt_tokens"), finished),
        prompt_tokens_p50=_tokens(prompt, 0.5), prompt_tokens_p99=_tokens(prompt, 0.99),
        output_tokens_mean=_per_request(output, c.get("generation_tokens"), finished),
        output_tokens_p50=_tokens(output, 0.5), output_tokens_p99=_tokens(output, 0.99),
        prompt_tps=_rate(c.get("prompt_tokens"), secs),
        generation_tps=_rate(c.get("generation_tokens"), secs),
        prefix_hit_rate=(c.get("prefix_hits", 0.0) / queries if queries else None),
        in_server_mean=window.mean_in("e2e"), running_mean=window.mean_in("inference"),
        waiting_mean=window.mean_in("queue"), running_max=window.gauge_max.get("running"),
        waiting_max=window.gauge_max.get("waiting"), kv_max=window.gauge_max.get("kv"),
        preemptions=c.get("preemptions", 0.0))


def _rate(value: float | None, seconds: float) -> float | None:
    return value / seconds if value is not None and seconds > 0 else None


def _per_request(h: Hist | None, counted: float | None, finished: float) -> float | None:
    if h is not None and h.count > 0:
        return h.sum / h.count
    return counted / finished if counted is not None and finished > 0 else None


def _tokens(h: Hist | None, q: float) -> BucketedQuantile | None:
    return bucketed(h.quantile(q), scale=1.0) if h is not None else None


def _bursts(intervals: Sequence[Interval], rate: float) -> int:
    count = 0
    for i in intervals:
        expected = rate * i.dt_s
        if (a := i.arrivals) is not None and expected > 0 \
                and a >= max(BURST_FACTOR * expected, expected + 3 * expected ** 0.5):
            count += 1
    return count


def _dispersion(arrivals: list[float]) -> float | None:
    if len(arrivals) < 3:
        return None
    mean = statistics.fmean(arrivals)
    return statistics.pvariance(arrivals) / mean if mean > 0 else None


@dataclass(frozen=True, slots=True)
class _Limits:
    """What a spike's binding is read against."""

    max_num_seqs: int | None
    mbt: int | None
    gpu_util: tuple[tuple[float, float], ...]
    arrival_rate: float = 0.0  # the window's, per second


def _spikes(window: Window, limits: _Limits) -> tuple[Spike, ...]:
    served = [i for i in window.intervals if (h := i.hists.get("ttft")) and h.count > 0]
    if len(served) < SPIKE_MIN_INTERVALS:
        return ()
    median = statistics.median(i.hists["ttft"].sum / i.hists["ttft"].count for i in served)
    high = {id(i) for i in served
            if i.hists["ttft"].sum / i.hists["ttft"].count >= SPIKE_FACTOR * median}
    runs: list[list[Interval]] = []
    for i in window.intervals:
        if id(i) in high:
            if runs and runs[-1][-1].end_s == i.start_s:
                runs[-1].append(i)
            else:
                runs.append([i])
    arrivals = [a for i in window.intervals if (a := i.arrivals) is not None]
    rate = sum(arrivals) / window.seconds if arrivals and window.seconds > 0 else 0.0
    limits = _Limits(limits.max_num_seqs, limits.mbt, limits.gpu_util, rate)
    return tuple(_spike(run, limits) for run in runs)


def _spike(run: list[Interval], limits: _Limits) -> Spike:
    ttft = merge_hists([i.hists["ttft"] for i in run if "ttft" in i.hists])
    queue = merge_hists([i.hists["queue"] for i in run if "queue" in i.hists])
    steps = merge_hists([i.hists["step_tokens"] for i in run if "step_tokens" in i.hists])
    seconds = run[-1].end_s - run[0].start_s
    gauges = [g for i in run for g in (i.gauges_before, i.gauges)]
    peak = {k: max((g[k] for g in gauges if k in g), default=None)
            for k in ("running", "waiting", "kv")}
    preempted = sum(i.counters.get("preemptions", 0.0) for i in run)
    arrived = [a for i in run if (a := i.arrivals) is not None]
    assert ttft is not None and ttft.mean is not None  # a spike is made of served intervals
    queue_share = queue.mean / ttft.mean if queue is not None and queue.mean is not None \
        and ttft.mean > 0 else None
    spike = Spike(run[0].start_s, run[-1].end_s, ttft.mean * 1e3,
                  bucketed(ttft.quantile(0.99)), queue_share, peak["waiting"],
                  queue.sum / seconds if queue is not None and seconds > 0 else None,
                  peak["running"], peak["kv"], preempted,
                  sum(arrived) / seconds if arrived and seconds > 0 else None, (),
                  _gpu_busy(limits.gpu_util, run[0].end_wall - run[0].dt_s, run[-1].end_wall))
    binding = _binding(spike, limits, steps, limits.arrival_rate * seconds)
    return Spike(**{**{k: getattr(spike, k) for k in spike.__slots__}, "binding": binding})


def _gpu_busy(samples: Sequence[tuple[float, float]], start: float, end: float) -> float | None:
    """The GPUs' mean busy share (0-1) over ``[start, end]`` (wall clock), None without a
    sample in it."""
    inside = [util for wall, util in samples if start <= wall <= end]
    return sum(inside) / len(inside) / 100 if inside else None


def _binding(s: Spike, limits: _Limits, steps: Hist | None, usual_arrivals: float
             ) -> tuple[str, ...]:
    max_num_seqs, mbt = limits.max_num_seqs, limits.mbt
    out = []
    if max_num_seqs is not None and s.running_max is not None and s.running_max >= max_num_seqs:
        out.append(f"max_num_seqs (Running {s.running_max:g} = {max_num_seqs})")
    if s.kv_max is not None and s.kv_max >= KV_FULL:
        out.append(f"the KV cache ({s.kv_max:.0%} used)")
    if s.preemptions > 0:
        out.append(f"{s.preemptions:g} preemptions")
    if mbt and steps is not None and steps.count > 0 and steps.sum / (steps.count * mbt) >= 0.7:
        out.append(f"the token budget (steps use {steps.sum / (steps.count * mbt):.0%} of "
                   f"{mbt})")
    if s.gpu_busy is not None and s.gpu_busy >= GPU_BUSY:
        out.append(f"the GPU busy ({s.gpu_busy:.0%} of the time)")
    seconds = s.end_s - s.start_s
    if s.arrival_rps is not None and usual_arrivals > 0 \
            and s.arrival_rps * seconds >= BURST_FACTOR * usual_arrivals:
        out.append(f"a burst of arrivals ({s.arrival_rps:.1f} req/s, "
                   f"{s.arrival_rps * seconds / usual_arrivals:.1f}x the usual)")
    return tuple(out)


def _stalls(window: Window) -> tuple[Stall, ...]:
    out: list[list[Interval]] = []
    run: list[Interval] = []
    for i in window.intervals:
        inside = [g.get("running", 0.0) + g.get("waiting", 0.0)
                  for g in (i.gauges_before, i.gauges)]
        produced = sum(i.counters.get(k, 0.0) for k in ("finished", "prompt_tokens",
                                                         "generation_tokens"))
        stalled = min(inside) > 0 and produced == 0 and "generation_tokens" in i.counters
        if stalled and (not run or run[-1].end_s == i.start_s):
            run.append(i)
            continue
        if run:
            out.append(run)
        run = [i] if stalled else []
    if run:
        out.append(run)
    return tuple(Stall(r[0].start_s, r[-1].end_s,
                       r[0].gauges_before.get("running", 0.0)
                       + r[0].gauges_before.get("waiting", 0.0))
                 for r in out if r[-1].end_s - r[0].start_s >= STALL_MIN_S)


def _notes(window: Window) -> tuple[str, ...]:
    out = []
    for t in window.resets:
        out.append(f"a counter went down in the interval ending at {t:.1f} s: the server "
                   "restarted; that interval counts from zero (as Prometheus' increase does)")
    families = sorted({f for f, _ in window.bucket_changes})
    if families:
        out.append(f"bucket edges changed between scrapes ({', '.join(families)}): those "
                   "intervals' counts and sums are kept, their quantiles merged on the edges "
                   "the scrapes share (wider buckets, a larger error bound)")
    for start, end in window.gaps:
        out.append(f"no scrape from {start:.1f} s to {end:.1f} s (the median interval is "
                   f"{window.interval_s or 0:.1f} s): what happened inside is summed, not seen")
    return tuple(out)

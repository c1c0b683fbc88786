"""``latscope watch URL``: the server's live numbers every scrape, until Ctrl-C, from what it does
anyway (no request to an inference endpoint). Each frame is the last scrape interval read from
the histograms' and counters' deltas (``analysis.window``), the GPUs when the server is on this
host, and the top finding of the last minute (``campaign.passive.conclude_window`` over its
scrapes). The run directory is a passive run's: Ctrl-C (or SIGTERM, or ``--duration``) ends
it, and ``diagnose --replay`` reads it like one.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from latscope.analysis.traffic import window_facts
from latscope.analysis.window import Interval, bucketed, build_window
from latscope.campaign.passive import conclude_window
from latscope.model import MetricSnapshot, RunContext
from latscope.rundir import RunDir
from latscope.server.scrape import MetricsScraper

LAST_MINUTE_S = 60.0
WATCH_FOREVER_S = 7 * 24 * 3600.0


@dataclass
class WatchOptions:
    url: str
    interval_s: float = 2.0
    duration_s: float | None = None  # None: until Ctrl-C
    log: str | None = None
    output_dir: str | None = None
    api_key: str | None = None
    gpu_telemetry: bool | None = None
    argv: list[str] | None = None


@dataclass(frozen=True, slots=True)
class GpuNow:
    """The server's GPUs at the last telemetry sample (this host only): the busiest's figures."""

    gpus: int
    util_pct: float | None
    mem_used_pct: float | None


@dataclass(frozen=True)
class Frame:
    """What one refresh shows: the last interval's numbers, the gauges, the GPU, the top finding
    of the last minute and the scrape's own cost."""

    t_s: float  # since the watch began
    wall_time: float
    interval: Interval | None
    latency: dict[str, dict[str, Any]]  # ttft / itl / e2e / queue -> mean_ms, p50, p99
    split: dict[str, float]  # queue / prefill / other -> share of the interval's mean TTFT
    gpu: GpuNow | None
    top: str  # the last minute's top finding, or "nothing to act on"
    scrape_ms: float | None
    page_kb: float | None
    scrapes: int
    failures: int
    has_vllm: bool
    extra: dict[str, Any] = field(default_factory=dict)


def frame_of(snapshots: list[MetricSnapshot], *, start_wall: float, failures: int = 0,
             gpu: GpuNow | None = None, max_num_seqs: int | None = None,
             scrapes: int | None = None) -> Frame:
    """A frame from the scrapes so far (pure: ``watch``'s tests feed it recorded pages)."""
    last = snapshots[-1] if snapshots else None
    pair = build_window(snapshots[-2:]) if len(snapshots) >= 2 else None
    interval = pair.intervals[0] if pair is not None and pair.intervals else None
    latency = {}
    if interval is not None:
        for name in ("ttft", "itl", "e2e", "queue"):
            h = interval.hists.get(name)
            if h is not None and h.count > 0:
                p50, p99 = bucketed(h.quantile(0.5)), bucketed(h.quantile(0.99))
                latency[name] = {"count": h.count, "mean_ms": (h.mean or 0) * 1e3,
                                 "p50": asdict(p50) if p50 else None,
                                 "p99": asdict(p99) if p99 else None}
    return Frame(
        t_s=(last.wall_time - start_wall) if last else 0.0,
        wall_time=last.wall_time if last else time.time(), interval=interval,
        latency=latency, split=_split(interval), gpu=gpu,
        top=_top(snapshots, max_num_seqs), scrape_ms=last.scrape_ms if last else None,
        page_kb=None, scrapes=scrapes if scrapes is not None else len(snapshots),
        failures=failures,
        has_vllm=bool(pair and pair.has_vllm))


def _split(interval: Interval | None) -> dict[str, float]:
    if interval is None:
        return {}
    ttft = interval.hists.get("ttft")
    if ttft is None or not ttft.mean:
        return {}
    out = {}
    parts = {k: h.mean for k in ("queue", "prefill") if (h := interval.hists.get(k))
             and h.mean is not None}
    out.update({k: min(1.0, v / ttft.mean) for k, v in parts.items()})
    if len(parts) == 2:
        out["other"] = max(0.0, 1.0 - sum(out.values()))
    return out


def _top(snapshots: list[MetricSnapshot], max_num_seqs: int | None) -> str:
    """The top finding to act on over the last minute's scrapes, in one line."""
    if len(snapshots) < 3:
        return "(the last minute's finding needs three scrapes)"
    end = snapshots[-1].wall_time
    minute = [s for s in snapshots if s.wall_time >= end - LAST_MINUTE_S]
    facts = window_facts(minute, label="the last minute")
    if not facts.has_traffic:
        return "no traffic in the last minute"
    c = conclude_window(minute, label="the last minute", max_num_seqs=max_num_seqs)
    acting = [f for f in c.ranked if f.severity.value in ("critical", "warning")]
    if not acting:
        return "nothing to act on in the last minute"
    f = acting[0]
    impact = f.impact or {}
    # a cause that took a symptom's share: its title does not say the share, the impact does
    share = f" ({impact['share']:.0%} of mean server TTFT)" if impact.get("explains") else ""
    return f"{f.severity.value.upper()} {f.title}{share}"


def watch(opts: WatchOptions, show: Callable[[Frame], None]) -> dict[str, Any]:
    """Scrape until Ctrl-C (or ``duration_s``), ``show`` a frame after each scrape; then the
    run directory is concluded as a passive run's and its report returned."""
    from latscope.campaign.listen import finish_passive, parse_followed_log, window_observers
    from latscope.campaign.state import StageRecord
    from latscope.campaign.watching import hold_window

    state = _watch_run(opts)
    # the frames read the last minute: two of them in memory, every scrape on disk
    scraper = MetricsScraper(interval_s=opts.interval_s, parse_during_run=True,
                             keep_last=int(2 * LAST_MINUTE_S / opts.interval_s) + 2)
    headers = {"authorization": f"Bearer {opts.api_key}"} if opts.api_key else {}
    ctx = RunContext(opts.url.rstrip("/").removesuffix("/v1"), state.run.path, headers,
                     time.perf_counter_ns(), time.time())
    observers = window_observers(state)
    ticker = _Ticker(scraper, observers, ctx.start_wall, show, state.follower)
    record = StageRecord("window")
    t0 = time.monotonic()
    try:
        ended = asyncio.run(hold_window(scraper, observers, ctx,
                                        opts.duration_s or WATCH_FOREVER_S,
                                        give_up_s=WATCH_FOREVER_S, on_tick=ticker.tick))
        record.note = ended or f"{scraper.scrapes} scrapes"
    except KeyboardInterrupt:  # the way a watch ends: its window is whole, the run is ok
        record.note = f"ended by Ctrl-C or SIGTERM after {scraper.scrapes} scrapes"
    finally:
        record.seconds = round(time.monotonic() - t0, 1)
        state.stages.append(record)
        state.sent["GET /metrics"] += scraper.scrapes + scraper.failures
        if opts.log:
            state.stages.append(StageRecord("log", note=parse_followed_log(state)))
        ok = scraper.scrapes >= 2
        if not ok:
            record.status = "failed"
        report = finish_passive(state, "ok" if ok else
                                f"failed: {scraper.scrapes} /metrics scrape(s) read")
    return report


def _watch_run(opts: WatchOptions) -> Any:
    """The watch's run directory (a passive run's, ``via: watch``) and its state."""
    from latscope.campaign.listen import PassiveOptions, PassiveRun
    from latscope.campaign.stages import _same_host
    from latscope.redact import redact_url_password

    run = RunDir.create("watch", opts.output_dir, argv=opts.argv,
                        target={"url": redact_url_password(opts.url), "local": False,
                                "controlled": False},
                        passive={"scrape_s": opts.interval_s, "load_sent": False,
                                 "requests_sent": {}, "via": "watch"})
    popts = PassiveOptions(url=opts.url, scrape_s=opts.interval_s, log=opts.log,
                           api_key=opts.api_key, gpu_telemetry=opts.gpu_telemetry)
    return PassiveRun(popts, run, lambda _: None, same_host=_same_host(opts.url))


class _Ticker:
    """Calls ``show`` once per new scrape (from the window's quarter-second tick)."""

    def __init__(self, scraper: MetricsScraper, observers: list[Any], start_wall: float,
                 show: Callable[[Frame], None], follower: Any = None) -> None:
        self.scraper, self.observers, self.start_wall, self.show = (scraper, observers,
                                                                    start_wall, show)
        self.follower = follower
        self.seen = 0
        self.max_num_seqs: int | None = None

    def tick(self) -> None:
        snaps = self.scraper.snapshots
        failures = self.scraper.failures
        if self.scraper.scrapes + failures == self.seen:
            return
        self.seen = self.scraper.scrapes + failures
        if self.max_num_seqs is None and self.follower is not None:  # its head is read at start
            self.max_num_seqs = _cap_of(self.follower)
        frame = frame_of(list(snaps), start_wall=self.start_wall, failures=failures,
                         gpu=_gpu_now(self.observers), max_num_seqs=self.max_num_seqs,
                         scrapes=self.scraper.scrapes)
        log = self.scraper.failure_log
        if log and (not snaps or log[-1].wall_time > snaps[-1].wall_time):
            frame.extra["last_error"] = log[-1].error  # the last scrape failed: say why
        self.show(frame)


def _cap_of(follower: Any) -> int | None:
    """max_num_seqs from the followed log's head (read once the window has started)."""
    from latscope.findings.server import effective_max_num_seqs

    return None if follower.head is None else effective_max_num_seqs(follower.head)[0]


def _gpu_now(observers: list[Any]) -> GpuNow | None:
    from latscope.telemetry.sampler import TelemetrySampler

    sampler = next((o for o in observers if isinstance(o, TelemetrySampler)), None)
    if sampler is None or not sampler.samples:
        return None
    latest = sampler.samples[-1].t_ns
    now = [s for s in sampler.samples if s.t_ns == latest]
    util = [s.util_pct for s in now if s.util_pct is not None]
    mem = [100 * s.mem_used_bytes / s.mem_total_bytes for s in now
           if s.mem_total_bytes and s.mem_used_bytes is not None]
    return GpuNow(len(now), max(util) if util else None, max(mem) if mem else None)

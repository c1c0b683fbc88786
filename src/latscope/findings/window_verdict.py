"""The verdict of a window of live traffic: the one verdict every diagnose gives
(``findings.verdict``), over the window's ranked findings, said about the real traffic, with
what could not be measured without load.

    "Over the last 30 s of live traffic, 95% of mean server TTFT is queueing. The cause: ...
     Over those 30 s: 360 requests (12.0 req/s arriving, 3.1 finished), server TTFT p99 9.8 s
     [7.5-10.0 s]. Not measured without load: the knee. The server ran at mean 1.9 running of
     max_num_seqs 2, KV cache peak 4%; `latscope diagnose` with load on a staging replica finds
     how far that is from its limits."

A window that saw no traffic, or no scrape it could read, gets no verdict and says why.
"""

from __future__ import annotations

from typing import Any

from msgspec.structs import replace

from latscope.analysis.spanwindow import SpanWindow
from latscope.analysis.traffic import WindowFacts
from latscope.analysis.window import BucketedQuantile
from latscope.findings.causes import ACTING
from latscope.findings.traffic import covers
from latscope.findings.verdict import HealthySplit, VerdictInputs, at_words, no_verdict, verdict
from latscope.model import Finding
from latscope.results import Verdict

STALL = "server.stall"
_PARTS = {"queue": "queue", "prefill": "prefill", "other": "tokenization + IPC + output"}
# arrivals above completions by this much over the window: the queue grew
QUEUE_GREW = 1.1
BUDGET_SHOWN = 0.1  # the budget's use is named in the operating point from this share on


def verdict_of_window(ranked: list[Finding], facts: WindowFacts,
                      spans: SpanWindow | None = None) -> Verdict:
    w = facts.window
    if w.scrapes < 2:
        return no_verdict(f"No verdict: {w.scrapes} /metrics scrape(s) could be read, a "
                          "window needs two (see the scrape notes for why)")
    if not w.has_vllm:
        return _stats_disabled(ranked, facts, spans)
    if not facts.has_traffic:
        return no_verdict(f"No traffic: the server finished no request and computed no token "
                          f"over {facts.label.removeprefix('the ')} ({w.scrapes} scrapes): "
                          "nothing to diagnose, no verdict")
    split = spans.split if spans is not None and covers(spans, facts) else facts.split
    stall = next((f for f in ranked if f.id == STALL and f.severity in ACTING), None)
    # a stall first: the requests caught in it have not finished, so no histogram holds their
    # wait and no share can be measured; every other figure of the window is beside it
    result = (_stall_verdict(stall) if stall is not None
              else verdict(ranked, VerdictInputs(healthy=_healthy(facts, split))))
    return replace(result, text=f"{result.text}. {traffic_words(facts, spans)}. "
                                f"{unmeasured_words(facts)}")


def _stall_verdict(f: Finding) -> Verdict:
    return Verdict(text=f"{f.title}: the requests in it had not finished, so no latency "
                        "histogram holds their wait yet", kind="cause", finding_id=f.id,
                   healthy=False, severity=f.severity.value)


def _stats_disabled(ranked: list[Finding], facts: WindowFacts,
                    spans: SpanWindow | None) -> Verdict:
    """--disable-log-stats: no vllm:* series. What remains (doctor, the log, spans) may still
    name a cause; the queue, prefill and the server's TTFT cannot be seen from /metrics."""
    split = spans.split if spans is not None else None
    healthy = _healthy(facts, split) if split else None
    result = verdict(ranked, VerdictInputs(healthy=healthy))
    unseen = ("the server exposes no vllm:* series (started with --disable-log-stats): its "
              "queue, batch, KV cache and TTFT over the window could not be seen"
              + ("" if spans else " (spans, --otlp-listen, would show each request's)"))
    if result.kind == "none":
        return no_verdict(f"No verdict: {unseen}; doctor's checks and the log found no fault")
    return replace(result, text=f"{result.text}. Not seen: {unseen}")


def _healthy(facts: WindowFacts, split: Any) -> HealthySplit | None:
    if split is None or not split.ttft_ms:
        return None
    total = split.ttft_ms
    # a part under half a percent says nothing in a verdict ("queue 0%")
    parts = sorted(((_PARTS[k], v) for k, v in split.parts() if 0.005 * total <= v <= total),
                   key=lambda p: -p[1])
    return HealthySplit(facts.label, total,
                        ", ".join(f"{name} {v / total:.0%}" for name, v in parts) or "not split",
                        facts.traffic.finished_rps or 0.0)


def ms_words(q: BucketedQuantile | None) -> str:
    """A bucketed quantile in words, with its bucket as the error bound: ``466 ms [250-500]``,
    ``<= 300 ms`` in the first bucket, ``> 2560 s`` above the top one."""
    if not q:
        return "n/a"
    if q.upper is None:
        return f"> {_ms(q.lower)}"
    if not q.lower:
        return f"<= {_ms(q.upper)}"
    return f"{_ms(q.value)} [{_ms(q.lower, unit=False)}-{_ms(q.upper)}]"


def _ms(value: float, unit: bool = True) -> str:
    if value >= 1000:
        return f"{value / 1000:.3g}" + (" s" if unit else "")
    return f"{value:.3g}" + (" ms" if unit else "")


def traffic_words(facts: WindowFacts, spans: SpanWindow | None = None) -> str:
    t = facts.traffic
    rates = (f"{t.arrival_rps:.2g} req/s arriving, {t.finished_rps or 0:.2g} finished"
             if t.arrival_rps is not None else f"{t.finished_rps or 0:.2g} req/s finished")
    if t.bursts:
        rates += f", {t.bursts} burst interval{'s' if t.bursts > 1 else ''}"
    ttft = _ttft_tail(facts, spans)
    text = f"In that window: {t.finished:g} requests ({rates}){ttft}"
    if facts.spikes:
        worst = max(facts.spikes, key=lambda s: s.ttft_mean_ms)
        binding = f", binding: {'; '.join(worst.binding)}" if worst.binding else ""
        which = (f"{len(facts.spikes)} TTFT spikes, the worst" if len(facts.spikes) > 1
                 else "a TTFT spike")
        text += (f"; {which} at {worst.start_s:.0f}-{worst.end_s:.0f} s (mean "
                 f"{_ms(worst.ttft_mean_ms)}{binding})")
    if facts.stalls:
        text += f"; {len(facts.stalls)} stall(s) with no token computed"
    return text


def _ttft_tail(facts: WindowFacts, spans: SpanWindow | None) -> str:
    stats = (spans.stats.get("server_ttft_ms") if spans is not None else None) or {}
    if stats.get("p99") is not None:
        return f", server TTFT p99 {_ms(stats['p99'])} (exact, {stats['count']} spans)"
    ttft = facts.latency.get("ttft")
    if ttft is None or ttft.p99 is None:
        return ""
    return f", server TTFT p99 {ms_words(ttft.p99)} (in its bucket)"


def unmeasured_words(facts: WindowFacts) -> str:
    """What a window cannot say without load, and how far the observed operating point was
    from the limits that were binding."""
    t = facts.traffic
    point = []
    if t.running_mean is not None:
        cap = (f" of max_num_seqs {facts.max_num_seqs}" if facts.max_num_seqs is not None
               else " (max_num_seqs not known)")
        point.append(f"mean {t.running_mean:.2g} running{cap}")
    if t.kv_max is not None:
        point.append(f"KV cache peak {t.kv_max:.0%}")
    if facts.budget_use is not None and facts.budget_use >= BUDGET_SHOWN:
        point.append(f"steps used {facts.budget_use:.0%} of the "
                     f"{facts.max_num_batched_tokens}-token budget")
    if t.arrival_rps is not None and t.finished_rps and t.arrival_rps > QUEUE_GREW * t.finished_rps:
        point.append("more arrived than finished: the queue grew")
    elif t.arrival_rps is not None and t.finished_rps and \
            t.finished_rps > QUEUE_GREW * t.arrival_rps:
        point.append("more finished than arrived: the window saw a queue drain")
    ran = f"; the server ran at {', '.join(point)}" if point else ""
    return (f"Not measured without load: the knee (no sweep){ran}. `latscope diagnose` with "
            "load on a staging replica finds how far that is from its capacity")


__all__ = ["at_words", "ms_words", "traffic_words", "unmeasured_words", "verdict_of_window"]

"""A passive window in words and tables, for every renderer (terminal, report.md, report.html)
and ``watch``: the traffic in one line, latencies with their error bounds, the server TTFT's
split, the spikes, what latscope sent and what it could not see. Pure: the typed section in,
strings out."""

from __future__ import annotations

from typing import Any

from latscope.report.model import LatencyRow, WindowSection

LATENCY_NAMES = {"ttft": "TTFT (server)", "queue": "queue", "prefill": "prefill",
                 "decode": "decode", "e2e": "E2E (server)", "itl": "ITL", "tpot": "TPOT"}


def ms(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value / 1000:.3g} s"
    return f"{value:.3g} ms"


def bounded(q: dict[str, Any] | None) -> str:
    """A quantile with its bucket as the error bound: ``466 ms [250-500]``, ``<= 300 ms``
    in the first bucket, ``> 80 s`` above the top one; an exact one (spans) as it is."""
    if not q or q.get("value") is None:
        return "-"
    lower, upper, value = q.get("lower"), q.get("upper"), q["value"]
    if upper is None:
        return f"> {ms(lower)}"
    if lower == upper:
        return ms(value)
    if not lower:
        return f"<= {ms(upper)}"
    unit_less = ms(lower).rsplit(" ", 1)[0] if ms(lower).split()[-1] == ms(upper).split()[-1] \
        else ms(lower)
    return f"{ms(value)} [{unit_less}-{ms(upper)}]"


def latency_table(rows: list[LatencyRow]) -> tuple[list[str], list[list[str]]]:
    head = ["latency", "requests", "mean", "p50", "p99", "source"]
    body = [[LATENCY_NAMES.get(r.name.split()[0], r.name) + (" (spans)" if "spans" in r.name
                                                               else ""),
             f"{r.count:g}", ms(r.mean_ms), bounded(r.p50), bounded(r.p99),
             "spans, exact" if "spans" in r.name else "histogram: p in its bucket"]
            for r in rows]
    return head, body


def traffic_line(w: WindowSection) -> str:
    t = w.traffic
    parts = [f"{t.get('finished', 0):g} requests finished"]
    if t.get("arrival_rps") is not None:
        parts.append(f"{t['arrival_rps']:.2f} req/s arriving (peak {t.get('peak_arrival_rps') or 0:.1f}"
                     f" in one interval{_dispersion(t)})")
    sizes = _sizes(t)
    if sizes:
        parts.append(sizes)
    if t.get("in_server_mean") is not None:
        parts.append(f"in the server on average {t['in_server_mean']:.2g} "
                     f"(running {t.get('running_mean') or 0:.2g}, queued "
                     f"{t.get('waiting_mean') or 0:.2g}; Little's law)")
    peaks = [f"{name} {t[k]:g}" for name, k in (("running", "running_max"),
                                                ("waiting", "waiting_max")) if t.get(k) is not None]
    if t.get("kv_max") is not None:
        peaks.append(f"KV {t['kv_max']:.0%}")
    if peaks:
        parts.append("gauges' peaks: " + ", ".join(peaks))
    if t.get("preemptions"):
        parts.append(f"{t['preemptions']:g} preemptions")
    if t.get("prefix_hit_rate") is not None:
        parts.append(f"prefix cache hits {t['prefix_hit_rate']:.0%}")
    return "; ".join(parts)


def _dispersion(t: dict[str, Any]) -> str:
    d = t.get("dispersion")
    bursts = t.get("bursts") or 0
    text = f", dispersion {d:.1f}" if d is not None else ""
    return text + (f", {bursts} burst interval{'s' if bursts != 1 else ''}" if bursts else "")


def _sizes(t: dict[str, Any]) -> str:
    if t.get("prompt_tokens_mean") is None:
        return ""
    text = f"{t['prompt_tokens_mean']:.0f} prompt tokens"
    if t.get("output_tokens_mean") is not None:
        text += f" / {t['output_tokens_mean']:.0f} output tokens a request (means)"
    return text


def spike_lines(w: WindowSection) -> list[str]:
    out = []
    for s in w.spikes:
        share = (f", {min(1.0, s.queue_share):.0%} queueing"
                 if s.queue_share is not None and s.queue_share >= 0.01 else "")
        waiting = f", up to {s.waiting_max:g} waiting" if s.waiting_max else ""
        binding = "; ".join(s.binding) or "no limit of the server's seen binding"
        out.append(f"{s.start_s:.0f}-{s.end_s:.0f} s: mean TTFT {ms(s.ttft_mean_ms)}, p99 "
                   f"{bounded(s.ttft_p99)}{share}{waiting}; binding: {binding}")
    for st in w.stalls:
        out.append(f"{st['start_s']:.0f}-{st['end_s']:.0f} s: stalled, {st['in_server']:g} "
                   "requests in the server, no token computed")
    return out


def sent_line(w: WindowSection) -> str:
    sent = ", ".join(f"{k} x{v}" for k, v in sorted(w.requests_sent.items()))
    return ("No load sent: no request to an inference endpoint"
            + (f" (latscope sent only {sent})" if sent else ""))


def scrape_line(w: WindowSection) -> str:
    s = w.scrape or {}
    cost = s.get("scrape_ms") or {}
    size = s.get("bytes") or {}
    text = (f"{w.scrapes} scrapes every {w.interval_s or 0:.1f} s over {w.seconds:.0f} s"
            if w.scrapes >= 2 else f"{w.scrapes} scrape(s) read")
    if cost:
        text += (f"; each took {cost.get('p50', 0):.1f} ms p50, {cost.get('max', 0):.1f} ms "
                 f"max of the server's time to render (a {size.get('p50', 0) / 1024:.0f} kB "
                 "page)")
    if s.get("failures"):
        text += f"; {s['failures']} failed"
    return text


def window_text_lines(w: WindowSection) -> list[tuple[str, str]]:
    """(kind, text) lines of the terminal's window section: "head", "line", "row"."""
    if w.scrapes < 2:  # no window was read: what was tried, and why not
        return [("head", "Live traffic: no window (fewer than two /metrics scrapes read):"),
                ("line", scrape_line(w)), ("line", sent_line(w))]
    out = [("head", f"Window: {w.label} (from {w.started}):"),
           ("line", traffic_line(w))]
    if w.split:
        total = w.split[0]
        parts = ", ".join(f"{c.label.split(' (')[0]} {ms(c.mean_ms)} ({c.share:.0%})"
                          for c in w.split[1:] if c.share is not None)
        out.append(("line", f"server TTFT mean {ms(total.mean_ms)}: {parts} "
                            f"[{w.split_source}]"))
    head, body = latency_table(w.latency)
    for row in body:
        if row[0].startswith(("TTFT", "queue", "E2E", "ITL")):
            out.append(("row", f"{row[0]}: mean {row[2]}, p50 {row[3]}, p99 {row[4]} "
                               f"({row[1]} observations)"))
    for line in spike_lines(w):
        out.append(("line", "spike " + line if not line.endswith("computed") else line))
    out.append(("line", scrape_line(w)))
    out.append(("line", sent_line(w)))
    for line in w.unseen:
        out.append(("line", "not seen: " + line))
    return out

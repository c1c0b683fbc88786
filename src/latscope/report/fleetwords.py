"""The sentences every fleet renderer shares (terminal, report.md, report.html): where the
replicas were read from, the window, the balancer's part, Prometheus beside latscope."""

from __future__ import annotations

from latscope.report.fleetmodel import FleetReport, PromqlCheck


def source_line(r: FleetReport) -> str:
    s = r.source
    if s.kind == "prometheus":
        sel = f" {{{s.selector}}}" if s.selector else ""
        return (f"{len(r.replicas)} replicas by {'+'.join(s.replica_labels)}, from Prometheus "
                f"at {s.prometheus}{sel}")
    return f"{len(r.replicas)} replicas scraped by latscope, load through {s.balancer}"


def window_line(r: FleetReport) -> str:
    s = r.source
    interval = (f", Prometheus scrapes every {s.scrape_interval_s:.3g} s"
                if s.kind == "prometheus" and s.scrape_interval_s else "")
    return (f"{s.start} to {s.end} ({s.window_s:.0f} s), step {s.step_s:.3g} s{interval}")


def router_sentence(r: FleetReport) -> str:
    x = r.router
    assert x is not None
    head = (f"mean TTFT {x.front_ttft_ms:.1f} ms through the balancer ({x.front_count} "
            f"requests, {x.source}) against {x.replica_ttft_ms:.1f} ms at the replicas "
            f"({x.replica_count:g} requests); send lag {x.send_lag_ms:.1f} ms")
    if x.router_ms is None:
        return f"{head}; {x.note}"
    share = f" ({x.share:.0%})" if x.share is not None else ""
    caveat = "" if x.reliable else f"; the client's timing is unreliable: {x.why_unreliable}"
    note = f"; {x.note}" if x.note else ""
    hop = (f", of which the balancer's own hop {x.hop_ms:.2f} ms (GET /health p50 "
           f"{x.front_rtt_ms:.2f} ms through it, {x.direct_rtt_ms:.2f} ms straight)"
           if x.hop_ms is not None and x.front_rtt_ms is not None
           and x.direct_rtt_ms is not None else "")
    return (f"{head}; between the client and the replicas: {x.router_ms:.1f} ms{share}{hop}"
            f"{caveat}{note}")


def promql_summary(checks: list[PromqlCheck]) -> str:
    if not checks:
        return "Prometheus' own figures: not read (latscope scraped the replicas itself)"
    judged = [c for c in checks if c.agree is not None]
    bad = [c for c in judged if not c.agree]
    text = (f"Prometheus beside latscope (increase / histogram_quantile on the same window): "
            f"{len(judged) - len(bad)} of {len(judged)} figures agree")
    if bad:
        text += "; they disagree on " + "; ".join(
            f"{c.replica} {c.metric} {c.what} ({c.note})" for c in bad[:4])
    return text

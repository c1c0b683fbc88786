"""Findings from a ``NetReport``: each measured layer as evidence, and a verdict that puts the
network next to the server's measured TTFT ("network is 0.4 ms of a 62 ms TTFT").

Two diagnoses, each with its own id (docs/findings.md): ``net.verdict`` is the time spent
outside the engine (client TTFT - the server's own TTFT, a warning above 10 ms), and the round
trip's share of TTFT is ``latency.network``, made by the same rule (``findings.latency``) as in a
measured run, so its advice knows when client and server share a host.

Definitions (ms; percentiles with numpy's linear interpolation via ``latscope.stats``):
- HTTP round trip = GET ``/health`` over a kept-alive connection, request sent -> headers received
  (network both ways + the server's HTTP handling of /health);
- new-connection cost = p50(GET on a fresh connection) - p50(GET on the kept-alive connection);
- jitter = mean |x[i] - x[i-1]| over consecutive kept-alive round trips (RFC 3393 style);
- client TTFT = completion request sent -> first chunk with text; delivery gap = time between
  consecutive chunks with text.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import numpy as np

from latscope.findings import reference as _ref
from latscope.findings.latency import Context, network_fix, share_finding
from latscope.model import Evidence, Finding, Severity
from latscope.stats import distribution

# Client TTFT - server TTFT above this on a LAN points at the network or a proxy: a LAN round
# trip is well under a millisecond, so 10 ms is time something on the path holds the request.
OUTSIDE_ENGINE_WARN_MS = 10.0
REF = "docs/findings.md"
MEASURED_AT = "latscope net probe"




def _p50(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


def _round(value: float | None) -> float | None:
    return round(value, 3) if value is not None else None


def jitter_ms(values: list[float]) -> float | None:
    if len(values) < 2:
        return None
    return float(np.mean(np.abs(np.diff(values))))


def _dist_evidence(name: str, values: list[float], source: str) -> list[Evidence]:
    d = distribution(values, (50, 90, 99))
    return [Evidence(f"{name} p50 / p90 / p99 / max", f"{d['p50']:.3f} / {d['p90']:.3f} / "
                     f"{d['p99']:.3f} / {d['max']:.3f}", "ms", f"{source}, n={d['count']}")]


def net_findings(r: Any) -> list[Finding]:
    out = [_connect_finding(r), _http_finding(r), _reuse_finding(r), _stream_finding(r),
           _iperf3_finding(r), *_verdict(r)]  # the verdict, and the network's share of TTFT
    if r.error:
        out.append(Finding("net.error", Severity.CRITICAL, r.error, layer="network",
                           reference=_ref("net.error")))
    return [f for f in out if f is not None]


def _connect_finding(r: Any) -> Finding:
    evidence = [Evidence("DNS lookup", "IP literal (no lookup)" if r.dns_is_literal
                         else round(r.dns_ms, 3), "" if r.dns_is_literal else "ms", "getaddrinfo")]
    evidence += _dist_evidence("TCP connect", r.tcp_connect_ms, f"connect() to {r.address}")
    if r.tls_handshake_ms:
        evidence += _dist_evidence("TLS handshake", r.tls_handshake_ms, "SSLSocket.do_handshake")
    return Finding("net.connect", Severity.INFO,
                   f"TCP connect {_p50(r.tcp_connect_ms):.2f} ms to {r.address} (reaches the first "
                   "TCP endpoint: a proxy or load balancer if there is one)", evidence,
                   layer="network", reference=_ref("net.connect"))


def _http_finding(r: Any) -> Finding | None:
    if not r.keepalive_ms:
        return None
    rtt, connect = _p50(r.keepalive_ms), _p50(r.tcp_connect_ms)
    evidence = _dist_evidence("HTTP round trip (kept-alive)", r.keepalive_ms,
                              f"GET {r.health_path} -> HTTP {r.health_status}")
    evidence.append(Evidence("jitter (mean |consecutive difference|)", round(jitter_ms(
        r.keepalive_ms) or 0.0, 3), "ms", "kept-alive round trips"))
    title = f"HTTP round trip {rtt:.2f} ms over a reused connection"
    why = ""
    if rtt is None or connect is None:  # not measured (rtt: kept-alive round trips are)
        return Finding("net.http_rtt", Severity.INFO, title, evidence, why=why, layer="network",
                       reference=_ref("net.http_rtt"))
    evidence.append(Evidence("TCP connect p50", round(connect, 3), "ms", f"connect() to {r.address}"))
    if rtt - connect > max(2.0, 3 * connect):
        title += f"; TCP connect only {connect:.2f} ms"
        why = ("The TCP handshake is answered much faster than an HTTP request: either an "
               "intermediary (proxy, load balancer, mesh sidecar) terminates TCP closer than the "
               "server, or the server takes the difference to answer /health.")
    return Finding("net.http_rtt", Severity.INFO, title, evidence, why=why, layer="network",
                   reference=_ref("net.http_rtt"))


def _reuse_finding(r: Any) -> Finding | None:
    if not r.new_connection_ms or not r.keepalive_ms:
        return None
    new, kept = _p50(r.new_connection_ms), _p50(r.keepalive_ms)
    if new is None or kept is None:  # not reached: both lists are non-empty
        return None
    cost = new - kept
    evidence = _dist_evidence("GET on a new connection", r.new_connection_ms, f"GET {r.health_path}")
    evidence += _dist_evidence("GET on a reused connection", r.keepalive_ms, f"GET {r.health_path}")
    evidence.append(Evidence("new-connection cost (p50 difference)", round(cost, 3), "ms", "measured"))
    severity = Severity.WARNING if cost > 1.0 and cost > 0.2 * kept else Severity.INFO
    return Finding("net.connection_reuse", severity,
                   f"a new connection costs {cost:.2f} ms per request more than a reused one",
                   evidence, why="A client that does not keep connections alive pays it on every "
                   "request, TTFT included.",
                   fix="reuse connections (HTTP keep-alive / a shared client session)",
                   layer="network", reference=_ref("net.connection_reuse"))


def _stream_finding(r: Any) -> Finding | None:
    s = r.stream
    if not s.gaps_ms:
        return None
    evidence = _dist_evidence("delivery gap between text chunks", s.gaps_ms,
                              f"POST /v1/completions stream ({s.model})")
    return Finding("net.stream_gaps", Severity.INFO,
                   f"streamed chunks arrive {_p50(s.gaps_ms):.2f} ms apart (p50)", evidence,
                   why="Gaps much larger than the server's inter-token latency mean buffering on "
                       "the path (proxy SSE buffering, Nagle).", layer="network",
                   reference=_ref("net.stream_gaps"))


def _iperf3_finding(r: Any) -> Finding:
    if r.iperf3 is None:
        return Finding("net.iperf3", Severity.SKIPPED, f"skipped: {r.iperf3_reason}",
                       layer="network", reference=_ref("net.iperf3"))
    return Finding("net.iperf3", Severity.INFO,
                   f"iperf3: {r.iperf3['received_mbit_s']:.0f} Mbit/s",
                   [Evidence("received", round(r.iperf3["received_mbit_s"], 1), "Mbit/s",
                             r.iperf3["command"]),
                    Evidence("retransmits", r.iperf3["retransmits"], "", r.iperf3["command"])],
                   layer="network", reference=_ref("net.iperf3"))


def same_host(address: str) -> bool | None:
    """Whether ``address`` (``IP:port`` connected to) is this host: loopback or one of its own
    addresses. None when it cannot be told (no address)."""
    ip = address.rsplit(":", 1)[0].strip("[]") if address else ""
    try:
        parsed = ipaddress.ip_address(ip.split("%")[0])
    except ValueError:
        return None
    if parsed.is_loopback:
        return True
    try:
        own = {info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None)}
    except OSError:
        return False
    return ip in own


def _verdict(r: Any) -> list[Finding | None]:
    network = _p50(r.keepalive_ms)
    if network is None:
        return []
    ttft = _p50(r.stream.ttft_ms)
    net_ev = Evidence("network (HTTP round trip p50)", round(network, 3), "ms", f"GET {r.health_path}")
    if ttft is None:
        return [Finding("net.verdict", Severity.INFO,
                        f"network round trip {network:.2f} ms; no TTFT to compare it with",
                        [net_ev, Evidence("no streamed completion", r.stream.reason or "no text "
                                          "chunk received", "", f"{r.url}/v1/models")],
                        layer="network", reference=_ref("net.verdict"))]
    share = network / ttft
    local = same_host(r.address)
    evidence = [net_ev, Evidence("TCP connect p50 (handshake only: lower bound)",
                                 _round(_p50(r.tcp_connect_ms)), "ms", f"connect() to {r.address}"),
                Evidence("client TTFT p50", round(ttft, 3), "ms",
                         f"{len(r.stream.ttft_ms)} streamed completions ({r.stream.model})"),
                Evidence("client and server on one host", local, "",
                         f"{r.address}: loopback or this host's own address")]
    severity, why, fix = Severity.INFO, "", ""
    if r.stream.server_ttft_mean_ms is not None:
        outside = float(np.mean(r.stream.ttft_ms)) - r.stream.server_ttft_mean_ms
        evidence.append(Evidence("server TTFT mean (same requests)", round(
            r.stream.server_ttft_mean_ms, 3), "ms", "vllm:time_to_first_token_seconds sum/count delta"))
        evidence.append(Evidence("client mean - server mean TTFT", round(outside, 3), "ms", "measured"))
        severity = Severity.OK
        if outside > OUTSIDE_ENGINE_WARN_MS:
            severity = Severity.WARNING
            why = (f"The client waits {outside:.1f} ms longer for the first token than the engine "
                   "takes to produce it: that time is spent on the path (network, a proxy, the "
                   "HTTP frontend), not in the engine.")
            fix = network_fix(local)
    verdict = Finding("net.verdict", severity,
                      f"network is {network:.1f} ms of a {ttft:.0f} ms TTFT ({share:.0%})", evidence,
                      why=why, fix=fix, layer="network", reference=_ref("net.verdict"))
    # The round trip's share of mean TTFT: the one rule for latency.network, with the round trip
    # estimated as in a run's decomposition (kept-alive p50: robust to one slow probe).
    src = f"GET {r.health_path} p50, kept-alive, n={len(r.keepalive_ms)}"
    ttft_src = f"{len(r.stream.ttft_ms)} streamed completions ({r.stream.model})"
    share_of_ttft = share_finding("ttft.network", "network round trip (HTTP, kept-alive)",
                                  network, src,
                                  float(np.mean(r.stream.ttft_ms)), ttft_src,
                                  Context(measured_at=MEASURED_AT, same_host=local))
    return [verdict, share_of_ttft]

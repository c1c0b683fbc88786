"""Findings from one run's latency decomposition: which part of client TTFT took a large share.

One rule per component of TTFT. A share is a *fault* where a setting or a deployment change
removes it (queueing, the HTTP frontend, the network, latscope's own client); prefill is where
the time goes by physics, so its share is information, however large. Network and frontend are
blamed only when the client's own timing is reliable, and co-location is never advised to a client
that already shares the server's host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from latscope.findings.impact import (
    WARNING_SHARE,
    ImpossibleShare,
    make_impact,
    severity_for_share,
    where_words,
)
from latscope.model import Evidence, Finding, Severity

REF = "docs/findings.md"
# A round trip between two processes of one host takes well under a millisecond (loopback);
# this much means a proxy, a gateway or traffic shaping sits on the path.
SAME_HOST_RTT_MS = 5.0
# The queue's share is kept as information from here (below, a cause would take "0% of TTFT").
QUEUE_KEPT_SHARE = 0.05


@dataclass(frozen=True, slots=True)
class Context:
    """What the rules need to know about how the run was measured."""

    measured_at: str = ""  # e.g. "c=16 (the knee)"
    load: float | None = None  # the concurrency measured at (typed: what rules compare)
    same_host: bool | None = None  # client and server on one host (None: unknown)
    client_reliable: bool = True
    client_why: str = ""  # why the client's numbers are not reliable


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    layer: str
    fault: bool  # a setting or deployment change can remove it (else: physics, info only)
    why: str
    fix: str
    # A cause is measured directly (the network's round trip, the client's own lag); a symptom
    # is a share whose cause another finding must name, so it is at most a warning.
    role: str = "symptom"


RULES: dict[str, Rule] = {
    "ttft.server.queue": Rule(
        "latency.queue", "queue", True,
        "Requests wait this share of their TTFT for the scheduler: the batch is full, the token "
        "budget is used up, the KV cache is full, or the engine is busy with the requests it "
        "already runs (the offered load is past its capacity).",
        "Find what holds requests in the queue: the batch at max_num_seqs, a full KV cache, "
        "engine steps at their token budget, or an offered load past what the server serves "
        "(its capacity); lower the load per replica or add replicas, and measure with "
        "`latscope sweep`."),
    "ttft.server.prefill": Rule(
        "latency.prefill", "prefill", False,
        "Prompt processing (SCHEDULED -> first token) takes this share of TTFT; with other "
        "requests decoding, their steps interleave with the prefill.",
        "Only if it is larger than the prompt length explains: prefix caching for shared "
        "prefixes, shorter prompts, more compute (TP)."),
    "ttft.server.other": Rule(
        "latency.engine_frontend", "frontend", True,
        "Tokenization, the API server <-> engine IPC and output processing take this share "
        "of TTFT.",
        "Scale the API server (--api-server-count), pre-tokenize, and check the API server's "
        "CPU (other processes on its cores)."),
    "ttft.frontend": Rule(
        "latency.http_frontend", "frontend", True,
        "Between the client and vLLM's frontend (HTTP handling, proxies, first-chunk "
        "delivery) this share of TTFT is spent.",
        "Look for proxies or gateways that buffer SSE, and for CPU contention on the API "
        "server; `latscope net` splits the network's round trip off."),
    "ttft.network": Rule(
        "latency.network", "network", True,
        "The round trip between client and server, measured on the same path, is paid before "
        "the first token.",
        "", role="cause"),  # the fix depends on whether the client shares the host
    "ttft.client": Rule(
        "latency.client", "client", True,
        "latscope's own client lost this share of TTFT (late sends and a late event loop): "
        "it is not the server's latency.",
        "Give the client its own cores (taskset, another host), or fewer streams per process; "
        "the client-side numbers of this run are less precise by this much.", role="cause"),
}


def findings_from_decomposition(result: Any, ctx: Context = Context()) -> list[Finding]:
    """Name the components of client TTFT that take at least ``WARNING_SHARE`` of it."""
    ttft = result.component("ttft")
    if ttft is None or not ttft.mean_ms:
        return []
    out = []
    for key in RULES:
        comp = result.component(key)
        if comp is not None and comp.mean_ms is not None:
            finding = share_finding(key, comp.label, comp.mean_ms, comp.source, ttft.mean_ms,
                                    ttft.source, ctx)
            if finding is not None:
                out.append(finding)
    return out


def share_finding(key: str, label: str, part_ms: float, part_source: str, total_ms: float,
                  total_source: str, ctx: Context = Context(),
                  total_label: str = "client TTFT", target: str = "ttft_mean"
                  ) -> Finding | None:
    """The one rule for component ``key`` of TTFT: a finding when its share is notable -- or,
    for the network, when a round trip between two processes of one host is far longer than a
    loopback's, whatever its share (something sits on the path). ``total_label`` and
    ``target`` name the total: a passive run's is the server's own TTFT ("server TTFT",
    ``server_ttft_mean``), there being no client of latscope's."""
    rule = RULES[key]
    if part_ms <= 0 or not total_ms or total_ms <= 0:
        return None
    share = part_ms / total_ms
    odd_path = key == "ttft.network" and bool(ctx.same_host) and part_ms >= SAME_HOST_RTT_MS
    # the queue's share is kept however small (information): a limit the server's own counters
    # show binding takes it, so a slow machine's other shares do not overrule those counters
    if share < WARNING_SHARE and not odd_path and not (key == "ttft.server.queue"
                                                       and share >= QUEUE_KEPT_SHARE):
        return None
    try:
        impact = make_impact(target, share, value_ms=part_ms, measured_at=ctx.measured_at)
    except ImpossibleShare:
        return None  # parts that disagree with the total are noted in the decomposition
    if ctx.load is not None:
        impact["load"] = ctx.load
    severity = severity_for_share(impact["share"], fault=rule.fault)
    if rule.role == "symptom" and severity == Severity.CRITICAL:
        severity = Severity.WARNING  # critical needs a named cause: diagnose joins the two
    if rule.id == "latency.client" and severity == Severity.CRITICAL:
        # latscope's own lateness is a caveat on the measurement, never the server's fault (a
        # healthy server on a loaded 2-core box got a critical finding from it)
        severity = Severity.WARNING
    why, fix = rule.why, rule.fix
    if rule.id in ("latency.network", "latency.http_frontend") and not ctx.client_reliable:
        severity = Severity.INFO  # a starved client stamps chunks late: not the network's time
        why += f" Not blamed: the client's own timing is unreliable in this run ({ctx.client_why})."
        # the decision's field (the verdict never takes this share for the server's)
        impact["client_reliable"] = False
    if odd_path and severity.rank > Severity.WARNING.rank:
        # measured by the round-trip probe itself, not by the run's (possibly late) stamps
        severity = Severity.WARNING
        why += (f" A round trip of {part_ms:.1f} ms between two processes of one host is far "
                f"above a loopback's (< {SAME_HOST_RTT_MS:g} ms).")
    if rule.id == "latency.network":
        fix = network_fix(ctx.same_host)
    where = f" {where_words(ctx.measured_at)}" if ctx.measured_at else ""
    return Finding(
        id=rule.id, severity=severity, layer=rule.layer,
        title=f"{label}: {part_ms:.1f} ms of a {total_ms:.1f} ms mean {total_label} "
              f"({impact['share']:.0%}){where}",
        evidence=[Evidence(f"{label} mean{where}", round(part_ms, 3), "ms", part_source),
                  Evidence(f"{total_label} mean{where}", round(total_ms, 3), "ms", total_source)],
        why=why, fix=fix, reference=f"{REF}#{rule.id}", impact=impact, role=rule.role)


def network_fix(same_host: bool | None) -> str:
    """Advice for time lost between client and server; never "move closer" on one host."""
    if same_host:
        return ("Client and server share this host, so the round trip is not distance: look for "
                "a proxy, a gateway or traffic shaping on the path (TCP connect reaches only the "
                "first endpoint; compare with `latscope net` against the server's own port).")
    return ("Move the client closer to the server (same zone or host), remove proxies that "
            "buffer, and keep connections alive; verify with `latscope net`.")

"""One replica's own diagnosis of the window, from its ``/metrics`` series alone.

This is the one place the fleet asks for a single server's passive diagnosis. Until
``campaign.passive.conclude_window`` (issue #53) is on main it is a thin adapter over the rules
latscope already has: the split of the replica's own TTFT from its histograms
(``findings.latency.share_finding``: queue, prefill, the API server's part), the rules on its
counters and gauges (``findings.server.findings_from_metrics``), causes joined to symptoms, the
ranking and the verdict (``findings.verdict``). Switching to the passive diagnosis changes this
module only.
"""

from __future__ import annotations

from latscope.findings.causes import as_symptom, join_causes
from latscope.findings.latency import Context, share_finding
from latscope.findings.rank import rank
from latscope.findings.server import findings_from_metrics
from latscope.findings.verdict import HealthySplit, VerdictInputs, verdict
from latscope.fleet.facts import ReplicaFacts
from latscope.fleet.model import ReplicaConclusion
from latscope.model import Finding, MetricSnapshot
from latscope.results import Verdict

_PARTS = (("ttft.server.queue", "queue", "queue"), ("ttft.server.prefill", "prefill", "prefill"))


def replica_conclusion(facts: ReplicaFacts, snapshots: list[MetricSnapshot], label: str,
                       source: str) -> ReplicaConclusion:
    where = f"{source}, replica {facts.name}"
    if not facts.vllm:
        text = "no vllm:* series: stats disabled (--disable-log-stats) or not vLLM"
        return ReplicaConclusion(facts.name, (), Verdict(text=text, kind="none",
                                                         finding_id=None, healthy=False))
    ttft = facts.latency.get("ttft")
    if ttft is None or not ttft.count:
        text = ("no request reached its first token on it in the window"
                if len(snapshots) >= 2 else "too few samples in the window to diagnose it")
        return ReplicaConclusion(facts.name, (), Verdict(text=text, kind="none",
                                                         finding_id=None, healthy=False))
    findings = findings_from_metrics(snapshots, source=where) if len(snapshots) >= 2 else []
    split, shares = _split(facts, label, where)
    ranked, _ = rank(join_causes([as_symptom(f) for f in [*split, *findings]]))
    healthy = _healthy(facts, label, shares)
    return ReplicaConclusion(facts.name, tuple(ranked),
                             verdict(ranked, VerdictInputs(healthy=healthy)), shares)


def _split(facts: ReplicaFacts, label: str, source: str) -> tuple[list[Finding], dict]:
    """Findings on the parts of the replica's own mean TTFT, and the parts' shares."""
    ttft = facts.latency.get("ttft")
    if ttft is None or ttft.mean is None or ttft.mean.value <= 0:
        return [], {}
    total_ms = ttft.mean.value * 1000
    ctx = Context(measured_at=label, same_host=None)
    out, shares, parts_ms = [], {}, 0.0
    for key, metric, name in _PARTS:
        lat = facts.latency.get(metric)
        if lat is None or lat.mean is None:
            continue
        part_ms = lat.mean.value * 1000
        parts_ms += part_ms
        shares[name] = part_ms / total_ms
        found = share_finding(key, name, part_ms, f"{lat.family}, {source}", total_ms,
                              f"{ttft.family}, {source}", ctx, total_label="server TTFT")
        if found is not None:
            out.append(found)
    if len(shares) == len(_PARTS):
        rest = total_ms - parts_ms
        shares["other"] = rest / total_ms
        found = share_finding("ttft.server.other", "tokenization + IPC + output processing",
                              rest, "server TTFT - queue - prefill", total_ms,
                              f"{ttft.family}, {source}", ctx, total_label="server TTFT")
        if found is not None:
            out.append(found)
    return out, shares


def _healthy(facts: ReplicaFacts, label: str, shares: dict[str, float]) -> HealthySplit | None:
    ttft = facts.latency.get("ttft")
    if ttft is None or ttft.mean is None or not ttft.count:
        return None
    split = ", ".join(f"{k} {v:.0%}" for k, v in shares.items())
    return HealthySplit(label, ttft.mean.value * 1000, split or "not split",
                        facts.rate(facts.finished) or 0.0)

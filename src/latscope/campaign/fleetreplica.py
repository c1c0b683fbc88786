"""One replica's own diagnosis of the window, from its ``/metrics`` series alone: the passive
diagnosis of one server (``campaign.passive.conclude_window``, the seam's kind "passive"), given
the replica's snapshots as Prometheus or latscope's scrapes hold them. The fleet's rules then
set the replicas side by side (``findings.fleet``)."""

from __future__ import annotations

from latscope.campaign.passive import conclude_window
from latscope.fleet.facts import ReplicaFacts
from latscope.fleet.model import ReplicaConclusion
from latscope.model import MetricSnapshot
from latscope.results import Verdict


def replica_conclusion(facts: ReplicaFacts, snapshots: list[MetricSnapshot], label: str,
                       source: str) -> ReplicaConclusion:
    if not facts.vllm:
        text = "no vllm:* series: stats disabled (--disable-log-stats) or not vLLM"
        return ReplicaConclusion(facts.name, (), Verdict(text=text, kind="none",
                                                         finding_id=None, healthy=False))
    if len(snapshots) < 2:
        return ReplicaConclusion(facts.name, (), Verdict(
            text="too few samples in the window to diagnose it", kind="none", finding_id=None,
            healthy=False))
    window = conclude_window(snapshots, label=label,
                             notes=[f"replica {facts.name}, read from {source}"])
    split = window.facts.split
    shares = ({name: ms / split.ttft_ms for name, ms in split.parts()}
              if split is not None and split.ttft_ms > 0 else {})
    return ReplicaConclusion(facts.name, tuple(window.ranked), window.verdict, shares)

"""Causes take the measured share of the symptoms they explain, across layers.

The edges are data (``causes.toml`` beside this file, each documented in docs/findings.md): a
symptom measured in one layer (queueing in the server's histograms, GPU idle in a profile) is
explained by a cause another layer found (max_num_seqs from /metrics, --enforce-eager from the
server's command line, CUDA_LAUNCH_BLOCKING from its environment, other processes on its cores).
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from latscope.findings.impact import severity_for_share
from latscope.model import Evidence, Finding, Severity

ACTING = (Severity.CRITICAL, Severity.WARNING)


@dataclass(frozen=True, slots=True)
class Edge:
    symptom: str
    cause: str
    why: str
    reference: str


@cache
def edges() -> tuple[Edge, ...]:
    data = tomllib.loads((Path(__file__).with_name("causes.toml")).read_text())
    return tuple(Edge(**e) for e in data["edge"])


def causes_of(symptom: str) -> tuple[str, ...]:
    return tuple(e.cause for e in edges() if e.symptom == symptom)


def symptom_of(cause: str) -> str | None:
    """The symptom a cause explains first, in the table's order (None for no edge)."""
    return next((e.symptom for e in edges() if e.cause == cause), None)


def symptoms() -> tuple[str, ...]:
    return tuple(dict.fromkeys(e.symptom for e in edges()))


def join_causes(findings: list[Finding]) -> list[Finding]:
    """A found cause takes the measured share of the symptom it explains (the first of its
    edges, in the table's order); the symptom's evidence joins the cause and the symptom leaves
    the list. A cause not found (an OK "batch not full") explains nothing, and a cause takes one
    symptom's share at most."""
    by_id = {f.id: f for f in findings}
    dropped = set()
    for symptom_id in symptoms():
        symptom = by_id.get(symptom_id)
        if symptom is None or not symptom.impact:
            continue
        edge = next((e for e in edges() if e.symptom == symptom_id and e.cause in by_id
                     and by_id[e.cause].severity in ACTING and not by_id[e.cause].impact), None)
        if edge is None:
            continue
        cause = by_id[edge.cause]
        cause.impact = dict(symptom.impact, explains=symptom_id)
        from_share = severity_for_share(symptom.impact["share"])
        if from_share.rank < cause.severity.rank:
            cause.severity = from_share
        cause.evidence = cause.evidence + [
            Evidence(f"explains {symptom_id}", symptom.title, "", edge.why)] + [
            e for e in symptom.evidence if e not in cause.evidence]
        dropped.add(symptom_id)
    return [f for f in findings if f.id not in dropped]


def as_symptom(f: Finding) -> Finding:
    """A finding that some edge's cause may explain is a symptom (``role``), whatever the rule
    that made it said: e.g. the trace's GPU idle time, whose cause the profile cannot see."""
    return dataclasses.replace(f, role="symptom") if f.id in symptoms() else f

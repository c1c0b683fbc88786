"""Merge findings that name the same diagnosis, and rank them by measured impact."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from latscope.findings.impact import TARGET_ORDER
from latscope.model import Evidence, Finding, Severity


def merge(findings: Iterable[Finding]) -> list[Finding]:
    """One finding per id, the one merge of every verb (doctor's checks, diagnose's stages): the
    most severe version, with the evidence of every version that is as severe or found something
    (a check that passed or was skipped adds nothing to one that failed: DEBUG logging seen in
    the environment and in the log is one warning with both pieces of evidence, without the
    "not seen" of a third source), and the impact with the largest share on the most important
    target."""
    by_id: dict[str, Finding] = {}
    for f in findings:
        kept = by_id.get(f.id)
        if kept is None:
            by_id[f.id] = dataclasses.replace(f, evidence=list(f.evidence))
            continue
        best, other = (f, kept) if _order(f) < _order(kept) else (kept, f)
        # the title, the evidence's order and the impact come from one measurement: a title
        # with c=64's figures beside c=1's share read "At c=1, 54% ...: 37.0 ms of a 163.4 ms
        # mean client TTFT (23%) at c=64"; the severity is the most severe version's
        measured = min((best, other), key=lambda x: _impact_key(x.impact))
        rest = other if measured is best else best
        evidence = (_union(measured.evidence, rest.evidence) if _adds_evidence(rest, best)
                    else list(measured.evidence))
        by_id[f.id] = dataclasses.replace(measured, severity=best.severity, evidence=evidence)
    return list(by_id.values())


def _adds_evidence(version: Finding, best: Finding) -> bool:
    """Whether a version's evidence joins the merged finding: it is as severe as the kept one,
    or it found something (critical, warning or info), never a pass or a skip beside a fault."""
    return version.severity == best.severity or version.severity.rank < Severity.OK.rank


def _order(f: Finding) -> tuple[int, int, float]:
    """The version of a finding to keep: the most severe, then the one with the larger impact
    (its title and evidence then describe the same measurement as the impact)."""
    return (f.severity.rank, *_impact_key(f.impact))


def _union(first: list[Evidence], second: list[Evidence]) -> list[Evidence]:
    seen = {(e.name, e.source) for e in first}
    return first + [e for e in second if (e.name, e.source) not in seen]


def _impact_key(impact: Mapping[str, Any] | None) -> tuple[int, float]:
    if not impact or impact.get("share") is None:
        return (len(TARGET_ORDER), 0.0)
    target = impact.get("target")
    order = TARGET_ORDER.index(target) if target in TARGET_ORDER else len(TARGET_ORDER)
    return (order, -float(impact["share"]))


def _rank_key(f: Finding) -> tuple[int, bool, bool, bool, int, float]:
    # measured before unmeasured: a share of the latency seen in this run comes before a setting
    # whose cost was not measured here (a cause that explains a symptom carries its share); then,
    # to act on, causes before symptoms
    acting = f.severity in (Severity.CRITICAL, Severity.WARNING)
    symptom = acting and f.role != "cause"
    unmeasured = not f.impact or f.impact.get("share") is None
    return (f.severity.rank, f.layer == "client", unmeasured, symptom, *_impact_key(f.impact))


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    """The ranking's order without merging (doctor's and the renderers' lists)."""
    return sorted(findings, key=_rank_key)


def rank(findings: Iterable[Finding]) -> tuple[list[Finding], list[str]]:
    """Most severe first; within a severity, the server's before latscope's own client, findings
    with a measured impact before those without, causes before symptoms, then by target (TTFT
    before E2E before the GPU window) and share. Returns the ranked list and notes
    naming where two findings could not be compared because they were measured against different
    targets or on different runs."""
    ranked = sorted(merge(findings), key=_rank_key)
    notes = []
    top = [f for f in ranked if f.severity in (Severity.CRITICAL, Severity.WARNING) and f.impact]
    if len(top) >= 2:
        a, b = top[0], top[1]
        ia, ib = a.impact or {}, b.impact or {}  # not None: `top` holds findings with an impact
        if ia.get("target") != ib.get("target"):
            notes.append(f"{a.id} and {b.id} are measured against different targets "
                         f"({ia.get('target')} vs {ib.get('target')}): ranked by "
                         "severity and target order, not by size")
        elif ia.get("measured_at") != ib.get("measured_at"):
            notes.append(f"{a.id} and {b.id} were measured at different loads "
                         f"({ia.get('measured_at') or '?'} vs "
                         f"{ib.get('measured_at') or '?'})")
    return ranked, notes


# Information is listed beside what to act on when it measured at least this share of its
# target (where the time goes); smaller shares and unmeasured information go to a list below.
SHOWN_INFO_SHARE = 0.05


def display_group(severity: str, impact: Mapping[str, Any] | None) -> str:
    """Where every renderer (terminal, report.md, report.html) lists a finding: "shown" (to act
    on: critical and warning; and information that measured ``SHOWN_INFO_SHARE`` or more of its
    target), "more" (other information) or "check" (passed, or could not run)."""
    if severity in (Severity.CRITICAL.value, Severity.WARNING.value):
        return "shown"
    if severity == Severity.INFO.value:
        share = (impact or {}).get("share")
        return "shown" if isinstance(share, (int, float)) and share >= SHOWN_INFO_SHARE \
            else "more"
    return "check"

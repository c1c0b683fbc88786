"""A comparison's conclusions in the one ``Finding`` form (``findings.json`` of a compare run,
and what ``latscope show`` lists): not comparable, caveats, what differs, regressions,
improvements, undecided figures, the part of the chain that moved, and for diagnose, sweep and
trace runs what changed in them. Every id has its section in docs/findings.md."""

from __future__ import annotations

from latscope.analysis.compare_model import (
    Difference,
    FindingChange,
    LayerRow,
    MetricRow,
    StateRow,
)
from latscope.findings.compare import change_text
from latscope.findings.compare_layers import LAYER_OF
from latscope.model import Evidence, Finding, Severity

FINDINGS_REF = "docs/findings.md"


def difference_findings(diffs: list[Difference]) -> list[Finding]:
    out = []
    refused, caveats, listed = ([d for d in diffs if d.action == a]
                                for a in ("refuse", "caveat", "list"))
    if refused:
        out.append(Finding(
            id="compare.not_comparable", severity=Severity.CRITICAL,
            title=f"not comparable: the runs differ in {_names(refused)}",
            evidence=_diff_evidence(refused), layer="config",
            why="Two runs that measured different workloads, loads, models or hardware, or whose "
                "prefix cache or client served them differently, differ for those reasons first: "
                "a difference of their latencies would be read as the server's.",
            fix="Run both sides with the same workload and load on the same hardware (fresh "
                "--seed values on one server); --allow GROUP compares anyway, with the "
                "difference as a caveat.",
            reference=f"{FINDINGS_REF}#compare.not_comparable"))
    if caveats:
        out.append(Finding(
            id="compare.caveat", severity=Severity.WARNING,
            title=f"compared despite: {_names(caveats)}", evidence=_diff_evidence(caveats),
            layer="config",
            why="These differ between the runs or could not be checked on one side; the "
                "changes may hold them as well as the change under test.",
            fix="Record both runs alike (the same latscope, telemetry on both sides).",
            reference=f"{FINDINGS_REF}#compare.caveat"))
    if listed:
        out.append(Finding(
            id="compare.server_changed", severity=Severity.INFO,
            title=f"what differs: {_names(listed)}", evidence=_diff_evidence(listed),
            layer="config",
            why="Usually what the comparison is for (a new vLLM, a flag, a driver): listed so "
                "that a change can be traced to it.",
            reference=f"{FINDINGS_REF}#compare.server_changed"))
    return out


def _names(diffs: list[Difference]) -> str:
    return ", ".join(dict.fromkeys(d.label for d in diffs))


def _diff_evidence(diffs: list[Difference]) -> list[Evidence]:
    return [Evidence(d.label, f"{d.base} -> {d.new}", "", d.key) for d in diffs]


def metric_findings(rows: list[MetricRow]) -> list[Finding]:
    out = []
    regressed = [r for r in rows if r.verdict == "regression"]
    if regressed:
        out.append(Finding(
            id="compare.regression", severity=Severity.CRITICAL,
            title="regression: " + _listed(regressed),
            evidence=[_metric_evidence(r) for r in regressed], role="symptom",
            why="The whole 95% interval of the change lies beyond the tolerance"
                + (" (the gate fails on it)." if any(r.gate == "fail" for r in regressed)
                   else "."),
            fix="See which part of the chain moved (compare.layer_moved) and what differs "
                "between the runs (compare.server_changed).",
            reference=f"{FINDINGS_REF}#compare.regression"))
    improved = [r for r in rows if r.verdict == "improvement"]
    if improved:
        out.append(Finding(
            id="compare.improvement", severity=Severity.INFO,
            title="improvement: " + _listed(improved),
            evidence=[_metric_evidence(r) for r in improved], role="symptom",
            why="The whole 95% interval of the change lies beyond the tolerance, on the better "
                "side.", reference=f"{FINDINGS_REF}#compare.improvement"))
    undecided = [r for r in rows if r.gate == "undecided"]
    if undecided:
        out.append(Finding(
            id="compare.inconclusive", severity=Severity.WARNING,
            title="undecided: " + ", ".join(r.label for r in undecided),
            evidence=[_metric_evidence(r) for r in undecided], role="symptom",
            why="The interval of these gated figures reaches past their tolerance, or a run is "
                "too short for them: the data shows neither a regression nor its absence.",
            fix="Longer runs (more requests narrow the within-run interval), repeated runs "
                "(BASE... --vs NEW...: the between-run interval), or a wider tolerance in "
                "--fail-on.", reference=f"{FINDINGS_REF}#compare.inconclusive"))
    return out


def _listed(rows: list[MetricRow]) -> str:
    text = ", ".join(f"{r.label} {change_text(r)}" for r in rows[:4])
    return text + (f" and {len(rows) - 4} more" if len(rows) > 4 else "")


def _metric_evidence(row: MetricRow) -> Evidence:
    value = f"{_value(row.base, row)} -> {_value(row.new, row)}: {change_text(row)}"
    if row.why:
        value += f" ({row.why})"
    return Evidence(row.label, value, "", f"{row.interval} interval, tolerance "
                    f"{row.tolerance * 100:g}{'%' if row.relative else ' points'}")


def _value(v: float | None, row: MetricRow) -> str:
    if v is None:
        return "n/a"
    return f"{v * 100:.2f}%" if not row.relative else f"{v:.4g} {row.unit}"


def layer_finding(sentence: str, part: LayerRow | None, layers: list[LayerRow],
                  state: list[StateRow], regression: bool) -> list[Finding]:
    if part is None:
        return []
    layer = LAYER_OF.get(part.key, "")
    evidence = [Evidence(f"{r.label} (mean)", f"{_ms(r.base_ms)} -> {_ms(r.new_ms)}", "ms",
                         r.source or "decomposition.json")
                for r in layers if r.total == part.total and r.delta_ms is not None]
    evidence += [Evidence(s.label, f"{_num(s.base, s.unit)} -> {_num(s.new, s.unit)}", "",
                          "metrics/snapshots.jsonl") for s in state]
    return [Finding(
        id="compare.layer_moved", severity=Severity.CRITICAL if regression else Severity.WARNING,
        title=sentence, evidence=evidence, layer=layer,
        why="Each run's decomposition splits its mean latency into the chain's parts; the part "
            "that moved most, in the direction of the total, is named with the server's gauges "
            "that say why.", fix=_LAYER_FIX.get(layer, ""),
        reference=f"{FINDINGS_REF}#compare.layer_moved")]


_LAYER_FIX = {"queue": "Requests wait for a slot in the batch: compare --max-num-seqs, "
                       "--max-num-batched-tokens and the KV cache size between the runs "
                       "(latscope diagnose names which one binds).",
              "decode": "Each token takes longer: a larger batch, another kernel path or "
                        "clock; latscope trace of both sides (trace --compare) shows which.",
              "prefill": "Prompts take longer to process: prompt length, prefix-cache hits or "
                         "chunked-prefill settings differ.",
              "frontend": "The API server's own work grew (tokenization, IPC, output): "
                          "check its CPU and --api-server-count.",
              "network": "The path between client and server changed: latscope net on both.",
              "client": "latscope's own delays moved: its runs are not reliable; give it "
                        "its own cores."}


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4g}"


def _num(v: float | None, unit: str) -> str:
    if v is None:
        return "not recorded"
    return f"{v:.0%}" if unit == "%" else f"{v:g}"


def diagnose_findings(changes: list[FindingChange]) -> list[Finding]:
    out = []
    appeared = [c for c in changes if c.change == "appeared"]
    if appeared:
        out.append(Finding(
            id="compare.finding_appeared", severity=Severity.WARNING,
            title=f"{len(appeared)} diagnose finding(s) appeared in NEW: {_ids(appeared)}",
            evidence=_change_evidence(appeared), role="symptom",
            why="A diagnose finding present in NEW only: something the server did differently.",
            fix="Read each finding's own section in docs/findings.md.",
            reference=f"{FINDINGS_REF}#compare.finding_appeared"))
    gone = [c for c in changes if c.change == "gone"]
    if gone:
        out.append(Finding(
            id="compare.finding_gone", severity=Severity.INFO,
            title=f"{len(gone)} diagnose finding(s) gone in NEW: {_ids(gone)}",
            evidence=_change_evidence(gone), role="symptom",
            why="A diagnose finding present in BASE only: what the change removed.",
            reference=f"{FINDINGS_REF}#compare.finding_gone"))
    return out


def _ids(changes: list[FindingChange]) -> str:
    return ", ".join(c.id for c in changes[:5]) + (" ..." if len(changes) > 5 else "")


def _change_evidence(changes: list[FindingChange]) -> list[Evidence]:
    return [Evidence(c.id, c.title, "", "; ".join(c.evidence[:3])) for c in changes]


def knee_finding(sentence: str, fell: bool | None) -> list[Finding]:
    if fell is None:
        return []
    return [Finding(
        id="compare.knee_moved", severity=Severity.WARNING if fell else Severity.INFO,
        title=sentence, layer="queue", role="symptom",
        why="The knee is the load past which throughput stops growing and latency climbs: the "
            "server's capacity at this workload.",
        fix="latscope diagnose on NEW names what limits it." if fell else "",
        reference=f"{FINDINGS_REF}#compare.knee_moved")]


def trace_finding(sentence: str, worse: bool | None) -> list[Finding]:
    if worse is None:
        return []
    return [Finding(
        id="compare.trace_moved", severity=Severity.WARNING if worse else Severity.INFO,
        title=sentence, layer="gpu", role="symptom",
        why="The GPU time of the two profiles, by breakdown and kernel category (latscope "
            "trace --compare's analysis).",
        fix="The kernel families table shows which kernels moved." if worse else "",
        reference=f"{FINDINGS_REF}#compare.trace_moved")]

"""A comparison's conclusions in the one ``Finding`` form (``findings.json`` of a compare run,
and what ``latscope show`` lists): not comparable, caveats, the server's changes, regressions,
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

_REF = "docs/findings.md#{}"


def _finding(id_: str, severity: Severity, title: str, evidence: list[Evidence], why: str,
             fix: str, layer: str = "", role: str = "cause") -> Finding:
    return Finding(id=id_, severity=severity, title=title, evidence=evidence, why=why, fix=fix,
                   reference=_REF.format(id_), layer=layer, role=role)


def difference_findings(diffs: list[Difference]) -> list[Finding]:
    out = []
    for action, id_, severity, title, why, fix in _DIFFERENCE_KINDS:
        chosen = [d for d in diffs if d.action == action]
        if not chosen:
            continue
        evidence = [Evidence(d.label, f"{d.base} -> {d.new}", "", d.key) for d in chosen]
        names = ", ".join(dict.fromkeys(d.label for d in chosen))
        out.append(_finding(id_, severity, title.format(names=names), evidence, why, fix,
                            layer="config"))
    return out


_DIFFERENCE_KINDS = (
    ("refuse", "compare.not_comparable", Severity.CRITICAL,
     "not comparable: the runs differ in {names}",
     "Two runs that measured different workloads, loads, models or hardware, or whose prefix "
     "cache or client served them differently, differ for those reasons first: a difference "
     "of their latencies would be read as the server's.",
     "Run both sides with the same workload and load on the same hardware (fresh --seed "
     "values on one server); --allow GROUP compares anyway, with the difference as a caveat."),
    ("caveat", "compare.caveat", Severity.WARNING, "compared despite: {names}",
     "These differ between the runs or could not be checked on one side; the changes below "
     "may hold them as well as the change under test.",
     "Record both runs alike (the same latscope, telemetry on both sides) to remove the caveat."),
    ("list", "compare.server_changed", Severity.INFO, "what differs: {names}",
     "Usually what the comparison is for (a new vLLM, a flag, a driver): listed so that a "
     "change below can be traced to it.", ""),
)


def metric_findings(rows: list[MetricRow]) -> list[Finding]:
    out = []
    for verdict, id_, severity in (("regression", "compare.regression", Severity.CRITICAL),
                                   ("improvement", "compare.improvement", Severity.INFO)):
        chosen = [r for r in rows if r.verdict == verdict]
        if chosen:
            out.append(_finding(
                id_, severity, f"{verdict}: " + ", ".join(
                    f"{r.label} {change_text(r)}" for r in chosen[:4]) +
                (f" and {len(chosen) - 4} more" if len(chosen) > 4 else ""),
                [_metric_evidence(r) for r in chosen],
                "The whole 95% interval of the change lies beyond the tolerance"
                f"{' (the gate fails on it)' if any(r.gate == 'fail' for r in chosen) else ''}.",
                "See which part of the chain moved (compare.layer_moved) and what differs "
                "between the runs (compare.server_changed)." if verdict == "regression" else "",
                role="symptom"))
    undecided = [r for r in rows if r.gate == "undecided"]
    if undecided:
        out.append(_finding(
            "compare.inconclusive", Severity.WARNING,
            "undecided: " + ", ".join(r.label for r in undecided),
            [_metric_evidence(r) for r in undecided],
            "The interval of these gated figures reaches past their tolerance, or a run is too "
            "short for them: the data can tell neither a regression nor its absence.",
            "Longer runs (more requests narrow the within-run interval) or repeated runs "
            "(BASE... --vs NEW...: the between-run interval), or a wider tolerance in "
            "--fail-on.", role="symptom"))
    return out


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
    evidence = [Evidence(f"{r.label} (mean)", f"{_ms(r.base_ms)} -> {_ms(r.new_ms)}", "ms",
                         r.source or "decomposition.json")
                for r in layers if r.total == part.total and r.delta_ms is not None]
    evidence += [Evidence(s.label, f"{_num(s.base, s.unit)} -> {_num(s.new, s.unit)}", "",
                          "metrics/snapshots.jsonl") for s in state]
    return [_finding("compare.layer_moved",
                     Severity.CRITICAL if regression else Severity.WARNING, sentence, evidence,
                     "The decomposition of each run splits its mean latency into the chain's "
                     "parts; the part that moved most, in the direction of the total, is named "
                     "with the server's gauges that say why.",
                     _LAYER_FIX.get(LAYER_OF.get(part.key, ""), ""),
                     layer=LAYER_OF.get(part.key, ""))]


_LAYER_FIX = {"queue": "Requests wait for a slot in the batch: compare --max-num-seqs, "
                       "--max-num-batched-tokens and the KV cache size between the runs "
                       "(latscope diagnose names which one binds).",
              "decode": "Each token takes longer: a larger batch, another kernel path or "
                        "clock; latscope trace of both sides (trace --compare) shows which.",
              "prefill": "Prompts take longer to process: prompt length, prefix-cache hits or "
                         "chunked-prefill settings differ.",
              "frontend": "The API server's own work grew (tokenization, IPC, output): "
                          "check its CPU and --api-server-count.",
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
    for change, id_, severity in (("appeared", "compare.finding_appeared", Severity.WARNING),
                                  ("gone", "compare.finding_gone", Severity.INFO)):
        chosen = [c for c in changes if c.change == change]
        if chosen:
            out.append(_finding(
                id_, severity, f"{len(chosen)} finding(s) {change} in NEW: " +
                ", ".join(c.id for c in chosen[:5]),
                [Evidence(c.id, c.title, "", "; ".join(c.evidence[:3])) for c in chosen],
                "A diagnose finding present on one side only: what the server did differently.",
                "Read the finding's own section in docs/findings.md." if change == "appeared"
                else "", role="symptom"))
    return out


def knee_finding(sentence: str, fell: bool | None) -> list[Finding]:
    if fell is None:
        return []
    return [_finding("compare.knee_moved", Severity.WARNING if fell else Severity.INFO,
                     sentence, [], "The knee is the load past which throughput stops growing "
                     "and latency climbs: the capacity of the server at this workload.",
                     "latscope diagnose on NEW names what limits it." if fell else "",
                     layer="queue", role="symptom")]


def trace_finding(sentence: str, worse: bool | None) -> list[Finding]:
    if worse is None:
        return []
    return [_finding("compare.trace_moved", Severity.WARNING if worse else Severity.INFO,
                     sentence, [], "The GPU time of the two profiles, by breakdown and "
                     "kernel category (latscope trace --compare).",
                     "The kernel families table shows which kernels moved." if worse else "",
                     layer="gpu", role="symptom")]

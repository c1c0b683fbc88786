"""Sweep and tune, rendered: the curve table, the knee/SLO/recommendation findings, the trials.

Numbers come from ``analysis.sweep`` / ``analysis.tune`` unchanged: latencies in ms, throughput
per second. ``sweep_findings`` turns a sweep's analysis into ``Finding``s so that it prints and
serialises like every other verb's diagnosis; the JSON file (``sweep.json``) holds every step,
the analysis and the findings and is rewritten after every step.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import orjson
from rich.console import Group
from rich.table import Table
from rich.text import Text

from latscope.analysis.knee import SloTerm, no_knee_reason
from latscope.analysis.sweep import THROUGHPUT, Step, SweepAnalysis, curve
from latscope.model import Evidence, Finding, Severity
from latscope.report.findings import findings_to_json
from latscope.report.text import compact_table

FINDINGS_REF = "docs/findings.md"
# Satopää et al., "Finding a 'Kneedle' in a Haystack", ICDCS Workshops 2011
KNEEDLE = "https://doi.org/10.1109/ICDCSW.2011.20"

LEAF_LABELS = {
    "ttft.send_lag": "send lag", "ttft.network": "net+frontend",
    "ttft.server.queue": "queue", "ttft.server.prefill": "prefill",
    "ttft.server.other": "tokenize+IPC", "e2e.decode": "decode",
}
LEAF_LAYER = {"ttft.send_lag": "client", "ttft.network": "network", "ttft.server.queue": "queue",
              "ttft.server.prefill": "prefill", "ttft.server.other": "frontend", "e2e.decode": "decode"}


def _ms(value: Any) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.0f}" \
        if value >= 100 else f"{value:.1f}"


def sweep_table(steps: Sequence[Step], analysis: SweepAnalysis, unit: str) -> Table:
    """The curve: one row per step, latencies in ms, the knee and the SLO limit marked."""
    table = compact_table(title=f"Throughput–latency curve by {unit} (latencies in ms)",
                          title_justify="left")
    for col in (("conc" if unit.startswith("conc") else "rate"), "req/s", "tok/s", "TTFT\np50",
                "TTFT\np99", "ITL\np50",
                "ITL\np99", "E2E\np50", "E2E\np99", "err", "note"):
        table.add_column(col, justify="left" if col == "note" else "right", no_wrap=True)
    knee = analysis.knee.load if analysis.knee else None
    for s in sorted(steps, key=lambda s: s.load):
        m = s.metrics
        notes = [n for n, on in (("knee", s.load == knee), ("SLO max", s.load == analysis.slo_load),
                                 ("bisect", s.phase == "refine")) if on]
        err = m.get("error_rate")
        table.add_row(f"{s.load:g}", f"{m.get(THROUGHPUT) or 0:.2f}",
                      f"{m.get('output_tokens_per_s') or 0:.0f}",
                      *(_ms(m.get(k)) for k in ("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms",
                                                "itl_p99_ms", "e2e_p50_ms", "e2e_p99_ms")),
                      "-" if err is None else f"{err:.0%}", " ".join(notes))
    return table


def decomposition_table(steps: Sequence[Step], unit: str) -> Table | None:
    """Mean ms per latency component and step (``analysis.decompose``): what grows with load."""
    keys = [k for k in LEAF_LABELS if any(k in s.decomposition for s in steps)]
    if not keys:
        return None
    table = compact_table(title="Mean ms per request, by component", title_justify="left")
    table.add_column(("conc" if unit.startswith("conc") else "rate"), justify="right")
    for k in keys:
        table.add_column(LEAF_LABELS[k].replace("+", "+\n"), justify="right")
    for s in sorted(steps, key=lambda s: s.load):
        table.add_row(f"{s.load:g}", *(_ms(s.decomposition.get(k)) for k in keys))
    return table


def sweep_findings(steps: Sequence[Step], analysis: SweepAnalysis, slo: Sequence[SloTerm],
                   unit: str, source: str) -> list[Finding]:
    """The sweep's conclusions as findings: knee, operating point, SLO limit, early stop."""
    findings: list[Finding] = []
    by_load = {s.load: s for s in steps}
    knee = analysis.knee
    if knee is None:
        pts = curve(steps, analysis.latency)
        reason = no_knee_reason([p.throughput for p in pts], [p.latency for p in pts]) or \
            "the curve is within 0.05 of a straight line"
        findings.append(Finding(
            "sweep.no_knee", Severity.WARNING, f"No knee found: {reason}",
            [Evidence("steps", len(steps), "", source),
             Evidence("highest_load", max((s.load for s in steps), default=None), "", source)],
            why="Kneedle needs at least 3 steps and a curve that bends away from a straight line.",
            fix="Sweep to a higher load (--max-load) or with more steps (--refine).",
            reference=f"{FINDINGS_REF}#sweep.no_knee; {KNEEDLE}", layer="queue"))
    else:
        at = by_load[knee.load]
        ev = [Evidence(unit, knee.load, "", source),
              Evidence("requests_per_s", at.metrics.get(THROUGHPUT), "req/s", source),
              Evidence(analysis.latency, at.metrics.get(analysis.latency), "ms", source),
              Evidence("kneedle_difference", round(knee.score, 3), "", knee.method),
              Evidence("refits_agreeing", round(knee.stability, 2), "", "leave-one-out / noise resamples")]
        growth = analysis.grows_at_knee
        top = next(iter(growth), None)
        if top is not None:
            ev.append(Evidence(f"{LEAF_LABELS.get(top, top)} growth past the knee", round(growth[top], 1),
                               "ms", f"decomposition of steps {knee.load:g} and next"))
        findings.append(Finding(
            "sweep.knee", Severity.INFO,
            f"Knee at {unit} {knee.load:g} (confidence {knee.confidence})", ev,
            why="Past the knee each extra unit of load buys little throughput and a lot of latency. "
                + "; ".join(knee.reasons),
            fix=(f"Run at {unit} {analysis.recommended:g}" if analysis.recommended is not None else "")
                + ("" if knee.measured_past else " (provisional: sweep higher loads to confirm)")
                + (f"; past the knee {LEAF_LABELS.get(top, top)} grows most: measure the server flags "
                   "that bound it with latscope tune" if top else ""),
            reference=f"{FINDINGS_REF}#sweep.knee; {KNEEDLE}",
            layer=LEAF_LAYER.get(top, "queue") if top else "queue",
            impact={"metric": f"{top}_mean_ms", "value": growth[top]} if top else None))
    if slo:
        terms = ", ".join(str(t) for t in slo)
        if analysis.slo_load is None:
            findings.append(Finding("sweep.slo_unmet", Severity.WARNING,
                                    f"No measured {unit} meets the SLO ({terms})",
                                    [Evidence("lowest_load", min(s.load for s in steps), "", source)],
                                    fix="Relax the SLO or lower the starting load (--start).", layer="config",
                                    reference=f"{FINDINGS_REF}#sweep.slo_unmet"))
        else:
            sev = Severity.INFO if analysis.slo_monotone else Severity.WARNING
            note = "" if analysis.slo_monotone else " (a lower load failed it: noisy curve, repeat)"
            findings.append(Finding("sweep.slo_limit", sev,
                                    f"Highest {unit} meeting the SLO ({terms}): {analysis.slo_load:g}{note}",
                                    [Evidence(t.metric, by_load[analysis.slo_load].metrics.get(t.metric), "",
                                              source) for t in slo], layer="config",
                                    reference=f"{FINDINGS_REF}#sweep.slo_limit"))
    last = next((s for s in steps if s.stop_reason), None)
    if last is not None and last.stop_reason.startswith("error rate"):
        findings.append(Finding("sweep.errors", Severity.WARNING,
                                f"Sweep stopped at {unit} {last.load:g}: {last.stop_reason}",
                                [Evidence("error_rate", last.metrics.get("error_rate"), "", last.run_dir)],
                                fix="Read the step's requests.jsonl error kinds.", layer="client",
                                reference=f"{FINDINGS_REF}#sweep.errors"))
    return findings


def sweep_document(steps: Sequence[Step], analysis: SweepAnalysis, findings: list[Finding],
                   meta: dict[str, Any]) -> dict[str, Any]:
    return {"meta": meta, "steps": [s.to_dict() for s in sorted(steps, key=lambda s: s.load)],
            "analysis": analysis.to_dict(), "findings": findings_to_json(findings)}


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomic write: a reader (or an interrupted run) never leaves half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    tmp.replace(path)


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if v == -math.inf:
            return "-inf"
        return f"{v:.0f}" if abs(v) >= 1000 else f"{v:.3g}"  # 1234, not 1.23e+03
    return str(v)


_PURPOSE = {"search": "search", "validate-baseline": "val A", "validate-candidate": "val B"}


def trials_table(trials: Sequence[Any], objective: str, latency: str, best: dict | None) -> Group:
    """Every trial (one server start each): the numbers it scored, its configuration last (it
    wraps at spaces), and why a trial failed as a numbered line under the table."""
    table = compact_table(title="Trials (one server start each; * best; val A = baseline, "
                                "val B = chosen)", title_justify="left")
    for col in ("#", "trial", "status", _short(objective), _short(latency), "TTFT\np99",
                "ITL\np99", "err", "SLO", "configuration"):
        table.add_column(col, no_wrap=col != "configuration", overflow="fold",
                         justify="left" if col in ("#", "trial", "status", "configuration")
                         else "right")
    errors = []
    for i, t in enumerate(trials):
        m = t.metrics
        err = m.get("error_rate")
        is_best = best == t.config and t.purpose == "search"
        if t.error:
            errors.append(f"#{i}: {t.error}")
        table.add_row(f"{i}*" if is_best else str(i), _PURPOSE.get(t.purpose, t.purpose),
                      t.status, _fmt(m.get(objective)), _fmt(m.get(latency)),
                      _fmt(m.get("ttft_p99_ms")), _fmt(m.get("itl_p99_ms")),
                      "-" if err is None else f"{err:.0%}",
                      ("met" if t.feasible else "missed") if t.status == "done" else "-",
                      " ".join(f"{k}={v}" for k, v in t.config.items()))
    return Group(table, *(Text(e) for e in errors))


def _short(key: str) -> str:
    """A metric key as a narrow two-line header: requests_per_s -> req/s, e2e_p99_ms -> E2E p99."""
    named = {"requests_per_s": "req/s", "output_tokens_per_s": "out\ntok/s",
             "total_tokens_per_s": "tok/s"}
    if key in named:
        return named[key]
    metric, _, rest = key.removesuffix("_ms").partition("_")
    return f"{metric.upper()}\n{rest}"


def validation_lines(validation: dict[str, Any]) -> list[str]:
    lines = [f"validation: {validation['repeats']} pairs, order {validation['order']} "
             f"(baseline {validation['baseline']} vs chosen {validation['candidate']})"]
    for key, res in validation["metrics"].items():
        if res.get("ci") is None:
            lines.append(f"  {key}: {res['verdict']} (change {_pct(res.get('change'))})")
            continue
        lo, hi = res["ci"]
        lines.append(f"  {key}: median {_fmt(res['baseline_median'])} -> {_fmt(res['candidate_median'])}, "
                     f"change {_pct(res['change'])} [{_pct(lo)}, {_pct(hi)}] "
                     f"({res['confidence']:.0%} t interval, n={res['n']}): {res['verdict']}")
    return lines


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1%}"

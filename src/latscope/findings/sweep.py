"""Rules on a sweep's analysis (``analysis.sweep``): the knee, the operating point, the SLO limit
and an early stop on errors, as findings that print and serialise like every other verb's
diagnosis (each id is documented in docs/findings.md).
"""

from __future__ import annotations

from typing import Sequence

from latscope.analysis.knee import SloTerm, no_knee_reason
from latscope.analysis.sweep import THROUGHPUT, Step, SweepAnalysis, curve
from latscope.model import Evidence, Finding, Severity

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

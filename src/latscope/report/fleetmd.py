"""report.md of a fleet diagnosis: the verdict, the fleet table, each replica's own verdict,
the router's part, the findings, Prometheus beside latscope, the notes."""

from __future__ import annotations

from typing import Any

from latscope.findings.impact import describe
from latscope.report.fleetmodel import FleetReport, PromqlCheck, ReplicaRow
from latscope.report.units import ms, pct

_ACTING = ("critical", "warning")


def _cell(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _n(v: Any, digits: int = 2) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def _ci(ci: list[Any] | None) -> str:
    return "n/a" if not ci else f"[{ms(ci[0])}, {ms(ci[1])}]"


def _p99(x: ReplicaRow) -> str:
    if x.ttft_p99_ms is None or not x.ttft_p99_bucket_ms:
        return "n/a"
    low, high = x.ttft_p99_bucket_ms
    return f"{ms(x.ttft_p99_ms)} (bucket {ms(low)}-{ms(high) if high is not None else '+Inf'})"


def replica_table(replicas: list[ReplicaRow]) -> str:
    head = ["replica", "status", "requests", "req/s", "TTFT mean [95% CI]", "TTFT p99",
            "queue (of TTFT)", "ITL mean", "running / waiting (mean)", "KV mean / peak",
            "preemptions"]
    rows = [[x.name, x.status, _n(x.requests, 0), _n(x.rate_per_s),
             f"{ms(x.ttft_mean_ms)} {_ci(x.ttft_ci_ms)}", _p99(x),
             f"{ms(x.queue_mean_ms)} ({pct(x.queue_share)})", ms(x.itl_mean_ms),
             f"{_n(x.mean_running)} / {_n(x.mean_waiting)}",
             f"{pct(x.kv_mean)} / {pct(x.kv_peak)}", _n(x.preemptions, 0)] for x in replicas]
    return _table(head, rows)


def _promql(checks: list[PromqlCheck]) -> str:
    rows = [[c.replica, c.metric, c.what, _fig(c.promql, c.what), _fig(c.latscope, c.what),
             {True: "yes", False: "**no**", None: "n/a"}[c.agree], c.note] for c in checks]
    return _table(["replica", "metric", "figure", "Prometheus", "latscope", "agree", "note"],
                  rows)


def _fig(v: float | None, what: str) -> str:
    if v is None:
        return "n/a"
    return f"{v:g}" if what == "count" else ms(v * 1000)


def fleet_markdown(r: FleetReport) -> str:
    from latscope.report.fleetwords import (
        promql_summary,
        router_sentence,
        source_line,
        window_line,
    )

    out = ["# latscope fleet report", "", f"{source_line(r)}. {window_line(r)}.", "",
           f"**{'Healthy' if r.verdict.healthy else 'Verdict'}:** {r.verdict.text}", ""]
    out += ["## Replicas", "", replica_table(r.replicas), ""]
    out += [f"- **{x.name}**: {_cell(x.verdict)}" for x in r.replicas] + [""]
    if r.router is not None:
        out += ["## The balancer's part", "", router_sentence(r) + ".", ""]
    acting = [f for f in r.findings if f.severity in _ACTING]
    other = [f for f in r.findings if f.severity not in _ACTING]
    out += ["## Findings", ""]
    if not acting:
        out += ["No fleet finding to act on.", ""]
    for i, f in enumerate(acting, 1):
        out += [f"{i}. **[{f.severity}] {_cell(f.title)}** (`{f.id}`)"]
        if f.impact:
            out += [f"   - impact: {describe(f.impact)}"]
        out += [f"   - {_cell(e.name)}: {_cell(e.value)} {_cell(e.unit)} ({_cell(e.source)})"
                for e in f.evidence]
        out += [f"   - why: {_cell(f.why)}", f"   - fix: {_cell(f.fix)}"]
    out += [f"- [{f.severity}] {_cell(f.title)} (`{f.id}`)" for f in other]
    out += ["", "## Prometheus beside latscope", "", promql_summary(r.promql) + "."]
    if r.promql:
        out += ["", _promql(r.promql)]
    if r.notes:
        out += ["", "## Notes", ""] + [f"- {_cell(n)}" for n in r.notes]
    out += ["", f"Run directory: `{r.run_dir}`", ""]
    return "\n".join(out)

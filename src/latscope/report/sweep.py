"""Sweep and tune, rendered: the curve table, the knee/SLO/recommendation findings, the trials.

Numbers come from ``analysis.sweep`` / ``analysis.tune`` unchanged: latencies in ms, throughput
per second. The sweep's findings are made by ``latscope.findings.sweep``; the JSON file
(``sweep.json``) holds every step, the analysis and the findings and is rewritten after every step.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from msgspec import UNSET
from rich.console import Group
from rich.table import Table
from rich.text import Text

from latscope.analysis.search import Config
from latscope.analysis.sweep import THROUGHPUT, Step, SweepAnalysis
from latscope.analysis.sweepfile import SweepFile, SweepMeta
from latscope.analysis.tune import Trial, Validation
from latscope.findings.rank import sort_findings
from latscope.findings.sweep import LEAF_LABELS
from latscope.model import Finding
from latscope.report.text import compact_table
from latscope.results import FindingEntry, section


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


def sweep_document(steps: Sequence[Step], analysis: SweepAnalysis, findings: list[Finding],
                   meta: SweepMeta | None) -> SweepFile:
    """sweep.json of ``latscope sweep``: steps by load, the analysis, the findings (most
    severe first)."""
    return SweepFile(meta=meta if meta is not None else UNSET,
                     steps=sorted(steps, key=lambda s: s.load), analysis=analysis,
                     findings=[section(f.to_dict(), FindingEntry) for f in sort_findings(findings)])


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if v == -math.inf:
            return "-inf"
        return f"{v:.0f}" if abs(v) >= 1000 else f"{v:.3g}"  # 1234, not 1.23e+03
    return str(v)


_PURPOSE = {"search": "search", "validate-baseline": "val A", "validate-candidate": "val B"}


def trials_table(trials: Sequence[Trial], objective: str, latency: str,
                 best: Config | None) -> Group:
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


def validation_lines(validation: Validation) -> list[str]:
    lines = [f"validation: {validation.repeats} pairs, order {validation.order} "
             f"(baseline {validation.baseline} vs chosen {validation.candidate})"]
    for key, res in validation.metrics.items():
        if res.ci is None:
            lines.append(f"  {key}: {res.verdict} (change {_pct(res.change)})")
            continue
        lo, hi = res.ci
        lines.append(f"  {key}: median {_fmt(res.baseline_median)} -> "
                     f"{_fmt(res.candidate_median)}, change {_pct(res.change)} [{_pct(lo)}, "
                     f"{_pct(hi)}] ({res.confidence:.0%} t interval, n={res.n}): {res.verdict}")
    return lines


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1%}"

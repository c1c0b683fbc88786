"""A comparison as Markdown (``report.md`` of a compare run): the same wording as the terminal
(``report.compare``), in tables a ticket or a pull request shows as they are."""

from __future__ import annotations

from latscope.analysis.compare_model import Comparison
from latscope.report.compare import (
    ACTIONS,
    change,
    interval,
    interval_note,
    status_line,
    title,
    value,
    verdict,
)


def _cell(text: object) -> str:
    """A table cell: pipes escaped, one line (log text may carry either)."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(c: Comparison) -> str:
    lines = [f"# latscope {title(c)}", "",
             f"- BASE: {', '.join(f'`{p}`' for p in c.base)}",
             f"- NEW: {', '.join(f'`{p}`' for p in c.new)}", "",
             f"**{_cell(status_line(c))}**", ""]
    if c.layer_sentence and c.status != "not comparable":
        lines += [f"Where: {c.layer_sentence}", ""]
    if c.reasons:
        lines += ["## Why", "", *(f"- {_cell(r)}" for r in c.reasons), ""]
    if c.differences:
        lines += ["## What differs between the runs", "", "| | what | BASE | NEW | why |",
                  "|---|---|---|---|---|"]
        lines += [f"| {ACTIONS.get(d.action, d.action)} | {_cell(d.label)} | {_cell(d.base)} | "
                  f"{_cell(d.new)} | {_cell(d.why)} |" for d in c.differences]
        lines.append("")
    if c.metrics:
        lines += ["## Figures", "", "| figure | BASE | NEW | change | 95% interval | verdict |",
                  "|---|--:|--:|--:|--:|---|"]
        lines += [f"| {r.label} | {value(r.base, r)} | {value(r.new, r)} | {change(r)} | "
                  f"{interval(r)} | {_cell(verdict(r))}{': ' + _cell(r.why) if r.why else ''} |"
                  for r in c.metrics]
        lines += ["", interval_note(c), ""]
    lines += _layers(c) + _sections(c)
    if c.notes:
        lines += ["## Notes", "", *(f"- {_cell(n)}" for n in c.notes), ""]
    if c.policy:
        lines += [f"Gate: `{', '.join(c.policy)}`", ""]
    return "\n".join(lines)


def _layers(c: Comparison) -> list[str]:
    lines: list[str] = []
    if c.layers:
        lines += ["## Where the time went (decomposition means)", "",
                  "| part | BASE ms | NEW ms | delta ms | of the change |",
                  "|---|--:|--:|--:|--:|"]
        lines += [f"| {'&nbsp;&nbsp;' if r.key != r.total else ''}{_cell(r.label)} | "
                  f"{_n(r.base_ms)} | {_n(r.new_ms)} | {_n(r.delta_ms, True)} | "
                  f"{'' if r.share is None else f'{r.share:.0%}'} |" for r in c.layers]
        lines.append("")
    if c.state:
        lines += ["## The server's gauges", "", "| gauge | BASE | NEW |", "|---|--:|--:|"]
        lines += [f"| {s.label} | {_g(s.base, s.unit)} | {_g(s.new, s.unit)} |"
                  for s in c.state]
        lines.append("")
    return lines


def _sections(c: Comparison) -> list[str]:
    lines: list[str] = []
    if c.sweep is not None:
        unit = "rate" if c.sweep.load_kind == "rate" else "concurrency"
        lines += ["## Curve against curve", "", c.sweep.sentence, "",
                  f"| {unit} | req/s BASE | req/s NEW | TTFT p99 BASE | TTFT p99 NEW |",
                  "|--:|--:|--:|--:|--:|"]
        lines += [f"| {p.load:g} | {_n(p.base.get('requests_per_s'))} | "
                  f"{_n(p.new.get('requests_per_s'))} | {_n(p.base.get('ttft_p99_ms'))} | "
                  f"{_n(p.new.get('ttft_p99_ms'))} |" for p in c.sweep.points]
        lines.append("")
    if c.diagnose is not None:
        lines += ["## Diagnose verdicts", "", f"- BASE: {_cell(c.diagnose.verdict_base)}",
                  f"- NEW: {_cell(c.diagnose.verdict_new)}", "",
                  "| finding | in NEW | title | evidence |", "|---|---|---|---|"]
        lines += [f"| `{f.id}` | {f.change} | {_cell(f.title)} | "
                  f"{_cell('; '.join(f.evidence[:2]))} |" for f in c.diagnose.findings]
        lines.append("")
    if c.trace is not None:
        lines += ["## GPU time (trace --compare)", "", "| | BASE ms | NEW ms | delta ms |",
                  "|---|--:|--:|--:|"]
        lines += [f"| {_cell(r.key)} | {_n(r.a_ns / 1e6)} | {_n(r.b_ns / 1e6)} | "
                  f"{_n(r.delta_ns / 1e6, True)} |"
                  for r in [*c.trace.breakdown, *c.trace.categories[:8]]]
        lines.append("")
    return lines


def _n(v: float | None, signed: bool = False) -> str:
    if v is None:
        return "-"
    return f"{v:+.4g}" if signed else f"{v:.4g}"


def _g(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    return f"{v:.0%}" if unit == "%" else f"{v:g}"

"""A comparison (``analysis.compare_model.Comparison``) in the terminal, and the wording every
renderer shares: a figure's value, its change and interval, a verdict with its gate.

Pure: the typed comparison in, text out. 80 columns when not a terminal (``make_console``).
"""

from __future__ import annotations

from rich.console import Console, Group, RenderableType
from rich.text import Text

from latscope.analysis.compare_model import Comparison, MetricRow, TraceDiff
from latscope.report.text import compact_table, titled

_STATUS = {"regression": "REGRESSION", "no regression": "NO REGRESSION",
           "inconclusive": "INCONCLUSIVE", "not comparable": "NOT COMPARABLE"}
ACTIONS = {"refuse": "refused", "caveat": "caveat", "list": "listed"}


def value(v: float | None, row: MetricRow) -> str:
    """A figure in its unit: '41.2 ms', '812 tok/s', '1.56%'."""
    if v is None:
        return "n/a"
    if not row.relative:
        return f"{v * 100:.2g}%" if v else "0%"
    if row.unit == "ms":
        return f"{v:.0f} ms" if abs(v) >= 100 else f"{v:.3g} ms"
    return f"{v:.3g} {row.unit}"


def signed(fraction: float) -> str:
    """A change in percent (or points): '+4.1', '-12.6', '+1812'."""
    v = fraction * 100
    return f"{v:+.0f}" if abs(v) >= 100 else f"{v:+.1f}"


def change(row: MetricRow) -> str:
    if row.change is None:
        return "n/a"
    return signed(row.change) + ("%" if row.relative else " pt")


def interval(row: MetricRow) -> str:
    """The interval the verdict used, '[+35.0, +48.1]%' ('' without one)."""
    chosen = row.between if row.interval == "between-run" else row.within
    if not chosen:
        return ""
    return f"[{signed(chosen[0])}, {signed(chosen[1])}]{'%' if row.relative else ' pt'}"


def verdict(row: MetricRow) -> str:
    """The verdict, and the gate's word where the policy names the figure."""
    return row.verdict + (f" (gate: {gate(row)})" if row.gate else "")


def gate(row: MetricRow) -> str:
    return {"fail": "fail", "undecided": "?", "pass": "pass"}.get(row.gate, "")


def title(c: Comparison) -> str:
    runs = f"{len(c.base)} run(s) against {len(c.new)}" if len(c.base) + len(c.new) > 2 else \
        "one run against one"
    return f"compare {c.kind}: {runs}"


def status_line(c: Comparison) -> str:
    return f"{_STATUS.get(c.status, c.status.upper())} (exit {c.exit_code}): {c.headline}"


def interval_note(c: Comparison) -> str:
    used = {r.interval for r in c.metrics if r.interval != "none"}
    words = {"within-run": "within-run (a block bootstrap over each run's requests)",
             "between-run": "between-run (Welch's t over the runs' figures)"}
    return ("95% intervals, the verdict's: " + "; ".join(words[u] for u in sorted(used))
            if used else "")


def print_comparison(c: Comparison, console: Console) -> None:
    console.print(title(c), markup=False)
    for label, paths in (("BASE", c.base), ("NEW", c.new)):
        console.print(f"  {label}: {', '.join(paths)}", markup=False, highlight=False)
    console.print(status_line(c), markup=False, style="bold")
    if c.layer_sentence and c.status != "not comparable":
        console.print(f"where: {c.layer_sentence}", markup=False)
    if c.differences:
        console.print(differences_table(c))
    if c.metrics:
        console.print(metrics_table(c))
        note = interval_note(c)
        if note:
            console.print(note, markup=False, style="dim")
    for table in (layers_table(c), state_table(c)):
        if table is not None:
            console.print(table)
    _print_sections(c, console)
    for note in c.notes:
        console.print(f"note: {note}", markup=False, style="dim")
    if c.policy:
        console.print(f"gate: {', '.join(c.policy)}", markup=False, style="dim")


def differences_table(c: Comparison) -> RenderableType:
    table = compact_table()
    for col in ("", "what", "BASE", "NEW"):
        table.add_column(col, overflow="fold")
    for d in c.differences:
        table.add_row(ACTIONS.get(d.action, d.action), d.label, d.base, d.new)
    return titled("What differs between the runs", table)


def metrics_table(c: Comparison) -> RenderableType:
    table = compact_table()
    for col in ("figure", "BASE", "NEW", "change", "95% interval", "verdict", "gate"):
        table.add_column(col, justify="left" if col in ("figure", "verdict") else "right",
                         no_wrap=True)
    for r in c.metrics:
        table.add_row(r.label, value(r.base, r), value(r.new, r), change(r), interval(r),
                      r.verdict + (" *" if r.why else ""), gate(r))
    parts: list[RenderableType] = [table]
    whys = footnote(c.metrics)
    if whys:
        parts.append(Text("* " + whys, style="dim"))
    return titled("Figures, BASE -> NEW (gate: the policy's terms)", Group(*parts))


def footnote(rows: list[MetricRow]) -> str:
    """Why the starred figures are inconclusive, in one sentence: 'too short (64 requests on
    the shorter side): a p90 needs 100, a p99 1000'."""
    short = [r for r in rows if r.why.startswith("too short")]
    needs = dict.fromkeys(f"a {r.label.split()[-1]} needs {r.why.rpartition(' ')[2]}"
                          for r in short)
    other = list(dict.fromkeys(r.why for r in rows if r.why and r not in short))
    parts = []
    if short:
        n = short[0].why.split(": ", 1)[1].split(" on the")[0]
        parts.append(f"too short for an interval that holds ({n} on the shorter side): "
                     + ", ".join(needs))
    return "; ".join(parts + other)


_PARTS = {"ttft": "TTFT", "ttft.client": "latscope client", "ttft.network": "network",
          "ttft.server.queue": "queue", "ttft.server.prefill": "prefill",
          "ttft.server.other": "tokenize + IPC + output", "e2e": "E2E", "e2e.ttft": "TTFT",
          "e2e.decode": "decode"}


def part_label(key: str, label: str) -> str:
    """A decomposition part in a few words (its full label and source are in report.md)."""
    if key == "ttft.frontend":
        return "network + frontend" if "not split" in label else "HTTP frontend"
    return _PARTS.get(key, label)


def layers_table(c: Comparison) -> RenderableType | None:
    if not c.layers:
        return None
    table = compact_table()
    for col in ("part", "BASE", "NEW", "delta", "of change"):
        table.add_column(col, justify="left" if col == "part" else "right", overflow="fold")
    for r in c.layers:
        indent = "" if r.key == r.total else "  "
        table.add_row(indent + part_label(r.key, r.label), _ms(r.base_ms), _ms(r.new_ms), _signed(r.delta_ms),
                      f"{r.share:.0%}" if r.share is not None else "")
    return titled("Where the time went (decomposition means, ms)", table)


def state_table(c: Comparison) -> RenderableType | None:
    if not c.state:
        return None
    table = compact_table()
    for col in ("gauge", "BASE", "NEW"):
        table.add_column(col, justify="left" if col == "gauge" else "right")
    for s in c.state:
        table.add_row(s.label, _gauge(s.base, s.unit), _gauge(s.new, s.unit))
    return titled("The server's gauges over the run", table)


def _print_sections(c: Comparison, console: Console) -> None:
    if c.sweep is not None:
        console.print(sweep_table(c))
        console.print(c.sweep.sentence, markup=False)
    if c.diagnose is not None:
        console.print("Verdicts", style="bold")
        console.print(f"  BASE: {c.diagnose.verdict_base}", markup=False)
        console.print(f"  NEW:  {c.diagnose.verdict_new}", markup=False)
        for f in c.diagnose.findings:
            if f.change != "kept":
                console.print(f"  {f.change}: {f.id}: {f.title}", markup=False)
                for e in f.evidence[:2]:
                    console.print(f"      {e}", markup=False, style="dim")
    if c.trace is not None:
        console.print(trace_table(c.trace))


def sweep_table(c: Comparison) -> RenderableType:
    assert c.sweep is not None
    unit = "rate" if c.sweep.load_kind == "rate" else "conc"
    table = compact_table()
    for col in (unit, "req/s", "TTFT p50 ms", "TTFT p99 ms", "E2E p99 ms"):
        table.add_column(col, justify="right")
    for p in c.sweep.points:
        table.add_row(f"{p.load:g}", *(f"{_short(p.base.get(k))} / {_short(p.new.get(k))}"
                                       for k in ("requests_per_s", "ttft_p50_ms",
                                                 "ttft_p99_ms", "e2e_p99_ms")))
    return titled("Curve against curve (BASE / NEW)", table)


def trace_table(trace: TraceDiff) -> RenderableType:
    table = compact_table()
    for col in ("", "BASE", "NEW", "delta"):
        table.add_column(col, justify="left" if not col else "right", overflow="fold")
    for row in [*trace.breakdown, *trace.categories[:6]]:
        table.add_row(row.key, _ms(row.a_ns / 1e6), _ms(row.b_ns / 1e6),
                      _signed(row.delta_ns / 1e6))
    return titled(f"GPU time: {trace.a.name} -> {trace.b.name} (ms)", table)


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def _short(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"


def _signed(v: float | None) -> str:
    return "" if v is None else f"{v:+.0f}" if abs(v) >= 100 else f"{v:+.3g}"


def _gauge(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    return f"{v:.0%}" if unit == "%" else f"{v:g}"

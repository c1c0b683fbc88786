"""Terminal tables for server observation: the latency decomposition, a parsed server log's
configuration and stats, and the ``/metrics`` scraper's own overhead.

Milliseconds in tables. A histogram quantile is printed as its interpolated value followed by the
bucket ``[lower-upper]`` it lies in: the true value can be anywhere in it, so the error bound is
the bucket's width. In the first bucket only ``<= upper`` is printed (interpolating from 0 there
would suggest a precision the page does not have).
"""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.table import Table

from latscope.analysis.decompose import Component, Decomposition
from latscope.report.text import compact_table, make_console, room_left, titled
from latscope.server.logs import ServerLog


def _num_ms(value: float) -> str:
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _ms(value: float | None, error: float | None = None, lower: float | None = None) -> str:
    """A value; a histogram quantile as its interpolated value and the bucket it lies in."""
    if value is None:
        return "-"
    if error is None or lower is None:
        return _num_ms(value)
    upper = lower + error
    if lower == 0:  # first bucket: interpolating from 0 says little; only the bound is known
        return f"<= {upper:.4g}"
    return f"{_num_ms(value)} [{lower:.4g}-{upper:.4g}]"


def _tree_order(components: list[Component]) -> list[tuple[Component, str]]:
    """Components depth first along their ``parent`` links, each with its tree prefix
    (``├─ ``, ``│  └─ ``); a parent key that is not in the list makes a root."""
    keys = {c.key for c in components}
    children: dict[str | None, list[Component]] = {}
    for c in components:
        children.setdefault(c.parent if c.parent in keys else None, []).append(c)
    out: list[tuple[Component, str]] = []

    def walk(parent: str | None, lead: str) -> None:
        kids = children.get(parent, [])
        for i, c in enumerate(kids):
            last = i == len(kids) - 1
            out.append((c, "" if parent is None else lead + ("└─ " if last else "├─ ")))
            walk(c.key, "" if parent is None else lead + ("   " if last else "│  "))

    walk(None, "")
    return out


def _source_notes(components: list[Component]) -> dict[str, int]:
    """Each distinct source (with its caveat) numbered in order of first use."""
    notes: dict[str, int] = {}
    for c in components:
        notes.setdefault(_note_text(c), len(notes) + 1)
    return notes


def _note_text(c: Component) -> str:
    return c.source + (f" -- {c.note}" if c.note else "")


def decomposition_table(result: Decomposition, width: int = 80) -> Table:
    """The decomposition as an indented tree, one row per component: label and its source
    note ``[n]``, mean ms, share of the root (client TTFT or E2E); p50/p99 (a histogram
    quantile with its bucket) and n where the width allows. The notes are ``decomposition_notes``."""
    rows = _tree_order(result.components)
    notes = _source_notes(result.components)
    dominant = {result.dominant_ttft, result.dominant_e2e}
    labels = [f"{prefix}{c.label} [{notes[_note_text(c)]}]" + (" *" if c.key in dominant else "")
              for c, prefix in rows]
    cols: dict[str, list[str]] = {
        "mean ms": [_ms(c.mean_ms) for c, _ in rows],
        "share": [_share(c) for c, _ in rows],
        "p50 ms": [_ms(c.p50_ms, c.p50_error_ms, c.p50_lower_ms) for c, _ in rows],
        "p99 ms": [_ms(c.p99_ms, c.p99_error_ms, c.p99_lower_ms) for c, _ in rows],
        "n": ["" if c.count is None else str(c.count) for c, _ in rows],
    }
    label_width = max((len(x) for x in labels), default=0)
    shown = ["mean ms", "share"]
    for optional in (["p50 ms", "p99 ms"], ["n"]):
        trial = shown + optional
        if room_left(width, [[name, *cols[name]] for name in trial]) >= label_width:
            shown = trial
    table = compact_table()
    table.add_column("component", no_wrap=True)
    for name in shown:
        table.add_column(name, justify="right", no_wrap=True)
    for i, label in enumerate(labels):
        table.add_row(label, *(cols[name][i] for name in shown))
    return table


def _share(c: Component) -> str:
    """The share of the root; one outside 0-100 % is impossible and is not printed ("?")."""
    if c.share is None or c.parent is None:
        return ""
    return f"{c.share:.0%}" if 0 <= c.share <= 1 else "?"


def decomposition_notes(result: Decomposition) -> Table:
    """The numbered sources under the tree: ``[n] text``, wrapped with a hanging indent."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True, justify="right")
    grid.add_column(overflow="fold")
    for text, number in _source_notes(result.components).items():
        grid.add_row(f"[{number}]", text)
    return grid


def print_decomposition(result: Decomposition, console: Console | None = None) -> None:
    console = console or make_console()
    console.print("[bold]Where the latency goes[/bold] (mean ms; share of client TTFT / E2E; "
                  "* = largest part)")
    console.print(decomposition_table(result, console.width))
    console.print(decomposition_notes(result), highlight=False)
    if any(_share(c) == "?" for c in result.components):
        console.print("? = share outside 0-100 %: not printed (the figures it is computed from "
                      "disagree by more than the part itself)")
    window = f"{result.window_s:.1f} s" if result.window_s is not None else "n/a"
    finished = "-" if result.server_requests is None else f"{result.server_requests:g}"
    console.print(f"[dim]server window {window}; server figures from {result.server_source}; "
                  f"client requests {result.client_requests}, server-finished {finished}[/dim]")
    g = result.gauges
    if g and g.get("running_max") is not None:
        kv = g.get("kv_cache_usage_max")
        console.print(f"[dim]server gauges at the scrapes: running max {g['running_max']:g}, "
                      f"waiting max {g.get('waiting_max') or 0:g}, KV cache usage max "
                      f"{'-' if kv is None else f'{kv:.1%}'} (time series: server_timeseries.json)"
                      f"[/dim]")
    for note in result.notes:
        console.print(f"[yellow]note:[/yellow] {note}")
    if result.scrape:
        console.print(f"[dim]{scrape_overhead_text(result.scrape)}[/dim]")
    if result.findings:
        from latscope.report.findings import print_findings

        print_findings(result.findings, console, title="Server findings")


_CONFIG_KEYS = ("version", "max_num_seqs", "max_num_batched_tokens", "chunked_prefill",
                "prefix_caching", "enforce_eager", "cudagraph_mode", "attention_backend",
                "kv_device", "kv_cache_tokens", "max_concurrency", "max_model_len",
                "tensor_parallel_size", "async_scheduling", "log_level", "request_logging",
                "profiler_enabled", "unknown_env_vars")


def log_config_table(log: ServerLog, width: int = 80) -> Group:
    table = compact_table()
    table.add_column("setting", no_wrap=True)
    table.add_column("value", overflow="fold")
    table.add_column("line", justify="right", no_wrap=True)
    for key in _CONFIG_KEYS:
        value = log.config.get(key)
        shown = "[dim]not in log[/dim]" if value is None else str(value)
        table.add_row(key, shown, str(log.config_lines.get(key, "")))
    args = log.config.get("non_default_args")
    if isinstance(args, dict):
        short = {k: v for k, v in args.items() if len(str(v)) < 80}
        table.add_row("non-default args", ", ".join(f"{k}={v}" for k, v in short.items()),
                      str(log.config_lines.get("non_default_args", "")))
    return titled(f"Server configuration read from {log.path}", table)


def log_stats_table(log: ServerLog, *, limit: int = 40) -> Group:
    """The periodic stats lines (busy ones first when there are more than ``limit``)."""
    points = log.stats
    busy = [p for p in points if (p.running or 0) or (p.waiting or 0)]
    shown = busy if len(points) > limit else points
    title = (f"Periodic stats ({len(shown)} of {len(points)} lines"
             f"{', busy ones' if shown is busy and len(points) > limit else ''})")
    table = compact_table()
    for name in ("time", "line", "run", "wait", "KV %", "prompt tok/s", "gen tok/s",
                 "prefix hit %", "preempt"):
        table.add_column(name, justify="left" if name == "time" else "right", no_wrap=True)
    for p in shown[-limit:]:
        table.add_row(p.timestamp, str(p.line), _int(p.running), _int(p.waiting),
                      _num(p.kv_usage_pct), _num(p.prompt_tps), _num(p.generation_tps),
                      _num(p.prefix_hit_pct), _int(p.preemptions))
    return titled(title, table)


def _int(value: int | None) -> str:
    return "-" if value is None else str(value)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def line_rate_text(log: ServerLog) -> str:
    r = log.line_rate
    per_s = "-" if r.lines_per_s is None else f"{r.lines_per_s:.1f}"
    peak = "-" if r.peak_lines_per_s is None else f"{r.peak_lines_per_s:.1f}"
    per_req = "-" if r.lines_per_request is None else f"{r.lines_per_request:.2f}"
    return (f"{r.total_lines} lines over {r.span_s:.0f} s ({per_s} lines/s, busiest 10 s: {peak}"
            f" lines/s); levels {r.by_level}; {r.requests} requests, {per_req} lines per request "
            f"(access log {r.access_log_lines}, request lines {r.request_lines}, "
            f"per-step lines {r.step_lines})")


def scrape_overhead_text(summary: dict[str, Any]) -> str:
    if not summary:
        return "metrics scraper: not run"
    parts = [f"metrics scraper: {summary.get('status')}, {summary.get('scrapes')} scrapes every "
             f"{summary.get('interval_s')} s"]
    labels = {"scrape_ms": "HTTP scrape", "bytes": "page",
              "parse_ms": f"parse ({summary.get('parsed', 'after the run')})"}
    for key, unit in (("scrape_ms", "ms"), ("bytes", "B"), ("parse_ms", "ms")):
        if summary.get(key):
            parts.append(f"{labels[key]} mean {summary[key]['mean']:.3g} {unit}")
    if summary.get("failures"):
        parts.append(f"{summary['failures']} failed ({'; '.join(summary.get('errors', [])[:2])})")
    return ", ".join(parts)

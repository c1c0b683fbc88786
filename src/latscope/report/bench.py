"""Terminal tables for a ``bench`` summary (summary.json as its model reads it,
``runfiles.BenchSummary``: ``latscope.stats``' figures plus the runner's ``client`` and
``workload`` sections). Latencies in ms, rates per second; every row is defined in
``docs/metrics.md``."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from latscope.report.text import make_console
from latscope.runfiles import BenchSummary, ClientFigures, Goodput, LoadShape, Rates


def _ms(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.1f}" if abs(value) >= 100 \
        else f"{value:.2f}"


def latency_table(summary: BenchSummary) -> Table:
    pcts = [f"p{p:g}" for p in summary.percentiles or (50, 90, 95, 99)]
    origin = {"sent": "from the send (closed loop)",
              "scheduled": "from the scheduled send (open loop)"}.get(
        summary.latency_origin or "", "from the send (closed) / schedule (open)")
    table = Table(title=f"Latency (ms, {origin})", title_justify="left",
                  box=box.SIMPLE_HEAD, pad_edge=False)
    # std is in summary.json; left out here so the table fits 80 columns
    for name in ("metric", "n", "mean", "min", *pcts, "max"):
        table.add_column(name, justify="left" if name == "metric" else "right", no_wrap=True)
    for dist, label in ((summary.ttft_ms, "TTFT"), (summary.tpot_ms, "TPOT"),
                        (summary.itl_ms, "ITL"), (summary.e2e_ms, "E2E"),
                        (summary.send_lag_ms, "send lag")):
        if not dist.get("count"):
            continue
        table.add_row(label, str(int(dist["count"] or 0)), *(_ms(dist.get(k)) for k in
                                                              ("mean", "min", *pcts, "max")))
    return table


def groups_table(summary: BenchSummary) -> Table | None:
    groups = summary.by_group or {}
    if not groups:
        return None
    table = Table(title="By workload group (ms)", title_justify="left", box=box.SIMPLE_HEAD,
                  pad_edge=False)
    for name in ("group", "done", "failed", "TTFT p50", "TTFT p99", "TPOT p50", "E2E p50",
                 "E2E p99"):
        table.add_column(name, justify="left" if name == "group" else "right", no_wrap=True)
    for name, g in groups.items():
        table.add_row(name, str(g.requests.completed), str(g.requests.failed),
                      _ms(g.ttft_ms.get("p50")), _ms(g.ttft_ms.get("p99")),
                      _ms(g.tpot_ms.get("p50")), _ms(g.e2e_ms.get("p50")),
                      _ms(g.e2e_ms.get("p99")))
    return table


def totals_table(summary: BenchSummary) -> Table:
    table = Table(title="Throughput and requests", title_justify="left", show_header=False,
                  box=None, pad_edge=False)
    table.add_column("what", overflow="fold")
    table.add_column("value", justify="right", no_wrap=True)
    req, thr = summary.requests, summary.throughput
    table.add_row("requests completed / sent", f"{req.completed} / {req.total}")
    for kind, count in sorted(summary.errors.items()):
        table.add_row(f"  failed: {kind}", f"[red]{count}[/red]")
    if req.warmup_excluded:
        ramp = summary.load.ramp_requests_excluded if summary.load else None
        table.add_row("warm-up requests (excluded)", str(req.warmup_excluded))
        if ramp:
            table.add_row("  of them the stagger's ramp", str(ramp))
    table.add_row("duration (s)", _num(summary.duration_s, ".2f"))
    steady = "steady" in str(thr.window or "")
    table.add_row("requests/s (steady window)" if steady else "requests/s",
                  _num(thr.requests_per_s, ".2f"))
    overall = thr.overall if isinstance(thr.overall, Rates) else None
    if steady and overall is not None and overall.requests_per_s is not None:
        table.add_row("requests/s overall (with the drain)", _num(overall.requests_per_s, ".2f"))
    table.add_row("output tokens/s", _num(thr.output_tokens_per_s, ",.1f"))
    table.add_row("total tokens/s (in + out)", _num(thr.total_tokens_per_s, ",.1f"))
    tokens = summary.tokens
    source = ", ".join(f"{k}: {v}" for k, v in tokens.output_source.items())
    table.add_row("output tokens (source)", f"{tokens.output_total:,} ({source or '-'})")
    if isinstance(summary.goodput, Goodput):
        good = summary.goodput
        slo = ",".join(f"{k}<={v:g}" for k, v in good.slo_ms.items())
        table.add_row(f"goodput req/s (SLO {slo} ms)", _num(good.requests_per_s, ".2f"))
        table.add_row("SLO attainment", _num(good.attainment, ".1%"))
    client = summary.client
    if isinstance(client, ClientFigures):
        table.add_row("client CPU per output token (µs)",
                      _num(client.cpu_us_per_output_token, ".2f"))
        table.add_row("client CPU utilisation", _num(client.cpu_utilization, ".0%"))
        table.add_row("event-loop lag p50 / p99 (ms)",
                      f"{_ms(client.loop_lag_ms.get('p50'))} / "
                      f"{_ms(client.loop_lag_ms.get('p99'))}")
    return table


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_bench(summary: BenchSummary, console: Console | None = None) -> None:
    console = console or make_console()
    model = summary.model if isinstance(summary.model, str) else "?"
    endpoint = "chat/completions" if summary.endpoint == "chat" else "completions"
    load = summary.load if isinstance(summary.load, LoadShape) else LoadShape(mode="closed")
    console.print(f"[bold]{model}[/bold] /v1/{endpoint}  {_load_text(load)}")
    console.print(latency_table(summary))
    groups = groups_table(summary)
    if groups is not None:
        console.print(groups)
    console.print(totals_table(summary))
    workload = summary.workload if isinstance(summary.workload, dict) else {}
    for note in workload.get("notes", []):
        console.print(f"[yellow]note:[/yellow] {note}")
    ramp_note = summary.load.ramp_note if summary.load else None
    if ramp_note:
        console.print(f"[dim]note: {ramp_note}[/dim]")
    for warning in summary.client.warnings if isinstance(summary.client, ClientFigures) else []:
        console.print(f"[bold yellow]warning:[/bold yellow] {warning}")
    if summary.stream is False:
        console.print("[dim]not streaming: TTFT, ITL and TPOT are not measurable[/dim]")


def _load_text(load: LoadShape) -> str:
    held = load.mean_in_flight
    held_text = f" (held {held:.1f} on average)" if isinstance(held, (int, float)) else ""
    if load.mode == "open":
        cap = f", at most {load.concurrency} in flight" if load.concurrency else ""
        return (f"open loop {load.rate or 0:g} req/s (burstiness {load.burstiness or 1:g}){cap}"
                f"{held_text}")
    return f"closed loop, concurrency {load.concurrency or 1}{held_text}"

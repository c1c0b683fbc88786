"""report.md: the report for terminals and tickets, from the typed report (``report.model``).

Verdict first, then the ranked findings, the experiments with their intervals, the sweep table,
the TTFT decomposition of each load level as an indented tree, the trace and the stages. Prose
is wrapped at 100 columns; only a table may be wider, when its cells cannot be shorter. Text
from logs and servers is flattened to one line and its table-breaking ``|`` escaped.
"""

from __future__ import annotations

import textwrap
from typing import Any

from msgspec import UnsetType

from latscope.findings.impact import describe
from latscope.report import units
from latscope.report.model import (
    ClientSection,
    CrossRank,
    DecompositionView,
    Report,
    Sweep,
    TelemetrySeries,
    TimeSeries,
    TraceSection,
    WindowSection,
)
from latscope.report.schema import check_report, checks, component_tree, more, shown
from latscope.trace.names import short_kernel_names

WIDTH = 100
_KERNEL_CHARS = 70  # kernel names can run to 300 characters; the full name is in report.json
_MAX_POINTS = 60  # a passive window's intervals shown in its table


def render_markdown(report: Report) -> str:
    check_report(report)
    if not isinstance(report.window, UnsetType):  # a passive run: a window, not a sweep
        parts = [_header(report), _findings(report), _window(report.window),
                 _telemetry(report.telemetry), _trace(report.trace) if report.trace else "",
                 _cross_rank(report.cross_rank), _stages(report)]
        return "\n\n".join(p for p in parts if p).rstrip() + "\n"
    parts = [_header(report), _client(report.client), _findings(report),
             _experiments(report), _sweep(report.sweep),
             _decompositions(report.decompositions), _timeseries(report.timeseries),
             _telemetry(report.telemetry), _trace(report.trace),
             _cross_rank(report.cross_rank), _stages(report)]
    return "\n\n".join(p for p in parts if p).rstrip() + "\n"


def _one_line(text: Any) -> str:
    return " ".join(str("" if text is None else text).split())


def _text(text: Any) -> str:
    """Untrusted prose on one line; ``<`` escaped so a ticket shows markup instead of eating it."""
    return _one_line(text).replace("<", "\\<")


def _code(text: Any) -> str:
    """A code span that survives backticks inside (kernel names, commands)."""
    text = _one_line(text)
    fence = "``" if "`" in text else "`"
    return f"{fence} {text} {fence}" if fence == "``" else f"`{text}`"


def _block(text: Any) -> str:
    """Text inside a fenced block: a backtick run from the data must not close the fence."""
    return _one_line(text).replace("`", "'")


def _cell(text: Any) -> str:
    return _one_line(text).replace("|", "\\|")


def _wrap(text: str, indent: str = "", first: str = "") -> str:
    return textwrap.fill(_one_line(text), WIDTH, initial_indent=first, subsequent_indent=indent,
                         break_on_hyphens=False, break_long_words=False)


def _table(head: list[str], rows: list[list[str]], right: frozenset[int] | set[int] = frozenset()) -> str:
    cells = [[_cell(c) for c in row] for row in [head, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(head))]

    def line(row: list[str]) -> str:
        return "| " + " | ".join(c.rjust(w) if i in right else c.ljust(w)
                                 for i, (c, w) in enumerate(zip(row, widths))) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if i in right else "-" * (w + 2)
                          for i, w in enumerate(widths)) + "|"
    return "\n".join([line(cells[0]), rule, *(line(r) for r in cells[1:])])


def _header(r: Report) -> str:
    v = r.verdict
    assert v is not None  # check_report refuses a report without one
    label = "HEALTHY" if v.healthy else "VERDICT"
    lines = [f"# latscope {_text(r.kind or 'report')}", "",
             _wrap(f"**{label}:** {_text(v.text)}")]
    if v.measured().get("share") is not None:  # the impact in the one wording of every renderer
        lines.append(_wrap(f"({_text(describe(v.measured()))})"))
    t = r.target  # open: whatever was known about the server
    target = _text(t.get("url"))
    extra = [x for x in (_text(t.get("model")), _text(t.get("server"))) if x]
    if extra:
        target += f" ({', '.join(extra)})"
    if t.get("local"):
        target += ", started by latscope"
    if t.get("same_host") is not None:
        target += ", client on the same host" if t["same_host"] else ", client on another host"
    lines += ["", _wrap(f"Target: {target}", "  ", "- ")]
    if r.command:
        lines.append(f"- Command: {_code(r.command)}")
    lines.append(f"- Created: {_text(r.created)} by latscope {_text(r.latscope_version)}")
    return "\n".join(lines)


def _client(client: ClientSection | None) -> str:
    if client is None or client.reliable is not False:
        return ""
    text = ("**WARNING:** the load generator was not reliable in this run: "
            f"{_text(_known(client.why))}. "
            "Latencies below include the client's own delay, which is not the server's "
            f"(send lag p99 {units.ms(_known(client.send_lag_p99_ms))}, event-loop lag p99 "
            f"{units.ms(_known(client.loop_lag_p99_ms))}, CPU per token "
            f"{units.number(_known(client.cpu_per_token_us))} us, off the CPU while ready "
            f"{units.pct(_known(client.off_cpu_share))} of the run).")
    return _wrap(text, "> ", "> ")


def _known(value: Any) -> Any:
    """None for a key the report did not have (``UNSET``)."""
    return None if isinstance(value, UnsetType) else value


def _findings(r: Report) -> str:
    found = shown(r.findings)
    out = [f"## Findings ({len(found)}, most important first)"]
    if not found:
        out += ["", "Nothing found that costs latency."]
    for n, f in enumerate(found, 1):
        head = f"### {n}. [{f.severity.upper()}] {_text(f.title)}"
        # a heading cannot wrap: a title too long for one line is repeated in full below it
        out += ["", head if len(head) <= WIDTH else head[: WIDTH - 1] + "…", ""]
        if len(head) > WIDTH:
            out.append(_wrap(f"Title: {_text(f.title)}", "  ", "- "))
        meta = f"id {_code(f.id)}" + (f", layer {_text(f.layer)}" if f.layer else "")
        out.append(_wrap(meta, "  ", "- "))
        if f.impact:
            out.append(_wrap(f"**Impact:** {_text(describe(f.impact))}", "  ", "- "))
        if f.evidence:
            out.append("- Evidence:")
            for e in f.evidence:
                src = f" ({_text(e.source)})" if e.source else ""
                value = units.value_unit(e.value, e.unit or "")
                out.append(_wrap(f"{_code(e.name)} = {_text(value)}{src}", "    ", "  - "))
        for text, name in ((f.why, "Why"), (f.fix, "Fix"), (f.reference, "Reference")):
            if text:
                out.append(_wrap(f"{name}: {_text(text)}", "  ", "- "))
    other = more(r.findings)
    if other:
        out += ["", f"More information ({len(other)}):", ""]
        out += [_wrap(f"{_text(f.title)} ({_code(f.id)})"
                      + (f": {_text(describe(f.impact))}" if f.impact else ""), "  ", "- ")
                for f in other]
    done = checks(r.findings)
    if done:
        out += ["", f"Checks passed or not run ({len(done)}):", ""]
        out += [_wrap(f"{f.severity}: {_text(f.title)} ({_code(f.id)})", "  ", "- ")
                for f in done]
    return "\n".join(out)


def _experiments(r: Report) -> str:
    exps = r.experiments
    out = ["## Experiments (A/B, alternating arms, 95% interval of the change)", ""]
    if not exps:
        out.append("No fix was tried in this run.")
    for n, e in enumerate(exps, 1):
        result = f"**{e.words()}**"
        out.append(_wrap(f"{n}. {_code(e.change)}: {result}", "   "))
        out.append(_wrap(
            f"{_text(e.metric)} {units.number(e.a_mean)} -> "
            f"{units.number(e.b_mean)}: {units.signed_pct(e.change_pct)}, "
            f"95% interval {units.interval(e.ci95_pct)}", "     ", "   - "))
        guard = _known(e.guard)
        if guard is not None and guard.change_pct is not None:
            out.append(_wrap(
                f"guard {_text(guard.metric)}: {units.signed_pct(guard.change_pct)}"
                f", 95% interval {units.interval(guard.ci95_pct)}", "     ", "   - "))
        detail = [f"arms {' '.join(map(str, e.arms))}", f"{len(e.a_values)}+{len(e.b_values)} runs"]
        if e.warmup_excluded:
            detail.append("warm-up excluded")
        if e.prefix_cache_hit_rate:
            detail.append("prefix-cache hit rate " + ", ".join(
                f"{_text(arm)} {units.arm_share(v)}" for arm, v in e.prefix_cache_hit_rate.items()))
        if e.finding_id:
            detail.append(f"for {_code(e.finding_id)}")
        if e.note:
            detail.append(_text(e.note))
        out.append(_wrap("; ".join(detail), "     ", "   - "))
    if r.proposals:
        out += ["", "Proposed, not proven here (each is a hypothesis until its command shows it):",
                ""]
        for p in r.proposals:  # a command stays on one line, to be copied whole
            out += [f"- {_code(p.finding_id)}:", "", "  ```sh", f"  {_block(p.command)}", "  ```"]
    return "\n".join(out)


def _sweep(sweep: Sweep | None) -> str:
    if sweep is None or not sweep.points:
        return "## Sweep\n\nNo sweep: not measured in this run."
    kind, knee, rec = sweep.load_kind, sweep.knee, sweep.recommended
    rows = []
    for p in sweep.points:
        mark = " ".join(m for m, hit in (("knee", knee is not None and p.load == knee.load),
                                         ("recommended", rec is not None and p.load == rec.load),
                                         ("cold", not p.warm)) if hit)
        rows.append([units.load_label(kind, p.load), units.number(p.throughput_rps),
                     units.number(p.output_tok_s), units.ms(p.ttft_p50_ms),
                     units.ms(p.ttft_p99_ms), units.ms(p.e2e_p50_ms),
                     units.ms(p.e2e_p99_ms), units.ms(p.itl_p50_ms),
                     units.number(p.errors), mark])
    table = _table(["load", "req/s", "tok/s", "TTFT p50", "TTFT p99", "E2E p50", "E2E p99",
                    "ITL p50", "err", ""], rows, right=set(range(1, 9)))
    summary = []
    if knee is not None:
        # the sweep analysis' word ("high", "low"); it was printed as a share, "n/a"
        conf = f" ({_text(knee.confidence)} confidence)" if knee.confidence else ""
        summary.append(f"Knee at {units.load_label(kind, knee.load)}{conf}.")
    else:
        summary.append("No knee found in the loads measured.")
    if rec is not None:
        why = f" ({_text(rec.why)})" if rec.why else ""
        summary.append(f"Recommended load: {units.load_label(kind, rec.load)}{why}.")
    if sweep.cut:
        summary.append(f"Cut short: {_text(sweep.cut)}.")
    return f"## Sweep ({kind})\n\n{table}\n\n{_wrap(' '.join(summary))}"


def _decompositions(decs: list[DecompositionView]) -> str:
    if not decs:
        return "## Where TTFT goes\n\nNo decomposition: not measured in this run."
    out = ["## Where TTFT goes (mean ms, share of the client's mean TTFT or E2E)", "", "```text"]
    for n, d in enumerate(decs):
        out += [""] * bool(n) + [f"{_block(d.label)}:"]
        tree = component_tree(d.components)
        names = [("  " * (depth + 1)) + _block(c.label or c.key) for depth, c in tree]
        width = min(max((len(n) for n in names), default=0), WIDTH - 40)
        for name, (_, c) in zip(names, tree):
            if len(name) > width:
                name = name[: width - 1] + "…"
            mean, share = units.ms(c.mean_ms), units.pct(c.share)
            line = f"{name.ljust(width)} {mean:>10} {share:>6}"
            if c.note:
                line += f"  ({_block(c.note)})"
            out.append(line[:WIDTH])
    return "\n".join(out + ["```"])


def _window(w: WindowSection) -> str:
    """A passive window: the traffic, latencies with bounds, the split, spikes, the series."""
    from latscope.report import window as win

    out = [f"## Live traffic: {_text(w.label)}", "",
           _wrap(f"From {_text(w.started)}, {w.seconds:.0f} s. " + _text(win.traffic_line(w))),
           "", _wrap(_text(win.sent_line(w)) + ". " + _text(win.scrape_line(w)) + ".")]
    head, body = win.latency_table(w.latency)
    out += ["", _table(head, body, right={1, 2, 3, 4})]
    if w.split:
        out += ["", _table(["server TTFT", "mean", "share", "source"],
                           [[_text(c.label), units.ms(c.mean_ms), units.pct(c.share),
                             _text(c.source)] for c in w.split], right={1, 2})]
    spikes = win.spike_lines(w)
    if spikes:
        out += ["", "Spikes (intervals whose mean TTFT was 3x the median interval's or more):",
                ""] + [_wrap(_text(line), "  ", "- ") for line in spikes]
    step = max(1, -(-len(w.points) // _MAX_POINTS))  # ceil: at most _MAX_POINTS rows
    shown = [p for i, p in enumerate(w.points) if p.spike or i % step == 0]
    if step > 1:
        out += ["", f"Every {step}th interval, and every interval of a spike (all of them are "
                "in report.json and the chart of report.html):"]
    out += ["", _table(["t (s)", "done/s", "arrived/s", "running", "waiting", "KV",
                        "TTFT mean", "p50", "p99", "queue share", ""],
                       [_point_row(p) for p in shown], right={0, 1, 2, 3, 4, 5, 6, 7, 8, 9})]
    out += ["", "Not seen or not measured:", ""] + [_wrap(_text(u), "  ", "- ") for u in w.unseen]
    out += [_wrap(_text(n), "  ", "- ") for n in w.notes]
    return "\n".join(out)


def _point_row(p: Any) -> list[str]:
    return [units.number(p.t_s), units.number(p.finished_rps), units.number(p.arrivals_rps),
            units.number(p.running), units.number(p.waiting), units.pct(p.kv_usage),
            units.ms(p.ttft_mean_ms), units.ms(p.ttft_p50_ms), units.ms(p.ttft_p99_ms),
            units.pct(p.queue_share),
            "spike" if p.spike else ""]


def _timeseries(ts: TimeSeries | None) -> str:
    if ts is None or not ts.t_s:
        return "## Server over time\n\nNo server time series: not measured in this run."
    t = [x for x in ts.t_s if isinstance(x, (int, float))]
    rows = []
    for key, label in (("running", "running"), ("waiting", "waiting"),
                       ("kv_usage", "KV cache usage"), ("preemptions", "preemptions"),
                       ("client_in_flight", "in flight (client)"),
                       ("load_level", "load level (client)")):
        values = [v for v in getattr(ts, key) if isinstance(v, (int, float))]
        if not values:
            continue
        fmt = units.pct if key == "kv_usage" else units.number
        rows.append([label, fmt(min(values)), fmt(sum(values) / len(values)), fmt(max(values)),
                     fmt(values[-1])])
    span = f"{len(t)} samples over {units.number(max(t) - min(t))} s" if t else ""
    return (f"## Server over time ({span}; the chart is in report.html)\n\n"
            + _table(["series", "min", "mean", "max", "last"], rows, right={1, 2, 3, 4}))


def _telemetry(tel: TelemetrySeries | None) -> str:
    """The GPU series (``telemetry.series``): min, mean and max of each reading, per GPU."""
    if tel is None:
        return ""
    if tel.status != "ok":
        return f"## GPU over time\n\n{_wrap('No GPU telemetry: ' + _text(tel.why))}"
    rows = []
    for gpu in dict.fromkeys(tel.gpu or []):
        for series, label in ((tel.util_pct, "busy (%)"), (tel.sm_clock_mhz, "SM clock (MHz)"),
                              (tel.power_w, "power (W)"), (tel.mem_used_pct, "memory used (%)"),
                              (tel.temp_c, "temperature (C)")):
            values = [v for g, v in zip(tel.gpu or [], series or []) if g == gpu and v is not None]
            if values:
                rows.append([f"GPU{gpu} {label}", *(_gpu_number(v) for v in (
                    min(values), sum(values) / len(values), max(values)))])
    return ("## GPU over time\n\n"
            + _wrap(f"From {_text(tel.source)}; the chart is in report.html.")
            + "\n\n" + _table(["series", "min", "mean", "max"], rows, right={1, 2, 3}))


def _gpu_number(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 100 else units.number(value)


def _trace(trace: TraceSection | None) -> str:
    if trace is None:
        return "## GPU trace\n\nNo trace analysed in this run."
    out = ["## GPU trace", "",
           _wrap(f"From {_code(trace.source)}, a window of {units.ms(trace.window_ms)}.")]
    if trace.breakdown:
        out += ["", _wrap("Window: " + ", ".join(f"{k} {units.pct(v)}"
                                                 for k, v in trace.breakdown.items()))]
    if trace.categories:
        out += ["", _table(["category", "ms", "share"],
                           [[_text(_short(c.name, 40)), units.number(c.ms), units.pct(c.share)]
                            for c in trace.categories], right={1, 2})]
    kernels = trace.top_kernels
    if kernels:
        names = short_kernel_names([_one_line(k.name) for k in kernels], _KERNEL_CHARS)
        out += ["", _table(["kernel", "ms", "count"],
                           [[_code(name), units.number(k.ms), units.number(k.count)]
                            for name, k in zip(names, kernels)], right={1, 2})]
        if any(len(_one_line(k.name)) > _KERNEL_CHARS for k in kernels):
            out.append("(long kernel names shortened; full names in report.json)")
    return "\n".join(out)


def _cross_rank(section: CrossRank | None) -> str:
    if section is None:
        return ""
    from latscope.report.ranks import RANK_COLUMNS, cross_rank_sentences, rank_rows

    rows = rank_rows(section)
    return ("## Ranks\n\n" + _wrap("One profile trace per rank; comm is the union of "
                                   "communication kernels over the window, exposed the part not "
                                   "overlapped with compute, waiting the part of the collectives "
                                   "spent waiting for other ranks.") + "\n\n"
            + _table(list(RANK_COLUMNS), rows, right={1, 2, 3, 4, 5, 6}) + "\n\n"
            + "\n".join(_wrap(_text(s)) for s in cross_rank_sentences(section)))


def _stages(r: Report) -> str:
    out = []
    if r.stages:
        out += ["## Stages", "",
                _table(["stage", "status", "seconds", "note"],
                       [[_text(s.name), _text(s.status), units.number(s.seconds),
                         _text(_short(s.note, 60))] for s in r.stages], right={2})]
    if r.notes:
        out += ["", "## Notes", ""] + [_wrap(_text(n), "  ", "- ") for n in r.notes]
    return "\n".join(out).strip()


def _short(text: Any, limit: int) -> str:
    text = _one_line(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"

"""report.md: the report for terminals and tickets, from a report.json dict.

Verdict first, then the ranked findings, the experiments with their intervals, the sweep table,
the TTFT decomposition of each load level as an indented tree, the trace and the stages. Prose
is wrapped at 100 columns; only a table may be wider, when its cells cannot be shorter. Text
from logs and servers is flattened to one line and its table-breaking ``|`` escaped.
"""

from __future__ import annotations

import textwrap
from typing import Any

from latscope.analysis.tune import outcome
from latscope.findings.impact import describe
from latscope.report import units
from latscope.report.schema import actionable, check_report, checks, component_tree
from latscope.trace.names import short_kernel_names

WIDTH = 100
_KERNEL_CHARS = 70  # kernel names can run to 300 characters; the full name is in report.json


def render_markdown(report: dict[str, Any]) -> str:
    check_report(report)
    parts = [_header(report), _client(report.get("client")), _findings(report),
             _experiments(report), _sweep(report.get("sweep")),
             _decompositions(report.get("decompositions")), _timeseries(report.get("timeseries")),
             _telemetry(report.get("telemetry")), _trace(report.get("trace")),
             _cross_rank(report.get("cross_rank")), _stages(report)]
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


def _header(r: dict[str, Any]) -> str:
    v = r["verdict"]
    label = "HEALTHY" if v.get("healthy") else "VERDICT"
    lines = [f"# latscope {_text(r.get('kind') or 'report')}", "",
             _wrap(f"**{label}:** {_text(v['text'])}")]
    if v.get("share") is not None:  # the impact in the one wording every renderer uses
        lines.append(_wrap(f"({_text(describe(v))})"))
    t = r.get("target") or {}
    target = _text(t.get("url"))
    extra = [x for x in (_text(t.get("model")), _text(t.get("server"))) if x]
    if extra:
        target += f" ({', '.join(extra)})"
    if t.get("local"):
        target += ", started by latscope"
    if t.get("same_host") is not None:
        target += ", client on the same host" if t["same_host"] else ", client on another host"
    lines += ["", _wrap(f"Target: {target}", "  ", "- ")]
    if r.get("command"):
        lines.append(f"- Command: {_code(r['command'])}")
    lines.append(f"- Created: {_text(r.get('created'))} by latscope "
                 f"{_text(r.get('latscope_version'))}")
    return "\n".join(lines)


def _client(client: dict[str, Any] | None) -> str:
    if not client or client.get("reliable") is not False:
        return ""
    text = ("**WARNING:** the load generator was not reliable in this run: "
            f"{_text(client.get('why'))}. "
            "Latencies below include the client's own delay, which is not the server's "
            f"(send lag p99 {units.ms(client.get('send_lag_p99_ms'))}, event-loop lag p99 "
            f"{units.ms(client.get('loop_lag_p99_ms'))}, CPU per token "
            f"{units.number(client.get('cpu_per_token_us'))} us, off the CPU while ready "
            f"{units.pct(client.get('off_cpu_share'))} of the run).")
    return _wrap(text, "> ", "> ")


def _findings(r: dict[str, Any]) -> str:
    found = actionable(r.get("findings") or [])
    out = [f"## Findings ({len(found)}, most important first)"]
    if not found:
        out += ["", "Nothing found that costs latency."]
    for n, f in enumerate(found, 1):
        head = f"### {n}. [{f['severity'].upper()}] {_text(f.get('title'))}"
        # a heading cannot wrap: a title too long for one line is repeated in full below it
        out += ["", head if len(head) <= WIDTH else head[: WIDTH - 1] + "…", ""]
        if len(head) > WIDTH:
            out.append(_wrap(f"Title: {_text(f.get('title'))}", "  ", "- "))
        meta = f"id {_code(f.get('id'))}" + (f", layer {_text(f['layer'])}" if f.get("layer")
                                             else "")
        out.append(_wrap(meta, "  ", "- "))
        if f.get("impact"):
            out.append(_wrap(f"**Impact:** {_text(describe(f['impact']))}", "  ", "- "))
        if f.get("evidence"):
            out.append("- Evidence:")
            for e in f["evidence"]:
                src = f" ({_text(e.get('source'))})" if e.get("source") else ""
                value = units.value_unit(e.get("value"), e.get("unit") or "")
                out.append(_wrap(f"{_code(e.get('name'))} = {_text(value)}{src}", "    ",
                                 "  - "))
        for key, name in (("why", "Why"), ("fix", "Fix"), ("reference", "Reference")):
            if f.get(key):
                out.append(_wrap(f"{name}: {_text(f[key])}", "  ", "- "))
    done = checks(r.get("findings") or [])
    if done:
        out += ["", f"Checks passed or not run ({len(done)}):", ""]
        out += [_wrap(f"{f['severity']}: {_text(f.get('title'))} ({_code(f.get('id'))})", "  ",
                      "- ") for f in done]
    return "\n".join(out)


def _experiments(r: dict[str, Any]) -> str:
    exps = r.get("experiments") or []
    out = ["## Experiments (A/B, alternating arms, 95% interval of the change)", ""]
    if not exps:
        out.append("No fix was tried in this run.")
    for n, e in enumerate(exps, 1):
        result = f"**{outcome(e)}**"
        out.append(_wrap(f"{n}. {_code(e.get('change'))}: {result}", "   "))
        out.append(_wrap(
            f"{_text(e.get('metric'))} {units.number(e.get('a_mean'))} -> "
            f"{units.number(e.get('b_mean'))}: {units.signed_pct(e.get('change_pct'))}, "
            f"95% interval {units.interval(e.get('ci95_pct'))}", "     ", "   - "))
        guard = e.get("guard") or {}
        if guard.get("change_pct") is not None:
            out.append(_wrap(
                f"guard {_text(guard.get('metric'))}: {units.signed_pct(guard.get('change_pct'))}"
                f", 95% interval {units.interval(guard.get('ci95_pct'))}", "     ", "   - "))
        detail = [f"arms {' '.join(map(str, e.get('arms') or []))}",
                  f"{len(e.get('a_values') or [])}+{len(e.get('b_values') or [])} runs"]
        if e.get("warmup_excluded"):
            detail.append("warm-up excluded")
        hits = e.get("prefix_cache_hit_rate") or {}
        if hits:
            detail.append("prefix-cache hit rate " + ", ".join(
                f"{_text(arm)} {units.pct(v)}" for arm, v in hits.items()))
        if e.get("finding_id"):
            detail.append(f"for {_code(e['finding_id'])}")
        if e.get("note"):
            detail.append(_text(e["note"]))
        out.append(_wrap("; ".join(detail), "     ", "   - "))
    proposals = r.get("proposals") or []
    if proposals:
        out += ["", "Proposed, not proven here (each is a hypothesis until its command shows it):",
                ""]
        for p in proposals:  # a command stays on one line, to be copied whole
            out += [f"- {_code(p.get('finding_id'))}:", "", "  ```sh",
                    f"  {_block(p.get('command'))}", "  ```"]
    return "\n".join(out)


def _sweep(sweep: dict[str, Any] | None) -> str:
    if not sweep or not sweep.get("points"):
        return "## Sweep\n\nNo sweep: not measured in this run."
    kind = sweep.get("load_kind", "concurrency")
    knee, rec = sweep.get("knee") or {}, sweep.get("recommended") or {}
    rows = []
    for p in sweep["points"]:
        mark = " ".join(m for m, hit in (("knee", p.get("load") == knee.get("load")),
                                         ("recommended", p.get("load") == rec.get("load")),
                                         ("cold", p.get("warm") is False)) if hit)
        rows.append([units.load_label(kind, p.get("load")), units.number(p.get("throughput_rps")),
                     units.number(p.get("output_tok_s")), units.ms(p.get("ttft_p50_ms")),
                     units.ms(p.get("ttft_p99_ms")), units.ms(p.get("e2e_p50_ms")),
                     units.ms(p.get("e2e_p99_ms")), units.ms(p.get("itl_p50_ms")),
                     units.number(p.get("errors")), mark])
    table = _table(["load", "req/s", "tok/s", "TTFT p50", "TTFT p99", "E2E p50", "E2E p99",
                    "ITL p50", "err", ""], rows, right=set(range(1, 9)))
    summary = []
    if knee:
        conf = (f" (confidence {units.pct(knee['confidence'])})"
                if knee.get("confidence") is not None else "")
        summary.append(f"Knee at {units.load_label(kind, knee.get('load'))}{conf}.")
    else:
        summary.append("No knee found in the loads measured.")
    if rec:
        why = f" ({_text(rec['why'])})" if rec.get("why") else ""
        summary.append(f"Recommended load: {units.load_label(kind, rec.get('load'))}{why}.")
    if sweep.get("cut"):
        summary.append(f"Cut short: {_text(sweep['cut'])}.")
    return f"## Sweep ({kind})\n\n{table}\n\n{_wrap(' '.join(summary))}"


def _decompositions(decs: list[dict[str, Any]] | None) -> str:
    if not decs:
        return "## Where TTFT goes\n\nNo decomposition: not measured in this run."
    out = ["## Where TTFT goes (mean ms, share of the client's mean TTFT or E2E)", "", "```text"]
    for n, d in enumerate(decs):
        out += [""] * bool(n) + [f"{_block(d.get('label'))}:"]
        tree = component_tree(d.get("components") or [])
        names = [("  " * (depth + 1)) + _block(c.get("label") or c.get("key"))
                 for depth, c in tree]
        width = min(max((len(n) for n in names), default=0), WIDTH - 40)
        for name, (_, c) in zip(names, tree):
            if len(name) > width:
                name = name[: width - 1] + "…"
            mean, share = units.ms(c.get("mean_ms")), units.pct(c.get("share"))
            line = f"{name.ljust(width)} {mean:>10} {share:>6}"
            if c.get("note"):
                line += f"  ({_block(c['note'])})"
            out.append(line[:WIDTH])
    return "\n".join(out + ["```"])


def _timeseries(ts: dict[str, Any] | None) -> str:
    if not ts or not ts.get("t_s"):
        return "## Server over time\n\nNo server time series: not measured in this run."
    t = [x for x in ts["t_s"] if isinstance(x, (int, float))]
    rows = []
    for key, label in (("running", "running"), ("waiting", "waiting"),
                       ("kv_usage", "KV cache usage"), ("preemptions", "preemptions"),
                       ("client_in_flight", "in flight (client)"),
                       ("load_level", "load level (client)")):
        values = [v for v in ts.get(key) or [] if isinstance(v, (int, float))]
        if not values:
            continue
        fmt = units.pct if key == "kv_usage" else units.number
        rows.append([label, fmt(min(values)), fmt(sum(values) / len(values)), fmt(max(values)),
                     fmt(values[-1])])
    span = f"{len(t)} samples over {units.number(max(t) - min(t))} s" if t else ""
    return (f"## Server over time ({span}; the chart is in report.html)\n\n"
            + _table(["series", "min", "mean", "max", "last"], rows, right={1, 2, 3, 4}))


def _telemetry(tel: dict[str, Any] | None) -> str:
    if not tel:
        return ""
    if tel.get("status") != "ok":
        return f"## GPU over time\n\n{_wrap('No GPU telemetry: ' + _text(tel.get('why')))}"
    rows = []
    for gpu in dict.fromkeys(tel.get("gpu") or []):
        for key, label in (("util_pct", "busy (%)"), ("sm_clock_mhz", "SM clock (MHz)"),
                           ("power_w", "power (W)"), ("mem_used_pct", "memory used (%)"),
                           ("temp_c", "temperature (C)")):
            values = [v for g, v in zip(tel["gpu"], tel.get(key) or [])
                      if g == gpu and isinstance(v, (int, float))]
            if values:
                rows.append([f"GPU{gpu} {label}", *(_gpu_number(v) for v in (
                    min(values), sum(values) / len(values), max(values)))])
    return ("## GPU over time\n\n"
            + _wrap(f"From {_text(tel.get('source'))}; the chart is in report.html.")
            + "\n\n" + _table(["series", "min", "mean", "max"], rows, right={1, 2, 3}))


def _gpu_number(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 100 else units.number(value)


def _trace(trace: dict[str, Any] | None) -> str:
    if not trace:
        return "## GPU trace\n\nNo trace analysed in this run."
    out = ["## GPU trace", "",
           _wrap(f"From {_code(trace.get('source'))}, a window of "
                 f"{units.ms(trace.get('window_ms'))}.")]
    breakdown = trace.get("breakdown") or {}
    if breakdown:
        out += ["", _wrap("Window: " + ", ".join(f"{k} {units.pct(v)}"
                                                 for k, v in breakdown.items()))]
    cats = trace.get("categories") or []
    if cats:
        out += ["", _table(["category", "ms", "share"],
                           [[_text(_short(c.get("name"), 40)), units.number(c.get("ms")),
                             units.pct(c.get("share"))] for c in cats], right={1, 2})]
    kernels = trace.get("top_kernels") or []
    if kernels:
        names = short_kernel_names([_one_line(k.get("name")) for k in kernels], _KERNEL_CHARS)
        out += ["", _table(["kernel", "ms", "count"],
                           [[_code(name), units.number(k.get("ms")), units.number(k.get("count"))]
                            for name, k in zip(names, kernels)], right={1, 2})]
        if any(len(_one_line(k.get("name"))) > _KERNEL_CHARS for k in kernels):
            out.append("(long kernel names shortened; full names in report.json)")
    return "\n".join(out)


def _cross_rank(section: dict[str, Any] | None) -> str:
    if not section:
        return ""
    from latscope.report.ranks import RANK_COLUMNS, cross_rank_sentences, rank_rows

    rows = rank_rows(section)
    return ("## Ranks\n\n" + _wrap("One profile trace per rank; comm is the union of "
                                   "communication kernels over the window, exposed the part not "
                                   "overlapped with compute, waiting the part of the collectives "
                                   "spent waiting for other ranks.") + "\n\n"
            + _table(list(RANK_COLUMNS), rows, right={1, 2, 3, 4, 5, 6}) + "\n\n"
            + "\n".join(_wrap(_text(s)) for s in cross_rank_sentences(section)))


def _stages(r: dict[str, Any]) -> str:
    out = []
    if r.get("stages"):
        out += ["## Stages", "",
                _table(["stage", "status", "seconds", "note"],
                       [[_text(s.get("name")), _text(s.get("status")),
                         units.number(s.get("seconds")), _text(_short(s.get("note"), 60))]
                        for s in r["stages"]], right={2})]
    if r.get("notes"):
        out += ["", "## Notes", ""] + [_wrap(_text(n), "  ", "- ") for n in r["notes"]]
    return "\n".join(out).strip()


def _short(text: Any, limit: int) -> str:
    text = _one_line(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"

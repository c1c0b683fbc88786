"""The report's charts: Vega-Lite specs built from the report dict, rendered to inline SVG.

Why Vega-Lite rendered server-side (vl-convert, measured; see docs/report.md): the SVG needs no
JavaScript at all, so the page is small (a full report is ~150 KB against 4.8 MB for plotly.js
alone), opens offline, and reads the same in a browser, a mail client or a ticket attachment.
The specs are plain dicts (Vega-Lite's own JSON), which spares altair and its dependencies.

Each ``*_spec`` function is pure and returns None when the report has nothing to draw; ``to_svg``
renders one. Data values (kernel names, labels) may come from logs or servers: they are passed as
data, never as expressions, and Vega's SVG renderer escapes them as text.
"""

from __future__ import annotations

from typing import Any

from latscope.report.model import (
    DecompositionView,
    Experiment,
    Sweep,
    SweepPoint,
    TelemetrySeries,
    TimeSeries,
    TraceSection,
)
from latscope.report.schema import ttft_leaves
from latscope.report.units import load_label

WIDTH = 620
# One colour per TTFT part, so a part keeps its colour across the load levels and reports.
_PART_ORDER = ("ttft.client", "ttft.send_lag", "ttft.network", "ttft.frontend",
               "ttft.server.queue", "ttft.server.prefill", "ttft.server.other")
_BREAKDOWN = {"compute": "#4c78a8", "exposed_comm": "#f58518", "exposed_copy": "#e45756",
              "idle": "#bab0ac"}
# Labels are laid out with Arial-like metrics (what vl-convert measures "sans-serif" with); the
# page's CSS asks for the same metric-compatible fonts so a label fits where it was measured.
_CONFIG = {
    "font": "sans-serif",
    "view": {"stroke": None},
    "axis": {"labelFontSize": 11, "titleFontSize": 12, "gridColor": "#eee"},
    "legend": {"labelFontSize": 11, "titleFontSize": 12, "labelLimit": 320, "orient": "bottom",
               "columns": 3},
    "title": {"fontSize": 14, "anchor": "start"},
}


def to_svg(spec: dict[str, Any]) -> str:
    """Render a Vega-Lite spec to an SVG string; inline data only, no URL may be fetched."""
    import vl_convert  # 0.9 s to start its JS engine once: imported only when a report is drawn

    # padding: room for labels where a browser's fallback font is wider than the one measured
    return vl_convert.vegalite_to_svg({"padding": 12, **spec, "config": _CONFIG},
                                      allowed_base_urls=[])


def _num(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _at_load(points: list[SweepPoint], load: Any, key: str) -> float | None:
    """``key`` at ``load``: the measured point, else linear between its neighbours by load."""
    pts = sorted(((p.load, v) for p in points if _num(p.load) and _num(v := getattr(p, key))),
                 key=lambda lv: lv[0])
    if not _num(load) or not pts:
        return None
    for (lo, lo_v), (hi, hi_v) in zip(pts, pts[1:]):
        if lo <= load <= hi:
            if hi == lo:
                return lo_v
            return lo_v + (load - lo) / (hi - lo) * (hi_v - lo_v)
    return next((v for at, v in pts if at == load), None)


def sweep_spec(sweep: Sweep | None) -> dict[str, Any] | None:
    """The throughput-latency curve, and throughput, TTFT and E2E against the load offered,
    with the knee and the recommended load marked on each."""
    if sweep is None:
        return None
    points = sorted((p for p in sweep.points if _num(p.load)), key=lambda p: p.load)
    if not points:
        return None
    kind = sweep.load_kind
    unit = "req/s offered" if kind == "rate" else "concurrency"
    marks = [{"load": m.load, "label": f"{name} {load_label(kind, m.load)}",
              "rps": _at_load(points, m.load, "throughput_rps"),
              "ttft": _at_load(points, m.load, "ttft_p99_ms")}
             for name, m in (("knee", sweep.knee), ("recommended", sweep.recommended))
             if m is not None and _num(m.load)]
    loads = [p.load for p in points]
    log_x = min(loads) > 0 and max(loads) / min(loads) >= 8  # doubling steps read best on log2
    x_load = {"field": "load", "type": "quantitative", "title": unit,
              "scale": {"type": "log", "base": 2} if log_x else {"zero": False}}

    def rows(keys: tuple[str, ...]) -> list[dict[str, Any]]:
        return [{"load": p.load, "rps": p.throughput_rps, "v": getattr(p, k),
                 "series": _SWEEP_SERIES[k], "at": load_label(kind, p.load)}
                for p in points for k in keys if _num(getattr(p, k))]

    panels = [p for p in (
        _curve_panel(rows(("ttft_p50_ms", "ttft_p99_ms")), marks),
        _load_panel("throughput (req/s)", rows(("throughput_rps",)), x_load, marks),
        _load_panel("TTFT (ms)", rows(("ttft_p50_ms", "ttft_p99_ms")), x_load, marks),
        _load_panel("E2E (ms)", rows(("e2e_p50_ms", "e2e_p99_ms")), x_load, marks)) if p]
    if not panels:
        return None
    return {"title": f"Throughput and latency ({kind} sweep)",
            "vconcat": [{"hconcat": panels[i:i + 2]} for i in range(0, len(panels), 2)],
            "resolve": {"scale": {"color": "independent"}}}


_SWEEP_SERIES = {"ttft_p50_ms": "p50", "ttft_p99_ms": "p99", "e2e_p50_ms": "p50",
                 "e2e_p99_ms": "p99", "throughput_rps": "req/s"}


def _mark_colour(marks: list[dict[str, Any]]) -> dict[str, Any]:
    """Knee red, recommended green, whichever of the two the sweep found."""
    return {"field": "label", "type": "nominal", "title": None,
            "legend": {"orient": "top", "direction": "horizontal"},
            "scale": {"domain": [m["label"] for m in marks],
                      "range": ["#d62728" if m["label"].startswith("knee") else "#2ca02c"
                                for m in marks]}}

_PANEL = {"width": WIDTH // 2 - 50, "height": 170}


def _curve_panel(rows: list[dict[str, Any]], marks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """TTFT against achieved throughput, each point labelled with its load."""
    rows = [r for r in rows if _num(r["rps"])]
    if not rows:
        return None
    x = {"field": "rps", "type": "quantitative", "title": "throughput (req/s)",
         "scale": {"zero": False}}
    y = {"field": "v", "type": "quantitative", "title": "TTFT (ms)"}
    layers: list[dict[str, Any]] = [
        {"data": {"values": rows}, "mark": {"type": "line", "point": True},
         "encoding": {"x": x, "y": y, "color": {"field": "series", "type": "nominal",
                                               "title": None, "legend": {"orient": "top"}}}},
        {"data": {"values": [r for r in rows if r["series"] == "p99"]},
         "mark": {"type": "text", "align": "left", "dx": 6, "fontSize": 10, "color": "#555"},
         "encoding": {"x": x, "y": y, "text": {"field": "at"}}}]
    ringed = [m for m in marks if _num(m["rps"]) and _num(m["ttft"])]
    if ringed:
        layers.append({"data": {"values": ringed},
                       "mark": {"type": "point", "size": 260, "strokeWidth": 2.5},
                       "encoding": {"x": {"field": "rps", "type": "quantitative"},
                                    "y": {"field": "ttft", "type": "quantitative"},
                                    "color": _mark_colour(ringed)}})
    return {**_PANEL, "title": "TTFT p50/p99 against throughput", "layer": layers,
            "resolve": {"scale": {"color": "independent"}}}


def _load_panel(title: str, rows: list[dict[str, Any]], x: dict[str, Any],
                marks: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not rows:
        return None
    layers: list[dict[str, Any]] = [
        {"data": {"values": rows}, "mark": {"type": "line", "point": True},
         "encoding": {"x": x, "y": {"field": "v", "type": "quantitative", "title": title},
                      "color": {"field": "series", "type": "nominal", "title": None,
                                "legend": {"orient": "top"}}}}]
    if marks:
        layers.append({"data": {"values": marks},
                       "mark": {"type": "rule", "strokeDash": [4, 3], "strokeWidth": 1.5},
                       "encoding": {"x": {"field": "load", "type": "quantitative"},
                                    "color": _mark_colour(marks)}})
    return {**_PANEL, "title": f"{title.split(' (')[0]} against load", "layer": layers,
            "resolve": {"scale": {"color": "independent"}}}


def decomposition_spec(decompositions: list[DecompositionView]) -> dict[str, Any] | None:
    """Client TTFT of each load level as one stacked bar of its parts (mean ms)."""
    rows: list[dict[str, Any]] = []
    levels: list[str] = []
    parts: dict[str, Any] = {}
    for d in decompositions:
        leaves = [c for c in ttft_leaves(d) if _num(c.mean_ms)]
        if not leaves:
            continue
        levels.append(str(d.label))
        for c in leaves:
            parts.setdefault(c.key, str(c.label or c.key))
            # a difference of means can come out slightly negative (noise): drawn as 0, the
            # table beside the chart prints the value
            rows.append({"level": str(d.label), "part": parts[c.key],
                         "ms": max(0.0, float(c.mean_ms or 0.0)), "order": _part_rank(c.key)})
    if not rows:
        return None
    domain = [parts[k] for k in sorted(parts, key=_part_rank)]
    return {
        "title": "Where client TTFT goes, per load level (mean ms)",
        "width": WIDTH, "height": max(60, 34 * len(levels)),
        "data": {"values": rows},
        "mark": {"type": "bar", "height": {"band": 0.7}},
        "encoding": {
            "y": {"field": "level", "type": "nominal", "sort": levels, "title": None},
            "x": {"field": "ms", "type": "quantitative", "stack": "zero",
                  "title": "mean TTFT (ms)"},
            "color": {"field": "part", "type": "nominal", "title": None,
                      "scale": {"domain": domain}},
            "order": {"field": "order", "type": "quantitative"},
        },
    }


def _part_rank(key: str) -> int:
    return _PART_ORDER.index(key) if key in _PART_ORDER else len(_PART_ORDER)


_SERIES = (  # (key in timeseries, legend label, panel)
    ("running", "running (server)", "requests"),
    ("waiting", "waiting (server)", "requests"),
    ("client_in_flight", "in flight (client)", "requests"),
    ("load_level", "load level (client)", "requests"),
    ("kv_usage", "KV cache usage", "kv"),
    ("preemptions", "preemptions", "preemptions"),
)


def timeseries_spec(ts: TimeSeries | None,
                    telemetry: TelemetrySeries | None = None) -> dict[str, Any] | None:
    """Server state over the run, aligned with the client's load on one time axis; the GPUs'
    telemetry (``report.json``'s ``telemetry``) under it, on the same axis."""
    gpu_t = (telemetry.t_s if telemetry is not None else None) or []
    t = [x for x in (ts.t_s if ts is not None else []) + gpu_t if _num(x)]
    if not t:
        return None
    panels: dict[str, list[dict[str, Any]]] = {"requests": [], "kv": [], "preemptions": []}
    for key, label, panel in _SERIES:
        for when, value in zip(t, getattr(ts, key) if ts is not None else []):
            if _num(when) and _num(value):
                v = value * 100 if key == "kv_usage" else value
                panels[panel].append({"t": when, "v": v, "series": label,
                                      "side": "client" if "client" in label else "server"})
    x_dom = [min(t), max(t)]
    titles = {"requests": "requests", "kv": "KV cache usage (%)", "preemptions": "preemptions"}
    charts = [_ts_panel(rows, titles[name], x_dom, name == "kv", several=name == "requests")
              for name, rows in panels.items() if rows]
    gpu = telemetry_panels(telemetry, x_dom)
    charts += gpu
    if not charts:
        return None
    title = ("Server and GPU state over the run, with the client's load" if gpu
             else "Server state over the run, with the client's load")
    return {"title": title, "vconcat": charts,
            "resolve": {"scale": {"color": "independent"}}}


def _ts_panel(rows: list[dict[str, Any]], title: str, x_dom: list[float],
              percent: bool, several: bool) -> dict[str, Any]:
    y: dict[str, Any] = {"field": "v", "type": "quantitative", "title": title}
    if percent:
        y["scale"] = {"domain": [0, 100]}
    return {
        "width": WIDTH, "height": 150 if title == "requests" else 80,
        "data": {"values": rows},
        "mark": {"type": "line", "interpolate": "step-after"},
        "encoding": {"x": {"field": "t", "type": "quantitative", "title": "time (s)",
                           "scale": {"domain": x_dom}},
                     "y": y,
                     **({"color": {"field": "series", "type": "nominal", "title": None,
                                   "legend": {"orient": "top"}},
                         # the client's load dashed, the server's state solid
                         "strokeDash": {"field": "side", "type": "nominal", "legend": None,
                                        "scale": {"domain": ["server", "client"],
                                                  "range": [[1, 0], [6, 3]]}}}
                        if several else {})},
    }


_GPU_PANELS = (  # (value field, its ceiling field or None, title, y domain)
    ("util_pct", None, "GPU busy (%)", [0, 100]),
    ("sm_clock_mhz", "sm_clock_max_mhz", "SM clock (MHz), max dashed", None),
    ("power_w", "power_limit_w", "power (W), limit dashed", None),
    ("mem_used_pct", None, "GPU memory used (%)", [0, 100]),
)


def telemetry_panels(telemetry: TelemetrySeries | None, x_dom: list[float]
                     ) -> list[dict[str, Any]]:
    """One panel per GPU reading, a line per GPU, its ceiling (max clock, power limit)
    dashed: the panels stack under the server's series on its time axis."""
    if telemetry is None:
        return []
    t, gpus = telemetry.t_s or [], telemetry.gpu or []
    panels = []
    for key, ceiling, title, domain in _GPU_PANELS:
        values = getattr(telemetry, key) or []
        rows = [{"t": when, "v": v, "series": f"GPU{g}", "kind": "value"}
                for when, g, v in zip(t, gpus, values) if _num(when) and _num(v)]
        if not rows:
            continue
        if ceiling:
            rows += [{"t": when, "v": v, "series": f"GPU{g}", "kind": "ceiling"}
                     for when, g, v in zip(t, gpus, getattr(telemetry, ceiling) or [])
                     if _num(when) and _num(v)]
        y: dict[str, Any] = {"field": "v", "type": "quantitative", "title": title}
        if domain:
            y["scale"] = {"domain": domain}
        panels.append({
            "width": WIDTH, "height": 80, "data": {"values": rows},
            "mark": {"type": "line", "interpolate": "step-after"},
            "encoding": {"x": {"field": "t", "type": "quantitative", "title": "time (s)",
                               "scale": {"domain": x_dom}},
                         "y": y,
                         "color": {"field": "series", "type": "nominal", "title": None,
                                   "legend": {"orient": "top"}},
                         "detail": {"field": "kind", "type": "nominal"},
                         "strokeDash": {"field": "kind", "type": "nominal", "legend": None,
                                        "scale": {"domain": ["value", "ceiling"],
                                                  "range": [[1, 0], [4, 3]]}}}})
    return panels


def trace_spec(trace: TraceSection | None) -> dict[str, Any] | None:
    """Where the trace window went (compute, exposed copy/comm, idle) and time per category."""
    if trace is None:
        return None
    charts = []
    breakdown: list[dict[str, Any]] = [{"kind": k, "share": v, "order": i}
                 for i, (k, v) in enumerate(trace.breakdown.items()) if _num(v)]
    if breakdown:
        charts.append({
            "title": "GPU time in the trace window", "width": WIDTH, "height": 36,
            "data": {"values": breakdown},
            "mark": {"type": "bar"},
            "encoding": {
                "x": {"field": "share", "type": "quantitative", "stack": "zero",
                      "axis": {"format": "%"}, "title": "share of the window",
                      "scale": {"domain": [0, 1]}},
                "color": {"field": "kind", "type": "nominal", "title": None,
                          "scale": {"domain": list(_BREAKDOWN) + sorted(
                              {b["kind"] for b in breakdown} - set(_BREAKDOWN)),
                              "range": list(_BREAKDOWN.values())}},
                "order": {"field": "order", "type": "quantitative"},
            },
        })
    cats = [{"name": str(c.name), "ms": c.ms} for c in trace.categories if _num(c.ms)]
    if cats:
        charts.append({
            "title": "Kernel time by category", "width": WIDTH - 160,
            "height": max(40, 20 * len(cats)),
            "data": {"values": cats},
            "mark": {"type": "bar", "color": "#4c78a8"},
            "encoding": {"y": {"field": "name", "type": "nominal", "sort": "-x", "title": None,
                               "axis": {"labelLimit": 150}},
                         "x": {"field": "ms", "type": "quantitative", "title": "kernel ms"}},
        })
    if not charts:
        return None
    return {"vconcat": charts, "resolve": {"scale": {"color": "independent"}}}


# the A/B outcomes' one wording (results.ab_outcome), a "helped, at a cost (...)" as its class
OUTCOME_COLOURS = {"helped": "#2ca02c", "helped, at a cost": "#bcbd22",
                   "did not measurably help": "#7f7f7f", "made it worse": "#d62728"}


def _outcome_class(words: str) -> str:
    return "helped, at a cost" if words.startswith("helped, at a cost") else words


def experiments_spec(experiments: list[Experiment] | None) -> dict[str, Any] | None:
    """Each fix tried: change of its metric with the 95% interval, and the values of both arms."""
    exps = [e for e in experiments or [] if _num(e.change_pct)]
    if not exps:
        return None
    forest = [{"change": f"{i}. {_short(e.change)}", "pct": e.change_pct,
               "lo": e.ci95_pct[0] if e.ci95_pct else e.change_pct,
               "hi": e.ci95_pct[1] if e.ci95_pct else e.change_pct,
               "verdict": _outcome_class(e.words())}
              for i, e in enumerate(exps, 1)]
    y = {"field": "change", "type": "nominal", "title": None, "sort": None,
         "axis": {"labelLimit": 220}}
    colour = {"field": "verdict", "type": "nominal", "title": None,
              "scale": {"domain": list(OUTCOME_COLOURS), "range": list(OUTCOME_COLOURS.values())}}
    charts: list[dict[str, Any]] = [{
        "title": "Change of each fix's metric (B against A), with its 95% interval",
        "width": WIDTH - 240, "height": max(40, 30 * len(forest)),
        "layer": [
            {"data": {"values": [{"zero": 0}]}, "mark": {"type": "rule", "color": "#888"},
             "encoding": {"x": {"field": "zero", "type": "quantitative"}}},
            {"data": {"values": forest}, "mark": {"type": "rule", "strokeWidth": 2},
             "encoding": {"y": y, "x": {"field": "lo", "type": "quantitative",
                                        "title": "change (%)"},
                          "x2": {"field": "hi"}, "color": colour}},
            {"data": {"values": forest}, "mark": {"type": "point", "filled": True, "size": 60},
             "encoding": {"y": y, "x": {"field": "pct", "type": "quantitative"},
                          "color": colour}},
        ],
    }]
    for i, e in enumerate(exps, 1):
        values = ([{"arm": "A (before)", "v": v} for v in e.a_values if _num(v)]
                  + [{"arm": "B (after)", "v": v} for v in e.b_values if _num(v)])
        if values:
            charts.append(_arms_panel(i, e, values))
    return {"vconcat": charts, "resolve": {"scale": {"color": "independent"}}}


def _arms_panel(i: int, e: Experiment, values: list[dict[str, Any]]) -> dict[str, Any]:
    arms = (("A (before)", e.a_mean), ("B (after)", e.b_mean))
    means = [{"arm": arm, "v": mean} for arm, mean in arms if _num(mean)]
    y = {"field": "arm", "type": "nominal", "title": None, "sort": ["A (before)", "B (after)"]}
    x = {"field": "v", "type": "quantitative", "title": str(e.metric or "value"),
         "scale": {"zero": False}}
    layers: list[dict[str, Any]] = [
        {"data": {"values": values}, "mark": {"type": "point", "opacity": 0.7},
         "encoding": {"y": y, "x": x, "color": {"field": "arm", "type": "nominal",
                                               "legend": None}}}]
    if means:
        layers.append({"data": {"values": means},
                       "mark": {"type": "tick", "thickness": 3, "color": "#333"},
                       "encoding": {"y": y, "x": x}})
    return {"title": {"text": f"{i}. {_short(e.change)}", "fontSize": 12},
            "width": WIDTH - 240, "height": 50, "layer": layers}


def _short(text: Any, limit: int = 60) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"

"""Terminal rendering of ``latscope trace`` results (rich tables): per device the window and its
breakdown, kernel categories, top kernels, copies, idle gaps; and the ``--compare`` diff.
Only the CLI calls these; the numbers come from ``latscope.trace.analyze``.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _ms(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:,.3f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def print_result(result: dict[str, Any], console: Console, *, top_n: int = 10) -> None:
    src = result["source"]
    console.print(f"[bold]{src['path']}[/bold]  format={src['format']} vendor={src['vendor']}"
                  + (f" rank={src['rank']}" if src["rank"] is not None else "")
                  + f"  events: gpu={src['events']['gpu']} api={src['events']['api']} "
                    f"cpu={src['events']['ranges']}")
    for note in src["notes"]:
        console.print(f"[dim]note: {note}[/dim]")
    for dev in result["devices"]:
        _device(dev, console, top_n)


def _device(dev: dict[str, Any], console: Console, top_n: int) -> None:
    b, w = dev["breakdown"], dev["window"]
    name = f" ({dev['device_name']})" if dev["device_name"] else ""
    console.print(f"\n[bold]device {dev['device']}{name}[/bold]: window {_ms(w['length_ns'])} ms "
                  f"[dim]({w['method']})[/dim], {dev['activities']} GPU activities")
    t = Table(title="time breakdown (interval union; parts add up to the window)")
    for col in ("part", "ms", "share"):
        t.add_column(col, justify="right" if col != "part" else "left")
    for part in ("compute", "exposed_comm", "exposed_copy", "idle"):
        t.add_row(part, _ms(b[f"{part}_ns"]), _pct(b[f"{part}_share"]))
    t.add_row("[bold]window[/bold]", _ms(b["window_ns"]), "100.0%")
    console.print(t)
    _categories(dev, console)
    _top(dev, console, top_n)
    _copies(dev, console)
    _gaps(dev, console)


def _categories(dev: dict[str, Any], console: Console) -> None:
    t = Table(title="kernel categories (union in window; share of busy time)")
    for col in ("category", "count", "union ms", "sum ms", "share of busy"):
        t.add_column(col, justify="left" if col == "category" else "right")
    for r in dev["kernels"]["categories"]:
        t.add_row(r["category"], str(r["count"]), _ms(r["union_ns"]), _ms(r["sum_ns"]),
                  _pct(r["share_of_busy"]))
    console.print(t)


def _top(dev: dict[str, Any], console: Console, top_n: int) -> None:
    k = dev["kernels"]
    t = Table(title=f"top kernels ({k['kernel_count']} launches, {k['distinct_kernels']} distinct)")
    for col in ("kernel", "category", "count", "total ms", "mean us", "share of busy", "generic"):
        t.add_column(col, justify="left" if col in ("kernel", "category", "generic") else "right",
                     overflow="fold", max_width=70 if col == "kernel" else None)
    for r in k["top"][:top_n]:
        t.add_row(r["name"][:200], r["category"], str(r["count"]), _ms(r["total_ns"]),
                  f"{r['mean_ns'] / 1e3:,.1f}", _pct(r["share_of_busy"]), r["generic"] or "")
    console.print(t)


def _copies(dev: dict[str, Any], console: Console) -> None:
    c = dev["copies"]
    if not c["by_direction"]:
        return
    t = Table(title=f"copies (not overlapped by compute: {_ms(c['not_overlapped_by_compute_ns'])}"
                    " ms)")
    for col in ("dir", "count", "MB", "ms", "GB/s", "small", "pageable", "pinned", "blocking"):
        t.add_column(col, justify="left" if col == "dir" else "right")
    for r in c["by_direction"]:
        t.add_row(r["direction"], str(r["count"]),
                  "-" if r["bytes"] is None else f"{r['bytes'] / 1e6:,.3f}", _ms(r["time_ns"]),
                  "-" if r["gbps"] is None else f"{r['gbps']:,.1f}", str(r["small_count"]),
                  str(r["pageable_count"]), str(r["pinned_count"]), str(r["blocking_count"]))
    console.print(t)
    console.print(f"[dim]host memory kind: {c['host_memory_method']}[/dim]")


def _gaps(dev: dict[str, Any], console: Console) -> None:
    g = dev["gaps"]
    cause = g["by_cause"]
    console.print(f"idle gaps: {g['count']}, {_ms(g['idle_ns'])} ms; issued after the GPU went "
                  f"idle (host wait) {_ms(cause['host_wait_ns'])} ms, queued earlier "
                  f"{_ms(cause['queued_ns'])} ms, no CPU call {_ms(cause['unknown_ns'])} ms")
    dist = ", ".join(f"{d['bucket']}: {d['count']} ({_ms(d['time_ns'])} ms)"
                     for d in g["distribution"] if d["count"])
    console.print(f"[dim]gap sizes: {dist}[/dim]")
    t = Table(title="largest gaps and what the launching thread did (self time in the gap)")
    for col in ("at ms", "gap ms", "next work issued after", "CPU (self time)"):
        t.add_column(col, overflow="fold")
    origin = dev["window"]["start_ns"]
    for gap in g["largest"]:
        issued = gap["next_issued_after_gap_start_ns"]
        cpu = "\n".join(f"{c['kind']}: {c['name'][:80]} {_ms(c['self_ns'])} ms"
                        for c in gap["cpu_top"])
        t.add_row(_ms(gap["start_ns"] - origin), _ms(gap["length_ns"]),
                  "-" if issued is None else f"{_ms(issued)} ms", cpu)
    console.print(t)
    cpu = g["cpu_during_idle"]
    kinds = ", ".join(f"{k['kind']} {_pct(k['share_of_idle'])}" for k in cpu["self_time_by_kind"])
    console.print(f"during idle the launching thread was in: {kinds or 'nothing recorded'}")
    if cpu["top_events"]:
        t = Table(title="launching thread's self time inside idle gaps (top)")
        for col in ("kind", "CPU event", "ms", "share of idle"):
            t.add_column(col, justify="right" if col in ("ms", "share of idle") else "left",
                         overflow="fold", max_width=90 if col == "CPU event" else None)
        for e in cpu["top_events"]:
            t.add_row(e["kind"], e["name"][:200], _ms(e["self_ns"]), _pct(e["share_of_idle"]))
        console.print(t)
    d = g["launch_delay"]
    if d.get("count"):
        console.print(f"launch delay (GPU start - API end): median {d['median_ns'] / 1e3:.1f} us, "
                      f"p90 {d['p90_ns'] / 1e3:.1f} us, max {d['max_ns'] / 1e3:.1f} us over "
                      f"{d['count']} launches; {d['graph_launched']} activities from graph "
                      "launches (no per-kernel delay)")


def print_comparison(diff: dict[str, Any], console: Console, *, top_n: int = 15) -> None:
    a, b = diff["a"], diff["b"]
    console.print(f"[bold]A[/bold] {a['path']} device {a['device']} {a['name']}\n"
                  f"[bold]B[/bold] {b['path']} device {b['device']} {b['name']}")
    for title, rows in (("breakdown", diff["breakdown"]), ("categories", diff["categories"]),
                        ("kernel families", diff["families"][:top_n])):
        t = Table(title=title)
        for col in ("", "A ms", "B ms", "B - A ms", "B / A"):
            t.add_column(col, justify="left" if not col else "right", overflow="fold",
                         max_width=60 if not col else None)
        for r in rows:
            t.add_row(r["key"], _ms(r["a_ns"]), _ms(r["b_ns"]), _ms(r["delta_ns"]),
                      "-" if r["ratio"] is None else f"{r['ratio']:.2f}x")
        console.print(t)


def print_ranks(rows: list[dict[str, Any]], console: Console) -> None:
    t = Table(title="traces side by side (e.g. one per rank)")
    for col in ("file", "rank", "device", "window ms", "busy ms", "idle", "exposed comm"):
        t.add_column(col, justify="left" if col == "file" else "right", overflow="fold")
    for r in rows:
        t.add_row(r["path"].rsplit("/", 1)[-1], "-" if r["rank"] is None else str(r["rank"]),
                  str(r["device"]), _ms(r["window_ns"]), _ms(r["busy_ns"]),
                  _pct(r["idle_share"]), _pct(r["exposed_comm_share"]))
    console.print(t)

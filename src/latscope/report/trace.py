"""Terminal rendering of ``latscope trace`` results: per device the window and its breakdown,
kernel categories, top kernels, copies, idle gaps; and the ``--compare`` diff.

Only the CLI calls these; the numbers come from ``latscope.trace.analyze``. Every table fits the
console's width (80 columns in a log file) with each kernel or CPU event name on one line,
shortened by ``latscope.trace.names`` when it must be: the full names are in the JSON.
"""

from __future__ import annotations

from typing import Sequence

from msgspec import UnsetType
from rich.console import Console, Group

from latscope.report.text import WIDE, compact_table, room_left, titled
from latscope.trace.names import ellipsize, short_event_name, short_kernel_names
from latscope.trace.results import (
    Comparison,
    CpuEvent,
    DeviceAnalysis,
    DiffRow,
    IdleEvent,
    RankSummary,
    TraceAnalysis,
)

_MIN_NAME = 24  # below this a name column says too little: extra columns are dropped first


def _ms(ns: float | UnsetType | None) -> str:
    return f"{ns / 1e6:,.3f}" if isinstance(ns, (int, float)) else "-"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def _table(title: str, columns: list[tuple[str, list[str]]], name: tuple[str, list[str]] | None,
           width: int, *, name_first: bool = False) -> Group:
    """Numeric columns (right-aligned) and one left-aligned name column that gets the room left
    (names arrive already shortened to it): last, or first for short names (a category)."""
    t = compact_table()
    room = max(1, room_left(width, [[h, *c] for h, c in columns]))
    if name is not None and name_first:
        t.add_column(name[0], no_wrap=True, overflow="ellipsis", max_width=room)
    for header, _ in columns:
        t.add_column(header, justify="right", no_wrap=True)
    if name is not None and not name_first:
        t.add_column(name[0], no_wrap=True, overflow="ellipsis", max_width=room)
    cells = [c for _, c in columns]
    if name is not None:
        cells.insert(0 if name_first else len(cells), name[1])
    for row in zip(*cells):
        t.add_row(*row)
    return titled(title, t)


def print_result(result: TraceAnalysis, console: Console, *, top_n: int = 10) -> None:
    src = result.source
    console.print(f"[bold]{src.path}[/bold]", overflow="fold")
    console.print(f"format={src.format} vendor={src.vendor}"
                  + (f" rank={src.rank}" if src.rank is not None else "")
                  + f"  events: gpu={src.events.gpu} api={src.events.api} "
                    f"cpu={src.events.ranges}")
    for note in src.notes:
        console.print(f"[dim]note: {note}[/dim]")
    for dev in result.devices:
        _device(dev, console, top_n)


def _device(dev: DeviceAnalysis, console: Console, top_n: int) -> None:
    b, w = dev.breakdown, dev.window
    name = f" ({dev.device_name})" if dev.device_name else ""
    console.print(f"\n[bold]device {dev.device}{name}[/bold]: window {_ms(w.length_ns)} ms "
                  f"[dim]({w.method})[/dim], {dev.activities} GPU activities")
    parts = (("compute", b.compute_ns, b.compute_share),
             ("exposed_comm", b.exposed_comm_ns, b.exposed_comm_share),
             ("exposed_copy", b.exposed_copy_ns, b.exposed_copy_share),
             ("idle", b.idle_ns, b.idle_share))
    console.print(_table("time breakdown (interval union; parts add up to the window)",
                         [("ms", [_ms(ns) for _, ns, _ in parts] + [_ms(b.window_ns)]),
                          ("share", [_pct(share) for _, _, share in parts] + ["100.0%"])],
                         ("part", [p for p, _, _ in parts] + ["window"]), console.width,
                         name_first=True))
    _categories(dev, console)
    _top(dev, console, top_n)
    _copies(dev, console)
    _gaps(dev, console)


def _categories(dev: DeviceAnalysis, console: Console) -> None:
    rows = dev.kernels.categories
    console.print(_table("kernel categories (union in window; share of busy time)",
                         [("count", [str(r.count) for r in rows]),
                          ("union ms", [_ms(r.union_ns) for r in rows]),
                          ("sum ms", [_ms(r.sum_ns) for r in rows]),
                          ("share of busy", [_pct(r.share_of_busy) for r in rows])],
                         ("category", [r.category for r in rows]), console.width,
                         name_first=True))


def top_kernels_table(dev: DeviceAnalysis, width: int, top_n: int = 10) -> Group:
    """Top kernels by summed time: numbers first, the (shortened) name in the room left. On a
    wide console the category and generic-path columns come back."""
    k = dev.kernels
    rows = k.top[:top_n]
    columns = [("share", [_pct(r.share_of_busy) for r in rows]),
               ("total ms", [_ms(r.total_ns) for r in rows]),
               ("count", [str(r.count) for r in rows]),
               ("mean us", [f"{r.mean_ns / 1e3:,.1f}" for r in rows])]
    extra = [("category", [r.category for r in rows]),
             ("generic", [r.generic or "" for r in rows])]
    if width >= WIDE and room_left(width, [[h, *c] for h, c in columns + extra]) >= _MIN_NAME:
        columns += extra
    room = max(1, room_left(width, [[h, *c] for h, c in columns]))
    names = short_kernel_names([r.name for r in rows], room)
    title = f"top kernels ({k.kernel_count} launches, {k.distinct_kernels} distinct)"
    return _table(title, columns, ("kernel (full names in the JSON)"[:room], names), width)


def _top(dev: DeviceAnalysis, console: Console, top_n: int) -> None:
    console.print(top_kernels_table(dev, console.width, top_n))


def _copies(dev: DeviceAnalysis, console: Console) -> None:
    c = dev.copies
    rows = c.by_direction
    if not rows:
        return
    t = _table(f"copies (not overlapped by compute: {_ms(c.not_overlapped_by_compute_ns)} ms)",
               [("count", [str(r.count) for r in rows]),
                ("MB", ["-" if r.bytes is None else f"{r.bytes / 1e6:,.3f}" for r in rows]),
                ("ms", [_ms(r.time_ns) for r in rows]),
                ("GB/s", ["-" if r.gbps is None else f"{r.gbps:,.1f}" for r in rows]),
                ("small", [str(r.small_count) for r in rows]),
                ("pageable", [str(r.pageable_count) for r in rows]),
                ("pinned", [str(r.pinned_count) for r in rows]),
                ("blocking", [str(r.blocking_count) for r in rows])],
               ("dir", [r.direction for r in rows]), console.width, name_first=True)
    console.print(t)
    console.print(f"[dim]host memory kind: {c.host_memory_method}[/dim]")


def _gaps(dev: DeviceAnalysis, console: Console) -> None:
    g = dev.gaps
    cause = g.by_cause
    console.print(f"idle gaps: {g.count}, {_ms(g.idle_ns)} ms; issued after the GPU went "
                  f"idle (host wait) {_ms(cause.host_wait_ns)} ms, queued earlier "
                  f"{_ms(cause.queued_ns)} ms, no CPU call {_ms(cause.unknown_ns)} ms")
    dist = ", ".join(f"{d.bucket}: {d.count} ({_ms(d.time_ns)} ms)"
                     for d in g.distribution if d.count)
    console.print(f"[dim]gap sizes: {dist}[/dim]")
    console.print(largest_gaps_table(dev, console.width))
    cpu = g.cpu_during_idle
    kinds = ", ".join(f"{k.kind} {_pct(k.share_of_idle)}" for k in cpu.self_time_by_kind)
    console.print(f"during idle the launching thread was in: {kinds or 'nothing recorded'}")
    if cpu.top_events:
        console.print(idle_events_table(cpu.top_events, console.width))
    d = g.launch_delay
    if d.count:
        console.print(f"launch delay (GPU start - API end): median {_us(d.median_ns)} us, "
                      f"p90 {_us(d.p90_ns)} us, max {_us(d.max_ns)} us over "
                      f"{d.count} launches; {d.graph_launched} activities from graph "
                      "launches (no per-kernel delay)")


def _us(ns: float | UnsetType) -> str:
    return f"{ns / 1e3:.1f}" if isinstance(ns, (int, float)) else "-"


def largest_gaps_table(dev: DeviceAnalysis, width: int) -> Group:
    """The largest gaps, one CPU event per line under each: ms, kind and the event's name."""
    origin = dev.window.start_ns
    starts, lengths, issued = [], [], []
    events: list[CpuEvent | None] = []
    for gap in dev.gaps.largest:
        after = gap.next_issued_after_gap_start_ns
        cpu: list[CpuEvent | None] = list(gap.cpu_top) or [None]
        for i, c in enumerate(cpu):
            first = i == 0
            starts.append(_ms(gap.start_ns - origin) if first else "")
            lengths.append(_ms(gap.length_ns) if first else "")
            issued.append(("-" if after is None else _ms(after)) if first else "")
            events.append(c)
    columns = [("at ms", starts), ("gap ms", lengths), ("issued after ms", issued)]
    room = max(1, room_left(width, [[h, *cells] for h, cells in columns]))
    lines = [_cpu_line(c, room) for c in events]
    return _table("largest gaps and what the launching thread did (self time in the gap)",
                  columns, ("CPU self ms, kind: event", lines), width)


def _cpu_line(event: CpuEvent | None, room: int) -> str:
    if event is None:
        return "-"
    head = f"{_ms(event.self_ns)} {event.kind}: "
    return head + short_event_name(event.name, max(1, room - len(head)))


def idle_events_table(events: list[IdleEvent], width: int) -> Group:
    columns = [("ms", [_ms(e.self_ns) for e in events]),
               ("share of idle", [_pct(e.share_of_idle) for e in events]),
               ("kind", [e.kind for e in events])]
    room = max(1, room_left(width, [[h, *cells] for h, cells in columns]))
    names = [short_event_name(e.name, room) for e in events]
    return _table("launching thread's self time inside idle gaps (top)", columns,
                  ("CPU event", names), width)


def comparison_tables(diff: Comparison, width: int, top_n: int = 15) -> list[Group]:
    tables = []
    sections: tuple[tuple[str, Sequence[DiffRow]], ...] = (
        ("breakdown", diff.breakdown), ("categories", diff.categories),
        ("kernel families", diff.families[:top_n]))
    for title, rows in sections:
        columns = [("A ms", [_ms(r.a_ns) for r in rows]),
                   ("B ms", [_ms(r.b_ns) for r in rows]),
                   ("B - A ms", [_ms(r.delta_ns) for r in rows]),
                   ("B / A", ["-" if r.ratio is None else f"{r.ratio:.2f}x" for r in rows])]
        room = max(1, room_left(width, [[h, *c] for h, c in columns]))
        keys = short_kernel_names([r.key for r in rows], room)
        tables.append(_table(title, columns, (title.split()[-1][:room], keys), width,
                             name_first=True))
    return tables


def print_comparison(diff: Comparison, console: Console, *, top_n: int = 15) -> None:
    for tag, side in (("A", diff.a), ("B", diff.b)):
        console.print(f"[bold]{tag}[/bold] {side.path} device {side.device} {side.name}",
                      overflow="fold")
    for table in comparison_tables(diff, console.width, top_n):
        console.print(table)


def ranks_table(rows: list[RankSummary], width: int) -> Group:
    columns = [("rank", ["-" if r.rank is None else str(r.rank) for r in rows]),
               ("device", [str(r.device) for r in rows]),
               ("window ms", [_ms(r.window_ns) for r in rows]),
               ("busy ms", [_ms(r.busy_ns) for r in rows]),
               ("idle", [_pct(r.idle_share) for r in rows]),
               ("comm", [_pct(r.comm_share) for r in rows]),
               ("exposed comm", [_pct(r.exposed_comm_share) for r in rows])]
    room = max(1, room_left(width, [[h, *c] for h, c in columns]))
    files = [ellipsize(r.path.rsplit("/", 1)[-1], room) for r in rows]
    return _table("traces side by side (e.g. one per rank)", columns, ("file", files), width,
                  name_first=True)


def print_ranks(rows: list[RankSummary], console: Console) -> None:
    console.print(ranks_table(rows, console.width))


"""Terminal rendering of the cross-rank view of ``latscope trace`` over several traces: the
slowest rank, collective skew and each rank's wait in collectives, and what each analysis worker
cost (wall time, peak RSS). The numbers come from ``latscope.trace.parallel.cross_rank``.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from latscope.report.trace import _ms, _pct


def print_cross_rank(view: dict[str, Any], console: Console) -> None:
    slow = view.get("slowest_rank")
    if slow:
        console.print(f"slowest rank: {_name(slow)} (GPU busy outside exposed communication "
                      f"{_ms(slow['compute_busy_ns'])} ms)")
    coll = view.get("collectives")
    if coll and coll.get("matched"):
        console.print(f"collectives matched across ranks: {coll['matched']}; skew p50 "
                      f"{_ms(coll['skew_p50_ns'])} ms, p99 {_ms(coll['skew_p99_ns'])} ms, max "
                      f"{_ms(coll['skew_max_ns'])} ms; straggler (least wait): "
                      f"{_name(coll['straggler'])}")
        t = Table(title="wait inside collectives (others arrived later)")
        for col in ("file", "device", "collective ms", "wait ms", "wait of window"):
            t.add_column(col, justify="left" if col == "file" else "right", overflow="fold")
        for r in coll["per_rank"]:
            t.add_row(r["path"].rsplit("/", 1)[-1], str(r["device"]), _ms(r["collective_ns"]),
                      _ms(r["wait_ns"]), _pct(r["wait_share"]))
        console.print(t)
    for note in (coll or {}).get("notes", []):
        console.print(f"[dim]note: {note}[/dim]")
    workers = view.get("workers") or []
    if workers:
        rss = max(w["peak_rss_mb"] for w in workers)
        wall = max(w["wall_s"] for w in workers)
        console.print(f"[dim]{len(workers)} analyses: slowest {wall:.2f} s, "
                      f"peak RSS per worker at most {rss:.0f} MB[/dim]")


def _name(r: dict[str, Any]) -> str:
    rank = "" if r.get("rank") is None else f" rank {r['rank']}"
    return f"{r['path'].rsplit('/', 1)[-1]}{rank} device {r['device']}"

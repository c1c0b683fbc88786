"""Terminal rendering of the cross-rank view of ``latscope trace`` over several traces: the
slowest rank, collective skew and each rank's wait in collectives, and what each analysis worker
cost (wall time, peak RSS). The numbers come from ``latscope.trace.parallel.cross_rank``.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from latscope.report.model import CrossRank, RankRef, RankRow
from latscope.report.trace import _ms, _pct
from latscope.trace.results import CollectiveSkew, CrossRankView, RankWait, SlowestRank
from latscope.trace.results import RankRef as TraceRankRef


def print_cross_rank(view: CrossRankView, console: Console) -> None:
    slow = view.slowest_rank
    if isinstance(slow, SlowestRank):
        console.print(f"slowest rank: {_name(slow)} (GPU busy outside exposed communication "
                      f"{_ms(slow.compute_busy_ns)} ms)")
    coll = view.collectives if isinstance(view.collectives, CollectiveSkew) else None
    if coll is not None and coll.matched and isinstance(coll.per_rank, list) \
            and isinstance(coll.straggler, TraceRankRef):
        console.print(f"collectives matched across ranks: {coll.matched}; skew p50 "
                      f"{_ms(coll.skew_p50_ns)} ms, p99 {_ms(coll.skew_p99_ns)} ms, max "
                      f"{_ms(coll.skew_max_ns)} ms; straggler (least wait): "
                      f"{_name(coll.straggler)}")
        t = Table(title="wait inside collectives (others arrived later)")
        for col in ("file", "device", "collective ms", "wait ms", "wait of window"):
            t.add_column(col, justify="left" if col == "file" else "right", overflow="fold")
        for r in coll.per_rank:
            t.add_row(r.path.rsplit("/", 1)[-1], str(r.device), _ms(r.collective_ns),
                      _ms(r.wait_ns), _pct(r.wait_share))
        console.print(t)
        for r in coll.per_rank:
            kinds = ", ".join(f"{k.kind} {k.count}x {_ms(k.total_ns)} ms (wait "
                              f"{_ms(k.wait_ns)} ms)" for k in r.by_kind)
            console.print(f"[dim]{_name(r)}: {kinds}[/dim]")
    for note in coll.notes if coll is not None else []:
        console.print(f"[dim]note: {note}[/dim]")
    if view.workers:
        rss = max(w.peak_rss_mb for w in view.workers)
        wall = max(w.wall_s for w in view.workers)
        console.print(f"[dim]{len(view.workers)} analyses: slowest {wall:.2f} s, "
                      f"peak RSS per worker at most {rss:.0f} MB[/dim]")


def _name(r: SlowestRank | TraceRankRef | RankWait) -> str:
    rank = "" if r.rank is None else f" rank {r.rank}"
    return f"{r.path.rsplit('/', 1)[-1]}{rank} device {r.device}"


# --- the cross-rank section of a diagnose report (report.model.CrossRank) -----------------------

RANK_COLUMNS = ("rank", "busy ms", "idle", "comm", "exposed", "collective ms", "waiting",
                "collectives by kind")


def rank_rows(section: CrossRank) -> list[list[str]]:
    """One row of cells per rank, in ``RANK_COLUMNS`` order (formatting only)."""
    from latscope.report import units

    rows = []
    for r in section.ranks:
        kinds = ", ".join(f"{k.kind} {k.count}x {units.ms(k.total_ms)}" for k in r.kinds)
        rows.append([rank_label(r), units.number(r.busy_ms), units.pct(r.idle_share),
                     units.pct(r.comm_share), units.pct(r.exposed_comm_share),
                     units.number(r.collective_ms), units.pct(r.wait_share), kinds or "-"])
    return rows


def rank_label(r: RankRef | RankRow | None) -> str:
    if r is None:
        return "?"
    rank = f"rank {r.rank}" if r.rank is not None else r.file
    return f"{rank} (GPU {r.device})"


def cross_rank_sentences(section: CrossRank) -> list[str]:
    """The slowest rank, the straggler and the skew, then notes: one sentence each."""
    from latscope.report import units

    out = []
    if section.slowest is not None:
        out.append(f"Slowest rank by GPU busy time outside exposed communication: "
                   f"{rank_label(section.slowest)}, {units.ms(section.slowest_busy_ms)}.")
    if section.matched:
        out.append(f"{section.matched} collectives matched across ranks; skew (max - min "
                   f"duration) p50 {units.ms(section.skew_p50_ms)}, p99 "
                   f"{units.ms(section.skew_p99_ms)}, max "
                   f"{units.ms(section.skew_max_ms)}; the others wait for "
                   f"{rank_label(section.straggler)} (it waits least).")
    else:
        out.append("No collective kernels matched across ranks: no skew to measure.")
    out += [f"Note: {n}." for n in section.notes]
    out += [f"Not analysed: {e}." for e in section.errors]
    return out

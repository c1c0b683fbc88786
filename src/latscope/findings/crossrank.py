"""Findings from the cross-rank view of one profile (``latscope.trace.parallel.cross_rank``):
one trace per rank of a tensor/pipeline/expert-parallel server.

A synchronous collective ends on every rank when the last one arrives, so a collective kernel's
time on a rank is its wait for the others plus the transfer itself. The view splits it so
(``wait = dur - min(dur)`` over the ranks, the k-th collective of each matched by position):

- ``trace.rank_straggler``: one rank the others wait for. What they lose is their own wait in
  excess of the straggler's (the straggler waits least), as a share of their GPU window.
- ``trace.collective_share``: the collectives' own time (transfer, not waiting), as a share of
  every rank's window, capped by the communication not hidden behind compute: time the
  interconnect and the collective algorithm cost each step, evenly across ranks.

Both are symptoms (where the time goes): a cause another layer found takes their share
(``causes.toml``: another process on a GPU, NCCL peer-to-peer disabled). Input numbers are in ns
(the typed ``CrossRankView``); every share is checked to lie in 0..1.
"""

from __future__ import annotations

from pathlib import Path

from msgspec import UNSET, UnsetType

from latscope.findings import reference
from latscope.findings.impact import make_impact
from latscope.model import Evidence, Finding, Severity
from latscope.trace.results import (
    CollectiveSkew,
    CrossRankView,
    RankRef,
    RankSummary,
    RankWait,
    SlowestRank,
)

# Shares of a rank's GPU window: from REPORT on a finding is written (information), from WARNING
# on it is one to act on (as trace.exposed_communication: 10 % of every step is worth a look).
REPORT_SHARE, WARNING_SHARE = 0.05, 0.10
MIN_MATCHED = 5  # fewer matched collectives than this say nothing about a straggler
HTA_REF = "https://hta.readthedocs.io/en/latest/source/features/comm_comp_overlap.html"
NCCL_REF = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"


def crossrank_findings(view: CrossRankView | None) -> list[Finding]:
    coll = view.collectives if view is not None else UNSET
    if not isinstance(coll, CollectiveSkew) or coll.matched < MIN_MATCHED or \
            not isinstance(coll.per_rank, list) or len(coll.per_rank) < 2 or \
            not isinstance(coll.straggler, RankRef):
        return []
    assert view is not None  # it has collectives
    rows = {(r.path, r.device): r for r in view.ranks}
    slowest = view.slowest_rank if isinstance(view.slowest_rank, SlowestRank) else None
    out = [_straggler(coll, coll.per_rank, coll.straggler, rows, slowest),
           _collective_share(coll, coll.per_rank, rows)]
    return [f for f in out if f is not None]


def rank_name(r: RankRef | RankWait | SlowestRank) -> str:
    """``rank 1 (dp0_pp0_tp1_dcp0_ep0_rank1.17...pt.trace.json.gz device 1)``."""
    rank = f"rank {r.rank}" if r.rank is not None else "a rank"
    return f"{rank} ({Path(r.path).name} device {r.device})"


def _ms(ns: float) -> float:
    return round(ns / 1e6, 3)


def _severity(share: float) -> Severity:
    """Both cross-rank findings are GPU symptoms (diagnose joins them to their cause), warnings
    from ``WARNING_SHARE`` of the GPU window."""
    return Severity.WARNING if share >= WARNING_SHARE else Severity.INFO


def _skew_ms(value: float | UnsetType) -> float:
    """A skew percentile of matched collectives, ms (they are there once any matched)."""
    return _ms(value) if isinstance(value, (int, float)) else 0.0


def _straggler(coll: CollectiveSkew, ranks: list[RankWait], late: RankRef,
               rows: dict[tuple[str, int], RankSummary],
               slowest: SlowestRank | None) -> Finding | None:
    mine = next(r for r in ranks if (r.path, r.device) == (late.path, late.device))
    mine_share = mine.wait_share
    peers = [(r, r.wait_share) for r in ranks if r is not mine and r.wait_share is not None]
    if mine_share is None or not peers:
        return None
    peer, peer_share = max(peers, key=lambda p: p[1])
    share = peer_share - mine_share
    if share < REPORT_SHARE:
        return None
    evidence = [Evidence(f"wait inside collectives, {rank_name(r)}", _ms(r.wait_ns), "ms",
                         f"{coll.matched} collectives matched across ranks")
                for r in ranks]
    evidence += [
        Evidence(f"wait share of the window, {rank_name(r)}", round(r.wait_share, 4), "",
                 "cross-rank view") for r in ranks if r.wait_share is not None]
    evidence += [Evidence("collective skew (max - min duration) p50 / p99",
                          f"{_skew_ms(coll.skew_p50_ns)} / {_skew_ms(coll.skew_p99_ns)}", "ms",
                          "cross-rank view")]
    if slowest is not None:
        row = rows.get((slowest.path, slowest.device))
        window = row.window_ns if row is not None else 0
        evidence.append(Evidence(f"GPU busy outside exposed communication, {rank_name(slowest)}",
                                 _ms(slowest.compute_busy_ns), "ms",
                                 f"the most of any rank; window {_ms(window)} ms"))
    return Finding(
        id="trace.rank_straggler", severity=_severity(share), layer="gpu", role="symptom",
        title=(f"{rank_name(late)} is the slowest rank: {rank_name(peer)} waits for it inside "
               f"collectives {share:.0%} of its GPU window"),
        evidence=evidence,
        why=("Every rank of a tensor-parallel step leaves a collective (the all-reduce) together, "
             "when the last one arrives: the ranks that came early spin inside the kernel for "
             "the slow one, and the whole step takes the slowest rank's time."),
        fix=("Find what slows that rank's GPU or its host thread: another process on that GPU "
             "(nvidia-smi), a lower clock or power limit, a busy or remote NUMA node for its "
             "worker; then re-profile and compare the ranks' waits."),
        reference=reference("trace.rank_straggler", HTA_REF),
        impact=make_impact("gpu_window", share, value_ms=_ms(peer.wait_ns - mine.wait_ns),
                           measured_at=rank_name(peer)))


def _collective_share(coll: CollectiveSkew, ranks: list[RankWait],
                      rows: dict[tuple[str, int], RankSummary]) -> Finding | None:
    own, exposed, evidence = [], [], []
    for r in ranks:
        row = rows.get((r.path, r.device))
        if row is None or not row.window_ns:
            continue
        own.append((r.collective_ns - r.wait_ns) / row.window_ns)
        exposed.append(row.exposed_comm_share)
        kinds = ", ".join(f"{k.kind} {k.count}x {_ms(k.total_ns)} ms" for k in r.by_kind)
        evidence += [
            Evidence(f"collectives, {rank_name(r)}", _ms(r.collective_ns), "ms",
                     f"{kinds}; {_ms(r.wait_ns)} ms of it waiting for other ranks"),
            Evidence(f"communication share of the window, {rank_name(r)}",
                     round(row.comm_share, 4), "",
                     f"exposed (not overlapped with compute) {exposed[-1]:.4f}")]
    if not own:
        return None
    # the collectives' own time costs a step only where compute does not hide it
    share = min(sum(own) / len(own), sum(exposed) / len(exposed))
    if share < REPORT_SHARE:
        return None
    ms = sum(r.collective_ns - r.wait_ns for r in ranks) / len(own)
    return Finding(
        id="trace.collective_share", severity=_severity(share), layer="gpu", role="symptom",
        title=(f"collectives take {share:.0%} of every rank's GPU window beyond waiting for "
               f"other ranks (skew p50 {_skew_ms(coll.skew_p50_ns)} ms)"),
        evidence=evidence,
        why=("The time a collective takes once every rank has arrived is the interconnect and "
             "the collective algorithm (NVLink/XGMI peer-to-peer, vLLM's custom all-reduce, "
             "NCCL's protocol); in a tensor-parallel step it is not hidden behind compute."),
        fix=("Check that peer-to-peer is on (no NCCL_P2P_DISABLE; nvidia-smi topo -m shows NV# "
             "between the ranks' GPUs), that vLLM's custom all-reduce is not disabled "
             "(--disable-custom-all-reduce), no forced NCCL_PROTO/NCCL_ALGO; compare with a "
             "smaller tensor-parallel size."),
        reference=reference("trace.collective_share", NCCL_REF),
        impact=make_impact("gpu_window", share, value_ms=_ms(ms),
                           measured_at="every rank (mean)"))

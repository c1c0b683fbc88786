"""Many traces at once (one per rank of a tensor/expert-parallel job): each analysed in its own
process (``--jobs N``) or Ray task (``--ray``), then one cross-rank view.

Memory stays bounded per worker: every trace is read and analysed in a fresh process that exits
after it (``max_tasks_per_child=1`` locally, ``max_calls=1`` on Ray), so a 64-rank job never holds
more than ``jobs`` traces' events at once, and the driver keeps only the small typed results plus
each rank's sequence of collective (NCCL/RCCL) kernel durations. Each worker's peak RSS and wall
time are reported.

Cross-rank view. In a synchronous collective every rank leaves together, so a rank that arrived
early spends the difference inside the kernel: for the k-th collective of every rank,
``wait_r = dur_r - min(dur)`` and ``skew = max(dur) - min(dur)``. Durations, not start times, so
no clock has to be shared between ranks (or hosts). The rank with the least total wait is the
one the others wait for: the straggler (its compute is the slowest). This is the same reading
of collective kernels as HTA's straggler / comm-comp analyses.
"""

from __future__ import annotations

import os
import re
import resource
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from latscope.errors import ConfigError, LatscopeError
from latscope.trace.analyze import AnalysisOptions, analyze_trace, rank_summary
from latscope.trace.results import (
    CollectiveSkew,
    CrossRankView,
    KindWait,
    RankRef,
    RankSummary,
    RankWait,
    SlowestRank,
    TraceAnalysis,
    WorkerInfo,
)


@dataclass
class RankAnalysis:
    path: str
    result: TraceAnalysis | None = None
    # per device: (kernel names, durations ns) of its communication kernels, in start order
    collectives: dict[int, tuple[list[str], list[int]]] = field(default_factory=dict)
    peak_rss_mb: float = 0.0
    wall_s: float = 0.0
    pid: int = 0
    host: str = ""
    error: LatscopeError | None = None


def analyze_one(path: str, options: AnalysisOptions) -> RankAnalysis:
    """One trace, start to end, in the calling process (a pool worker or a Ray task)."""
    import socket

    from latscope.trace.analysis.device import COMM, split_devices
    from latscope.trace.readers import read_trace
    from latscope.trace.taxonomy import classify_names

    t0 = time.perf_counter()
    out = RankAnalysis(path, pid=os.getpid(), host=socket.gethostname())
    try:
        trace = read_trace(path)
        out.result = analyze_trace(trace, options)
        names = classify_names(trace.names, trace.meta.vendor)
        clamp = trace.meta.vendor == "amd" if options.clamp_queues is None \
            else options.clamp_queues
        for dev in split_devices(trace, names, clamp_queues=clamp):
            comm = np.flatnonzero(dev.role == COMM)
            if len(comm):
                out.collectives[dev.device] = (
                    [names.display[i] for i in dev.gpu.name[comm]],
                    (dev.gpu.end[comm] - dev.gpu.start[comm]).tolist())
    except LatscopeError as exc:
        out.error = exc
    out.wall_s = time.perf_counter() - t0
    out.peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def analyze_files(paths: list[str], options: AnalysisOptions, *, jobs: int = 1,
                  use_ray: bool = False, ray_address: str | None = None) -> list[RankAnalysis]:
    """Every path analysed, results in the order given; a bad file is an ``error`` entry."""
    if jobs < 1:
        raise ConfigError(f"--jobs {jobs}: must be at least 1")
    # Ray workers may run in another directory (a shared file system): absolute paths there;
    # locally the paths as given, so that messages name the file the user named.
    paths = [str(Path(p).resolve()) if use_ray else str(p) for p in paths]
    if use_ray:
        return _on_ray(paths, options, ray_address)
    if jobs == 1:
        return [analyze_one(p, options) for p in paths]
    import multiprocessing

    with ProcessPoolExecutor(max_workers=min(jobs, len(paths)),
                             mp_context=multiprocessing.get_context("spawn"),
                             max_tasks_per_child=1) as pool:
        return list(pool.map(analyze_one, paths, [options] * len(paths)))


def _on_ray(paths: list[str], options: AnalysisOptions,
            address: str | None) -> list[RankAnalysis]:
    try:
        import ray
    except ImportError as exc:
        if exc.name != "ray":
            raise
        raise ConfigError("trace --ray needs Ray: pip install 'latscope[ray]'") from None
    from latscope.load.rayworkers import connect

    connect(address)
    task = ray.remote(num_cpus=1, max_calls=1)(analyze_one)  # a fresh process per trace
    done: list[RankAnalysis] = ray.get([task.remote(p, options) for p in paths])
    return done


def cross_rank(analyses: list[RankAnalysis]) -> CrossRankView:
    """Per-rank busy/idle side by side, the slowest rank, and collective skew when the traces
    carry communication kernels."""
    ok = [a for a in analyses if a.result is not None]
    rows = rank_summary([a.result for a in ok if a.result is not None])
    by_key = {(r.path, r.device): r for r in rows}
    view = CrossRankView(ranks=rows, workers=[
        WorkerInfo(path=a.path, pid=a.pid, host=a.host, wall_s=a.wall_s,
                   peak_rss_mb=a.peak_rss_mb, error=str(a.error) if a.error else None)
        for a in analyses])
    if rows:
        slowest = max(rows, key=lambda r: r.busy_ns - _comm_ns(r))
        view.slowest_rank = SlowestRank(path=slowest.path, rank=slowest.rank,
                                        device=slowest.device,
                                        compute_busy_ns=slowest.busy_ns - _comm_ns(slowest),
                                        by="GPU busy time outside exposed communication")
    seqs = {(a.path, dev): c for a in ok for dev, c in a.collectives.items()}
    if len(seqs) >= 2:
        view.collectives = collective_skew(seqs, by_key)
    return view


# Collective kinds by kernel name: NCCL/RCCL (``ncclDevKernel_AllReduce_RING_LL``), vLLM's custom
# all-reduce (``cross_device_reduce_1stage``), NVLS (``multimem_all_reduce_kernel``).
_KINDS = (("all-reduce", re.compile(r"all_?reduce|cross_device_reduce", re.I)),
          ("all-gather", re.compile(r"all_?gather", re.I)),
          ("reduce-scatter", re.compile(r"reduce_?scatter", re.I)),
          ("all-to-all", re.compile(r"all_?to_?all", re.I)),
          ("send/recv", re.compile(r"send|recv", re.I)),
          ("broadcast", re.compile(r"broadcast", re.I)))


def collective_kind(name: str) -> str:
    return next((kind for kind, pattern in _KINDS if pattern.search(name)), "other")


def _by_kind(kinds: list[str], durs: np.ndarray, wait: np.ndarray) -> list[KindWait]:
    """Per collective kind of one rank: count, total time and the part spent waiting."""
    out = []
    for kind in dict.fromkeys(kinds):
        mask = np.array([k == kind for k in kinds])
        out.append(KindWait(kind=kind, count=int(mask.sum()), total_ns=int(durs[mask].sum()),
                            wait_ns=int(wait[mask].sum())))
    return sorted(out, key=lambda r: -r.total_ns)


def _comm_ns(row: RankSummary) -> float:
    return row.exposed_comm_share * row.window_ns


def collective_skew(seqs: dict[tuple[str, int], tuple[list[str], list[int]]],
                    rows: dict[tuple[str, int], RankSummary]) -> CollectiveSkew:
    """k-th collective of every rank matched by position (and name); see the module doc."""
    keys = sorted(seqs)
    n = min(len(seqs[k][1]) for k in keys)
    names = np.array([seqs[k][0][:n] for k in keys], dtype=object)
    durs = np.array([seqs[k][1][:n] for k in keys], dtype=np.int64)
    same = np.all(names == names[0], axis=0)  # a position where ranks disagree is not matched
    durs = durs[:, same]
    notes = []
    if len({len(seqs[k][1]) for k in keys}) > 1:
        notes.append("ranks ran different numbers of collectives: matched the first "
                     f"{n} by position")
    if not same.all():
        notes.append(f"{int((~same).sum())} position(s) had different kernels across ranks "
                     "and were left out")
    if durs.shape[1] == 0:
        return CollectiveSkew(matched=0, notes=notes)
    wait = durs - durs.min(axis=0)
    skew = durs.max(axis=0) - durs.min(axis=0)
    kinds = [collective_kind(n) for n in names[0][same]]
    per_rank: list[RankWait] = []
    for i, key in enumerate(keys):
        row = rows.get(key)
        window = row.window_ns if row is not None else 0
        per_rank.append(RankWait(path=key[0], device=key[1],
                                 rank=row.rank if row is not None else None,
                                 collective_ns=int(durs[i].sum()), wait_ns=int(wait[i].sum()),
                                 wait_share=float(wait[i].sum() / window) if window else None,
                                 by_kind=_by_kind(kinds, durs[i], wait[i])))
    straggler = min(per_rank, key=lambda r: r.wait_ns)
    return CollectiveSkew(matched=int(durs.shape[1]),
                          skew_p50_ns=float(np.percentile(skew, 50)),
                          skew_p99_ns=float(np.percentile(skew, 99)),
                          skew_max_ns=int(skew.max()), per_rank=per_rank,
                          straggler=RankRef(path=straggler.path, device=straggler.device,
                                            rank=straggler.rank),
                          notes=notes)

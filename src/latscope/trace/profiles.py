"""Which files in a profiler directory make up one profile, and which rank each one is.

vLLM's torch profiler writes one Kineto file per worker, named by PyTorch's
``tensorboard_trace_handler`` as ``{worker_name}.{time_ns}.pt.trace.json[.gz]``, with the worker
name from ``vllm.distributed.utils.get_worker_rank_suffix``: ``dp0_pp0_tp1_dcp0_ep0_rank1``
(vLLM 0.26, ``v1/worker/gpu_worker.py``; a ``profile_prefix`` is put in front when given). The API
server writes a CPU-only trace of its own beside them (``{host}_{pid}.async_llm.{time_ns}...``,
unless ``ignore_frontend`` is set): it holds no GPU activity and is no rank.

A tensor-parallel server of N ranks writes N worker files per ``/stop_profile``; the newest file of
each rank is that profile's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

TRACE_GLOB = "**/*.pt.trace.json*"
_RANK = re.compile(r"(?:^|_)rank(\d+)\.")
_TP = re.compile(r"(?:^|_)tp(\d+)_")
_FRONTEND = ".async_llm."


@dataclass(frozen=True)
class RankFile:
    path: Path
    rank: int | None  # the global rank in the file name; None when the name carries none
    tp_rank: int | None


def rank_file(path: Path) -> RankFile:
    name = path.name
    rank, tp = _RANK.search(name), _TP.search(name)
    return RankFile(path, int(rank.group(1)) if rank else None, int(tp.group(1)) if tp else None)


def is_frontend(path: Path) -> bool:
    """The API server's CPU-only trace (``...async_llm...``): no GPU activity, no rank."""
    return _FRONTEND in path.name


def profile_files(paths: list[Path]) -> list[RankFile]:
    """The worker files of the newest profile among ``paths`` (the files a profile just wrote):
    the API server's CPU trace left out, the newest file per rank, ordered by rank. When no name
    carries a rank (another profiler's naming), the newest file alone, as one rank."""
    workers = sorted((p for p in paths if not is_frontend(p)),
                     key=lambda p: p.stat().st_mtime, reverse=True)
    by_rank: dict[int, RankFile] = {}
    for rf in map(rank_file, workers):
        if rf.rank is not None:
            by_rank.setdefault(rf.rank, rf)
    if not by_rank:
        return [rank_file(workers[0])] if workers else []
    return [by_rank[r] for r in sorted(by_rank)]

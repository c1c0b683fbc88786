"""diagnose's trace analysis: one trace, or one per rank of a tensor-parallel profile, into what
``trace.json`` stores and the findings read from it (live and in ``--replay``).

``trace.json`` is the first rank's analysis, as for one trace (what the report's GPU section and
the capacity verdict read); with several ranks it also holds ``other_ranks`` (each rank's
analysis) and ``cross_rank`` (``latscope.trace.parallel.cross_rank``: per-rank busy/idle and
communication, the slowest rank, collective skew and each rank's wait): a ``StoredTrace``
(``trace.files``), ns in memory, ms in the file.
"""

from __future__ import annotations

import os

from latscope.trace.files import StoredTrace


def analyse_traces(paths: list[str]) -> tuple[StoredTrace, list[str]]:
    """The stored analysis of ``paths`` and notes (a rank whose file could not be read)."""
    from latscope.trace.analyze import AnalysisOptions, analyze_trace
    from latscope.trace.parallel import analyze_files, cross_rank
    from latscope.trace.readers import read_trace

    if len(paths) == 1:
        one = analyze_trace(read_trace(paths[0]))
        return StoredTrace(source=one.source, devices=one.devices), []
    # a process per trace where there are cores to spare (memory: one trace per job); in this
    # process otherwise, one trace at a time
    jobs = min(len(paths), max(1, (os.cpu_count() or 2) // 2))
    analyses = analyze_files(paths, AnalysisOptions(), jobs=jobs)
    good = [a.result for a in analyses if a.result is not None]
    notes = [f"{a.path}: not analysed ({a.error})" for a in analyses if a.error is not None]
    if not good:
        raise analyses[0].error  # type: ignore[misc]  # every rank failed: the first reason
    first = good[0]
    return StoredTrace(source=first.source, devices=first.devices, other_ranks=good[1:],
                       cross_rank=cross_rank(analyses)), notes


def rank_count(stored: StoredTrace | None) -> int:
    return len(stored.ranks()) if stored is not None else 0

"""Joining GPU activities to the CPU calls that issued them, by correlation id.

One ``cudaGraphLaunch``/``hipGraphLaunch`` correlation id maps to every kernel of the graph, so
the join is many-to-one; per-kernel launch delay only means something for the first of them.
"""

from __future__ import annotations

import re

import numpy as np

from latscope.trace.model import TraceEvents

GRAPH_LAUNCH = re.compile(r"GraphLaunch")
BLOCKING_COPY = re.compile(r"^(cudaMemcpy|cudaMemcpy2D|cudaMemcpyToSymbol|cudaMemcpyFromSymbol|"
                           r"hipMemcpy|hipMemcpyWithStream|hipMemcpyHtoD|hipMemcpyDtoH|"
                           r"hipMemcpyDtoD|hipMemcpy2D|cuMemcpyHtoD|cuMemcpyDtoH|cuMemcpy)$")


def api_rows_for(trace: TraceEvents, corr: np.ndarray) -> np.ndarray:
    """Index into ``trace.api`` of the call with each correlation id, or -1."""
    api_corr = trace.api.corr
    if len(api_corr) == 0:
        return np.full(len(corr), -1, dtype=np.int64)
    order = np.argsort(api_corr, kind="stable")
    sorted_corr = api_corr[order]
    pos = np.clip(np.searchsorted(sorted_corr, corr), 0, len(sorted_corr) - 1)
    found = (sorted_corr[pos] == corr) & (corr >= 0)
    return np.where(found, order[pos], -1)


def name_flags(trace: TraceEvents, pattern: re.Pattern[str]) -> np.ndarray:
    """Boolean per name id: does the name match ``pattern``."""
    return np.fromiter((bool(pattern.search(n)) for n in trace.names), dtype=bool,
                       count=len(trace.names))

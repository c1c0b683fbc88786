"""Cross-check against HTA (holistictraceanalysis 0.5.0) on the Kineto fixtures.

Where the definitions agree the numbers must agree; where they differ, the difference must be
exactly the one explained:

- HTA rounds every GPU event inward to whole microseconds (``ts`` up, ``ts + dur`` down;
  ``round_down_time_stamps`` in hta/common/trace_parser.py). Applying that rounding to our
  nanosecond intervals must give HTA's idle time and span *exactly*.
- HTA counts as GPU activity every row with a ``stream`` column != -1, which on fixture #6
  includes one ``cpu_op`` that carries a ``stream`` argument; adding that CPU op reproduces HTA.
- HTA's "compute" includes ``multimem_all_reduce_kernel`` (its communication regex only knows
  ``nccl``/``hip``/``hccl`` prefixes); latscope classes it as communication.
"""

from __future__ import annotations

import gzip
import json
import logging
import shutil
import warnings

import numpy as np
import pytest

from latscope.trace.analysis import intervals as iv
from latscope.trace.analyze import analyze_trace

hta_analysis = pytest.importorskip("hta.trace_analysis")


def _hta_breakdown(path, tmp_path):
    folder = tmp_path / "hta"
    folder.mkdir()
    shutil.copy(path, folder / "rank0.json.gz")
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    try:
        analysis = hta_analysis.TraceAnalysis(trace_dir=str(folder))
        row = analysis.get_temporal_breakdown(visualize=False).iloc[0]
    finally:
        logging.disable(logging.NOTSET)
    return {k: int(row[k]) for k in ("idle_time(us)", "compute_time(us)", "kernel_time(us)")}


def _hta_rounded_idle(starts_ns: np.ndarray, ends_ns: np.ndarray) -> tuple[int, int]:
    s = -((-starts_ns) // 1000)  # ceil to us
    e = np.maximum(ends_ns // 1000, s)  # floor to us
    span = int(e.max() - s.min())
    return span - iv.union_length(s, e), span


def _cpu_ops_with_stream(path) -> tuple[np.ndarray, np.ndarray]:
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    rows = [(round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)) for e in events
            if e.get("cat") == "cpu_op" and "stream" in (e.get("args") or {})]
    return (np.array([r[0] for r in rows], dtype=np.int64),
            np.array([r[1] for r in rows], dtype=np.int64))


@pytest.mark.parametrize("key", ["mi250", "mi300x_hf", "b200"])
def test_idle_matches_hta_once_its_rounding_is_applied(key, kineto_path, loaded, tmp_path):
    hta = _hta_breakdown(kineto_path(key), tmp_path)
    trace = loaded(key)
    extra_s, extra_e = _cpu_ops_with_stream(kineto_path(key))
    starts = np.concatenate((trace.gpu.start, extra_s))
    ends = np.concatenate((trace.gpu.end, extra_e))
    idle_us, span_us = _hta_rounded_idle(starts, ends)
    assert span_us == hta["kernel_time(us)"]
    assert idle_us == hta["idle_time(us)"]
    # and the unrounded latscope numbers differ from HTA's by no more than that rounding
    # (under 1 us at each of the two ends of every event)
    ours = analyze_trace(trace).devices[0].breakdown
    assert abs(ours.idle_ns / 1000 - hta["idle_time(us)"]) < 2 * len(starts)


def test_b200_compute_differs_by_the_all_reduce_kernels(kineto_path, loaded, tmp_path):
    hta = _hta_breakdown(kineto_path("b200"), tmp_path)
    dev = analyze_trace(loaded("b200")).devices[0]
    ours_compute_us = dev.breakdown.compute_ns / 1000
    multimem = next(r for r in dev.kernels.top if "multimem_all_reduce" in r.name)
    # HTA counts the all-reduce as compute: its compute is larger by about that kernel's time
    # (minus HTA's inward rounding of ~1 us per kernel, which only shrinks its number)
    gap_us = hta["compute_time(us)"] - ours_compute_us
    assert 0 < gap_us <= multimem.total_ns / 1000
    assert gap_us > 0.5 * multimem.total_ns / 1000

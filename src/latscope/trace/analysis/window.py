"""The analysis window per device: where the steady state is.

- ``auto`` (default): from the first to the last GPU activity of the device (leading and trailing
  idle trimmed). This is also HTA's ``kernel_time`` span, so idle numbers compare directly.
  One more trim: a gap longer than half of that span with at most 2 % of the activities on its
  outer side (a warm-up kernel, then a capture pause: sample #3 has a 463 ms one) is cut off, and
  the method says so.
- ``steps``: the span of step annotations (``ProfilerStep#N``, vLLM ``execute_*``; regex
  configurable). GPU-side annotations are used when the trace has them; otherwise the window runs
  from the first to the last GPU activity launched by a CPU call inside the CPU annotations.
- ``START:END``: milliseconds from the device's first GPU activity (explicit override).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from latscope.errors import ConfigError
from latscope.trace.model import MAX_TIME_NS, RangeKind, TraceEvents

DEFAULT_STEP_PATTERN = r"^ProfilerStep#|^execute_|^step\["


@dataclass
class Window:
    start: int
    end: int
    method: str  # "auto" | "steps:<source>" | "explicit"
    steps: int = 0  # number of step annotations inside, when windowed by steps

    @property
    def length(self) -> int:
        return max(0, self.end - self.start)


def choose_window(trace: TraceEvents, device: int, gpu_start: np.ndarray, gpu_end: np.ndarray,
                  gpu_corr: np.ndarray, spec: str = "auto",
                  step_pattern: str = DEFAULT_STEP_PATTERN) -> Window:
    first, last = int(gpu_start.min()), int(gpu_end.max())
    if spec == "auto":
        return _auto_window(gpu_start, gpu_end)
    if spec == "steps":
        return _steps_window(trace, device, gpu_start, gpu_end, gpu_corr, step_pattern) or \
            Window(first, last, "auto (no step annotations found)")
    return _explicit_window(spec, first)


OUTLIER_GAP_SHARE = 0.5
OUTLIER_ACTIVITY_SHARE = 0.02


def _auto_window(gpu_start: np.ndarray, gpu_end: np.ndarray) -> Window:
    order = np.argsort(gpu_start, kind="stable")
    s, e = gpu_start[order], gpu_end[order]
    first, last = int(s[0]), int(e.max())
    run_end = np.maximum.accumulate(e)
    gaps = s[1:] - run_end[:-1]  # gap before activity i+1
    if len(gaps) == 0:
        return Window(first, last, "auto")
    i = int(np.argmax(gaps))
    span, n = last - first, len(s)
    if gaps[i] <= OUTLIER_GAP_SHARE * span:
        return Window(first, last, "auto")
    gap_ms = gaps[i] / 1e6
    if i + 1 <= max(1, OUTLIER_ACTIVITY_SHARE * n):
        return Window(int(s[i + 1]), last,
                      f"auto (trimmed a {gap_ms:.1f} ms gap after the first {i + 1} activities)")
    if n - (i + 1) <= max(1, OUTLIER_ACTIVITY_SHARE * n):
        return Window(first, int(run_end[i]),
                      f"auto (trimmed a {gap_ms:.1f} ms gap before the last {n - i - 1} "
                      "activities)")
    return Window(first, last, "auto")


def _explicit_window(spec: str, origin: int) -> Window:
    try:
        lo_text, hi_text = spec.split(":", 1)
        lo, hi = float(lo_text), float(hi_text)
    except ValueError:
        raise ConfigError(f"--window {spec!r}: expected auto, steps or START_MS:END_MS") from None
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ConfigError(f"--window {spec!r}: START_MS and END_MS must be finite numbers")
    if hi <= lo:
        raise ConfigError(f"--window {spec!r}: END_MS must be greater than START_MS")
    if max(abs(lo), abs(hi)) * 1e6 > MAX_TIME_NS:  # int64 ns arithmetic must not overflow
        raise ConfigError(f"--window {spec!r}: START_MS and END_MS must lie within "
                          f"{MAX_TIME_NS / 1e6:.3g} ms of the first GPU activity")
    return Window(origin + int(lo * 1e6), origin + int(hi * 1e6), "explicit")


def _matching_ranges(trace: TraceEvents, kind: RangeKind, pattern: re.Pattern[str],
                     device: int | None) -> np.ndarray:
    ranges = trace.ranges
    mask = ranges.kind == kind
    if device is not None:
        mask &= ranges.device == device
    idx = np.flatnonzero(mask)
    names = trace.names
    return np.array([i for i in idx if pattern.search(names[ranges.name[i]])], dtype=np.int64)


def _steps_window(trace: TraceEvents, device: int, gpu_start: np.ndarray, gpu_end: np.ndarray,
                  gpu_corr: np.ndarray, step_pattern: str) -> Window | None:
    pattern = re.compile(step_pattern)
    ranges = trace.ranges
    gpu_side = _matching_ranges(trace, RangeKind.GPU_ANNOTATION, pattern, device)
    if len(gpu_side):
        return Window(int(ranges.start[gpu_side].min()), int(ranges.end[gpu_side].max()),
                      "steps:gpu_annotation", steps=len(gpu_side))
    cpu_side = _matching_ranges(trace, RangeKind.ANNOTATION, pattern, None)
    if not len(cpu_side) or not len(trace.api):
        return None
    lo, hi = int(ranges.start[cpu_side].min()), int(ranges.end[cpu_side].max())
    api = trace.api
    inside = (api.start >= lo) & (api.start <= hi) & (api.corr >= 0)
    launched = np.isin(gpu_corr, api.corr[inside])
    if not launched.any():
        return None
    return Window(int(gpu_start[launched].min()), int(gpu_end[launched].max()),
                  "steps:cpu_annotation", steps=len(cpu_side))

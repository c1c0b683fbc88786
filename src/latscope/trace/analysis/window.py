"""The analysis window per device: where the steady state is.

- ``auto`` (default): from the first to the last GPU activity of the device (leading and trailing
  idle trimmed). This is also HTA's ``kernel_time`` span, so idle numbers compare directly.
- ``steps``: the span of step annotations (``ProfilerStep#N``, vLLM ``execute_*``; regex
  configurable). GPU-side annotations are used when the trace has them; otherwise the window runs
  from the first to the last GPU activity launched by a CPU call inside the CPU annotations.
- ``START:END``: milliseconds from the device's first GPU activity (explicit override).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from latscope.errors import ConfigError
from latscope.trace.model import RangeKind, TraceEvents

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
        return Window(first, last, "auto")
    if spec == "steps":
        return _steps_window(trace, device, gpu_start, gpu_end, gpu_corr, step_pattern) or \
            Window(first, last, "auto (no step annotations found)")
    return _explicit_window(spec, first)


def _explicit_window(spec: str, origin: int) -> Window:
    try:
        lo_text, hi_text = spec.split(":", 1)
        lo, hi = float(lo_text), float(hi_text)
    except ValueError:
        raise ConfigError(f"--window {spec!r}: expected auto, steps or START_MS:END_MS") from None
    if hi <= lo:
        raise ConfigError(f"--window {spec!r}: END_MS must be greater than START_MS")
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

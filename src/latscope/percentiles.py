"""A metric's distribution as every summary gives it: count, mean, std, min, max and percentiles
(numpy's linear interpolation, the method vllm bench serve uses)."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np

DEFAULT_PERCENTILES = (50, 90, 95, 99)


def distribution(values_ms: Sequence[float] | np.ndarray,
                 percentiles: Iterable[float] = DEFAULT_PERCENTILES) -> dict[str, Any]:
    """count, mean, std (population), min, max and the requested percentiles (linear interpolation,
    numpy's default, the same method as vllm bench serve) of one metric; ``None`` when empty."""
    arr = np.asarray(values_ms, dtype=np.float64)
    out: dict[str, Any] = {"count": int(arr.size)}
    if arr.size == 0:
        out.update(mean=None, std=None, min=None, max=None)
        out.update({pkey(p): None for p in percentiles})
        return out
    out.update(mean=float(arr.mean()), std=float(arr.std()), min=float(arr.min()),
               max=float(arr.max()))
    values = np.percentile(arr, list(percentiles))
    out.update({pkey(p): float(v) for p, v in zip(percentiles, values)})
    return out


def pkey(p: float) -> str:
    return f"p{p:g}"

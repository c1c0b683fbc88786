"""Number formatting shared by the HTML and Markdown reports, so both print the same figures."""

from __future__ import annotations

import math
from typing import Any

NA = "n/a"


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def arm_share(value: Any) -> str:
    """An A/B arm's share over its runs (``prefix_cache_hit_rate``'s per-arm list, one value a
    run, None where a run had no figure) as the mean of the runs measured; a single share (an
    older report) as it is."""
    if isinstance(value, list):
        known = [v for v in map(_num, value) if v is not None]
        return pct(sum(known) / len(known)) if known else NA
    return pct(value)


def ms(value: Any) -> str:
    """'512 ms', '51.2 ms', '0.12 ms', '2.35 s'; n/a when not measured."""
    v = _num(value)
    if v is None:
        return NA
    if abs(v) >= 10_000:
        return f"{v / 1000:.3g} s"
    if abs(v) >= 100:
        return f"{v:.0f} ms"
    return f"{v:.3g} ms"


def pct(share: Any) -> str:
    """A share (0..1) as '81%', '4.2%', '0.3%'."""
    v = _num(share)
    if v is None:
        return NA
    v *= 100
    return f"{v:.0f}%" if abs(v) >= 10 else f"{v:.1f}%"


def signed_pct(value: Any) -> str:
    """A change already in percent: '-88.3%', '+4.0%'."""
    v = _num(value)
    return NA if v is None else f"{v:+.1f}%"


def interval(ci: Any) -> str:
    """[lo, hi] in percent as '[-90.1%, -86.0%]'."""
    if not isinstance(ci, (list, tuple)) or len(ci) != 2:
        return NA
    return f"[{signed_pct(ci[0])}, {signed_pct(ci[1])}]"


def number(value: Any, digits: int = 3) -> str:
    v = _num(value)
    if v is None:
        return NA if value is None else str(value)
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.{digits}g}"


def value_unit(value: Any, unit: str = "") -> str:
    text = number(value, 4) if _num(value) is not None else str(value)
    return f"{text} {unit}".strip()


def load_label(kind: str, load: Any) -> str:
    """'c=16' for a concurrency sweep, '8 req/s' for a rate sweep."""
    return f"{number(load)} req/s" if kind == "rate" else f"c={number(load)}"



"""Terminal lines for a run's GPU telemetry (``telemetry_facts``): one line per server GPU, or
the one line saying why there is none. Rendering only: the figures come from the facts."""

from __future__ import annotations

import textwrap
from typing import Any

WIDTH = 80


def telemetry_lines(facts: dict[str, Any]) -> list[str]:
    """``[]`` when the run had no sampler; else short lines, each at most 80 columns."""
    status = facts.get("status")
    if status == "absent":
        return []
    if status != "ok":
        return textwrap.wrap(f"GPU telemetry: none ({facts.get('why') or 'no reader'})",
                             WIDTH, subsequent_indent="  ")
    out = [f"GPU telemetry ({facts.get('source')}), server GPUs "
           f"{','.join(map(str, facts.get('gpus') or []))}:"]
    for gpu, g in (facts.get("per_gpu") or {}).items():
        parts = [f"busy {_n(g.get('util_pct_mean'))}%",
                 f"SM {_n(g.get('sm_clock_mhz_mean'))}/{_n(g.get('sm_clock_max_mhz'))} MHz",
                 f"{_n(g.get('power_w_mean'))}/{_n(g.get('power_limit_w'))} W",
                 f"max {_n(g.get('temp_c_max'))} C"]
        if g.get("mem_used_frac_max") is not None:
            parts.append(f"memory {g['mem_used_frac_max']:.0%}")
        out += textwrap.wrap(f"GPU{gpu}: " + ", ".join(parts), WIDTH, initial_indent="  ",
                             subsequent_indent="    ")
    queued = facts.get("queued") or {}
    if queued.get("scrapes"):
        out += textwrap.wrap(
            f"while requests waited ({queued['scrapes']} scrapes): busy "
            f"{_n(queued.get('util_pct_mean'))}%, clocks limited in "
            f"{(queued.get('limited_share') or 0):.0%}", WIDTH, initial_indent="  ",
            subsequent_indent="    ")
    return [line[:WIDTH] for line in out]


def _n(value: Any) -> str:
    return "?" if value is None else f"{value:,.0f}"

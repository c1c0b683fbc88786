"""Terminal lines for a run's GPU telemetry (``telemetry_facts``): one line per server GPU, or
the one line saying why there is none. Rendering only: the figures come from the facts."""

from __future__ import annotations

import textwrap

from latscope.telemetry.facts import TelemetryFacts

WIDTH = 80


def telemetry_lines(facts: TelemetryFacts) -> list[str]:
    """``[]`` when the run had no sampler; else short lines, each at most 80 columns."""
    if facts.status == "absent":
        return []
    if not facts.ok:
        return textwrap.wrap(f"GPU telemetry: none ({facts.why or 'no reader'})",
                             WIDTH, subsequent_indent="  ")
    out = [f"GPU telemetry ({facts.source}), server GPUs {','.join(map(str, facts.gpus))}:"]
    for gpu, g in facts.per_gpu.items():
        parts = [f"busy {_n(g.util_pct_mean)}%",
                 f"SM {_n(g.sm_clock_mhz_mean)}/{_n(g.sm_clock_max_mhz)} MHz",
                 f"{_n(g.power_w_mean)}/{_n(g.power_limit_w)} W",
                 f"max {_n(g.temp_c_max)} C"]
        if g.mem_used_frac_max is not None:
            parts.append(f"memory {g.mem_used_frac_max:.0%}")
        out += textwrap.wrap(f"GPU{gpu}: " + ", ".join(parts), WIDTH, initial_indent="  ",
                             subsequent_indent="    ")
    queued = facts.queued
    if queued.scrapes:
        out += textwrap.wrap(
            f"while requests waited ({queued.scrapes} scrapes): busy "
            f"{_n(queued.util_pct_mean)}%, clocks limited in "
            f"{(queued.limited_share or 0):.0%}", WIDTH, initial_indent="  ",
            subsequent_indent="    ")
    return [line[:WIDTH] for line in out]


def _n(value: float | None) -> str:
    return "?" if value is None else f"{value:,.0f}"

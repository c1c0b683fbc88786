"""The report's GPU series (report.json's ``telemetry``): one row per sample of the server's GPUs,
drawn under the server's running/waiting/KV on the same time axis, or the one line saying why
there are none."""

from __future__ import annotations

from pathlib import Path

import msgspec

from latscope.telemetry.facts import SOURCE, TelemetryFacts, telemetry_facts
from latscope.telemetry.sample import GpuSample, Number
from latscope.telemetry.sampler import read_telemetry


class TelemetrySeries(msgspec.Struct, omit_defaults=True, kw_only=True):
    """Columns of one length, a row per sample (``t_s`` from the first scrape); with a status
    other than "ok" only ``status`` and ``why``."""

    status: str
    why: str | None = None
    source: str | None = None
    gpus: list[int] | None = None
    t_s: list[float] | None = None
    gpu: list[int] | None = None
    util_pct: list[Number | None] | None = None
    sm_clock_mhz: list[Number | None] | None = None
    sm_clock_max_mhz: list[Number | None] | None = None
    power_w: list[Number | None] | None = None
    power_limit_w: list[Number | None] | None = None
    mem_used_pct: list[float | None] | None = None
    temp_c: list[Number | None] | None = None


def telemetry_section(run_dirs: list[Path], t0_wall: float | None = None
                      ) -> TelemetrySeries | None:
    """The report's GPU series of ``run_dirs``, ``t_s`` from ``t0_wall`` (default: the first
    ``/metrics`` scrape of these runs, which is where the report's server series starts) --
    or None when no run has telemetry."""
    rows: list[GpuSample] = []
    info: TelemetryFacts | None = None
    for run_dir in run_dirs:
        facts = telemetry_facts(run_dir)
        if not facts.ok:
            info = info or facts
            continue
        _, samples = read_telemetry(run_dir)
        rows += [s for s in samples if s.gpu in facts.gpus]
        info = facts if info is None or not info.ok else info
    if not rows or info is None:
        return TelemetrySeries(status=info.status, why=info.why or None) if info else None
    return _columns(sorted(rows, key=lambda s: s.wall_time), info,
                    t0_wall if t0_wall is not None else _first_scrape(run_dirs, rows))


def _first_scrape(run_dirs: list[Path], rows: list[GpuSample]) -> float:
    from latscope.server.scrape import read_snapshots

    firsts = [snaps[0].wall_time for snaps in map(read_snapshots, run_dirs) if snaps]
    return min(firsts) if firsts else min(s.wall_time for s in rows)


def _columns(rows: list[GpuSample], info: TelemetryFacts, t0_wall: float) -> TelemetrySeries:
    return TelemetrySeries(
        status="ok", source=f"{info.source} ({SOURCE})", gpus=list(info.gpus),
        t_s=[round(s.wall_time - t0_wall, 3) for s in rows], gpu=[s.gpu for s in rows],
        util_pct=[s.util_pct for s in rows], sm_clock_mhz=[s.sm_clock_mhz for s in rows],
        sm_clock_max_mhz=[s.sm_clock_max_mhz for s in rows], power_w=[s.power_w for s in rows],
        power_limit_w=[s.power_limit_w for s in rows],
        mem_used_pct=[_mem_used_pct(s) for s in rows],
        temp_c=[s.temp_c for s in rows])


def _mem_used_pct(s: GpuSample) -> float | None:
    used, total = s.mem_used_bytes, s.mem_total_bytes
    return 100 * used / total if used is not None and total else None

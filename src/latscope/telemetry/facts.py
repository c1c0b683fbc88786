"""What the GPUs did while the server was busy or queueing: the telemetry of one run directory,
joined with the server's ``/metrics`` scrapes of the same run.

``telemetry_facts(run_dir)`` is what the rules (latscope.findings.telemetry) and diagnose's
capacity verdict read: a ``TelemetryFacts``. Each scrape is paired with each of the server's
GPUs' nearest sample (within one sampling interval, else left out), so "while requests queued"
means "at the scrapes where ``vllm:num_requests_waiting`` was above 0". The report's GPU series
are ``latscope.telemetry.series``.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from latscope.errors import ConfigError
from latscope.telemetry.files import DIR, SAMPLES, DeviceInfo
from latscope.telemetry.sample import (
    LIMIT_REASONS,
    POWER_REASONS,
    THERMAL_REASONS,
    GpuProcess,
    GpuSample,
    Number,
)
from latscope.telemetry.sampler import read_telemetry

SOURCE = f"{DIR}/{SAMPLES}"
# A clock at or above this share of its maximum is "at max" (boost bins move by ~15 MHz).
AT_MAX_CLOCK = 0.97


@dataclass(frozen=True, slots=True)
class GpuState:
    """Utilisation, clocks and limits over the joined scrapes in one state (requests waiting,
    requests running): ``scrapes`` of ``of``; every figure None without such a scrape."""

    scrapes: int = 0
    of: int = 0
    util_pct_mean: float | None = None
    util_pct_p50: float | None = None
    low_util_share: float | None = None  # of the scrapes, below 50% utilisation
    clock_ratio_mean: float | None = None  # SM clock / its maximum
    limited_share: float | None = None  # clocks held down by a power or thermal limit
    power_limited_share: float | None = None
    thermal_limited_share: float | None = None
    reasons: tuple[str, ...] = ()
    power_w_mean: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz_mean: float | None = None
    sm_clock_max_mhz: float | None = None
    temp_c_max: Number | None = None


@dataclass(frozen=True, slots=True)
class GpuSummary:
    """One GPU over the whole run."""

    samples: int
    util_pct_mean: float | None = None
    util_pct_max: Number | None = None
    mem_used_frac_max: float | None = None
    mem_used_bytes_max: int | None = None
    mem_total_bytes: int | None = None
    power_w_mean: float | None = None
    power_w_max: Number | None = None
    power_limit_w: float | None = None
    power_default_limit_w: Number | None = None
    sm_clock_mhz_mean: float | None = None
    sm_clock_max_mhz: Number | None = None
    temp_c_max: Number | None = None
    violation_s: dict[str, float] = field(default_factory=dict)  # held down, by cause, run's


@dataclass(frozen=True, slots=True)
class PcieLink:
    """The widest/fastest link seen under load, and the link's maximum."""

    gen: int | None
    width: int | None
    max_gen: int | None
    max_width: int | None
    under_load_samples: int


@dataclass(frozen=True, slots=True)
class GpuErrors:
    """XID events and ECC errors that arrived during the run (None: not read)."""

    xids: tuple[int, ...] = ()
    ecc_corrected: int | None = None
    ecc_uncorrected: int | None = None


@dataclass(frozen=True, slots=True)
class TelemetryFacts:
    """``status`` "ok" (every field read), "unavailable" (``why``) or "absent" (no sampler)."""

    status: str
    why: str = ""
    source: str = ""
    run: str = ""  # the run directory's name
    gpus: tuple[int, ...] = ()  # the server's
    gpus_from: str = ""
    samples: int = 0
    per_gpu: dict[int, GpuSummary] = field(default_factory=dict)
    queued: GpuState = GpuState()  # at the scrapes with requests waiting
    busy: GpuState = GpuState()  # at the scrapes with requests running
    joined: int = 0
    pcie: dict[int, PcieLink] = field(default_factory=dict)
    errors: dict[int, GpuErrors] = field(default_factory=dict)
    others: dict[int, list[GpuProcess]] | None = None  # None: tenants not told apart
    devices: tuple[DeviceInfo, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def where(self) -> str:
        """The source a finding cites: the reader, the run and the file."""
        return f"{self.source or 'GPU telemetry'}, {self.run}/{SOURCE}"


@dataclass(frozen=True, slots=True)
class _Joined:
    """One scrape paired with one GPU's nearest sample."""

    sample: GpuSample
    running: float | None
    waiting: float | None


def telemetry_facts(run_dir: Path) -> TelemetryFacts:
    """The facts of one run directory; "absent" without a sampler, "unavailable" (with why)
    where it read no GPU or its files are not what it writes."""
    try:
        summary, samples = read_telemetry(run_dir)
    except ConfigError as exc:
        return TelemetryFacts("unavailable", why=str(exc))
    if summary is None:
        return TelemetryFacts("absent", why="no GPU telemetry in this run directory")
    if summary.status != "ok" or not samples:
        return TelemetryFacts("unavailable", why=summary.why or "the sampler recorded no sample")
    server = summary.server
    gpus = (server.gpus if server is not None and server.gpus
            else sorted({s.gpu for s in samples}))
    mine = [s for s in samples if s.gpu in gpus]
    joined = _join(Path(run_dir), mine, float(summary.interval_s or 2.0))
    return TelemetryFacts(
        "ok", source=summary.source or "", run=Path(run_dir).name, gpus=tuple(gpus),
        gpus_from=(server.gpus_from if server is not None and server.gpus_from
                   else "every GPU (the server's could not be told apart)"),
        samples=len(mine),
        per_gpu={g: _per_gpu([s for s in mine if s.gpu == g]) for g in gpus},
        queued=_state(joined, lambda p: (p.waiting or 0) > 0),
        busy=_state(joined, lambda p: (p.running or 0) > 0),
        joined=len(joined), pcie=_pcie(mine, joined), errors=_errors(mine),
        others=server.others if server is not None else None,
        devices=tuple(summary.devices or ()))


def utilisation_at_load(facts: TelemetryFacts) -> float | None:
    """Mean GPU utilisation (%) over the scrapes where the server ran requests: what the
    capacity verdict reads at the knee (None without telemetry or a busy scrape)."""
    return facts.busy.util_pct_mean if facts.ok else None


def _join(run_dir: Path, samples: list[GpuSample], interval_s: float) -> list[_Joined]:
    from latscope.server.metrics import gauge_series
    from latscope.server.scrape import read_snapshots

    snaps = read_snapshots(run_dir)
    running = dict(gauge_series(snaps, "vllm:num_requests_running", combine=sum))
    waiting = dict(gauge_series(snaps, "vllm:num_requests_waiting", combine=sum))
    by_gpu: dict[int, list[GpuSample]] = {}
    for s in sorted(samples, key=lambda s: s.t_ns):
        by_gpu.setdefault(s.gpu, []).append(s)
    out = []
    for snap in snaps:
        for series in by_gpu.values():
            near = _nearest(series, snap.t_ns, int(interval_s * 1e9))
            if near is not None:
                key = snap.t_ns / 1e9  # gauge_series keys: seconds after origin 0
                out.append(_Joined(near, running.get(key), waiting.get(key)))
    return out


def _nearest(series: list[GpuSample], t_ns: int, within_ns: int) -> GpuSample | None:
    times = [s.t_ns for s in series]
    i = bisect.bisect_left(times, t_ns)
    best = min((c for c in (i - 1, i) if 0 <= c < len(series)),
               key=lambda c: abs(times[c] - t_ns), default=None)
    return series[best] if best is not None and abs(times[best] - t_ns) <= within_ns else None


def _limited(s: GpuSample) -> bool:
    """Clocks held below max by a power or thermal limit at this sample."""
    ratio = _clock_ratio(s)
    return bool(set(s.reasons or ()) & LIMIT_REASONS) and (ratio is None or ratio < AT_MAX_CLOCK)


def _clock_ratio(s: GpuSample) -> float | None:
    clock, top = s.sm_clock_mhz, s.sm_clock_max_mhz
    return clock / top if clock is not None and top else None


def _state(joined: list[_Joined], when: Callable[[_Joined], bool]) -> GpuState:
    """Utilisation, clocks and limits over the joined scrapes where ``when`` holds."""
    points = [p.sample for p in joined if p.running is not None and when(p)]
    if not points:
        return GpuState(0, len(joined))
    util = [s.util_pct for s in points if s.util_pct is not None]
    ratios = [r for r in (_clock_ratio(s) for s in points) if r is not None]
    limited = [s for s in points if _limited(s)]
    return GpuState(
        len(points), len(joined), util_pct_mean=_mean(util), util_pct_p50=_median(util),
        low_util_share=(sum(u < 50 for u in util) / len(util)) if util else None,
        clock_ratio_mean=_mean(ratios), limited_share=len(limited) / len(points),
        power_limited_share=_share(limited, POWER_REASONS, len(points)),
        thermal_limited_share=_share(limited, THERMAL_REASONS, len(points)),
        reasons=tuple(sorted({r for s in limited for r in s.reasons or ()})),
        power_w_mean=_mean([s.power_w for s in points if s.power_w is not None]),
        power_limit_w=_mean([s.power_limit_w for s in points if s.power_limit_w is not None]),
        sm_clock_mhz_mean=_mean([s.sm_clock_mhz for s in points if s.sm_clock_mhz is not None]),
        sm_clock_max_mhz=_mean([s.sm_clock_max_mhz for s in points
                                if s.sm_clock_max_mhz is not None]),
        temp_c_max=max((s.temp_c for s in points if s.temp_c is not None), default=None))


def _share(limited: list[GpuSample], reasons: frozenset[str], of: int) -> float:
    return sum(bool(set(s.reasons or ()) & reasons) for s in limited) / of


def _per_gpu(series: list[GpuSample]) -> GpuSummary:
    def vals(values: list[Number | None]) -> list[Number]:
        return [v for v in values if v is not None]

    mem = vals([s.mem_used_frac() for s in series])
    return GpuSummary(
        len(series), util_pct_mean=_mean(vals([s.util_pct for s in series])),
        util_pct_max=max(vals([s.util_pct for s in series]), default=None),
        mem_used_frac_max=max(mem, default=None),
        mem_used_bytes_max=max((s.mem_used_bytes for s in series
                                if s.mem_used_bytes is not None), default=None),
        mem_total_bytes=max((s.mem_total_bytes for s in series
                             if s.mem_total_bytes is not None), default=None),
        power_w_mean=_mean(vals([s.power_w for s in series])),
        power_w_max=max(vals([s.power_w for s in series]), default=None),
        power_limit_w=_mean(vals([s.power_limit_w for s in series])),
        power_default_limit_w=max(vals([s.power_default_limit_w for s in series]), default=None),
        sm_clock_mhz_mean=_mean(vals([s.sm_clock_mhz for s in series])),
        sm_clock_max_mhz=max(vals([s.sm_clock_max_mhz for s in series]), default=None),
        temp_c_max=max(vals([s.temp_c for s in series]), default=None),
        violation_s=_violation_deltas(series))


def _violation_deltas(series: list[GpuSample]) -> dict[str, float]:
    """Seconds the clocks were held down by each cause over the run (NVML's cumulative
    violation counters, last minus first)."""
    withv = [s.violation_s for s in series if s.violation_s]
    if len(withv) < 2:
        return {}
    first, last = withv[0], withv[-1]
    return {k: last[k] - first[k] for k in last if k in first and last[k] >= first[k]}


def _pcie(series: list[GpuSample], joined: list[_Joined]) -> dict[int, PcieLink]:
    """Per GPU, the widest/fastest link seen while the server worked (links drop to a lower
    generation when idle to save power: an idle reading proves nothing)."""
    busy_ids = {id(p.sample) for p in joined if (p.running or 0) > 0}
    out = {}
    for gpu in sorted({s.gpu for s in series}):
        mine = [s for s in series if s.gpu == gpu]
        loaded = [s for s in mine if id(s) in busy_ids] or [
            s for s in mine if (s.util_pct or 0) > 0]
        out[gpu] = PcieLink(
            gen=max((s.pcie_gen for s in loaded if s.pcie_gen is not None), default=None),
            width=max((s.pcie_width for s in loaded if s.pcie_width is not None), default=None),
            max_gen=max((s.pcie_max_gen for s in mine if s.pcie_max_gen is not None),
                        default=None),
            max_width=max((s.pcie_max_width for s in mine if s.pcie_max_width is not None),
                          default=None),
            under_load_samples=len(loaded))
    return out


def _errors(series: list[GpuSample]) -> dict[int, GpuErrors]:
    out = {}
    for gpu in sorted({s.gpu for s in series}):
        mine = [s for s in series if s.gpu == gpu]
        corrected = [s.ecc_corrected for s in mine if s.ecc_corrected is not None]
        uncorrected = [s.ecc_uncorrected for s in mine if s.ecc_uncorrected is not None]
        out[gpu] = GpuErrors(tuple(x for s in mine for x in s.xids or ()),
                             _rise(corrected), _rise(uncorrected))
    return out


def _rise(counts: list[int]) -> int | None:
    """A counter's rise over the run (last minus first); None with fewer than two readings."""
    return counts[-1] - counts[0] if len(counts) >= 2 else None


def _mean(values: list[Number]) -> float | None:
    return float(np.mean(values)) if values else None


def _median(values: list[Number]) -> float | None:
    return float(np.median(values)) if values else None

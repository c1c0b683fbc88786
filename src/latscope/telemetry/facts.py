"""What the GPUs did while the server was busy or queueing: the telemetry of one run directory,
joined with the server's ``/metrics`` scrapes of the same run.

``telemetry_facts(run_dir)`` is what the rules (latscope.findings.telemetry) and diagnose's
capacity verdict read. Each scrape is paired with each of the server's GPUs' nearest sample
(within one sampling interval, else left out), so "while requests queued" means "at the scrapes
where ``vllm:num_requests_waiting`` was above 0". ``telemetry_section(run_dirs)`` is the series
the report draws under the server's running/waiting/KV, on the same time axis.
"""

from __future__ import annotations

import bisect
from pathlib import Path
from typing import Any

import numpy as np

from latscope.telemetry.sample import LIMIT_REASONS, POWER_REASONS, THERMAL_REASONS
from latscope.telemetry.sampler import DIR, SAMPLES, read_telemetry

SOURCE = f"{DIR}/{SAMPLES}"
# A clock at or above this share of its maximum is "at max" (boost bins move by ~15 MHz).
AT_MAX_CLOCK = 0.97


def telemetry_facts(run_dir: Path) -> dict[str, Any]:
    """``{"status": "ok" | "unavailable" | "absent", ...}``; with ``ok``: the server's GPUs,
    per-GPU summaries, the joined ``queued`` / ``busy`` states, PCIe, errors and tenants."""
    summary, samples = read_telemetry(run_dir)
    if summary is None:
        return {"status": "absent", "why": "no GPU telemetry in this run directory"}
    if summary.get("status") != "ok" or not samples:
        return {"status": "unavailable",
                "why": summary.get("why") or "the sampler recorded no sample"}
    server = summary.get("server") or {}
    gpus = server.get("gpus") or sorted({s["gpu"] for s in samples})
    mine = [s for s in samples if s["gpu"] in gpus]
    joined = _join(Path(run_dir), mine, float(summary.get("interval_s") or 2.0))
    return {"status": "ok", "source": summary.get("source", ""), "run": Path(run_dir).name,
            "gpus": gpus, "gpus_from": server.get("gpus_from") or "every GPU (the server's "
            "could not be told apart)", "samples": len(mine),
            "per_gpu": {str(g): _per_gpu([s for s in mine if s["gpu"] == g]) for g in gpus},
            "queued": _state(joined, lambda p: (p["waiting"] or 0) > 0),
            "busy": _state(joined, lambda p: (p["running"] or 0) > 0),
            "joined": len(joined), "pcie": _pcie(mine, joined),
            "errors": _errors(mine), "others": server.get("others"),
            "devices": summary.get("devices") or []}


def utilisation_at_load(facts: dict[str, Any]) -> float | None:
    """Mean GPU utilisation (%) over the scrapes where the server ran requests: what the
    capacity verdict reads at the knee (None without telemetry or a busy scrape)."""
    busy = facts.get("busy") or {}
    return busy.get("util_pct_mean") if facts.get("status") == "ok" else None


def _join(run_dir: Path, samples: list[dict[str, Any]], interval_s: float
          ) -> list[dict[str, Any]]:
    from latscope.server.metrics import gauge_series
    from latscope.server.scrape import read_snapshots

    snaps = read_snapshots(run_dir)
    running = dict(gauge_series(snaps, "vllm:num_requests_running", combine=sum))
    waiting = dict(gauge_series(snaps, "vllm:num_requests_waiting", combine=sum))
    by_gpu: dict[int, list[dict[str, Any]]] = {}
    for s in sorted(samples, key=lambda s: s["t_ns"]):
        by_gpu.setdefault(s["gpu"], []).append(s)
    out = []
    for snap in snaps:
        for gpu, series in by_gpu.items():
            near = _nearest(series, snap.t_ns, int(interval_s * 1e9))
            if near is not None:
                key = snap.t_ns / 1e9  # gauge_series keys: seconds after origin 0
                out.append({"gpu": gpu, "sample": near, "running": running.get(key),
                            "waiting": waiting.get(key)})
    return out


def _nearest(series: list[dict[str, Any]], t_ns: int, within_ns: int) -> dict[str, Any] | None:
    times = [s["t_ns"] for s in series]
    i = bisect.bisect_left(times, t_ns)
    best = min((c for c in (i - 1, i) if 0 <= c < len(series)),
               key=lambda c: abs(times[c] - t_ns), default=None)
    return series[best] if best is not None and abs(times[best] - t_ns) <= within_ns else None


def _limited(s: dict[str, Any]) -> bool:
    """Clocks held below max by a power or thermal limit at this sample."""
    reasons = set(s.get("reasons") or ())
    ratio = _clock_ratio(s)
    return bool(reasons & LIMIT_REASONS) and (ratio is None or ratio < AT_MAX_CLOCK)


def _clock_ratio(s: dict[str, Any]) -> float | None:
    clock, top = s.get("sm_clock_mhz"), s.get("sm_clock_max_mhz")
    return clock / top if clock is not None and top else None


def _state(joined: list[dict[str, Any]], when: Any) -> dict[str, Any]:
    """Utilisation, clocks and limits over the joined scrapes where ``when`` holds."""
    points = [p["sample"] for p in joined if p["running"] is not None and when(p)]
    out: dict[str, Any] = {"scrapes": len(points), "of": len(joined)}
    if not points:
        return out
    util = [s["util_pct"] for s in points if "util_pct" in s]
    ratios = [r for r in (_clock_ratio(s) for s in points) if r is not None]
    limited = [s for s in points if _limited(s)]
    reasons = [r for s in limited for r in s.get("reasons") or ()]
    out.update({
        "util_pct_mean": _mean(util), "util_pct_p50": _median(util),
        "low_util_share": (sum(u < 50 for u in util) / len(util)) if util else None,
        "clock_ratio_mean": _mean(ratios),
        "limited_share": len(limited) / len(points),
        "power_limited_share": sum(bool(set(s.get("reasons") or ()) & POWER_REASONS)
                                   for s in limited) / len(points),
        "thermal_limited_share": sum(bool(set(s.get("reasons") or ()) & THERMAL_REASONS)
                                     for s in limited) / len(points),
        "reasons": sorted(set(reasons)),
        "power_w_mean": _mean([s["power_w"] for s in points if "power_w" in s]),
        "power_limit_w": _mean([s["power_limit_w"] for s in points if "power_limit_w" in s]),
        "sm_clock_mhz_mean": _mean([s["sm_clock_mhz"] for s in points if "sm_clock_mhz" in s]),
        "sm_clock_max_mhz": _mean([s["sm_clock_max_mhz"] for s in points
                                   if "sm_clock_max_mhz" in s]),
        "temp_c_max": max((s["temp_c"] for s in points if "temp_c" in s), default=None)})
    return out


def _per_gpu(series: list[dict[str, Any]]) -> dict[str, Any]:
    def vals(key: str) -> list[float]:
        return [s[key] for s in series if key in s]

    mem = [s["mem_used_bytes"] / s["mem_total_bytes"] for s in series
           if s.get("mem_total_bytes") and "mem_used_bytes" in s]
    return {"samples": len(series), "util_pct_mean": _mean(vals("util_pct")),
            "util_pct_max": max(vals("util_pct"), default=None),
            "mem_used_frac_max": max(mem, default=None),
            "mem_used_bytes_max": max(vals("mem_used_bytes"), default=None),
            "mem_total_bytes": max(vals("mem_total_bytes"), default=None),
            "power_w_mean": _mean(vals("power_w")), "power_w_max": max(vals("power_w"),
                                                                       default=None),
            "power_limit_w": _mean(vals("power_limit_w")),
            "power_default_limit_w": max(vals("power_default_limit_w"), default=None),
            "sm_clock_mhz_mean": _mean(vals("sm_clock_mhz")),
            "sm_clock_max_mhz": max(vals("sm_clock_max_mhz"), default=None),
            "temp_c_max": max(vals("temp_c"), default=None),
            "violation_s": _violation_deltas(series)}


def _violation_deltas(series: list[dict[str, Any]]) -> dict[str, float]:
    """Seconds the clocks were held down by each cause over the run (NVML's cumulative
    violation counters, last minus first)."""
    withv = [s for s in series if s.get("violation_s")]
    if len(withv) < 2:
        return {}
    first, last = withv[0]["violation_s"], withv[-1]["violation_s"]
    return {k: last[k] - first[k] for k in last if k in first and last[k] >= first[k]}


def _pcie(series: list[dict[str, Any]], joined: list[dict[str, Any]]) -> dict[str, Any]:
    """Per GPU, the widest/fastest link seen while the server worked (links drop to a lower
    generation when idle to save power: an idle reading proves nothing)."""
    busy_ids = {id(p["sample"]) for p in joined if (p["running"] or 0) > 0}
    out = {}
    for gpu in sorted({s["gpu"] for s in series}):
        mine = [s for s in series if s["gpu"] == gpu]
        loaded = [s for s in mine if id(s) in busy_ids] or [
            s for s in mine if (s.get("util_pct") or 0) > 0]
        gens = [s["pcie_gen"] for s in loaded if "pcie_gen" in s]
        widths = [s["pcie_width"] for s in loaded if "pcie_width" in s]
        out[str(gpu)] = {"gen": max(gens, default=None), "width": max(widths, default=None),
                         "max_gen": max((s["pcie_max_gen"] for s in mine if "pcie_max_gen" in s),
                                        default=None),
                         "max_width": max((s["pcie_max_width"] for s in mine
                                           if "pcie_max_width" in s), default=None),
                         "under_load_samples": len(loaded)}
    return out


def _errors(series: list[dict[str, Any]]) -> dict[str, Any]:
    out = {}
    for gpu in sorted({s["gpu"] for s in series}):
        mine = [s for s in series if s["gpu"] == gpu]
        entry: dict[str, Any] = {"xids": [x for s in mine for x in s.get("xids") or ()]}
        for key in ("ecc_corrected", "ecc_uncorrected"):
            vals = [s[key] for s in mine if key in s]
            entry[key] = (vals[-1] - vals[0]) if len(vals) >= 2 else None
        out[str(gpu)] = entry
    return out


def telemetry_section(run_dirs: list[Path], t0_wall: float | None = None) -> dict[str, Any] | None:
    """The report's GPU series, one row per sample of the server's GPUs, ``t_s`` from
    ``t0_wall`` (default: the first ``/metrics`` scrape of these runs, which is where the
    report's server series starts) -- or None when no run has telemetry."""
    from latscope.server.scrape import read_snapshots

    rows, info = [], None
    for run_dir in run_dirs:
        facts = telemetry_facts(run_dir)
        if facts["status"] != "ok":
            info = info or facts
            continue
        _, samples = read_telemetry(run_dir)
        rows += [s for s in samples if s["gpu"] in facts["gpus"]]
        info = facts if info is None or info.get("status") != "ok" else info
    if not rows or info is None:
        return {"status": info["status"], "why": info.get("why")} if info else None
    if t0_wall is None:
        firsts = [snaps[0].wall_time for snaps in map(read_snapshots, run_dirs) if snaps]
        t0_wall = min(firsts) if firsts else min(s["wall_time"] for s in rows)
    cols: dict[str, list[Any]] = {k: [] for k in ("t_s", "gpu", "util_pct", "sm_clock_mhz",
                                                  "sm_clock_max_mhz", "power_w",
                                                  "power_limit_w", "mem_used_pct", "temp_c")}
    for s in sorted(rows, key=lambda s: s["wall_time"]):
        cols["t_s"].append(round(s["wall_time"] - t0_wall, 3))
        cols["gpu"].append(s["gpu"])
        for key in ("util_pct", "sm_clock_mhz", "sm_clock_max_mhz", "power_w", "power_limit_w",
                    "temp_c"):
            cols[key].append(s.get(key))
        total = s.get("mem_total_bytes")
        cols["mem_used_pct"].append(100 * s["mem_used_bytes"] / total
                                    if total and "mem_used_bytes" in s else None)
    return {"status": "ok", "source": f"{info['source']} ({SOURCE})", "gpus": info["gpus"],
            **cols}


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def _median(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None

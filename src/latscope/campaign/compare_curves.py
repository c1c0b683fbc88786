"""The series a comparison report draws with both sides overlaid: each latency's distribution
(quantile against value), the server's running and waiting requests over the run, and for
sweeps throughput and TTFT p99 against the load."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from latscope.analysis.compare_model import Curve, SweepSection
from latscope.analysis.compare_sample import RunSample
from latscope.rundir import read_json

_QUANTILES = np.linspace(0.01, 0.99, 50)
_SIDES = ("BASE", "NEW")


def curves_of(base: Sequence[RunSample], new: Sequence[RunSample], base_runs: list[Path],
              new_runs: list[Path], sweep: SweepSection | None) -> list[Curve]:
    out: list[Curve] = []
    for side, samples in zip(_SIDES, (base, new)):
        for key, series in (("ttft", "TTFT"), ("e2e", "E2E")):
            values = [v[~np.isnan(v)] for v in (getattr(s, key) for s in samples)]
            pooled = np.concatenate(values) if values else np.empty(0)
            if pooled.size:
                out.append(Curve(chart="distribution", series=series, side=side,
                                 x=np.quantile(pooled, _QUANTILES).tolist(),
                                 y=_QUANTILES.tolist()))
    for side, runs in zip(_SIDES, (base_runs, new_runs)):
        out += _timeseries(side, runs[0]) if runs else []
    if sweep is not None:
        out += _sweep_curves(sweep)
    return out


def _timeseries(side: str, run: Path) -> list[Curve]:
    path = run / "server_timeseries.json"
    doc = read_json(path) if path.is_file() else {}
    points = [p for p in (doc.get("points") or []) if isinstance(p, dict)]
    out = []
    for key in ("running", "waiting"):
        pts = [(p["t_s"], p[key]) for p in points
               if isinstance(p.get("t_s"), (int, float)) and isinstance(p.get(key), (int, float))]
        if pts:
            out.append(Curve(chart="timeseries", series=key, side=side,
                             x=[float(t) for t, _ in pts], y=[float(v) for _, v in pts]))
    return out


def _sweep_curves(sweep: SweepSection) -> list[Curve]:
    out = []
    for key, series in (("requests_per_s", "throughput (req/s)"),
                        ("ttft_p99_ms", "TTFT p99 (ms)")):
        for side in _SIDES:
            pts = [(p.load, v) for p in sweep.points
                   if (v := (p.base if side == "BASE" else p.new).get(key)) is not None]
            if pts:
                out.append(Curve(chart="sweep", series=series, side=side,
                                 x=[float(x) for x, _ in pts], y=[float(y) for _, y in pts]))
    return out

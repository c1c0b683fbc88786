"""A ``benchmarks/record_gpu_telemetry.py`` recording read as a run directory, so that the same
facts, findings and report series come out of it as out of a sampled ``bench`` run.

The recording's raw NVML readings go through the sampler's own normaliser
(``sample.from_nvml``); its ``/metrics`` pages (``--metrics-url``) become the run's scrapes; the
server's processes are ``--server-pid`` and its descendants, from ``processes.json``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from latscope.errors import LatscopeError
from latscope.rundir import iter_jsonl
from latscope.telemetry.files import (
    DIR,
    SAMPLES,
    SUMMARY,
    DeviceInfo,
    SampleLine,
    TelemetrySummary,
    encode_line,
    write_summary,
)
from latscope.telemetry.holders import VISIBLE_VARS, holders
from latscope.telemetry.nvml import NvmlReading
from latscope.telemetry.sample import GpuSample, from_nvml


@dataclass(slots=True)
class Recording:
    """A recording's ``nvml.jsonl``: the system line's versions, each GPU's static facts, the
    samples normalised as the sampler's and the raw readings they came from."""

    system: dict[str, object] = field(default_factory=dict)
    devices: list[NvmlReading] = field(default_factory=list)
    samples: list[GpuSample] = field(default_factory=list)
    raw: list[NvmlReading] = field(default_factory=list)


def read_recording(rec_dir: Path) -> Recording:
    """A recording's ``nvml.jsonl``, every raw reading through the sampler's own normaliser."""
    path = Path(rec_dir) / "nvml.jsonl"
    if not path.is_file():
        raise LatscopeError(f"{rec_dir}: no nvml.jsonl (not a record_gpu_telemetry.py recording)")
    out = Recording()
    previous: dict[int, NvmlReading] = {}
    for line in iter_jsonl(path):
        kind = line.get("kind")
        if kind == "system":
            out.system = line
        elif kind == "devices":
            out.devices = [NvmlReading.from_dict(d) for d in line.get("gpus") or []]
        elif kind == "sample":
            for data in line.get("gpus") or ():
                reading = NvmlReading.from_dict(data)
                out.samples.append(from_nvml(reading, out.devices[reading.index],
                                             line["wall_time"], previous.get(reading.index)))
                previous[reading.index] = reading
                out.raw.append(reading)
    return out


def recording_to_run(rec_dir: Path, out: Path, interval_s: float = 1.0) -> Path:
    """Write ``out/telemetry/`` and ``out/metrics/snapshots.jsonl`` from a recording."""
    rec_dir, out = Path(rec_dir), Path(out)
    recording = read_recording(rec_dir)
    samples = recording.samples
    (out / DIR).mkdir(parents=True, exist_ok=True)
    with (out / DIR / SAMPLES).open("wb") as fh:
        for s in samples:  # one GPU per line: the reader takes every GPU of every line
            fh.write(encode_line(SampleLine(s.t_ns, s.wall_time, [s])))
    pids, visible = _server(rec_dir)
    # the static facts the sampler keeps (DeviceInfo), not every raw reading of the recording
    devices = [DeviceInfo.from_nvml(d) for d in recording.devices]
    write_summary(out / DIR / SUMMARY, TelemetrySummary(
        status="ok", source="NVML (record_gpu_telemetry.py)", interval_s=interval_s,
        samples=len(samples), devices=devices, server=holders(samples, pids, visible, devices)))
    _metrics(rec_dir, out)
    return out


def _server(rec_dir: Path) -> tuple[list[int], dict[str, str]]:
    meta = _json(rec_dir / "meta.json") or {}
    procs = _json(rec_dir / "processes.json") or []
    pid = (meta.get("args") or {}).get("server_pid")
    try:
        root = int(pid) if pid is not None else None
    except (TypeError, ValueError):
        root = None
    if root is None:
        return [], {}
    children: dict[int, list[int]] = {}
    for p in procs:
        if isinstance(p.get("ppid"), int):
            children.setdefault(p["ppid"], []).append(p["pid"])
    tree, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in tree:
                tree.add(child)
                todo.append(child)
    visible = next(({k: p[k] for k in VISIBLE_VARS if k in p} for p in procs
                    if p.get("pid") == root), {})
    return sorted(tree), visible


def _metrics(rec_dir: Path, out: Path) -> None:
    from latscope.errors import ScrapeError
    from latscope.server.metrics import parse_metrics_text

    (out / "metrics").mkdir(parents=True, exist_ok=True)
    with (out / "metrics" / "snapshots.jsonl").open("w") as fh:
        for page in iter_jsonl(rec_dir / "metrics.jsonl"):
            if "text" not in page:
                continue
            try:
                samples = parse_metrics_text(page["text"]).samples
            except ScrapeError:
                continue
            fh.write(json.dumps({"t_ns": page["t_ns"], "wall_time": page["wall_time"],
                                 "scrape_ms": 0.0,
                                 "samples": [{"name": s.name, "labels": s.labels,
                                              "value": s.value} for s in samples]}) + "\n")


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None

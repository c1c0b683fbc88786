"""One call from events to answers: ``analyze_trace(trace, options)`` runs every analysis per
device and returns a ``TraceAnalysis`` (``trace.results``: integer ns inside; ``trace.json``
holds it in ms, ``trace.files``).

Every share in the result is a fraction in [0, 1] by construction; ``check_shares`` verifies that
before the result is returned, and refuses it (one-line ``TraceFormatError``) otherwise, so an
impossible number is never printed or written. A device whose window is 0 ns long (every
activity at one instant) has nothing to break down: it is left out with a note.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from latscope.errors import TraceFormatError
from latscope.trace.analysis.breakdown import breakdown
from latscope.trace.analysis.copies import copy_stats
from latscope.trace.analysis.device import split_devices
from latscope.trace.analysis.gaps import gap_analysis
from latscope.trace.analysis.join import api_rows_for
from latscope.trace.analysis.kernels import kernel_tables
from latscope.trace.analysis.window import DEFAULT_STEP_PATTERN, choose_window
from latscope.trace.model import TraceEvents
from latscope.trace.results import (
    DeviceAnalysis,
    EventCounts,
    QueueClamp,
    RankSummary,
    TraceAnalysis,
    TraceSource,
    WindowInfo,
)
from latscope.trace.taxonomy import classify_names


@dataclass
class AnalysisOptions:
    window: str = "auto"  # "auto" | "steps" | "START_MS:END_MS"
    step_pattern: str = DEFAULT_STEP_PATTERN
    top_n: int = 15
    gaps_n: int = 5
    clamp_queues: bool | None = None  # None: clamp on AMD only


def analyze_trace(trace: TraceEvents, options: AnalysisOptions | None = None) -> TraceAnalysis:
    options = options or AnalysisOptions()
    names = classify_names(trace.names, trace.meta.vendor)
    clamp = trace.meta.vendor == "amd" if options.clamp_queues is None else options.clamp_queues
    devices = []
    notes = list(trace.meta.notes)
    for dev in split_devices(trace, names, clamp_queues=clamp):
        api_row = api_rows_for(trace, dev.gpu.corr)
        window = choose_window(trace, dev.device, dev.gpu.start, dev.gpu.end, dev.gpu.corr,
                               options.window, options.step_pattern)
        if window.length <= 0:
            notes.append(f"device {dev.device}: its {window.method} window is 0 ns long "
                         "(every activity at one instant): left out")
            continue
        parts = breakdown(dev, window)
        devices.append(DeviceAnalysis(
            device=dev.device,
            device_name=trace.meta.devices.get(dev.device, ""),
            activities=len(dev.gpu),
            window=WindowInfo(start_ns=window.start, length_ns=window.length,
                              method=window.method, steps=window.steps),
            breakdown=parts,
            kernels=kernel_tables(dev, window, names, int(parts.busy_ns), options.top_n),
            copies=copy_stats(trace, dev, window, api_row),
            gaps=gap_analysis(trace, dev, window, api_row, options.gaps_n),
            queue_clamp=QueueClamp(applied=clamp, **dev.clamp),
        ))
    meta = trace.meta
    if len(trace.gpu) and not devices:
        raise TraceFormatError(f"no device has a window longer than 0 ns ({notes[-1]})",
                               path=meta.path)
    result = TraceAnalysis(
        source=TraceSource(path=meta.path, format=meta.format, vendor=meta.vendor,
                           rank=meta.rank, notes=notes, skipped=dict(meta.skipped),
                           events=EventCounts(gpu=len(trace.gpu), api=len(trace.api),
                                              ranges=len(trace.ranges))),
        devices=devices)
    check_shares(msgspec.to_builtins(result), meta.path)
    return result


_SHARE_TOLERANCE = 1e-9  # float division of integer ns: exact parts can round a hair past 1


def check_shares(value: object, path: str, key: str = "") -> None:
    """Refuse a result (as builtins) holding a share (a key with "share" in its name) outside
    [0, 1], or a breakdown whose shares do not add up to 1. Cannot happen unless an analysis is
    wrong."""
    if isinstance(value, dict):
        if "idle_share" in value and "compute_share" in value:
            total = sum(value[k] for k in _BREAKDOWN_SHARES)
            if abs(total - 1.0) > 1e-6:
                raise TraceFormatError(f"impossible breakdown: shares add up to {total:.6f}, not "
                                       "1; refusing to report it (please report this trace as "
                                       "a latscope bug)", path=path)
        for k, v in value.items():
            check_shares(v, path, str(k))
    elif isinstance(value, list):
        for item in value:
            check_shares(item, path, key)
    elif "share" in key and value is not None and not (
            isinstance(value, (int, float)) and
            -_SHARE_TOLERANCE <= value <= 1.0 + _SHARE_TOLERANCE):
        raise TraceFormatError(f"impossible {key} = {value!r} (outside 0-100 %); refusing to "
                               "report it (please report this trace as a latscope bug)", path=path)


_BREAKDOWN_SHARES = ("compute_share", "exposed_comm_share", "exposed_copy_share", "idle_share")


def rank_summary(results: list[TraceAnalysis]) -> list[RankSummary]:
    """One row per (file, device) for several traces at once (e.g. vLLM's per-rank files): the
    window, busy and idle side by side, so a rank that idles more than its peers stands out."""
    rows = []
    for result in results:
        for dev in result.devices:
            b = dev.breakdown
            rows.append(RankSummary(
                path=result.source.path, rank=result.source.rank, device=dev.device,
                window_ns=b.window_ns, busy_ns=b.busy_ns, idle_share=b.idle_share,
                comm_share=b.communication_ns / b.window_ns if b.window_ns else 0.0,
                exposed_comm_share=b.exposed_comm_share))
    return rows

"""Host/device copies: per direction count, bytes, time, achieved GB/s, small copies, host memory
kind, copy time not overlapped by compute, and copies issued by blocking APIs.

Pageable vs pinned is read from the trace on CUDA (Kineto memcpy names, nsys ``srcKind``/
``dstKind``). ROCm traces do not record it, so it is *inferred* for copies of at least
``INFER_MIN_BYTES``: achieved bandwidth below ``PAGEABLE_GBPS`` suggests a pageable (staged)
buffer. The method is written into the result so nobody mistakes it for a measurement.
"""

from __future__ import annotations

import numpy as np

from latscope.trace.analysis import intervals as iv
from latscope.trace.analysis.device import COMPUTE, DeviceActivities
from latscope.trace.analysis.join import BLOCKING_COPY, name_flags
from latscope.trace.analysis.window import Window
from latscope.trace.model import CopyDir, GpuKind, HostMem, TraceEvents
from latscope.trace.results import CopyDirection, CopyStats

SMALL_COPY_BYTES = 64 * 1024
INFER_MIN_BYTES = 1 << 20
# Measured on an H200 host (PCIe Gen5, torch 2.11): 4 MiB H2D copies ran at 11.9 GB/s from
# pageable and 55 GB/s from pinned memory. On PCIe Gen4 hosts pinned copies top out near 25 GB/s,
# so this rule can only ever say "likely".
PAGEABLE_GBPS = 20.0
INFERENCE_METHOD = (f"ROCm: host memory kind not recorded; copies >= {INFER_MIN_BYTES} B below "
                    f"{PAGEABLE_GBPS:g} GB/s counted as likely pageable, others unknown")


def copy_stats(trace: TraceEvents, dev: DeviceActivities, window: Window,
               api_row: np.ndarray) -> CopyStats:
    gpu = dev.gpu
    in_window = (gpu.start >= window.start) & (gpu.start < window.end)
    is_copy = in_window & (gpu.kind == GpuKind.MEMCPY)
    dur = gpu.end - gpu.start
    blocking_name = name_flags(trace, BLOCKING_COPY)
    blocking = np.zeros(len(gpu), dtype=bool)
    has_api = api_row >= 0
    blocking[has_api] = blocking_name[trace.api.name[api_row[has_api]]]
    hostmem = _host_memory(gpu.hostmem, gpu.bytes, dur, trace.meta.vendor)
    rows = []
    for direction in CopyDir:
        mask = is_copy & (gpu.copy == direction)
        if direction == CopyDir.NONE or not mask.any():
            continue
        known = mask & (gpu.bytes >= 0)
        nbytes, known_time = int(gpu.bytes[known].sum()), int(dur[known].sum())
        pageable, pinned = mask & (hostmem == HostMem.PAGEABLE), mask & (hostmem == HostMem.PINNED)
        rows.append(CopyDirection(
            direction=direction.name, count=int(mask.sum()),
            bytes=nbytes if known.any() else None, time_ns=int(dur[mask].sum()),
            gbps=nbytes / known_time if known_time and known.any() else None,
            small_count=int((mask & (gpu.bytes >= 0) & (gpu.bytes < SMALL_COPY_BYTES)).sum()),
            pageable_count=int(pageable.sum()),
            pageable_time_ns=int(dur[pageable].sum()),
            pageable_gbps=_gbps(gpu.bytes, dur, pageable),
            pinned_count=int(pinned.sum()),
            pinned_gbps=_gbps(gpu.bytes, dur, pinned),
            blocking_count=int((mask & blocking).sum()),
            blocking_time_ns=int(dur[mask & blocking].sum()),
        ))
    compute = iv.union(*iv.clip(gpu.start[dev.role == COMPUTE], gpu.end[dev.role == COMPUTE],
                                window.start, window.end))
    copies = iv.union(*iv.clip(gpu.start[is_copy], gpu.end[is_copy], window.start, window.end))
    not_overlapped = iv.length(*copies) - int(iv.overlap_with(copies[0], copies[1], *compute).sum())
    return CopyStats(
        by_direction=rows,
        memset_count=int((in_window & (gpu.kind == GpuKind.MEMSET)).sum()),
        copy_union_ns=iv.length(*copies),
        not_overlapped_by_compute_ns=not_overlapped,
        small_copy_bytes=SMALL_COPY_BYTES,
        host_memory_method=("recorded by the profiler" if trace.meta.vendor == "nvidia"
                            else INFERENCE_METHOD),
    )


def _gbps(nbytes: np.ndarray, dur: np.ndarray, mask: np.ndarray) -> float | None:
    known = mask & (nbytes >= 0)
    time = int(dur[known].sum())
    return int(nbytes[known].sum()) / time if time else None


def _host_memory(hostmem: np.ndarray, nbytes: np.ndarray, dur: np.ndarray,
                 vendor: str) -> np.ndarray:
    if vendor == "nvidia":
        return hostmem
    out = hostmem.copy()
    unknown = (hostmem == HostMem.UNKNOWN) & (nbytes >= INFER_MIN_BYTES) & (dur > 0)
    gbps = np.where(dur > 0, nbytes / np.maximum(dur, 1), 0.0)
    out[unknown & (gbps < PAGEABLE_GBPS)] = HostMem.PAGEABLE
    return out

"""Time breakdown of a window by interval union (TraceLens' definition, per device):

    compute        = |U(compute kernels)|
    exposed_comm   = |U(communication) - U(compute)|
    exposed_copy   = |U(copies) - U(compute) - U(communication)|
    idle           = window - |U(everything)|

Each part is the length of a union of intervals clipped to the window, and the unions nest
(compute within compute+communication within everything), so every part lies in [0, window] and
the four add up to the window exactly (integer ns); both are checked, and a window of 0 ns is
refused, so a share outside 0-100 % cannot be produced. Copies are memcpy,
memset and copy-as-kernel (``__amd_rocclr_copyBuffer``...); communication is NCCL/RCCL and
custom all-reduce kernels (see taxonomy.toml).
"""

from __future__ import annotations

import numpy as np

from latscope.errors import TraceFormatError
from latscope.trace.analysis import intervals as iv
from latscope.trace.analysis.device import COMM, COMPUTE, COPY, DeviceActivities
from latscope.trace.analysis.window import Window
from latscope.trace.results import Breakdown


def breakdown(dev: DeviceActivities, window: Window) -> Breakdown:
    if window.length <= 0:
        raise TraceFormatError(f"device {dev.device}: the analysis window is 0 ns long "
                               "(every activity at one instant): nothing to break down")
    s, e = dev.gpu.start, dev.gpu.end

    def clipped_union(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return iv.union(*iv.clip(s[mask], e[mask], window.start, window.end))

    compute = iv.length(*clipped_union(dev.role == COMPUTE))
    compute_comm = iv.length(*clipped_union(dev.role != COPY))
    busy = iv.length(*clipped_union(np.ones(len(s), dtype=bool)))
    comm_only = iv.length(*clipped_union(dev.role == COMM))
    parts = {
        "compute_ns": compute,
        "exposed_comm_ns": compute_comm - compute,
        "exposed_copy_ns": busy - compute_comm,
        "idle_ns": window.length - busy,
    }
    total = sum(parts.values())
    if total != window.length or min(parts.values()) < 0:  # a bug in the union code: refuse
        raise AssertionError(f"breakdown parts {parts} do not split the {window.length} ns "
                             "window")
    n = window.length
    return Breakdown(window_ns=n, busy_ns=busy, communication_ns=comm_only,
                     compute_ns=parts["compute_ns"], exposed_comm_ns=parts["exposed_comm_ns"],
                     exposed_copy_ns=parts["exposed_copy_ns"], idle_ns=parts["idle_ns"],
                     compute_share=parts["compute_ns"] / n,
                     exposed_comm_share=parts["exposed_comm_ns"] / n,
                     exposed_copy_share=parts["exposed_copy_ns"] / n,
                     idle_share=parts["idle_ns"] / n)

"""Which GPUs the server holds, and who else is on them.

The server's processes: the one listening on the server's port (``/proc/net/tcp``, as doctor
finds it) and its descendants (vLLM's engine core and workers are its children). Its GPUs: those
whose per-process list (NVML ``nvmlDeviceGetComputeRunningProcesses``, ``amd-smi process``)
holds one of those PIDs; where none does (a server in another PID namespace, a container), the
``CUDA_VISIBLE_DEVICES`` / ``HIP_VISIBLE_DEVICES`` / ``ROCR_VISIBLE_DEVICES`` of its process
name them instead, and other tenants cannot be told apart.
"""

from __future__ import annotations

from typing import Iterable

from msgspec import UNSET, UnsetType

from latscope.server.hostview import HostView, process_tree
from latscope.telemetry.files import DeviceInfo, ServerGpus
from latscope.telemetry.sample import GpuProcess, GpuSample

VISIBLE_VARS = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")


def server_pids(view: HostView, pid: int | None = None, port: int | None = None
                ) -> tuple[list[int], str]:
    """The server's PID and its descendants, and how the PID was found."""
    from latscope.server.hostview import find_listening_pid

    source = "given"
    if pid is None and port:
        pid, source = find_listening_pid(view, port), f"listener of port {port} (/proc/net/tcp)"
    if pid is None:
        return [], "server process not found (not on this host, or not visible to this user)"
    return sorted(process_tree(view, pid)), source


def visible_devices(view: HostView, pids: Iterable[int]) -> dict[str, str]:
    """The ``*_VISIBLE_DEVICES`` the server's processes were started with (only those
    variables are kept out of their environments: the rest may hold secrets)."""
    for pid in pids:
        env = view.environ(pid)
        if env is not None:
            return {k: env[k] for k in VISIBLE_VARS if k in env}
    return {}


def _listed(value: str, devices: list[DeviceInfo]) -> list[int] | None:
    """Host GPU indices named by a ``*_VISIBLE_DEVICES`` value (ordinals or ``GPU-`` UUIDs)."""
    out = []
    by_uuid = {d.uuid: d.index for d in devices if d.uuid}
    for item in (x.strip() for x in value.split(",") if x.strip()):
        if item.isdigit():
            out.append(int(item))
        elif item in by_uuid:
            out.append(by_uuid[item])
        else:
            return None  # MIG ids, partial UUIDs: not resolved here, said so instead
    return out


def holders(samples: list[GpuSample], pids: list[int], visible: dict[str, str],
            devices: list[DeviceInfo], pids_from: str | UnsetType = UNSET) -> ServerGpus:
    """The server's GPUs and the other processes on them (``ServerGpus``)."""
    ours = set(pids)
    seen: dict[int, dict[int, int | None]] = {}
    for s in samples:
        for p in s.processes or ():
            seen.setdefault(s.gpu, {})[p.pid] = p.used_bytes
    held = sorted(g for g, procs in seen.items() if ours & set(procs))
    if held:
        others = {g: [GpuProcess(pid, used) for pid, used in sorted(seen.get(g, {}).items())
                      if pid not in ours] for g in held}
        return ServerGpus(server_pids=sorted(ours), visible_devices=visible, gpus=held,
                          gpus_from="the GPUs' process lists", others=others,
                          server_pids_from=pids_from)
    gpus: list[int] = []
    gpus_from = ""
    for var in VISIBLE_VARS:
        listed = _listed(visible[var], devices) if var in visible else None
        if listed:
            gpus, gpus_from = listed, f"{var} of the server's process"
            break
    # the server's PIDs are not in any GPU's list: another PID namespace, so no tenant can be
    # told apart from the server here
    return ServerGpus(server_pids=sorted(ours), visible_devices=visible, gpus=gpus,
                      gpus_from=gpus_from, others=None, server_pids_from=pids_from)

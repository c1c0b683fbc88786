"""Rules on the host during a run: other processes busy on the server's CPUs.

The facts come from ``env.hostload`` (``host/cpu.json`` of a load run: cores used by latscope,
by the server's process tree and by each other process over the measured window).
"""

from __future__ import annotations

from latscope.env.hostload import CoresUsed, HostCpu
from latscope.model import Evidence, Finding, Severity

REF = "docs/findings.md#host.cpu_contention"
# Others using this share of the server's CPUs make a warning; half of them, critical: the
# server's API server and engine core each need a whole core to keep a GPU fed.
WARNING_SHARE = 0.2
CRITICAL_SHARE = 0.5


def contention_finding(usage: HostCpu | None, measured_at: str) -> Finding | None:
    """``host.cpu_contention`` when processes that are neither latscope nor the server used a
    notable share of the CPUs the server may run on; None when nothing was read."""
    if usage is None or usage.skipped or not usage.cores:
        return None
    server_cpus = usage.server_cpus or usage.cores
    others = usage.others
    on_server = sum(o.cores * (o.on_server_cpus if isinstance(o.on_server_cpus, float) else 1.0)
                    for o in others)
    share = min(1.0, on_server / server_cpus)
    source = f"/proc/*/stat at the start and end of the run at {measured_at}"
    used = usage.cores_used if isinstance(usage.cores_used, CoresUsed) else None
    evidence = [
        Evidence("CPUs the server may run on", server_cpus, "cores",
                 "sched_getaffinity of the server" if usage.server_cpus else
                 "this host (the server's own affinity unknown)"),
        Evidence("used by other processes on them", round(on_server, 2), "cores", source),
        Evidence("used by the server's processes", used.server if used else None, "cores",
                 source),
        Evidence("used by latscope", used.latscope if used else None, "cores", source),
    ] + [Evidence(f"pid {o.pid} ({o.comm})", o.cores, "cores", source) for o in others[:3]]
    severity = (Severity.CRITICAL if share >= CRITICAL_SHARE else
                Severity.WARNING if share >= WARNING_SHARE else Severity.OK)
    if severity == Severity.OK:
        return Finding("host.cpu_contention", Severity.OK,
                       "no other process busy on the server's CPUs during the run", evidence,
                       layer="host", reference=REF)
    top = ", ".join(f"pid {o.pid} {o.comm} {o.cores:.2f}" for o in others[:3])
    return Finding(
        id="host.cpu_contention", severity=severity, layer="host",
        title=(f"Other processes used {on_server:.1f} of the server's {server_cpus} CPUs "
               f"({share:.0%}) during the run at {measured_at}: {top}"),
        evidence=evidence,
        why=("The server's API server and engine core are single-threaded loops: a core taken "
             "by another process delays tokenization, scheduling and every kernel launch, and "
             "latscope's own client stamps late on a busy host. Every latency measured here is "
             "slower than the server alone would be."),
        fix=("Stop or move the other processes (see the pids), or pin the server to CPUs of its "
             "own (taskset -c / numactl --physcpubind; in containers --cpuset-cpus); then "
             "re-run diagnose."),
        reference=REF)

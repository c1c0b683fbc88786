"""The facts doctor gathers once and every check reads: the host view, the server process's
environment and CPU affinity, the GPUs found (by which tool), and what the server said about itself.

Checks are plain functions ``check(facts) -> list[Finding]`` in ``latscope.findings``; keeping the
reading here and the judging there lets each check be tested on a fake tree without running
anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from latscope.env.gputools import GpuInfo, GpuProcess, Topology
from latscope.server.hostview import HostView


@dataclass(slots=True)
class PciGpu:
    """One GPU as sysfs shows it (``/sys/bus/pci/devices/<bdf>``)."""

    bdf: str
    vendor: str  # "nvidia" | "amd"
    numa_node: int | None = None
    current_link_speed: str = ""
    max_link_speed: str = ""
    current_link_width: str = ""
    max_link_width: str = ""


@dataclass(slots=True)
class GpuFacts:
    vendor: str = ""  # "nvidia" | "amd" | "" (none found)
    gpus: list[GpuInfo] = field(default_factory=list)
    gpus_source: str = ""
    pci: list[PciGpu] = field(default_factory=list)
    topology: Topology | None = None
    topology_source: str = ""
    processes: list[GpuProcess] = field(default_factory=list)
    processes_source: str = ""
    versions: dict[str, str] = field(default_factory=dict)
    tools_found: list[str] = field(default_factory=list)
    tools_missing: list[str] = field(default_factory=list)


@dataclass(slots=True)
class ServerFacts:
    """What the server's endpoints and startup log say (any part may be missing)."""

    url: str | None = None
    endpoints: dict[str, Any] = field(default_factory=dict)  # path -> HTTP status or error text
    version: str | None = None
    version_source: str = ""
    models: list[dict[str, Any]] = field(default_factory=list)
    metrics_text: str | None = None
    metrics_error: str | None = None
    log_path: str | None = None
    log_config: Any = None  # latscope.server.logs config object, when a log was parsed
    log_error: str | None = None
    # Simple values read from the log or the command line: name -> (value, source)
    settings: dict[str, tuple[Any, str]] = field(default_factory=dict)


@dataclass(slots=True)
class CState:
    """One idle state of cpu0 (``/sys/devices/system/cpu/cpu0/cpuidle/stateN``)."""

    state: str  # the directory: "state2"
    name: str  # "C2" ("" unreadable)
    latency: str  # exit latency in us, as written ("" unreadable)
    disabled: bool
    latency_source: str


@dataclass(slots=True)
class SysFacts:
    """What ``/proc`` and ``/sys`` say about the host, each value with its source."""

    numa_balancing: str | None = None  # /proc/sys/kernel/numa_balancing (None: unreadable)
    numa_balancing_source: str = ""
    kernel_cmdline: str | None = None  # /proc/cmdline
    kernel_cmdline_source: str = ""
    governors: dict[str, str] = field(default_factory=dict)  # scaling_governor path -> value
    governors_source: str = ""
    cstates: list[CState] = field(default_factory=list)
    cstates_source: str = ""
    node_cpus: dict[int, set[int]] = field(default_factory=dict)  # NUMA node -> its CPUs
    server_affinity: set[int] | None = None  # the server's Cpus_allowed_list
    server_affinity_source: str = ""
    server_processes: set[int] = field(default_factory=set)  # the server pid and descendants
    # A reading that failed on malformed input, by the check that needs it: that check raises
    # it, so that doctor reports the check failed on its input and every other check runs.
    errors: dict[str, Exception] = field(default_factory=dict)

    def need(self, check: str) -> None:
        if check in self.errors:
            raise self.errors[check]


@dataclass(slots=True)
class Facts:
    host: HostView
    pid: int | None = None
    pid_source: str = ""
    env: dict[str, str] = field(default_factory=dict)
    env_source: str = ""
    cmdline: list[str] = field(default_factory=list)
    gpu: GpuFacts = field(default_factory=GpuFacts)
    server: ServerFacts = field(default_factory=ServerFacts)
    sys: SysFacts = field(default_factory=SysFacts)

    def vllm_version(self) -> tuple[str | None, str]:
        if self.server.version:
            return self.server.version, self.server.version_source
        return self.gpu.versions.get("vllm"), self.gpu.versions.get("vllm_source", "")

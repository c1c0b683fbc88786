"""Who used this host's CPUs during a load run: latscope's own processes, the server's process
tree, and everybody else (a host busy with other work makes every latency slower and the client's
timing unreliable, and is named before any verdict: docs/findings.md#host.cpu_contention).

A run observer (``start``/``stop`` like ``server.scrape.MetricsScraper``): /proc is read once
when the measured run starts and once when it ends, and the CPU seconds each process spent in
between are written to ``host/cpu.json`` in the run directory. Two reads of /proc per run, no
thread: its own cost is a few ms (measured: 1.9 ms for 420 processes). Linux only; elsewhere the
file says why it is empty.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from latscope.errors import ConfigError

CPU_FILE = "host/cpu.json"
# Others below this many cores are noise (shells, agents, idle servers polling).
MIN_REPORTED_CORES = 0.05
KTHREADD = 2  # the parent of every kernel thread on Linux


class OtherProcess(msgspec.Struct, kw_only=True):
    """A process neither latscope's nor the server's, and the cores it used over the run;
    ``on_server_cpus``: the share of its CPUs that are the server's (the top ten have it)."""

    pid: int
    comm: str
    cores: float
    on_server_cpus: float | UnsetType = UNSET


class CoresUsed(msgspec.Struct):
    latscope: float
    server: float
    others: float


class HostCpu(msgspec.Struct, kw_only=True):
    """``host/cpu.json``: cores used over the measured window by latscope, the server's process
    tree and everybody else; or, without /proc, only why it is empty (``skipped``)."""

    skipped: str | UnsetType = UNSET
    window_s: float | UnsetType = UNSET
    cores: int | UnsetType = UNSET  # this host's (its affinity)
    server_cpus: int | None | UnsetType = UNSET  # the CPUs the server may run on
    cores_used: CoresUsed | UnsetType = UNSET
    server_pids: list[int] | UnsetType = UNSET
    others: list[OtherProcess] = []


@dataclass(frozen=True)
class ProcTimes:
    pid: int
    ppid: int
    comm: str
    cpu_s: float  # utime + stime
    start: int = 0  # starttime (clock ticks after boot): a pid reused is another process


def read_procs(proc: Path = Path("/proc")) -> dict[int, ProcTimes]:
    """Every process's CPU seconds so far; processes that vanish while read are skipped."""
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    out: dict[int, ProcTimes] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue
        parsed = parse_stat(raw, ticks)
        if parsed is not None:
            out[parsed.pid] = parsed
    return out


def parse_stat(raw: str, ticks: int) -> ProcTimes | None:
    """One /proc/PID/stat line: the command sits in parentheses and may itself hold spaces and
    parentheses, so the fields are split after its last ')'."""
    head, sep, tail = raw.rpartition(")")
    if not sep:
        return None
    pid_text, _, comm = head.partition(" (")
    fields = tail.split()
    try:  # fields after comm: state(0) ppid(1) ... utime(11) stime(12) ... starttime(19)
        return ProcTimes(int(pid_text), int(fields[1]), comm,
                         (int(fields[11]) + int(fields[12])) / ticks,
                         int(fields[19]) if len(fields) > 19 else 0)
    except (ValueError, IndexError):
        return None


def descendants(procs: dict[int, ProcTimes], roots: set[int]) -> set[int]:
    """``roots`` and every process below them."""
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    seen, todo = set(), [r for r in roots if r in procs]
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo.extend(children.get(pid, ()))
    return seen


def cpu_usage(before: dict[int, ProcTimes], after: dict[int, ProcTimes], seconds: float, *,
              own_pid: int, server_pids: set[int], cores: int) -> HostCpu:
    """Cores used over the window by latscope (this process and its children), the server's
    process tree and each other process (a process started during the window counts from 0)."""
    server = descendants(after, server_pids)  # first: a server latscope started is its child
    own = descendants(after, {own_pid}) - server
    kernel = descendants(after, {KTHREADD})  # kworkers & co: the workload's own I/O, mostly
    groups: dict[str, float] = {"latscope": 0.0, "server": 0.0, "others": 0.0}
    others: list[OtherProcess] = []
    for pid, now in after.items():
        then = before.get(pid)
        # kernel threads rename themselves (kworker/1:1-events -> ...-events_power_efficient):
        # the same process is the same pid and start time, not the same name
        used = now.cpu_s - (then.cpu_s if then and then.start == now.start else 0.0)
        if used <= 0 or seconds <= 0 or pid in kernel:
            continue
        part = "latscope" if pid in own else "server" if pid in server else "others"
        groups[part] += used / seconds
        if part == "others" and used / seconds >= MIN_REPORTED_CORES:
            others.append(OtherProcess(pid=pid, comm=now.comm, cores=round(used / seconds, 3)))
    others.sort(key=lambda o: -o.cores)
    server_cpus = _affinity(min(server_pids)) if server_pids else None
    for o in others[:10]:
        o.on_server_cpus = _overlap(_affinity(o.pid), server_cpus)
    return HostCpu(window_s=round(seconds, 3), cores=cores,
                   server_cpus=len(server_cpus) if server_cpus else None,
                   cores_used=CoresUsed(*(round(groups[k], 3)
                                          for k in ("latscope", "server", "others"))),
                   server_pids=sorted(server_pids), others=others[:10])


def _affinity(pid: int) -> set[int] | None:
    try:
        return set(os.sched_getaffinity(pid))
    except (OSError, AttributeError):
        return None


def _overlap(cpus: set[int] | None, server_cpus: set[int] | None) -> float:
    """The share of a process's CPUs that are also the server's (1.0 when either is unknown:
    then it may run anywhere the server does)."""
    if not cpus or not server_cpus:
        return 1.0
    return round(len(cpus & server_cpus) / len(cpus), 3)


class HostLoadSampler:
    """Run observer: the CPU each party used while the run went (``host/cpu.json``)."""

    def __init__(self, server_pids: set[int] | None = None) -> None:
        self.server_pids = set(server_pids or ())
        self.result: HostCpu | None = None
        self._before: dict[int, ProcTimes] = {}
        self._t0 = 0.0

    async def start(self, ctx: Any) -> None:
        if Path("/proc/self/stat").exists():
            self._before, self._t0 = read_procs(), time.monotonic()

    async def stop(self, ctx: Any) -> None:
        from latscope.rundir import write_json

        if not self._before:
            self.result = HostCpu(skipped="no /proc on this host: CPU use by process not read")
        else:
            after = read_procs()
            self.result = cpu_usage(self._before, after, time.monotonic() - self._t0,
                                    own_pid=os.getpid(), server_pids=self.server_pids,
                                    cores=len(os.sched_getaffinity(0))
                                    if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
        path = ctx.run_dir / CPU_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, msgspec.to_builtins(self.result))


def read_cpu_usage(run_dir: Path) -> HostCpu | None:
    """A run's ``host/cpu.json``; None where the run recorded none; a ``ConfigError`` in one
    line for one that is not what latscope writes."""
    from latscope.rundir import read_json

    path = Path(run_dir) / CPU_FILE
    if not path.is_file():
        return None
    try:
        return msgspec.convert(read_json(path), HostCpu, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{path}: not a CPU record latscope wrote ({exc})") from None

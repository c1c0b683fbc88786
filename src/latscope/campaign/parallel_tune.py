"""Tune trials several at a time (``tune --parallel K [--gpus-per-trial G] [--ray ADDRESS]``).

The search is unchanged (``analysis.search``): before each decision it hands over every
configuration that decision reads (the two probes of a ternary step, the last candidates along a
flag, a whole grid), and a pool runs up to K of them at once. Each trial is what a trial is with
``--parallel 1``: its own server on its own free port, the workload, the server stopped by its
process group; it is entered in tune.json when it starts and scored there when it ends, so
``--resume`` reuses finished trials exactly as before and re-runs the ones that were running.

- ``LocalPool``: each trial in a child process of this one (forked, so the launcher and the
  workload need not be importable by name; the bench client of one trial shares no interpreter,
  GIL or event loop with another's). With ``G`` > 0 each slot owns ``G`` GPUs of ``--gpus`` (or
  of those this host shows), disjoint from the other slots', handed to the server as
  ``CUDA_VISIBLE_DEVICES`` and ``HIP_VISIBLE_DEVICES`` (the same list: vLLM's ROCm platform
  refuses the two when they differ).
- ``RayPool``: each trial a Ray task with ``num_gpus=G`` (Ray picks the node and the GPUs and
  tells the task which through ``ray.get_gpu_ids()``); the server starts on that node. The trial
  directory is written on that node under the same path; tune.json (on this host) holds every
  trial's metrics.

Trials on one host share what the GPUs do not separate: CPU cores, memory bandwidth, PCIe. On a
host without GPUs they share everything, so each trial measures a server slowed by the others
(``host_warning`` says so); the search still compares like with like only if every trial of a
batch suffers alike. ``--validate`` always runs one trial at a time.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from latscope.analysis.search import Config
from latscope.analysis.tune import Launch, Measure, Trial, Tuner
from latscope.errors import ConfigError, LatscopeError

DEVICE_VARS = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")
# A trial told to stop (Ctrl-C) stops its server (ManagedServer's grace, then SIGKILL of its
# group) and exits; the pool waits this long before it kills the trial process itself.
STOP_WAIT_S = 90.0


def visible_gpus(explicit: str | None = None) -> tuple[list[str], str]:
    """The GPUs trials may use and where that list came from: ``--gpus``, else the devices this
    process is already limited to (``CUDA_VISIBLE_DEVICES``/``HIP_VISIBLE_DEVICES``), else one
    index per NVIDIA/AMD GPU in /sys/bus/pci/devices."""
    if explicit is not None:
        ids = [part.strip() for part in explicit.split(",") if part.strip()]
        if not ids or len(set(ids)) != len(ids):
            raise ConfigError(f"--gpus {explicit!r}: give distinct device ids, e.g. 0,1,2,3")
        return ids, "--gpus"
    for var in DEVICE_VARS:
        value = os.environ.get(var)
        if value is not None:
            return [part.strip() for part in value.split(",") if part.strip()], f"${var}"
    from latscope.env.host import pci_gpus
    from latscope.server.hostview import HostView

    count = len(pci_gpus(HostView()))
    return [str(i) for i in range(count)], "/sys/bus/pci/devices"


def device_sets(parallel: int, gpus_per_trial: int, gpus: Sequence[str]) -> list[tuple[str, ...]]:
    """``parallel`` disjoint sets of ``gpus_per_trial`` devices, in order (set i is slot i)."""
    if parallel < 1:
        raise ConfigError(f"--parallel {parallel}: must be at least 1")
    if gpus_per_trial < 0:
        raise ConfigError(f"--gpus-per-trial {gpus_per_trial}: must be >= 0")
    if gpus_per_trial == 0:
        return [()] * parallel
    need = parallel * gpus_per_trial
    if need > len(gpus):
        raise ConfigError(f"--parallel {parallel} --gpus-per-trial {gpus_per_trial} needs {need} "
                          f"GPUs; {len(gpus)} available ({','.join(gpus) or 'none'})")
    return [tuple(gpus[i * gpus_per_trial:(i + 1) * gpus_per_trial]) for i in range(parallel)]


def device_env(devices: Sequence[str]) -> dict[str, str]:
    return {var: ",".join(devices) for var in DEVICE_VARS} if devices else {}


def host_warning(parallel: int, gpus_per_trial: int, gpus: Sequence[str], on_ray: bool) -> str:
    """A line for the user when trials of one host will disturb each other's measurements."""
    if parallel < 2 or on_ray:
        return ""
    if not gpus:
        return (f"warning: --parallel {parallel} on a host without GPUs: the trials share its CPU "
                "cores and memory, so each measures a server slowed by the others (numbers "
                "below are lower than one trial alone would give); --validate runs one at a time")
    if gpus_per_trial == 0:
        return (f"warning: --parallel {parallel} without --gpus-per-trial: every trial's server "
                "sees every GPU; give --gpus-per-trial G to split them")
    return ""


@dataclass
class _Running:
    index: int
    trial: Trial
    slot: tuple[str, ...]
    proc: Any  # multiprocessing.Process
    result: Any  # the receiving end of the trial's pipe


class TrialStopped(KeyboardInterrupt):
    """Raised in a trial process told to stop: the same unwinding as a Ctrl-C (the bench keeps
    what it measured, the server is stopped by its context)."""


def _stop_once(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second signal must not cut the cleanup short
    raise TrialStopped()


def _run_trial(launch: Launch, measure: Measure, config: Config, trial_dir: Path,
               env: dict[str, str]) -> tuple[str, Any]:
    """One trial, as ``Tuner.run_trial`` runs it: ("done", metrics) | ("failed", cause) |
    ("crashed", traceback) for a bug, which the pool re-raises."""
    try:
        with launch(config, trial_dir, **({"env": env} if env else {})) as (url, model):
            return "done", measure(url, model, trial_dir / "run")
    except LatscopeError as exc:  # the server did not start, or the run failed: record it
        return "failed", str(exc).splitlines()[0]
    except Exception:
        return "crashed", traceback.format_exc()


def _child_main(launch: Launch, measure: Measure, config: Config, trial_dir: Path,
                env: dict[str, str], conn: Any) -> None:
    # Ctrl-C at the terminal reaches the whole foreground group: the pool, not the terminal,
    # tells each trial when to stop (SIGTERM), once, so that no second signal interrupts the
    # stopping of its server.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _stop_once)
    try:
        # the pool forked this process with SIGTERM blocked: a stop sent before the handler
        # was in place was held until now, and is taken here as an orderly "interrupted"
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        result = _run_trial(launch, measure, config, trial_dir, env)
    except KeyboardInterrupt:  # TrialStopped, or the bench's own RunInterrupted on SIGTERM
        result = ("interrupted", "")
    conn.send(result)
    conn.close()


class LocalPool:
    """Up to ``len(slots)`` trials at once on this host, slot i with the devices ``slots[i]``."""

    def __init__(self, launch: Launch, measure: Measure, slots: Sequence[tuple[str, ...]]) -> None:
        self.launch = launch
        self.measure = measure
        self.device_slots = list(slots)
        self.slots = len(self.device_slots)
        self._ctx = multiprocessing.get_context("fork")

    def run(self, tuner: Tuner, configs: list[Config], purpose: str) -> list[Trial]:
        queue = list(enumerate(configs))
        free = list(self.device_slots)
        running: dict[Any, _Running] = {}
        done: dict[int, Trial] = {}
        try:
            while queue or running:
                while queue and free:
                    index, config = queue.pop(0)
                    job = self._start(tuner, index, config, free.pop(0), purpose)
                    running[job.result] = job
                # The pipe, not the process sentinel: a result larger than the pipe's buffer
                # keeps the child alive until it is read, and a child that dies closes the
                # only writing end (this process closed its copy), which reads as EOF.
                for pipe in multiprocessing.connection.wait(list(running)):
                    job = running.pop(pipe)
                    self._finish(tuner, job)
                    done[job.index] = job.trial
                    free.append(job.slot)
        except BaseException:
            self._stop(tuner, list(running.values()))
            raise
        return [done[i] for i in range(len(configs))]

    def _start(self, tuner: Tuner, index: int, config: Config, slot: tuple[str, ...],
               purpose: str) -> _Running:
        trial = tuner.new_trial(config, purpose, devices=",".join(slot))
        receiver, sender = self._ctx.Pipe(duplex=False)
        proc = self._ctx.Process(target=_child_main, name=f"latscope-trial-{index}",
                                 args=(self.launch, self.measure, config, tuner.trial_dir(trial),
                                       device_env(slot), sender))
        # SIGTERM blocked across the fork (the child unblocks it once its handler is set): a
        # Ctrl-C right after the start would otherwise kill the trial by the default action,
        # before it could record that it was interrupted
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            proc.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        sender.close()
        return _Running(index, trial, slot, proc, receiver)

    def _finish(self, tuner: Tuner, job: _Running) -> None:
        try:
            kind, payload = job.result.recv()
        except EOFError:
            kind, payload = "failed", _death(job.proc)
        job.result.close()
        job.proc.join()
        if kind == "crashed":
            tuner.interrupt_trial(job.trial)
            raise RuntimeError(f"trial {job.trial.run_dir} crashed:\n{payload}")
        if kind == "interrupted":
            tuner.interrupt_trial(job.trial)
            raise KeyboardInterrupt
        tuner.finish_trial(job.trial, payload if kind == "done" else None,
                           "" if kind == "done" else payload)

    def _stop(self, tuner: Tuner, jobs: list[_Running]) -> None:
        """Tells every running trial to stop (its server stops with it), waits, then kills the
        trial processes that did not exit: only processes this pool started, by PID."""
        for job in jobs:
            if job.proc.is_alive():
                os.kill(job.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_WAIT_S
        for job in jobs:
            job.proc.join(max(0.0, deadline - time.monotonic()))
            if job.proc.is_alive():
                job.proc.kill()
                job.proc.join()
            job.result.close()
            tuner.interrupt_trial(job.trial)


def _death(proc: Any) -> str:
    proc.join()
    code = proc.exitcode
    how = f"killed by {signal.Signals(-code).name}" if code is not None and code < 0 \
        else f"exit code {code}"
    return f"the trial process (pid {proc.pid}) died without a result: {how}"


class RayPool:
    """Up to ``parallel`` trials at once as Ray tasks with ``num_gpus=gpus_per_trial`` each."""

    def __init__(self, launch: Launch, measure: Measure, parallel: int, gpus_per_trial: int,
                 address: str | None) -> None:
        try:
            import ray
        except ImportError as exc:
            if exc.name != "ray":
                raise
            raise ConfigError("tune --ray needs Ray: pip install 'latscope[ray]'") from None
        from latscope.load.rayworkers import connect

        connect(address)
        self._ray = ray
        self._task = ray.remote(num_cpus=1, num_gpus=gpus_per_trial, max_retries=0)(_ray_trial)
        self.launch = launch
        self.measure = measure
        self.slots = parallel

    def run(self, tuner: Tuner, configs: list[Config], purpose: str) -> list[Trial]:
        ray = self._ray
        queue = list(enumerate(configs))
        running: dict[Any, tuple[int, Trial]] = {}
        done: dict[int, Trial] = {}
        try:
            while queue or running:
                while queue and len(running) < self.slots:
                    index, config = queue.pop(0)
                    trial = tuner.new_trial(config, purpose)
                    ref = self._task.remote(self.launch, self.measure, config,
                                            str(tuner.trial_dir(trial)))
                    running[ref] = (index, trial)
                ready, _ = ray.wait(list(running), num_returns=1)
                for ref in ready:
                    index, trial = running.pop(ref)
                    self._finish(tuner, trial, ref)
                    done[index] = trial
        except BaseException:
            for ref, (_, trial) in running.items():
                ray.cancel(ref)  # KeyboardInterrupt in the task: its server is stopped
                tuner.interrupt_trial(trial)
            raise
        return [done[i] for i in range(len(configs))]

    def _finish(self, tuner: Tuner, trial: Trial, ref: Any) -> None:
        try:
            kind, payload, devices, node = self._ray.get(ref)
        except self._ray.exceptions.RayError as exc:
            first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
            kind, payload, devices, node = "failed", f"Ray task failed: {first[:300]}", "", ""
        trial.devices = devices
        if kind == "crashed":
            tuner.interrupt_trial(trial)
            raise RuntimeError(f"trial {trial.run_dir} crashed on {node}:\n{payload}")
        tuner.finish_trial(trial, payload if kind == "done" else None,
                           "" if kind == "done" else payload, node=node)


def _ray_trial(launch: Launch, measure: Measure, config: Config, trial_dir: str
               ) -> tuple[str, Any, str, str]:
    """Runs in a Ray worker on the node Ray chose; the GPUs are those Ray assigned the task."""
    import ray

    devices = [str(i) for i in ray.get_gpu_ids()]
    kind, payload = _run_trial(launch, measure, config, Path(trial_dir), device_env(devices))
    node = f"{socket.gethostname()} ({ray.get_runtime_context().get_node_id()[:12]})"
    return kind, payload, ",".join(devices), node


def make_pool(launch: Launch, measure: Measure, *, parallel: int = 1, gpus_per_trial: int = 0,
              gpus: str | None = None, ray_address: str | None = None, use_ray: bool = False,
              fixed_port: bool = False) -> tuple[LocalPool | RayPool | None, list[str]]:
    """The pool for these flags (None: trials one at a time in this process, as before) and the
    lines to tell the user about it (which GPUs, interference)."""
    if parallel < 1:
        raise ConfigError(f"--parallel {parallel}: must be at least 1")
    if gpus_per_trial < 0:
        raise ConfigError(f"--gpus-per-trial {gpus_per_trial}: must be >= 0")
    if parallel > 1 and fixed_port and not use_ray:
        raise ConfigError(f"--parallel {parallel} with a fixed port: put {{port}} in --serve-cmd "
                          "so that each trial's server gets its own")
    if use_ray:
        pool = RayPool(launch, measure, parallel, gpus_per_trial, ray_address)
        return pool, [f"trials as Ray tasks: up to {parallel} at once, {gpus_per_trial} GPU(s) "
                      "each (Ray assigns them)"]
    if parallel == 1 and gpus_per_trial == 0 and gpus is None:
        return None, []
    ids, source = visible_gpus(gpus)
    slots = device_sets(parallel, gpus_per_trial, ids)
    notes = [f"{parallel} trial(s) at once on this host"
             + (f", GPUs {' | '.join(','.join(s) for s in slots)} (from {source})"
                if gpus_per_trial else "")]
    warning = host_warning(parallel, gpus_per_trial, ids, on_ray=False)
    return LocalPool(launch, measure, slots), notes + ([warning] if warning else [])

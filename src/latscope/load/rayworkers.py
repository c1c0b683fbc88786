"""Bench workers as Ray actors (``bench --ray [ADDRESS]``), the way LLMPerf drives its clients.

Each actor runs one ``WorkerRun`` (one event loop, its own process, one CPU of the cluster);
actors are spread over the nodes (``SPREAD``), so ``--ray`` alone places one per node and
``--workers N`` spreads N. Methods run in threads of the actor (``max_concurrency``) so that the
driver can poll finished records and ping the clock while the run goes on. Every node must have
latscope installed (the same version as the driver) and reach the target URL.

``ray.init`` resolves an empty address as Ray documents it: ``$RAY_ADDRESS``, else the cluster
last started on this machine, else a new local one.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Callable

import ray
import ray.exceptions

from latscope.load.worker import (
    HostFacts,
    WorkerDied,
    WorkerResult,
    WorkerRun,
    WorkerSpec,
    host_facts,
    run_loop,
)

_POLL_S = 0.1


def connect(address: str | None) -> None:
    if ray.is_initialized():
        return
    try:
        ray.init(address=address or None, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.WARNING)
    except ConnectionError as exc:
        from latscope.errors import ConfigError
        raise ConfigError(f"cannot connect to the Ray cluster at {address}: {exc}") from None


def alive_nodes() -> int:
    return max(1, sum(1 for node in ray.nodes() if node.get("Alive")))


# ray's annotations list no overload of remote() with actor options (max_concurrency, max_restarts)
@ray.remote(num_cpus=1, max_concurrency=4, max_restarts=0)  # type: ignore[call-overload]
class BenchActor:
    def setup(self, spec: WorkerSpec) -> HostFacts:
        self.worker = WorkerRun(spec)
        return dataclasses.replace(host_facts(),
                                   node_id=ray.get_runtime_context().get_node_id())

    def ping(self) -> int:
        return time.perf_counter_ns()

    def run(self, start_ns: int) -> WorkerResult:
        spec = self.worker.spec
        return run_loop(lambda: self.worker.measure(start_ns), spec.config.use_uvloop)

    def poll(self) -> bytes:
        return self.worker.take()

    def close(self) -> None:
        self.worker.close()


class RayWorker:
    """The driver's handle on one actor."""

    def __init__(self, index: int, spec: WorkerSpec) -> None:
        self.name = f"worker {index}"
        self.host = "?"
        # an actor class (ray.remote above): its annotations are the ignored overload's
        self.actor = BenchActor.options(scheduling_strategy="SPREAD").remote()  # type: ignore[attr-defined]
        self._ready = self.actor.setup.remote(spec)
        self._result: Any = None

    def _get(self, ref: Any, timeout_s: float | None) -> Any:
        try:
            return ray.get(ref, timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise WorkerDied(f"{self.name} on {self.host}: no answer within {timeout_s:.0f} s") \
                from None
        except ray.exceptions.RayActorError as exc:
            raise WorkerDied(f"{self.name} on {self.host} died: {_first_line(exc)}") from None
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None) or exc
            raise WorkerDied(f"{self.name} on {self.host} failed: "
                             f"{type(cause).__name__}: {_first_line(cause)}") from None

    def wait_ready(self, timeout_s: float) -> HostFacts:
        facts: HostFacts = self._get(self._ready, timeout_s)
        self.host = facts.host
        return facts

    def ping(self) -> int:
        return int(self._get(self.actor.ping.remote(), 30))

    ping_after_run = ping

    def go(self, start_ns: int) -> None:
        self._result = self.actor.run.remote(start_ns)

    def stream(self, sink: Callable[[bytes], None]) -> WorkerResult:
        while True:
            done, _ = ray.wait([self._result], timeout=_POLL_S)
            # polled after the run returned: this poll drains the last records
            data = self._get(self.actor.poll.remote(), 60)
            if data:
                sink(data)
            if done:
                return self._get(self._result, None)

    def stop(self) -> None:
        """Kills only this actor (never other work on the cluster)."""
        try:
            ray.get(self.actor.close.remote(), timeout=10)
        except ray.exceptions.RayError:
            pass
        ray.kill(self.actor)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:300]
    return type(exc).__name__

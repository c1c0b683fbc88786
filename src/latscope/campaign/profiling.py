"""diagnose's profile: ``POST /start_profile`` once the batch at the knee is full, a few seconds
of that steady batch, ``POST /stop_profile`` before it drains, then the profile's files.

Why the middle of a steady load and not a load inside the profile: a closed loop that starts
after ``/start_profile`` and ends before ``/stop_profile`` puts its ramp-up (prompts prepared,
connections opened, the batch filling) and its drain inside the window. On an H200 the steady
window read the ``--max-num-batched-tokens 512`` server's GPU idle 21% where the old one read
53% (NVML 98-100% in both); with short prompts one round read the other way (docs/diagnose.md
#the-profile). Either way a profile is taken under the profiler, which halved that H200's
throughput: the capacity verdict prefers the sweep's GPU telemetry (campaign.conclude). Here the
profiler starts after one wave of requests has completed (each slot has turned over once) and
stops after ``PROFILE_LOAD_S``, or as soon as the last request is sent, whichever comes first.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from latscope.campaign.observe import observe, with_load
from latscope.campaign.servers import Running
from latscope.campaign.state import Budget, Diagnosis
from latscope.errors import ConfigError

PROFILE_LOAD_S = 3.0
# the load goes on this long past the profile's planned end, so that a slow /start_profile
# (the torch profiler's set-up stalls the engine for a moment) still leaves a steady batch
MARGIN_S = 2.0
# a rank's file can land seconds after another's (each worker writes its own, gzip'ed)
SETTLE_S = 3.0


def take_profile(state: Diagnosis, base: Any, running: Running | None,
                 budget: Budget) -> list[str]:
    """The profile of a steady batch at the knee (module docstring); its files (one per rank of
    a tensor-parallel server), waited for within what is left of the budget."""
    trace_dir = Path(state.opts.trace_dir) if state.opts.trace_dir else (
        running.profiler_dir if running else None)
    if trace_dir is None:
        raise ConfigError("--profile against --url needs --trace-dir: where the server writes "
                          "its profiler traces (its --profiler-config torch_profiler_dir)")
    before = _trace_files(trace_dir)
    load = int(state.levels.get("knee") or state.levels.get("light") or 1)
    requests = profile_requests(state, load)
    window = SteadyWindow(load, requests, PROFILE_LOAD_S)
    holder = threading.Thread(target=window.hold, args=(lambda path: _post(base.url, path),),
                              name="latscope-profile", daemon=True)
    holder.start()
    cfg = with_load(base, concurrency=load, num_requests=requests,
                    output_dir=state.run.path / "profile-load", warmup=0, seed=900)
    try:
        # one client process: the records' count is what starts and stops the profile
        observe(cfg, scrape_interval_s=0, host_load=False, on_record=window.record, workers=1)
    finally:
        window.end()
        holder.join(timeout=330)
    state.run.write("profile-load/profile.json", window.to_dict())
    if window.error is not None:
        raise ConfigError(f"the profiler endpoints failed: {window.error}")
    if not window.started:
        raise ConfigError(f"the profile load ended before its batch was full ({window.done} of "
                          f"{load} requests done): no profile taken")
    state.notes.append(window.note())
    wait_s = max(30.0, budget.left() * 0.5)  # the other half: reading and analysing it
    return _wait_for_profile(state, trace_dir, before, wait_s)


def _post(url: str, path: str) -> None:
    req = urllib.request.Request(url.rstrip("/") + path, method="POST", data=b"")
    with urllib.request.urlopen(req, timeout=300) as resp:  # noqa: S310 (the user's server)
        resp.read()


@dataclass
class SteadyWindow:
    """When the profile runs inside a closed loop of ``requests`` at ``load``: from the
    ``load``-th completed request (every slot has turned over once) for ``PROFILE_LOAD_S``, cut
    short when ``requests - load`` are done (the last request has been sent: the batch drains
    from here). ``record`` runs on the client's event loop, so it only counts and signals; the
    profiler's HTTP calls run in ``hold``, on a thread of their own."""

    load: int
    requests: int
    hold_s: float = PROFILE_LOAD_S
    done: int = 0
    started: bool = False
    stopped_by: str = ""
    window_s: float | None = None
    stop_call_s: float | None = None  # how long /stop_profile took to answer
    error: str | None = None
    _full: threading.Event = field(default_factory=threading.Event)
    _draining: threading.Event = field(default_factory=threading.Event)

    def record(self, _record: Any) -> None:
        self.done += 1
        if self.done >= self.load:
            self._full.set()
        if self.done >= self.requests - self.load:
            self._draining.set()

    def end(self) -> None:
        """The load is over (or failed): a profile not yet started is not started."""
        self._draining.set()
        self._full.set()

    def hold(self, post: Any) -> None:
        self._full.wait()
        if self._draining.is_set() and self.done < self.load:
            return  # the load ended before its batch filled: nothing steady to profile
        try:
            post("/start_profile")
        except OSError as exc:
            self.error = f"/start_profile: {exc}"
            return
        self.started = True
        t0 = time.monotonic()
        self.stopped_by = "drain" if self._draining.wait(self.hold_s) else "time"
        # the window is what the profiler was asked for; writing the trace (inside
        # /stop_profile, 17 s for 3 s on the CPU build) is not in it
        self.window_s = round(time.monotonic() - t0, 3)
        try:
            post("/stop_profile")
        except OSError as exc:
            self.error = f"/stop_profile: {exc}"
        self.stop_call_s = round(time.monotonic() - t0 - self.window_s, 3)

    def note(self) -> str:
        cut = " (cut short: the load's last request was sent)" if self.stopped_by == "drain" \
            else ""
        return (f"profile: a steady batch at c={self.load}, {self.window_s or 0:.1f} s from "
                f"completed request {self.load} on{cut}")

    def to_dict(self) -> dict[str, Any]:
        return {"load": self.load, "requests": self.requests, "hold_s": self.hold_s,
                "started": self.started, "stopped_by": self.stopped_by,
                "window_s": self.window_s, "stop_call_s": self.stop_call_s, "error": self.error}


def profile_requests(state: Diagnosis, load: int) -> int:
    """One wave to fill the batch, ``PROFILE_LOAD_S + MARGIN_S`` of the sweep's throughput at
    ``load`` for the profile, one wave that drains after it; at least 4 waves' worth when the
    throughput is unknown."""
    obs = state.observations.get(float(load))
    rps = (obs.summary.throughput.requests_per_s if obs else None) or 0.0
    steady = int(rps * (PROFILE_LOAD_S + MARGIN_S)) if rps > 0 else 2 * load
    return 2 * load + max(steady, load, 4)


def _trace_files(trace_dir: Path) -> set[Path]:
    from latscope.trace.profiles import TRACE_GLOB

    return set(trace_dir.glob(TRACE_GLOB)) if trace_dir.exists() else set()


def _wait_for_profile(state: Diagnosis, trace_dir: Path, before: set[Path],
                      wait_s: float) -> list[str]:
    """Every rank's file of the profile just taken: the rank count the server's settings say
    (tensor x pipeline parallel size) when known, and no new file for ``SETTLE_S``, each file's
    size steady. At the deadline, the ranks written so far, with a note."""
    from latscope.trace.profiles import profile_files

    expected = _expected_ranks(state)
    deadline = time.monotonic() + wait_s
    seen: set[Path] = set()
    last_new = time.monotonic()
    files: list[Any] = []
    while time.monotonic() < deadline:
        new = _trace_files(trace_dir) - before
        if new - seen:
            seen, last_new = new, time.monotonic()
        files = profile_files(sorted(new))
        settled = time.monotonic() - last_new >= SETTLE_S
        if files and settled and len(files) >= (expected or 1) \
                and all(_stable(f.path) for f in files):
            return [str(f.path) for f in files]
        time.sleep(1.0)
    ready = [f for f in files if _stable(f.path)]
    if not ready:
        raise ConfigError(f"no new profiler trace appeared in {trace_dir} within {wait_s:.0f} s")
    state.notes.append(f"profile: {len(ready)} rank trace(s) written within {wait_s:.0f} s"
                       + (f", {expected} expected" if expected else ""))
    return [str(f.path) for f in ready]


def _expected_ranks(state: Diagnosis) -> int | None:
    """Tensor x pipeline parallel size from the server's command line (doctor), else its log."""
    settings = ((state.doctor.facts.get("server") or {}).get("settings") or {}) \
        if state.doctor is not None else {}
    config = state.log.config if state.log is not None else {}
    sizes = []
    for key in ("tensor_parallel_size", "pipeline_parallel_size"):
        value = (settings.get(key) or {}).get("value")
        value = value if isinstance(value, int) else config.get(key)
        sizes.append(value if isinstance(value, int) and value > 0 else None)
    if sizes[0] is None:
        return None
    return sizes[0] * (sizes[1] or 1)


def _stable(path: Path) -> bool:
    size = path.stat().st_size
    time.sleep(0.5)
    return size > 0 and path.stat().st_size == size

"""``diagnose --passive``: a window of the traffic a server already has, watched, never added to.

Stages, each written to the run directory as it ends (Ctrl-C and SIGTERM keep what is done):

1. doctor   host, GPU, server config and process (GET /version, /v1/models, /metrics once)
2. net      the round trip: GET /health only (no streamed request: ``stream_requests=0``)
3. window   ``/metrics`` every ``scrape_s`` for ``window_s`` (each scrape appended as it
            comes), the log followed as it grows (``--log``), the server's spans received
            (``--otlp-listen``), the GPUs and the host's CPUs when the server is on this host,
            and with ``--profile`` ``/start_profile`` .. ``/stop_profile`` over the window's last
            ``profile_s`` seconds
4. log      the window's log lines parsed with the head's configuration (the raw lines, which
            may hold prompts, are deleted once parsed)
5. trace    ``--trace FILE``, or the profile just taken

Then ``campaign.passive_dir.conclude_dir`` re-reads the run directory and concludes
(``campaign.passive.conclude_window``), the same path ``--replay`` takes, and writes the report.
No request is sent to an inference endpoint: the manifest's ``passive.requests_sent`` lists every
request latscope did send, by kind.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from latscope.campaign.stages import _same_host
from latscope.campaign.state import DiagnoseFailed, StageRecord, run_stage
from latscope.errors import ConfigError, LatscopeError
from latscope.model import RunContext
from latscope.rundir import RunDir
from latscope.server.scrape import MAX_PAGE_BYTES, MetricsScraper

Progress = Callable[[str], None]
NET_PROBES = 20
# A window stops early once no scrape succeeded for this long: the server is gone, and the
# window ends at its last good scrape (max with 10 scrape intervals)
GIVE_UP_S = 60.0


@dataclass
class PassiveOptions:
    url: str
    window_s: float = 600.0
    scrape_s: float = 2.0
    log: str | None = None
    otlp_listen: str | None = None
    otlp_grpc_listen: str | None = None
    profile: bool = False
    profile_s: float = 5.0
    trace_dir: str | None = None
    trace: tuple[str, ...] | None = None
    output_dir: str | None = None
    api_key: str | None = None
    gpu_telemetry: bool | None = None  # None: when the server is on this host
    scrape_timeout_s: float | None = None
    max_page_bytes: int = MAX_PAGE_BYTES
    argv: list[str] | None = None


@dataclass
class PassiveRun:
    """What the live stages gathered; the run directory holds all of it as it comes."""

    opts: PassiveOptions
    run: RunDir
    progress: Progress
    stages: list[StageRecord] = field(default_factory=list)
    doctor: Any = None
    same_host: bool | None = None
    pid: int | None = None
    sent: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)
    follower: Any = None
    profile_files: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)


def diagnose_passive(opts: PassiveOptions, progress: Progress = lambda _: None
                     ) -> dict[str, Any]:
    """Watch ``opts.url``'s live traffic for a window and return the report (also on disk)."""
    from latscope.redact import redact_url_password

    _check(opts)
    target = {"url": redact_url_password(opts.url), "local": False, "controlled": False}
    run = RunDir.create("diagnose", opts.output_dir, argv=opts.argv, target=target,
                        passive={"window_s": opts.window_s, "scrape_s": opts.scrape_s,
                                 "load_sent": False, "requests_sent": {}})
    state = PassiveRun(opts, run, progress, same_host=_same_host(opts.url))
    run.update(target={**target, "same_host": state.same_host})
    progress(f"writing to {run.path} (passive: no request to the inference endpoints)")
    status = "ok"
    try:
        _stage(state, "doctor", lambda: _doctor(state))
        _stage(state, "net", lambda: _net(state))
        _stage(state, "window", lambda: _window(state))
        if opts.log:
            _stage(state, "log", lambda: parse_followed_log(state))
        if opts.trace or state.profile_files:
            _stage(state, "trace", lambda: _trace(state))
        window = next(s for s in state.stages if s.name == "window")
        if window.status == "failed":  # no window: the run failed, with all it gathered
            raise DiagnoseFailed(f"{window.note} (everything gathered is in {run.path})")
    except KeyboardInterrupt:
        status = "interrupted"
        state.notes.append("interrupted: the report holds what was gathered before it")
        raise
    except LatscopeError as exc:
        status = f"failed: {exc}"
        raise
    finally:
        report = finish_passive(state, status)
    return report


def _check(opts: PassiveOptions) -> None:
    if opts.window_s < 2 * opts.scrape_s:
        raise ConfigError(f"--window {opts.window_s:g} s: at least two scrape intervals "
                          f"({2 * opts.scrape_s:g} s)")
    if opts.profile and not opts.trace_dir:
        raise ConfigError("--profile with --passive needs --trace-dir (where the server writes "
                          "its profiler traces)")
    if opts.profile and not 1 <= opts.profile_s <= 60:
        raise ConfigError("--profile-seconds: 1 to 60 (a profile of live traffic is bounded)")


def _stage(state: PassiveRun, name: str, work: Callable[[], str | None]) -> None:
    run_stage(state.stages, state.run, state.progress, name, work)


def _headers(opts: PassiveOptions) -> dict[str, str]:
    return {"authorization": f"Bearer {opts.api_key}"} if opts.api_key else {}


def _doctor(state: PassiveRun) -> str:
    from latscope.campaign.doctor import run_doctor
    from latscope.model import Severity

    report = run_doctor(url=state.opts.url, log=state.opts.log, headers=_headers(state.opts))
    state.sent.update({"GET /version": 1, "GET /v1/models": 1, "GET /metrics": 1})
    state.doctor = report
    state.pid = report.facts.get("pid") if isinstance(report.facts.get("pid"), int) else None
    state.run.write("doctor.json", report.to_dict())
    bad = [f for f in report.findings if f.severity in (Severity.CRITICAL, Severity.WARNING)]
    return f"{len(report.findings)} checks, {len(bad)} to act on"


def _net(state: PassiveRun) -> str:
    from latscope.campaign.doctor import probe_network

    report = probe_network(state.opts.url, NET_PROBES, headers=_headers(state.opts),
                           stream_requests=0)
    sent = len(report.new_connection_ms) + len(report.keepalive_ms) + \
        (1 if report.keepalive_ms else 0)  # the kept connection's opening GET
    state.sent["GET /health"] += sent
    state.run.write("net.json", report.to_dict())
    if report.error:
        return f"failed: {report.error}"
    return "client and server share this host" if state.same_host else "remote server"


def _window(state: PassiveRun) -> str:
    from latscope.campaign.watching import hold_window

    scraper = MetricsScraper(interval_s=state.opts.scrape_s, parse_during_run=True,
                             timeout_s=state.opts.scrape_timeout_s,
                             max_bytes=state.opts.max_page_bytes)
    ctx = RunContext(state.opts.url.rstrip("/").removesuffix("/v1"), state.run.path,
                     _headers(state.opts), time.perf_counter_ns(), time.time())
    observers = window_observers(state)
    state.progress(f"    watching for {state.opts.window_s:g} s: /metrics every "
                   f"{state.opts.scrape_s:g} s" + (f", {state.opts.log}" if state.opts.log
                                                   else "") + " ... (Ctrl-C ends it early)")
    try:
        ended = asyncio.run(hold_window(scraper, observers, ctx, state.opts.window_s,
                                        give_up_s=max(GIVE_UP_S, 10 * state.opts.scrape_s),
                                        profile=_profiler(state) if state.opts.profile
                                        else None))
    finally:
        state.sent["GET /metrics"] += scraper.scrapes + scraper.failures
        _record_sent(state)
    if ended:
        state.notes.append(ended)
    if len(scraper.snapshots) < 2:
        first = scraper.failure_log[0].error if scraper.failure_log else "none came back"
        raise DiagnoseFailed(f"{len(scraper.snapshots)} of {len(scraper.snapshots) + scraper.failures}"
                             f" /metrics scrapes succeeded, a window needs two; the first "
                             f"failure: {first}")
    failed = f", {scraper.failures} failed" if scraper.failures else ""
    return f"{len(scraper.snapshots)} scrapes{failed}" + (f"; {ended}" if ended else "")


def window_observers(state: PassiveRun) -> list[Any]:
    from latscope.env.hostload import HostLoadSampler

    opts, out = state.opts, []
    if opts.log:
        from latscope.server.logfollow import LogFollower

        state.follower = LogFollower(opts.log)
        out.append(state.follower)
    if opts.otlp_listen or opts.otlp_grpc_listen:
        out.append(_span_recorder(state))
    if state.same_host:
        from latscope.campaign.observe import gpu_sampler

        out += gpu_sampler(opts.url, opts.scrape_s, opts.gpu_telemetry, True)
        if state.pid is not None:
            out.append(HostLoadSampler({state.pid}))
    return out


def _span_recorder(state: PassiveRun) -> Any:
    from latscope.server.otlp import SpanCollector, remote_instructions
    from latscope.server.otlp_record import SpanRecorder

    collector = SpanCollector(state.opts.otlp_listen or "127.0.0.1:0",
                              grpc_listen=state.opts.otlp_grpc_listen).start()
    for line in remote_instructions(collector):
        state.progress(f"    {line}")
    return _Closing(SpanRecorder(collector, max_wait_s=3.0, quiet_s=1.0), collector)


class _Closing:
    """An observer whose resource (the OTLP receiver) is closed after it stops."""

    def __init__(self, observer: Any, resource: Any) -> None:
        self.observer, self.resource = observer, resource

    async def start(self, ctx: RunContext) -> None:
        await self.observer.start(ctx)

    async def stop(self, ctx: RunContext) -> None:
        try:
            await self.observer.stop(ctx)
        finally:
            self.resource.close()


def _profiler(state: PassiveRun) -> Any:
    from latscope.campaign.watching import LiveProfile

    return LiveProfile(state.opts.url, state.opts.profile_s, state.opts.trace_dir or "",
                       on_done=lambda files, sent, error: _profiled(state, files, sent, error))


def _profiled(state: PassiveRun, files: list[str], sent: int, error: str) -> None:
    state.profile_files = files
    if sent:
        state.sent["POST /start_profile"] += 1
    if sent > 1:
        state.sent["POST /stop_profile"] += 1
    if error:
        state.notes.append(f"profile: {error}")


def _record_sent(state: PassiveRun) -> None:
    passive = {**state.run.manifest.get("passive", {}), "requests_sent": dict(state.sent),
               "inference_requests_sent": 0, "notes": state.notes}
    state.run.update(passive=passive)


def parse_followed_log(state: PassiveRun) -> str:
    from latscope.server.logfollow import WINDOW_LOG, window_log

    follower = state.follower
    if follower is None:
        return "skipped: the window did not follow the log"
    raw = state.run.path / WINDOW_LOG
    if not raw.is_file():
        return "skipped: no line of the log was read"
    log = window_log(raw, follower.head, name=follower.path.name)
    status = follower.status()
    state.run.write("log.json", {"source": str(follower.path), "window": status,
                                 "stats_lines": len(log.stats), "config": log.config,
                                 "parsed": log.to_dict()})
    with contextlib.suppress(OSError):
        raw.unlink()  # the window's raw lines may hold prompts: only the parsed log is kept
    for rotation in status["rotations"]:
        state.notes.append(f"log: {rotation['why']} during the window (followed into the new "
                           "file)")
    return f"{status['lines']} lines in the window, {len(log.stats)} stats lines" + (
        f", {len(status['rotations'])} rotation(s) followed" if status["rotations"] else "")


def _trace(state: PassiveRun) -> str:
    from latscope.campaign.traces import analyse_traces

    paths = list(state.opts.trace or state.profile_files)
    stored, notes = analyse_traces(paths)
    state.notes += notes
    state.run.write("trace.json", stored)
    return f"{paths[0]}" + (f" and {len(paths) - 1} more rank(s)" if len(paths) > 1 else "")


def finish_passive(state: PassiveRun, status: str) -> dict[str, Any]:
    """Conclude from what is on disk (as ``--replay`` does), write the reports, end the run."""
    from latscope.campaign.passive_dir import conclude_dir

    _record_sent(state)
    report = conclude_dir(state.run, stages=state.stages, notes=state.notes,
                          elapsed_s=time.monotonic() - state.started)
    state.run.finish(status, verdict=(report.get("verdict") or {}).get("text"))
    return report

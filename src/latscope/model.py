"""The small shared data model that flows through every layer of latscope.

- ``RequestRecord``: one request as the client saw it (load layer writes it, analysis reads it).
- ``MetricSnapshot``: one scrape of a server's ``/metrics`` (server layer).
- ``Finding`` / ``Evidence``: one diagnosed cause, in the single form that ``logs``, ``trace``,
  ``doctor``, ``net``, ``sweep`` and (later) ``diagnose`` all produce and that reports render.

Times inside the program are monotonic nanoseconds (``time.monotonic_ns``/``perf_counter_ns``);
units appear only at the edges. Trace events have their own model in ``latscope.trace.model``
because they are far more numerous and are held in columnar form.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import operator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


class ErrorKind(str, enum.Enum):
    """Why a request failed; failed requests are counted by kind and kept out of latency stats."""

    HTTP_4XX = "http_4xx"
    HTTP_5XX = "http_5xx"
    CONNECTION = "connection"  # refused, reset, dropped mid-stream
    TIMEOUT = "timeout"
    MALFORMED = "malformed_response"  # bad SSE framing or JSON the client needed
    CANCELLED = "cancelled"  # the run was stopped (Ctrl-C, duration reached) while in flight


@dataclass(slots=True)
class RequestRecord:
    """One request, client side. Timestamps are ``time.perf_counter_ns()`` values of one process.

    ``scheduled_ns`` is when the arrival process wanted the request sent (open loop) or when a
    concurrency slot became free (closed loop). ``sent_ns`` is when the request bytes were handed
    to the socket. Latencies start at ``scheduled_ns`` in an open loop (client lag is counted,
    never hidden) and at ``sent_ns`` in a closed loop (``open_loop`` says which; the one
    definition is ``latscope.stats.origin_ns``).
    """

    index: int
    request_id: str
    scheduled_ns: int
    sent_ns: int = 0
    headers_ns: int | None = None
    first_token_ns: int | None = None
    end_ns: int | None = None
    # Arrival time of every content-bearing chunk (the first one included); requests.jsonl holds
    # them as gaps (``CHUNK_GAPS_KEY``).
    chunk_ns: list[int] = field(default_factory=list)
    # Output tokens carried by each chunk when the server reports it (continuous usage), else [].
    chunk_tokens: list[int] = field(default_factory=list)
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    output_tokens_source: str = "none"  # "usage" | "counted" | "none"
    expected_output_tokens: int | None = None
    status: int | None = None
    error_kind: str | None = None
    error: str | None = None
    warmup: bool = False
    open_loop: bool = False  # sent on an arrival schedule (--rate), not by a closed loop
    # W3C trace id (32 hex) sent in this request's ``traceparent`` header, when tracing requests:
    # the key that joins it with the server's own span of it (latscope.analysis.join).
    trace_id: str | None = None
    group: str = ""  # the workload group of its prompt (mix entry name, "shared_prefix", ...)
    # Anything the server told us about this request (e.g. per-request timing fields, its id).
    server: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error_kind is None and self.end_ns is not None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        """A record from its ``requests.jsonl`` object: its token times as gaps
        (``chunk_gaps_ns``, what ``latscope.rundir.record_line`` writes) or as times
        (``chunk_ns``: run directories of schema 1, ``to_dict()``)."""
        # the field names once, not per record (dataclasses.fields() took ~1.4 us of ~6)
        names = _RECORD_FIELDS if cls is RequestRecord else {f.name for f in dataclasses.fields(cls)}
        fields = {k: v for k, v in data.items() if k in names}
        gaps = data.get(CHUNK_GAPS_KEY)
        if isinstance(gaps, list):
            fields["chunk_ns"] = times_of_gaps(gaps)
        return cls(**fields)


# requests.jsonl holds a record's token times under this key as gaps: the first time, then
# each one's difference from the one before. A 256-token response read in one piece shares
# one 13-digit time (~5.4 kB of text a line); its gaps are "0"s (~1 kB): writing the times
# took ~5% of the client's CPU at its ceiling (benchmarks/client_ceiling.py, docs/bench.md).
CHUNK_GAPS_KEY = "chunk_gaps_ns"


def gaps_of_times(times: list[int]) -> list[int]:
    """Token times as ``chunk_gaps_ns`` holds them (``times_of_gaps`` undoes it)."""
    return [times[0], *map(operator.sub, times[1:], times[:-1])] if times else []


def times_of_gaps(gaps: list[int]) -> list[int]:
    return list(itertools.accumulate(gaps))


_RECORD_FIELDS = frozenset(f.name for f in dataclasses.fields(RequestRecord))


@dataclass(slots=True)
class MetricSample:
    name: str
    labels: dict[str, str]
    value: float


@dataclass(slots=True)
class MetricSnapshot:
    """One scrape of ``/metrics``. ``t_ns`` is on the same clock as ``RequestRecord`` timestamps."""

    t_ns: int
    wall_time: float  # time.time() at the scrape, for joining with server logs
    samples: list[MetricSample]
    scrape_ms: float = 0.0  # how long the scrape itself took (its overhead is reported)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MetricSnapshot:
        return cls(
            t_ns=data["t_ns"],
            wall_time=data["wall_time"],
            samples=[MetricSample(**s) for s in data["samples"]],
            scrape_ms=data.get("scrape_ms", 0.0),
        )


class Severity(str, enum.Enum):
    CRITICAL = "critical"  # a measured, large share of the latency, or a setting that breaks it
    WARNING = "warning"  # likely costs latency; measure to confirm
    INFO = "info"  # worth knowing, no action required
    OK = "ok"  # the check ran and passed (kept so a report shows what was checked)
    SKIPPED = "skipped"  # the check could not run here; ``title`` says why

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]


_SEVERITY_RANK = {
    Severity.CRITICAL: 0,
    Severity.WARNING: 1,
    Severity.INFO: 2,
    Severity.OK: 3,
    Severity.SKIPPED: 4,
}


@dataclass(slots=True)
class Evidence:
    """One value read, and exactly where it was read from."""

    name: str  # e.g. "vllm:num_requests_waiting" or "/proc/sys/kernel/numa_balancing"
    value: Any
    unit: str = ""
    source: str = ""  # file, URL, command or log line number the value came from


@dataclass(slots=True)
class Finding:
    """A diagnosed cause in the one form every verb produces and every report renders."""

    id: str  # stable, dotted: "server.queue_token_budget", "trace.gpu_idle", "host.numa_balancing"
    severity: Severity
    title: str  # one line a user can act on
    evidence: list[Evidence] = field(default_factory=list)
    why: str = ""  # why it hurts latency
    fix: str = ""  # what to change
    reference: str = ""  # where the rule comes from (doc, issue, measurement)
    layer: str = ""  # network | frontend | queue | prefill | decode | gpu | host | client | config
    # Measured share of a latency or throughput this explains, when measured (see
    # latscope.findings.impact): {"target": "ttft_mean", "share": 0.62, "value_ms": 41.0,
    # "measured_at": "knee (c=16)"}
    impact: dict[str, Any] | None = None
    # "cause": names something to change; "symptom": where the time goes, its cause not (yet)
    # identified. A symptom is never critical by itself; diagnose joins it to its cause.
    role: str = "cause"

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["severity"] = self.severity.value
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        return cls(
            id=data["id"],
            severity=Severity(data["severity"]),
            title=data["title"],
            evidence=[Evidence(**e) for e in data.get("evidence", [])],
            why=data.get("why", ""),
            fix=data.get("fix", ""),
            reference=data.get("reference", ""),
            layer=data.get("layer", ""),
            impact=data.get("impact"),
            role=data.get("role", "cause"),
        )


@dataclass(slots=True)
class RunContext:
    """What a load run tells the things that watch it (metric scrapers, profilers).

    ``start_ns`` is ``time.perf_counter_ns()`` at the run's start and ``start_wall`` the
    ``time.time()`` taken at the same moment: together they map client timestamps to wall-clock
    time, which server logs and other hosts use.
    """

    base_url: str  # e.g. "http://127.0.0.1:8000" (no trailing slash, no /v1)
    run_dir: Path
    headers: dict[str, str]  # auth headers to use; never log or write them
    start_ns: int
    start_wall: float


class RunObserver(Protocol):
    """Something that runs alongside a load run, e.g. the ``/metrics`` scraper.

    ``start`` is awaited right before the first request is sent, ``stop`` after the last one
    finished, also when the run is interrupted. Both run on the load generator's event loop, so
    they must never block it: do I/O asynchronously and keep per-call work small.
    """

    async def start(self, ctx: RunContext) -> None: ...

    async def stop(self, ctx: RunContext) -> None: ...

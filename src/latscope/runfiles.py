"""The run directory's common files as typed models: ``manifest.json`` (every verb, and every
load run) and a load run's ``summary.json`` (bench, and each step of sweep, tune and diagnose).

The readers take them typed (``manifest_of``, ``summary_of``: one-line ``ConfigError`` for a
file that does not fit); their JSON Schemas come from the models (``results.json_schema``).
Both files are open where the producer's record is: a verb adds its own manifest keys, and
a key a model does not name is kept in the file and ignored here.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

from latscope.errors import ConfigError

T = TypeVar("T", bound=msgspec.Struct)
# a figure as its producer wrote it: an int stays an int
Number = int | float
# a latency distribution (``stats.distribution``): count, mean, std, min, max and the asked
# percentiles ("p50", "p99.9" ...), each None where nothing was measured
Distribution = dict[str, Number | None]


class HostInfo(msgspec.Struct):
    """The host a run ran on (a key a hand-made manifest lacks reads None)."""

    hostname: str | None = None
    platform: str | None = None
    python: str | None = None
    cpus: int | None = None


class Manifest(msgspec.Struct, kw_only=True):
    """``manifest.json``. A verb's run (``rundir.RunDir.create``) has the first group; a load
    run (``load.runner``) the second; either may carry more keys of its own."""

    schema_version: int
    kind: str  # the verb: bench, sweep, diagnose, trace ...
    latscope_version: str | UnsetType = UNSET
    command: str | UnsetType = UNSET  # the command line, secrets redacted
    started: str | UnsetType = UNSET  # UTC ISO 8601
    ended: str | None | UnsetType = UNSET
    status: str | UnsetType = UNSET  # running | ok | failed: why | interrupted
    host: HostInfo | UnsetType = UNSET
    target: dict[str, Any] | UnsetType = UNSET  # what was known about the server: open
    verdict: str | None | UnsetType = UNSET  # diagnose's, in one line, once it ends
    prompt_seed: int | UnsetType = UNSET  # diagnose's: every run's prompts drawn from it
    # diagnose --passive's and watch's: the window's label, its scrapes, requests sent: open
    passive: dict[str, Any] | UnsetType = UNSET
    # a load run's
    run_tag: str | UnsetType = UNSET
    config: dict[str, Any] | UnsetType = UNSET  # the BenchConfig, api key redacted
    base_url: str | UnsetType = UNSET
    model: str | None | UnsetType = UNSET
    endpoint: str | UnsetType = UNSET
    versions: dict[str, str | None] | UnsetType = UNSET
    created_wall: float | UnsetType = UNSET
    clock: str | UnsetType = UNSET
    start_ns: int | UnsetType = UNSET
    start_wall: float | UnsetType = UNSET


class RequestCounts(msgspec.Struct, kw_only=True):
    total: int
    completed: int
    failed: int
    warmup_excluded: int = 0


class Rates(msgspec.Struct, kw_only=True):
    requests_per_s: Number | None
    output_tokens_per_s: Number | None
    total_tokens_per_s: Number | None
    # the window (absent from summaries written before latscope kept a steady one)
    window_s: Number | None | UnsetType = UNSET
    window: str | UnsetType = UNSET  # which window the rates are over, in words
    window_requests: int | UnsetType = UNSET
    # requests in flight on average over the steady window (absent before latscope kept it)
    mean_in_flight: Number | None | UnsetType = UNSET


class Throughput(Rates, kw_only=True):
    """The steady window's rates (or the overall ones where there is none), and the overall."""

    overall: Rates | UnsetType = UNSET


class Tokens(msgspec.Struct, kw_only=True):
    input_total: int
    output_total: int
    output_source: dict[str, int] = {}  # how each count was known (usage, chunks ...)


class Goodput(msgspec.Struct, kw_only=True):
    slo_ms: dict[str, float]
    good_requests: int
    requests_per_s: Number | None
    attainment: float | None


class WorkersChosen(msgspec.Struct):
    count: int
    why: str


class LoadShape(msgspec.Struct, kw_only=True):
    mode: str  # closed | open
    concurrency: int | None = None
    rate: float | None = None
    burstiness: float | None = None
    workers_chosen: WorkersChosen | UnsetType = UNSET  # client processes, and why so many
    # what the load held: requests in flight on average over the steady window
    mean_in_flight: Number | None | UnsetType = UNSET
    # a closed loop's stagger (what its loops drew) and its ramp, excluded like a warm-up
    stagger: list[dict[str, Any]] | UnsetType = UNSET
    ramp_requests_excluded: int | UnsetType = UNSET
    ramp_note: str | UnsetType = UNSET


class GroupSummary(msgspec.Struct, kw_only=True):
    requests: RequestCounts
    errors: dict[str, int] = {}
    ttft_ms: Distribution = {}
    tpot_ms: Distribution = {}
    e2e_ms: Distribution = {}


class ClientFigures(msgspec.Struct, kw_only=True):
    """The client's own cost and lag over the run (what it measured of itself)."""

    cpu_s: float | None = None
    wall_s: float | None = None
    cpu_utilization: float | None = None
    loop_lag_ms: Distribution = {}
    run_queue_wait_s: float | None = None
    event_loop: str | None = None
    stream_parser: str | None | UnsetType = UNSET
    cpu_us_per_output_token: float | None = None
    send_lag_p99_ms: float | None = None
    warnings: list[str] = []


class ServerFacts(msgspec.Struct, kw_only=True):
    """Whether the server's prefix cache served the run (diagnose's comparability record)."""

    prefix_cache_hit_rate: float | None = None
    warmup_requests: int | None = None
    warm: bool | None = None


class BenchSummary(msgspec.Struct, kw_only=True):
    """``summary.json`` (docs/metrics.md defines every figure): requests, errors, throughput,
    tokens, each latency's distribution in ms, what was measured with which load, and the
    client's own figures."""

    schema_version: int = 1  # rundir.SUMMARY_SCHEMA_VERSION; absent from older files: 1
    requests: RequestCounts
    errors: dict[str, int] = {}
    error_examples: dict[str, str] = {}
    duration_s: Number | None = None
    latency_origin: str | None = None  # sent (closed loop) | scheduled (open loop)
    throughput: Throughput
    tokens: Tokens
    ttft_ms: Distribution = {}
    tpot_ms: Distribution = {}
    itl_ms: Distribution = {}
    e2e_ms: Distribution = {}
    send_lag_ms: Distribution = {}
    percentiles: list[Number] = []
    goodput: Goodput | UnsetType = UNSET
    model: str | None | UnsetType = UNSET
    endpoint: str | None | UnsetType = UNSET
    stream: bool | None | UnsetType = UNSET
    load: LoadShape | UnsetType = UNSET
    workload: dict[str, Any] | UnsetType = UNSET  # what was drawn and how: open
    by_group: dict[str, GroupSummary] | UnsetType = UNSET
    client: ClientFigures | UnsetType = UNSET
    server: ServerFacts | UnsetType = UNSET
    rebuilt: str | UnsetType = UNSET  # why it was rebuilt from requests.jsonl

    def distribution(self, name: str) -> Distribution:
        """A latency's distribution by name (ttft, tpot, itl, e2e, send_lag); {} for another."""
        return {"ttft": self.ttft_ms, "tpot": self.tpot_ms, "itl": self.itl_ms,
                "e2e": self.e2e_ms, "send_lag": self.send_lag_ms}.get(name, {})


def manifest_of(data: Any, where: str = "manifest.json") -> Manifest:
    return _typed(data, Manifest, where)


def summary_of(data: Any, where: str = "summary.json") -> BenchSummary:
    return _typed(data, BenchSummary, where)


def _typed(data: Any, kind: type[T], where: str) -> T:
    """``data`` (a file's JSON) as ``kind``; a ``ConfigError`` in one line naming the file and
    the key that does not fit."""
    try:
        return msgspec.convert(data, kind, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{where}: not a {kind.__name__} latscope wrote ({exc})") from None

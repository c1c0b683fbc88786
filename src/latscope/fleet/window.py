"""A window of a fleet's ``/metrics``, read back from Prometheus, as each replica's snapshots.

``read_window`` asks Prometheus which ``vllm:*`` series the selector matches in the window
(``/api/v1/series``), splits them by the replica label(s) (``instance`` by default: the target
Prometheus scraped), reads every one of them at each step (``/api/v1/query_range`` of the bare
series, one query per metric name: counters, histogram buckets / sum / count, gauges and
``*_info`` series as the replica exposed them) and gives each replica its ``MetricSnapshot``s,
one per step, in the form a direct scrape has: so every window rule latscope has reads a replica
the same way, whether it was scraped by latscope or by Prometheus. ``up`` and
``process_start_time_seconds`` come along: a replica Prometheus stopped reaching, and one that
restarted, are told apart.

Prometheus' own arithmetic over the same window (``increase`` and ``histogram_quantile`` per
replica) is read too, to be set beside latscope's bucket arithmetic (``PromqlFigure``).
"""

from __future__ import annotations

import asyncio
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field

from latscope.errors import ConfigError
from latscope.fleet.prometheus import PrometheusClient, PrometheusError, Series, Session
from latscope.model import MetricSample, MetricSnapshot

DEFAULT_REPLICA_LABELS = ("instance",)
# points per series when the step is chosen here: enough for intervals to bootstrap over, few
# enough that a 50-replica fleet over a day stays a few MB of JSON
TARGET_POINTS = 240
_NICE_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)
# the histograms whose quantiles are cross-checked with Prometheus' histogram_quantile
CHECKED = {"ttft": "vllm:time_to_first_token_seconds", "queue": "vllm:request_queue_time_seconds",
           "itl": "vllm:inter_token_latency_seconds"}
QUANTILES = (0.5, 0.99)
# series read besides vllm:*: whether Prometheus reached the replica, and when it (re)started
EXTRA_SERIES = ("up", "process_start_time_seconds")
_SELECTOR = re.compile(r"\s*\{(.*)\}\s*", re.S)


@dataclass(frozen=True, slots=True)
class WindowSpec:
    start: float  # unix seconds
    end: float
    step: float | None  # None: chosen from the scrape interval and the window
    selector: str = ""  # PromQL label matchers, without braces: job="vllm"
    replica_labels: tuple[str, ...] = DEFAULT_REPLICA_LABELS


@dataclass(slots=True)
class ReplicaWindow:
    """One replica's series over the window."""

    name: str  # its replica label values, joined: "127.0.0.1:8001"
    labels: dict[str, str]  # the replica labels' values
    snapshots: list[MetricSnapshot] = field(default_factory=list)
    up: list[tuple[float, float]] = field(default_factory=list)  # (unix s, 1 scraped / 0 not)
    starts: list[tuple[float, float]] = field(default_factory=list)  # process start time


@dataclass(frozen=True, slots=True)
class PromqlFigure:
    """One figure Prometheus computed over the window for one replica."""

    replica: str
    metric: str  # "ttft" | "queue" | "itl"
    what: str  # "count" | "sum" | "p50" | "p99"
    value: float
    expr: str


@dataclass(slots=True)
class FleetWindow:
    spec: WindowSpec
    step: float
    prometheus: str  # the URL as it may be shown
    replicas: list[ReplicaWindow]
    scrape_interval_s: float | None
    promql: list[PromqlFigure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # one line each: what could not be read
    metric_names: list[str] = field(default_factory=list)


def selector_matchers(text: str | None) -> str:
    """The label matchers of ``--selector`` ('{job="vllm"}' or 'job="vllm"'), without braces;
    a metric name before the braces is refused (the names are latscope's to choose)."""
    text = (text or "").strip()
    if not text:
        return ""
    match = _SELECTOR.fullmatch(text)
    inner = match.group(1) if match else text
    if not match and "{" in text:
        raise ConfigError(f"--selector {text}: give label matchers only, e.g. '{{job=\"vllm\"}}' "
                          "(no metric name)")
    if not re.match(r"\s*[A-Za-z_][A-Za-z0-9_]*\s*(=|!=|=~|!~)", inner) and inner.strip():
        raise ConfigError(f"--selector {text}: not label matchers, e.g. '{{job=\"vllm\"}}'")
    return inner.strip().rstrip(",")


def _select(name_matcher: str, matchers: str) -> str:
    return "{" + ", ".join(m for m in (name_matcher, matchers) if m) + "}"


def read_window(client: PrometheusClient, spec: WindowSpec) -> FleetWindow:
    """The fleet's window from Prometheus (blocking; raises ``PrometheusError`` with one line
    when nothing of the window can be read)."""
    return asyncio.run(_read(client, spec))


async def _read(client: PrometheusClient, spec: WindowSpec) -> FleetWindow:
    async with client.session() as session:
        listed = await session.series(_select('__name__=~"vllm:.+"', spec.selector),
                                      spec.start, spec.end)
        if not listed:
            raise PrometheusError(await _nothing_matched(session, spec))
        by_replica = split_replicas(listed, spec.replica_labels)
        interval = await _scrape_interval(session, spec)
        step = spec.step or choose_step(spec.end - spec.start, interval)
        window = FleetWindow(spec, step, client.shown, [], interval)
        names = sorted({s["__name__"] for s in listed if not s["__name__"].endswith("_created")})
        window.metric_names = names
        unlabelled = sum(1 for s in listed if replica_key(s, spec.replica_labels) is None)
        if unlabelled:
            window.notes.append(f"{unlabelled} of {len(listed)} vllm:* series lack the label "
                                f"{'+'.join(spec.replica_labels)}: left out")
        series = await _range_all(session, spec, step, [*names, *EXTRA_SERIES], window.notes)
        window.replicas = assemble(series, by_replica, spec.replica_labels)
        window.promql = await _promql_figures(session, spec, window.notes)
        window.notes.extend(f"Prometheus warned: {w}" for w in dict.fromkeys(session.warnings))
    return window


async def _nothing_matched(session: Session, spec: WindowSpec) -> str:
    """Why no vllm:* series matched: which jobs Prometheus does scrape, to pick a selector."""
    where = f" {{{spec.selector}}}" if spec.selector else ""
    try:
        jobs = await session.label_values("job")
    except PrometheusError:
        jobs = []
    seen = f"; Prometheus has jobs: {', '.join(jobs[:8])}" if jobs else ""
    return (f"no vllm:* series{where} in the window ({_span(spec)}){seen}: check --selector, "
            "the window, and that Prometheus scrapes the replicas' /metrics")


def _span(spec: WindowSpec) -> str:
    from datetime import datetime, timezone

    def at(t: float) -> str:
        return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")

    return f"{at(spec.start)} to {at(spec.end)} UTC"


def replica_key(labels: dict[str, str], replica_labels: tuple[str, ...]) -> str | None:
    values = [labels.get(name) for name in replica_labels]
    if any(v is None or v == "" for v in values):
        return None
    return "/".join(v for v in values if v is not None)


def split_replicas(listed: list[dict[str, str]], replica_labels: tuple[str, ...]
                   ) -> dict[str, dict[str, str]]:
    """Replica name -> its replica label values, from the series' label sets. Raises when the
    labels do not identify replicas: absent from every series, or shared by series that differ
    in another label (two targets folded into one "replica")."""
    keyed = [(replica_key(s, replica_labels), s) for s in listed]
    if all(k is None for k, _ in keyed):
        seen = sorted({name for s in listed for name in s if name != "__name__"})
        raise ConfigError(f"no vllm:* series has the label {'+'.join(replica_labels)}: it cannot "
                          f"tell replicas apart (labels seen: {', '.join(seen)}): use "
                          "--replica-label")
    probe = "vllm:num_requests_running"
    groups: dict[tuple[str, str], list[dict[str, str]]] = defaultdict(list)
    for key, s in keyed:
        if key is not None and s.get("__name__") == probe:
            groups[(key, s.get("engine", ""))].append(s)
    for (key, _), members in groups.items():
        if len(members) > 1:
            differ = sorted({n for m in members for n in m if n != "__name__"
                             and len({x.get(n) for x in members}) > 1})
            raise ConfigError(f"--replica-label {'+'.join(replica_labels)} does not identify "
                              f"replicas: {len(members)} series of {probe} share "
                              f"{'+'.join(replica_labels)}={key} and differ in "
                              f"{', '.join(differ)}: use --replica-label {differ[0]}")
    return {k: {n: s[n] for n in replica_labels} for k, s in keyed if k is not None}


def choose_step(window_s: float, interval_s: float | None) -> float:
    """A nice step at least the scrape interval (a finer step reads the same sample twice) and
    near ``TARGET_POINTS`` points over the window."""
    want = max(interval_s or 1.0, window_s / TARGET_POINTS, 1.0)
    return float(next((s for s in _NICE_STEPS if s >= want * 0.95), math.ceil(want)))


async def _scrape_interval(session: Session, spec: WindowSpec) -> float | None:
    """Prometheus' scrape interval of these targets: the window over its samples of ``up``."""
    window_s = max(1, int(spec.end - spec.start))
    try:
        up = _select('__name__="up"', spec.selector)
        found = await session.query(f"count_over_time({up}[{window_s}s])", spec.end)
    except PrometheusError:
        return None
    counts = [s.points[0][1] for s in found if s.points and s.points[0][1] > 1]
    # a window of W s holds W / interval samples, give or take one: 45 s of a 1 s interval
    # read 44 samples (1.02 s), which must not become a 2 s step
    return round(window_s / max(counts), 1) if counts else None


async def _range_all(session: Session, spec: WindowSpec, step: float, names: list[str],
                     notes: list[str]) -> list[Series]:
    async def one(name: str) -> list[Series]:
        expr = _select(f'__name__="{name}"', spec.selector)
        try:
            return await session.query_range(expr, spec.start, spec.end, step)
        except PrometheusError as exc:
            notes.append(f"{name}: {exc}")
            return []

    results = await asyncio.gather(*(one(n) for n in names))
    if not any(results[: len(names) - len(EXTRA_SERIES)]):
        raise PrometheusError(notes[0] if notes else "every range query came back empty")
    return [s for found in results for s in found]


def assemble(series: list[Series], replicas: dict[str, dict[str, str]],
             replica_labels: tuple[str, ...]) -> list[ReplicaWindow]:
    """Each replica's snapshots: at every step where it had samples, all of them."""
    by_name = {name: ReplicaWindow(name, labels) for name, labels in sorted(replicas.items())}
    steps: dict[str, dict[float, list[MetricSample]]] = defaultdict(lambda: defaultdict(list))
    for s in series:
        key = replica_key(s.labels, replica_labels)
        if key not in by_name:
            continue
        name = s.labels.get("__name__", "")
        labels = {k: v for k, v in s.labels.items() if k != "__name__"}
        if name == "up":
            by_name[key].up.extend(s.points)
        elif name == "process_start_time_seconds":
            by_name[key].starts.extend(s.points)
        else:
            for t, v in s.points:
                steps[key][t].append(MetricSample(name, labels, v))
    for key, replica in by_name.items():
        replica.up.sort()
        replica.starts.sort()
        replica.snapshots = [MetricSnapshot(t_ns=int(round(t * 1e9)), wall_time=t, samples=samples)
                             for t, samples in sorted(steps[key].items())]
    return list(by_name.values())


async def _promql_figures(session: Session, spec: WindowSpec, notes: list[str]
                          ) -> list[PromqlFigure]:
    """Prometheus' own count, sum and quantiles of the checked histograms over the window."""
    window = f"{max(1, int(round(spec.end - spec.start)))}s"
    by = ", ".join(spec.replica_labels)
    exprs: list[tuple[str, str, str]] = []
    for metric, family in CHECKED.items():
        for what in ("count", "sum"):
            sel = _select(f'__name__="{family}_{what}"', spec.selector)
            exprs.append((metric, what, f"sum by ({by}) (increase({sel}[{window}]))"))
        bucket = _select(f'__name__="{family}_bucket"', spec.selector)
        for q in QUANTILES:
            exprs.append((metric, f"p{q * 100:g}", f"histogram_quantile({q:g}, sum by (le, {by}) "
                                                   f"(increase({bucket}[{window}])))"))

    async def one(metric: str, what: str, expr: str) -> list[PromqlFigure]:
        try:
            found = await session.query(expr, spec.end)
        except PrometheusError as exc:
            notes.append(f"Prometheus' {what} of {metric}: {exc}")
            return []
        return [PromqlFigure(key, metric, what, s.points[0][1], expr) for s in found
                if s.points and (key := replica_key(s.labels, spec.replica_labels))]

    results = await asyncio.gather(*(one(*e) for e in exprs))
    return [f for found in results for f in found]

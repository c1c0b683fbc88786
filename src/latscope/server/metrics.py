"""Prometheus ``/metrics`` pages of vLLM (and any server), parsed and turned into numbers over a window.

``parse_metrics_text`` parses one exposition page with ``prometheus_client``'s own text parser and
maps vLLM's renamed series to today's names (``gpu_cache_usage_perc`` -> ``kv_cache_usage_perc``,
``time_per_output_token_seconds`` -> ``inter_token_latency_seconds``, ...; see vLLM's
``docs/design/metrics.md`` and ``vllm/v1/metrics/loggers.py``) so that the rest of latscope reads
one vocabulary whatever
the server version. The window functions take two ``MetricSnapshot``s (first and last scrape of a
run) and give counter deltas as rates, histogram deltas as a mean (from ``_sum``/``_count``) and
quantiles interpolated inside the ``le`` buckets read from the page -- never hard-coded -- with the
width of the bucket that holds the quantile as its error bound, and gauges as time series.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from prometheus_client.parser import text_string_to_metric_families

from latscope.errors import ScrapeError
from latscope.model import MetricSample, MetricSnapshot

VLLM_PREFIX = "vllm:"

# Old vLLM series name -> current one (sample names, i.e. with _total/_bucket/_sum/_count).
# Source: vllm/v1/metrics/loggers.py of vLLM 0.10-0.33 (deprecated 0.9/0.11, hidden 0.11-0.13,
# gone by 0.13/0.20): https://github.com/vllm-project/vllm/blob/main/vllm/v1/metrics/loggers.py
_FAMILY_RENAMES = {
    "vllm:gpu_cache_usage_perc": "vllm:kv_cache_usage_perc",
    "vllm:gpu_prefix_cache_queries": "vllm:prefix_cache_queries",
    "vllm:gpu_prefix_cache_hits": "vllm:prefix_cache_hits",
    "vllm:time_per_output_token_seconds": "vllm:inter_token_latency_seconds",
}
_SUFFIXES = ("", "_total", "_bucket", "_sum", "_count")
RENAMES = {old + s: new + s for old, new in _FAMILY_RENAMES.items() for s in _SUFFIXES}


def canonical_name(name: str) -> str:
    """The current vLLM name for a (possibly old) sample name; other names unchanged."""
    return RENAMES.get(name, name)


@dataclass(slots=True)
class MetricFamily:
    name: str  # family name as prometheus_client reports it (counters lose "_total")
    type: str  # counter | gauge | histogram | summary | info | unknown ...
    help: str
    samples: list[MetricSample] = field(default_factory=list)


@dataclass(slots=True)
class MetricsPage:
    """One parsed ``/metrics`` page, with vLLM's renamed series under their current names."""

    families: dict[str, MetricFamily]
    renamed: dict[str, str] = field(default_factory=dict)  # old sample name -> name used

    @property
    def samples(self) -> list[MetricSample]:
        return [s for fam in self.families.values() for s in fam.samples]

    @property
    def has_vllm(self) -> bool:
        """False for a server started with ``--disable-log-stats`` (no ``vllm:*`` series at all)."""
        return any(name.startswith(VLLM_PREFIX) for name in self.families)

    def get(self, sample_name: str, **labels: str) -> list[MetricSample]:
        """Samples called ``sample_name`` (current name) whose labels include ``labels``."""
        name = canonical_name(sample_name)
        return [s for fam in self.families.values() for s in fam.samples
                if s.name == name and _labels_match(s.labels, labels)]

    def value(self, sample_name: str, **labels: str) -> float | None:
        """Sum over the matching series (e.g. over engines), or None when there is none."""
        found = self.get(sample_name, **labels)
        return sum(s.value for s in found) if found else None


def _labels_match(have: dict[str, str], want: dict[str, str]) -> bool:
    return all(have.get(k) == v for k, v in want.items())


def parse_metrics_text(text: str, *, keep_created: bool = False) -> MetricsPage:
    """Parse a Prometheus text page. ``*_created`` timestamps are dropped unless asked for.

    When a server exposes a series under both its old and new name (vLLM 0.9-0.10 did, for
    deprecation), the new one wins and the old one is dropped, so sums never count it twice.
    """
    try:
        parsed = list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError) as exc:
        raise ScrapeError(f"not a Prometheus text page: {exc}") from exc
    present = {s.name for fam in parsed for s in fam.samples}
    families: dict[str, MetricFamily] = {}
    renamed: dict[str, str] = {}
    for fam in parsed:
        if not keep_created and fam.name.endswith("_created"):
            continue
        fam_name = _FAMILY_RENAMES.get(fam.name, fam.name)
        out = families.setdefault(fam_name, MetricFamily(fam_name, fam.type, fam.documentation))
        for s in fam.samples:
            if not keep_created and s.name.endswith("_created"):
                continue
            name = canonical_name(s.name)
            if name != s.name:
                if name in present:
                    continue  # the server also exposes the new name: use that one only
                renamed[s.name] = name
            out.samples.append(MetricSample(name, dict(s.labels), float(s.value)))
    return MetricsPage(families=families, renamed=renamed)


# --------------------------------------------------------------------------------------------
# Reading snapshots: a small index so that window functions stay cheap.

LabelFilter = dict[str, str]


def _series(snapshot: MetricSnapshot, name: str, match: LabelFilter | None) -> list[MetricSample]:
    name = canonical_name(name)
    return [s for s in snapshot.samples
            if s.name == name and _labels_match(s.labels, match or {})]


def snapshot_value(snapshot: MetricSnapshot, name: str, match: LabelFilter | None = None
                   ) -> float | None:
    """Sum of the matching series in one snapshot (None when absent)."""
    found = _series(snapshot, name, match)
    return sum(s.value for s in found) if found else None


def has_vllm_series(snapshot: MetricSnapshot) -> bool:
    return any(s.name.startswith(VLLM_PREFIX) for s in snapshot.samples)


@dataclass(slots=True)
class CounterDelta:
    name: str
    delta: float
    dt_s: float
    reset: bool  # the counter went down (server restart): delta counts from zero

    @property
    def rate_per_s(self) -> float | None:
        return self.delta / self.dt_s if self.dt_s > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "delta": self.delta, "dt_s": self.dt_s,
                "rate_per_s": self.rate_per_s, "reset": self.reset}


def counter_delta(first: MetricSnapshot | None, last: MetricSnapshot, name: str,
                  match: LabelFilter | None = None) -> CounterDelta | None:
    """Increase of a counter (summed over matching series) from ``first`` to ``last``.

    With ``first`` None the value since server start is returned (dt 0, so no rate).
    A decrease means the server restarted; as Prometheus' ``increase`` does, the later value
    is then taken as the increase.
    """
    end = snapshot_value(last, name, match)
    if end is None:
        return None
    start = snapshot_value(first, name, match) if first is not None else 0.0
    start = start or 0.0
    dt_s = (last.t_ns - first.t_ns) / 1e9 if first is not None else 0.0
    if end < start:
        return CounterDelta(canonical_name(name), end, dt_s, reset=True)
    return CounterDelta(canonical_name(name), end - start, dt_s, reset=False)


@dataclass(slots=True)
class QuantileEstimate:
    """A quantile read from histogram buckets: linear inside the bucket that holds it.

    The true value lies in [lower, upper]; ``error_bound_s`` = upper - lower is the most the
    estimate can be off. ``upper`` is inf when the quantile falls above the top finite bucket:
    ``value`` is then only a lower bound.
    """

    q: float
    value: float
    lower: float
    upper: float

    @property
    def error_bound(self) -> float:
        return self.upper - self.lower

    @property
    def above_top_bucket(self) -> bool:
        return math.isinf(self.upper)

    def to_dict(self) -> dict[str, Any]:
        return {"q": self.q, "value": self.value, "bucket_lower": self.lower,
                "bucket_upper": None if math.isinf(self.upper) else self.upper,
                "error_bound": None if math.isinf(self.upper) else self.error_bound,
                "above_top_bucket": self.above_top_bucket}


@dataclass(slots=True)
class HistogramDelta:
    """Observations of one histogram between two scrapes (summed over matching series)."""

    name: str  # family name, e.g. "vllm:request_queue_time_seconds"
    count: float
    sum: float
    buckets: list[tuple[float, float]]  # (le, cumulative count), ascending, +Inf last
    dt_s: float
    since_start: bool = False  # no first snapshot: everything since server start
    reset: bool = False

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None

    def quantile(self, q: float) -> QuantileEstimate | None:
        return bucket_quantile(self.buckets, q)

    def to_dict(self, quantiles: Iterable[float] = (0.5, 0.9, 0.99)) -> dict[str, Any]:
        qs = {f"p{_pct(q)}": (est.to_dict() if (est := self.quantile(q)) else None)
              for q in quantiles}
        return {"name": self.name, "count": self.count, "sum": self.sum, "mean": self.mean,
                "dt_s": self.dt_s, "since_server_start": self.since_start, "reset": self.reset,
                "quantiles": qs, "buckets": [[_le_json(le), c] for le, c in self.buckets]}


def _pct(q: float) -> str:
    return f"{q * 100:g}".replace(".", "_")


def _le_json(le: float) -> float | str:
    return "+Inf" if math.isinf(le) else le


def bucket_quantile(buckets: list[tuple[float, float]], q: float) -> QuantileEstimate | None:
    """Prometheus ``histogram_quantile`` semantics on cumulative (le, count) pairs.

    The lower edge of the first bucket is 0 (the histograms read here are of non-negative
    durations and sizes), as in Prometheus.
    """
    if not buckets or not 0.0 <= q <= 1.0:
        return None
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    prev_le, prev_count = 0.0, 0.0
    for i, (le, count) in enumerate(buckets):
        if count >= rank and count > prev_count:
            if math.isinf(le):
                return QuantileEstimate(q, prev_le, prev_le, math.inf)
            if i == 0 and le <= 0:  # Prometheus: no lower edge below a non-positive first bucket
                return QuantileEstimate(q, le, le, le)
            frac = (rank - prev_count) / (count - prev_count)
            return QuantileEstimate(q, prev_le + (le - prev_le) * frac, prev_le, le)
        prev_le, prev_count = le, count
    return None


def _bucket_counts(snapshot: MetricSnapshot, family: str, match: LabelFilter | None
                   ) -> dict[float, float]:
    counts: dict[float, float] = defaultdict(float)
    for s in _series(snapshot, family + "_bucket", match):
        counts[float(s.labels.get("le", "+Inf"))] += s.value
    return counts


def histogram_delta(first: MetricSnapshot | None, last: MetricSnapshot, family: str,
                    match: LabelFilter | None = None) -> HistogramDelta | None:
    """Observations of histogram ``family`` between two snapshots; None if the server lacks it.

    Bucket edges come from the ``le`` labels of the page. Series are summed across labels not in
    ``match`` (e.g. several engines), which is exact for counts and sums.
    """
    family = canonical_name(family)
    end_counts = _bucket_counts(last, family, match)
    end_sum = snapshot_value(last, family + "_sum", match)
    end_count = snapshot_value(last, family + "_count", match)
    if not end_counts or end_sum is None or end_count is None:
        return None
    if first is None:
        start_counts: dict[float, float] = {}
        start_sum = start_count = 0.0
        dt_s = 0.0
    else:
        start_counts = _bucket_counts(first, family, match)
        start_sum = snapshot_value(first, family + "_sum", match) or 0.0
        start_count = snapshot_value(first, family + "_count", match) or 0.0
        dt_s = (last.t_ns - first.t_ns) / 1e9
    reset = end_count < start_count
    if reset:  # server restarted between the scrapes: count from zero
        start_counts, start_sum, start_count = {}, 0.0, 0.0
    buckets = [(le, end_counts[le] - start_counts.get(le, 0.0)) for le in sorted(end_counts)]
    return HistogramDelta(family, end_count - start_count, end_sum - start_sum, buckets, dt_s,
                          since_start=first is None, reset=reset)


def gauge_series(snapshots: list[MetricSnapshot], name: str, match: LabelFilter | None = None,
                 *, combine: Callable[[list[float]], float] = sum,
                 origin_ns: int = 0) -> list[tuple[float, float]]:
    """``(t_s, value)`` per snapshot that has the gauge; t_s is seconds after ``origin_ns``.

    ``combine`` folds several matching series (e.g. engines): ``sum`` for request counts,
    ``max`` for KV cache usage (the fullest engine is the one that preempts).
    """
    points = []
    for snap in snapshots:
        values = [s.value for s in _series(snap, name, match)]
        if values:
            points.append(((snap.t_ns - origin_ns) / 1e9, float(combine(values))))
    return points


def label_values(snapshots: list[MetricSnapshot], name: str, label: str) -> list[str]:
    """Every value a label takes for series ``name`` across the snapshots, sorted."""
    name = canonical_name(name)
    return sorted({s.labels[label] for snap in snapshots for s in snap.samples
                   if s.name == name and label in s.labels})

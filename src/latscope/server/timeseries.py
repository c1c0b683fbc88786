"""The server's state over a run, on the client's timeline: gauges per scrape, counters and
histogram means per scrape interval.

Times are seconds after ``origin_ns`` (the run's ``start_ns`` from ``manifest.json``), so a point
lines up with the requests of the same run. Gauges are instantaneous values at the scrape;
``*_per_s`` are counter increases over the interval ending at that scrape divided by its length;
``*_mean_s`` are histogram ``_sum``/``_count`` deltas over that interval (requests that finished
in it), absent when none did.
"""

from __future__ import annotations

from typing import Any, Callable

from latscope.model import MetricSnapshot
from latscope.server.metrics import counter_delta, histogram_delta, label_values, snapshot_value

GAUGES: dict[str, tuple[str, Callable[[list[float]], float]]] = {
    # key -> (series, how several engines combine)
    "running": ("vllm:num_requests_running", sum),
    "waiting": ("vllm:num_requests_waiting", sum),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", max),
}
COUNTERS = {
    "prompt_tokens_per_s": "vllm:prompt_tokens_total",
    "generation_tokens_per_s": "vllm:generation_tokens_total",
    "requests_finished_per_s": "vllm:request_success_total",
    "preemptions_per_s": "vllm:num_preemptions_total",
}
HISTOGRAM_MEANS = {
    "queue_mean_s": "vllm:request_queue_time_seconds",
    "ttft_mean_s": "vllm:time_to_first_token_seconds",
    "prefill_mean_s": "vllm:request_prefill_time_seconds",
}


def server_timeseries(snapshots: list[MetricSnapshot], origin_ns: int) -> dict[str, Any]:
    reasons = label_values(snapshots, "vllm:num_requests_waiting_by_reason", "reason")
    points = []
    prev: MetricSnapshot | None = None
    for snap in snapshots:
        point: dict[str, Any] = {"t_s": (snap.t_ns - origin_ns) / 1e9, "wall_time": snap.wall_time}
        for key, (name, combine) in GAUGES.items():
            values = [s.value for s in snap.samples if s.name == name]
            point[key] = float(combine(values)) if values else None
        for reason in reasons:
            point[f"waiting_{reason}"] = snapshot_value(
                snap, "vllm:num_requests_waiting_by_reason", {"reason": reason})
        if prev is not None:
            for key, name in COUNTERS.items():
                delta = counter_delta(prev, snap, name)
                point[key] = delta.rate_per_s if delta is not None else None
            for key, name in HISTOGRAM_MEANS.items():
                hist = histogram_delta(prev, snap, name)
                point[key] = hist.mean if hist is not None else None
        points.append(point)
        prev = snap
    return {"origin": "run start_ns (manifest.json)", "points": points}

"""Run directories with a known truth for ``latscope compare``'s tests, written by latscope's own
writer (``RunWriter``, ``record_line``) in the layout ``latscope bench`` leaves: manifest.json
(its config), requests.jsonl, summary.json (tokens, client, prefix-cache hit rate),
decomposition.json (the TTFT / E2E parts) and metrics/snapshots.jsonl (the server's gauges).

A closed loop of ``concurrency`` slots: each request's TTFT is drawn lognormal around
``ttft_ms`` (queue + prefill + other, in the proportions given), then ``output_tokens`` chunks
``itl_ms`` apart; the next request of its slot is sent when it ends.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from latscope.model import MetricSample, MetricSnapshot, RequestRecord
from latscope.rundir import RunWriter, write_json

_MS = 1_000_000


def write_run(path: Path, *, n: int = 200, concurrency: int = 4, ttft_ms: float = 50.0,
              itl_ms: float = 5.0, output_tokens: int = 16, seed: int = 0,
              queue_share: float = 0.1, running: float = 4, waiting: float = 0,
              config: dict[str, Any] | None = None, hit_rate: float | None = 0.0,
              fail_every: int = 0, warmup: int = 0, client: dict[str, Any] | None = None,
              gpu: str | None = None, prompt_range: tuple[int, int] = (128, 128),
              rate: float | None = None) -> Path:
    """A bench run directory of ``n`` measured requests (and ``warmup`` before them)."""
    rng = np.random.default_rng(seed)
    path.mkdir(parents=True, exist_ok=True)
    writer = RunWriter(path)
    cfg = {"url": "http://127.0.0.1:8000", "endpoint": "completions", "stream": True,
           "workload": {"input_len": "128", "output_len": str(output_tokens), "mix": [],
                        "dataset": None, "prefix_len": 0, "prefix_fraction": 0.0,
                        "ignore_eos": True},
           "concurrency": None if rate else concurrency, "rate": rate, "burstiness": 1.0,
           "num_requests": n,
           "duration_s": None, "warmup": warmup, "seed": seed, "slo": None}
    for key, value in (config or {}).items():
        if key in cfg["workload"]:
            cfg["workload"][key] = value
        else:
            cfg[key] = value
    writer.write_manifest({"kind": "bench", "config": cfg, "model": "tiny-llama",
                           "versions": {"latscope": "0.1.0"},
                           "host": {"hostname": "box", "cpus": 2, "platform": "Linux"},
                           "start_ns": 0})
    slots = [10 * _MS] * concurrency
    arrivals = 10 * _MS + np.cumsum(rng.exponential(1e9 / rate, n + warmup)).astype(np.int64) \
        if rate else None  # an open loop: Poisson arrivals, each sent when it is due
    ttfts, e2es = [], []
    for i in range(n + warmup):
        slot = int(np.argmin(slots))
        sent = int(arrivals[i]) if arrivals is not None else slots[slot]
        ttft = ttft_ms * rng.lognormal(0, 0.25)
        first = sent + int(ttft * _MS)
        chunks = [first + int(k * itl_ms * rng.uniform(0.9, 1.1) * _MS)
                  for k in range(output_tokens)]
        failed = fail_every and (i + 1) % fail_every == 0
        record = RequestRecord(
            index=i, request_id=f"r{i}", scheduled_ns=sent, sent_ns=sent,
            headers_ns=sent + _MS, first_token_ns=None if failed else first,
            end_ns=None if failed else chunks[-1] + _MS,
            chunk_ns=[] if failed else chunks,
            prompt_tokens=int(rng.integers(prompt_range[0], prompt_range[1] + 1)),
            output_tokens=None if failed else output_tokens,
            output_tokens_source="usage", status=500 if failed else 200,
            error_kind="http_5xx" if failed else None, error="boom" if failed else None,
            warmup=i < warmup, open_loop=rate is not None)
        writer.append(record)
        slots[slot] = (record.end_ns or sent + 20 * _MS) + _MS // 10
        if not record.warmup and not failed:
            ttfts.append(ttft)
            e2es.append((chunks[-1] + _MS - sent) / _MS)
    writer.close()
    done = len(ttfts)
    span_s = (max(slots) - 10 * _MS) / 1e9  # the run's first send to its last end
    rate_s = done / span_s if span_s > 0 else None
    write_json(path / "summary.json", {
        "requests": {"total": n, "completed": done, "failed": n - done},
        "throughput": {"requests_per_s": rate_s, "output_tokens_per_s": None,
                       "total_tokens_per_s": None, "window_s": span_s,
                       "window": "first send to last end (with the drain)"},
        "tokens": {"input_total": 128 * done, "output_total": output_tokens * done},
        "ttft_ms": {"p50": float(np.median(ttfts))},
        "client": client or {"cpu_utilization": 0.05, "loop_lag_ms": {"mean": 0.1, "p99": 0.5},
                             "send_lag_p99_ms": 0.05},
        "server": {"prefix_cache_hit_rate": hit_rate, "warm": bool(warmup)}})
    _decomposition(path, float(np.mean(ttfts)), float(np.mean(e2es)), queue_share)
    _snapshots(path, running, waiting)
    if gpu:
        (path / "telemetry").mkdir(exist_ok=True)
        write_json(path / "telemetry" / "telemetry.json",
                   {"status": "ok", "devices": [{"index": 0, "name": gpu}]})
    return path


def _decomposition(path: Path, ttft: float, e2e: float, queue_share: float) -> None:
    server = ttft * 0.95
    queue = server * queue_share
    prefill = (server - queue) * 0.8
    rows = [("ttft", "TTFT (client)", None, ttft), ("ttft.client", "latscope client", "ttft", 0.1),
            ("ttft.frontend", "network + HTTP frontend (not split: no round-trip probe)",
             "ttft", ttft - server - 0.1),
            ("ttft.server", "server TTFT", "ttft", server),
            ("ttft.server.queue", "queue (QUEUED -> SCHEDULED)", "ttft.server", queue),
            ("ttft.server.prefill", "prefill (SCHEDULED -> first token)", "ttft.server",
             prefill),
            ("ttft.server.other", "tokenization + IPC + output processing", "ttft.server",
             server - queue - prefill),
            ("e2e", "E2E (client)", None, e2e), ("e2e.ttft", "TTFT (client)", "e2e", ttft),
            ("e2e.decode", "decode (client: first chunk -> end)", "e2e", e2e - ttft)]
    write_json(path / "decomposition.json", {"components": [
        {"key": k, "label": label, "parent": parent, "source": "synthetic", "mean_ms": v}
        for k, label, parent, v in rows], "dominant_ttft": "ttft.server.prefill",
        "dominant_e2e": "e2e.decode", "window_s": None, "server_source": "synthetic",
        "client_requests": 0, "server_requests": None})


def _snapshots(path: Path, running: float, waiting: float) -> None:
    (path / "metrics").mkdir(exist_ok=True)
    lines = []
    for t in range(4):
        samples = [MetricSample("vllm:num_requests_running", {"engine": "0"}, running),
                   MetricSample("vllm:num_requests_waiting", {"engine": "0"}, waiting),
                   MetricSample("vllm:kv_cache_usage_perc", {"engine": "0"}, 0.1),
                   MetricSample("vllm:num_preemptions_total", {"engine": "0"}, 0.0)]
        lines.append(MetricSnapshot(t_ns=t * 1_000 * _MS, wall_time=1.0e9 + t,
                                    samples=samples).to_dict())
    import orjson

    (path / "metrics" / "snapshots.jsonl").write_bytes(
        b"".join(orjson.dumps(line) + b"\n" for line in lines))

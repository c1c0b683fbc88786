"""Report dicts in the report.json schema (docs/report.md), built the way `latscope diagnose`
fills them. Used by tests/unit/report and the browser test (tests/integration)."""

from __future__ import annotations

from typing import Any

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'
LONG_KERNEL = ("void at::native::vectorized_elementwise_kernel<4, at::native::"
               "BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, "
               "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >"
               "(int, at::native::BinaryFunctor<c10::BFloat16>, std::array<char*, 3ul>)")


def _components(ttft: float, send_lag: float, network: float, queue: float, prefill: float,
                other: float, e2e: float) -> list[dict[str, Any]]:
    server = queue + prefill + other
    rows = [("ttft", "TTFT (client)", None, ttft, "client records: first chunk - scheduled"),
            ("ttft.send_lag", "client send lag", "ttft", send_lag, "client records"),
            ("ttft.network", "network + HTTP frontend + client", "ttft", network,
             "difference of means"),
            ("ttft.server", "server TTFT (arrival -> first token)", "ttft", server,
             "vllm:time_to_first_token_seconds"),
            ("ttft.server.queue", "queue (QUEUED -> SCHEDULED)", "ttft.server", queue,
             "vllm:request_queue_time_seconds"),
            ("ttft.server.prefill", "prefill (SCHEDULED -> first token)", "ttft.server", prefill,
             "vllm:request_prefill_time_seconds"),
            ("ttft.server.other", "tokenization + IPC + output processing", "ttft.server", other,
             "difference of means"),
            ("e2e", "E2E (client)", None, e2e, "client records"),
            ("e2e.ttft", "TTFT (client)", "e2e", ttft, "client records"),
            ("e2e.decode", "decode (client: first chunk -> end)", "e2e", e2e - ttft,
             "client records")]
    return [{"key": k, "label": label, "parent": parent, "mean_ms": v,
             "share": v / (e2e if k.startswith("e2e") else ttft), "source": src, "note": ""}
            for k, label, parent, v, src in rows]


def full_report() -> dict[str, Any]:
    loads = [1, 2, 4, 8, 16, 32]
    points = []
    for c in loads:
        queue = max(0.0, (c - 2) * 31.0)
        points.append({"load": c, "throughput_rps": min(c, 2.2) * 1.9,
                       "output_tok_s": min(c, 2.2) * 120.0,
                       "ttft_p50_ms": 40.0 + queue, "ttft_p99_ms": 55.0 + queue * 1.4,
                       "e2e_p50_ms": 600.0 + queue, "e2e_p99_ms": 700.0 + queue * 1.4,
                       "itl_p50_ms": 9.0 + c * 0.1, "errors": 1 if c == 32 else 0,
                       "prefix_cache_hit_rate": 0.0, "warm": True, "run_dir": None})
    return {
        "schema_version": 1,
        "kind": "diagnose",
        "latscope_version": "0.1.0",
        "created": "2026-12-01T09:12:03Z",
        "command": "latscope diagnose --url http://127.0.0.1:8000 --budget 6m",
        "target": {"url": "http://127.0.0.1:8000", "local": True, "model": "tiny-llama",
                   "server": "vLLM 0.32.0 (cpu)", "same_host": True},
        "verdict": {"text": "At the knee (c=16), 81% of mean TTFT is queueing: max_num_seqs=2 "
                            "caps running sequences at 2",
                    "finding_id": "server.queue_max_num_seqs", "healthy": False,
                    "severity": "critical", "share": 0.81, "target": "ttft_mean",
                    "measured_at": "knee (c=16)"},
        "findings": [
            {"id": "server.queue_max_num_seqs", "severity": "critical",
             "title": "Requests wait in the queue: max_num_seqs=2 caps running sequences",
             "layer": "queue",
             "why": "Only 2 sequences run at once; the others wait for a free slot, and their "
                    "wait is part of TTFT.",
             "fix": "Raise --max-num-seqs (e.g. 16) if KV cache allows; check with an A/B.",
             "reference": "https://docs.vllm.ai/en/latest/configuration/optimization.html",
             "evidence": [{"name": "vllm:num_requests_waiting", "value": 14, "unit": "reqs",
                           "source": "/metrics at 12.0 s"},
                          {"name": "max_num_seqs", "value": 2, "unit": "",
                           "source": "server log line 42"}],
             "impact": {"target": "ttft_mean", "share": 0.81, "value_ms": 512.0,
                        "measured_at": "knee (c=16)"}, "role": "cause"},
            {"id": "trace.gpu_idle", "severity": "warning",
             "title": "The GPU is idle 86% of the trace window", "layer": "gpu",
             "why": "Kernels wait for the host to launch them.", "fix": "Enable CUDA graphs.",
             "reference": "docs/trace.md",
             "evidence": [{"name": "idle share", "value": 0.86, "unit": "",
                           "source": "rank0.pt.trace.json.gz"}],
             "impact": None, "role": "cause"},
            {"id": "host.numa_balancing", "severity": "info",
             "title": "NUMA balancing is on", "layer": "host", "why": "Page migrations.",
             "fix": "sysctl kernel.numa_balancing=0", "reference": "docs/doctor.md",
             "evidence": [{"name": "/proc/sys/kernel/numa_balancing", "value": 1, "unit": "",
                           "source": "/proc/sys/kernel/numa_balancing"}], "impact": None,
             "role": "cause"},
            {"id": "host.cpu_governor", "severity": "ok", "title": "CPU governor: performance",
             "layer": "host", "why": "", "fix": "", "reference": "", "evidence": [],
             "impact": None, "role": "cause"},
            {"id": "gpu.clocks", "severity": "skipped", "title": "no GPU on this host",
             "layer": "gpu", "why": "", "fix": "", "reference": "", "evidence": [],
             "impact": None, "role": "cause"},
        ],
        "stages": [{"name": "doctor", "status": "ok", "seconds": 3.2, "note": ""},
                   {"name": "sweep", "status": "cut", "seconds": 240.0,
                    "note": "budget: stopped after 6 steps"},
                   {"name": "trace", "status": "ok", "seconds": 30.5, "note": ""},
                   {"name": "tune", "status": "ok", "seconds": 95.0, "note": ""}],
        "client": {"reliable": True, "why": "", "send_lag_p99_ms": 1.1, "loop_lag_p99_ms": 3.0,
                   "cpu_per_token_us": 20.0},
        "sweep": {"load_kind": "concurrency", "points": points,
                  "knee": {"load": 16, "confidence": "high"},
                  "recommended": {"load": 14, "why": "10% left of the knee"},
                  "cut": "budget: stopped after 6 steps"},
        "decompositions": [
            {"label": "light (c=1)", "load": 1,
             "components": _components(41.0, 0.4, 2.0, 0.1, 30.0, 8.5, 610.0),
             "server_source": "metrics", "notes": [], "client_reliable": True},
            {"label": "knee (c=16)", "load": 16,
             "components": _components(632.0, 1.1, 3.0, 512.0, 92.0, 23.9, 1190.0),
             "server_source": "metrics", "notes": [], "client_reliable": True}],
        "timeseries": {"t_s": [0, 2, 4, 6, 8, 10, 12],
                       "running": [1, 2, 2, 2, 2, 2, 2], "waiting": [0, 0, 2, 6, 14, 14, 13],
                       "kv_usage": [0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.06],
                       "preemptions": [0, 0, 0, 0, 1, 1, 2],
                       "client_in_flight": [1, 2, 4, 8, 16, 16, 15],
                       "load_level": [1, 2, 4, 8, 16, 16, 16]},
        "trace": {"source": "rank0.pt.trace.json.gz", "device": 0, "window_ms": 84.5,
                  "breakdown": {"compute": 0.12, "exposed_comm": 0.0, "exposed_copy": 0.02,
                                "idle": 0.86},
                  "categories": [{"name": "gemm", "ms": 5.1, "share": 0.5},
                                 {"name": "attention", "ms": 3.0, "share": 0.3},
                                 {"name": "elementwise", "ms": 2.0, "share": 0.2}],
                  "top_kernels": [{"name": "nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopA_NNT",
                                   "ms": 2.0, "count": 10, "share": 0.2, "category": "gemm"},
                                  {"name": LONG_KERNEL, "ms": 1.2, "count": 96, "share": 0.12,
                                   "category": "elementwise"}]},
        "cross_rank": None,
        "telemetry": None,
        "experiments": [
            {"finding_id": "server.queue_max_num_seqs", "change": "--max-num-seqs 16 (was 2)",
             "metric": "ttft_mean_ms", "load": 16, "arms": ["A", "B", "A", "B", "A", "B"],
             "a_values": [510.0, 498.0, 505.0], "b_values": [60.0, 58.0, 61.0],
             "a_mean": 504.3, "b_mean": 59.7, "change_pct": -88.2, "ci95_pct": [-90.1, -86.0],
             "helped": True, "verdict": "better", "warmup_excluded": True,
             "prefix_cache_hit_rate": {"A": [0.0, 0.0, 0.0], "B": [0.0, 0.0, 0.0]},
             "run_dirs": [], "note": ""},
            {"finding_id": "trace.gpu_idle", "change": "--enable-chunked-prefill",
             "metric": "ttft_mean_ms", "load": 16, "arms": ["A", "B", "A", "B"],
             "a_values": [60.0, 58.0], "b_values": [59.0, 61.0], "a_mean": 59.0, "b_mean": 60.0,
             "change_pct": 1.7, "ci95_pct": [-4.2, 7.5], "helped": False,
             "verdict": "no significant difference",
             "warmup_excluded": True,
             "prefix_cache_hit_rate": {"A": [0.0, 0.0], "B": [0.0, 0.0]},
             "run_dirs": [], "note": "the interval includes 0"}],
        "proposals": [{"finding_id": "host.numa_balancing",
                       "change": "kernel.numa_balancing=0", "why": "page migrations",
                       "note": "not measured: needs root",
                       "command": "sudo sysctl kernel.numa_balancing=0 && latscope diagnose "
                                  "--url http://127.0.0.1:8000"}],
        "notes": ["budget 6 min: sweep stopped at c=32", "trace taken at c=16"],
        "elapsed_s": 372.0,
        "run_dir": "/tmp/latscope-runs/diagnose-20261201-091203",
    }


def bare_report() -> dict[str, Any]:
    """Only what diagnose always has: no sweep, trace, time series, experiments or proposals."""
    r = full_report()
    for key in ("sweep", "timeseries", "trace"):
        r[key] = None
    for key in ("decompositions", "experiments", "proposals", "notes"):
        r[key] = []
    return r


def healthy_report() -> dict[str, Any]:
    r = full_report()
    r["verdict"] = {"text": "Healthy: no layer explains more than 10% of TTFT at the knee",
                    "finding_id": None, "healthy": True, "share": None, "target": None,
                    "measured_at": None}
    r["findings"] = [f for f in r["findings"] if f["severity"] in ("ok", "skipped")]
    r["experiments"] = []
    return r


def hostile_report() -> dict[str, Any]:
    """Text from logs and servers carrying markup: it must come out as text."""
    r = full_report()
    r["findings"][0]["title"] = HOSTILE
    r["findings"][0]["evidence"][0]["source"] = HOSTILE
    r["findings"][1]["reference"] = "javascript:alert(1)"
    r["trace"]["categories"][0]["name"] = HOSTILE
    r["trace"]["top_kernels"][0]["name"] = HOSTILE
    r["experiments"][0]["change"] = HOSTILE
    r["decompositions"][0]["label"] = HOSTILE
    r["notes"].append(HOSTILE)
    r["target"]["model"] = HOSTILE
    return r


def unreliable_client_report() -> dict[str, Any]:
    r = full_report()
    r["client"] = {"reliable": False, "why": "event-loop lag p99 182 ms",
                   "send_lag_p99_ms": 40.1, "loop_lag_p99_ms": 182.0, "cpu_per_token_us": 20.0}
    return r


def typed(report: dict[str, Any]) -> Any:
    """A sample as the renderers take it (``report.model.Report``), converted as
    ``report.write`` converts a report.json."""
    from latscope.report.write import typed_report

    return typed_report(report)

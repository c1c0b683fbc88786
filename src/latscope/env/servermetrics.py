"""Checks on one ``/metrics`` page (vllm-facts.md section 6, items 2, 3, 5, 6, 15): stats disabled,
KV-cache config, preemptions, KV usage now, prefix-cache hit rate, and the TTFT decomposition
from the ``_sum``/``_count`` of the TTFT, queue and prefill histograms.

The page is cumulative since the server started, so every figure here is a mean over all requests
it has served (the evidence says so); per-run windows are ``bench``'s job (first/last scrape).
Decomposition (vllm-facts.md section 1, "diagnostic identity"):
frontend = mean TTFT - mean queue time - mean prefill time (tokenization, IPC, detokenizing).
"""

from __future__ import annotations

from latscope.env.facts import Facts, ev, skipped
from latscope.model import Finding, Severity

FACTS = "vllm-facts.md"
# A part of TTFT above this share is where the time goes: worth its own finding.
DOMINANT_SHARE = 0.5


def check_metrics(facts: Facts) -> list[Finding]:
    s = facts.server
    if not s.url:
        return [skipped("server.metrics", "no --url given", "config")]
    if s.metrics_text is None:
        return [skipped("server.metrics", f"/metrics not readable ({s.metrics_error})", "config")]
    from latscope.errors import ScrapeError
    from latscope.server.metrics import parse_metrics_text
    source = f"{s.url.rstrip('/')}/metrics"
    try:
        page = parse_metrics_text(s.metrics_text)
    except ScrapeError as exc:
        return [skipped("server.metrics", f"/metrics unparsable: {exc}", "config")]
    if not page.has_vllm:
        return [Finding(
            "server.stats_disabled", Severity.WARNING, "no vllm:* metrics (--disable-log-stats?)",
            [ev("vllm:* series", 0, source)],
            why="Without them queue, prefill and KV-cache time cannot be separated from the outside.",
            fix="drop --disable-log-stats", reference=f"{FACTS} section 1", layer="config")]
    findings = _cache_config(page, source) + _preemptions(page, source) + _kv_usage(page, source)
    findings += _prefix_hits(page, source) + _ttft_parts(page, source)
    return findings


def _cache_config(page, source: str) -> list[Finding]:
    info = page.get("vllm:cache_config_info")
    if not info:
        return []
    labels = info[0].labels
    keep = ("block_size", "gpu_memory_utilization", "enable_prefix_caching", "num_gpu_blocks",
            "cache_dtype")
    return [Finding("server.cache_config", Severity.INFO, "KV cache configuration",
                    [ev(k, labels[k], source) for k in keep if k in labels], layer="config")]


def _preemptions(page, source: str) -> list[Finding]:
    preempt = page.value("vllm:num_preemptions_total")
    if preempt is None:
        return []
    evidence = [ev("vllm:num_preemptions_total (since start)", preempt, source)]
    if not preempt:
        return [Finding("server.preemptions", Severity.OK, "no preemptions since server start",
                        evidence, layer="queue")]
    return [Finding(
        "server.preemptions", Severity.WARNING, f"{preempt:g} preemptions since server start",
        evidence, why="A preempted request's KV cache is dropped and recomputed: a stall for it.",
        fix="more KV memory (gpu-memory-utilization, FP8 KV, TP) or lower max-num-seqs/MBT",
        reference=f"{FACTS} section 6 #5", layer="queue")]


def _kv_usage(page, source: str) -> list[Finding]:
    usage = page.value("vllm:kv_cache_usage_perc")
    if usage is None or usage < 0.95:
        return []
    return [Finding("server.kv_cache_full", Severity.INFO, f"KV cache {usage:.0%} full right now",
                    [ev("vllm:kv_cache_usage_perc", usage, source)],
                    why="If it stays near full, preemptions follow.",
                    fix="watch it under load (latscope bench); as for preemptions",
                    reference=f"{FACTS} section 6 #6", layer="queue")]


def _prefix_hits(page, source: str) -> list[Finding]:
    queries = page.value("vllm:prefix_cache_queries_total")
    hits = page.value("vllm:prefix_cache_hits_total")
    if not queries or hits is None:
        return []
    return [Finding("server.prefix_cache", Severity.INFO,
                    f"prefix cache hit rate {hits / queries:.1%} of prompt tokens since start",
                    [ev("vllm:prefix_cache_hits_total", hits, source),
                     ev("vllm:prefix_cache_queries_total", queries, source)],
                    why="Near 0 with prompts that share a prefix (system prompt, few-shot) means "
                        "the prefix is recomputed for every request.",
                    fix="put the shared part first; check --enable-prefix-caching",
                    reference=f"{FACTS} section 6 #15", layer="prefill")]


def _mean_ms(page, family: str) -> tuple[float, float] | None:
    total = page.value(f"{family}_sum")
    count = page.value(f"{family}_count")
    return None if not count or total is None else (total / count * 1000.0, count)


def _ttft_parts(page, source: str) -> list[Finding]:
    ttft = _mean_ms(page, "vllm:time_to_first_token_seconds")
    queue = _mean_ms(page, "vllm:request_queue_time_seconds")
    prefill = _mean_ms(page, "vllm:request_prefill_time_seconds")
    if ttft is None or queue is None or prefill is None:
        return []
    frontend = ttft[0] - queue[0] - prefill[0]
    src = f"{source} _sum/_count since start, {ttft[1]:g} requests"
    evidence = [ev("mean TTFT", round(ttft[0], 3), src, "ms"),
                ev("mean queue time", round(queue[0], 3), src, "ms"),
                ev("mean prefill time", round(prefill[0], 3), src, "ms"),
                ev("frontend = TTFT - queue - prefill", round(frontend, 3), "computed", "ms")]
    parts = {"queue": queue[0], "frontend": frontend, "prefill": prefill[0]}
    name, value = max(parts.items(), key=lambda kv: kv[1])
    share = value / ttft[0] if ttft[0] > 0 else 0.0
    impact = {"metric": "ttft_mean_ms", "value": round(value, 3), "share": round(share, 4)}
    advice = {"queue": ("requests wait for a batch slot: the server is overloaded",
                        "scale out, admission control, or more KV memory", "#3"),
              "frontend": ("time outside the engine: tokenization, IPC, detokenization",
                           "--api-server-count > 1; check CPU contention", "#2"),
              "prefill": ("prompt processing dominates", "shorter prompts, prefix caching, more "
                          "compute (TP)", "")}
    why, fix, item = advice[name]
    if share < DOMINANT_SHARE or name == "prefill" or value < 5.0:
        return [Finding("server.ttft_parts", Severity.INFO,
                        f"mean TTFT {ttft[0]:.1f} ms: queue {queue[0]:.1f}, prefill {prefill[0]:.1f},"
                        f" frontend {frontend:.1f} ms", evidence, layer="queue", impact=impact,
                        reference=f"{FACTS} section 1 (diagnostic identity)")]
    return [Finding(f"server.{name}_bound", Severity.WARNING,
                    f"{name} is {share:.0%} of mean TTFT ({value:.1f} of {ttft[0]:.1f} ms)", evidence,
                    why=why, fix=fix, reference=f"{FACTS} section 6 {item}",
                    layer="frontend" if name == "frontend" else "queue", impact=impact)]

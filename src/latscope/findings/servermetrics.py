"""Checks on one ``/metrics`` page (docs/findings.md): stats disabled,
KV-cache config, preemptions, KV usage now, prefix-cache hit rate, and the TTFT decomposition
from the ``_sum``/``_count`` of the TTFT, queue and prefill histograms.

The page is cumulative since the server started, so every figure here is a mean over all requests
it has served (the evidence says so); per-run windows are ``bench``'s job (first/last scrape).
Decomposition (docs/observe.md):
frontend = mean TTFT - mean queue time - mean prefill time (tokenization, IPC, detokenizing).
"""

from __future__ import annotations

from latscope.env.facts import Facts
from latscope.findings import server as rules
from latscope.findings.checkbase import ev, skipped
from latscope.findings.latency import Context, share_finding
from latscope.model import Finding, Severity
from latscope.server.metrics import MetricsPage

REF = "docs/findings.md"


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
        return [rules.stats_disabled_finding(source)]
    findings = _cache_config(page, source) + _preemptions(page, source) + _kv_usage(page, source)
    findings += _prefix_hits(page, source) + _ttft_parts(page, source)
    return findings


def _cache_config(page: MetricsPage, source: str) -> list[Finding]:
    info = page.get("vllm:cache_config_info")
    if not info:
        return []
    labels = info[0].labels
    keep = ("block_size", "gpu_memory_utilization", "enable_prefix_caching", "num_gpu_blocks",
            "cache_dtype")
    return [Finding("server.cache_config", Severity.INFO, "KV cache configuration",
                    [ev(k, labels[k], source) for k in keep if k in labels], layer="config",
                    reference=f"{REF}#server.cache_config")]


def _preemptions(page: MetricsPage, source: str) -> list[Finding]:
    preempt = page.value("vllm:num_preemptions_total")
    if preempt is None:
        return []
    return [rules.preemption_finding(
        [ev("vllm:num_preemptions_total (since start)", preempt, source)], preempt)]


def _kv_usage(page: MetricsPage, source: str) -> list[Finding]:
    usage = page.value("vllm:kv_cache_usage_perc")
    if usage is None or usage < rules.KV_SATURATED:
        return []
    return [rules.kv_finding([ev("vllm:kv_cache_usage_perc (now)", usage, source)], usage * 100,
                             sustained=False)]


def _prefix_hits(page: MetricsPage, source: str) -> list[Finding]:
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
                    reference=f"{REF}#server.prefix_cache", layer="prefill")]


# Synthetic prompts of random tokens share no 16-token KV block unless a prefix is asked for,
# so over a run a hit rate past this says the server had seen the prompts themselves.
RESENT_HIT_RATE = 0.10


def resent_prompts(hit_rate: float | None, shares_prefix: bool, seed: int,
                   source: str) -> list[Finding]:
    """A run whose prompts, drawn to share nothing, came from the prefix cache anyway: the
    server had seen them (an earlier run with the same seed), and the run's TTFT reads low."""
    if hit_rate is None or shares_prefix or hit_rate < RESENT_HIT_RATE:
        return []
    return [Finding("server.prefix_cache_resent", Severity.WARNING,
                    f"{hit_rate:.0%} of this run's prompt tokens came from the prefix cache, "
                    "though its prompts share no prefix: the server had seen them",
                    [ev("prefix cache hits / queries over the run", round(hit_rate, 4), source),
                     ev("--seed", seed, "the run's manifest")],
                    why="An earlier run against this server sent the same prompts (the same "
                        "--seed and workload), so their prefill came from the cache: TTFT and "
                        "throughput read better than new prompts get (on an H100 a resent lap "
                        "read TTFT p50 27-31% lower, docs/bench.md).",
                    fix="run again with another --seed, or against a restarted server",
                    # the load's, not the server's: a caveat on the figures, never the verdict
                    reference=f"{REF}#server.prefix_cache_resent", layer="client")]


def _mean_ms(page: MetricsPage, family: str) -> tuple[float, float] | None:
    total = page.value(f"{family}_sum")
    count = page.value(f"{family}_count")
    return None if not count or total is None else (total / count * 1000.0, count)


def _ttft_parts(page: MetricsPage, source: str) -> list[Finding]:
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
    out = [Finding("server.ttft_parts", Severity.INFO,
                   f"mean TTFT {ttft[0]:.1f} ms since start: queue {queue[0]:.1f}, prefill "
                   f"{prefill[0]:.1f}, tokenization/IPC/output {frontend:.1f} ms", evidence,
                   layer="queue", reference=f"{REF}#server.ttft_parts")]
    # The same rules as for a measured run, on the server's own TTFT since it started.
    ctx = Context(measured_at="all requests since server start")
    for key, label, value in (("ttft.server.queue", "queue", queue[0]),
                              ("ttft.server.prefill", "prefill", prefill[0]),
                              ("ttft.server.other", "tokenization + IPC + output", frontend)):
        finding = share_finding(key, label, value, src, ttft[0], src, ctx,
                                total_label="server TTFT")
        if finding is not None:
            out.append(finding)
    return out

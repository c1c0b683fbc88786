"""Findings about the server, read from its log (``findings_from_log``) and its ``/metrics``
snapshots (``findings_from_metrics``), in latscope's one ``Finding`` form.

The rules are documented in ``docs/findings.md`` (one section per id); each
finding cites the exact values it read and the log line or metric they came from. Thresholds are
stated where they are defined, and a rule fires only on values it has actually read.
"""

from __future__ import annotations

from latscope.model import Evidence, Finding, MetricSnapshot, Severity
from latscope.server.logs import ServerLog, StatsPoint
from latscope.server.metrics import counter_delta, gauge_series, has_vllm_series, histogram_delta

REF = "docs/findings.md"
# KV cache usage at or above this fraction counts as saturated: new requests start to wait for
# blocks and running ones get preempted (vLLM's optimization guide: sustained ~1 means preemption).
# The mean engine step's tokens against the token budget, for the budget to bind: with chunked
# prefill a binding budget fills every step that prefills (an H200 with a 512-token budget and
# 2k prompts: 0.81 and 0.89 past its knee; the default 8192 budget at a saturated knee: <= 0.15).
BUDGET_USED = 0.7
KV_SATURATED = 0.90
# Per-request log lines above this (access log alone is 1) mean extra logging per request.
LINES_PER_REQUEST_HIGH = 2.0


def effective_max_num_seqs(log: ServerLog) -> tuple[int | None, str]:
    """max_num_seqs and where it came from: the log, or vLLM's documented default by device.

    The default is not logged at INFO. vLLM sets it from device memory
    (``EngineArgs.get_batch_defaults`` in vllm/engine/arg_utils.py): 1024 on GPUs with >= 70 GiB
    (A100 excepted, which the log does not let us rule out), 256 below; 128 per rank on CPU
    (its DEBUG line says so; at INFO, a CPU KV cache is what tells the device).
    """
    cfg = log.config
    if cfg.get("max_num_seqs") is not None:
        return int(cfg["max_num_seqs"]), log.source("max_num_seqs")
    if cfg.get("kv_device") == "CPU":
        ranks = int(cfg.get("tensor_parallel_size") or 1)
        return 128 * ranks, (f"inferred: vLLM's CPU default, 128 per rank x {ranks} "
                             f"({log.source('kv_device')}; get_batch_defaults)")
    if cfg.get("kv_device") == "GPU" and cfg.get("device_memory_gib"):
        mem = float(cfg["device_memory_gib"])
        value = 1024 if mem >= 70 else 256
        return value, (f"inferred: vLLM default for a {mem:g} GiB GPU "
                       f"({log.source('device_memory_gib')}; get_batch_defaults)")
    return None, "not in the log"


def findings_from_log(log: ServerLog) -> list[Finding]:
    findings = [_queue_finding(log), _queue_full_batch_finding(log), _kv_finding_from_log(log),
                _preemption_finding_from_log(log),
                _debug_logging_finding(log), _request_logging_finding(log)]
    return [f for f in findings if f is not None]


def _stat_evidence(log: ServerLog, p: StatsPoint) -> list[Evidence]:
    src = f"{log.name}:{p.line} ({p.timestamp})"
    out = [Evidence("Running", p.running, "reqs", src), Evidence("Waiting", p.waiting, "reqs", src)]
    if p.kv_usage_pct is not None:
        name = f"{p.kv_device or ''} KV cache usage".strip()
        out.append(Evidence(name, p.kv_usage_pct, "%", src))
    return out


def _queue_finding(log: ServerLog) -> Finding | None:
    """Requests wait while the batch has room: the per-step token budget is the limit."""
    max_seqs, seqs_source = effective_max_num_seqs(log)
    queued = [p for p in log.stats if (p.waiting or 0) > 0 and p.running is not None]
    if not queued:
        return None
    below = [p for p in queued if max_seqs is None or (p.running or 0) < max_seqs]
    kv_bound = [p for p in below if (p.kv_usage_pct or 0) >= KV_SATURATED * 100]
    budget_bound = [p for p in below if p not in kv_bound]
    if not budget_bound:
        return None  # queueing at max_num_seqs or with full KV is reported elsewhere
    worst = max(budget_bound, key=lambda p: p.waiting or 0)
    mbt = log.config.get("max_num_batched_tokens")
    evidence = _stat_evidence(log, worst)
    evidence.append(Evidence("max_num_seqs", max_seqs, "", seqs_source))
    evidence.append(Evidence("max_num_batched_tokens", mbt, "tokens",
                             log.source("max_num_batched_tokens") if mbt else "not in the log"))
    evidence.append(Evidence("stats intervals with this pattern", len(budget_bound),
                             f"of {len(log.stats)}", log.name))
    # running and waiting are set: `queued` holds only such intervals
    return token_budget_finding(worst.running or 0, worst.waiting or 0, worst.kv_usage_pct, max_seqs, mbt,
                                evidence, sustained=len(budget_bound) >= 2)


def token_budget_finding(running: float, waiting: float, kv_pct: float | None,
                         max_seqs: int | None, mbt: int | None, evidence: list[Evidence], *,
                         sustained: bool) -> Finding:
    """The one rule for "requests queue while the batch has room", from a log or /metrics."""
    known = max_seqs is not None
    kv = f"{kv_pct:.1f}%" if isinstance(kv_pct, (int, float)) else "unknown"
    return Finding(
        id="server.queue_token_budget",
        severity=Severity.WARNING if sustained and known else Severity.INFO,
        title=(f"Requests queue while the batch is below max_num_seqs (Running {running:g}, "
               f"Waiting {waiting:g}, KV {kv}): the per-step token budget "
               f"(max_num_batched_tokens={mbt}) admits prompts too slowly"
               if known else
               f"Requests queue (Running {running:g}, Waiting {waiting:g}) with KV cache at "
               f"{kv}; max_num_seqs is not known, so the bound is unknown"),
        evidence=evidence,
        why=("Each engine step schedules at most max_num_batched_tokens tokens; long prompts use "
             "the budget up, so new requests wait in the queue although batch slots and KV cache "
             "are free. Their wait is part of TTFT."),
        fix=("Raise --max-num-batched-tokens (prefill admits more prompt tokens per step; ITL can "
             "rise) or spread the load over more replicas; measure with `latscope sweep` over "
             "max_num_batched_tokens rather than assuming."),
        reference=f"{REF}#server.queue_token_budget",
        layer="queue")


def _token_budget_from_metrics(snapshots: list[MetricSnapshot], max_seqs: int | None,
                               mbt: int | None, source: str) -> Finding | None:
    """Scrapes where requests waited while fewer than max_num_seqs ran and the KV cache had
    room, *and* engine steps full of tokens: the budget is binding only when the steps use it
    up. Requests also wait for the next step of a busy engine (a saturated GPU with half-empty
    steps: an H200 at its knee was told to raise the budget, which cannot add capacity), so where
    vLLM's tokens-per-step histogram is served, it decides. Needs max_num_seqs (else a full
    batch looks the same); a queue seen in one scrape only (a closed loop's ramp) is no pattern."""
    if max_seqs is None:
        return None
    running = dict(gauge_series(snapshots, "vllm:num_requests_running", combine=sum))
    waiting = dict(gauge_series(snapshots, "vllm:num_requests_waiting", combine=sum))
    kv = dict(gauge_series(snapshots, "vllm:kv_cache_usage_perc", combine=max))
    queued = [t for t, w in waiting.items() if w > 0 and t in running]
    below = [t for t in queued if running[t] < max_seqs and kv.get(t, 0.0) < KV_SATURATED]
    if len(below) < 2 or len(below) * 2 < len(queued):
        return None
    used = budget_use(snapshots, mbt)
    if used is not None and used[0] < BUDGET_USED:
        return None  # steps had room: the wait is for the engine's next step, not the budget
    worst = max(below, key=lambda t: waiting[t])
    evidence = [Evidence("vllm:num_requests_running", running[worst], "reqs", source),
                Evidence("vllm:num_requests_waiting", waiting[worst], "reqs", source),
                Evidence("max_num_seqs", max_seqs, "", "server command line or log"),
                Evidence("max_num_batched_tokens", mbt, "tokens", "server command line or log"),
                Evidence("scrapes with a queue below max_num_seqs", len(below),
                         f"of {len(snapshots)}", source)]
    if used is not None:
        evidence.append(Evidence("token budget used by the mean engine step",
                                 round(used[0], 3), f"of {mbt} tokens, {used[1]:g} steps",
                                 f"vllm:iteration_tokens_total sum / count, {source}"))
    kv_pct = kv[worst] * 100 if worst in kv else None
    # with neither the budget nor vLLM's tokens-per-step known, a queue below max_num_seqs may
    # be a scrape between a finished request and the next step: information, not a blame
    return token_budget_finding(running[worst], waiting[worst], kv_pct, max_seqs, mbt, evidence,
                                sustained=used is not None or mbt is not None)


def budget_use(snapshots: list[MetricSnapshot], mbt: int | None) -> tuple[float, float] | None:
    """(the mean engine step's tokens / ``mbt``, steps) over the scrapes' window, from
    ``vllm:iteration_tokens_total``; None without the histogram or the budget.

    The mean, not the steps' distribution: vLLM V1 counts a request's whole prompt in the step
    that finishes its prefill (``IterationStats.update_from_output``), so with chunked prefill
    single steps read above the budget (2-4k tokens under a 512 budget on an H200) and the
    chunks before them read as decode-only steps; over a window the sum is the tokens the
    steps scheduled, and sum / (steps x budget) is how much of the budget they used."""
    if not mbt or len(snapshots) < 2:
        return None
    delta = histogram_delta(snapshots[0], snapshots[-1], "vllm:iteration_tokens_total")
    if delta is None or delta.count <= 0 or delta.sum is None:
        return None
    return min(1.0, max(0.0, delta.sum / (delta.count * mbt))), delta.count


def _queue_full_batch_finding(log: ServerLog) -> Finding | None:
    """Requests wait because the batch already holds max_num_seqs requests."""
    max_seqs, seqs_source = effective_max_num_seqs(log)
    if max_seqs is None:
        return None
    full = [p for p in log.stats if (p.waiting or 0) > 0 and (p.running or 0) >= max_seqs]
    if not full:
        return None
    worst = max(full, key=lambda p: p.waiting or 0)
    evidence = _stat_evidence(log, worst)
    evidence.append(Evidence("max_num_seqs", max_seqs, "", seqs_source))
    evidence.append(Evidence("stats intervals with a full batch and a queue", len(full),
                             f"of {len(log.stats)}", log.name))
    # running and waiting are set: `full` holds only such intervals. One such line is vLLM's own
    # count of the cap binding with requests waiting, which the rule reports whatever else
    # shares TTFT (a planted --max-num-seqs 2 once left one line and one scrape, each too few)
    return full_batch_finding(worst.running or 0, worst.waiting or 0, max_seqs, evidence,
                              sustained=True)


def full_batch_finding(running: float, waiting: float, max_seqs: int | None,
                       evidence: list[Evidence], *, sustained: bool) -> Finding:
    """The one rule for "requests queue because the batch is full", from a log or /metrics."""
    cap = (f"Running {running:g} = max_num_seqs {max_seqs}" if max_seqs is not None else
           f"Running plateaus at {running:g} (max_num_seqs not known: a scheduler cap)")
    return Finding(
        id="server.queue_max_num_seqs",
        severity=Severity.WARNING if sustained else Severity.INFO,
        title=f"Requests queue because the batch is full: {cap}, Waiting {waiting:g}",
        evidence=evidence,
        why="The scheduler runs at most max_num_seqs requests at once; the rest wait in the queue, "
            "and the wait is part of their TTFT.",
        fix=(f"Raise --max-num-seqs (now {max_seqs}) if the KV cache has room (see KV cache "
             "usage), or add replicas; prove it with `latscope diagnose --serve-cmd ...`."
             if max_seqs is not None else
             "Raise --max-num-seqs if the KV cache has room, or add replicas."),
        reference=f"{REF}#server.queue_max_num_seqs",
        layer="queue")


def _full_batch_from_metrics(snapshots: list[MetricSnapshot], max_seqs: int | None,
                             seqs_source: str, source: str, *, preempted: bool) -> Finding | None:
    """Scrapes where requests waited while the batch was at its cap (KV cache not full)."""
    running = dict(gauge_series(snapshots, "vllm:num_requests_running", combine=sum))
    waiting = dict(gauge_series(snapshots, "vllm:num_requests_waiting", combine=sum))
    kv = dict(gauge_series(snapshots, "vllm:kv_cache_usage_perc", combine=max))
    queued = [(t, running[t], w) for t, w in waiting.items() if w > 0 and t in running
              and kv.get(t, 0.0) < KV_SATURATED]
    if not queued:
        return None
    peak = max(r for _, r, _ in queued)
    if peak <= 0:
        return None
    seen_together = True  # the cap and a queue in one scrape: vLLM's own counters say it binds
    if max_seqs is not None:
        at_cap = [q for q in queued if q[1] >= max_seqs]
        if not at_cap and max(running.values(), default=0) >= max_seqs:
            seen_together = False
            # a short step's few scrapes may catch the batch full and the queue apart (Running 2,
            # Waiting 0; then Running 1, Waiting 14 between two steps): the cap was reached and
            # requests waited in the same run
            at_cap = [max(queued, key=lambda q: q[2])]
    else:  # unknown cap: a ceiling -- the most that ever ran, hit by most queued scrapes,
        # in a run whose KV cache never filled (a full KV cache explains queueing by itself;
        # preemptions say it filled between two scrapes: 17 blocks on CPU plateaued at 8 running
        # with the KV gauge below 90% in every scrape)
        seen_together = False  # a plateau is inferred, so only many scrapes make it sustained
        if peak < max(running.values()) or max(kv.values(), default=0.0) >= KV_SATURATED \
                or preempted:
            return None
        at_cap = [q for q in queued if q[1] == peak]
        if len(at_cap) < max(2, len(queued) // 2):
            return None
    if not at_cap:
        return None
    worst = max(at_cap, key=lambda q: q[2])
    evidence = [Evidence("vllm:num_requests_running", worst[1], "reqs", source),
                Evidence("vllm:num_requests_waiting", worst[2], "reqs", source),
                Evidence("vllm:kv_cache_usage_perc max", max(kv.values(), default=None), "",
                         source),
                Evidence("scrapes with a queue and a full batch", len(at_cap),
                         f"of {len(snapshots)}", source)]
    if max_seqs is not None:
        evidence.append(Evidence("max_num_seqs", max_seqs, "", seqs_source))
    # a short step on a fast box is scraped at its start, once or twice while it runs, and at
    # its end: a full batch in half of the scrapes taken while it ran is as sustained as it gets
    during = max(1, len(snapshots) - 2)
    sustained = seen_together or len(at_cap) >= 2 or 2 * len(at_cap) >= during
    return full_batch_finding(worst[1], worst[2], max_seqs, evidence, sustained=sustained)


def _kv_finding_from_log(log: ServerLog) -> Finding | None:
    full = [p for p in log.stats if (p.kv_usage_pct or 0) >= KV_SATURATED * 100]
    if not full:
        return None
    worst = max(full, key=lambda p: p.kv_usage_pct or 0)
    evidence = _stat_evidence(log, worst)
    evidence.append(Evidence("stats intervals at >= 90% KV", len(full), f"of {len(log.stats)}",
                             log.name))
    return kv_finding(evidence, worst.kv_usage_pct or 0.0, len(full) >= 2)


def kv_finding(evidence: list[Evidence], pct: float, sustained: bool) -> Finding:
    return Finding(
        id="server.kv_saturation",
        severity=Severity.WARNING if sustained else Severity.INFO,
        title=f"KV cache usage reached {pct:.1f}%: requests wait for blocks and may be preempted",
        evidence=evidence,
        why=("With the KV cache full the scheduler cannot admit new requests and preempts running "
             "ones, which are then recomputed: TTFT and tail latency grow."),
        fix=("Give the KV cache more memory (--gpu-memory-utilization, FP8 KV cache, more TP), or "
             "lower --max-num-seqs / --max-num-batched-tokens; measure the effect with a sweep."),
        reference=f"{REF}#server.kv_saturation",
        layer="queue")


def _preemption_finding_from_log(log: ServerLog) -> Finding | None:
    points = [p for p in log.stats if (p.preemptions or 0) > 0]
    if not points:
        return None
    total = sum(p.preemptions or 0 for p in points)
    first = points[0]
    evidence = [Evidence("Preemptions (sum over stats lines)", total, "",
                         f"{log.name}:{first.line} and {len(points) - 1} more lines")]
    return preemption_finding(evidence, total)


def preemption_finding(evidence: list[Evidence], count: float) -> Finding:
    if not count:
        return Finding("server.preemptions", Severity.OK, "no preemptions", evidence,
                       reference=f"{REF}#server.preemptions", layer="queue")
    return Finding(
        id="server.preemptions", severity=Severity.WARNING,
        title=f"{count:g} preemptions: requests were evicted and recomputed",
        evidence=evidence,
        why="A preempted request loses its KV cache and is recomputed later: a stall for it and "
            "wasted compute for everyone (the V1 scheduler never logs this; it is counted only).",
        fix="Raise --gpu-memory-utilization, use an FP8 KV cache or more TP, or lower "
            "--max-num-seqs / --max-num-batched-tokens.",
        reference=f"{REF}#server.preemptions",
        layer="queue")


def _debug_logging_finding(log: ServerLog) -> Finding | None:
    if not is_debug_level(log.config.get("log_level")):
        return None
    rate = log.line_rate
    debug_lines = rate.by_level.get("DEBUG", 0)
    evidence = [Evidence("DEBUG lines", debug_lines, f"of {rate.total_lines}", log.name),
                Evidence("log lines per second (whole log)", rate.lines_per_s, "lines/s", log.name),
                Evidence("log lines per second (busiest 10 s)", rate.peak_lines_per_s, "lines/s",
                         log.name),
                Evidence("per-step 'Running batch with' lines", rate.step_lines, "", log.name)]
    if rate.lines_per_request is not None:
        evidence.append(Evidence("lines per request", rate.lines_per_request, "", log.name))
    return debug_logging_finding(evidence)


def is_debug_level(value: object) -> bool:
    """``VLLM_LOGGING_LEVEL`` (or the level read from a log) names DEBUG."""
    return str(value).strip().upper() == "DEBUG"


def debug_logging_finding(evidence: list[Evidence], *, debug: bool = True) -> Finding:
    """The one rule for "the server logs at DEBUG", whatever it was read from: the server's log
    (``findings_from_log``), its environment (``findings.envvars``) or its command line
    (``findings.serverconfig``). ``debug=False`` is the passed check."""
    if not debug:
        return Finding("server.debug_logging", Severity.OK, "log level is not DEBUG", evidence,
                       layer="config")
    return Finding(
        id="server.debug_logging", severity=Severity.WARNING,
        title="The server logs at DEBUG level (VLLM_LOGGING_LEVEL=DEBUG): lines every engine step",
        evidence=evidence,
        why="DEBUG writes several lines per engine step from the worker and the engine core; "
            "formatting and writing them takes time on the processes that schedule the GPU.",
        fix="Unset VLLM_LOGGING_LEVEL (INFO is the default) outside debugging sessions.",
        reference=f"{REF}#server.debug_logging",
        layer="config")


def _request_logging_finding(log: ServerLog) -> Finding | None:
    rate = log.line_rate
    cfg = log.config
    per_request = rate.request_lines_per_request
    heavy = per_request is not None and per_request > LINES_PER_REQUEST_HIGH
    if not cfg.get("request_logging") and not heavy:
        return None
    evidence = [Evidence("request log lines", rate.request_lines, "", log.name),
                Evidence("requests seen", rate.requests, "", log.name),
                Evidence("request lines per request", per_request, "", log.name),
                Evidence("uvicorn access-log lines", rate.access_log_lines, "", log.name)]
    if "enable_log_requests" in cfg:
        evidence.append(Evidence("enable_log_requests", cfg["enable_log_requests"], "",
                                 log.source("enable_log_requests")))
    return request_logging_finding(evidence, flag=bool(cfg.get("request_logging")),
                                   lines_per_request=per_request)


def request_logging_finding(evidence: list[Evidence], *, flag: bool,
                            lines_per_request: float | None = None,
                            logging_on: bool = True) -> Finding:
    """The one rule for "every request is logged", from the log's line counts
    (``findings_from_log``) or the server's settings (``findings.serverconfig``). ``flag``: the server was
    started with --enable-log-requests (a warning); without it, only the log's line count says
    so (information). ``logging_on=False`` is the passed check."""
    if not logging_on:
        return Finding("server.request_logging", Severity.OK, "request logging is off", evidence,
                       layer="frontend")
    return Finding(
        id="server.request_logging",
        severity=Severity.WARNING if flag else Severity.INFO,
        title=(f"Per-request logging is on: {lines_per_request:.1f} log lines per request"
               if lines_per_request else "Per-request logging is on (--enable-log-requests)"),
        evidence=evidence,
        why="--enable-log-requests logs every request's parameters (and, before 0.20, its whole "
            "prompt) on the API server's event loop, which also streams every response.",
        fix="Drop --enable-log-requests in production, or cap it with --max-log-len; "
            "--disable-uvicorn-access-log removes the access-log line.",
        reference=f"{REF}#server.request_logging",
        layer="frontend")


def findings_from_metrics(snapshots: list[MetricSnapshot], *, source: str = "/metrics",
                          max_num_seqs: int | None = None, max_num_seqs_source: str = "",
                          max_num_batched_tokens: int | None = None) -> list[Finding]:
    """Findings from the scrapes of one run (first and last bound the window). ``max_num_seqs``
    (from the server's command line or log) lets the full-batch rule name the cap."""
    if not snapshots:
        return [Finding("server.metrics_missing", Severity.SKIPPED,
                        "No /metrics snapshot was taken: server-side checks did not run",
                        reference=f"{REF}#server.metrics_missing")]
    if not any(has_vllm_series(s) for s in snapshots):
        return [stats_disabled_finding(source)]
    first, last = snapshots[0], snapshots[-1]
    out: list[Finding] = []
    pre = counter_delta(first, last, "vllm:num_preemptions_total")
    if pre is not None and pre.delta > 0:
        out.append(preemption_finding([Evidence("vllm:num_preemptions_total increase",
                                                 pre.delta, "", source),
                                        Evidence("rate", pre.rate_per_s, "/s", source)], pre.delta))
    kv = gauge_series(snapshots, "vllm:kv_cache_usage_perc", combine=max)
    if kv:
        high = [v for _, v in kv if v >= KV_SATURATED]
        if high:
            out.append(kv_finding([Evidence("vllm:kv_cache_usage_perc max", max(high), "", source),
                                    Evidence("scrapes >= 0.90", len(high), f"of {len(kv)}",
                                             source)],
                                   max(high) * 100, len(high) >= 2))
    full = _full_batch_from_metrics(snapshots, max_num_seqs, max_num_seqs_source, source,
                                    preempted=pre is not None and pre.delta > 0)
    if full is not None:
        out.append(full)
    budget = _token_budget_from_metrics(snapshots, max_num_seqs, max_num_batched_tokens, source)
    if budget is not None and full is None:
        out.append(budget)
    out.extend(_waiting_reason_findings(snapshots, source))
    return out


def stats_disabled_finding(source: str) -> Finding:
    return Finding(
        "server.stats_disabled", Severity.INFO,
        "The server exposes no vllm:* series (started with --disable-log-stats, or not vLLM): "
        "queue/prefill/decode cannot be separated",
        evidence=[Evidence("vllm:* series", 0, "", source)],
        fix="Drop --disable-log-stats to let latscope split server time.",
        reference=f"{REF}#server.stats_disabled", layer="config")


def _waiting_reason_findings(snapshots: list[MetricSnapshot], source: str) -> list[Finding]:
    deferred = gauge_series(snapshots, "vllm:num_requests_waiting_by_reason",
                            {"reason": "deferred"})
    peak = max((v for _, v in deferred), default=0.0)
    if peak <= 0:
        return []
    return [Finding(
        "server.waiting_deferred", Severity.INFO,
        f"Up to {peak:g} requests were deferred (LoRA budget, KV transfer or blocked status), "
        "not waiting for capacity",
        evidence=[Evidence("vllm:num_requests_waiting_by_reason{reason=deferred} max", peak, "reqs",
                           source)],
        why="Deferred requests wait on a transient constraint rather than on batch capacity.",
        fix="Check LoRA slots (--max-loras) and KV-transfer settings.",
        reference=f"{REF}#server.waiting_deferred", layer="queue")]


def metrics_overview(snapshots: list[MetricSnapshot]) -> dict[str, float | None]:
    """Peak gauges over the run, for reports."""
    return {name: max((v for _, v in gauge_series(snapshots, name, combine=comb)), default=None)
            for name, comb in (("vllm:num_requests_running", sum),
                               ("vllm:num_requests_waiting", sum),
                               ("vllm:kv_cache_usage_perc", max))} if snapshots else {}


__all__ = ["debug_logging_finding", "effective_max_num_seqs", "findings_from_log",
           "findings_from_metrics", "full_batch_finding", "is_debug_level", "kv_finding",
           "metrics_overview", "preemption_finding", "request_logging_finding",
           "stats_disabled_finding"]

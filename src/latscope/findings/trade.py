"""A token budget set on the command line trades TTFT for ITL: the trade read from the server's
own counters, named beside the verdict, and measured against vLLM's default where latscope
controls the server (``findings.fixes.default_budget``).

With chunked prefill each engine step schedules at most ``--max-num-batched-tokens`` tokens:
a smaller budget splits a long prompt over more steps (TTFT up: the prompt's prefill waits for
each of them), and keeps each step short, so the requests decoding beside it stall less (ITL
down). On an H200 a 512-token budget with 2048-token prompts traded TTFT +29% for ITL p99
-91% at 6% less throughput against the default, at the same load. Neither side is a fault: a
user who set the budget chose a point on that curve, and the report says which one, from the
server's counters, and what the other side of the trade measured.
"""

from __future__ import annotations

import math

from latscope.findings.inputs import Measured, ServerLimits
from latscope.findings.server import budget_use
from latscope.model import Evidence, Finding, Severity
from latscope.server.metrics import HistogramDelta, histogram_delta

REF = "docs/findings.md#server.budget_trade"
PROMPT_TOKENS = "vllm:request_prompt_tokens"
PREFILL = "vllm:request_prefill_time_seconds"
ITL = "vllm:inter_token_latency_seconds"


def budget_trade(m: Measured, limits: ServerLimits, binding: bool) -> Finding | None:
    """``server.budget_trade`` where the server was started with --max-num-batched-tokens and
    the budget did not bind (where it binds, ``server.queue_token_budget`` is the answer), with
    the trade as the window at ``m`` read it; None without the flag or a scrape window."""
    budget = limits.budget_set
    if budget is None or binding or len(m.snapshots) < 2:
        return None
    first, last = m.snapshots[0], m.snapshots[-1]
    source = m.source or f"/metrics at {m.label}"
    evidence = [Evidence("--max-num-batched-tokens", budget, "tokens", "the server's command line")]
    prompt = histogram_delta(first, last, PROMPT_TOKENS)
    steps = None
    if prompt is not None and prompt.mean:
        steps = math.ceil(prompt.mean / budget)
        evidence += [Evidence("mean prompt", round(prompt.mean, 1), "tokens",
                              f"{PROMPT_TOKENS} sum / count, {source}"),
                     Evidence("engine steps to prefill a mean prompt", steps, "steps",
                              "mean prompt / budget")]
    prefill = histogram_delta(first, last, PREFILL)
    if prefill is not None and prefill.mean is not None:
        evidence.append(Evidence("prefill mean", round(prefill.mean * 1e3, 2), "ms",
                                 f"{PREFILL}, {source}"))
    itl = histogram_delta(first, last, ITL)
    itl_words = _itl_words(itl, source, evidence)
    used = budget_use(list(m.snapshots), budget)
    if used is not None:
        evidence.append(Evidence("budget used by the mean engine step", round(used[0], 3),
                                 f"of {budget} tokens", f"vllm:iteration_tokens_total, {source}"))
    spread = (f"each {prompt.mean:.0f}-token prompt takes {steps} engine steps to prefill"
              if prompt is not None and prompt.mean and steps else "prompts are prefilled in "
              "budget-sized chunks")
    return Finding(
        "server.budget_trade", Severity.WARNING,
        f"The server runs --max-num-batched-tokens {budget}, a trade of TTFT for ITL: at "
        f"{m.label}, {spread}{itl_words}",
        evidence=evidence, layer="config", role="cause",
        why=("A smaller per-step token budget splits each prompt's prefill over more engine "
             "steps: its first token waits for all of them (TTFT up), while the requests "
             "decoding beside it stall less per step (ITL down). A larger budget does the "
             "reverse; neither adds capacity."),
        fix=("Keep it if ITL matters more than TTFT here; otherwise measure vLLM's default "
             "budget against it (TTFT the metric, TPOT the guard): `latscope diagnose "
             "--serve-cmd` does that A/B."),
        reference=REF)


def _itl_words(itl: HistogramDelta | None, source: str, evidence: list[Evidence]) -> str:
    """", with ITL p50 12.0 ms and p99 30.0 ms" from the ITL histogram, each quantile's bucket
    (its error bound) in the evidence."""
    if itl is None or itl.count <= 0:
        return ""
    p50, p99 = itl.quantile(0.5), itl.quantile(0.99)
    if p50 is None or p99 is None or p99.above_top_bucket:
        return ""
    for name, q in (("ITL p50", p50), ("ITL p99", p99)):
        evidence.append(Evidence(name, round(q.value * 1e3, 2), "ms",
                                 f"{ITL} buckets {q.lower * 1e3:g}-{q.upper * 1e3:g} ms, {source}"))
    return f", with ITL p50 {p50.value * 1e3:.1f} ms and p99 {p99.value * 1e3:.1f} ms"

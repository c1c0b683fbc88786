"""Summary statistics of a load run: latency percentiles, throughput, goodput, errors.

``summarize`` is a pure function of ``RequestRecord``s, shared by ``bench``, ``sweep``, ``tune`` and
the latency decomposition. Every figure it returns is defined in ``docs/metrics.md``:

- TTFT  = first content chunk arrival - scheduled send time (so client lag is never hidden);
- ITL   = every gap between consecutive content chunks of a request, pooled over requests;
- TPOT  = (end - first content chunk) / (output tokens - 1), one value per request;
- E2E   = end (last byte) - scheduled send time;
- send lag = actual send - scheduled send (the client's own delay).

Latencies are in milliseconds (keys end in ``_ms``), throughputs per second, durations in seconds.
Failed and warm-up requests are kept out of every latency figure; failures are counted by kind.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Sequence

import numpy as np

from latscope.model import RequestRecord

DEFAULT_PERCENTILES = (50, 90, 95, 99)
SLO_KEYS = ("ttft", "tpot", "itl", "e2e")
_NS_PER_MS = 1e6


def distribution(values_ms: Sequence[float] | np.ndarray,
                 percentiles: Iterable[float] = DEFAULT_PERCENTILES) -> dict[str, Any]:
    """count, mean, std (population), min, max and the requested percentiles (linear interpolation,
    numpy's default, the same method as vllm bench serve) of one metric; ``None`` when empty."""
    arr = np.asarray(values_ms, dtype=np.float64)
    out: dict[str, Any] = {"count": int(arr.size)}
    if arr.size == 0:
        out.update(mean=None, std=None, min=None, max=None)
        out.update({_pkey(p): None for p in percentiles})
        return out
    out.update(mean=float(arr.mean()), std=float(arr.std()), min=float(arr.min()),
               max=float(arr.max()))
    values = np.percentile(arr, list(percentiles))
    out.update({_pkey(p): float(v) for p, v in zip(percentiles, values)})
    return out


def _pkey(p: float) -> str:
    return f"p{p:g}"


def ttft_ms(r: RequestRecord) -> float | None:
    if r.first_token_ns is None:
        return None
    return (r.first_token_ns - r.scheduled_ns) / _NS_PER_MS


def e2e_ms(r: RequestRecord) -> float | None:
    return None if r.end_ns is None else (r.end_ns - r.scheduled_ns) / _NS_PER_MS


def tpot_ms(r: RequestRecord) -> float | None:
    if r.first_token_ns is None or r.end_ns is None or not r.output_tokens or r.output_tokens < 2:
        return None
    return (r.end_ns - r.first_token_ns) / _NS_PER_MS / (r.output_tokens - 1)


def itls_ms(r: RequestRecord) -> np.ndarray:
    if len(r.chunk_ns) < 2:
        return np.empty(0)
    return np.diff(np.asarray(r.chunk_ns, dtype=np.int64)) / _NS_PER_MS


def meets_slo(r: RequestRecord, slo: dict[str, float]) -> bool:
    """True when every SLO (in ms) given is met; an undefined metric (e.g. TPOT of a one-token
    answer) counts as met, as in vllm bench serve's goodput."""
    checks = {
        "ttft": ttft_ms(r),
        "tpot": tpot_ms(r),
        "e2e": e2e_ms(r),
        "itl": float(itls_ms(r).max()) if len(r.chunk_ns) > 1 else None,
    }
    return all(checks[k] is None or checks[k] <= limit for k, limit in slo.items())


def summarize(records: Iterable[RequestRecord], *,
              percentiles: Sequence[float] = DEFAULT_PERCENTILES,
              slo: dict[str, float] | None = None,
              duration_s: float | None = None) -> dict[str, Any]:
    """Summary of the measured (non-warm-up) requests.

    ``duration_s`` is the measurement window used for rates; when omitted it is the span from the
    earliest scheduled send to the latest end among the measured requests.
    """
    records = list(records)
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.ok]
    failed = [r for r in measured if not r.ok]
    if duration_s is None:
        duration_s = _span_s(measured)
    per_s = (lambda x: x / duration_s) if duration_s else (lambda x: None)

    ttfts = [v for v in map(ttft_ms, ok) if v is not None]
    tpots = [v for v in map(tpot_ms, ok) if v is not None]
    e2es = [v for v in map(e2e_ms, ok) if v is not None]
    itl_all = np.concatenate([itls_ms(r) for r in ok]) if ok else np.empty(0)
    send_lag = [(r.sent_ns - r.scheduled_ns) / _NS_PER_MS for r in measured if r.sent_ns]
    out_tokens = sum(r.output_tokens or 0 for r in ok)
    in_tokens = sum(r.prompt_tokens or 0 for r in ok)

    summary: dict[str, Any] = {
        "requests": {"total": len(measured), "completed": len(ok), "failed": len(failed),
                     "warmup_excluded": len(records) - len(measured)},
        "errors": dict(Counter(r.error_kind or "incomplete" for r in failed)),
        "duration_s": duration_s,
        "throughput": {
            "requests_per_s": per_s(len(ok)),
            "output_tokens_per_s": per_s(out_tokens),
            "total_tokens_per_s": per_s(out_tokens + in_tokens),
        },
        "tokens": {"input_total": in_tokens, "output_total": out_tokens,
                   "output_source": dict(Counter(r.output_tokens_source for r in ok))},
        "ttft_ms": distribution(ttfts, percentiles),
        "tpot_ms": distribution(tpots, percentiles),
        "itl_ms": distribution(itl_all, percentiles),
        "e2e_ms": distribution(e2es, percentiles),
        "send_lag_ms": distribution(send_lag, percentiles),
        "percentiles": list(percentiles),
    }
    if slo:
        good = sum(1 for r in ok if meets_slo(r, slo))
        summary["goodput"] = {"slo_ms": dict(slo), "good_requests": good,
                              "requests_per_s": per_s(good),
                              "attainment": good / len(measured) if measured else None}
    return summary


def _span_s(records: Sequence[RequestRecord]) -> float | None:
    ends = [r.end_ns for r in records if r.end_ns is not None]
    if not records or not ends:
        return None
    return (max(ends) - min(r.scheduled_ns for r in records)) / 1e9

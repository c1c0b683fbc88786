"""One SLO grammar for every verb.

    TERM  := METRIC[_STAT][_ms] OP NUMBER        ttft<=500   ttft_p99<=500   itl_p99_ms<50
    METRIC:= ttft | itl | tpot | e2e             (milliseconds)
    STAT  := p50 | p90 | p99 | p99.9 | mean | min | max
    OP    := <= | < | >= | >
    legacy: METRIC=NUMBER (bench's old form) is METRIC<=NUMBER

A term without a statistic is **per request**: every request must meet it. ``bench`` counts the
requests that meet all per-request terms (goodput); ``sweep``, ``tune`` and ``diagnose`` judge a
step by its statistics, so there a per-request term means the step's worst request (``_max``).
Any other step metric can be named whole, e.g. ``requests_per_s>=10`` or ``error_rate<=0.01``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from latscope.errors import ConfigError

LATENCIES = ("ttft", "itl", "tpot", "e2e")
_TERM = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_.]*)\s*(<=|>=|<|>|=)\s*([0-9.eE+-]+)\s*(ms)?\s*$")
_LATENCY = re.compile(r"^(ttft|itl|tpot|e2e)(?:_(p\d+(?:\.\d+)?|mean|min|max))?(?:_ms)?$")


@dataclass(frozen=True, slots=True)
class Term:
    metric: str  # "ttft", or a whole step metric name ("requests_per_s")
    stat: str | None  # "p99", "mean", ...; None: per request (latencies) or a plain metric
    op: str
    limit: float

    @property
    def per_request(self) -> bool:
        return self.metric in LATENCIES and self.stat is None

    @property
    def step_key(self) -> str:
        """The key of a sweep step's metrics this term is judged on."""
        if self.metric not in LATENCIES:
            return self.metric
        return f"{self.metric}_{self.stat or 'max'}_ms"

    def __str__(self) -> str:
        name = self.metric if self.stat is None else f"{self.metric}_{self.stat}"
        return f"{name}{self.op}{self.limit:g}"


def parse(text: str | None) -> list[Term]:
    """Parse a comma-separated SLO; empty text means no SLO."""
    if not text or not text.strip():
        return []
    return [_term(part) for part in text.split(",") if part.strip()]


def _term(part: str) -> Term:
    match = _TERM.match(part)
    limit = math.nan
    if match:
        try:
            limit = float(match[3])  # the regex admits "1.2.3" and "e"
        except ValueError:
            pass
    if not match or not math.isfinite(limit):
        raise ConfigError(f"bad --slo term {part.strip()!r}: expected e.g. ttft<=500 (every "
                          "request) or ttft_p99<=500 (a percentile), in milliseconds")
    name, op = match[1].lower(), "<=" if match[2] == "=" else match[2]
    latency = _LATENCY.match(name)
    if latency and not (match[2] == "=" and latency[2]):
        return Term(latency[1], latency[2], op, limit)
    if match[2] == "=":
        raise ConfigError(f"bad --slo term {part.strip()!r}: METRIC=MS is for latencies "
                          f"({', '.join(LATENCIES)}) per request; write {name}<=...")
    return Term(name, None, op, limit)

"""The gate of ``latscope compare``: ``--fail-on`` terms, the default policy, the tolerances.

    TERM   := METRIC OP CHANGE          ttft_p99>+10%   throughput<-5%   errors>+1%
    METRIC := ttft|tpot|itl|e2e [_mean|_p50|_p90|_p99]  (alone: the mean)
              | throughput (output tok/s) | rps | goodput | errors (the error rate)
    OP     := > (a rise fails; latencies, errors) | < (a fall fails; throughput, rps, goodput)
    CHANGE := [+|-]NUMBER%   (errors: points of the requests, 1% = one request in 100)

A term fails the gate when the whole 95% interval of the change lies beyond it: a regression
*proven* larger than the tolerance. It passes when the interval excludes a change that large,
and leaves the gate undecided (exit 2) when the interval straddles it. The tolerance of a figure
no term names is ``TOLERANCE``'s: there it only words the verdict.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from latscope.errors import ConfigError

_LATENCY = re.compile(r"^(ttft|tpot|itl|e2e)(?:_(mean|p50|p90|p99))?(?:_ms)?$")
_RATES = ("throughput", "rps", "goodput")
_TERM = re.compile(r"^\s*([a-z0-9_]+)\s*([<>])\s*([+-]?)\s*([0-9]*\.?[0-9]+)\s*(%|pp)?\s*$")

# What a change within is called "no change", per statistic, where no term names the figure:
# a tail moves more from run to run than a mean (docs/compare.md, the noise of same-config pairs)
TOLERANCE = {"mean": 0.05, "p50": 0.05, "p90": 0.10, "p99": 0.20, "throughput": 0.05,
             "rps": 0.05, "goodput": 0.05, "errors": 0.01}
# The default gate. Its false-positive rate is measured by benchmarks/compare_false_positive.py
# (docs/compare.md): the means and throughput, with room for this box's run-to-run noise.
DEFAULT_POLICY = "ttft_mean>+10%,tpot_mean>+10%,e2e_mean>+10%,throughput<-10%,errors>+1%"


@dataclass(frozen=True, slots=True)
class GateTerm:
    metric: str  # "ttft_p99", "throughput", "errors"
    tolerance: float  # a fraction (0.10), or points for errors (0.01)
    text: str  # as written, normalised: "ttft_p99>+10%"


def parse_fail_on(text: str | None) -> list[GateTerm]:
    """The terms of ``--fail-on`` (None or "default": the default policy; "none": no gate)."""
    if text is None or text.strip() == "default":
        text = DEFAULT_POLICY
    if text.strip() == "none":
        return []
    terms = [_term(part) for part in text.split(",") if part.strip()]
    if not terms:
        raise ConfigError("--fail-on: no term given (e.g. 'ttft_p99>+10%,throughput<-5%')")
    seen: set[str] = set()
    for term in terms:
        if term.metric in seen:
            raise ConfigError(f"--fail-on: {term.metric} is named twice")
        seen.add(term.metric)
    return terms


def _term(part: str) -> GateTerm:
    match = _TERM.match(part.lower())
    if not match:
        raise ConfigError(f"--fail-on {part.strip()!r}: expected e.g. ttft_p99>+10% or "
                          "throughput<-5% (a metric, > or <, a change in %)")
    name, op, sign, number, _unit = match.groups()
    metric = _metric(name, part)
    rises_fail = metric not in _RATES
    if (op == ">") != rises_fail:
        want = "a rise: write >+N%" if rises_fail else "a fall: write <-N%"
        raise ConfigError(f"--fail-on {part.strip()!r}: a regression of {metric} is {want}")
    if sign and (sign == "+") != rises_fail:
        raise ConfigError(f"--fail-on {part.strip()!r}: the sign contradicts the direction "
                          f"({'>+' if rises_fail else '<-'}N% is meant)")
    value = float(number) / 100
    if not 0 < value < 10:
        raise ConfigError(f"--fail-on {part.strip()!r}: give a change above 0% and below 1000%")
    return GateTerm(metric, value, f"{metric}{'>+' if rises_fail else '<-'}{float(number):g}%")


def _metric(name: str, part: str) -> str:
    if name in (*_RATES, "errors"):
        return name
    latency = _LATENCY.match(name)
    if latency:
        return f"{latency[1]}_{latency[2] or 'mean'}"
    raise ConfigError(f"--fail-on {part.strip()!r}: unknown metric {name!r} (ttft, tpot, itl, "
                      "e2e with _mean/_p50/_p90/_p99; throughput, rps, goodput, errors)")


def tolerance_of(metric: str, terms: list[GateTerm]) -> tuple[float, bool]:
    """The tolerance a figure's verdict is judged against, and whether the gate names it."""
    for term in terms:
        if term.metric == metric:
            return term.tolerance, True
    return TOLERANCE.get(metric.rpartition("_")[2], TOLERANCE.get(metric, 0.05)), False

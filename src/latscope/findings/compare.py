"""The rules of ``latscope compare``: which differences between two runs refuse the comparison
and which are only listed, each figure's verdict, and the gate's exit code.

Comparability comes first. Runs that differ in workload (sizes, mix, load), model or hardware, or
whose prefix cache or client served them differently, measure different things: the comparison
is refused (exit 2) and every difference listed; ``--allow GROUP`` makes one group a caveat
instead, for a user who means it (an H100 against an H200). A change of the server's flags or
version is what a comparison is usually *for*: listed, never refused.

A verdict weighs the change's interval against a tolerance t (``findings.compare_policy``):
regression when the whole interval is worse than t, improvement when it is all better than -t,
no change when it lies within +-t, inconclusive otherwise or when a run is too short for the
statistic (a p99 needs requests beyond it: ``analysis.compare_stats.min_requests``). The gate
fails on a regression of a figure it names, passes it where a regression beyond t is excluded,
and is undecided (exit 2) where one is neither shown nor excluded.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from latscope.analysis.compare_facts import GROUPS, Fact, Measured
from latscope.analysis.compare_metrics import Estimate
from latscope.analysis.compare_model import (
    EXIT_OK,
    EXIT_REGRESSION,
    EXIT_UNDECIDED,
    Difference,
    MetricRow,
)
from latscope.analysis.compare_stats import Change, min_requests, wider
from latscope.findings.compare_policy import GateTerm, tolerance_of

# Mean sizes further apart than this are another workload (a prompt 5% longer is a new one)
SIZE_GAP = 0.05
# Prefix-cache hit rates further apart than this: one side was served from the cache
HIT_RATE_GAP = 0.05
# Requests beyond a quantile a run needs for its interval (coverage measured in
# docs/compare.md: 0.86 for a p99 of 64 requests, 0.95 from 10 beyond it); a mean needs 20
TAIL_REQUESTS = 10
MEAN_REQUESTS = 20
_REFUSED = {"workload", "load", "model", "hardware", "host", "client", "cache"}
_NUMERIC = {"workload.prompt_tokens": SIZE_GAP, "workload.output_tokens": SIZE_GAP}
_LISTED_ONLY = {"workload.seed", "hardware.hostname"}
# facts whose value makes a run unreliable: refused when on either side, both included
_UNRELIABLE: dict[str, Any] = {"client.reliable": False, "host.busy": "busy",
                                "client.contended": "contended"}


def side_value(facts: Sequence[dict[str, Fact]], key: str) -> Any:
    """The value every run of a side has for ``key``; a "mixed" marker when they differ."""
    values = [f[key].value for f in facts if key in f]
    if not values:
        return None
    first = values[0]
    if all(_same(key, first, v) for v in values[1:]):
        return first
    return _Mixed(values)


class _Mixed(tuple[Any, ...]):
    def __str__(self) -> str:
        return "differs between runs: " + ", ".join(map(_text, dict.fromkeys(self)))


def _unreliable(key: str, value: Any) -> bool:
    return key in _UNRELIABLE and value == _UNRELIABLE[key]


def _same(key: str, a: Any, b: Any) -> bool:
    if isinstance(a, Measured) and isinstance(b, Measured):
        # 5% apart, and beyond three standard errors: not the sampling of one workload
        gap = abs(a.value - b.value)
        return gap <= max(_NUMERIC.get(key, 0.0) * max(abs(a.value), abs(b.value)),
                          3 * math.hypot(a.error, b.error))
    if key in _NUMERIC and isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(a - b) <= _NUMERIC[key] * max(abs(a), abs(b))
    if key == "cache.prefix_hit_rate" and isinstance(a, (int, float)) \
            and isinstance(b, (int, float)):
        return abs(a - b) <= HIT_RATE_GAP
    return bool(a == b)


def _text(value: Any) -> str:
    if value is None:
        return "not recorded"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def differences(base: Sequence[dict[str, Fact]], new: Sequence[dict[str, Fact]],
                allow: frozenset[str] = frozenset()) -> list[Difference]:
    """Every fact that differs between the sides (or within one side), with what it means."""
    keys = list(dict.fromkeys(k for side in (base, new) for f in side for k in f))
    no_gpu = side_value(base, "hardware.gpu") is None and side_value(new, "hardware.gpu") is None
    out = []
    for key in keys:
        a, b = side_value(base, key), side_value(new, key)
        if isinstance(a, _Mixed) or isinstance(b, _Mixed):
            pass  # the runs of one side disagree: listed as what it is
        elif a is None and b is None or (_same(key, a, b) and not _unreliable(key, a)):
            continue
        fact = next(f[key] for side in (base, new) for f in side if key in f)
        action, why = _action(fact, a, b, no_gpu)
        if action == "refuse" and fact.group in allow:
            action, why = "caveat", why + f" (--allow {fact.group})"
        shown = flag_difference(a, b) if key == "server.flags" else (
            _with_detail(_shown(key, a), base, key), _with_detail(_shown(key, b), new, key))
        out.append(Difference(key=key, label=fact.label, group=fact.group, base=shown[0],
                              new=shown[1], action=action, why=why))
    out.sort(key=lambda d: (("refuse", "caveat", "list").index(d.action),
                            GROUPS.index(d.group) if d.group in GROUPS else len(GROUPS)))
    return out


def _with_detail(text: str, side: Sequence[dict[str, Fact]], key: str) -> str:
    details = list(dict.fromkeys(f[key].detail for f in side if key in f and f[key].detail))
    return f"{text} ({'; '.join(details)})" if details else text


def flag_difference(a: Any, b: Any) -> tuple[str, str]:
    """Two server command lines as the flags that differ ('--max-num-seqs 8' against
    '(not given)'), the rest being the same."""
    if not isinstance(a, str) or not isinstance(b, str):
        return _text(a), _text(b)
    fa, fb = _flags(a), _flags(b)
    keys = [k for k in dict.fromkeys([*fa, *fb]) if fa.get(k) != fb.get(k)]

    def side(flags: dict[str, str]) -> str:
        return " ".join(f"{k} {flags[k]}".strip() if k in flags else f"{k} (not given)"
                        for k in keys) or "the same"

    return side(fa), side(fb)


def _flags(command: str) -> dict[str, str]:
    """``--flag value`` pairs of a command line (a bare word before any flag: its program)."""
    import shlex

    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    out: dict[str, str] = {}
    current = ""
    for word in words:
        if word.startswith("-"):
            name, _, value = word.partition("=")
            current = name
            out[current] = value
        elif current:
            out[current] = (out[current] + " " + word).strip()
        else:
            out["(program)"] = (out.get("(program)", "") + " " + word).strip()
    return out


def _shown(key: str, value: Any) -> str:
    if key == "cache.prefix_hit_rate" and isinstance(value, (int, float)):
        return f"{value:.0%}"
    if key in _NUMERIC and isinstance(value, (int, float, Measured)):
        return f"{value.value if isinstance(value, Measured) else value:.1f}"
    return _text(value) if not isinstance(value, _Mixed) else str(value)


def _action(fact: Fact, a: Any, b: Any, no_gpu: bool) -> tuple[str, str]:
    """What a difference in ``fact`` means: refuse, caveat or list, and why."""
    key, group = fact.key, fact.group
    if key in _LISTED_ONLY or group in ("server", "run"):
        return "list", _LISTED_WHY.get(group, "")
    if a is None or b is None:  # recorded on one side only: nothing to hold against it
        return "caveat", "recorded on one side only: cannot be checked"
    if key == "hardware.cpus" and not no_gpu:
        return "caveat", "the host differs; the GPUs are named beside it"
    if key == "client.reliable":
        return "refuse", ("latscope's own timing was unreliable: its own delays would read as "
                          "the server's" + (" (in both runs)" if a is b else ""))
    if key in ("host.busy", "client.contended"):
        return "refuse", ("the CPUs were contended by other work: latencies are slower, and "
                          "vary, for that reason first" + (" (in both runs)" if a == b else ""))
    if group in _REFUSED:
        return "refuse", _REFUSE_WHY[group]
    return "caveat", ""


_LISTED_WHY = {"server": "what the comparison compares", "run": "",
               "workload": "other prompts of the same sizes"}
_REFUSE_WHY = {"workload": "another workload: its latencies are not this one's",
               "load": "another load: latency depends on it first",
               "model": "another model", "hardware": "other hardware",
               "cache": "the prefix cache served one side's prompts, not the other's (a repeated "
                        "--seed on a warm server?)",
               "client": "latscope's own timing differs"}


# --- verdicts ---------------------------------------------------------------------------------

def judge(estimate: Estimate, terms: list[GateTerm]) -> MetricRow:
    """One figure's verdict against its tolerance, from the interval the verdict uses (the
    wider of within-run and between-run: the honest one when runs vary more than requests)."""
    spec = estimate.spec
    tolerance, gated = tolerance_of(spec.name, terms)
    change, used = _used_interval(estimate)
    short = _too_short(estimate)
    verdict, gate = _verdict(change, tolerance, spec.higher_is_better, short)
    why = short or ("" if change.has_interval or change.point is None
                    else "no interval (a ratio of zero or too few values)")
    if change.point is None:
        why = why or "not measured on both sides"
    return MetricRow(metric=spec.name, label=spec.label, unit=spec.unit,
                     higher_is_better=spec.higher_is_better, relative=spec.relative,
                     base=_finite(estimate.base), new=_finite(estimate.new),
                     change=_finite(change.point),
                     within=_pair(estimate.within), between=_pair(estimate.between),
                     interval=used if change.has_interval else "none", tolerance=tolerance,
                     verdict=verdict, gate=gate if gated else "", why=why,
                     n_base=estimate.n_base, n_new=estimate.n_new, note=estimate.sampled)


def not_judged(row: MetricRow) -> MetricRow:
    """A figure of runs that are not comparable: shown for what it is, not judged."""
    import msgspec

    return msgspec.structs.replace(row, verdict="inconclusive", gate="",
                                   why="the runs are not comparable")


def _used_interval(estimate: Estimate) -> tuple[Change, str]:
    if estimate.between is None:
        return estimate.within, "within-run"
    chosen, index = wider(estimate.within, estimate.between)
    return chosen, ("within-run", "between-run")[index]


def _too_short(estimate: Estimate) -> str:
    spec = estimate.spec
    n = min(estimate.n_base, estimate.n_new)
    if spec.name in ("throughput", "rps", "goodput", "errors") or (
            spec.name.startswith("itl_") and spec.stat != "mean"):
        # an ITL percentile pools every token gap: its tail rests on gaps, dozens a request
        need, what = MEAN_REQUESTS, "requests"
    else:
        stat = spec.stat
        need = MEAN_REQUESTS if stat == "mean" else min_requests(stat, TAIL_REQUESTS)
        what = "requests" + (" with token gaps" if spec.name.startswith("itl") else "")
    if n >= need:
        return ""
    return f"too short: {n} {what} on the shorter side, {spec.label} needs {need}"


def _verdict(change: Change, tolerance: float, higher_is_better: bool, short: str
             ) -> tuple[str, str]:
    """(verdict, gate) of an interval against the tolerance t, oriented so that worse is up:
    regression when all of it is worse than +t; improvement when all of it is better than -t;
    no change when all of it lies within +-t; inconclusive otherwise. The gate fails on a
    regression, passes where a regression beyond t is excluded (an interval from -40% to +5%
    passes it, its verdict inconclusive: better or unchanged, the data cannot say), and is
    undecided where one is neither shown nor excluded."""
    if short or not change.has_interval:
        return "inconclusive", "undecided"
    sign = -1.0 if higher_is_better else 1.0
    lo, hi = sorted((sign * change.lo, sign * change.hi))  # type: ignore[operator]
    if lo > tolerance:
        return "regression", "fail"
    gate = "pass" if hi <= tolerance else "undecided"
    if hi < -tolerance:
        return "improvement", gate
    if lo >= -tolerance and hi <= tolerance:
        return "no change", gate
    return "inconclusive", gate


def _pair(change: Change | None) -> list[float] | None:
    if change is None or change.lo is None or change.hi is None:
        return None
    return [change.lo, change.hi]


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def gate(rows: list[MetricRow], diffs: list[Difference]) -> tuple[str, int, list[str]]:
    """(status, exit code, reasons): 1 a regression proven on a gated figure; 2 when the runs
    are not comparable or a gated figure is undecided; 0 otherwise."""
    refused = [d for d in diffs if d.action == "refuse"]
    if refused:
        return "not comparable", EXIT_UNDECIDED, [
            f"{d.label}: {d.base} in BASE, {d.new} in NEW ({d.why})" for d in refused]
    failed = [r for r in rows if r.gate == "fail"]
    if failed:
        return "regression", EXIT_REGRESSION, [
            f"{r.label} {_pct(r)} beyond {_tol(r)}" for r in failed]
    undecided = [r for r in rows if r.gate == "undecided"]
    if undecided:
        return "inconclusive", EXIT_UNDECIDED, [
            f"{r.label}: {r.why or f'{_pct(r)}, its interval reaches past {_tol(r)}'}"
            for r in undecided]
    return "no regression", EXIT_OK, []


def _pct(row: MetricRow) -> str:
    if row.change is None:
        return "n/a"
    unit = "%" if row.relative else " points"
    text = f"{_signed(row.change)}{unit}"
    interval = row.between if row.interval == "between-run" else row.within
    if interval:
        text += f" [{_signed(interval[0])}, {_signed(interval[1])}]"
    return text


def _signed(fraction: float) -> str:
    v = fraction * 100
    return f"{v:+.0f}" if abs(v) >= 100 else f"{v:+.1f}"


def _tol(row: MetricRow) -> str:
    worse = "-" if row.higher_is_better else "+"
    return f"{worse}{row.tolerance * 100:g}{'%' if row.relative else ' points'}"


def change_text(row: MetricRow) -> str:
    """'+41.2% [+35.0, +48.1]' (a share: in points); the interval the verdict used."""
    return _pct(row)

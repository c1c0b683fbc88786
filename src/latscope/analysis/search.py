"""Search over server flags with as few server restarts as possible.

Each evaluation of a configuration costs a server restart (30 s to minutes), so the search is
measured in distinct configurations evaluated and compared with the full grid. ``coordinate``
takes one flag at a time and runs a discrete ternary search along it (assuming the objective is
unimodal along each flag, which holds for the usual batch-size trade-offs: too small starves the
GPU, too large queues or preempts), then repeats the pass while any flag moved. ``grid`` evaluates
everything (the reference, and what vLLM's auto_tune and ``vllm bench sweep`` do).

The search never runs anything itself: it calls ``evaluate(config) -> Outcome`` and memoises
results by configuration, and callers may pre-fill that memo (that is how an interrupted tune
resumes without repeating trials). A caller that can run several trials at once also passes
``evaluate_many(configs) -> outcomes``: the search then hands it, before each decision, the
configurations that decision needs (the two probes of a ternary step, the final candidates along
a flag, the whole grid). It asks for nothing the one-at-a-time search would not have evaluated,
and decides on the same outcomes, so the result and the set of trials are the same. Moves need a
relative gain above ``min_gain`` so measurement
noise does not walk the search away from the incumbent.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from latscope.errors import ConfigError

Value = int | float | str
Config = dict[str, Value]


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    values: tuple[Value, ...]  # in order, so that "neighbouring" means something


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one configuration scored. Feasible beats infeasible; then the larger ``value`` wins."""

    feasible: bool
    value: float  # e.g. throughput under the SLO; -inf when the server failed
    detail: dict[str, Any] = field(default_factory=dict, compare=False)


EvaluateMany = Callable[[list[Config]], list[Outcome]]


def better(a: Outcome, b: Outcome, min_gain: float = 0.0) -> bool:
    """True when ``a`` beats ``b`` by more than the relative ``min_gain`` (noise tolerance)."""
    if a.feasible != b.feasible:
        return a.feasible
    if math.isinf(b.value) and b.value < 0:
        return not (math.isinf(a.value) and a.value < 0)
    margin = abs(b.value) * min_gain
    return a.value > b.value + margin


def config_key(config: Config, params: Sequence[Param]) -> tuple[Value, ...]:
    return tuple(config[p.name] for p in params)


def _number(text: str) -> Value:
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


_RANGE = re.compile(r"^([0-9.eE+-]+)\.\.([0-9.eE+-]+)(?:\*([0-9.]+))?$")


def parse_param(text: str) -> Param:
    """``name=lo..hi`` (doubling from lo, hi included), ``name=lo..hi*F`` (factor F), ``name=a,b,c``."""
    name, sep, spec = text.partition("=")
    name = name.strip().replace("-", "_")
    if not sep or not name or not spec.strip():
        raise ConfigError(f"bad --param {text!r}: expected NAME=LO..HI or NAME=A,B,C")
    match = _RANGE.match(spec.strip())
    if match:
        try:  # the regex admits "1.2.3" and "e"
            lo, hi, factor = float(match[1]), float(match[2]), float(match[3] or 2)
        except ValueError:
            raise ConfigError(f"bad --param {text!r}: LO, HI and FACTOR must be numbers") from None
        if not math.isfinite(hi * factor) or lo <= 0 or hi < lo or factor <= 1:
            raise ConfigError(f"bad --param {text!r}: need 0 < LO <= HI and a factor > 1")
        values: list[Value] = []
        v = lo
        while v < hi * (1 - 1e-9):
            values.append(v)
            v *= factor
        values.append(hi)
        integral = match[1].lstrip("+-").isdigit() and match[2].lstrip("+-").isdigit()
        values = [int(round(float(x))) for x in values] if integral else values
    elif ".." in spec:  # meant as a range but malformed: never pass it to the server verbatim
        raise ConfigError(f"bad --param {text!r}: a range is LO..HI or LO..HI*FACTOR (numbers)")
    else:
        values = [_number(v.strip()) for v in spec.split(",") if v.strip()]
    if len(set(values)) != len(values) or not values:
        raise ConfigError(f"bad --param {text!r}: values must be distinct and non-empty")
    return Param(name, tuple(values))


def grid(params: Sequence[Param]) -> list[Config]:
    return [dict(zip([p.name for p in params], combo))
            for combo in itertools.product(*(p.values for p in params))]


@dataclass(slots=True)
class SearchResult:
    best: Config
    best_outcome: Outcome
    order: list[Config]  # configurations in the order first asked for (cached ones included)
    evaluated: int  # distinct configurations evaluated (= server restarts)
    grid_size: int
    strategy: str


class _Memo:
    """Evaluates each configuration once; ``cache`` may come pre-filled (resume)."""

    def __init__(self, params: Sequence[Param], evaluate: Callable[[Config], Outcome],
                 cache: dict[tuple[Value, ...], Outcome] | None,
                 evaluate_many: EvaluateMany | None = None) -> None:
        self.params = params
        self.evaluate = evaluate
        self.evaluate_many = evaluate_many
        self.cache = cache if cache is not None else {}
        self.order: list[Config] = []

    def prefetch(self, configs: Sequence[Config]) -> None:
        """Evaluates at once those of ``configs`` not known yet (when the caller can run several
        trials at once); ``order`` still follows the calls, as without prefetching."""
        missing: dict[tuple[Value, ...], Config] = {}
        for config in configs:
            key = config_key(config, self.params)
            if key not in self.cache:
                missing.setdefault(key, dict(config))
        if self.evaluate_many is None or len(missing) < 2:
            return
        for key, outcome in zip(missing, self.evaluate_many(list(missing.values()))):
            self.cache[key] = outcome

    def __call__(self, config: Config) -> Outcome:
        key = config_key(config, self.params)
        if key not in self.cache:
            self.cache[key] = self.evaluate(dict(config))
        if all(config_key(c, self.params) != key for c in self.order):
            self.order.append(dict(config))
        return self.cache[key]


def _pick(candidates: list[int], score: Callable[[int], Outcome], incumbent: int,
          min_gain: float) -> int:
    """Best index; the incumbent keeps its place unless something beats it by ``min_gain``."""
    best = max(candidates, key=lambda i: (score(i).feasible, score(i).value))
    if incumbent in candidates and not better(score(best), score(incumbent), min_gain):
        return incumbent
    return best


def _axis_search(n: int, score: Callable[[int], Outcome], incumbent: int, min_gain: float,
                 prefetch: Callable[[Sequence[int]], None] = lambda indices: None) -> int:
    """Discrete ternary search for the maximum of a unimodal sequence of length ``n``.
    ``prefetch(indices)`` is told, before each decision, every index that decision reads."""
    lo, hi = 0, n - 1
    while hi - lo > 2:
        m1 = lo + (hi - lo) // 3
        m2 = hi - (hi - lo) // 3
        prefetch((m1, m2))
        if better(score(m2), score(m1), min_gain):
            lo = m1 + 1
        elif better(score(m1), score(m2), min_gain):
            hi = m2 - 1
        else:  # a tie within noise: the maximum lies between them (unimodality)
            lo, hi = m1, m2
    prefetch(range(lo, hi + 1))
    return _pick(list(range(lo, hi + 1)), score, incumbent, min_gain)


def coordinate_search(params: Sequence[Param], evaluate: Callable[[Config], Outcome], *,
                      start: Config | None = None, min_gain: float = 0.03, max_passes: int = 3,
                      cache: dict[tuple[Value, ...], Outcome] | None = None,
                      evaluate_many: EvaluateMany | None = None) -> SearchResult:
    """Ternary search along one flag at a time from ``start`` (default: each flag's middle value)."""
    memo = _Memo(params, evaluate, cache, evaluate_many)
    current = dict(start) if start else {p.name: p.values[(len(p.values) - 1) // 2] for p in params}
    for p in params:
        if current.get(p.name) not in p.values:
            raise ConfigError(f"start value {p.name}={current.get(p.name)} is not among {list(p.values)}")
    memo(current)  # the starting point is always measured: it is the baseline to beat
    for _ in range(max_passes):
        moved = False
        for p in params:
            def score(i: int, p: Param = p) -> Outcome:
                return memo({**current, p.name: p.values[i]})

            def prefetch(indices: Sequence[int], p: Param = p) -> None:
                memo.prefetch([{**current, p.name: p.values[i]} for i in indices])
            incumbent = p.values.index(current[p.name])
            chosen = p.values[_axis_search(len(p.values), score, incumbent, min_gain, prefetch)]
            if chosen != current[p.name]:
                current[p.name] = chosen
                moved = True
        if not moved or len(params) == 1:
            break
    return _result(params, memo, "coordinate", current)


def grid_search(params: Sequence[Param], evaluate: Callable[[Config], Outcome], *,
                start: Config | None = None, min_gain: float = 0.0,
                cache: dict[tuple[Value, ...], Outcome] | None = None,
                evaluate_many: EvaluateMany | None = None) -> SearchResult:
    """Every configuration (the starting one first, so it is the baseline)."""
    memo = _Memo(params, evaluate, cache, evaluate_many)
    if start:
        memo(start)
    memo.prefetch(grid(params))
    for config in grid(params):
        memo(config)
    top = max(memo.order, key=lambda c: (memo(c).feasible, memo(c).value))
    best = top if better(memo(top), memo(memo.order[0]), min_gain) else memo.order[0]
    return _result(params, memo, "grid", best)


def _result(params: Sequence[Param], memo: _Memo, strategy: str, best: Config) -> SearchResult:
    return SearchResult(best=dict(best), best_outcome=memo(best), order=memo.order,
                        evaluated=len(memo.order), grid_size=math.prod(len(p.values) for p in params),
                        strategy=strategy)


STRATEGIES = {"coordinate": coordinate_search, "grid": grid_search}


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of points not dominated for (maximise throughput, minimise latency), by throughput."""
    front = []
    for i, (thr, lat) in enumerate(points):
        dominated = any((t2 >= thr and l2 <= lat) and (t2 > thr or l2 < lat)
                        for j, (t2, l2) in enumerate(points) if j != i)
        if not dominated and not (math.isnan(thr) or math.isnan(lat)):
            front.append(i)
    return sorted(front, key=lambda i: points[i][0])

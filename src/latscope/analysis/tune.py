"""Tune orchestration: one server per configuration, a measured workload, state on disk, resume.

A trial starts the server with one configuration (``launch``), runs the workload on it
(``measure``), stops the server and scores the metrics against the SLO: feasible configurations
score their throughput, infeasible ones minus their summed relative SLO violation (so the search
still moves toward feasibility). ``tune.json`` is rewritten atomically after every change of a
trial, so an interrupted tune (Ctrl-C, a crash, a killed machine) resumes from it: finished trials
are served from that file to the search and never re-run; a trial that was running is re-run.
``--validate`` runs the chosen and the starting configuration alternately (A B B A ..., which
cancels a linear drift of the machine) and reports the paired improvement with a t interval.
With a ``TrialPool`` (``campaign.parallel_tune``: ``tune --parallel K``) the trials a search step
needs run up to K at once; each enters the state when it starts and is scored when it ends.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any, Callable, ContextManager, Protocol, Sequence

import msgspec
import numpy as np
import orjson

from latscope.analysis.knee import Metrics, Number, SloTerm, meets_slo, parse_slo
from latscope.analysis.search import (
    STRATEGIES,
    Config,
    Outcome,
    Param,
    SearchResult,
    Value,
    config_key,
    pareto_front,
)
from latscope.errors import ConfigError, LatscopeError
from latscope.results import to_json_builtins

STATE_FILE = "tune.json"
# 2: a trial's decomposition and per-trial sweep are fields of their own, not keys of its
# metrics (which hold numbers only); a 1 is read and moved so (``_trial_v1``).
STATE_VERSION = 2
READABLE_VERSIONS = (1, 2)
# launch(config, trial_dir[, env=...]) -> context manager yielding (base_url, model_name); ``env``
# (extra server environment: the trial's CUDA_/HIP_VISIBLE_DEVICES) is passed only when set
Launch = Callable[..., ContextManager[tuple[str, str]]]


class LoadValue(msgspec.Struct):
    """One load of a trial's own sweep and the objective measured there."""

    load: Number
    value: float | None


class TrialRun(msgspec.Struct, kw_only=True):
    """What one trial measured: the flat metrics it is scored on (``analysis.sweep``'s keys and
    the ``load`` measured), the mean ms of each decomposition leaf, and with a sweep per trial
    the objective at each load."""

    metrics: dict[str, Number | None]
    decomposition: dict[str, float] = {}
    sweep: list[LoadValue] = []


# measure(base_url, model_name, run_dir) -> what the trial measured
Measure = Callable[[str, str, Path], TrialRun]


class TrialPool(Protocol):
    """Runs several trials at once (``campaign.parallel_tune``): ``run`` starts each through
    ``tuner.new_trial`` when it gets a slot and ends it with ``tuner.finish_trial`` as it
    finishes (so tune.json follows), and returns the trials in the order of ``configs``."""

    slots: int

    def run(self, tuner: Tuner, configs: list[Config], purpose: str) -> list[Trial]: ...


class TuneSpec(msgspec.Struct, kw_only=True):
    """What defines a tune; stored in the state so ``--resume DIR`` needs no flags again."""

    params: list[Param]
    serve_cmd: str | None  # template with {name} placeholders; None with ``local``
    local: bool
    slo: str
    workload: dict[str, Any]  # BenchConfig fields (concurrency, num_requests, lengths, ...)
    objective: str = "requests_per_s"
    latency: str = "e2e_p99_ms"  # the latency axis of the Pareto front
    strategy: str = "coordinate"
    start: Config | None = None
    min_gain: float = 0.03
    max_error_rate: float = 0.05


class Trial(msgspec.Struct):
    config: Config
    status: str = "running"  # running | done | failed | interrupted
    purpose: str = "search"  # search | validate-baseline | validate-candidate
    metrics: dict[str, Number | None] = {}
    decomposition: dict[str, float] = {}
    sweep: list[LoadValue] = []
    feasible: bool = False
    value: float = -math.inf  # written "-inf" (JSON has no infinity)
    run_dir: str = ""
    error: str = ""
    started: float = 0.0  # wall-clock seconds
    finished: float = 0.0
    devices: str = ""  # GPUs the trial's server saw (CUDA_/HIP_VISIBLE_DEVICES); "" = not set
    node: str = ""  # where it ran, when not on this host (a Ray node)


class PairedChange(msgspec.Struct, kw_only=True):
    """``paired_change``'s answer: the pairs' ratios, the medians, the change and its interval
    (None with fewer than two pairs), and the verdict."""

    n: int
    ratios: list[float]
    baseline_median: float | None
    candidate_median: float | None
    higher_is_better: bool
    confidence: float
    change: float | None = None
    ci: list[float] | None = None
    verdict: str = ""


class Validation(msgspec.Struct, kw_only=True):
    baseline: Config
    candidate: Config
    repeats: int
    order: str  # "ABBA"
    metrics: dict[str, PairedChange]  # the objective's and the latency's


class TuneResult(msgspec.Struct, kw_only=True):
    """The search's answer: the best configuration, the baseline, the Pareto front over the
    search trials and the restarts it took."""

    best: Config
    best_feasible: bool
    best_value: float | None
    baseline: Config
    strategy: str
    restarts: int
    grid_size: int
    failed: int
    pareto: list[Config]


class TuneFile(msgspec.Struct, kw_only=True):
    version: int = STATE_VERSION
    spec: TuneSpec
    trials: list[Trial]
    validation: Validation | None = None
    result: TuneResult | None = None


class TuneState:
    """The tune's file: spec, every trial, validation and result; saved after each change."""

    def __init__(self, out_dir: Path, spec: TuneSpec) -> None:
        self.out_dir = out_dir
        self.spec = spec
        self.trials: list[Trial] = []
        self.validation: Validation | None = None
        self.result: TuneResult | None = None

    @property
    def path(self) -> Path:
        return self.out_dir / STATE_FILE

    @classmethod
    def load(cls, out_dir: Path) -> TuneState:
        path = out_dir / STATE_FILE
        try:
            data = orjson.loads(path.read_bytes())
        except FileNotFoundError:
            raise ConfigError(f"{out_dir}: no {STATE_FILE} here, nothing to resume") from None
        except orjson.JSONDecodeError as exc:
            raise ConfigError(f"{path}: not a tune state file ({exc})") from None
        version = data.get("version") if isinstance(data, dict) else None
        if version not in READABLE_VERSIONS:
            raise ConfigError(f"{path}: state version {version} is not one of "
                              f"{READABLE_VERSIONS}")
        if version == 1:
            data["trials"] = [_trial_v1(t) for t in data.get("trials") or []]
        try:
            stored = msgspec.convert(data, TuneFile, strict=False)
        except msgspec.ValidationError as exc:
            raise ConfigError(f"{path}: not a tune state file ({exc})") from None
        state = cls(out_dir, stored.spec)
        state.trials, state.validation, state.result = (stored.trials, stored.validation,
                                                        stored.result)
        return state

    def file_data(self) -> dict[str, Any]:
        """tune.json's content (``TuneFile``) as the plain values the file holds."""
        data: dict[str, Any] = to_json_builtins(TuneFile(
            spec=self.spec, trials=self.trials, validation=self.validation, result=self.result))
        for trial in data["trials"]:
            if math.isinf(trial["value"]):  # JSON has no infinity: its name instead
                trial["value"] = "-inf" if trial["value"] < 0 else "inf"
        return data

    def save(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        data = self.file_data()
        tmp = self.path.with_name(f".{STATE_FILE}.{os.getpid()}.tmp")
        tmp.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
        os.replace(tmp, self.path)  # a reader (or a resume after a crash) never sees half a file

    def cache(self) -> dict[tuple[Value, ...], Outcome]:
        """Finished search trials as the search's memo; running/interrupted ones are re-run."""
        return {config_key(t.config, self.spec.params): Outcome(t.feasible, t.value)
                for t in self.trials if t.purpose == "search" and t.status in ("done", "failed")}

    def search_trials(self) -> list[Trial]:
        return [t for t in self.trials if t.purpose == "search" and t.status in ("done", "failed")]


def _trial_v1(trial: Any) -> Any:
    """A version-1 trial as version 2 holds it: its decomposition and sweep, which version 1
    kept among the metrics, moved out of them (a sweep entry's value was under the
    objective's name)."""
    if not isinstance(trial, dict) or not isinstance(trial.get("metrics"), dict):
        return trial
    metrics = dict(trial["metrics"])
    moved = {key: metrics.pop(key) for key in ("decomposition", "sweep") if key in metrics}
    if isinstance(moved.get("sweep"), list):
        moved["sweep"] = [{"load": e.get("load"),
                           "value": next((v for k, v in e.items() if k != "load"), None)}
                          for e in moved["sweep"] if isinstance(e, dict)]
    return {**trial, "metrics": metrics, **moved}


def score(metrics: Metrics, slo: Sequence[SloTerm], objective: str,
          max_error_rate: float) -> Outcome:
    """Feasible: throughput. Infeasible: minus the summed relative violation of each term."""
    violation = 0.0
    for term in slo:
        if term.holds(metrics):
            continue
        value = metrics.get(term.metric)
        if value is None:
            violation += 1.0
        else:
            violation += abs(float(value) - term.limit) / max(abs(term.limit), 1e-9)
    errors = metrics.get("error_rate") or 0.0
    if errors > max_error_rate:
        violation += errors
    value = metrics.get(objective)
    if violation == 0.0 and value is not None and meets_slo(metrics, slo):
        return Outcome(True, float(value))
    return Outcome(False, -violation if violation else -math.inf)


class Tuner:
    """Runs trials for the search and for validation, writing the state after each change."""

    def __init__(self, state: TuneState, launch: Launch, measure: Measure,
                 on_trial: Callable[[Trial], None] = lambda t: None,
                 pool: TrialPool | None = None) -> None:
        self.state = state
        self.pool = pool
        self.launch = launch
        self.measure = measure
        self.on_trial = on_trial
        self.slo = parse_slo(state.spec.slo)
        self.restarts_this_session = 0

    def new_trial(self, config: Config, purpose: str = "search", devices: str = "") -> Trial:
        """A trial that starts now: appended to the state (status running) and saved."""
        index = len(self.state.trials)
        label = "-".join(f"{k}={v}" for k, v in config.items())
        trial_dir = self.state.out_dir / "trials" / f"{index:03d}-{purpose}-{label}"
        trial = Trial(config=dict(config), purpose=purpose, devices=devices, started=time.time(),
                      run_dir=str(trial_dir.relative_to(self.state.out_dir)))
        self.state.trials.append(trial)
        self.state.save()
        self.restarts_this_session += 1
        return trial

    def trial_dir(self, trial: Trial) -> Path:
        return self.state.out_dir / trial.run_dir

    def finish_trial(self, trial: Trial, run: TrialRun | None, error: str = "",
                     node: str = "") -> None:
        """Scores a trial that ran (``run``) or records why it failed (``error``)."""
        trial.finished, trial.node = time.time(), node
        if run is None:
            trial.status, trial.error = "failed", error
        else:
            trial.metrics, trial.decomposition, trial.sweep = (run.metrics, run.decomposition,
                                                               run.sweep)
            outcome = score(run.metrics, self.slo, self.state.spec.objective,
                            self.state.spec.max_error_rate)
            trial.status, trial.feasible, trial.value = "done", outcome.feasible, outcome.value
        self.state.save()
        self.on_trial(trial)

    def interrupt_trial(self, trial: Trial) -> None:
        trial.status, trial.finished = "interrupted", time.time()
        self.state.save()

    def run_trial(self, config: Config, purpose: str = "search") -> Trial:
        if self.pool is not None:  # a trial alone runs as the pool runs them (its GPUs, its node)
            return self.pool.run(self, [config], purpose)[0]
        trial = self.new_trial(config, purpose)
        trial_dir = self.trial_dir(trial)
        try:
            with self.launch(config, trial_dir) as (url, model):
                measured = self.measure(url, model, trial_dir / "run")
        except LatscopeError as exc:  # the server did not start, or the run failed: record it
            self.finish_trial(trial, None, str(exc).splitlines()[0])
        except BaseException:
            self.interrupt_trial(trial)
            raise
        else:
            self.finish_trial(trial, measured)
        return trial

    def run_trials(self, configs: Sequence[Config], purpose: str = "search") -> list[Trial]:
        """The trials of ``configs`` (in that order), up to the pool's slots at once."""
        if self.pool is None:
            return [self.run_trial(c, purpose) for c in configs]
        return self.pool.run(self, list(configs), purpose)

    def evaluate(self, config: Config) -> Outcome:
        trial = self.run_trial(config)
        return Outcome(trial.feasible, trial.value)

    def evaluate_many(self, configs: list[Config]) -> list[Outcome]:
        return [Outcome(t.feasible, t.value) for t in self.run_trials(configs)]

    def search(self) -> SearchResult:
        spec = self.state.spec
        strategy = STRATEGIES.get(spec.strategy)
        if strategy is None:
            raise ConfigError(f"unknown search {spec.strategy!r}; use one of {sorted(STRATEGIES)}")
        many = self.evaluate_many if self.pool is not None and self.pool.slots > 1 else None
        result = strategy(spec.params, self.evaluate, start=spec.start, min_gain=spec.min_gain,
                          cache=self.state.cache(), evaluate_many=many)
        self.state.result = summarize_result(self.state, result)
        self.state.save()
        return result

    def validate(self, baseline: Config, candidate: Config, repeats: int) -> Validation:
        """A B B A ... ``repeats`` pairs; trials already on disk from an earlier run are reused."""
        done = [t for t in self.state.trials if t.purpose.startswith("validate") and t.status == "done"]
        runs = {"validate-baseline": [t for t in done if t.purpose == "validate-baseline"],
                "validate-candidate": [t for t in done if t.purpose == "validate-candidate"]}
        for i in range(repeats):
            order = ["validate-baseline", "validate-candidate"]
            for purpose in order if i % 2 == 0 else order[::-1]:
                if len(runs[purpose]) > i:
                    continue
                trial = self.run_trial(baseline if purpose.endswith("baseline") else candidate,
                                       purpose)
                if trial.status == "done":
                    runs[purpose].append(trial)
        metrics = {}
        for key, higher_better in ((self.state.spec.objective, True), (self.state.spec.latency, False)):
            base = [t.metrics.get(key) for t in runs["validate-baseline"][:repeats]]
            cand = [t.metrics.get(key) for t in runs["validate-candidate"][:repeats]]
            metrics[key] = paired_change(base, cand, higher_better=higher_better)
        self.state.validation = Validation(baseline=baseline, candidate=candidate,
                                           repeats=repeats, order="ABBA", metrics=metrics)
        self.state.save()
        return self.state.validation


def paired_change(baseline: Sequence[float | None], candidate: Sequence[float | None], *,
                  higher_better: bool, confidence: float = 0.95) -> PairedChange:
    """Relative change candidate/baseline - 1 over pairs, with a t interval on the log ratios.

    Log ratios make the interval symmetric for gains and losses and independent of the scale;
    a t interval is what n of 2-10 pairs allows (no normality can be checked with so few, so
    the report gives the individual ratios too). The verdict is "better" / "worse" only when the
    whole interval lies on one side of zero, else "no significant difference".
    """
    from scipy import stats as sps  # heavy import, needed only here

    pairs = [(b, c) for b, c in zip(baseline, candidate)
             if b is not None and c is not None and b > 0 and c > 0]
    ratios = np.array([c / b for b, c in pairs])
    out = PairedChange(
        n=len(pairs), ratios=ratios.tolist(),
        baseline_median=float(np.median([b for b, _ in pairs])) if pairs else None,
        candidate_median=float(np.median([c for _, c in pairs])) if pairs else None,
        higher_is_better=higher_better, confidence=confidence)
    if len(pairs) < 2:
        out.change = float(ratios[0] - 1) if pairs else None
        out.verdict = "not enough pairs for an interval (need >= 2)"
        return out
    logs = np.log(ratios)
    mean, sem = float(logs.mean()), float(logs.std(ddof=1) / math.sqrt(len(logs)))
    half = float(sps.t.ppf(0.5 + confidence / 2, len(logs) - 1)) * sem
    lo, hi = math.expm1(mean - half), math.expm1(mean + half)
    good_side = lo > 0 if higher_better else hi < 0
    bad_side = hi < 0 if higher_better else lo > 0
    out.verdict = "better" if good_side else "worse" if bad_side else "no significant difference"
    out.change, out.ci = math.expm1(mean), [lo, hi]
    return out


def summarize_result(state: TuneState, result: SearchResult) -> TuneResult:
    """Best configuration, baseline, Pareto front over search trials and the restarts used."""
    spec = state.spec
    trials = state.search_trials()
    done = [t for t in trials if t.status == "done"]
    pts = [(float(t.metrics.get(spec.objective) or math.nan), float(t.metrics.get(spec.latency) or math.nan))
           for t in done]
    best = result.best_outcome
    return TuneResult(best=result.best, best_feasible=best.feasible,
                      best_value=best.value if math.isfinite(best.value) else None,
                      baseline=result.order[0], strategy=result.strategy,
                      restarts=result.evaluated, grid_size=result.grid_size,
                      failed=sum(t.status == "failed" for t in trials),
                      pareto=[done[i].config for i in pareto_front(pts)])


def flag_args(config: Config) -> list[str]:
    """``{"max_num_seqs": 8}`` -> ``["--max-num-seqs", "8"]`` (vLLM's spelling of its flags)."""
    return [part for name, value in config.items()
            for part in (f"--{name.replace('_', '-')}", str(value))]

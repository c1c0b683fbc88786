"""Prove a fix: the server as it is (A) against the server with the fix (B), measured alternately.

Rules of the experiment (each one a way A/B results are commonly wrong):
- arms alternate A B A B ..., so that drift of the host (other load, thermal) hits both;
- every run starts with warm-up requests that are excluded from its figures;
- every run has its own prompts (its own seed, ``arm_seed``), so no arm is served from another
  arm's prefix cache, nor from an earlier experiment's or campaign's; each run's prefix-cache
  hit rate is recorded beside it;
- the two runs of a pair send requests of the same sizes in the same order (``pair_size_seed``,
  texts of their own): under a spread mix a run's mean moves with how many long requests it
  drew, and a pair whose A drew few and whose B many read that as the fix's effect (two pairs
  of 64 requests at c=16, 10% long: B/A 0.10 and 0.29, a 95% interval from -100% to +14,136%
  for a fix that took mean TTFT from ~930 to ~160 ms). Measured on the CPU target with that
  fix and mix, 12 pairs each way in alternated blocks: the SD of the pairs' log ratios was
  0.249 and 0.248 with the same sizes, 0.366 and 0.389 without, so intervals a third narrower
  (as from ~2.3x the pairs); what is left is the runs' own timing;
- the change is the pair-wise ratio B/A of the finding's metric, with a 95% t interval on the log
  ratios (``analysis.tune.paired_change``); a fix whose interval includes zero "did not
  measurably help", and the report says so.
"""

from __future__ import annotations

import contextlib
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterator

from latscope.analysis.tune import PairedChange
from latscope.campaign.observe import observe, run_seed, with_load
from latscope.campaign.proposals import Proposal
from latscope.campaign.servers import Running, ServerControl
from latscope.errors import LatscopeError
from latscope.findings.abtest import arms_caveat
from latscope.load import BenchConfig
from latscope.results import ABResult, Guard

Progress = Callable[[str], None]


@dataclass
class Experiment:
    proposal: Proposal
    load: int
    a_values: list[float] = field(default_factory=list)
    b_values: list[float] = field(default_factory=list)
    arms: list[str] = field(default_factory=list)
    hit_rates: dict[str, list[float | None]] = field(default_factory=lambda: {"A": [], "B": []})
    guard_values: dict[str, list[float | None]] = field(
        default_factory=lambda: {"A": [], "B": []})
    more_guard_values: dict[str, dict[str, list[float | None]]] = field(default_factory=dict)
    run_dirs: list[str] = field(default_factory=list)
    # runs measured again because the client's own timing was unreliable in them (a 2-core CI
    # box stalled latscope's event loop 830 ms in one B run: TTFT 183 ms against 14-22 ms)
    reruns: list[dict[str, Any]] = field(default_factory=list)
    # runs kept although the client's timing was unreliable in them: the interval then holds
    # the client's stalls beside the server's latency, and the note says so
    unreliable: list[str] = field(default_factory=list)
    result: PairedChange | None = None  # the A/B's paired change, once measured
    status: str = "ok"  # ok | failed: why | cut: why

    def ab_result(self) -> ABResult:
        """The A/B as the report holds it (``results.ABResult``): its values, the change with
        its 95% interval, the verdict, each guard's, and a note saying what to make of it."""
        a, b = self.a_values, self.b_values
        result = self.result
        change = result.change if result is not None else None
        ci = result.ci if result is not None else None
        verdict = result.verdict if result is not None else None
        helped = verdict == "better"
        out = ABResult(
            finding_id=self.proposal.finding_id, change=self.proposal.describe(),
            metric=self.proposal.metric, load=self.load, arms=self.arms, a_values=list(a),
            b_values=list(b), a_mean=sum(a) / len(a) if a else None,
            b_mean=sum(b) / len(b) if b else None,
            change_pct=change * 100 if change is not None else None,
            ci95_pct=[ci[0] * 100, ci[1] * 100] if ci else None, helped=helped,
            verdict=verdict if result is not None else self.status, warmup_excluded=True,
            prefix_cache_hit_rate=self.hit_rates, run_dirs=self.run_dirs, reruns=self.reruns,
            client_unreliable_runs=self.unreliable, note=self._note(verdict, helped))
        if self.proposal.guard:
            # renderers say "helped, at a cost" when the guard got worse with 95% confidence
            out.guard = self._guard(self.proposal.guard)
        if self.proposal.more_guards:
            out.guards = [out.guard] if isinstance(out.guard, Guard) else []
            out.guards += [self._guard(m) for m in self.proposal.more_guards]
        return out

    def _note(self, verdict: str | None, helped: bool) -> str:
        note = self.proposal.note
        if self.status != "ok":
            note = (note + " " if note else "") + self.status
        elif not helped:
            note = (note + " " if note else "") + (
                "did not measurably help: the 95% interval includes no change"
                if verdict == "no significant difference"
                else f"did not help: {verdict}")
        caveat = arms_caveat(self.hit_rates)
        if caveat:
            note = (note + "; " if note else "") + caveat
        if self.reruns:
            note = (note + "; " if note else "") + (
                f"{len(self.reruns)} run(s) measured again, the client's timing unreliable in "
                f"the first: {', '.join(r['run'] for r in self.reruns)}")
        if self.unreliable:
            note = (note + "; " if note else "") + (
                f"the client's own timing was unreliable in {len(self.unreliable)} of "
                f"{len(self.arms)} runs ({', '.join(self.unreliable)}): the interval holds the "
                f"client's stalls as well as the server's latency")
        return note.strip()

    def _guard(self, metric: str) -> Guard:
        from latscope.analysis.tune import paired_change

        values = self.guard_values if metric == self.proposal.guard else \
            self.more_guard_values.get(metric, {"A": [], "B": []})
        a, b = values["A"], values["B"]
        result = paired_change(a, b, higher_better=higher_is_better(metric))
        ci = result.ci
        return Guard(metric=metric, a_values=list(a), b_values=list(b),
                     change_pct=result.change * 100 if result.change is not None else None,
                     ci95_pct=[ci[0] * 100, ci[1] * 100] if ci else None,
                     verdict=result.verdict)


# --- running the A/B ---------------------------------------------------------------------------

def arm_seed(out_dir: Path, pair: int, arm: str, attempt: int, seed0: int = 10_000) -> int:
    """One A/B run's prompt seed within its campaign: its own for every experiment (by its
    folder's name), pair, arm and re-run. Every experiment once counted from ``seed0``, so a
    campaign's second A/B on the same server resent the first one's A prompts: the gateway's
    A arm was served 23% from the prefix cache, its B arm 0%."""
    experiment = zlib.crc32(out_dir.name.encode())
    return experiment * 100_000 + seed0 + 2 * pair + (arm == "B") + 1000 * attempt


def pair_size_seed(base: BenchConfig, out_dir: Path, pair: int, seed0: int = 10_000) -> int:
    """The request sizes' seed of both runs of A/B pair ``pair`` (and of their re-runs): their
    A run's first seed, so that sizes differ from pair to pair as they would between runs."""
    return run_seed(base.seed, arm_seed(out_dir, pair, "A", 0, seed0))


def run_experiment(proposal: Proposal, control: ServerControl, current: Running,
                   base: BenchConfig, load: int, out_dir: Path, *, pairs: int = 3,
                   requests: int | None = None, progress: Progress = lambda _: None,
                   seed0: int = 10_000, scrape_interval_s: float = 1.0) -> Experiment:
    """Alternate A (``current``, already running) and B (``proposal.change``) ``pairs`` times."""
    exp = Experiment(proposal, load)
    n, warmup = run_shape(proposal, load)
    n = requests or n
    with _arms(control, current, proposal, out_dir) as arm_url:
        for i in range(pairs):
            for arm in ("A", "B"):
                run_dir = out_dir / f"{i:02d}-{arm}"
                progress(f"  {arm}{i + 1}: {proposal.describe() if arm == 'B' else 'as is'}"
                         f" at c={load}, {n} requests")
                with arm_url(arm) as (url, model, tokenizer, *server):
                    # behind a gateway, the server's own /metrics (its prefix-cache hits)
                    metrics_url = server[0] if server else (
                        current.url if proposal.gateway else None)
                    for attempt in range(RERUNS_UNRELIABLE + 1):
                        # a re-run sends fresh prompts: the first run's are in the prefix cache
                        cfg = with_load(_at(base, url, model, tokenizer), concurrency=load,
                                        num_requests=n, output_dir=run_dir, warmup=warmup,
                                        seed=arm_seed(out_dir, i, arm, attempt, seed0))
                        cfg.size_seed = pair_size_seed(base, out_dir, i, seed0)
                        obs = observe(cfg, scrape_interval_s=scrape_interval_s,
                                      metrics_url=metrics_url)
                        if (obs.client.reliable or attempt == RERUNS_UNRELIABLE
                                or len(exp.reruns) >= RERUNS_PER_EXPERIMENT):
                            break
                        exp.reruns.append({"run": run_dir.name, "why": obs.client.why})
                        progress(f"    {arm}{i + 1} again: the client's timing was unreliable "
                                 f"({obs.client.why})")
                        run_dir = run_dir.with_name(f"{run_dir.name}-again")
                if not obs.client.reliable:
                    exp.unreliable.append(run_dir.name)
                value = metric_of(obs, proposal.metric)
                if value is None:  # e.g. every request failed: an arm without its figure
                    raise LatscopeError(f"arm {arm} of {proposal.finding_id}: the run gave no "
                                        f"{proposal.metric}")
                (exp.a_values if arm == "A" else exp.b_values).append(value)
                if proposal.guard:
                    exp.guard_values[arm].append(metric_of(obs, proposal.guard))
                for extra in proposal.more_guards:
                    exp.more_guard_values.setdefault(extra, {"A": [], "B": []})[arm].append(
                        metric_of(obs, extra))
                exp.arms.append(arm)
                exp.hit_rates[arm].append(obs.prefix_cache_hit_rate)
                exp.run_dirs.append(str(run_dir))
    from latscope.analysis.tune import paired_change

    exp.result = paired_change(exp.a_values, exp.b_values, higher_better=False)
    return exp


# How many times a run whose client timing was unreliable is measured again (then kept, and
# the experiment's note says so), and how many such re-runs one experiment may add: a one-off
# stall is re-measured; a host whose every run is unreliable (6 of 8 runs on a loaded 2-core
# box) would double the A/B past the budget it was fitted to, so its runs are kept as measured
RERUNS_UNRELIABLE = 1
RERUNS_PER_EXPERIMENT = 1


def requests_per_run(load: int) -> int:
    """Measured requests of one A/B run at ``load`` in flight (its warm-up is one more wave)."""
    return max(24, 4 * load)


def run_shape(proposal: Proposal, load: int) -> tuple[int, int]:
    """Measured and warm-up requests of each run: the proposal's own, else ``requests_per_run``
    and one full wave of warm-up, flowing into the measured requests."""
    return proposal.requests or requests_per_run(load), proposal.warmup or load


def restarts_per_run(control: ServerControl, proposal: Proposal) -> bool:
    """Whether each run of the A/B starts its own server (see ``_arms``)."""
    relaunches = proposal.gateway is None or proposal.relaunches_with_gateway
    return relaunches and not control.concurrent_arms


def _at(base: BenchConfig, url: str, model: str | None, tokenizer: str | None) -> BenchConfig:
    import dataclasses

    return dataclasses.replace(base, url=url, model=model or base.model,
                               tokenizer=base.tokenizer or tokenizer)


def higher_is_better(metric: str) -> bool:
    return metric.endswith("_rps")


def metric_of(obs: Any, metric: str) -> float | None:
    """A run's figure by name: ``ttft_mean_ms``, ``e2e_p99_ms``... from its summary; with a
    ``short_`` or ``long_`` prefix, over its short or long requests only (``size_class``);
    ``throughput_rps`` (measured requests over first send to last end) or ``steady_rps``."""
    if metric == "throughput_rps":
        return obs.summary.throughput.requests_per_s
    if metric == "steady_rps":
        return steady_rps(obs.records)
    size, _, rest = metric.partition("_")
    if size in ("short", "long"):
        return _class_metric(obs.records, size, rest)
    name, _, stat = metric.removesuffix("_ms").rpartition("_")
    return obs.summary.distribution(name).get(stat)


def steady_rps(records: list[Any]) -> float | None:
    """Completions per second between the first measured send and the last send of the run.

    The summary's throughput runs to the last end, so it counts the drain after the last send,
    when fewer requests are in flight. Short-first pushes the long requests it held back into
    that drain (sjf with aging factor 4: 8 to 11 of the last 16 completions were long, against
    0 to 3 direct, and the drain took 14-17 s against 1-4 s: docs/gateway.md), so a closed
    loop's overall rate charges short-first for the run's end, not for its steady state."""
    measured = [r for r in records if not r.warmup and r.status == 200]
    if not measured:
        return None
    start = min(r.sent_ns for r in measured)
    stop = max(r.sent_ns for r in records)
    done = sum(1 for r in measured if r.end_ns is not None and start <= r.end_ns <= stop)
    return done / ((stop - start) / 1e9) if stop > start else None


def size_class(records: list[Any]) -> dict[str, list[Any]]:
    """Measured requests split by size (prompt + output tokens): *short* at or below the median,
    *long* at or above the 90th percentile and above the median (in a 90/10 mix: each class)."""
    import numpy as np

    done = [r for r in records if r.ok and not r.warmup]
    sizes = np.array([(r.prompt_tokens or 0) + (r.output_tokens or 0) for r in done], dtype=float)
    if sizes.size == 0:
        return {"short": [], "long": []}
    p50, p90 = np.percentile(sizes, 50), np.percentile(sizes, 90)
    return {"short": [r for r, s in zip(done, sizes) if s <= p50],
            "long": [r for r, s in zip(done, sizes) if s >= p90 and s > p50]}


def _class_metric(records: list[Any], size: str, metric: str) -> float | None:
    import numpy as np

    from latscope.stats import e2e_ms, ttft_ms

    name, _, stat = metric.removesuffix("_ms").rpartition("_")
    of = {"ttft": ttft_ms, "e2e": e2e_ms}[name]
    values = [v for v in map(of, size_class(records)[size]) if v is not None]
    if not values:
        return None
    return float(np.mean(values) if stat == "mean" else np.percentile(values, float(stat[1:])))


@contextlib.contextmanager
def _arms(control: ServerControl, current: Running, proposal: Proposal, out_dir: Path):
    """Yields ``arm_url(arm)``: a context manager giving (url, model, tokenizer) of that arm's
    server. Concurrent controls keep B running beside A; others restart the server per run; a
    gateway's B is the running server behind one gateway (its own process: in this one it would
    share the client's CPU and event loop) kept for all B runs."""
    change = proposal.change
    if proposal.relaunches_with_gateway:
        with _relaunched_behind_gateway(control, current, proposal, out_dir) as arm_url:
            yield arm_url
        return
    if proposal.gateway is not None:
        from latscope.gateway import running_gateway

        with running_gateway(current.url, mode="process", **proposal.gateway) as gateway_url:
            urls = {"A": current.url, "B": gateway_url}

            @contextlib.contextmanager
            def through(arm: str) -> Iterator[tuple[str, str | None, str | None]]:
                yield urls[arm], current.model, current.tokenizer_dir

            yield through
        return
    if control.concurrent_arms:
        with control.start(change, out_dir / "server-B") as b:
            servers = {"A": current, "B": b}

            @contextlib.contextmanager
            def both(arm: str) -> Iterator[tuple[str, str | None, str | None]]:
                s = servers[arm]
                yield s.url, s.model, s.tokenizer_dir

            yield both
        return

    @contextlib.contextmanager
    def restart(arm: str) -> Iterator[tuple[str, str | None, str | None]]:
        with control.start(change if arm == "B" else None, out_dir / f"server-{arm}") as s:
            yield s.url, s.model or current.model, s.tokenizer_dir or current.tokenizer_dir

    with _set_aside(current):
        yield restart


def _set_aside(current: Running) -> ContextManager[None]:
    """The diagnosed server stopped while arms that start their own servers run (see
    ``servers.HeldServer``); a server latscope did not start is left as it is."""
    return current.set_aside() if current.set_aside else contextlib.nullcontext()


@contextlib.contextmanager
def _relaunched_behind_gateway(control: ServerControl, current: Running, proposal: Proposal,
                               out_dir: Path):
    """B: the server started with ``proposal.change`` and a gateway in front of it (its own
    process); beside A where two servers may run at once, else both started per B run. The
    gateway is told B's log, from which it reads the scheduling policy B runs with."""
    from latscope.gateway import running_gateway

    @contextlib.contextmanager
    def b_arm(log_dir: Path) -> Iterator[tuple[str, str | None, str | None, str]]:
        with control.start(proposal.change, log_dir) as b:
            options = dict(proposal.gateway or {})
            if b.log_path is not None:
                options.setdefault("server_log", str(b.log_path))
            tokenizer = b.tokenizer_dir or current.tokenizer_dir
            if tokenizer and "tokenizer" not in options:
                options["tokenizer"] = tokenizer  # tags from exact prompt counts, no round trip
            with running_gateway(b.url, mode="process", **options) as url:
                # the 4th item: B's own /metrics, not the gateway's
                yield url, b.model or current.model, tokenizer, b.url

    if control.concurrent_arms:
        with b_arm(out_dir / "server-B") as kept:

            @contextlib.contextmanager
            def beside(arm: str) -> Iterator[tuple[str, str | None, str | None, str]]:
                yield kept if arm == "B" else (current.url, current.model,
                                               current.tokenizer_dir, current.url)

            yield beside
        return

    @contextlib.contextmanager
    def restart(arm: str) -> Iterator[tuple[str, str | None, str | None, str]]:
        # each run its own server, A's too, as ``_arms`` restarts both (equally fresh)
        if arm == "B":
            with b_arm(out_dir / "server-B") as b:
                yield b
            return
        with control.start(None, out_dir / "server-A") as s:
            yield (s.url, s.model or current.model, s.tokenizer_dir or current.tokenizer_dir,
                   s.url)

    with _set_aside(current):
        yield restart

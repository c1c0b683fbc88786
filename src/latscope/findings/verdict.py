"""The verdict: one line a person can read aloud, from the ranked findings.

Rules of wording (tests/unit/findings/test_verdict_words.py): one load and one target per
sentence, the figures of one measurement; a remainder share measured where the client's timing
was unreliable is never the verdict; a host busy with other work is named before anything else;
"at capacity" names the knee, its throughput and what adds capacity, and calls a flag's TTFT/ITL
trade a trade.

The order: a measured cause (something to change, with the share it costs), else the server at
capacity, else a symptom that is half of its target or more (where the time goes, its cause not
named), else a setting whose cost no run measured, else healthy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from msgspec.structs import replace

from latscope.findings.abtest import experiment_text
from latscope.findings.causes import ACTING, symptom_of
from latscope.findings.impact import IMPACT_TARGETS, describe, where_words
from latscope.model import Finding, Severity
from latscope.results import ABResult, Proposal, Verdict

# A symptom (its cause not named) is the verdict only from this share of its target on: a
# smaller one is where time goes, not a fault (the healthy local target's API server takes a
# fixed ~48 ms, 27% of TTFT at its knee).
SYMPTOM_VERDICT = 0.5
CAPACITY = "capacity.saturated"
HOST_BUSY = "host.cpu_contention"
RESENT = "server.prefix_cache_resent"
QUEUE = "latency.queue"


@dataclass(frozen=True, slots=True)
class HealthySplit:
    """Where the TTFT goes at the load a healthy or at-capacity verdict reports."""

    where: str  # "c=16 (the knee)"
    ttft_ms: float  # mean client TTFT there
    split: str  # "queue 40%, prefill 30%, ..."
    rps: float


@dataclass
class VerdictInputs:
    """What the verdict reads besides the ranked findings (all typed, from the run)."""

    experiments: list[ABResult] = field(default_factory=list)
    proposals: list[Proposal] = field(default_factory=list)
    healthy: HealthySplit | None = None
    # what each of the server's own limits read where queueing was measured
    # (``findings.limits``): said when a queue is the verdict and none of them named its cause
    checks: list[str] = field(default_factory=list)


def verdict(ranked: list[Finding], inputs: VerdictInputs | None = None) -> Verdict:
    """The verdict over the ranked findings (``findings.conclude`` calls it)."""
    inputs = inputs or VerdictInputs()
    host = next((f for f in ranked if f.id == HOST_BUSY and f.severity in ACTING), None)
    resent = next((f for f in ranked if f.id == RESENT and f.severity in ACTING), None)
    result = _pick(ranked, inputs)
    if resent is not None:
        # a caveat on the measurement, never the verdict: the prefills came from the cache
        result = replace(result, prompts_resent=True, text=(
            f"Measured on prompts the server had seen: {resent.title}; TTFT below reads lower "
            f"than new prompts get. " + result.text))
    if host is not None and result.finding_id != HOST_BUSY:
        # named before any verdict: every figure after it was measured on a busy host
        result = replace(result, host_busy=True, text=(
            f"This host was busy with other work: {host.title}; every latency below is slower "
            f"than the server alone. " + result.text))
    return result


def _pick(ranked: list[Finding], inputs: VerdictInputs) -> Verdict:
    acting = [f for f in ranked if f.severity in ACTING and f.layer != "client"]
    measured = [f for f in acting if (f.impact or {}).get("share") is not None
                and not _unreliable_remainder(f)]
    cause = next((f for f in measured if f.role == "cause" and f.id != CAPACITY), None)
    if cause is not None:
        return _finding_verdict(cause, inputs, "cause")
    unmeasured = [f for f in acting if f.role == "cause" and f.id != CAPACITY
                  and (f.impact or {}).get("share") is None]
    # a setting whose fix an A/B measured to help has its cost measured by that A/B (the H200's
    # --enforce-eager through --serve-cmd: TPOT 26.7 -> 5.8 ms, and the verdict said HEALTHY
    # with "its cost not measured here")
    helped = {e.finding_id for e in inputs.experiments if e.helped}
    proven = next((f for f in unmeasured if f.id in helped), None)
    if proven is not None:
        return _finding_verdict(proven, inputs, "cause")
    unmeasured = [f for f in unmeasured if f.id not in helped]
    critical = next((f for f in unmeasured if f.severity == Severity.CRITICAL), None)
    capacity = next((f for f in acting if f.id == CAPACITY), None)
    if capacity is not None:
        return _also_check(_capacity_verdict(capacity), unmeasured)
    symptom = next((f for f in measured if f.role != "cause"
                    and (f.impact or {})["share"] >= SYMPTOM_VERDICT), None)
    if symptom is not None:
        return _with_checks(_finding_verdict(symptom, inputs, "symptom"), symptom, inputs)
    if critical is not None:  # a setting that breaks latency, its cost not measured here
        return _finding_verdict(critical, inputs, "cause")
    # a warning whose cost no run measured is not a verdict over measured health: named after it
    return _also_check(healthy_verdict(inputs.healthy), unmeasured)


def _also_check(result: Verdict, unmeasured: list[Finding]) -> Verdict:
    if unmeasured and result.kind != "none":
        names = "; ".join(f.title for f in unmeasured[:3])
        return replace(result, text=f"{result.text}. To check, its cost not measured here: {names}")
    return result


def _with_checks(result: Verdict, symptom: Finding, inputs: VerdictInputs) -> Verdict:
    """A queue named as the verdict with no cause: which of the server's own limits were
    checked and what each read (a queue behind no limit, with the GPU's busy share unknown,
    cannot be told from capacity), never a pointer to a finding that is not there."""
    if symptom.id == QUEUE and inputs.checks:
        return replace(result, text=result.text + ". No limit of the server's own was found "
                       "binding; checked: " + "; ".join(inputs.checks))
    return result


def _unreliable_remainder(f: Finding) -> bool:
    """The HTTP frontend's share is what is left of client TTFT after the parts measured: where
    the client's own timing was unreliable, the remainder is the client's lateness too."""
    return f.id == "latency.http_frontend" and (f.impact or {}).get("client_reliable") is False


def _finding_verdict(top: Finding, inputs: VerdictInputs, kind: str) -> Verdict:
    impact = top.impact or {}
    proof = next((e for e in inputs.experiments if e.finding_id == top.id), None)
    if impact.get("share") is None and proof is not None and proof.helped:
        text = top.title  # its cost is the A/B's, in the sentence added below
    elif impact.get("share") is None:
        text = f"{top.title} (its cost was not measured here)"
    elif impact.get("by") == "ab" and (symptom := symptom_of(top.id)) in SYMPTOM_WORDS:
        # the share is what the fix took off its metric, and the symptom the cause explains is
        # named: a CI run whose split found no queueing share still said "queueing" this way
        text = (f"{at_words(impact.get('measured_at') or 'the load measured')}, "
                f"{impact['share']:.0%} {target_words(impact.get('target'))} is "
                f"{SYMPTOM_WORDS[symptom or '']} (what the fix took off it). The cause: "
                f"{top.title}")
    elif impact.get("by") == "ab":  # its share is the A/B's: the fix's measured gain
        text = (f"{at_words(impact.get('measured_at') or 'the load measured')}, {top.title} costs "
                f"{impact['share']:.0%} {target_words(impact.get('target'))}")
    elif impact.get("explains") == "trace.gpu_idle":
        text = (f"{at_words(impact.get('measured_at') or 'the profiled load')}, the GPU is idle "
                f"{impact['share']:.0%} of the profile because of this: {top.title}")
    elif impact.get("explains") == "gpu.idle_time":
        text = (f"{at_words(impact.get('measured_at') or 'the load measured')}, the GPU is idle "
                f"{impact['share']:.0%} of the time (GPU telemetry) because of this: {top.title}")
    elif top.id == "gpu.idle_time":
        text = (f"{at_words(impact.get('measured_at') or 'the load measured')}, the GPU is idle "
                f"{impact['share']:.0%} of the time (GPU telemetry), its cause not named here: "
                f"{top.title}")
    elif top.id == "trace.gpu_idle":  # its share is idle time: never "... is GPU time"
        text = (f"{at_words(impact.get('measured_at') or 'the profiled load')}, the GPU is idle "
                f"{impact['share']:.0%} of the profile, its cause not named here: {top.title}")
    elif impact.get("explains"):
        # the symptom's share and the cause's own measurement in two sentences: the cause's
        # title may come from another load ("At c=64 ..., 50% of mean TTFT ...: other processes
        # used 90% of the server's CPUs during the run at c=1" on the H200)
        where = f"{at_words(impact['measured_at'])}, " if impact.get("measured_at") else ""
        text = (f"{where}{impact['share']:.0%} {target_words(impact.get('target'))} is "
                f"{SYMPTOM_WORDS.get(impact['explains'], layer_words(top))}. The cause: "
                f"{top.title}")
    else:
        where = f"{at_words(impact['measured_at'])}, " if impact.get("measured_at") else ""
        text = (f"{where}{impact['share']:.0%} {target_words(impact.get('target'))} is "
                f"{layer_words(top)}: {top.title}")
    text += _cost_elsewhere(top)
    if proof is not None:
        text += (f". Fix measured{_at_load(proof)}: {proof.change}: "
                 f"{experiment_text(proof, means=True)}")
    untried = _untried_fix(top, inputs, proof)
    if untried:
        text += f". Not measured here, to try next: {untried}"
    return Verdict(text=text, kind=kind, finding_id=top.id, healthy=False,
                   severity=top.severity.value, share=impact.get("share"),
                   target=impact.get("target"), measured_at=impact.get("measured_at"),
                   impact=describe(impact))


def _at_load(exp: ABResult) -> str:
    return f" at c={exp.load}" if exp.load else ""


def _cost_elsewhere(f: Finding) -> str:
    """A cost the cause's own rule measured on another target, as its own sentence (eager mode
    costs decode steps: ITL, not only GPU idle time)."""
    itl = next((e for e in f.evidence if e.name.startswith("ITL p50 at")), None)
    return f". Decode steps: {itl.name.removeprefix('ITL ')} {itl.value} {itl.unit}" if itl \
        else ""


def _capacity_verdict(f: Finding) -> Verdict:
    return Verdict(text=f.title + (f". {f.fix}" if f.fix else ""), kind="capacity",
                   finding_id=f.id, healthy=True, severity=f.severity.value,
                   measured_at=(f.impact or {}).get("measured_at"))


def _untried_fix(top: Finding, inputs: VerdictInputs, proof: ABResult | None) -> str | None:
    """The finding's proposed fix that no A/B measured, when the one measured did not help (on
    an H200 with a full batch the verdict told only of the gateway that made it worse, not of
    the --max-num-seqs it could not prove through --url)."""
    if proof is not None and proof.helped:
        return None
    measured = {e.change for e in inputs.experiments}
    return next((p.change for p in inputs.proposals
                 if p.finding_id == top.id and p.change not in measured), None)


def healthy_verdict(healthy: HealthySplit | None) -> Verdict:
    if not healthy:
        return no_verdict("No verdict: no load was measured (see the stages for why)")
    text = (f"No configuration fault found. {at_words(healthy.where)}: {healthy.rps:.2f} req/s, "
            f"mean TTFT {healthy.ttft_ms:.0f} ms ({healthy.split})")
    return Verdict(text=text, kind="healthy", finding_id=None, healthy=True,
                   measured_at=healthy.where)


def no_verdict(why: str) -> Verdict:
    return Verdict(text=why, kind="none", finding_id=None, healthy=False)


def at_words(where: str) -> str:
    """``At c=16 (the knee)``, ``Over the last 10 min of live traffic`` (``where_words``)."""
    words = where_words(where)
    return words[0].upper() + words[1:]


def target_words(target: str | None) -> str:
    return IMPACT_TARGETS.get(target or "", "").replace(" client", "")


# What a cause's share is a share of, in words: the symptom it explains (findings/causes.toml)
SYMPTOM_WORDS = {"latency.engine_frontend": "the API server's own processing (tokenization, "
                 "IPC, output processing)", "latency.queue": "queueing",
                 "latency.http_frontend": "the HTTP frontend",
                 "trace.collective_share": "collective communication",
                 "trace.exposed_communication": "communication not hidden behind compute",
                 "trace.rank_straggler": "waiting for the slowest rank"}


def layer_words(f: Finding) -> str:
    if f.id == "latency.engine_frontend":
        return "the API server's own processing"
    return {"queue": "queueing", "network": "the network", "frontend": "the HTTP frontend",
            "prefill": "prefill", "decode": "decode", "gpu": "GPU time", "config": "configuration",
            "host": "the host", "capacity": "the server's capacity",
            "stall": "waiting on a stalled engine"}.get(f.layer, f.layer or "this")


def verdict_matches(given: dict[str, Any], expect: dict[str, Any]) -> tuple[bool, str]:
    """Whether a verdict is the one a scenario expected (benchmarks/diagnose_matrix.py):
    ``{"kind": "healthy" | "capacity" | "cause", "finding": id or [ids], "no_flag_blamed"}``."""
    kind = given.get("kind") or ("healthy" if given.get("healthy") else "cause")
    if expect["kind"] == "cause":
        wanted = expect["finding"]
        wanted = [wanted] if isinstance(wanted, str) else list(wanted)
        if given.get("finding_id") in wanted:
            return True, ""
        return False, f"named {given.get('finding_id') or kind}, expected {' or '.join(wanted)}"
    if kind != expect["kind"]:
        return False, f"{kind} ({given.get('finding_id')}), expected {expect['kind']}"
    if expect.get("no_flag_blamed") and given.get("finding_id", "").startswith("server.queue"):
        return False, f"blamed {given['finding_id']}"
    return True, ""

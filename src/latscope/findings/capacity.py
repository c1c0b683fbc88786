"""Capacity before configuration: is queueing past the knee overload, or a limit a flag sets?

A server whose throughput stopped growing with load, whose GPU (when a profile says) was busy,
and none of whose own limits was binding (a full batch at max_num_seqs, a full KV cache, engine
steps full of tokens: those rules fire on the server's own counters) is *at capacity*: the knee
is its throughput, and what adds capacity is more GPU (replicas, tensor parallelism, a smaller
or quantized model). A flag then only trades TTFT against ITL; it is named as a trade, not a fix
(docs/findings.md#capacity.saturated).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from latscope.model import Evidence, Finding, Severity

REF = "docs/findings.md#capacity.saturated"
# Throughput grew less than this per doubling of the load: the step measured no more capacity.
PLATEAU_GAIN = 0.15
# The GPU's busy share (union of its activity over a profile's window) below which the host, not
# the GPU, is the limit: the GPU-idle finding and its cause are the answer then.
GPU_BUSY_SATURATED = 0.7
# The settings whose binding (found on the server's counters) sets a knee below the GPU's.
# The API server's share of TTFT from which its CPU may be what limits the server.
FRONTEND_BOUND = 0.33
# Queueing this share of mean TTFT past the knee, with no limit binding and the GPU busy, is the
# offered load past what the server serves, even while throughput still creeps up (an H200 at
# c=256 with 1k prompts: 71% queueing, its GPU busy 96% of the profile, throughput +16% per
# doubling: no plateau, and the verdict was a bare queue symptom).
QUEUE_DOMINATES = 0.5
BINDING = ("server.queue_max_num_seqs", "server.kv_saturation", "server.preemptions",
           "server.queue_token_budget")


@dataclass(frozen=True, slots=True)
class Point:
    load: float
    requests_per_s: float
    output_tokens_per_s: float | None = None


@dataclass(frozen=True, slots=True)
class GpuBusy:
    share: float  # 1 - idle share of the profile's window, or the telemetry's utilisation
    where: str  # the load it was measured at, e.g. "c=64 (the knee)"
    source: str
    # "profile" (union of kernel activity over its window) or "telemetry" (NVML / amdsmi
    # utilisation: a sample period with any kernel in it reads busy, short gaps between kernels too)
    kind: str = "profile"

    @property
    def of_what(self) -> str:
        return "the profile" if self.kind == "profile" else "the time (GPU telemetry)"


def last_gain(points: list[Point]) -> tuple[Point, Point, float] | None:
    """(previous, last, throughput gain per doubling of the load) of the last load step; None
    with fewer than three measured loads."""
    pts = sorted((p for p in points if p.requests_per_s > 0), key=lambda p: p.load)
    if len(pts) < 3:
        return None
    prev, last = pts[-2], pts[-1]
    if last.load <= prev.load:
        return None
    doublings = math.log2(last.load / prev.load)
    return prev, last, (last.requests_per_s / prev.requests_per_s) ** (1 / doublings) - 1


def plateau(points: list[Point]) -> tuple[Point, Point, float] | None:
    """(previous, last, gain per doubling) when the last load step gained less than
    ``PLATEAU_GAIN`` per doubling of the load; None while throughput still grows."""
    step = last_gain(points)
    return step if step is not None and step[2] < PLATEAU_GAIN else None


def queue_past_knee(findings: list[Finding], knee: float | None) -> Finding | None:
    """The queue's share of TTFT where it dominates (``QUEUE_DOMINATES`` or more) at a load past
    the knee: the symptom of an offered load the server cannot serve when no limit binds."""
    if knee is None:
        return None
    return next((f for f in findings if f.id == "latency.queue" and f.impact
                 and (f.impact.get("share") or 0.0) >= QUEUE_DOMINATES
                 and (f.impact.get("load") or 0.0) > knee), None)


def _gain_words(gain: float) -> str:
    """"rose only +5%" or "fell 6%": a plateau's last step may lose throughput too; past the
    plateau's bound, "rose +16%"."""
    if gain >= PLATEAU_GAIN:
        return f"rose {gain:+.0%}"
    return f"rose only {gain:+.0%}" if gain >= 0 else f"fell {-gain:.0%}"


def _throughput(p: Point) -> Evidence:
    return Evidence(f"throughput at c={p.load:g}", round(p.requests_per_s, 3), "req/s",
                    "the sweep's steady window")


def capacity_finding(points: list[Point], knee: float | None, recommended: float | None,
                     findings: list[Finding], gpu: GpuBusy | None, split_at_knee: str,
                     knee_label: str) -> Finding | None:
    """``capacity.saturated`` when no limit of the server's own was binding, the GPU (where its
    busy share was measured) was busy, and either the sweep passed a plateau or, throughput
    still creeping up, queueing dominated TTFT past the knee with the GPU measured busy; None
    otherwise."""
    acting = {f.id for f in findings if f.severity in (Severity.CRITICAL, Severity.WARNING)}
    if acting & set(BINDING):
        return None  # a flag sets this knee: its rule is the answer
    if gpu is not None and gpu.share < GPU_BUSY_SATURATED:
        return None  # the GPU waited: the host is the limit (trace.gpu_idle and its cause)
    step = plateau(points)
    queue = queue_past_knee(findings, knee)
    if step is None and (gpu is None or queue is None):
        return None  # throughput still grows, and nothing shows the GPU spent
    step = step or last_gain(points)
    if step is None:
        return None
    prev, last, gain = step
    at = next((p for p in points if p.load == knee), None) or prev
    tok = f", {at.output_tokens_per_s:,.0f} output tok/s" if at.output_tokens_per_s else ""
    sentences = [f"At {knee_label}, the server is at capacity: {at.requests_per_s:.1f} req/s{tok}",
                 f"Past it, throughput {_gain_words(gain)} per doubling of the load, from "
                 f"c={prev.load:g} to c={last.load:g}"]
    if gain >= PLATEAU_GAIN and queue is not None and queue.impact:
        sentences[1] = (f"Past it, throughput still {_gain_words(gain)} per doubling of the load "
                        f"(c={prev.load:g} to c={last.load:g}), but queueing took "
                        f"{queue.impact['share']:.0%} of mean TTFT at "
                        f"{queue.impact.get('measured_at') or f'c={last.load:g}'} with none of "
                        "its own limits binding: the offered load is past what it serves")
    if gpu is not None:
        sentences.append(f"The GPU was busy {gpu.share:.0%} of {gpu.of_what} at {gpu.where}")
    run_at = f"Run at c<={recommended:g} (10% left of the knee). " if recommended else ""
    frontend = next((f for f in findings if f.id == "latency.engine_frontend" and f.impact
                     and f.impact.get("share", 0) >= FRONTEND_BOUND), None)
    if frontend is not None and frontend.impact:
        # one API server process tokenizes and detokenizes for the whole engine: where it is
        # a third of TTFT or more at the top, a second one may be the capacity to add
        sentences.append(f"The API server's own processing was {frontend.impact['share']:.0%} "
                         f"of mean TTFT at {frontend.impact.get('measured_at', 'the top')}: a "
                         "second API server (--api-server-count 2) may add capacity; measure it")
    # what the sentence rests on first (the knee, the top, the gain, the queue, the GPU): a
    # terminal shows a finding's first few lines of evidence, the rest of the curve after them
    lead = [at, last] if at is not last else [last]
    evidence = [_throughput(p) for p in lead]
    evidence.append(Evidence("throughput gain per doubling, last step", round(gain, 4), "",
                             f"c={prev.load:g} -> c={last.load:g}"))
    if queue is not None and queue.impact:
        evidence.append(Evidence(f"queueing at {queue.impact.get('measured_at', '')}",
                                 queue.impact["share"], "share of mean TTFT",
                                 "the TTFT split of that run"))
    if gpu is not None:
        evidence.append(Evidence(f"GPU busy at {gpu.where}", round(gpu.share, 4),
                                 f"share of {gpu.of_what}", gpu.source))
    evidence += [_throughput(p) for p in sorted(points, key=lambda p: -p.load)
                 if p not in lead]
    return Finding(
        id="capacity.saturated", severity=Severity.WARNING, layer="capacity",
        title=". ".join(sentences),
        evidence=evidence,
        why=("Past the knee, more concurrent requests only wait longer: the server completes no "
             "more of them per second. None of its own limits (max_num_seqs, the KV cache, the "
             "per-step token budget) was binding, so no flag adds capacity."),
        fix=(f"{run_at}TTFT at the knee: {split_at_knee}. More capacity needs more GPU: "
             "replicas, tensor parallelism, or a smaller or quantized model; "
             "--max-num-batched-tokens and --max-num-seqs only trade TTFT against ITL here."),
        reference=REF)

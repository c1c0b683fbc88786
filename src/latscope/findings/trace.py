"""Findings (``trace.*`` ids) from an ``analyze_trace`` result: what a user should act on.

Thresholds are reporting thresholds (when a number is worth a line), not tuning rules; each
finding carries the exact values it was judged on and where they were read.
"""

from __future__ import annotations

from pathlib import Path

from latscope.findings.impact import make_impact
from latscope.model import Evidence, Finding, Severity
from latscope.trace.files import StoredTrace
from latscope.trace.names import short_event_name
from latscope.trace.results import CrossRankView, DeviceAnalysis, TraceAnalysis, TraceSource

IDLE_CRITICAL, IDLE_WARNING = 0.5, 0.2
EXPOSED_COPY_WARNING, EXPOSED_COMM_WARNING = 0.05, 0.10
GENERIC_WARNING = 0.05
_REF = "docs/findings.md"


def trace_findings_of(stored: StoredTrace | None) -> list[Finding]:
    """Every rank's trace findings (merged later, one per id: the worst rank's) and the
    cross-rank findings, from the stored analysis."""
    from latscope.findings.crossrank import crossrank_findings

    if stored is None:
        return []
    out = [f for rank in stored.ranks() for f in trace_findings(rank)]
    view = stored.cross_rank
    return out + crossrank_findings(view if isinstance(view, CrossRankView) else None)


def trace_findings(result: TraceAnalysis) -> list[Finding]:
    source = result.source
    skipped = _skipped(source)
    if not result.devices:
        return skipped + [Finding(id="trace.no_gpu_activity", severity=Severity.SKIPPED,
                        title="the trace holds no GPU activity (a CPU-only profile?): nothing "
                              "to break down", layer="gpu",
                        reference=f"{_REF}#trace.no_gpu_activity",
                        evidence=[Evidence("gpu events", 0, source=source.path)])]
    out: list[Finding] = list(skipped)
    for dev in result.devices:
        where = f"{Path(source.path).name} device {dev.device}"
        out += [_idle(dev, where), *_copies(dev, where), *_generic(dev, where),
                *_comm(dev, where), *_clamp(dev, where)]
    return out


def _skipped(source: TraceSource) -> list[Finding]:
    """Events dropped because they cannot be real: the numbers below leave them out."""
    skipped = source.skipped
    if not skipped:
        return []
    total = sum(skipped.values())
    where = Path(source.path).name
    return [Finding(
        id="trace.skipped_events", severity=Severity.WARNING, layer="gpu",
        title=f"skipped {total} event{'s' if total != 1 else ''} that cannot be real: "
              + ", ".join(f"{n} {reason}" for reason, n in skipped.items()),
        evidence=[Evidence(reason, n, "events", where) for reason, n in skipped.items()],
        why="A negative or day-long duration, a time that is no number or beyond 2**62 ns, or an "
            "entry that is not an event object cannot come from a profiler clock: the file was "
            "damaged or written by a broken tool. The analysis leaves these events out.",
        fix="Re-record the trace, or check the tool that wrote or edited it.",
        reference=f"{_REF}#trace.skipped_events")]


def _ms(ns: float) -> float:
    return round(ns / 1e6, 3)


def _idle(dev: DeviceAnalysis, where: str) -> Finding:
    b, gaps = dev.breakdown, dev.gaps
    # rounded as the impact rounds it, so the title and the verdict's sentence give one figure
    # (0.73499 read "GPU idle 73%" beside "idle 74% of the profile" on the H200's eager run)
    share = round(b.idle_share, 4)
    severity = (Severity.CRITICAL if share >= IDLE_CRITICAL else
                Severity.WARNING if share >= IDLE_WARNING else Severity.OK)
    cpu = gaps.cpu_during_idle
    host_share = gaps.by_cause.host_wait_ns / b.idle_ns if b.idle_ns else 0.0
    kinds = ", ".join(f"{k.kind} {k.share_of_idle:.0%}" for k in cpu.self_time_by_kind[:4])
    top = "; ".join(f"{short_event_name(e.name, 70)} {_ms(e.self_ns)} ms"
                    for e in cpu.top_events[:3])
    evidence = [
        Evidence("window", _ms(b.window_ns), "ms", f"{where} ({dev.window.method})"),
        Evidence("idle (window - union of all GPU activity)", _ms(b.idle_ns), "ms", where),
        Evidence("idle share", round(share, 4), "", where),
        Evidence("idle gaps", gaps.count, "", where),
        Evidence("idle where the next GPU work was issued after the GPU went idle",
                 round(host_share, 4), "share of idle", where),
        Evidence("launching thread's self time during idle, by kind", kinds, "", where),
        Evidence("top CPU self time during idle", top, "", where),
    ]
    delay = gaps.launch_delay
    if delay.count + delay.graph_launched:
        # eager vs graph mode: per-op launches where graph capture was expected
        # (docs/findings.md#trace.gpu_idle)
        evidence.append(Evidence("GPU activities launched by a graph replay",
                                 f"{delay.graph_launched} of {dev.activities}", "", where))
    if delay.count and isinstance(delay.median_ns, float):
        evidence.append(Evidence("launch delay median (GPU start - API end)",
                                 round(delay.median_ns / 1e3, 2), "us", where))
    unknown = gaps.by_cause.unknown_ns
    if b.idle_ns and unknown >= 0.99 * b.idle_ns:
        why = (f"The GPU ran nothing for {share:.0%} of the window. This trace has no CPU calls "
               "correlated with the GPU work, so it cannot say what the host was doing; "
               "re-record with CPU activity (PyTorch profiler, or rocprofv3 --hip-trace / "
               "nsys -t cuda) to see the cause.")
    else:
        why = ""
    why = why or (f"The GPU ran nothing for {share:.0%} of the window. In {host_share:.0%} of "
           "that idle "
           "time the CPU call that issued the next GPU work started only after the GPU had "
           "gone idle: the GPU was waiting for the host to issue work (launch-bound), not the "
           f"other way round. Meanwhile the launching thread was in: {kinds}.")
    return Finding(
        id="trace.gpu_idle", severity=severity, layer="gpu",
        title=(f"GPU idle {share:.0%} of the {_ms(b.window_ns)} ms window "
               f"(device {dev.device})" + ("; the host issued work too slowly"
                                              if host_share >= 0.5 and severity != Severity.OK
                                              else "")),
        evidence=evidence, why=why if severity != Severity.OK else "",
        fix=("Cut per-step host overhead: CUDA/HIP graphs (vLLM: do not pass --enforce-eager; "
             "check the cudagraph capture sizes cover your batch sizes), torch.compile, fewer "
             "small ops; then re-record and compare with `latscope trace --compare`."),
        reference=f"{_REF}#trace.gpu_idle",
        impact=make_impact("gpu_window", share, value_ms=_ms(b.idle_ns),
                           measured_at=where))


def _copies(dev: DeviceAnalysis, where: str) -> list[Finding]:
    out = []
    c, b = dev.copies, dev.breakdown
    exposed = b.exposed_copy_share
    if exposed >= EXPOSED_COPY_WARNING:
        out.append(Finding(
            id="trace.exposed_copies", severity=Severity.WARNING, layer="gpu",
            title=f"copies not hidden behind compute take {exposed:.0%} of the window",
            evidence=[Evidence("exposed copy time", _ms(b.exposed_copy_ns), "ms", where)],
            why="While only a copy runs, no kernel runs.",
            fix="Pin host buffers and overlap copies with compute (non_blocking, separate "
                "stream), or avoid the copy.", reference=f"{_REF}#trace.exposed_copies",
            impact=make_impact("gpu_window", exposed, measured_at=where)))
    pageable = [r for r in c.by_direction if r.pageable_count]
    if pageable:
        count = sum(r.pageable_count for r in pageable)
        time = sum(r.pageable_time_ns for r in pageable)
        out.append(Finding(
            id="trace.pageable_copies",
            severity=Severity.WARNING if time >= 0.01 * b.window_ns else Severity.INFO,
            layer="gpu", title=f"{count} host copies use pageable memory",
            evidence=[Evidence(f"{r.direction} pageable copies", r.pageable_count, "",
                               f"{where}; {c.host_memory_method}") for r in pageable]
            + [Evidence("pageable copy time", _ms(time), "ms", where)],
            why="A pageable copy is staged through a pinned bounce buffer and cannot overlap "
                "with host work.",
            fix="Allocate the host tensors pinned (pin_memory=True) and copy with "
                "non_blocking=True.", reference=f"{_REF}#trace.pageable_copies"))
    blocking = sum(r.blocking_count for r in c.by_direction)
    if blocking:
        out.append(Finding(
            id="trace.blocking_copies", severity=Severity.INFO, layer="gpu",
            title=f"{blocking} copies were issued by a blocking API (the CPU waited)",
            evidence=[Evidence("blocking copies", blocking, "",
                               f"{where}; APIs cudaMemcpy/hipMemcpy/hipMemcpyWithStream")],
            why="The host thread stalls until the copy finishes, so it cannot queue more work.",
            fix="Use async copies from pinned memory where the result is not needed at once.",
            reference=f"{_REF}#trace.blocking_copies"))
    return out


def _of_window(share_of_busy: float, dev: DeviceAnalysis) -> float:
    """A share of the device's busy time as a share of its window (the common GPU target)."""
    b = dev.breakdown
    return share_of_busy * b.busy_ns / b.window_ns if b.window_ns else 0.0


def _generic(dev: DeviceAnalysis, where: str) -> list[Finding]:
    out = []
    for rule in dev.kernels.fallbacks:
        share = rule.share_of_kernel_time
        out.append(Finding(
            id=f"trace.generic_kernels.{rule.rule}",
            severity=Severity.WARNING if share >= GENERIC_WARNING else Severity.INFO,
            layer="gpu",
            title=f"{rule.count} generic-path kernels ({rule.rule}): {share:.1%} of kernel "
                  "time",
            evidence=[Evidence("time", _ms(rule.sum_ns), "ms", where),
                      Evidence("share of summed kernel time", round(share, 4), "", where),
                      Evidence("examples", " | ".join(e[:90] for e in rule.examples), "",
                               where)],
            why=rule.why,
            fix="Check which op launches it (same trace, CPU side) and whether an optimised "
                "kernel exists for this dtype/shape/layout; compare with a trace from a "
                "reference setup.", reference=f"{_REF}#trace.generic_kernels",
            impact=make_impact("gpu_window", _of_window(rule.share_of_busy, dev),
                               value_ms=_ms(rule.sum_ns), measured_at=where)))
    return out


def _comm(dev: DeviceAnalysis, where: str) -> list[Finding]:
    b = dev.breakdown
    if b.exposed_comm_share < EXPOSED_COMM_WARNING:
        return []
    return [Finding(
        id="trace.exposed_communication", severity=Severity.WARNING, layer="gpu",
        title=f"communication not overlapped with compute: {b.exposed_comm_share:.0%} "
              "of the window",
        evidence=[Evidence("exposed communication", _ms(b.exposed_comm_ns), "ms", where),
                  Evidence("all communication (union)", _ms(b.communication_ns), "ms", where)],
        why="Collectives that do not overlap compute add directly to step time.",
        fix="Check the interconnect and collective algorithm (e.g. custom all-reduce); "
            "compare against the same model at a lower tensor-parallel size.",
        reference=f"{_REF}#trace.exposed_communication",
        impact=make_impact("gpu_window", b.exposed_comm_share, measured_at=where))]


def _clamp(dev: DeviceAnalysis, where: str) -> list[Finding]:
    q = dev.queue_clamp
    if not q.overlapping_pairs:
        return []
    if q.applied:
        title = (f"{q.activities_clamped} same-queue overlapping timestamps clamped "
                 f"({_ms(q.overlap_removed_ns)} ms removed)")
        why = ("A queue runs in order; overlapping timestamps on one queue are a known AMD "
               "firmware timestamp error (roctracer #104/#105), not concurrency.")
    else:
        title = f"{q.overlapping_pairs} same-stream activities overlap (left as recorded)"
        why = "Reported only; the union-based numbers are unaffected by the overlap."
    return [Finding(id="trace.queue_overlap", severity=Severity.INFO, layer="gpu", title=title,
                    evidence=[Evidence("overlapping pairs", q.overlapping_pairs, "", where)],
                    why=why, fix="None needed; use --no-clamp to keep the raw timestamps.",
                    reference=f"{_REF}#trace.queue_overlap")]

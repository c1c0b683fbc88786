"""How far latscope's own client can be trusted in one run: the one table of its thresholds.

Two levels per figure. From ``warn`` on, bench prints a warning beside its result (the figures
may be late by that much). From ``unreliable`` on, the run's client timing is unreliable: the
findings engine then blames neither the network nor the HTTP frontend on what the client measured
(a late client stamps first tokens late), an A/B measures such a run again, and the report says
so. Both levels live here, in the ground, because the load layer (bench's warnings) and the
findings engine (the judgement) both read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from latscope.results import ClientSection
from latscope.runfiles import BenchSummary, ClientFigures


@dataclass(frozen=True, slots=True)
class Threshold:
    """One figure of the client's own cost and the levels that make it a warning, make the
    run's client timing unreliable, or make two runs incomparable for ``latscope compare``
    (None: that level does not apply to this figure)."""

    warn: float | None
    unreliable: float | None
    meaning: str
    incomparable: float | None = None


CLIENT_THRESHOLDS: dict[str, Threshold] = {
    # the loop thread ready to run but off the CPU (run-queue wait / wall): the host's cores are
    # held by other processes; at a quarter of the run, a quarter of the timestamps could each
    # be a time slice of another process late
    # compare refuses a pair where either run's loop waited 10%: a comparison of a few percent
    # needs quieter CPUs than one diagnose run (same-configuration pairs with a side at 16% and
    # 25% moved TTFT +113% and E2E +46% on a shared 2-core box; docs/compare.md)
    "off_cpu_share": Threshold(0.05, 0.25, "share of the run the client's event loop waited "
                               "for a CPU", incomparable=0.10),
    # one core saturated: sends and reads queue behind the client's own work
    "cpu_utilization": Threshold(0.9, 0.9, "share of one CPU core the client used"),
    "loop_lag_p99_ms": Threshold(5.0, None, "event-loop lag p99, ms"),
    # a tail of late stamps as long as a typical TTFT
    "loop_lag_p99_per_ttft_p50": Threshold(None, 1.0, "event-loop lag p99 over TTFT p50"),
    # the client's own send and receive delay against the mean TTFT it measured
    "client_share_of_ttft": Threshold(None, 0.10, "the client's own delay, share of mean TTFT"),
    # requests that left later than planned: over 5 ms, or over 1 ms and a tenth of TTFT p50
    "send_lag_p99_ms": Threshold(5.0, None, "send lag p99, ms"),
    "send_lag_p99_ms_small": Threshold(1.0, None, "send lag p99 (ms) that warns when it is "
                                       "also a tenth of TTFT p50"),
    "send_lag_p99_per_ttft_p50": Threshold(0.1, None, "send lag p99 over TTFT p50"),
}


def level(name: str, kind: str) -> float:
    """A threshold's value (``kind`` "warn" or "unreliable"); a missing level is a bug."""
    value = getattr(CLIENT_THRESHOLDS[name], kind)
    if value is None:
        raise KeyError(f"{name} has no {kind} level")
    return float(value)


FIX = ("give the client its own cores (taskset -c, or another host on the same network) or "
       "fewer concurrent streams per process")


@dataclass(frozen=True, slots=True)
class ClientReliability:
    """Whether the client's own timing can be trusted in one run, why not, and its figures."""

    reliable: bool = True
    why: str = ""
    off_cpu_share: float | None = None
    loop_lag_p99_ms: float | None = None
    loop_lag_mean_ms: float | None = None
    send_lag_p99_ms: float | None = None
    cpu_utilization: float | None = None
    cpu_per_token_us: float | None = None
    fix: str = ""
    reasons: tuple[str, ...] = field(default=(), repr=False)

    def section(self, load: float | None = None, same_host: bool | None = None
                ) -> ClientSection:
        """As report.json's client section holds it (the reasons joined in ``why``), at the
        load it was judged at."""
        return ClientSection(reliable=self.reliable, why=self.why,
                             off_cpu_share=self.off_cpu_share,
                             loop_lag_p99_ms=self.loop_lag_p99_ms,
                             loop_lag_mean_ms=self.loop_lag_mean_ms,
                             send_lag_p99_ms=self.send_lag_p99_ms,
                             cpu_utilization=self.cpu_utilization,
                             cpu_per_token_us=self.cpu_per_token_us, fix=self.fix, load=load,
                             same_host=same_host)


def off_cpu_share(figures: dict[str, Any]) -> float | None:
    """The share of the run the client's loop thread waited for a CPU (run-queue wait / wall),
    from the client's figures as the load engine gathers them."""
    return waited_share(figures.get("run_queue_wait_s"), figures.get("wall_s"))


def waited_share(wait_s: float | None, wall_s: float | None) -> float | None:
    """Run-queue wait over wall time, at most 1; None where either was not measured."""
    return min(1.0, wait_s / wall_s) if wait_s is not None and wall_s else None


def judge_client(summary: BenchSummary, client_ms: float | None = None,
                 ttft_mean_ms: float | None = None) -> ClientReliability:
    """The client's reliability in a run, from its summary (``client`` figures, TTFT p50) and,
    where a decomposition split it off, its own delay's mean against the mean TTFT."""
    client = summary.client if isinstance(summary.client, ClientFigures) else ClientFigures()
    lag, ttft = client.loop_lag_ms, summary.ttft_ms
    reasons = []
    if client_ms and ttft_mean_ms:
        share = client_ms / ttft_mean_ms
        if share >= 1.0:  # no share above 100% is printed: the parts disagree past that
            reasons.append(f"its own send and receive delay ({client_ms:.1f} ms) is longer "
                           f"than the mean TTFT it measured ({ttft_mean_ms:.1f} ms)")
        elif share >= level("client_share_of_ttft", "unreliable"):
            reasons.append(f"its own send and receive delay is {share:.0%} of mean TTFT")
    lag_p99, ttft_p50 = lag.get("p99"), ttft.get("p50")
    if lag_p99 and ttft_p50 and \
            lag_p99 >= level("loop_lag_p99_per_ttft_p50", "unreliable") * ttft_p50:
        reasons.append(f"event-loop lag p99 {lag_p99:.1f} ms against a TTFT p50 of "
                       f"{ttft_p50:.1f} ms")
    cpu = client.cpu_utilization or 0.0
    if cpu >= level("cpu_utilization", "unreliable"):
        reasons.append(f"the client used {cpu:.0%} of a CPU core")
    off_cpu = waited_share(client.run_queue_wait_s, client.wall_s)
    if off_cpu is not None and off_cpu >= level("off_cpu_share", "unreliable"):
        reasons.append(f"its event loop waited for a CPU {off_cpu:.0%} of the run (other "
                       "processes held its cores)")
    return ClientReliability(
        reliable=not reasons, why="; ".join(reasons), off_cpu_share=off_cpu,
        loop_lag_p99_ms=lag_p99, loop_lag_mean_ms=lag.get("mean"),
        send_lag_p99_ms=client.send_lag_p99_ms, cpu_utilization=client.cpu_utilization,
        cpu_per_token_us=client.cpu_us_per_output_token,
        fix=FIX if reasons else "", reasons=tuple(reasons))

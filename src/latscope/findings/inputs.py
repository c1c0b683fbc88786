"""What the conclusion reads: typed facts that any orchestration gathers (diagnose's sweep, its
replay, a bench run, a passive window) and hands to ``findings.conclude.conclude``.

Every fact is read from its source once, by the layer that owns it (a run directory's files by
``campaign.observe``, the log by ``server.logs``, the trace by ``trace``); the conclusion reads
no file and calls every rule itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from latscope.model import Finding, MetricSnapshot
from latscope.reliability import ClientReliability
from latscope.results import ABResult, Proposal

if TYPE_CHECKING:
    from latscope.analysis.decompose import Decomposition
    from latscope.analysis.spanwindow import SpanWindow
    from latscope.analysis.traffic import WindowFacts
    from latscope.env.hostload import HostCpu
    from latscope.fleet.model import FleetFacts
    from latscope.server.logs import ServerLog
    from latscope.telemetry.facts import TelemetryFacts
    from latscope.trace.files import StoredTrace


@dataclass(frozen=True, slots=True)
class Throughput:
    requests_per_s: float = 0.0
    output_tokens_per_s: float | None = None
    total_tokens_per_s: float | None = None


@dataclass(frozen=True, slots=True)
class PromptReuse:
    """Whether the server's prefix cache served the measured prompts though they were drawn to
    share nothing (a chat template or a shared prefix is a prefix every request shares)."""

    hit_rate: float | None
    drawn_to_share: bool
    seed: int | None = None


@dataclass(frozen=True, slots=True)
class Measured:
    """What was measured at one load (a sweep step) or over one window: each fact as its layer
    read it. ``client`` is None where no latscope client measured (the server's own traffic)."""

    label: str  # "c=16 (the knee)": where, in the words of every sentence that cites it
    load: float | None = None
    decomposition: Decomposition | None = None
    snapshots: tuple[MetricSnapshot, ...] = ()
    cpu: HostCpu | None = None  # the host's CPUs over the run (env.hostload)
    telemetry: TelemetryFacts | None = None  # the GPUs over the run (telemetry.facts)
    client: ClientReliability | None = None
    prompts: PromptReuse | None = None
    throughput: Throughput = field(default_factory=Throughput)
    itl_p50_ms: float | None = None
    source: str = ""  # where the /metrics rules say their scrapes came from

    def parts_ms(self) -> dict[str, float]:
        """The mean ms of each part of the decomposition (``ttft``, ``ttft.server.queue`` ...)."""
        d = self.decomposition
        return {c.key: c.mean_ms for c in (d.components if d else []) if c.mean_ms is not None}


@dataclass(frozen=True, slots=True)
class Levels:
    """The named loads of a sweep: light (the lowest), the knee (Kneedle's), the top (the
    highest), and the load recommended to run at (10% left of the knee)."""

    light: float | None = None
    knee: float | None = None
    top: float | None = None
    recommended: float | None = None

    def named(self) -> dict[str, float]:
        return {k: v for k in ("light", "knee", "top") if (v := getattr(self, k)) is not None}

    def label(self, load: float) -> str:
        """``c=16 (past the knee at c=8)``, ``c=8 (the knee)``, ``c=1 (light load)``."""
        names = [n for n, v in self.named().items() if v == load]
        if "knee" in names:
            where = "the knee"
        elif "light" in names:
            where = "light load"
        elif self.knee is not None and load > self.knee:
            where = f"past the knee at c={self.knee:g}"
        else:
            where = "the highest load measured; no knee found"
        return f"c={load:g} ({where})"

    def verdict_load(self) -> float | None:
        """Where a healthy or capacity verdict reports the split: the knee, else the top."""
        return self.knee if self.knee is not None else self.top


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """The server's own limits and where each was read (its command line, log or config).
    ``budget_set`` is the --max-num-batched-tokens the server was started with (None: vLLM's
    default), so that a non-default budget's trade can be named."""

    max_num_seqs: int | None = None
    max_num_seqs_source: str = ""
    max_num_batched_tokens: int | None = None
    budget_set: int | None = None


@dataclass(frozen=True, slots=True)
class DoctorFacts:
    """doctor's findings (its checks ran on the live host, so they are read as made) and the
    facts the conclusion weighs them by."""

    findings: tuple[Finding, ...] = ()
    gpu_vendor: str | None = None


@dataclass(frozen=True, slots=True)
class TraceFacts:
    """The stored analysis of a profiler trace (``trace.json``: one rank, or every rank's with
    the cross-rank view), the load it was taken at, and whether diagnose took it (``--profile``)
    rather than being handed a file."""

    analysis: StoredTrace
    profiled: bool = False
    load: float | None = None


@dataclass(frozen=True, slots=True)
class ConclusionInputs:
    """Everything a conclusion is drawn from. ``kind``: "load" (latscope's own load, a sweep),
    "passive" (a window of the server's own traffic: ``traffic`` holds it, ``spans`` the
    requests' own spans in it, and ``measured`` its one ``Measured``, with no load) or "fleet"
    (several replicas' windows: ``fleet``)."""

    kind: str = "load"
    measured: tuple[Measured, ...] = ()
    levels: Levels = field(default_factory=Levels)
    limits: ServerLimits = field(default_factory=ServerLimits)
    same_host: bool | None = None
    doctor: DoctorFacts | None = None
    net_findings: tuple[Finding, ...] = ()
    log: ServerLog | None = None
    # findings stored by a run that kept no parsed log (replays of older run directories)
    stored_log_findings: tuple[Finding, ...] = ()
    trace: TraceFacts | None = None
    experiments: tuple[ABResult, ...] = ()
    proposals: tuple[Proposal, ...] = ()
    slo: str | None = None
    traffic: WindowFacts | None = None
    spans: SpanWindow | None = None
    # several replicas over one window (kind "fleet": diagnose --prometheus / --replica): their
    # facts and each replica's own conclusion; the fleet's rules are findings.fleet's
    fleet: FleetFacts | None = None

    def at(self, load: float | None) -> Measured | None:
        return next((m for m in self.measured if m.load == load), None) \
            if load is not None else None

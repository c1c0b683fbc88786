"""diagnose's state: its options, what every stage gathered so far, and where each load stands
(light load, the knee, the top of the sweep). Plain data; the stages fill it, ``conclude`` reads
it, ``document`` writes it as report.json, and ``replay`` rebuilds it from a run directory."""

from __future__ import annotations

import dataclasses
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from latscope.errors import LatscopeError
from latscope.findings.inputs import Levels
from latscope.model import Finding
from latscope.results import ABResult, ClientSection, Proposal, Verdict
from latscope.rundir import RunDir

if TYPE_CHECKING:
    from latscope.analysis.sweep import Step
    from latscope.campaign.observe import Observation
    from latscope.trace.files import StoredTrace

Progress = Callable[[str], None]


class DiagnoseFailed(LatscopeError):
    """The run could not reach a verdict (the report holds what was gathered)."""


@dataclass
class DiagnoseOptions:
    url: str | None = None
    serve_cmd: str | None = None  # with {port}
    serve_args: tuple[str, ...] = ()  # extra vLLM flags for the local target
    serve_env: dict[str, str] = field(default_factory=dict)  # extra env for the local target
    log: str | None = None
    trace: tuple[str, ...] | None = None  # one file, or one per rank of a TP server
    profile: bool = False
    trace_dir: str | None = None
    slo: str | None = None
    budget_s: float = 300.0
    output_dir: str | None = None
    api_key: str | None = None
    model: str | None = None
    # spread around 128 / 64 tokens: equal sizes keep a closed loop's requests in lockstep (every
    # wave prefilled together, TTFT read as a staircase of waves: 35/65/110/207 ms at c=1..8 on
    # an H200); the report's workload says what was drawn
    input_len: str = "96..160"
    output_len: str = "32..96"
    mix: str | None = None  # NAME:WEIGHT:IN:OUT,... (load.config.parse_mix)
    dataset: str | None = None
    max_load: int = 64
    loads: tuple[int, ...] | None = None  # explicit concurrencies to measure (default: auto)
    prove: bool = True
    max_proofs: int = 2
    pairs: int = 4
    argv: list[str] | None = None


@dataclass
class StageRecord:
    name: str
    status: str = "ok"  # ok | failed | skipped | cut | interrupted
    seconds: float = 0.0
    note: str = ""


def run_stage(stages: list[StageRecord], run: RunDir, progress: Callable[[str], None],
              name: str, work: Callable[[], str | None]) -> None:
    """Run one stage of a diagnosis (active or passive): a failed stage is recorded and the
    others still run; a note that starts "skipped" or "cut" is that stage's status; stages.json
    is written after each, so that an interrupted run keeps what it did."""
    record = StageRecord(name)
    stages.append(record)
    progress(f"[{len(stages)}] {name} ...")
    t0 = time.monotonic()
    try:
        record.note = work() or ""
    except KeyboardInterrupt:
        record.status, record.note = "interrupted", "Ctrl-C or SIGTERM"
        raise
    except LatscopeError as exc:
        record.status, record.note = "failed", str(exc)
        progress(f"    {name} failed: {exc}")
    finally:
        record.seconds = round(time.monotonic() - t0, 1)
        if record.note.startswith(("skipped", "cut")):
            record.status = record.note.split(":")[0]
        run.write("stages.json", [dataclasses.asdict(s) for s in stages])


@dataclass
class Diagnosis:
    """Everything gathered so far; ``report()`` turns it into report.json at any point."""

    opts: DiagnoseOptions
    run: RunDir
    progress: Progress
    stages: list[StageRecord] = field(default_factory=list)
    target: dict[str, Any] = field(default_factory=dict)
    doctor: Any = None
    net: Any = None
    rtt_ms: float | None = None
    same_host: bool | None = None
    max_num_seqs: tuple[int | None, str] = (None, "")
    steps: list[Step] = field(default_factory=list)
    observations: dict[float, Observation] = field(default_factory=dict)
    analysis: Any = None
    levels: dict[str, float] = field(default_factory=dict)  # light / knee / top -> load
    log: Any = None  # the parsed server log (latscope.server.logs.ServerLog)
    # the log's findings as a run stored them, for a replay of a run that kept no parsed log
    log_findings: list[Finding] = field(default_factory=list)
    trace: StoredTrace | None = None  # the profile's analysis (trace.json)
    experiments: list[ABResult] = field(default_factory=list)
    proposals: list[Proposal] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ranked: list[Finding] = field(default_factory=list)
    verdict: Verdict | None = None
    client: ClientSection = field(default_factory=ClientSection)
    collector: Any = None  # the local server's OTLP receiver: per-request spans (docs/observe.md)
    started: float = field(default_factory=time.monotonic)
    # the campaign's prompts: every run's seed is drawn from it (campaign.observe.with_load), so
    # a diagnose run against a server an earlier one measured sends prompts it has not seen
    prompt_seed: int = field(default_factory=lambda: secrets.randbelow(2**31))


class Budget:
    def __init__(self, total_s: float) -> None:
        self.total_s, self.t0 = total_s, time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        return self.total_s - self.elapsed()


def pick_levels(state: Diagnosis) -> None:
    """light = the lowest load, knee = Kneedle's knee, top = the highest load measured."""
    loads = [s.load for s in state.steps]
    if not loads:
        return
    state.levels["light"] = loads[0]
    knee = state.analysis.knee if state.analysis else None
    if knee is not None and knee.load in loads:
        state.levels["knee"] = knee.load
    if loads[-1] != loads[0]:
        state.levels["top"] = loads[-1]


def level_label(state: Diagnosis, load: float) -> str:
    """``c=16 (past the knee at c=8)``, ``c=8 (the knee)``, ``c=1 (light load)``
    (``findings.inputs.Levels.label``)."""
    return Levels(state.levels.get("light"), state.levels.get("knee"),
                  state.levels.get("top")).label(load)


def load_of(f: Finding, state: Diagnosis) -> int | None:
    """The concurrency a finding was measured at: its impact's ``load``, or (findings of older
    run directories) the ``c=N`` its ``measured_at`` starts with."""
    impact = f.impact or {}
    if isinstance(impact.get("load"), (int, float)):
        return int(impact["load"])
    match = re.match(r"c=(\d+)", impact.get("measured_at", ""))
    return int(match.group(1)) if match else None

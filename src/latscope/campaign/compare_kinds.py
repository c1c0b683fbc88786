"""One function a kind of run directory (``KINDS``): which of its load runs give the
per-request figures, and what the kind adds to the comparison (a ``KindPart``).

- bench (and any run directory with a requests.jsonl): itself;
- sweep: the curve against the curve at every load both measured, the knee and the most
  throughput; the figures from the steps at one load (``--load``, else the highest both ran);
- diagnose: its sweep as above, the findings that appeared or went, with their evidence, the
  verdicts side by side, and its profiles when both have one;
- trace: ``latscope.trace.compare`` of the two profiles (breakdown, categories, families).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from latscope.analysis.compare_facts import Fact
from latscope.analysis.compare_model import (
    DiagnoseSection,
    FindingChange,
    SweepPoint,
    SweepSection,
)
from latscope.analysis.compare_stats import DRAWS
from latscope.analysis.knee import Metrics
from latscope.analysis.sweepfile import SweepFile, SweepMeta, read_sweep
from latscope.errors import ConfigError
from latscope.findings.compare_findings import diagnose_findings, knee_finding, trace_finding
from latscope.model import Finding, Severity
from latscope.rundir import RunDir
from latscope.trace.results import Comparison as TraceDiff
from latscope.trace.results import TraceAnalysis


@dataclass(frozen=True)
class CompareOptions:
    fail_on: str | None = None  # --fail-on terms; None: the default policy
    allow: frozenset[str] = frozenset()  # fact groups compared despite a difference
    slo: str | None = None  # goodput's SLO (default: the runs' own --slo)
    load: float | None = None  # sweeps: the load whose runs give the figures
    draws: int = DRAWS


@dataclass
class KindPart:
    """What one kind's function gives: the load runs of each side whose requests are
    compared, the folder around them (its doctor facts), and anything the kind adds."""

    base_runs: list[Path]
    new_runs: list[Path]
    base_root: Path | None = None
    new_root: Path | None = None
    sweep: SweepSection | None = None
    diagnose: DiagnoseSection | None = None
    trace: TraceDiff | None = None
    facts: tuple[list[dict[str, Fact]], list[dict[str, Fact]]] | None = None  # no load runs
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    listed_groups: frozenset[str] = frozenset()  # groups only listed for this kind


KindComparer = Callable[[list[RunDir], list[RunDir], CompareOptions], KindPart]


def load_runs(base: list[RunDir], new: list[RunDir], options: CompareOptions) -> KindPart:
    """A bench run (or any run directory with a requests.jsonl): itself."""
    return KindPart([r.path for r in base], [r.path for r in new])


# what a sweep point shows of each step (sweep.json step metrics)
_POINT_KEYS = ("requests_per_s", "output_tokens_per_s", "ttft_p50_ms", "ttft_p99_ms",
               "e2e_p99_ms", "error_rate")
CAPACITY_GAP = 0.05  # the most throughput moved by more than this: the capacity changed


def sweep_part(base: list[RunDir], new: list[RunDir], options: CompareOptions) -> KindPart:
    docs = [[_sweep(r) for r in side] for side in (base, new)]
    sweeps = [[_steps(r, doc) for r, doc in zip(side, side_docs)]
              for side, side_docs in zip((base, new), docs)]
    knees = (_knee(docs[0][0]), _knee(docs[1][0]))
    section, at = _sweep_section(sweeps[0][0], sweeps[1][0], knees, _kind(docs[0][0]),
                                 options.load)
    part = KindPart(_runs_at(sweeps[0], at), _runs_at(sweeps[1], at), sweep=section)
    part.findings += knee_finding(section.sentence, _fell(section))
    part.notes.append(f"figures from the steps at {_load_words(section.load_kind, at)} "
                      "(--load chooses another)")
    return part


def diagnose_part(base: list[RunDir], new: list[RunDir], options: CompareOptions) -> KindPart:
    part = sweep_part(base, new, options)
    part.base_root, part.new_root = base[0].path, new[0].path
    changes = finding_changes(base[0].read_findings(), new[0].read_findings())
    part.diagnose = DiagnoseSection(verdict_base=_verdict(base[0]),
                                    verdict_new=_verdict(new[0]), findings=changes)
    part.findings += diagnose_findings(changes)
    traces = [_trace_result(r, required=False) for r in (base[0], new[0])]
    if traces[0] is not None and traces[1] is not None:
        part.trace, sentence, worse = _trace_compare(traces[0], traces[1])
        part.findings += trace_finding(sentence, worse)
    return part


def trace_part(base: list[RunDir], new: list[RunDir], options: CompareOptions) -> KindPart:
    a, b = _trace_result(base[0], required=True), _trace_result(new[0], required=True)
    assert a is not None and b is not None
    comparison, sentence, worse = _trace_compare(a, b)
    facts = [_trace_facts(comparison.a.name)], [_trace_facts(comparison.b.name)]
    # comparing one GPU's profile with another's is what trace --compare is for
    part = KindPart([], [], trace=comparison, facts=facts, listed_groups=frozenset({"hardware"}))
    part.findings += trace_finding(sentence, worse)
    return part


# --- sweeps -----------------------------------------------------------------------------------

def _sweep(run: RunDir) -> SweepFile:
    """A sweep's or diagnose's sweep.json, typed."""
    path = run.file("sweep.json")
    doc = read_sweep(path) if path.is_file() else None
    if doc is None or not doc.steps:
        raise ConfigError(f"{run.path}: no sweep.json with steps (the run stopped before its "
                          "first step?)")
    return doc


def _kind(doc: SweepFile) -> str:
    return "rate" if isinstance(doc.meta, SweepMeta) and doc.meta.mode == "rate" \
        else "concurrency"


def _steps(run: RunDir, doc: SweepFile) -> list[tuple[float, Metrics, Path | None]]:
    """(load, metrics, step directory) of each step of a sweep.json, in load order."""
    out = [(float(step.load), step.metrics, _step_dir(run.path, step.run_dir))
           for step in doc.steps]
    return sorted(out, key=lambda s: s[0])


def _knee(doc: SweepFile) -> float | None:
    knee = doc.analysis.knee
    return float(knee.load) if knee is not None else None


def _step_dir(root: Path, recorded: str) -> Path | None:
    """A step's directory: as recorded, else by its name under the sweep (a run directory
    recorded on another host, e.g. the GPU matrix's, keeps its own layout)."""
    for candidate in (Path(recorded), root / "sweep" / Path(recorded).name,
                      root / Path(recorded).name):
        if recorded and (candidate / "requests.jsonl").is_file():
            return candidate
    return None


def _sweep_section(base: list[Any], new: list[Any], knees: tuple[float | None, float | None],
                   load_kind: str, wanted: float | None) -> tuple[SweepSection, float | None]:
    common = sorted({s[0] for s in base if s[2]} & {s[0] for s in new if s[2]})
    if wanted is not None and wanted not in common:
        raise ConfigError(f"--load {wanted:g}: not a load both sweeps measured (both have: "
                          f"{', '.join(f'{x:g}' for x in common) or 'none'})")
    at = wanted if wanted is not None else (common[-1] if common else None)
    by_load = [{s[0]: s[1] for s in side} for side in (base, new)]
    points = [SweepPoint(load=load, base=_point(by_load[0].get(load)),
                         new=_point(by_load[1].get(load)))
              for load in sorted(set(by_load[0]) | set(by_load[1]))]
    peaks = [max((m.get("requests_per_s") or 0.0 for _, m, _ in side), default=None) or None
             for side in (base, new)]
    section = SweepSection(load_kind=load_kind, points=points, knee_base=knees[0],
                           knee_new=knees[1], max_throughput_base=peaks[0],
                           max_throughput_new=peaks[1], sentence="", metrics_at=at)
    section.sentence = _sweep_sentence(section)
    return section, at


def _point(metrics: Metrics | None) -> dict[str, float | None]:
    return {k: (metrics or {}).get(k) for k in _POINT_KEYS}


def _load_words(kind: str, load: float | None) -> str:
    if load is None:
        return "no load both sweeps measured"
    return f"{load:g} req/s" if kind == "rate" else f"c={load:g}"


def _sweep_sentence(s: SweepSection) -> str:
    knee = (f"knee {_load_words(s.load_kind, s.knee_base)} -> "
            f"{_load_words(s.load_kind, s.knee_new)}" if s.knee_base or s.knee_new
            else "no knee on either side")
    knee = knee.replace("no load both sweeps measured", "none found")
    a, b = s.max_throughput_base, s.max_throughput_new
    peak = (f"most throughput {a:.3g} -> {b:.3g} req/s ({(b / a - 1) * 100:+.0f}%)"
            if a and b else "most throughput not measured on both sides")
    return f"{knee}; {peak}"


def _fell(s: SweepSection) -> bool | None:
    a, b = s.max_throughput_base, s.max_throughput_new
    if not a or not b:
        return None
    if abs(b / a - 1) <= CAPACITY_GAP and s.knee_base == s.knee_new:
        return None
    return b < a


def _runs_at(sweeps: list[list[Any]], at: float | None) -> list[Path]:
    return [d for steps in sweeps for load, _, d in steps if load == at and d is not None]


# --- diagnose ---------------------------------------------------------------------------------

def _verdict(run: RunDir) -> str:
    report = run.read("report.json") or {}
    text = (report.get("verdict") or {}).get("text") if isinstance(report, dict) else None
    return str(text or run.manifest.get("verdict") or "no verdict recorded")


_SHOWN = (Severity.CRITICAL, Severity.WARNING, Severity.INFO)


def finding_changes(base: list[Finding], new: list[Finding]) -> list[FindingChange]:
    """The findings present on one side only (appeared, gone), then those on both (kept)."""
    a = {f.id: f for f in base if f.severity in _SHOWN}
    b = {f.id: f for f in new if f.severity in _SHOWN}
    out = [_change(b[i], "appeared") for i in b if i not in a]
    out += [_change(a[i], "gone") for i in a if i not in b]
    out += [_change(b[i], "kept", a[i].title) for i in b if i in a]
    return out


def _change(f: Finding, change: str, base_title: str = "") -> FindingChange:
    evidence = [f"{e.name}: {e.value}{(' ' + e.unit) if e.unit else ''}"
                + (f" ({e.source})" if e.source else "") for e in f.evidence]
    return FindingChange(id=f.id, change=change, severity=f.severity.value, title=f.title,
                         evidence=evidence, base_title=base_title)


# --- traces -----------------------------------------------------------------------------------

def _trace_result(run: RunDir, *, required: bool) -> TraceAnalysis | None:
    """The (first) trace's analysis a trace or diagnose run stored, typed."""
    import msgspec

    from latscope.trace.files import from_json

    doc = run.read("trace.json")
    if isinstance(doc, dict) and isinstance(doc.get("traces"), list) and doc["traces"]:
        doc = doc["traces"][0]
    if isinstance(doc, dict) and isinstance(doc.get("devices"), list):
        try:
            return from_json(doc, TraceAnalysis)
        except msgspec.ValidationError as exc:
            raise ConfigError(f"{run.path / 'trace.json'}: not a trace analysis latscope "
                              f"wrote ({exc})") from None
    if required:
        raise ConfigError(f"{run.path}: no analysed trace in trace.json")
    return None


def _trace_compare(a: TraceAnalysis, b: TraceAnalysis) -> tuple[TraceDiff, str, bool | None]:
    """The diff, its sentence, and whether the GPU got busier."""
    from latscope.trace.compare import compare_results

    diff = compare_results(a, b)
    rows = {r.key: r for r in diff.breakdown}
    busy, idle = rows.get("busy"), rows.get("idle")
    if busy is None or not busy.a_ns:
        return diff, "", None
    change = busy.b_ns / busy.a_ns - 1
    mover = max(diff.families, key=lambda r: abs(r.delta_ns), default=None)
    idle_a, idle_b = (idle.a_ns, idle.b_ns) if idle is not None else (0, 0)
    sentence = (f"GPU busy {busy.a_ns / 1e6:.4g} -> {busy.b_ns / 1e6:.4g} ms "
                f"({change * 100:+.0f}%), idle {idle_a / 1e6:.4g} -> {idle_b / 1e6:.4g} ms")
    if mover is not None and mover.delta_ns:
        sentence += f"; most moved: {mover.key} {mover.delta_ns / 1e6:+.4g} ms"
    return diff, sentence, change > 0


def _trace_facts(gpu_name: str | None) -> dict[str, Fact]:
    """The profiled GPU as a fact (its name as the trace's device recorded it)."""
    return {"hardware.gpu": Fact("hardware.gpu", "GPU", gpu_name or None, "hardware",
                                 "trace.json devices")}


# A kind of run directory and its function; a kind not here with a requests.jsonl is a load run
KINDS: dict[str, KindComparer] = {"bench": load_runs, "sweep": sweep_part,
                                  "diagnose": diagnose_part, "trace": trace_part}

"""``latscope compare``'s work: BASE run(s) against NEW run(s), as a typed ``Comparison``.

    compare_runs([base], [new], CompareOptions())          # two run directories
    compare_runs([b1, b2, b3], [n1, n2, n3], options)      # repeated runs a side

Each kind of run directory has one function (``campaign.compare_kinds.KINDS``) that says which
of its load runs give the per-request figures and what else it adds (a sweep's curve and knee, a
diagnose's findings, a trace's kernels); a run directory of any other kind with a
``requests.jsonl`` is compared as a load run. A new kind plugs in with one function and one
entry there. The rest is common: every load
run read in one pass (``analysis.compare_sample``), its facts and gauges, the figures and their
intervals (``analysis.compare_metrics``), then the rules (``findings.compare*``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from latscope.analysis.compare_facts import Fact, LoadRunInfo, measured_mean, read_load_run
from latscope.analysis.compare_metrics import estimate_all
from latscope.analysis.compare_model import (
    EXIT_UNDECIDED,
    Comparison,
)
from latscope.analysis.compare_sample import RunSample, goodput_slo, read_sample
from latscope.campaign.compare_kinds import KINDS, CompareOptions, KindPart, load_runs
from latscope.errors import ConfigError
from latscope.findings.compare import differences, gate, judge, not_judged
from latscope.findings.compare_findings import (
    difference_findings,
    layer_finding,
    metric_findings,
)
from latscope.findings.compare_layers import layer_rows, layer_sentence, state_rows
from latscope.findings.compare_policy import parse_fail_on
from latscope.reliability import level
from latscope.rundir import REQUESTS, RunDir


def compare_runs(base: Sequence[str | Path], new: Sequence[str | Path],
                 options: CompareOptions | None = None) -> Comparison:
    """BASE against NEW: refused or compared, every figure with its verdict, the gate."""
    options = options or CompareOptions()
    terms = parse_fail_on(options.fail_on)  # a bad --fail-on fails before any reading
    base_dirs, new_dirs = [RunDir.open(p) for p in base], [RunDir.open(p) for p in new]
    kind, notes = _kind_of(base_dirs + new_dirs)
    comparer = KINDS.get(kind, load_runs)
    part = comparer(base_dirs, new_dirs, options)
    part.notes[:0] = notes
    sides = [_read_side(part.base_runs, part.base_root, options),
             _read_side(part.new_runs, part.new_root, options)]
    facts = part.facts or ([i.facts for i in sides[0].infos], [i.facts for i in sides[1].infos])
    diffs = differences(facts[0], facts[1], options.allow | part.listed_groups)
    rows = []
    if sides[0].samples and sides[1].samples:
        slo = bool(sides[0].samples[0].good is not None)
        rows = [judge(e, terms) for e in estimate_all(sides[0].samples, sides[1].samples,
                                                      goodput=slo, draws=options.draws)]
    return _assemble(kind, base_dirs, new_dirs, part, sides, diffs, rows, terms)


@dataclass
class _Side:
    infos: list[LoadRunInfo]
    samples: list[RunSample]


def _read_side(runs: list[Path], root: Path | None, options: CompareOptions) -> _Side:
    infos, samples = [], []
    for i, path in enumerate(runs):
        info = read_load_run(path, root)
        _add_client_fact(info)
        _add_host_fact(info)
        infos.append(info)
        config = info.manifest.config if isinstance(info.manifest.config, dict) else {}
        slo = options.slo or config.get("slo")
        sample = read_sample(path, slo if isinstance(slo, (str, dict)) else None, seed=i)
        _add_size_facts(info, sample)
        samples.append(sample)
    return _Side(infos, samples)


def _add_size_facts(info: LoadRunInfo, sample: RunSample) -> None:
    """The mean prompt and output sizes of the run's completed requests, with their standard
    errors: another workload shows there even when its flags read the same (a dataset file
    changed under the same name)."""
    done = ~sample.failed
    for key, label, values in (("prompt_tokens", "mean prompt tokens", sample.prompt_tokens),
                               ("output_tokens", "mean output tokens", sample.output_tokens)):
        mean = measured_mean(values[done])
        if mean is not None:
            info.facts[f"workload.{key}"] = Fact(f"workload.{key}", label, mean, "workload",
                                                 "requests.jsonl (completed requests)")


def _add_client_fact(info: LoadRunInfo) -> None:
    """Whether latscope's own timing was reliable in the run (``campaign.observe``'s one
    judgement, from its summary and decomposition)."""
    from latscope.campaign.observe import client_reliability

    if info.summary is None:
        return
    split = info.decomposition.decomposition() if info.decomposition is not None else None
    judged = client_reliability(info.summary, split)
    info.facts["client.reliable"] = Fact(
        "client.reliable", "latscope's own timing reliable", judged.reliable, "client",
        judged.why or "summary.json client, decomposition.json")
    off_cpu = judged.off_cpu_share
    if isinstance(off_cpu, (int, float)):
        contended = off_cpu >= level("off_cpu_share", "incomparable")
        info.facts["client.contended"] = Fact(
            "client.contended", "CPUs contended (latscope's loop waiting for one)",
            "contended" if contended else "free", "client",
            "summary.json client.run_queue_wait_s / wall_s",
            detail=f"waited {off_cpu:.0%} of the run")


def _add_host_fact(info: LoadRunInfo) -> None:
    """Whether other processes were busy on the server's CPUs during the run
    (``findings.host``'s one rule, on the run's ``host/cpu.json``)."""
    from latscope.env.hostload import read_cpu_usage
    from latscope.findings.host import contention_finding
    from latscope.model import Severity

    usage = read_cpu_usage(info.path)
    if usage is None or not usage.server_pids:
        # the server's process not found on this host (a remote one, or not visible): its
        # own CPU would read as another process's; latscope's own wait for a CPU
        # (client.contended) still says whether the client's host was contended
        return
    found = contention_finding(usage, info.path.name)
    if found is None:
        return
    busy = found.severity != Severity.OK
    others = next((e.value for e in found.evidence if e.name.startswith("used by other")), 0)
    cpus = next((e.value for e in found.evidence if e.name.startswith("CPUs the server")), "?")
    info.facts["host.busy"] = Fact(
        "host.busy", "other work on the server's CPUs", "busy" if busy else "quiet", "host",
        "host/cpu.json", detail=f"others used {others} of {cpus} CPUs")


def _kind_of(dirs: list[RunDir]) -> tuple[str, list[str]]:
    kinds = list(dict.fromkeys(d.kind or "bench" for d in dirs))
    if len(kinds) == 1:
        return kinds[0], []
    if all((d.path / REQUESTS).is_file() for d in dirs):
        return "bench", [f"run directories of kinds {', '.join(kinds)}: compared as load runs "
                         "(their requests.jsonl)"]
    raise ConfigError(f"cannot compare run directories of kinds {', '.join(kinds)}: give "
                      "two of the same kind (bench, sweep, diagnose, trace)")


def _assemble(kind: str, base: list[RunDir], new: list[RunDir], part: KindPart,
              sides: list[_Side], diffs: list[Any], rows: list[Any], terms: list[Any]
              ) -> Comparison:
    from latscope.campaign.compare_curves import curves_of

    layers = layer_rows([i.layers for i in sides[0].infos], [i.layers for i in sides[1].infos])
    state = state_rows([i.state for i in sides[0].infos], [i.state for i in sides[1].infos])
    status, code, reasons = gate(rows, diffs)
    if status == "not comparable":  # the figures are shown, never judged
        rows = [not_judged(r) for r in rows]
    sentence, moved = layer_sentence(layers, rows, state)
    if not rows and status == "no regression":
        status, code = "inconclusive", EXIT_UNDECIDED
        reasons = [f"{kind} runs carry no per-request figures to gate on"]
    findings = sorted([*difference_findings(diffs), *metric_findings(rows),
                       *layer_finding(sentence, moved, layers, state, status == "regression"),
                       *part.findings], key=lambda f: f.severity.rank)  # stable: rules' order
    notes = part.notes + [r.note for r in rows if r.note][:1]
    return Comparison(
        kind=kind, base=[str(d.path) for d in base], new=[str(d.path) for d in new],
        status=status, exit_code=code, headline=_headline(status, reasons),
        reasons=reasons, policy=[t.text for t in terms], differences=diffs, metrics=rows,
        layers=layers, layer_sentence=sentence, state=state,
        curves=curves_of(sides[0].samples, sides[1].samples, part.base_runs, part.new_runs,
                         part.sweep),
        sweep=part.sweep, diagnose=part.diagnose, trace=part.trace, notes=notes,
        findings=[f.to_dict() for f in findings])


def _headline(status: str, reasons: list[str]) -> str:
    """The gate's one line: what failed it, what left it undecided, or that all passed."""
    if status == "no regression":
        return "every gated figure is within its tolerance"
    shown = 1 if status == "not comparable" else 3
    return "; ".join(reasons[:shown]) + (f" (and {len(reasons) - shown} more)"
                                         if len(reasons) > shown else "")


def slo_terms(text: str | None) -> dict[str, float]:
    """The per-request SLO terms goodput counts (``--slo``), checked early."""
    return goodput_slo(text)

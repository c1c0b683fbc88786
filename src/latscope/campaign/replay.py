"""``latscope diagnose --replay DIR``: findings, ranking, verdict and the three reports re-derived
from a diagnose run directory's stored stage files with today's code, without a server.

What is re-derived: every sweep step's summary throughput (from ``requests.jsonl``), its TTFT
split, its /metrics rules (from ``metrics/snapshots.jsonl``), the host's CPUs
(``host/cpu.json``, when recorded), the knee, the log's rules (from the parsed log in
``log.json``, or the server log kept beside it), the trace's rules (from ``trace.json``, the
stored analysis, every rank's and the cross-rank view for a tensor-parallel profile: the raw
profile, which users delete for size, is not needed), the joins of
causes to symptoms, the capacity verdict and the ranking. What is read as stored: doctor's and
net's findings (their facts came from the live host), the experiments and proposals (runs that
cannot be repeated without the server), the stages' records.

DIR is copied to OUT first (default ``DIR/replay``) and everything is derived there: the
original is never written. Run directories of every schema so far (1) are read; a file a
later version added and an older run lacks is simply absent from the answer, never an error.
"""

from __future__ import annotations

import gzip
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec

from latscope.analysis.sweep import analyse
from latscope.campaign.conclude import conclude
from latscope.campaign.document import build_report, unmodelled_report
from latscope.campaign.observe import Observation, observation_of
from latscope.campaign.state import DiagnoseFailed, DiagnoseOptions, Diagnosis, StageRecord, pick_levels
from latscope.campaign.sweep import step_of
from latscope.errors import ConfigError
from latscope.model import Finding
from latscope.results import ABResult, Proposal, section
from latscope.rundir import READABLE_SCHEMAS, RunDir, read_json
from latscope.runfiles import Manifest, manifest_of

KNOWN_SCHEMAS = READABLE_SCHEMAS


@dataclass
class Stored:
    """A stage whose findings are read as stored (doctor, net): what conclude reads of it."""

    findings: list[Finding] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)


def replay(run_dir: str | Path, output_dir: str | Path | None = None) -> dict[str, Any]:
    """Re-derive ``run_dir``'s verdict; returns the new report (also written to OUT)."""
    src = Path(run_dir)
    manifest = _manifest(src)
    out = Path(output_dir) if output_dir else src / "replay"
    _copy(src, out)
    run = RunDir.open(out)
    if manifest.passive:  # diagnose --passive, watch: a window, not a sweep
        from latscope.campaign.passive_dir import replay_passive

        return replay_passive(run, replayed_from=str(src))
    state = Diagnosis(_options(manifest), run, lambda _: None)
    _restore(state, out)
    conclude(state)
    try:
        report = build_report(state)
    except msgspec.ValidationError as exc:  # a model bug: the sections as derived, one line
        cause = f"report.json does not fit the report model: {exc}"
        run.write("report.json", {**unmodelled_report(state, cause), "replayed_from": str(src)})
        raise DiagnoseFailed(f"{cause} (the replay is in {out})") from None
    report["replayed_from"] = str(src)
    run.write("report.json", report)
    run.write_findings(state.ranked)
    from latscope.report.write import write_reports

    write_reports(out, report)
    return report


def _manifest(src: Path) -> Manifest:
    path = src / "manifest.json"
    if not path.is_file():
        raise ConfigError(f"{src}: no manifest.json: not a latscope run directory")
    manifest = manifest_of(read_json(path), str(path))
    if manifest.kind not in ("diagnose", "watch"):
        raise ConfigError(f"{src}: a {manifest.kind!r} run, not a diagnose run (nor a watch)")
    if manifest.schema_version not in KNOWN_SCHEMAS:
        raise ConfigError(f"{src}: schema_version {manifest.schema_version!r} is newer "
                          f"than this latscope knows ({KNOWN_SCHEMAS[-1]}): upgrade latscope")
    return manifest


def _copy(src: Path, out: Path) -> None:
    if out.resolve() == src.resolve():
        raise ConfigError("--replay writes a new run directory: -o must differ from DIR")
    if out.exists():
        shutil.rmtree(out)
    ignore = shutil.ignore_patterns("replay", "*.pt.trace.json*", "profile")
    shutil.copytree(src, out, ignore=ignore)


def _options(manifest: Manifest) -> DiagnoseOptions:
    """The options that change what is concluded (the SLO), from the recorded command line."""
    argv = shlex.split(manifest.command or "")
    slo = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--slo"), None)
    return DiagnoseOptions(slo=slo, profile="--profile" in argv, argv=None)


def _restore(state: Diagnosis, out: Path) -> None:
    report = read_json(out / "report.json") if (out / "report.json").is_file() else {}
    state.target = report.get("target") or state.run.manifest.get("target") or {}
    state.same_host = state.target.get("same_host")
    state.stages = [StageRecord(**s) for s in _read(out, "stages.json", [])]
    state.notes = [n for n in report.get("notes", []) if not n.startswith("ranking: ")]
    state.experiments = [section(e, ABResult) for e in
                         _read(out, "experiments.json", report.get("experiments") or [])]
    state.proposals = [section(p, Proposal) for p in report.get("proposals") or []]
    _restore_doctor(state, out)
    _restore_net(state, out)
    _restore_sweep(state, out)
    _restore_log(state, out)
    _restore_trace(state, out)


def _read(out: Path, name: str, default: Any) -> Any:
    path = out / name
    return read_json(path) if path.is_file() else default


def _restore_doctor(state: Diagnosis, out: Path) -> None:
    data = _read(out, "doctor.json", None)
    if data is None:
        return
    state.doctor = Stored([Finding.from_dict(f) for f in data.get("findings", [])],
                          data.get("facts") or {})
    seqs = (((state.doctor.facts.get("server") or {}).get("settings") or {})
            .get("max_num_seqs") or {})
    if isinstance(seqs.get("value"), int):
        state.max_num_seqs = (seqs["value"], seqs.get("source", ""))


def _restore_net(state: Diagnosis, out: Path) -> None:
    import numpy as np

    data = _read(out, "net.json", None)
    if data is None:
        return
    state.net = Stored([Finding.from_dict(f) for f in data.get("findings", [])])
    if data.get("keepalive_ms"):
        state.rtt_ms = float(np.median(data["keepalive_ms"]))


def _restore_sweep(state: Diagnosis, out: Path) -> None:
    from latscope.analysis.knee import parse_slo
    from latscope.analysis.sweepfile import read_sweep

    stored = read_sweep(out / "sweep.json").steps if (out / "sweep.json").is_file() else []
    for old in stored:
        step_dir = out / "sweep" / Path(old.run_dir).name
        if not (step_dir / "requests.jsonl").is_file():
            continue
        obs = _observation(step_dir, state.rtt_ms)
        state.observations[old.load] = obs
        step = step_of(old.load, obs)
        step.stop_reason, step.phase = old.stop_reason, old.phase
        state.steps.append(step)
    state.steps.sort(key=lambda s: s.load)
    if state.steps:
        state.analysis = analyse(state.steps, parse_slo(state.opts.slo) if state.opts.slo else [])
        pick_levels(state)


def _observation(step_dir: Path, rtt_ms: float | None) -> Observation:
    """One stored step as diagnose observed it, its summary's throughput recomputed from the
    step's own records with today's code (the rest of the summary, such as the client's loop
    lag, only the live run knew)."""
    from latscope.load.runner import BenchResult, rebuild_summary
    from latscope.rundir import read_meta

    manifest, summary = read_meta(step_dir)
    rebuilt = rebuild_summary(step_dir)
    summary = {**rebuilt, **summary, "throughput": rebuilt.get("throughput") or
               summary.get("throughput") or {}}
    stored = manifest.get("config") or {}
    workload = stored.get("workload") or {}
    config = SimpleNamespace(warmup=stored.get("warmup") or 0, seed=stored.get("seed"),
                             endpoint=stored.get("endpoint", "completions"),
                             workload=SimpleNamespace(prefix_len=workload.get("prefix_len", 0),
                                                      dataset=workload.get("dataset")))
    result = BenchResult(step_dir, summary, config, manifest)  # type: ignore[arg-type]
    return observation_of(result, scraped=(step_dir / "metrics").is_dir(),
                          network_rtt_ms=rtt_ms)


def _restore_log(state: Diagnosis, out: Path) -> None:
    from latscope.server.logs import parse_log, server_log_from_dict

    data = _read(out, "log.json", None)
    log = None
    if data and data.get("parsed"):
        log = server_log_from_dict(data["parsed"])
    elif (out / "server.log.gz").is_file():  # runs before log.json kept the parsed log
        plain = out / "server.log"
        plain.write_bytes(gzip.decompress((out / "server.log.gz").read_bytes()))
        log = parse_log(str(plain))
    if log is not None:
        state.log = log
    elif data:
        state.log_findings = [Finding.from_dict(f) for f in data.get("findings", [])]


def _restore_trace(state: Diagnosis, out: Path) -> None:
    from latscope.trace.files import read_stored

    data = _read(out, "trace.json", None)
    if data:  # one trace, or every rank's with the cross-rank view (campaign.traces)
        state.trace = read_stored(data, str(out / "trace.json"))

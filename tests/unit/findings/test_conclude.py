"""The one seam of every conclusion (``findings.conclude``): typed facts in, ranked findings and
the verdict out, with no file read; the capacity verdict past the knee without a plateau
(issue #52, item 2), the checks a queue verdict names when no limit was found, and the trade a
token budget set on the command line makes (item 3), on the H200's real /metrics."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from latscope.analysis.decompose import Component, Decomposition
from latscope.findings.conclude import conclude
from latscope.findings.inputs import (
    ConclusionInputs,
    Levels,
    Measured,
    ServerLimits,
    Throughput,
    TraceFacts,
)
from latscope.findings.trade import budget_trade
from latscope.server.scrape import read_snapshots
from latscope.trace.files import StoredTrace, read_stored

MATRIX = Path(__file__).resolve().parents[2] / "data" / "gpu-matrix"
# an H200 with default flags, 1k prompts, load to c=256: throughput still +16% per doubling at
# the top, queueing 71% of TTFT there (the case issue #52 item 2 reported as a bare symptom)
CURVE = [(1, 2.0), (8, 14.0), (32, 40.0), (64, 52.0), (128, 60.0), (256, 69.6)]


def _split(ttft_ms: float, queue_share: float) -> Decomposition:
    queue = ttft_ms * queue_share
    prefill = (ttft_ms - queue) * 0.8
    rows = [Component("ttft", "client TTFT", None, "client records", ttft_ms),
            Component("ttft.server.queue", "queue", "ttft", "vllm:request_queue_time_seconds",
                      queue),
            Component("ttft.server.prefill", "prefill", "ttft",
                      "vllm:request_prefill_time_seconds", prefill),
            Component("ttft.server.other", "tokenization + IPC", "ttft", "difference",
                      ttft_ms - queue - prefill)]
    return Decomposition(rows, "ttft.server.queue", None, 30.0, "histograms", 100, 100.0)


def _profile(name: str) -> StoredTrace:
    """The stored analysis of the profile a recorded H200 scenario took at its knee
    (saturated-long: the GPU idle 3% of it; eager: 73%)."""
    import json

    with tarfile.open(MATRIX / f"{name}.tgz") as tar:
        member = tar.extractfile(f"{name}/trace.json")
        assert member is not None
        return read_stored(json.load(member))


def _inputs(*, profile: str | None, limits: ServerLimits = ServerLimits(max_num_seqs=1024),
            snapshots: tuple = ()) -> ConclusionInputs:
    levels = Levels(light=1, knee=32, top=256, recommended=28)
    measured = tuple(
        Measured(label=levels.label(load), load=load, throughput=Throughput(rps),
                 decomposition=_split(40.0 + load * 4, 0.71 if load == 256 else 0.1),
                 snapshots=snapshots if load == 32 else ())
        for load, rps in CURVE)
    trace = None
    if profile is not None:  # a profile diagnose took at the knee
        trace = TraceFacts(_profile(profile), profiled=True, load=32)
    return ConclusionInputs(measured=measured, levels=levels, limits=limits, trace=trace)


def test_a_busy_gpu_past_its_knee_with_queueing_dominant_is_capacity_not_a_bare_queue():
    answer = conclude(_inputs(profile="saturated-long"))
    v = answer.verdict
    assert v.kind == "capacity" and v.finding_id == "capacity.saturated", v.text
    assert "At c=32 (the knee), the server is at capacity: 40.0 req/s" in v.text
    assert "throughput still rose +16% per doubling of the load (c=128 to c=256)" in v.text
    assert "queueing took 71% of mean TTFT at c=256 (past the knee at c=32)" in v.text
    assert "The GPU was busy 97% of the profile at c=32 (the knee)" in v.text
    assert "finding that names" not in v.text
    [capacity] = [f for f in answer.ranked if f.id == "capacity.saturated"]
    assert capacity.impact and capacity.impact["explains"] == "latency.queue"  # took the share
    assert not any(f.id == "latency.queue" for f in answer.ranked)


def test_without_the_gpus_busy_share_a_queue_verdict_names_the_checks_it_ran():
    # no profile, no telemetry: capacity cannot be told from a limit, so the verdict says what
    # each of the server's limits read, and points to no finding that is not there
    v = conclude(_inputs(profile=None)).verdict
    assert v.kind == "symptom" and v.finding_id == "latency.queue", v.text
    assert "71% of mean client TTFT" in v.text or "71% of mean TTFT" in v.text
    assert "No limit of the server's own was found binding; checked:" in v.text
    assert "the GPU's busy share: not measured (no GPU telemetry or profile)" in v.text
    assert "the batch: not read" in v.text  # no scrape at c=256 in these facts
    assert "See the queue finding" not in v.text and "finding that names" not in v.text


def test_an_idle_gpu_is_never_capacity():
    v = conclude(_inputs(profile="eager")).verdict
    assert v.kind != "capacity" and "idle 74% of the profile" in v.text, v.text
    assert "GPU idle 74% of the" in v.text  # the title's figure is the sentence's


def _recorded_step(tmp_path: Path, name: str, step: str) -> Path:
    with tarfile.open(MATRIX / f"{name}.tgz") as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / name / "sweep" / step


def test_the_budgets_trade_is_read_from_the_servers_own_counters(tmp_path):
    # the H200 with --max-num-batched-tokens 512, 1.5-2.5k-token prompts, at c=16
    snaps = tuple(read_snapshots(_recorded_step(tmp_path, "token-budget-512", "step-04-c16")))
    m = Measured(label="c=16 (the knee)", load=16, snapshots=snaps)
    f = budget_trade(m, ServerLimits(budget_set=512), binding=False)
    assert f is not None and f.id == "server.budget_trade" and f.role == "cause"
    ev = {e.name: e for e in f.evidence}
    assert 1536 <= ev["mean prompt"].value <= 2560
    assert ev["engine steps to prefill a mean prompt"].value in (3, 4, 5)
    assert ev["ITL p50"].value < ev["ITL p99"].value
    assert "buckets" in ev["ITL p99"].source  # the bucket it fell in is its error bound
    assert f.title.startswith("The server runs --max-num-batched-tokens 512, a trade of TTFT "
                              "for ITL: at c=16 (the knee), each ")
    # where the budget binds, its queue rule is the answer; without the flag, nothing to say
    assert budget_trade(m, ServerLimits(budget_set=512), binding=True) is None
    assert budget_trade(m, ServerLimits(), binding=False) is None


def test_a_trade_beside_capacity_is_one_sentence_of_the_verdict(tmp_path):
    snaps = tuple(read_snapshots(_recorded_step(tmp_path, "token-budget-512", "step-04-c16")))
    answer = conclude(_inputs(profile="saturated-long", snapshots=snaps,
                              limits=ServerLimits(max_num_seqs=1024, budget_set=2048)))
    assert answer.verdict.kind == "capacity"
    text = answer.verdict.text
    assert text.count("--max-num-batched-tokens 2048, a trade of TTFT for ITL") == 1
    assert "To check, its cost not measured here" in text


def test_the_recorded_binding_budget_gets_its_queue_rule_not_the_trade(tmp_path):
    from latscope.campaign.replay import replay

    run = _recorded_step(tmp_path, "token-budget-512", "step-04-c16").parents[1]
    report = replay(run, tmp_path / "out")
    assert report["verdict"]["finding_id"] == "server.queue_token_budget"
    assert not any(f["id"] == "server.budget_trade" for f in report["findings"])


@pytest.mark.parametrize("name", ["max-num-seqs-8", "kv-small", "saturated-short"])
def test_conclude_reads_no_file(name, tmp_path, monkeypatch):
    # every fact is read once by the layer that owns it: the seam itself opens nothing
    import builtins

    from latscope.campaign import replay as replay_mod
    from latscope.campaign.conclude import inputs_of
    from latscope.campaign.state import Diagnosis
    from latscope.rundir import RunDir

    with tarfile.open(MATRIX / f"{name}.tgz") as tar:
        tar.extractall(tmp_path, filter="data")
    src, out = tmp_path / name, tmp_path / "out"
    replay_mod._copy(src, out)
    state = Diagnosis(replay_mod._options(replay_mod._manifest(src)), RunDir.open(out),
                      lambda _: None)
    replay_mod._restore(state, out)
    inputs = inputs_of(state)
    real_open = builtins.open

    def no_open(*args, **kwargs):
        raise AssertionError(f"the conclusion opened {args[0]}")

    monkeypatch.setattr(builtins, "open", no_open)
    monkeypatch.setattr(Path, "read_text", no_open)
    monkeypatch.setattr(Path, "read_bytes", no_open)
    try:
        answer = conclude(inputs)
    finally:
        monkeypatch.setattr(builtins, "open", real_open)
    assert answer.verdict.text and answer.ranked

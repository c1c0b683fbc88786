"""diagnose's verdict over ranked findings: a measured share comes before a setting whose cost no
run measured, and a cause takes a symptom's share only when it was found. The findings are the
ones diagnose gave on an H200 whose single API server was at 100% CPU (docs/gateway.md)."""

from __future__ import annotations

import pytest
from abresults import ab  # tests/, on the path

from latscope.findings.causes import join_causes
from latscope.findings.verdict import VerdictInputs, verdict
from latscope.findings.impact import make_impact
from latscope.findings.rank import rank
from latscope.model import Finding, Severity
from latscope.results import ABResult, Proposal

AT = "c=1024 (past the knee at c=128)"


def _h200_findings(debug: Severity | None = None) -> list[Finding]:
    found = [
        Finding("server.profiler", Severity.WARNING, "the torch profiler is enabled",
                layer="config"),
        Finding("server.queue_token_budget", Severity.WARNING,
                "Requests queue while the batch is below max_num_seqs", layer="queue"),
        Finding("latency.engine_frontend", Severity.WARNING,
                "tokenization + IPC + output processing: 1115.7 ms of a 1868.2 ms mean client "
                "TTFT (60%)", layer="frontend", role="symptom",
                impact=make_impact("ttft_mean", 0.597, value_ms=1115.7, measured_at=AT)),
        Finding("latency.prefill", Severity.INFO, "prefill: 71% at c=1", layer="prefill",
                role="symptom", impact=make_impact("ttft_mean", 0.71, measured_at="c=1")),
    ]
    if debug is not None:
        found.append(Finding("server.debug_logging", debug, "vLLM logs at DEBUG"
                             if debug != Severity.OK else "not DEBUG", layer="config"))
    return found


def _verdict(findings: list[Finding]) -> tuple[dict, list[Finding]]:
    ranked, _ = rank(join_causes(findings))
    return verdict(ranked, VerdictInputs()).to_dict(), ranked


def test_a_measured_share_is_the_verdict_before_an_unmeasured_setting():
    result, ranked = _verdict(_h200_findings())
    assert result["finding_id"] == "latency.engine_frontend"
    assert result["text"].startswith(f"At {AT}, 60% of mean TTFT is the API server's own")
    assert [f.id for f in ranked][:3] == ["latency.engine_frontend", "server.profiler",
                                         "server.queue_token_budget"]


def test_debug_logging_found_takes_the_api_servers_share():
    result, ranked = _verdict(_h200_findings(debug=Severity.WARNING))
    assert result["finding_id"] == "server.debug_logging"
    debug = next(f for f in ranked if f.id == "server.debug_logging")
    assert debug.impact["share"] == 0.597 and debug.severity == Severity.CRITICAL
    assert "latency.engine_frontend" not in {f.id for f in ranked}  # joined to its cause


def test_a_cause_that_was_not_found_explains_nothing():
    result, ranked = _verdict(_h200_findings(debug=Severity.OK))
    assert result["finding_id"] == "latency.engine_frontend"
    ok = next(f for f in ranked if f.id == "server.debug_logging")
    assert ok.impact is None and ok.severity == Severity.OK


def test_a_small_unexplained_share_is_no_verdict():
    # the healthy local target in CI: the API server's fixed ~48 ms was 27% of TTFT at the knee
    small = Finding("latency.engine_frontend", Severity.WARNING, "tokenization + IPC: 27%",
                    layer="frontend", role="symptom",
                    impact=make_impact("ttft_mean", 0.27, value_ms=47.7, measured_at="c=3"))
    ranked, _ = rank(join_causes([small]))
    result = verdict(ranked, VerdictInputs()).to_dict()
    assert result["finding_id"] is None  # no fault named (no load measured in this stub)


_WORSE_GUARD = {"metric": "long_e2e_mean_ms", "a_values": [], "b_values": [],
                "change_pct": 110.0, "ci95_pct": [60.0, 170.0], "verdict": "worse"}


@pytest.mark.parametrize("exp, words", [
    ({"verdict": "better", "helped": True}, "helped"),
    ({"verdict": "better", "helped": True, "guard": _WORSE_GUARD},
     "helped, at a cost (long_e2e_mean_ms worse)"),
    ({"verdict": "worse", "helped": False}, "made it worse"),
    ({"verdict": "no significant difference", "helped": False}, "did not measurably help"),
])
def test_an_ab_outcome_has_one_wording(exp, words):
    # +200% [+125%, +300%] was printed "did not measurably help" (the H200 gateway A/B); the
    # verdict, the renderers and the priority proof read this one wording
    assert ab(**exp).words() == words


def _full_batch() -> list[Finding]:
    # diagnose --url on an H200 with --max-num-seqs 64 (KV cache 3% used)
    return [Finding("server.queue_max_num_seqs", Severity.WARNING,
                    "Requests queue because the batch is full: Running 64 = max_num_seqs 64",
                    layer="queue",
                    impact=make_impact("ttft_mean", 0.95, measured_at="c=512 (past the knee)"))]


def _gateway_ab(helped: bool) -> ABResult:
    return ab(finding_id="server.queue_max_num_seqs",
              change="latscope gateway --policy sjf --max-inflight auto",
              metric="short_ttft_mean_ms", change_pct=200.0 if not helped else -60.0,
              ci95_pct=[110.3, 327.9] if not helped else [-80.0, -16.0], helped=helped,
              verdict="better" if helped else "worse", load=0)


def test_a_measured_fix_that_made_it_worse_points_to_the_one_not_measured():
    ranked, _ = rank(join_causes(_full_batch()))
    proposal = Proposal(finding_id="server.queue_max_num_seqs", change="--max-num-seqs 256",
                        why="", note="", command="")
    state = VerdictInputs(experiments=[_gateway_ab(helped=False)], proposals=[proposal])
    text = verdict(ranked, state).to_dict()["text"]
    assert "Fix measured: latscope gateway" in text and "made it worse" in text
    assert text.endswith("Not measured here, to try next: --max-num-seqs 256")
    # a fix that helped is the answer: nothing more to try is added
    state.experiments = [_gateway_ab(helped=True)]
    assert "to try next" not in verdict(ranked, state).to_dict()["text"]


def test_eager_mode_is_proposed_as_an_experiment_and_its_removal_keeps_the_model():
    from latscope.campaign.proposals import propose
    from latscope.campaign.servers import CommandControl

    control = CommandControl("vllm serve --enforce-eager /models/llama --port {port}")
    f = Finding("server.enforce_eager", Severity.WARNING, "CUDA graphs disabled", layer="config")
    p = propose(f, control, 8)
    assert p is not None and p.change.describe() == "without --enforce-eager" and p.cost_measurable
    assert p.change.apply_args(control.argv) == ["vllm", "serve", "/models/llama", "--port", "0"]
    # graphs cost decode steps, not the first token: TPOT is what the A/B measures
    assert (p.metric, p.guard) == ("tpot_mean_ms", "ttft_mean_ms")


def _recorded(name: str, tmp_path) -> "Path":
    import tarfile
    from pathlib import Path

    tgz = Path(__file__).resolve().parents[2] / "data" / "gpu-matrix" / f"{name}.tgz"
    with tarfile.open(tgz) as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / name


def test_a_kv_fix_through_url_changes_the_flag_the_server_was_started_with(tmp_path):
    # the H200 kv-small recording: diagnose --url, the server's command line read by doctor
    # from /proc; it was told to raise --gpu-memory-utilization, which the override makes moot
    from types import SimpleNamespace

    from latscope.campaign.proposals import propose
    from latscope.campaign.proofs import _seen
    from latscope.rundir import read_json

    doctor = read_json(_recorded("kv-small", tmp_path) / "doctor.json")
    seen = _seen(SimpleNamespace(doctor=SimpleNamespace(facts=doctor["facts"])))
    kv = Finding("server.kv_saturation", Severity.CRITICAL, "KV cache usage reached 97.8%",
                 layer="queue")
    p = propose(kv, seen, 8)
    assert p is not None and p.change.describe() == "without --num-gpu-blocks-override"
    # a server started without a KV limit of its own still gets the memory to try
    p = propose(kv, _seen(SimpleNamespace(doctor=None)), 8)
    assert p is not None and p.change.describe() == "--gpu-memory-utilization 0.95"


def test_a_cause_measured_at_another_load_is_its_own_sentence(tmp_path):
    # the H200 cpu-contention recording: the share at c=64, the contention read at c=1
    from latscope.campaign.replay import replay

    report = replay(_recorded("cpu-contention", tmp_path), tmp_path / "out")
    first, second = report["verdict"]["text"].split(". The cause: ", 1)
    assert first.startswith("At c=64 (past the knee at c=16), 50% of mean TTFT is the API "
                            "server's own processing") and "c=1 " not in first
    assert second.startswith("Other processes used 3.6 of the server's 4 CPUs")


def test_a_fix_an_ab_showed_to_help_is_the_verdict_with_its_cost(tmp_path):
    # the H200 eager-proven recording: diagnose --serve-cmd, no profile, the flag's A/B at c=16;
    # the code that recorded it said HEALTHY, "its cost not measured here"
    from latscope.campaign.replay import replay

    report = replay(_recorded("eager-proven", tmp_path), tmp_path / "out")
    text = report["verdict"]["text"]
    assert text.startswith("At c=16, CUDA graphs disabled (--enforce-eager) costs 78% of TPOT")
    assert "tpot_mean_ms 26.7 -> 5.8 ms (-78.1% [95% CI -85.0% .. -68.0%]): helped" in text
    assert "not measured" not in text
    top = report["findings"][0]
    assert (top["id"], top["severity"], top["impact"]["target"]) == (
        "server.enforce_eager", "critical", "tpot")


@pytest.mark.parametrize("exp", [
    {"metric": "tpot_mean_ms", "a_mean": 26.7, "b_mean": 5.8, "helped": False, "load": 16},
    {"metric": "tpot_mean_ms", "a_mean": 26.7, "b_mean": 28.0, "helped": True, "load": 16},
    {"metric": "throughput_rps", "a_mean": 10.0, "b_mean": 12.0, "helped": True, "load": 16},
])
def test_an_ab_that_did_not_help_a_latency_gives_no_share(exp):
    from latscope.findings.abtest import ab_impact

    assert ab_impact(ab(**exp)) is None
    helped = dict(exp, metric="tpot_mean_ms", a_mean=20.0, b_mean=5.0, helped=True)
    assert ab_impact(ab(**helped)) == {"target": "tpot", "share": 0.75, "value_ms": 15.0,
                                 "measured_at": "c=16", "by": "ab"}


def test_an_ab_share_of_a_cause_names_the_symptom_it_explains():
    # a CI run of the planted --max-num-seqs 2: the split gave queueing no share, the A/B did;
    # the verdict read "At c=4, Requests queue because the batch is full: ... costs 89% ..."
    exp = ab(finding_id="server.queue_max_num_seqs", change="--max-num-seqs 8",
             metric="ttft_mean_ms", a_mean=301.0, b_mean=32.2, helped=True, load=4,
             change_pct=-89.4, ci95_pct=[-91.2, -87.2], verdict="better")
    from latscope.findings.abtest import ab_impact

    cause = Finding("server.queue_max_num_seqs", Severity.CRITICAL,
                    "Requests queue because the batch is full: Running 2 = max_num_seqs 2, "
                    "Waiting 2", layer="queue", impact=ab_impact(exp))
    text = verdict([cause], VerdictInputs(experiments=[exp])).to_dict()["text"]
    assert text.startswith("At c=4, 89% of mean TTFT is queueing (what the fix took off it). "
                           "The cause: Requests queue because the batch is full"), text
    assert "Fix measured at c=4: --max-num-seqs 8" in text

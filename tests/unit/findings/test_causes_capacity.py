"""The cause-to-symptom table, the capacity verdict and the token budget's binding condition,
on findings shaped as diagnose made them on an H200 (vLLM 0.26) and on its real /metrics pages."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from latscope.findings.capacity import GpuBusy, Point, capacity_finding, plateau
from latscope.findings.causes import as_symptom, causes_of, edges, join_causes
from latscope.findings.impact import make_impact
from latscope.findings.rank import rank
from latscope.findings.verdict import HealthySplit, VerdictInputs, verdict, verdict_matches
from latscope.model import Evidence, Finding, MetricSnapshot, Severity

DOCS = Path(__file__).resolve().parents[3] / "docs" / "findings.md"
H200_SWEEP = [Point(1, 1.9), Point(8, 14.0), Point(32, 41.0), Point(64, 62.0), Point(128, 71.0),
              Point(256, 74.5)]  # +5% from c=128 to c=256: the knee was passed


def _idle(share: float = 0.8) -> Finding:
    return as_symptom(Finding("trace.gpu_idle", Severity.CRITICAL,
                              f"GPU idle {share:.0%} of the 512 ms window (device 0); the host "
                              "issued work too slowly", layer="gpu",
                              impact=make_impact("gpu_window", share, value_ms=410.0,
                                                 measured_at="c=8 (the knee)")))


def _eager() -> Finding:
    return Finding("server.enforce_eager", Severity.WARNING,
                   "CUDA graphs disabled (--enforce-eager)", layer="config",
                   evidence=[Evidence("ITL p50 at c=1 (light load)", 13.1, "ms", "the sweep")])


def test_every_edge_is_documented_in_the_findings_page():
    text = DOCS.read_text()
    for e in edges():
        assert re.search(rf"\| `{re.escape(e.symptom)}` \| `{re.escape(e.cause)}` \|", text), e


def test_eager_mode_takes_the_gpu_idle_share_and_the_verdict_states_its_decode_cost():
    ranked, _ = rank(join_causes([_idle(), _eager()]))
    assert [f.id for f in ranked] == ["server.enforce_eager"]  # the symptom joined its cause
    eager = ranked[0]
    assert eager.severity == Severity.CRITICAL and eager.impact["share"] == 0.8
    assert eager.impact["explains"] == "trace.gpu_idle"
    v = verdict(ranked).to_dict()
    assert v["finding_id"] == "server.enforce_eager" and v["kind"] == "cause"
    assert v["text"].startswith("At c=8 (the knee), the GPU is idle 80% of the profile because "
                                "of this: CUDA graphs disabled (--enforce-eager)")
    assert "Decode steps: p50 at c=1 (light load) 13.1 ms" in v["text"]
    assert "GPU window is GPU time" not in v["text"]  # the old wording about an idle GPU


def test_launch_blocking_comes_before_eager_mode_for_the_same_idle_time():
    blocking = Finding("gpu.launch_blocking", Severity.WARNING, "CUDA_LAUNCH_BLOCKING=1",
                       layer="gpu")
    ranked, _ = rank(join_causes([_idle(0.44), _eager(), blocking]))
    assert ranked[0].id == "gpu.launch_blocking" and ranked[0].impact["share"] == 0.44
    assert causes_of("trace.gpu_idle").index("gpu.launch_blocking") < \
        causes_of("trace.gpu_idle").index("server.enforce_eager")


def test_a_saturated_healthy_gpu_is_at_capacity_and_no_flag_is_blamed():
    f = capacity_finding(H200_SWEEP, knee=64, recommended=57, findings=[],
                         gpu=GpuBusy(0.96, "c=64 (the knee)", "trace.json"),
                         split_at_knee="queue 41%, prefill 33%", knee_label="c=64 (the knee)")
    assert f is not None and f.id == "capacity.saturated"
    assert "At c=64 (the knee), the server is at capacity: 62.0 req/s" in f.title
    assert "+5% per doubling of the load, from c=128 to c=256" in f.title
    assert "busy 96% of the profile at c=64" in f.title
    v = verdict([f]).to_dict()
    assert v["kind"] == "capacity" and v["healthy"] is True
    assert "trade TTFT against ITL" in v["text"] and "Run at c<=57" in v["text"]
    assert verdict_matches(v, {"kind": "capacity", "no_flag_blamed": True}) == (True, "")


def test_telemetry_busy_is_worded_as_telemetry_in_the_title_and_the_evidence():
    # NVML's utilisation is not a profile's union of kernels: neither line may call it one
    f = capacity_finding(H200_SWEEP, 64, 57, [],
                         GpuBusy(1.0, "c=64 (the knee)", "telemetry.jsonl", kind="telemetry"),
                         "", "c=64 (the knee)")
    assert f is not None and "busy 100% of the time (GPU telemetry) at c=64" in f.title
    busy = next(e for e in f.evidence if e.name.startswith("GPU busy"))
    assert busy.unit == "share of the time (GPU telemetry)" and "profile" not in busy.unit


def test_a_plateau_that_lost_throughput_says_it_fell():
    # the H200's saturated-short run: 124.4 req/s at c=128, 6% less per doubling past it
    lost = [Point(32, 80.0), Point(64, 110.0), Point(128, 124.4), Point(256, 117.0)]
    f = capacity_finding(lost, 128, 115, [], None, "", "c=128 (the knee)")
    assert f is not None and "throughput fell 6% per doubling" in f.title
    assert "rose only -" not in f.title


@pytest.mark.parametrize("binding", ["server.queue_max_num_seqs", "server.kv_saturation",
                                     "server.queue_token_budget"])
def test_a_limit_binding_on_the_servers_counters_is_the_answer_not_capacity(binding):
    found = [Finding(binding, Severity.WARNING, "binding", layer="queue")]
    assert capacity_finding(H200_SWEEP, 64, 57, found, None, "", "c=64") is None


def test_an_idle_gpu_or_a_growing_throughput_is_not_capacity():
    idle = GpuBusy(0.2, "c=64", "trace.json")
    assert capacity_finding(H200_SWEEP, 64, 57, [], idle, "", "c=64") is None
    growing = [Point(1, 2.0), Point(2, 3.9), Point(4, 7.5)]
    assert plateau(growing) is None
    assert capacity_finding(growing, None, None, [], None, "", "c=4") is None


def test_the_queue_share_past_the_knee_goes_to_capacity_only_when_no_setting_explains_it():
    queue = Finding("latency.queue", Severity.WARNING, "queue: 41%", layer="queue",
                    role="symptom", impact=make_impact("ttft_mean", 0.41,
                                                       measured_at="c=256 (past the knee)"))
    cap = capacity_finding(H200_SWEEP, 64, 57, [], None, "queue 41%", "c=64 (the knee)")
    ranked, _ = rank(join_causes([queue, cap]))
    assert [f.id for f in ranked] == ["capacity.saturated"]
    assert verdict(ranked).to_dict()["kind"] == "capacity"
    seqs = Finding("server.queue_max_num_seqs", Severity.WARNING, "batch full", layer="queue")
    queue2 = Finding("latency.queue", Severity.INFO, "queue: 9%", layer="queue", role="symptom",
                     impact=make_impact("ttft_mean", 0.09, measured_at="c=16"))
    ranked, _ = rank(join_causes([queue2, seqs]))
    # a small share measured on a slow box does not overrule the server's own counters
    assert verdict(ranked).to_dict()["finding_id"] == "server.queue_max_num_seqs"


def test_a_remainder_share_of_an_unreliable_client_is_never_the_verdict():
    frontend = Finding(
        "latency.http_frontend", Severity.WARNING, "HTTP frontend: 88 ms of 163 ms (54%) at c=1",
        layer="frontend", role="symptom",
        why="... Not blamed: the client's own timing is unreliable in this run (lag).",
        impact={**make_impact("ttft_mean", 0.54, value_ms=88.0, measured_at="c=1 (light load)"),
                "client_reliable": False})
    healthy = HealthySplit("c=1", 163, "frontend 54%", 6.8)
    v = verdict([frontend], VerdictInputs(healthy=healthy)).to_dict()
    assert v["finding_id"] is None and v["kind"] == "healthy"
    # the decision reads the typed field, never the prose: the same words without it blame
    said = dataclasses.replace(frontend, impact=make_impact("ttft_mean", 0.54, value_ms=88.0))
    assert verdict([said], VerdictInputs(healthy=healthy)).finding_id == "latency.http_frontend"


def test_a_busy_host_is_named_before_the_verdict():
    host = Finding("host.cpu_contention", Severity.CRITICAL,
                   "Other processes used 1.0 of the server's 2 CPUs (50%) during the run at c=3",
                   layer="host")
    queue = Finding("server.queue_max_num_seqs", Severity.WARNING, "batch full", layer="queue",
                    impact=make_impact("ttft_mean", 0.6, measured_at="c=16"))
    v = verdict(rank([host, queue])[0]).to_dict()
    assert v["text"].startswith("This host was busy with other work: Other processes used 1.0")
    assert v["finding_id"] == "server.queue_max_num_seqs" and v["host_busy"]


def _snap(t: float, text: str) -> MetricSnapshot:
    from latscope.server.metrics import parse_metrics_text

    return MetricSnapshot(int(t * 1e9), t, parse_metrics_text(text).samples)


def test_the_token_budget_binds_only_when_engine_steps_use_it_up(fixtures_dir):
    from latscope.findings.server import BUDGET_USED, budget_use

    h200 = fixtures_dir / "vllm" / "h200-vllm0.26"
    first = _snap(0, (h200 / "metrics_after_c128.txt").read_text())
    last = _snap(60, (h200 / "metrics_after_c512.txt").read_text())
    used, steps = budget_use([first, last], 8192)
    # at its knee the H200 ran 1163 steps of 1549 tokens on average: 19% of the 8192 budget
    assert steps == 1163 and used == pytest.approx(0.189, abs=0.001) and used < BUDGET_USED
    # the same steps under a 512-token budget would have used all of it (never above 100%)
    assert budget_use([first, last], 512)[0] == 1.0
    assert budget_use([first, last], None) is None


def test_a_merged_finding_keeps_the_title_of_the_measurement_whose_share_it_keeps():
    from latscope.findings.rank import merge

    def frontend(share: float, at: str, ms: float, total: float) -> Finding:
        return Finding("latency.http_frontend", Severity.WARNING,
                       f"HTTP frontend: {ms} ms of a {total} ms mean client TTFT ({share:.0%}) "
                       f"at {at}", layer="frontend", role="symptom",
                       impact=make_impact("ttft_mean", share, value_ms=ms, measured_at=at))

    [m] = merge([frontend(0.23, "c=64", 37.0, 163.4), frontend(0.54, "c=1", 12.0, 22.2)])
    assert m.impact["measured_at"] == "c=1" and m.title.endswith("(54%) at c=1")


VERDICTS = [
    [_idle(), _eager()],
    [capacity_finding(H200_SWEEP, 64, 57, [], GpuBusy(0.96, "c=64 (the knee)", "t"),
                      "queue 41%, prefill 33%, HTTP frontend 9%", "c=64 (the knee)")],
    [Finding("server.queue_max_num_seqs", Severity.WARNING, "Requests queue because the batch "
             "is full: Running 8 = max_num_seqs 8, Waiting 56", layer="queue",
             impact=make_impact("ttft_mean", 0.81, value_ms=410.0,
                                measured_at="c=64 (past the knee at c=8)"))],
]


@pytest.mark.parametrize("found", VERDICTS, ids=["eager", "capacity", "max_num_seqs"])
def test_no_verdict_sentence_gives_shares_of_two_loads(found):
    text = verdict(rank(join_causes(found))[0]).to_dict()["text"]
    for sentence in re.split(r"(?<=[a-z0-9)%])\. ", text):
        bare = re.sub(r"\((?:past the knee at|the knee|light load)[^)]*\)", "", sentence)
        loads = set(re.findall(r"c=\d+", bare))
        shares = re.findall(r"\d+%", bare)
        assert len(shares) < 2 or len(loads) <= 1, sentence
        assert not re.search(r"\b(\d{3,})%", bare), sentence  # no share above 100%


def test_telemetry_idle_time_is_a_symptom_that_eager_mode_takes_with_its_own_words():
    import dataclasses

    from latscope.findings.telemetry import CapacityHint, idle_time

    hint = CapacityHint(29.7, 0.0, "not_gpu", "", "NVML (nvidia-ml-py 13), c8/telemetry")
    half = dataclasses.replace(hint, gpu_busy_pct=50.0)
    assert idle_time(half, "c=8") is None  # busy half the time: no
    assert idle_time(None, "c=8") is None  # no telemetry (the CPU target): nothing said
    idle = idle_time(hint, "c=8 (the knee)")
    assert idle is not None and idle.role == "symptom"
    assert idle.impact == {"target": "gpu_time", "share": 0.703, "measured_at": "c=8 (the knee)"}
    ranked, _ = rank(join_causes([as_symptom(idle), _eager()]))
    assert [f.id for f in ranked] == ["server.enforce_eager"]
    assert ranked[0].impact["explains"] == "gpu.idle_time"
    text = verdict(ranked).to_dict()["text"]
    assert text.startswith("At c=8 (the knee), the GPU is idle 70% of the time (GPU telemetry) "
                           "because of this: ")
    assert "profile" not in text and "is GPU time" not in text
    alone = verdict(rank([as_symptom(idle)])[0]).to_dict()["text"]  # no cause found: said as a symptom
    assert "idle 70% of the time (GPU telemetry), its cause not named here" in alone

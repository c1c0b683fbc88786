"""The telemetry joined with the run's /metrics scrapes, and each GPU finding: fires on what it
names, stays quiet on a healthy or idle GPU. Exact, known situations, so the GPU samples are
written here; the rules on a real H200 recording are in test_h200_recording.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from latscope.findings.telemetry import telemetry_findings
from latscope.report.telemetry import telemetry_lines
from latscope.telemetry.facts import TelemetryFacts, telemetry_facts, utilisation_at_load
from latscope.telemetry.series import telemetry_section

T0 = 1_000_000_000_000  # perf_counter ns of the first scrape
WALL0 = 1_790_000_000.0
HEALTHY = {"util_pct": 95, "sm_clock_mhz": 1980, "sm_clock_max_mhz": 1980, "power_w": 600.0,
           "power_limit_w": 700.0, "mem_used_bytes": 120 * 2**30, "mem_total_bytes": 141 * 2**30,
           "temp_c": 60, "reasons": [], "pcie_gen": 5, "pcie_width": 16, "pcie_max_gen": 5,
           "pcie_max_width": 16, "ecc_corrected": 0, "ecc_uncorrected": 0}


def _snapshot(i: int, running: int, waiting: int) -> dict:
    return {"t_ns": T0 + i * 10**9, "wall_time": WALL0 + i, "scrape_ms": 1.0, "samples": [
        {"name": "vllm:num_requests_running", "labels": {}, "value": running},
        {"name": "vllm:num_requests_waiting", "labels": {}, "value": waiting}]}


def make_run(tmp: Path, states: list[tuple[int, int]], gpu: dict | list[dict], *,
             server: dict | None = None) -> Path:
    """One scrape per second with (running, waiting); a GPU sample 5 ms after each."""
    (tmp / "metrics").mkdir(parents=True)
    (tmp / "telemetry").mkdir()
    (tmp / "metrics" / "snapshots.jsonl").write_text("".join(
        json.dumps(_snapshot(i, r, w)) + "\n" for i, (r, w) in enumerate(states)))
    per_tick = gpu if isinstance(gpu, list) else [gpu] * len(states)
    lines = []
    for i, values in enumerate(per_tick):
        t_ns = T0 + i * 10**9 + 5_000_000
        sample = {"gpu": 0, "t_ns": t_ns, "wall_time": WALL0 + i + 0.005, "xids": [],
                  "processes": [], **values}
        lines.append(json.dumps({"t_ns": t_ns, "wall_time": sample["wall_time"],
                                 "gpus": [sample]}) + "\n")
    (tmp / "telemetry" / "samples.jsonl").write_text("".join(lines))
    summary = {"status": "ok", "source": "NVML (nvidia-ml-py 13.615.71)", "interval_s": 1.0,
               "samples": len(per_tick), "devices": [{"index": 0}],
               "server": server or {"gpus": [0], "gpus_from": "the GPUs' process lists",
                                    "others": {"0": []}}}
    (tmp / "telemetry" / "telemetry.json").write_text(json.dumps(summary))
    return tmp


QUEUED = [(0, 0)] + [(8, 12)] * 5 + [(2, 0)]


def _ids(run: Path) -> dict[str, object]:
    return {f.id: f for f in telemetry_findings(telemetry_facts(run))}


def test_healthy_gpu_gives_only_its_state(tmp_path):
    run = make_run(tmp_path, QUEUED, HEALTHY)
    facts = telemetry_facts(run)
    assert facts.queued.scrapes == 5 and facts.busy.scrapes == 6
    assert facts.queued.limited_share == 0 and utilisation_at_load(facts) == 95
    found = _ids(run)
    assert list(found) == ["gpu.busy"]
    assert found["gpu.busy"].title.startswith("GPU busy 95% of the time")


def test_power_capped_clocks_while_queued(tmp_path):
    capped = {**HEALTHY, "sm_clock_mhz": 1500, "power_w": 699.0, "reasons": ["sw_power_cap"],
              "power_default_limit_w": 700.0}
    run = make_run(tmp_path / "a", QUEUED, [HEALTHY] + [capped] * 5 + [HEALTHY])
    f = _ids(run)["gpu.clocks_limited"]
    # at the board's default limit: the design ceiling, worth knowing, nothing to restore
    assert f.severity.value == "info" and "design ceiling" in f.fix
    assert "power limit in 100% of the scrapes with requests queued" in f.title
    assert "76% of max" in f.title  # 1500 of 1980 MHz
    lowered = {**capped, "power_limit_w": 450.0, "power_w": 449.0}
    low = _ids(make_run(tmp_path / "b", QUEUED, [HEALTHY] + [lowered] * 5 + [HEALTHY]))
    f = low["gpu.clocks_limited"]
    assert f.severity.value == "warning" and f.title.endswith("; the power limit is lowered")
    assert f.fix.startswith("Restore the power limit")
    share = next(e for e in f.evidence if e.name == "queued scrapes with clocks held down")
    assert share.value == 1.0 and share.unit == "of 5 with requests waiting"
    assert f.impact is None  # a clock share is not a latency share


def test_clocks_below_max_at_idle_are_not_a_limit(tmp_path):
    idle = {**HEALTHY, "sm_clock_mhz": 345, "util_pct": 0, "reasons": ["gpu_idle"]}
    assert "gpu.clocks_limited" not in _ids(make_run(tmp_path, QUEUED, idle))


def test_gpu_mostly_idle_while_requests_wait(tmp_path):
    starved = {**HEALTHY, "util_pct": 22}
    f = _ids(make_run(tmp_path, QUEUED, starved))["gpu.underused_while_queued"]
    assert f.title.startswith("GPU busy only 22% of the time while requests waited")


def test_memory_full_and_others_on_the_server_gpu(tmp_path):
    full = {**HEALTHY, "mem_used_bytes": int(140.5 * 2**30)}
    server = {"gpus": [0], "gpus_from": "the GPUs' process lists",
              "others": {"0": [{"pid": 4242, "used_bytes": 6 * 2**30}]}}
    found = _ids(make_run(tmp_path, QUEUED, full, server=server))
    assert found["gpu.memory_full"].title == "GPU0 memory 99.6% full at its peak"
    other = found["gpu.other_process"]
    assert other.evidence[0].name == "GPU0 pid 4242" and other.evidence[0].value == 6.0


def test_pcie_link_judged_under_load_only(tmp_path):
    idle_low = {**HEALTHY, "pcie_gen": 1, "util_pct": 0}
    degraded = {**HEALTHY, "pcie_gen": 4}
    states = [(0, 0), (0, 0), (4, 0), (4, 0)]
    assert "gpu.pcie_degraded" not in _ids(make_run(tmp_path / "a", states, [
        idle_low, idle_low, HEALTHY, HEALTHY]))
    f = _ids(make_run(tmp_path / "b", states, [idle_low, idle_low, degraded, degraded]))
    assert f["gpu.pcie_degraded"].title.startswith("GPU0 PCIe link below its maximum under "
                                                   "load (gen 4 x16 of gen 5 x16)")


def test_xid_and_uncorrected_ecc_during_the_run_are_critical(tmp_path):
    later = {**HEALTHY, "ecc_uncorrected": 2, "xids": [79]}
    f = _ids(make_run(tmp_path, QUEUED, [HEALTHY] * 6 + [later]))["gpu.errors"]
    assert f.severity.value == "critical"
    assert f.title == "GPU0 reported XID 79, 2 uncorrected ECC error(s) during the run"


def test_errors_before_the_run_are_not_counted(tmp_path):
    old = {**HEALTHY, "ecc_corrected": 12}  # the same count from start to end
    assert "gpu.errors" not in _ids(make_run(tmp_path, QUEUED, old))


def test_no_telemetry_is_one_info_line(tmp_path):
    (tmp_path / "telemetry").mkdir()
    why = "no NVIDIA driver, no amdsmi, amd-smi or rocm-smi"
    (tmp_path / "telemetry" / "telemetry.json").write_text(json.dumps(
        {"status": "unavailable", "why": why, "interval_s": 2.0}))
    facts = telemetry_facts(tmp_path)
    [f] = telemetry_findings(facts)
    assert f.id == "gpu.telemetry_unavailable" and f.severity.value == "info"
    assert f.title == f"No GPU telemetry: {why}" and f.evidence == []
    assert telemetry_lines(facts) == [f"GPU telemetry: none ({why})"]
    assert telemetry_findings(telemetry_facts(tmp_path / "elsewhere")) == []  # no sampler


def test_a_samples_file_latscope_did_not_write_is_unavailable_in_one_line(tmp_path):
    run = make_run(tmp_path, QUEUED, HEALTHY)
    with (run / "telemetry" / "samples.jsonl").open("a") as fh:
        fh.write('{"t_ns": 1, "wall_time": 2.0, "gpus": [{"gpu": "zero"}]}\n{}\n')
    facts = telemetry_facts(run)
    assert facts.status == "unavailable" and "samples.jsonl: not a GPU sample" in facts.why
    assert "\n" not in facts.why
    [f] = telemetry_findings(facts)
    assert f.id == "gpu.telemetry_unavailable"


def test_samples_read_back_as_written(tmp_path):
    # the sampler's keys, and a reading the driver did not answer absent, never zero
    run = make_run(tmp_path, QUEUED, {**HEALTHY, "violation_s": {"power": 1.5}})
    line = json.loads((run / "telemetry" / "samples.jsonl").read_text().splitlines()[0])
    from latscope.telemetry.files import SampleLine, encode_line
    from latscope.telemetry.sampler import read_telemetry

    _, samples = read_telemetry(run)
    again = json.loads(encode_line(SampleLine(samples[0].t_ns, samples[0].wall_time,
                                              [samples[0]])))
    assert again == line and "power_default_limit_w" not in again["gpus"][0]
    assert samples[0].power_default_limit_w is None and samples[0].violation_s == {"power": 1.5}


def test_report_series_share_the_server_time_axis(tmp_path):
    run = make_run(tmp_path, QUEUED, HEALTHY)
    section = telemetry_section([run])
    assert section.status == "ok" and section.gpus == [0]
    assert section.t_s[0] == pytest.approx(0.005) and section.t_s[-1] == pytest.approx(6.005)
    assert section.util_pct[0] == 95
    assert section.mem_used_pct[0] == pytest.approx(100 * 120 / 141)


def test_terminal_lines_fit_80_columns(tmp_path):
    lines = telemetry_lines(telemetry_facts(make_run(tmp_path, QUEUED, HEALTHY)))
    assert lines[0].startswith("GPU telemetry (NVML")
    assert "GPU0: busy 95%, SM 1,980/1,980 MHz, 600/700 W" in lines[1]
    assert all(len(line) <= 80 for line in lines)


def test_capacity_hint_names_the_limit_at_a_load(tmp_path):
    from latscope.findings.telemetry import capacity_hint

    bound = capacity_hint(telemetry_facts(make_run(tmp_path / "a", QUEUED, HEALTHY)))
    assert bound.limit == "gpu" and bound.gpu_busy_pct == 95
    starved = capacity_hint(telemetry_facts(make_run(tmp_path / "b", QUEUED,
                                                     {**HEALTHY, "util_pct": 30})))
    assert starved.limit == "not_gpu" and "not the GPU" in starved.text
    assert capacity_hint(TelemetryFacts("unavailable", why="x")) is None


def test_an_idle_gpu_under_a_queue_is_a_symptom_not_the_cause(tmp_path):
    f = _ids(make_run(tmp_path, QUEUED, {**HEALTHY, "util_pct": 22}))["gpu.underused_while_queued"]
    assert f.role == "symptom" and f.impact is None

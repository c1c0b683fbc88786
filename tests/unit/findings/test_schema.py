"""``findings.json`` validates against the one Finding schema (src/latscope/findings/schema.json),
for findings made from real inputs: vLLM server logs and ``/metrics`` pages, a profiler trace,
doctor on this host, and ``latscope net`` against a real (fake-OpenAI) loopback server. Each file
is written by ``RunDir.write_findings``, as every verb writes it; each finding's reference names
the docs/findings.md section of its own id."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
import pytest

from latscope.campaign.doctor import run_doctor
from latscope.campaign.doctor import probe_network as probe
from latscope.findings.impact import IMPACT_TARGETS
from latscope.findings.server import findings_from_log, findings_from_metrics
from latscope.model import Evidence, Finding, MetricSnapshot, Severity
from latscope.rundir import RunDir
from latscope.server.logs import parse_log
from latscope.server.metrics import parse_metrics_text
from latscope.trace.analyze import analyze_trace
from latscope.findings.trace import trace_findings
from latscope.trace.readers import read_trace

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: fakeserver
from fakeserver import FakeServer  # noqa: E402

SCHEMA_PATH = Path(__file__).resolve().parents[3] / "src" / "latscope" / "findings" / "schema.json"


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _written(tmp_path: Path, findings: list[Finding]) -> dict:
    run = RunDir.create("test", tmp_path / "run")
    path = run.write_findings(findings)
    return json.loads(path.read_text(encoding="utf-8"))


def _check(validator, anchor_of, tmp_path: Path, findings: list[Finding]) -> dict:
    assert findings, "nothing to validate: the input produced no finding"
    data = _written(tmp_path, findings)
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(data)]
    assert errors == []
    for f in findings:
        if f.reference:
            assert f.reference.split(";")[0] == f"docs/findings.md#{anchor_of(f.id)}", f.id
    return data


def test_the_schema_ships_with_the_package_and_knows_every_impact_target(validator):
    assert SCHEMA_PATH.is_file()
    targets = validator.schema["$defs"]["impact"]["properties"]["target"]["enum"]
    assert targets == list(IMPACT_TARGETS)


def test_the_schema_refuses_what_the_model_forbids(validator, tmp_path):
    good = Finding("server.kv_saturation", Severity.WARNING, "KV full",
                   [Evidence("vllm:kv_cache_usage_perc", 0.97, "", "/metrics")],
                   reference="docs/findings.md#server.kv_saturation", layer="queue",
                   impact={"target": "ttft_mean", "share": 0.4})
    assert validator.is_valid(_written(tmp_path, [good]))
    broken = {
        "share above 100 %": {**good.to_dict(), "impact": {"target": "ttft_mean", "share": 1.2}},
        "unknown target": {**good.to_dict(), "impact": {"metric": "x", "share": 0.2}},
        "cites shared docs": {**good.to_dict(), "reference": "vllm-facts.md section 6 #6"},
        "warning, no reference": {**good.to_dict(), "reference": ""},
        "bad severity": {**good.to_dict(), "severity": "bad"},
        "critical symptom": {**good.to_dict(), "severity": "critical", "role": "symptom"},
    }
    for why, finding in broken.items():
        assert not validator.is_valid({"schema_version": 1, "findings": [finding]}), why


@pytest.mark.parametrize("log", ["cpu-vllm0.32/server_debug.log", "h200-vllm0.26/server.log"])
def test_findings_from_real_server_logs(validator, anchor_of, fixtures_dir, tmp_path, log):
    findings = findings_from_log(parse_log(fixtures_dir / "vllm" / log))
    data = _check(validator, anchor_of, tmp_path, findings)
    if log.endswith("server_debug.log"):
        assert "server.debug_logging" in {f["id"] for f in data["findings"]}


def test_findings_from_real_metrics_pages(validator, anchor_of, fixtures_dir, tmp_path):
    pages = ["h200-vllm0.26/metrics_after_c128.txt", "h200-vllm0.26/metrics_after_c512.txt"]
    snaps = [MetricSnapshot(int(i * 60e9), i * 60.0, parse_metrics_text(
        (fixtures_dir / "vllm" / p).read_text()).samples) for i, p in enumerate(pages)]
    off = parse_metrics_text((fixtures_dir / "vllm/cpu-vllm0.32/metrics_disable_log_stats.txt")
                             .read_text())
    findings = findings_from_metrics(snaps, max_num_seqs=1024, max_num_seqs_source="test")
    findings += findings_from_metrics([MetricSnapshot(0, 0.0, off.samples)])
    findings += findings_from_metrics([])
    _check(validator, anchor_of, tmp_path, findings)


def test_findings_from_a_real_trace(validator, anchor_of, fixtures_dir, tmp_path):
    trace = read_trace(fixtures_dir / "traces" / "nvidia_b200_vllm_eager_tp8.pt.trace.json.gz")
    findings = trace_findings(analyze_trace(trace))
    assert {"trace.gpu_idle"} <= {f.id for f in findings}
    _check(validator, anchor_of, tmp_path, findings)


def test_trace_findings_other_than_impact_follow_the_schema(validator, anchor_of, fixtures_dir,
                                                            tmp_path):
    # Until the impacts above are converted: everything else of the trace findings must hold.
    trace = read_trace(fixtures_dir / "traces" / "amd_mi300x_vllm_gptoss_prefilldecode_piecewise"
                       ".pt.trace.json.gz")
    findings = trace_findings(analyze_trace(trace))
    for f in findings:
        f.impact = None
    _check(validator, anchor_of, tmp_path, findings)


def test_doctor_on_this_host(validator, anchor_of, tmp_path):
    findings = run_doctor().findings
    data = _check(validator, anchor_of, tmp_path, findings)
    ids = {f["id"] for f in data["findings"]}
    assert {"host.numa_balancing", "server.debug_logging", "gpu.launch_blocking"} <= ids


def test_doctor_on_a_real_debug_log(validator, anchor_of, fixtures_dir, tmp_path):
    findings = run_doctor(log=str(fixtures_dir / "vllm/cpu-vllm0.32/server_debug.log")).findings
    data = _check(validator, anchor_of, tmp_path, findings)
    debug = next(f for f in data["findings"] if f["id"] == "server.debug_logging")
    assert debug["severity"] == "warning"


def test_net_against_a_loopback_server(validator, anchor_of, tmp_path):
    with FakeServer(ttft_ms=20.0, itl_ms=5.0) as server:
        report = probe(server.url, 4, stream_requests=2)
    ids = {f.id for f in report.findings}
    assert {"net.connect", "net.http_rtt", "net.verdict"} <= ids
    _check(validator, anchor_of, tmp_path, report.findings)

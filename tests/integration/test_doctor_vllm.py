"""doctor and net against a real local vLLM (the constrained target: VLLM_LOGGING_LEVEL=DEBUG,
--enable-log-requests), the second behind the 10 ms delaying proxy."""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: delay_proxy
from delay_proxy import DelayProxy  # noqa: E402

from latscope.campaign.doctor import run_doctor  # noqa: E402
from latscope.campaign.doctor import probe_network as probe  # noqa: E402
from latscope.model import Severity  # noqa: E402

pytestmark = pytest.mark.integration


def by_id(report):
    return {f.id: f for f in report.findings}


def test_doctor_flags_debug_logging_and_request_logging(vllm_target_constrained):
    target = vllm_target_constrained
    report = run_doctor(url=target.url, log=str(target.log_path))  # pid found from the port
    assert report.facts["pid"] is not None
    found = by_id(report)
    debug = found["server.debug_logging"]
    assert debug.severity == Severity.WARNING
    env_evidence = [e for e in debug.evidence if e.name == "VLLM_LOGGING_LEVEL"]
    assert env_evidence and env_evidence[0].value == "DEBUG"
    assert env_evidence[0].source == f"/proc/{report.facts['pid']}/environ"
    requests = found["server.request_logging"]
    assert requests.severity == Severity.WARNING
    assert requests.evidence[0].value is True
    assert found["server.endpoints"].title.startswith("server answers (vLLM 0.")
    assert found["server.cache_config"].severity == Severity.INFO


def test_doctor_with_explicit_pid_reads_the_command_line(vllm_target_constrained):
    target = vllm_target_constrained
    report = run_doctor(url=target.url, pid=target.pid)
    settings = report.facts["server"]["settings"]
    assert settings["request_logging"]["value"] is True
    assert settings["request_logging"]["source"] == f"/proc/{target.pid}/cmdline"
    assert settings["max_num_seqs"]["value"] == 2


def test_net_through_delay_proxy_compares_with_server_ttft(vllm_target_constrained):
    parts = urlsplit(vllm_target_constrained.url)
    with DelayProxy((parts.hostname, parts.port), 10.0) as proxy:
        report = probe(proxy.url, 10, stream_requests=3)
    assert report.stream.model and len(report.stream.ttft_ms) == 3
    assert report.stream.server_ttft_mean_ms is not None  # read from vLLM's /metrics
    verdict = by_id(report)["net.verdict"]
    assert verdict.title.startswith("network is")
    outside = dict((e.name, e.value) for e in verdict.evidence)["client mean - server mean TTFT"]
    # the client waits the planted 20 ms round trip more than the engine's own TTFT
    assert outside >= 18.0
    assert verdict.severity == Severity.WARNING  # > 10 ms outside the engine
    # the proxy is on loopback: the advice looks for the proxy, never for distance
    assert "share this host" in verdict.fix and "closer" not in verdict.fix

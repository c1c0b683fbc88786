"""A CPU-only host: bench runs as before, and says in one line why there is no GPU telemetry."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from latscope.cli.main import main
from latscope.telemetry.sources import TelemetryUnavailable, open_source

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: fakeserver
from fakeserver import FakeServer  # noqa: E402


@pytest.fixture(scope="module")
def no_gpu() -> str:
    try:
        source = open_source()
    except TelemetryUnavailable as exc:
        return str(exc)
    source.close()
    pytest.skip(f"this host has GPU telemetry ({source.name}): the CPU-only line cannot show")


def test_bench_on_a_cpu_host_prints_one_line_saying_why(no_gpu, tmp_path, capsys):
    with FakeServer(ttft_ms=2.0, itl_ms=1.0) as server:
        rc = main(["bench", "--url", server.url, "-n", "6", "-c", "2", "--no-progress",
                   "--output-dir", str(tmp_path / "b")])
    assert rc == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "GPU telemetry" in line]
    assert len(lines) == 1 and lines[0].split() == ["info", "No", "GPU", "telemetry:",
                                                    *no_gpu.split()]
    assert "Traceback" not in out
    summary = json.loads((tmp_path / "b" / "telemetry" / "telemetry.json").read_text())
    assert summary["status"] == "unavailable" and summary["why"] == no_gpu
    findings = json.loads((tmp_path / "b" / "findings.json").read_text())["findings"] \
        if (tmp_path / "b" / "findings.json").is_file() else []
    assert [f["id"] for f in findings if f["id"].startswith("gpu.")] in (
        [], ["gpu.telemetry_unavailable"])


def test_no_gpu_telemetry_flag_turns_the_sampler_off(tmp_path, capsys):
    with FakeServer(ttft_ms=2.0, itl_ms=1.0) as server:
        assert main(["bench", "--url", server.url, "-n", "4", "-c", "2", "--no-progress",
                     "--no-gpu-telemetry", "--output-dir", str(tmp_path / "b")]) == 0
    assert "GPU telemetry" not in capsys.readouterr().out
    assert not (tmp_path / "b" / "telemetry").exists()

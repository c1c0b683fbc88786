"""diagnose stopped by SIGTERM or Ctrl-C keeps what it gathered: the stages done, a report of
them and a manifest that says it was interrupted (exit 130), against a fake OpenAI server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: fakeserver
from fakeserver import FakeServer  # noqa: E402

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
def test_a_stopped_diagnose_keeps_its_stages_and_writes_its_report(tmp_path, sig):
    out = tmp_path / "run"
    with FakeServer(ttft_ms=5.0, itl_ms=20.0) as server:
        proc = subprocess.Popen(
            [sys.executable, "-m", "latscope", "diagnose", "--url", server.url, "-c", "1,2,4",
             "--budget", "120", "-o", str(out)],
            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO / "src")},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not list((out / "sweep").glob("step-*")):
            time.sleep(0.2)  # wait until the sweep is running
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    report = json.loads((out / "report.json").read_text())
    done = {s["name"] for s in report["stages"]}
    assert {"doctor", "net", "sweep"} <= done
    assert any("interrupted" in n for n in report["notes"])
    assert (out / "report.md").is_file() and (out / "doctor.json").is_file()

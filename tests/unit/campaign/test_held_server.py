"""The diagnosed server is set aside while an A/B's arms each start their own server: two vLLM
servers cannot share one GPU (each takes --gpu-memory-utilization of it). Run against tiny real
HTTP servers started through ``--serve-cmd`` (``CommandControl``), as a user's command would be."""

from __future__ import annotations

import os
import sys
import textwrap
import urllib.request
from pathlib import Path

from latscope.campaign.experiment import _arms
from latscope.campaign.proposals import Proposal
from latscope.campaign.servers import Change, CommandControl, HeldServer

# /health on the port given; a second server on this host would still start (ports differ),
# so what is asserted is the first one's process, not a bind failure.
SERVER = textwrap.dedent("""
    import http.server, sys
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()
        def log_message(self, *a):
            pass
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
""")


def _control(tmp_path: Path) -> CommandControl:
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    return CommandControl(f"{sys.executable} {script} {{port}}", ready_timeout_s=30)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _healthy(url: str) -> bool:
    with urllib.request.urlopen(f"{url}/health", timeout=5) as r:
        return r.status == 200


def test_arms_that_restart_never_run_beside_the_diagnosed_server(tmp_path):
    control = _control(tmp_path)
    seen = []
    with HeldServer(control, tmp_path / "server") as current:
        first_pid, first_url = current.pid, current.url
        assert first_pid is not None and _healthy(first_url)
        proposal = Proposal("server.enforce_eager", Change(remove=("--enforce-eager",)))
        with _arms(control, current, proposal, tmp_path / "ab") as arm_url:
            for arm in ("A", "B"):
                with arm_url(arm) as (url, *_):
                    # the arm's own server answers, and the diagnosed one is stopped
                    seen.append((arm, _healthy(url), _alive(first_pid)))
        # started again after the A/B, with the same launch: the later stages find it
        assert current.pid not in (None, first_pid) and _healthy(current.url)
        assert current.url != first_url  # a fresh port, read from the same Running
        assert (tmp_path / "server-1").is_dir()  # its log beside the first one's
        second_pid = current.pid
    assert seen == [("A", True, False), ("B", True, False)]
    assert not _alive(second_pid)  # and stopped when diagnose ends


def test_a_control_whose_arms_run_side_by_side_keeps_the_server_running(tmp_path):
    class SideBySide(CommandControl):
        concurrent_arms = True

    control = SideBySide(_control(tmp_path).template, ready_timeout_s=30)
    with HeldServer(control, tmp_path / "server") as current:
        pid = current.pid
        with current.set_aside():
            assert pid is not None and _alive(pid)
        assert current.pid == pid

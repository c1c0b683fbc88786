"""Finding the server's pid from its port, and reading vLLM flags from its command line."""

from __future__ import annotations

import os
import socket

from latscope.server.hostview import HostView
from latscope.env.serverfacts import settings_from_cmdline
from latscope.server.hostview import find_listening_pid


def test_listening_pid_is_this_process():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    try:
        assert find_listening_pid(HostView(), sock.getsockname()[1]) == os.getpid()
    finally:
        sock.close()


def test_closed_port_has_no_pid():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    assert find_listening_pid(HostView(), port) is None


def test_cmdline_flags_with_and_without_values():
    argv = ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m",
            "--enable-log-requests", "--max-num-seqs", "2", "-tp=4", "--no-enable-chunked-prefill",
            "--max-log-len", "100"]
    settings = settings_from_cmdline(argv, "/proc/7/cmdline")
    assert {k: v for k, (v, _) in settings.items()} == {
        "request_logging": True, "max_num_seqs": 2, "tensor_parallel_size": 4,
        "chunked_prefill": False, "max_log_len": 100}
    assert {src for _, src in settings.values()} == {"/proc/7/cmdline"}


def test_doctor_does_not_follow_redirects_nor_report_url_password():
    import http.server
    import threading

    from latscope.env.serverfacts import gather_server_facts

    hits = []

    class Redirect(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            self.send_response(302)
            self.send_header("Location", "http://192.0.2.1/elsewhere")  # TEST-NET: never reached
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        facts = gather_server_facts(f"http://u:pw7secret@127.0.0.1:{server.server_address[1]}",
                                    None, {})
    finally:
        server.shutdown()
        server.server_close()
    assert facts.endpoints == {"/version": 302, "/v1/models": 302, "/metrics": 302}
    assert "pw7secret" not in facts.url and "127.0.0.1" in facts.url

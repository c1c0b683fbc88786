"""Finding the server's pid from its port, and reading vLLM flags from its command line."""

from __future__ import annotations

import os
import socket

from latscope.env.hostview import HostView
from latscope.env.serverfacts import find_listening_pid, settings_from_cmdline


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

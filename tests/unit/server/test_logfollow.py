"""Following a real vLLM log (vLLM 0.32's DEBUG log with request logging, from the CPU build)
as it is written: the window gets exactly the lines written during it, a rotation under the
follower (the file renamed and a new one made, as logrotate does) and a truncation are followed
into the new content, and the window's lines are parsed with the head's configuration."""

from __future__ import annotations

import os
import time

import pytest

from latscope.model import RunContext
from latscope.server.logfollow import WINDOW_LOG, LogFollower, window_log


@pytest.fixture
def lines(fixtures_dir) -> list[str]:
    text = (fixtures_dir / "vllm" / "cpu-vllm0.32" / "server_debug.log").read_text()
    return text.splitlines(keepends=True)


def _ctx(tmp_path) -> RunContext:
    return RunContext("http://127.0.0.1:1", tmp_path / "run", {}, time.perf_counter_ns(),
                      time.time())


def _startup_end(lines: list[str]) -> int:
    """The line after the startup configuration (the first stats line's index)."""
    return next(i for i, line in enumerate(lines) if "Avg prompt throughput" in line)


async def test_the_window_holds_the_lines_written_during_it_across_a_rotation(lines, tmp_path):
    log = tmp_path / "vllm.log"
    head = _startup_end(lines)
    log.write_text("".join(lines[:head]))
    follower = LogFollower(log, poll_s=0.05)
    ctx = _ctx(tmp_path)
    (tmp_path / "run").mkdir()
    await follower.start(ctx)
    middle = head + (len(lines) - head) // 2
    with log.open("a") as fh:
        fh.write("".join(lines[head:middle]))
    follower.poll()
    os.rename(log, tmp_path / "vllm.log.1")  # logrotate: moved away, a new file in its place
    with (tmp_path / "vllm.log.1").open("a") as fh:  # the server still held the old one
        fh.write(lines[middle])
    log.write_text("".join(lines[middle + 1:]))
    follower.poll()
    await follower.stop(ctx)
    window = (tmp_path / "run" / WINDOW_LOG).read_text()
    assert window == "".join(lines[head:])  # every line once, in order, none from the head
    assert [r["why"] for r in follower.rotations] == [
        "a new file under the log's name (rotated)"]
    parsed = window_log(tmp_path / "run" / WINDOW_LOG, follower.head, name="vllm.log")
    assert parsed.stats and parsed.config["log_level"] == "DEBUG"
    # the configuration is the head's (startup lines are not in the window)
    assert follower.head is not None
    for key in ("max_num_seqs", "kv_device", "version"):
        if follower.head.config.get(key) is not None:
            assert parsed.config[key] == follower.head.config[key]
    assert parsed.line_rate.step_lines > 0  # the window's per-step DEBUG lines, counted


async def test_a_truncated_log_is_read_again_from_its_start(lines, tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text("".join(lines[:50]))
    (tmp_path / "run").mkdir()
    follower = LogFollower(log, poll_s=0.05)
    ctx = _ctx(tmp_path)
    await follower.start(ctx)
    log.write_text("".join(lines[50:60]))  # truncated and rewritten (copytruncate): shorter
    follower.poll()
    await follower.stop(ctx)
    assert (tmp_path / "run" / WINDOW_LOG).read_text() == "".join(lines[50:60])
    assert follower.rotations and "truncated" in follower.rotations[0]["why"]


async def test_a_half_written_line_waits_for_its_end(lines, tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text("")
    (tmp_path / "run").mkdir()
    follower = LogFollower(log, poll_s=10)
    ctx = _ctx(tmp_path)
    await follower.start(ctx)
    line = lines[-1] if lines[-1].endswith("\n") else lines[-1] + "\n"
    with log.open("a") as fh:
        fh.write(line[:10])
    follower.poll()
    assert (tmp_path / "run" / WINDOW_LOG).read_text() == ""
    with log.open("a") as fh:
        fh.write(line[10:])
    await follower.stop(ctx)
    assert (tmp_path / "run" / WINDOW_LOG).read_text() == line

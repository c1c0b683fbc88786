"""--policy tag: each request's vLLM `priority` is its sjf deadline (aging included), nothing is
held below the limit, and the server's scheduling policy is read from its flags, its log or its
/server_info, so that tags sent to a server that ignores them are said to change nothing."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from latscope.gateway import running_gateway
from latscope.gateway.tags import (
    ServerPolicy,
    deadline_priority,
    policy_from_argv,
    policy_from_log,
    policy_from_server_info,
    tag_rate,
)

# --- the tag -----------------------------------------------------------------------------------


def test_a_short_request_is_tagged_ahead_of_a_long_one_that_came_shortly_before():
    long_ = deadline_priority(arrival_s=10.0, start_s=0.0, cost=2304, rate=1000, aging_factor=4)
    short = deadline_priority(arrival_s=10.5, start_s=0.0, cost=40, rate=1000, aging_factor=4)
    assert short < long_  # vLLM pops the lower priority first


def test_aging_bounds_how_long_a_long_request_is_passed():
    # a request of cost C is passed only by requests arriving within K x C / rate after it
    long_ = deadline_priority(10.0, 0.0, cost=2000, rate=1000, aging_factor=2)  # deadline 14 s
    just_inside = deadline_priority(13.9, 0.0, cost=0, rate=1000, aging_factor=2)
    just_after = deadline_priority(14.1, 0.0, cost=0, rate=1000, aging_factor=2)
    assert just_inside < long_ < just_after
    assert long_ == 14_000  # milliseconds since the gateway started


def test_the_horizon_is_a_requests_time_in_a_full_batch_not_its_share_of_the_server():
    # 64 requests in flight share 1000 cost units/s: a long one (C = 2000) spends ~128 s in the
    # server, and is passed by short ones arriving within K of those, not within K x C / 1000
    rate = tag_rate(1000.0, inflight=64)
    assert rate == 1000.0 / 64
    long_ = deadline_priority(10.0, 0.0, cost=2000, rate=rate, aging_factor=1)
    assert deadline_priority(10.0 + 100.0, 0.0, cost=40, rate=rate, aging_factor=1) < long_
    assert deadline_priority(10.0 + 130.0, 0.0, cost=40, rate=rate, aging_factor=1) > long_
    assert tag_rate(1000.0, inflight=0) == 1000.0  # nothing in flight: the whole rate


# --- the server's policy ------------------------------------------------------------------------

@pytest.mark.parametrize("argv, policy", [
    (["vllm", "serve", "m", "--scheduling-policy", "priority"], "priority"),
    (["python3", "-m", "vllm.entrypoints.cli.main", "serve", "m", "--scheduling-policy=fcfs"],
     "fcfs"),
    (["vllm", "serve", "m", "--max-num-seqs", "2"], "fcfs"),  # vLLM's default
    (["sglang", "--port", "1"], None),  # not recognisably vLLM: unknown
])
def test_the_policy_is_read_from_a_command_line(argv, policy):
    assert policy_from_argv(argv) == policy


def test_a_captured_vllm_log_without_the_flag_runs_fcfs(fixtures_dir):
    # real logs (vLLM 0.32 CPU, 0.26 H200) whose non-default args name no scheduling policy
    assert policy_from_log(fixtures_dir / "vllm" / "cpu-vllm0.32" / "server.log") == "fcfs"
    assert policy_from_log(fixtures_dir / "vllm" / "h200-vllm0.26" / "server.log") == "fcfs"


def test_a_captured_vllm_log_with_the_flag_runs_priority():
    # the head of a vLLM 0.32 CPU log started with --scheduling-policy priority (this repo)
    log = Path(__file__).parent / "data" / "vllm032-priority-head.log"
    assert policy_from_log(log) == "priority"


def test_a_log_of_something_else_names_no_policy(tmp_path):
    other = tmp_path / "other.log"
    other.write_text("INFO starting\nINFO ready\n")
    assert policy_from_log(other) is None


def test_server_info_json_names_the_policy():
    assert policy_from_server_info({"vllm_config": {"scheduler_config": {"policy": "priority"}}}
                                   ) == "priority"
    assert policy_from_server_info({"vllm_config": "model='m', enforce_eager=True"}) is None
    assert policy_from_server_info("not a dict") is None


def test_the_description_says_when_tags_change_nothing():
    assert "ignores `priority`" in ServerPolicy("fcfs", "from its log").describe()
    assert ServerPolicy("fcfs", "x").honours_priority is False
    assert ServerPolicy("priority", "x").honours_priority is True
    assert ServerPolicy(None, "x").honours_priority is None
    assert "unknown" in ServerPolicy(None, "x").describe()


# --- the gateway in tag mode, against an upstream that records what it is sent --------------

@contextlib.contextmanager
def _recording_upstream(server_info: dict | None, delay_s: float = 0.0):
    """An OpenAI-shaped upstream that records each completion's body (what the gateway sent is
    the point here, not timing); ``/server_info`` answers ``server_info`` when given."""
    seen: list[dict] = []
    started = threading.Event()
    state: dict = {}

    async def completions(request: web.Request) -> web.Response:
        seen.append(await request.json())
        await asyncio.sleep(delay_s)
        return web.json_response({"choices": [{"text": "x"}]})

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "m"}]})

    async def info(request: web.Request) -> web.Response:
        if server_info is None:
            raise web.HTTPNotFound()
        return web.json_response(server_info)

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/v1/completions", completions)
        app.router.add_get("/v1/models", models)
        app.router.add_get("/server_info", info)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        state["url"] = "http://127.0.0.1:%d" % runner.addresses[0][1]
        state["stop"] = asyncio.Event()
        started.set()
        await state["stop"].wait()
        await runner.cleanup()

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert started.wait(10)
    try:
        yield state["url"], seen
    finally:
        loop.call_soon_threadsafe(state["stop"].set)
        thread.join(10)
        loop.close()


async def _send(url: str, prompt: str, max_tokens: int, **extra) -> int:
    body = {"model": "m", "prompt": prompt, "max_tokens": max_tokens, **extra}
    async with aiohttp.ClientSession() as session:
        async with session.post(url + "/v1/completions", json=body) as resp:
            await resp.read()
            return resp.status


async def test_tag_mode_forwards_everything_at_once_with_deadline_priorities():
    info = {"vllm_config": {"scheduler_config": {"policy": "priority"}}}
    with _recording_upstream(info, delay_s=0.3) as (upstream, seen):
        with running_gateway(upstream, policy="tag", mode="thread", aging_rate=1000.0) as url:
            # ten at once, each held 0.3 s upstream: a gateway that held any would take longer
            long_, short = "word " * 2000, "word " * 8
            t0 = asyncio.get_running_loop().time()
            statuses = await asyncio.gather(
                *[_send(url, long_ if i == 0 else short, 256 if i == 0 else 8)
                  for i in range(10)], _send(url, short, 8, priority=7))
            took = asyncio.get_running_loop().time() - t0
            page = await _metrics(url)
    assert statuses == [200] * 11
    assert took < 0.3 * 3  # all in flight together (the truth is ~0.3 s)
    work = [b for b in seen if b.get("max_tokens") != 1]  # not the start's acceptance probe
    tags = {b["max_tokens"]: b["priority"] for b in work if b["priority"] != 7}
    assert tags[256] > tags[8]  # the long one's deadline is later
    assert sum(1 for b in work if b["priority"] == 7) == 1  # a caller's own priority is kept
    assert "latscope_gateway_upstream_priority_honoured 1.0" in page


async def test_a_tag_ages_by_the_requests_in_flight_with_it():
    # nine short requests held upstream, then a long one: its horizon is K x its cost over the
    # rate it gets among the ten in flight (tags.tag_rate), ten times K x C / rate alone
    with _recording_upstream(None, delay_s=2.0) as (upstream, seen):
        with running_gateway(upstream, policy="tag", mode="thread", aging_rate=1000.0,
                             server_policy="priority") as url:
            shorts = [asyncio.ensure_future(_send(url, "word " * 8, 8)) for _ in range(9)]
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10
            while sum(1 for b in seen if b.get("max_tokens") == 8) < 9:  # all nine upstream
                assert loop.time() < deadline, "the short requests never reached the upstream"
                await asyncio.sleep(0.01)
            assert await _send(url, "word " * 2000, 256) == 200
            assert await asyncio.gather(*shorts) == [200] * 9
    tags = [b["priority"] for b in seen if b.get("max_tokens") in (8, 256)]
    long_cost = len("word " * 2000) / 4 + 256  # the gateway's estimate: len(text) / 4 + max_tokens
    # K = 4 at 1000 units/s: 11 s with the whole rate; >= 5 in flight counted gives > 55 s
    assert tags[-1] - max(tags[:-1]) > 4 * long_cost * 5


async def test_tag_mode_says_when_the_server_ignores_priorities(tmp_path, caplog):
    log = tmp_path / "vllm.log"  # a real vLLM 0.32 log's head: no --scheduling-policy in it
    log.write_text(Path(__file__).parent.joinpath("data", "vllm032-fcfs-head.log").read_text())
    with _recording_upstream(None) as (upstream, seen):
        with caplog.at_level("WARNING", logger="latscope.gateway"):
            with running_gateway(upstream, policy="tag", mode="thread",
                                 server_log=str(log)) as url:
                assert await _send(url, "a b c", 4) == 200
                page = await _metrics(url)
    assert "latscope_gateway_upstream_priority_honoured 0.0" in page
    assert any("ignores `priority`" in r.getMessage() for r in caplog.records)
    assert "priority" in seen[-1]  # still tagged: harmless, and honoured after a restart


async def _metrics(url: str) -> str:
    async with aiohttp.ClientSession() as session:
        async with session.get(url + "/metrics") as resp:
            return await resp.text()


def test_tag_mode_refuses_to_run_without_setting_priorities(capsys):
    from latscope.cli.main import main

    assert main(["gateway", "--upstream", "http://127.0.0.1:1", "--policy", "tag",
                 "--upstream-priority", "off"]) == 1
    err = capsys.readouterr().err.strip()
    assert "--policy tag" in err and "\n" not in err


def test_the_process_gateway_gets_the_tag_options(tmp_path):
    from latscope.gateway.config import GatewayConfig
    from latscope.gateway.run import cli_args

    args = cli_args(GatewayConfig(upstream="http://x:1", policy="tag", server_policy="priority",
                                  server_log=str(tmp_path / "l")))
    assert args[args.index("--policy") + 1] == "tag"
    assert args[args.index("--server-policy") + 1] == "priority"
    assert json.dumps(args).count("--server-log") == 1


# --- bench --priority-by cost ----------------------------------------------------------------

def test_bench_tags_each_body_by_its_cost_only_when_asked():
    from latscope.load import BenchConfig
    from latscope.load.prepare import request_body
    from latscope.load.workload import Prompt

    tagged = BenchConfig(url="http://x:1", priority_by="cost")
    short = json.loads(request_body(tagged, "m", Prompt("a", 32, 8)))
    long_ = json.loads(request_body(tagged, "m", Prompt("a", 512, 256)))
    plain = json.loads(request_body(BenchConfig(url="http://x:1"), "m", Prompt("a", 32, 8)))
    assert short["priority"] < long_["priority"]
    assert "priority" not in plain


def test_bench_refuses_an_unknown_priority_source():
    from latscope.errors import ConfigError
    from latscope.load import BenchConfig

    with pytest.raises(ConfigError, match="priority_by"):
        BenchConfig(url="http://x:1", priority_by="size").validate()

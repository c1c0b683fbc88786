"""``--policy tag``: priorities for the engine's own queue instead of a queue in the gateway.

vLLM started with ``--scheduling-policy priority`` keeps its waiting requests in a heap ordered by
``(priority, arrival_time)`` (``vllm/v1/core/sched/request_queue.py``), lower first, and when it
runs out of KV blocks preempts the running request with the largest pair. A tag that is the
request's *sjf deadline*, in milliseconds since the gateway started,

    priority = round(1000 x (arrival - start + K x cost / per_request_rate))

makes that heap earliest-deadline-first with aging: a request of cost C is only ever passed by
requests that arrived within ``K x C / per_request_rate`` seconds after it, however short they
are. ``per_request_rate`` is the served rate over the requests in flight (``tag_rate``): every
request the gateway forwards is in the server at once, sharing its rate, so ``C /
per_request_rate`` is about the request's own time in the server (Little's law), and the horizon
is K of those whatever the batch size. The gateway's queue (``sjf``) drains at the whole served
rate and ages by ``C / rate``; the same horizon here, a request's *share* of the server's time, is
1/64 of its time in a 64-slot batch: on an H200 (--max-num-seqs 64, c=128) the tags left vLLM's
queue in arrival order (short TTFT -5% where the client's cost buckets gave -69%), and on the
2-core box K had to be 16 for them to matter (docs/gateway.md). Nothing is held back, so a
finished request's slot is refilled in vLLM's next step, without the proxy hop a request held in
the gateway pays.

vLLM accepts the field under its default ``fcfs`` policy too and ignores it there, so tags alone
prove nothing: ``server_policy`` reads the policy the server runs with, from its command line, its
log's ``non-default args`` line, or its ``/server_info`` (only with ``VLLM_SERVER_DEV_MODE=1``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# vLLM's default (vllm/config/scheduler.py: ``policy: SchedulerPolicy = "fcfs"``)
VLLM_DEFAULT_POLICY = "fcfs"
POLICY_FLAG = "--scheduling-policy"


def deadline_priority(arrival_s: float, start_s: float, cost: float, rate: float,
                      aging_factor: float) -> int:
    """vLLM's ``priority`` for a request: its deadline in ms since ``start_s`` (same clock as
    ``arrival_s``); lower runs first. ``rate`` is in cost units per second (> 0)."""
    return round(1000.0 * (arrival_s - start_s + aging_factor * cost / rate))


def tag_rate(served_rate: float, inflight: int) -> float:
    """The rate one request is served at when ``inflight`` share the server (all forwarded at
    once, as ``tag`` does): the served rate over them, so that ``cost / tag_rate`` is about the
    request's time in the server rather than its share of the server's time."""
    return served_rate / max(1, inflight)


@dataclass(frozen=True)
class ServerPolicy:
    """The upstream's scheduling policy and where it was read (``policy`` None: unknown)."""

    policy: str | None
    source: str

    @property
    def honours_priority(self) -> bool | None:
        return None if self.policy is None else self.policy == "priority"

    def describe(self) -> str:
        if self.policy is None:
            return ("server policy unknown: vLLM accepts `priority` under --scheduling-policy "
                    "fcfs and ignores it; start it with --scheduling-policy priority")
        if self.policy == "priority":
            return f"server policy priority ({self.source}): tags reorder its queue"
        return (f"server policy {self.policy} ({self.source}): vLLM ignores `priority` there, "
                "tags change nothing; start it with --scheduling-policy priority")


def policy_from_argv(argv: Sequence[str]) -> str | None:
    """``--scheduling-policy`` of a vLLM command line; vLLM's default when the line is a vLLM
    ``serve`` without it; None when it is not recognisably one."""
    for i, arg in enumerate(argv):
        if arg == POLICY_FLAG and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(POLICY_FLAG + "="):
            return arg.split("=", 1)[1]
    looks_vllm = any("vllm" in a for a in argv) and "serve" in argv
    return VLLM_DEFAULT_POLICY if looks_vllm else None


def policy_from_log(path: str | Path) -> str | None:
    """From the log's ``non-default args`` line (vLLM prints it at start); None without one."""
    from latscope.server.logs import parse_log

    args = parse_log(path).config.get("non_default_args")
    if not isinstance(args, dict):
        return None
    return str(args.get("scheduling_policy", VLLM_DEFAULT_POLICY))


_INFO_POLICY = re.compile(r"""policy=['"]?(\w+)""")


def policy_from_server_info(info: Any) -> str | None:
    """From vLLM's ``GET /server_info`` answer (text or JSON form of its config)."""
    config = info.get("vllm_config") if isinstance(info, dict) else None
    if isinstance(config, dict):
        policy = (config.get("scheduler_config") or {}).get("policy")
        return str(policy) if policy else None
    if isinstance(config, str):
        found = _INFO_POLICY.search(config)
        return found.group(1) if found else None
    return None

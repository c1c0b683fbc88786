"""The gateway itself: an aiohttp reverse proxy with its own queue in front of an upstream.

``/v1/completions`` and ``/v1/chat/completions`` go through admission (``admission.py``) and are
forwarded with the body untouched (unless ``priority`` is set), the answer passed back as each
piece arrives (``iter_any``: no added buffering; aiohttp sets TCP_NODELAY both ways). ``/metrics``
is the gateway's own; ``/health`` is the upstream's, or 503 with the reason when it cannot be
reached; any other path (``/v1/models``, ``/tokenize``...) is passed through without admission.

A client that leaves cancels its handler (``handler_cancellation``): queued, it leaves the queue;
forwarded, its upstream connection is closed, which makes vLLM abort the request. (Streaming, the
next write to the client usually notices first, with ``ConnectionResetError``; same outcome.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from latscope.gateway.admission import Admission, QueueFull
from latscope.gateway.config import TAG_MAX_INFLIGHT, GatewayConfig
from latscope.gateway.limit import AimdLimit, FixedLimit
from latscope.gateway.metrics import GatewayMetrics
from latscope.gateway.queue import ServedRate, WaitQueue
from latscope.gateway.relay import RawRelay, UpstreamBroke
from latscope.gateway.tags import (
    ServerPolicy,
    deadline_priority,
    policy_from_log,
    policy_from_server_info,
    tag_rate,
)
from latscope.load.cost import COST_HEADER, estimated_tokens, header_cost, priority_of, read_prompt
from latscope.redact import redact_url_password

log = logging.getLogger("latscope.gateway")

GENERATE_PATHS = ("/v1/completions", "/v1/chat/completions")
# RFC 9110 7.6.1 hop-by-hop headers, plus those aiohttp sets itself on each leg
_HOP = frozenset(("connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
                  "trailer", "transfer-encoding", "upgrade", "host", "content-length", "date",
                  "server", COST_HEADER))


class Gateway:
    """One gateway: ``await start()`` returns its URL, ``await stop()`` closes everything."""

    def __init__(self, config: GatewayConfig) -> None:
        config.validate()
        self.config = config
        self.upstream = config.upstream_base
        self.metrics = GatewayMetrics()
        rate = config.aging_rate if config.aging_rate is not None else ServedRate()
        limit: AimdLimit | FixedLimit
        self.tagging = config.policy == "tag"
        if self.tagging:  # admission for overload only: vLLM's own queue is what tags order
            limit = FixedLimit(config.max_inflight or TAG_MAX_INFLIGHT)
        elif config.max_inflight is None:
            target = config.ttft_target_ms / 1e3 if config.ttft_target_ms else None
            limit = AimdLimit(ttft_target_s=target, initial=config.initial_inflight,
                              interval_s=config.scrape_interval_s)
        else:
            limit = FixedLimit(config.max_inflight)
        self.admission = Admission(WaitQueue(config.policy, config.aging_factor, rate), limit,
                                   config.max_queue, self.metrics)
        self.tokenizer = None
        if config.tokenizer:
            from latscope.load.workload import LocalTokenizer
            self.tokenizer = LocalTokenizer(config.tokenizer)
        self.tokenize_works: bool | None = None if not self.tokenizer else False
        self.set_priority = config.upstream_priority == "on" or (
            self.tagging and config.upstream_priority != "off")
        self.server_policy = ServerPolicy(None, "not read")
        self.start_s = time.monotonic()  # tags count their deadlines from here
        self.url = ""
        self._session: aiohttp.ClientSession | None = None
        self.raw = RawRelay(self.upstream, config.connect_timeout_s, config.request_timeout_s,
                            _HOP) if config.relay == "raw" else None
        self._runner: web.AppRunner | None = None
        self._tasks: list[asyncio.Task[None]] = []

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> str:
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.config.connect_timeout_s,
                                        sock_read=self.config.request_timeout_s)
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300), timeout=timeout,
            # a proxy keeps no cookies: one client's Set-Cookie must never go out with another's
            cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=False, skip_auto_headers=("Accept-Encoding", "User-Agent"))
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_get("/metrics", self.handle_metrics)
        app.router.add_get("/health", self.handle_health)
        for path in GENERATE_PATHS:
            app.router.add_post(path, self.handle_generate)
        app.router.add_route("*", "/{tail:.*}", self.handle_passthrough)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.host, self.config.port, backlog=1024)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        if self.config.upstream_priority == "auto":
            self.set_priority = await self._probe_priority()
            if self.tagging and not self.set_priority:
                log.warning("the upstream refused a request with `priority`: --policy tag "
                            "forwards requests untagged")
        self.metrics.upstream_priority.set(int(self.set_priority))
        if self.tagging:
            self.server_policy = await self._server_policy()
            honoured = self.server_policy.honours_priority
            self.metrics.priority_honoured.set(-1 if honoured is None else int(honoured))
            if not honoured:
                log.warning("%s", self.server_policy.describe())
        if self.admission.limit.interval_s:
            self._tasks.append(asyncio.create_task(self._control_loop()))
        return self.url

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()
        if self.raw is not None:
            self.raw.close()

    # ---------------------------------------------------------------- handlers

    async def handle_generate(self, request: web.Request) -> web.StreamResponse:
        arrival = time.monotonic()
        raw = await request.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None  # forwarded as is: the upstream gives the client its own error
        if not isinstance(body, dict):
            body = None
        cost = 0.0
        sjf = self.config.policy == "sjf"  # fcfs orders by arrival: no tokenizer needed
        admitted_now = self.admission.try_now()
        if not admitted_now:
            try:
                estimate = await self._cost(request, body, exact=False)  # no I/O
                cost = await self.admission.wait(lambda: self._cost(request, body, exact=sjf),
                                                 estimate)
            except QueueFull as exc:
                self.metrics.rejected.labels("queue_full").inc()
                return _error(429, str(exc), "queue_full",
                              {"Retry-After": str(exc.retry_after_s)})
            except asyncio.CancelledError:
                self.metrics.cancelled.labels("queued").inc()
                raise
        try:
            if admitted_now:  # an estimate, or a local tokenizer: no round trip on this path
                cost = await self._cost(request, body,
                                        exact=self.tagging and self.tokenizer is not None)
            if self.set_priority and body is not None and "priority" not in body:
                body["priority"] = self._priority(arrival, cost)
                raw = orjson.dumps(body)
            stream = bool(body and body.get("stream"))
            return await self._forward(request, raw, stream)
        finally:
            self.admission.release(cost)

    async def handle_passthrough(self, request: web.Request) -> web.StreamResponse:
        return await self._forward(request, await request.read(), stream=False)

    async def handle_health(self, request: web.Request) -> web.StreamResponse:
        return await self._forward(request, b"", stream=False, unreachable_status=503)

    async def handle_metrics(self, request: web.Request) -> web.Response:
        body = self.metrics.render()
        return web.Response(body=body, content_type="text/plain", charset="utf-8")

    # ---------------------------------------------------------------- forwarding

    async def _forward(self, request: web.Request, data: bytes, stream: bool,
                       unreachable_status: int = 502) -> web.StreamResponse:
        assert self._session is not None
        if self.raw is not None and request.version >= (1, 1):  # 1.0 clients cannot take chunks
            return await self._forward_raw(request, data, stream, unreachable_status)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        url = self.upstream + request.rel_url.path_qs
        sent = time.perf_counter()
        try:
            upstream = await self._session.request(request.method, url, data=data or None,
                                                   headers=headers, allow_redirects=False)
        except (aiohttp.ClientConnectionError, asyncio.TimeoutError, OSError) as exc:
            reason = _reason(exc)
            self.metrics.rejected.labels("upstream_unreachable").inc()
            return _error(unreachable_status,
                          f"upstream {redact_url_password(self.upstream)} unreachable: {reason}",
                          "upstream_unreachable")
        try:
            response, whole = await self._relay(request, upstream, stream, sent)
        except BaseException as exc:
            upstream.close()  # drops the connection: vLLM sees the disconnect and aborts
            if isinstance(exc, asyncio.CancelledError):
                self.metrics.cancelled.labels("upstream").inc()
            raise
        if whole:
            upstream.release()
        else:
            upstream.close()
        return response

    async def _forward_raw(self, request: web.Request, data: bytes, stream: bool,
                           unreachable_status: int) -> web.StreamResponse:
        """``_forward`` by the raw relay (``relay.py``): the upstream's bytes as it sent them."""
        assert self.raw is not None
        sent = time.perf_counter()
        try:
            conn, head = await self.raw.open(request, data)
        except (OSError, TimeoutError, UpstreamBroke) as exc:
            self.metrics.rejected.labels("upstream_unreachable").inc()
            return _error(unreachable_status,
                          f"upstream {redact_url_password(self.upstream)} unreachable: "
                          f"{_reason(exc)}", "upstream_unreachable")

        def first_piece() -> None:
            if stream and head.status == 200:
                self.admission.observe_ttft(time.perf_counter() - sent)

        try:
            response, outcome = await self.raw.relay(request, conn, head, first_piece)
        except BaseException as exc:
            conn.close()  # drops the connection: vLLM sees the disconnect and aborts
            if isinstance(exc, asyncio.CancelledError):
                self.metrics.cancelled.labels("upstream").inc()
            raise
        if outcome == "client_left":
            self.metrics.cancelled.labels("upstream").inc()
        elif outcome != "whole":
            log.warning("upstream broke mid-response: %s", outcome.split(": ", 1)[-1])
            self.metrics.rejected.labels("upstream_broke").inc()
        return response

    async def _relay(self, request: web.Request, upstream: aiohttp.ClientResponse, stream: bool,
                     sent: float) -> tuple[web.StreamResponse, bool]:
        """Pass the answer on as it arrives; False with the response when either side left."""
        headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP}
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason,
                                      headers=headers)
        if upstream.content_length is not None:
            response.content_length = upstream.content_length
        await response.prepare(request)
        first = True
        while True:
            try:
                piece = await upstream.content.readany()
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                # the upstream broke mid-answer: the status is sent, so cut the client off
                # rather than end the body cleanly (that would pass a truncated answer as whole)
                log.warning("upstream broke mid-response: %s", _reason(exc))
                self.metrics.rejected.labels("upstream_broke").inc()
                if request.transport is not None:
                    request.transport.close()
                return response, False
            if not piece:
                break
            if first and stream and upstream.status == 200:
                self.admission.observe_ttft(time.perf_counter() - sent)
            first = False
            try:
                if upstream.content.at_eof():  # the last piece: it and the end in one send
                    await response.write_eof(piece)
                    return response, True
                await response.write(piece)
            except ConnectionResetError:  # the client left (aiohttp's ClientConnectionResetError)
                self.metrics.cancelled.labels("upstream").inc()
                return response, False  # aiohttp's write_eof then fails quietly
        await response.write_eof()
        return response, True

    # ---------------------------------------------------------------- cost

    def _priority(self, arrival_s: float, cost: float) -> int:
        """tag: the request's sjf deadline (``tags.py``); else its cost's power-of-two bucket."""
        if not self.tagging:
            return priority_of(cost)
        rate = tag_rate(self.admission.queue.current_rate(arrival_s), self.admission.inflight)
        return deadline_priority(arrival_s, self.start_s, cost, rate, self.config.aging_factor)

    async def _cost(self, request: web.Request, body: dict[str, Any] | None, exact: bool
                    ) -> float:
        override = header_cost(request.headers)
        if override is not None:
            return override
        if body is None:
            return 0.0
        prompt = read_prompt(body, self.config.default_max_tokens)
        tokens = prompt.token_ids
        if prompt.text:
            counted = None
            if exact and self.tokenizer is not None:
                counted = len(self.tokenizer.encode(prompt.text))
            elif exact and self.tokenize_works is not False:
                counted = await self._tokenize(body)
            tokens += counted if counted is not None else estimated_tokens(prompt.text)
        return float(tokens + prompt.max_tokens)

    async def _tokenize(self, body: dict[str, Any]) -> int | None:
        """The upstream's own count (vLLM ``POST /tokenize``); None when it has none."""
        assert self._session is not None
        query = {k: body[k] for k in ("model", "prompt", "messages") if k in body}
        try:
            async with self._session.post(self.upstream + "/tokenize", json=query) as resp:
                if resp.status != 200:
                    raise ValueError(f"HTTP {resp.status}")
                count = int((await resp.json(loads=orjson.loads))["count"])
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, KeyError, TypeError):
            if self.tokenize_works is None:
                log.info("upstream has no usable /tokenize: costs use len(text)/4")
                self.tokenize_works = False
            return None
        self.tokenize_works = True
        return count

    # ---------------------------------------------------------------- upstream probes

    async def _probe_priority(self) -> bool:
        """Does the upstream take ``priority``? (vLLM rejects a non-zero one under fcfs.)"""
        assert self._session is not None
        try:
            async with self._session.get(self.upstream + "/v1/models") as resp:
                model = (await resp.json(loads=orjson.loads))["data"][0]["id"]
            probe = {"model": model, "prompt": "hi", "max_tokens": 1, "priority": 1}
            async with self._session.post(self.upstream + "/v1/completions", json=probe) as resp:
                await resp.read()
                return resp.status == 200
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, KeyError, IndexError,
                TypeError):
            return False

    async def _server_policy(self) -> ServerPolicy:
        """The upstream's scheduling policy: as told (``--server-policy``), from its log
        (``--server-log``), else from its ``/server_info`` (vLLM with VLLM_SERVER_DEV_MODE=1)."""
        if self.config.server_policy != "auto":
            return ServerPolicy(self.config.server_policy, "as told by --server-policy")
        if self.config.server_log:
            try:
                policy = policy_from_log(self.config.server_log)
            except OSError as exc:
                return ServerPolicy(None, f"its log unreadable: {exc.strerror or exc}")
            return ServerPolicy(policy, "from its log" if policy else "its log names none")
        assert self._session is not None
        try:
            async with self._session.get(self.upstream + "/server_info",
                                         params={"config_format": "json"}) as resp:
                if resp.status == 200:
                    policy = policy_from_server_info(await resp.json(loads=orjson.loads))
                    if policy:
                        return ServerPolicy(policy, "from its /server_info")
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
            pass
        return ServerPolicy(None, "no /server_info, no --server-log")

    async def _control_loop(self) -> None:
        while True:
            await asyncio.sleep(self.admission.limit.interval_s)
            if self.config.watch_waiting:
                await self._scrape()
            self.admission.tick()

    async def _scrape(self) -> None:
        """The upstream's ``vllm:num_requests_waiting`` and ``_running`` (None when it has none).
        A line scan, not a Prometheus parse: parsing vLLM's whole page took milliseconds of this
        loop, which every proxied request would have waited behind."""
        assert self._session is not None
        found: dict[str, float] = {}
        try:
            async with self._session.get(self.upstream + "/metrics") as resp:
                if resp.status == 200:
                    found = gauges(await resp.text(), _GAUGES)
        except (aiohttp.ClientError, asyncio.TimeoutError, UnicodeDecodeError):
            pass
        self.admission.upstream_waiting = found.get("vllm:num_requests_waiting")
        self.admission.upstream_running = found.get("vllm:num_requests_running")


_GAUGES = ("vllm:num_requests_waiting", "vllm:num_requests_running")


def gauges(page: str, names: tuple[str, ...]) -> dict[str, float]:
    """Sums over series (engines) of the named samples in a Prometheus text page."""
    prefixes = tuple(p for n in names for p in (n + "{", n + " "))
    found: dict[str, float] = {}
    for line in page.splitlines():
        if line.startswith(prefixes):
            name = line.split("{", 1)[0].split(" ", 1)[0]
            with contextlib.suppress(ValueError, IndexError):
                found[name] = found.get(name, 0.0) + float(line.rsplit(None, 1)[1])
    return found


def _error(status: int, message: str, kind: str,
           headers: dict[str, str] | None = None) -> web.Response:
    """An error in the OpenAI shape, so clients print its message."""
    body = orjson.dumps({"error": {"message": message, "type": kind, "code": status}})
    return web.Response(status=status, body=body, content_type="application/json",
                        headers=headers)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    os_error = getattr(exc, "os_error", None)
    if os_error is not None and getattr(os_error, "strerror", None):
        return str(os_error.strerror)
    return str(exc) or type(exc).__name__

"""``latscope net``: measure the network between this client and a server, layer by layer.

In order: DNS lookup, TCP connect, TLS handshake (https), then HTTP over new connections (one
per request) and over one kept-alive connection (GET ``/health``), a few short streamed
completions when the server is OpenAI-compatible (client TTFT and chunk-delivery gaps, and the
server's own TTFT from ``/metrics`` before/after), and ``iperf3`` when installed and a server is
given. Each phase is timed with ``time.perf_counter_ns`` around the one operation it names; the
raw samples are kept in the report. ``latscope.findings.net`` turns the numbers into findings
(``latscope.campaign.doctor.probe_network`` runs both).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import shutil
import socket
import ssl
import subprocess
import time
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

from latscope.errors import ConfigError, TargetError
from latscope.model import Finding
from latscope.redact import redact_url_password

NS_PER_MS = 1e6


@dataclass(slots=True)
class StreamProbe:
    model: str | None = None
    reason: str = ""  # why no stream was sent, when none was
    ttft_ms: list[float] = field(default_factory=list)  # request sent -> first content chunk
    gaps_ms: list[float] = field(default_factory=list)  # between content chunks, pooled
    server_ttft_mean_ms: float | None = None  # from vllm:time_to_first_token_seconds sum/count


@dataclass(slots=True)
class NetReport:
    url: str
    address: str = ""  # the IP:port connected to
    dns_ms: float | None = None
    dns_is_literal: bool = False
    tcp_connect_ms: list[float] = field(default_factory=list)
    tls_handshake_ms: list[float] = field(default_factory=list)
    health_path: str = "/health"
    health_status: int | None = None
    new_connection_ms: list[float] = field(default_factory=list)  # GET, fresh connection each
    keepalive_ms: list[float] = field(default_factory=list)  # GET, one reused connection
    stream: StreamProbe = field(default_factory=StreamProbe)
    iperf3: dict[str, Any] | None = None
    iperf3_reason: str = ""
    error: str = ""  # a phase that failed; the phases before it are kept
    findings: list[Finding] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["findings"] = [f.to_dict() for f in self.findings]
        return data


def _ms_since(t0: int) -> float:
    return (time.perf_counter_ns() - t0) / NS_PER_MS


def _target(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"--url {url}: expected http(s)://HOST[:PORT]")
    return parts.scheme, parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


def _resolve(report: NetReport, host: str, port: int) -> tuple[Any, ...]:
    try:
        ipaddress.ip_address(host)
        report.dns_is_literal = True
    except ValueError:
        pass
    t0 = time.perf_counter_ns()
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise TargetError(f"cannot resolve {host}: {exc.strerror}") from exc
    report.dns_ms = _ms_since(t0)
    family, _, _, _, sockaddr = infos[0]
    report.address = str(sockaddr[0]) + ":" + str(sockaddr[1])  # an IP family: (host, port, ...)
    return family, sockaddr


def _connect(family: int, sockaddr: Any, timeout: float) -> tuple[socket.socket, float]:
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    t0 = time.perf_counter_ns()
    try:
        sock.connect(sockaddr)
    except OSError as exc:
        sock.close()
        raise TargetError(f"TCP connect to {sockaddr[0]}:{sockaddr[1]} failed: {exc}") from exc
    return sock, _ms_since(t0)


def _socket_probes(report: NetReport, scheme: str, host: str, family: int, sockaddr: Any,
                   probes: int, timeout: float, verify: bool) -> None:
    context = ssl.create_default_context()
    if not verify:
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    for _ in range(probes):
        sock, connect_ms = _connect(family, sockaddr, timeout)
        report.tcp_connect_ms.append(connect_ms)
        try:
            if scheme == "https":
                t0 = time.perf_counter_ns()
                tls = context.wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False)
                tls.do_handshake()
                report.tls_handshake_ms.append(_ms_since(t0))
                tls.close()
        except (ssl.SSLError, OSError) as exc:
            report.error = f"TLS handshake with {host} failed: {exc}"
            return
        finally:
            sock.close()


async def _timed_get(session: Any, url: str) -> tuple[float, int]:
    """ms from sending GET to the response headers; the body is then read and dropped."""
    t0 = time.perf_counter_ns()
    # No redirects: every request goes to the given server only, and one sample is one round trip.
    async with session.get(url, allow_redirects=False) as resp:
        ms = _ms_since(t0)
        await resp.read()
        return ms, resp.status


async def _http_probes(report: NetReport, base: str, probes: int, timeout: float,
                       headers: dict[str, str], verify: bool, stream_requests: int) -> None:
    import aiohttp

    client_timeout = aiohttp.ClientTimeout(total=timeout)
    ssl_arg = verify  # aiohttp: True checks the certificate (its default), False does not
    url = base + report.health_path
    async with aiohttp.ClientSession(timeout=client_timeout, headers=headers,
                                     connector=aiohttp.TCPConnector(force_close=True, ssl=ssl_arg)
                                     ) as fresh:
        for _ in range(probes):
            ms, report.health_status = await _timed_get(fresh, url)
            report.new_connection_ms.append(ms)
    async with aiohttp.ClientSession(timeout=client_timeout, headers=headers,
                                     connector=aiohttp.TCPConnector(limit=1, ssl=ssl_arg)) as kept:
        await _timed_get(kept, url)  # opens the connection that the samples below reuse
        for _ in range(probes):
            report.keepalive_ms.append((await _timed_get(kept, url))[0])
        if stream_requests > 0:
            await _stream_probes(report.stream, kept, base, stream_requests)


async def _model_id(session: Any, base: str) -> tuple[str | None, str]:
    try:
        async with session.get(base + "/v1/models", allow_redirects=False) as resp:
            if resp.status != 200:
                return None, f"GET /v1/models answered HTTP {resp.status}: not OpenAI-compatible"
            data = await resp.json(content_type=None)
    except (ValueError, TypeError) as exc:
        return None, f"GET /v1/models is not JSON ({exc})"
    models = data.get("data") if isinstance(data, dict) else None
    if not models:
        return None, "GET /v1/models lists no model"
    return str(models[0].get("id")), ""


async def _server_ttft(session: Any, base: str) -> tuple[float, float] | None:
    from latscope.errors import ScrapeError
    from latscope.server.metrics import parse_metrics_text
    try:
        async with session.get(base + "/metrics", allow_redirects=False) as resp:
            if resp.status != 200:
                return None
            page = parse_metrics_text(await resp.text())
    except ScrapeError:
        return None
    total = page.value("vllm:time_to_first_token_seconds_sum")
    count = page.value("vllm:time_to_first_token_seconds_count")
    return None if total is None or count is None else (total, count)


async def _stream_probes(probe: StreamProbe, session: Any, base: str, count: int) -> None:
    probe.model, probe.reason = await _model_id(session, base)
    if probe.model is None:
        return
    before = await _server_ttft(session, base)
    body = {"model": probe.model, "prompt": "The capital of France is", "max_tokens": 16,
            "temperature": 0.0, "stream": True}
    for _ in range(count):
        t0 = time.perf_counter_ns()
        arrivals: list[int] = []
        async with session.post(base + "/v1/completions", json=body) as resp:
            if resp.status != 200:
                probe.reason = f"POST /v1/completions answered HTTP {resp.status}"
                return
            async for line in resp.content:
                now = time.perf_counter_ns()
                if _has_text(line):
                    arrivals.append(now)
        if arrivals:
            probe.ttft_ms.append((arrivals[0] - t0) / NS_PER_MS)
            probe.gaps_ms += [(b - a) / NS_PER_MS for a, b in zip(arrivals, arrivals[1:])]
    after = await _server_ttft(session, base)
    if before and after and after[1] > before[1]:
        probe.server_ttft_mean_ms = (after[0] - before[0]) / (after[1] - before[1]) * 1000.0


def _has_text(line: bytes) -> bool:
    if not line.startswith(b"data:") or line.strip() == b"data: [DONE]":
        return False
    try:
        choices = json.loads(line[5:]).get("choices") or []
    except ValueError:
        return False
    return any(c.get("text") or (c.get("delta") or {}).get("content") for c in choices)


def _run_iperf3(report: NetReport, server: str | None, seconds: int) -> None:
    if shutil.which("iperf3") is None:
        report.iperf3_reason = "iperf3 is not installed"
        return
    if not server:
        report.iperf3_reason = "no --iperf3 HOST[:PORT] of a running iperf3 -s given"
        return
    host, _, port = server.partition(":")
    cmd = ["iperf3", "-c", host, "-p", port or "5201", "-t", str(seconds), "-J"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 30,
                              check=False)
    except subprocess.TimeoutExpired:
        report.iperf3_reason = f"iperf3 did not finish within {seconds + 30} s"
        return
    try:
        end = json.loads(done.stdout)["end"]
        report.iperf3 = {"command": " ".join(cmd),
                         "received_mbit_s": end["sum_received"]["bits_per_second"] / 1e6,
                         "retransmits": end["sum_sent"].get("retransmits")}
    except (ValueError, KeyError) as exc:
        report.iperf3_reason = f"iperf3 failed: {done.stderr.strip() or exc}"


def probe(url: str, probes: int = 20, *, timeout_s: float = 10.0, headers: dict[str, str] | None
          = None, verify_tls: bool = True, stream_requests: int = 3, iperf3_server: str | None = None,
          iperf3_seconds: int = 5, path: str = "/health") -> NetReport:
    """Measure the path to ``url``'s server; see the module docstring for each phase."""
    if probes < 1:
        raise ConfigError("--probes must be at least 1")
    if not timeout_s > 0:
        raise ConfigError(f"--timeout {timeout_s}: must be more than 0 seconds")
    scheme, host, port = _target(url)
    base = url.rstrip("/").removesuffix("/v1")
    report = NetReport(url=redact_url_password(base),
                       health_path=path if path.startswith("/") else "/" + path)
    family, sockaddr = _resolve(report, host, port)
    _socket_probes(report, scheme, host, family, sockaddr, probes, timeout_s, verify_tls)
    import aiohttp
    try:
        if not report.error:
            asyncio.run(_http_probes(report, base, probes, timeout_s, headers or {}, verify_tls,
                                     stream_requests))
    except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
        # Keep what the earlier phases measured; the finding names the phase that failed.
        report.error = f"HTTP probe of {report.url} failed: {type(exc).__name__}: {exc}"
    _run_iperf3(report, iperf3_server, iperf3_seconds)
    return report

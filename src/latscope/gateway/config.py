"""Everything one gateway needs, as a dataclass, with the checks that give one-line errors."""

from __future__ import annotations

from dataclasses import dataclass

from latscope.errors import ConfigError
from latscope.gateway.queue import DEFAULT_AGING_FACTOR, POLICIES

# --policy tag's in-flight limit when none is given: everything below it goes straight to the
# upstream (whose own queue the tags order); above it is overload, queued in sjf's order.
# The AIMD loop is not used: it would hold requests in the gateway whenever vLLM queues, the very
# queue the tags are for.
TAG_MAX_INFLIGHT = 4096


@dataclass
class GatewayConfig:
    upstream: str = ""  # base URL of the OpenAI-compatible server (a trailing /v1 is accepted)
    host: str = "127.0.0.1"
    port: int = 0  # 0: a free port (the bound URL is reported once listening)
    policy: str = "sjf"  # fcfs | sjf | tag
    # None: auto (AIMD on upstream TTFT and waiting gauge); tag: TAG_MAX_INFLIGHT, overload only
    max_inflight: int | None = None
    ttft_target_ms: float | None = None  # auto: also back off above this median TTFT
    initial_inflight: int = 8  # auto: the limit it starts from
    max_queue: int = 1024  # requests waiting in the gateway beyond which it answers 429
    # sjf: deadline = arrival + aging_factor * cost / served rate
    aging_factor: float = DEFAULT_AGING_FACTOR
    aging_rate: float | None = None  # sjf: cost units/s; None: measured from the upstream
    tokenizer: str | None = None  # a dir or tokenizer.json; else the upstream's /tokenize
    upstream_priority: str = "auto"  # auto | on | off: set vLLM's `priority` field
    # tag: the upstream's scheduling policy (auto: read from server_log, else its /server_info)
    server_policy: str = "auto"
    server_log: str | None = None  # the upstream's log, whose non-default args name its policy
    watch_waiting: bool = True  # auto: also scrape the upstream's vllm:num_requests_waiting
    scrape_interval_s: float = 0.5  # auto: the upstream's gauges, and the control loop's tick
    default_max_tokens: int = 256
    connect_timeout_s: float = 5.0
    request_timeout_s: float = 600.0
    # raw: the upstream's bytes passed on as sent (relay.py); parsed: aiohttp de-chunks and
    # re-chunks each piece (the relay before, kept for A/B and for HTTP/1.0 clients)
    relay: str = "raw"

    @property
    def upstream_base(self) -> str:
        url = self.upstream.rstrip("/")
        return url[:-3] if url.endswith("/v1") else url

    def validate(self) -> None:
        if not self.upstream.startswith(("http://", "https://")):
            raise ConfigError(f"--upstream must start with http:// (got {self.upstream!r})")
        if self.policy not in POLICIES:
            raise ConfigError(f"--policy must be one of {', '.join(POLICIES)}")
        if self.max_inflight is not None and self.max_inflight < 1:
            raise ConfigError("--max-inflight must be auto or >= 1")
        if self.ttft_target_ms is not None and self.ttft_target_ms <= 0:
            raise ConfigError("--ttft-target must be > 0 ms")
        if self.max_queue < 0:
            raise ConfigError("--max-queue must be >= 0")
        if self.aging_factor <= 0 or (self.aging_rate is not None and self.aging_rate <= 0):
            raise ConfigError("--aging-factor and --aging-rate must be > 0")
        if self.upstream_priority not in ("auto", "on", "off"):
            raise ConfigError("--upstream-priority must be auto, on or off")
        if self.policy == "tag" and self.upstream_priority == "off":
            raise ConfigError("--policy tag sets `priority`: it cannot run with "
                              "--upstream-priority off")
        if self.server_policy not in ("auto", "priority", "fcfs"):
            raise ConfigError("--server-policy must be auto, priority or fcfs")
        if self.relay not in ("raw", "parsed"):
            raise ConfigError(f"--relay must be raw or parsed (got {self.relay!r})")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port {self.port} is out of range")


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``PORT`` (host 127.0.0.1)."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", text
    try:
        return host or "127.0.0.1", int(port)
    except ValueError:
        raise ConfigError(f"bad --listen {text!r}: use HOST:PORT or PORT") from None


def parse_max_inflight(text: str) -> int | None:
    if text == "auto":
        return None
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"bad --max-inflight {text!r}: use auto or a number") from None
    if value < 1:
        raise ConfigError("--max-inflight must be auto or >= 1")
    return value

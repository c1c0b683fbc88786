"""The gateway's own Prometheus metrics, in a registry of its own (several gateways can share a
process, as in the tests). Names start with ``latscope_gateway_``; docs/gateway.md lists them."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest

_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        # process_cpu_seconds_total & co.: the gateway's own cost, so that it is measured and
        # kept apart from the server's (the whole process's, when run in a thread of another)
        ProcessCollector(registry=r)
        p = "latscope_gateway_"
        self.queue_length = Gauge(p + "queue_length", "requests waiting in the gateway", registry=r)
        self.inflight = Gauge(p + "inflight", "requests forwarded and not finished", registry=r)
        self.limit = Gauge(p + "inflight_limit", "current in-flight limit", registry=r)
        self.admitted = Counter(p + "admitted", "requests forwarded upstream", registry=r)
        self.rejected = Counter(p + "rejected", "requests answered by the gateway itself",
                                ["reason"], registry=r)
        self.cancelled = Counter(p + "cancelled", "clients that left before the end",
                                 ["stage"], registry=r)
        self.queue_wait = Histogram(p + "queue_wait_seconds", "time waiting in the gateway",
                                    buckets=_WAIT_BUCKETS, registry=r)
        self.upstream_ttft = Histogram(p + "upstream_ttft_seconds",
                                       "forwarding to the first body bytes of a streamed answer",
                                       buckets=_TTFT_BUCKETS, registry=r)
        self.upstream_priority = Gauge(p + "upstream_priority_enabled",
                                       "1 when `priority` is set on forwarded requests", registry=r)
        self.priority_honoured = Gauge(p + "upstream_priority_honoured",
                                       "tag: 1 when the upstream schedules by priority, 0 when "
                                       "it does not, -1 unknown", registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)

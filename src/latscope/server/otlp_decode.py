"""OTLP trace decoding: an ``ExportTraceServiceRequest`` (protobuf bytes or message) as one
``Span`` per span.

Used by the receiver (``latscope.server.otlp``: ``parse_export_request`` only checks a body, cheap)
and by the recorder (``latscope.server.otlp_record``: turning spans into ``Span``, ~85 us a span, done
when no request is in flight). The protobuf classes come from ``opentelemetry-proto``, imported on
first use.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import msgspec


class Span(msgspec.Struct, kw_only=True):
    """One span as latscope keeps it (a line of ``spans.jsonl``). Ids are lower-case hex, ""
    when absent; ``attributes`` and ``resource`` hold whatever the exporter sent (vLLM's
    ``gen_ai.*`` latencies in seconds among them)."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: str  # "server", "internal", ... (the OTLP enum's name)
    start_unix_ns: int
    end_unix_ns: int
    attributes: dict[str, Any]
    resource: dict[str, Any]  # the resource's attributes (service.name, ...)
    scope: str  # the instrumentation scope's name
    received_unix_ns: int  # when latscope's collector received it


_KIND = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


def _any_value(value: Any) -> Any:
    """An OTLP ``AnyValue`` as a plain Python value."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_any_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _any_value(kv.value) for kv in value.kvlist_value.values}
    if which == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, which)


def _attributes(kvs: Iterable[Any]) -> dict[str, Any]:
    return {kv.key: _any_value(kv.value) for kv in kvs}


def parse_export_request(body: bytes) -> Any:
    """The ``ExportTraceServiceRequest`` in ``body``; ``ValueError`` if it is not one."""
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except DecodeError as exc:
        raise ValueError(f"not an OTLP ExportTraceServiceRequest: {exc}") from None
    return request


def decode_export_request(body: bytes, *, received_unix_ns: int | None = None) -> list[Span]:
    """Decode an ``ExportTraceServiceRequest`` (protobuf bytes) into one ``Span`` per span.
    Raises ``ValueError`` for bytes that are not such a message."""
    return spans_from_request(parse_export_request(body), received_unix_ns=received_unix_ns)


def spans_from_request(request: Any, *, received_unix_ns: int | None = None) -> list[Span]:
    received = received_unix_ns if received_unix_ns is not None else time.time_ns()
    out = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            scope = scope_spans.scope.name
            for span in scope_spans.spans:
                out.append(Span(
                    trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                    parent_span_id=span.parent_span_id.hex(), name=span.name,
                    kind=_KIND.get(span.kind, str(span.kind)),
                    start_unix_ns=span.start_time_unix_nano,
                    end_unix_ns=span.end_time_unix_nano,
                    attributes=_attributes(span.attributes),
                    resource=resource, scope=scope, received_unix_ns=received))
    return out

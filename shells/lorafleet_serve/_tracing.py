"""Traces of the router's requests, with OpenTelemetry (``pip install 'lorafleet[otel]'``).

One span per routed request, a child of the client's ``traceparent`` when it sends one: ``POST
/v1/completions``, of kind SERVER, with the adapter (or base model), the replica, how the adapter was
granted (``hit``, ``joined``, ``loaded``; ``base``), the milliseconds waited for it (a load, a place),
the replicas tried and why each retry was, the status and how the request ended. The request goes
upstream with the router's span as its parent, so that an engine that traces (vLLM's
``--otlp-traces-endpoint``) continues the same trace.

Nothing here is imported unless tracing is asked for: without the extra, the router runs as ever, and
asking for tracing says what to install.
"""

from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span

INSTALL = "pip install 'lorafleet[otel]'"
TRACE_HEADERS = (b"traceparent", b"tracestate")


def available() -> bool:
    """Whether OpenTelemetry's SDK and OTLP exporter are installed."""
    try:
        return all(
            importlib.util.find_spec(name) is not None
            for name in ("opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http.trace_exporter")
        )
    except ModuleNotFoundError:
        return False


class Traced(Protocol):
    """What a span is made of: the router's record of one request."""

    method: str
    path: str
    started: float
    request_id: bytes
    forward: Sequence[tuple[bytes, bytes]]
    model: str | None
    replica: str | None
    how: str | None
    status: int
    attempts: int
    stream: bool
    error: str | None
    end: str
    adapter_ms: float | None
    retries: tuple[str, ...]


class Tracing:
    """Makes the router's spans with ``provider``'s tracer (None: OpenTelemetry's global provider)."""

    def __init__(self, provider: Any = None) -> None:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._trace = trace
        self._tracer = (provider if provider is not None else trace.get_tracer_provider()).get_tracer(
            "lorafleet.serve"
        )
        self._propagator = TraceContextTextMapPropagator()
        # perf_counter() is what the router measures with; a span wants wall-clock nanoseconds.
        self._epoch_ns = time.time_ns() - time.perf_counter_ns()

    def start(self, record: Traced, route: str) -> Span:
        """The span of ``record``'s request, begun when it arrived; its upstream headers carry it on."""
        carrier: dict[str, str] = {}
        kept = []
        for name, value in record.forward:
            if name in TRACE_HEADERS:
                carrier[name.decode()] = value.decode("latin-1")
            else:
                kept.append((name, value))
        parent = self._propagator.extract(carrier) if carrier else None
        span = self._tracer.start_span(
            f"{record.method} {record.path}",
            context=parent,
            kind=self._trace.SpanKind.SERVER,
            start_time=self._epoch_ns + int(record.started * 1e9),
            attributes={
                "http.request.method": record.method,
                "url.path": record.path,
                "lorafleet.route": route,
                "lorafleet.request_id": record.request_id.decode("latin-1"),
            },
        )
        out: dict[str, str] = {}
        self._propagator.inject(out, context=self._trace.set_span_in_context(span))
        # The client's trace state goes on with the router's parent, as the W3C's rules say.
        if "tracestate" in carrier and "tracestate" not in out:
            out["tracestate"] = carrier["tracestate"]
        record.forward = kept + [(name.encode(), value.encode()) for name, value in out.items()]
        return span

    def end(self, span: Span, record: Traced, base: bool) -> None:
        """Say on ``span`` what became of ``record``'s request, and end it."""
        attributes: dict[str, Any] = {
            "http.response.status_code": record.status,
            "lorafleet.attempts": record.attempts,
            "lorafleet.retries": len(record.retries),
            "lorafleet.stream": record.stream,
            "lorafleet.end": record.end,
        }
        if record.model is not None:
            attributes["lorafleet.model" if base else "lorafleet.adapter"] = record.model
        if record.replica is not None:
            attributes["lorafleet.replica"] = record.replica
        if record.how is not None:
            attributes["lorafleet.how"] = record.how
        if record.adapter_ms is not None:
            attributes["lorafleet.wait_ms"] = round(record.adapter_ms, 3)
        if record.retries:
            attributes["lorafleet.retry_reasons"] = record.retries
        if record.error is not None:
            attributes["error.type"] = record.error
        span.set_attributes(attributes)
        if record.status >= 500 or record.end != "done":
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, record.error or record.end))
        span.end()


def exporting_provider() -> TracerProvider:
    """A tracer provider that sends spans by OTLP over HTTP where the standard variables say
    (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, their headers...), in
    batches; its service is ``OTEL_SERVICE_NAME``, or ``lorafleet-serve``."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    name = os.environ.get("OTEL_SERVICE_NAME") or "lorafleet-serve"
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


def global_sdk_provider() -> Any:
    """The global tracer provider when a program (``opentelemetry-instrument``, say) set an SDK one,
    else None."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    provider = trace.get_tracer_provider()
    return provider if isinstance(provider, TracerProvider) else None

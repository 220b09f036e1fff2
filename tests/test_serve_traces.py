"""``lorafleet serve``'s traces (OpenTelemetry's SDK, its in-memory exporter) and its time-to-first-token
and duration histograms, against stand-ins, under asyncio and trio."""

from __future__ import annotations

import gzip
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client.parser import text_string_to_metric_families

from lorafleet_serve import Config, ConfigError, ReplicaConfig, RouterServer, check
from lorafleet_standin import StandInServer

from conftest import eventually

Serve = Callable[..., StandInServer]
HELLO = {"prompt": "hello", "max_tokens": 3}
TRACE = "0af7651916cd43dd8448eb211c80319c"
TRACEPARENT = f"00-{TRACE}-b7ad6b7169203331-01"


def config_of(servers: list[StandInServer], adapter_dir: Path, **options: Any) -> Config:
    replicas = tuple(
        ReplicaConfig(id=f"r{i}", url=s.url, model="tiny", limit=2) for i, s in enumerate(servers)
    )
    return Config(replicas=replicas, adapter_root=adapter_dir, port=0, shutdown_timeout=1.0, **options)


@pytest.fixture
def spans() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_a_span_per_request_continues_the_clients_trace(
    serve: Serve, adapter_dir: Path, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    standin = serve()
    async with (
        RouterServer(config_of([standin], adapter_dir), environ={}, tracer_provider=provider) as server,
        httpx.AsyncClient(base_url=server.url, timeout=30) as client,
    ):
        loaded = await client.post(
            "/v1/completions", json={"model": "a0", **HELLO}, headers={"traceparent": TRACEPARENT}
        )
        hit = await client.post(
            "/v1/embeddings", json={"model": "a0", "input": "x"}
        )  # a generating engine's 404
        base = await client.post("/v1/completions", json={"model": "tiny", **HELLO, "stream": True})
        await eventually(lambda: len(exporter.get_finished_spans()) == 3)
    first, second, third = exporter.get_finished_spans()
    assert (first.name, first.kind) == ("POST /v1/completions", SpanKind.SERVER)
    assert f"{first.context.trace_id:032x}" == TRACE  # the client's trace, continued
    assert first.parent is not None
    assert f"{first.parent.span_id:016x}" == "b7ad6b7169203331"
    attributes = dict(first.attributes or {})
    assert {k: attributes[k] for k in ("lorafleet.adapter", "lorafleet.replica", "lorafleet.how")} == {
        "lorafleet.adapter": "a0",
        "lorafleet.replica": "r0",
        "lorafleet.how": "loaded",
    }
    assert attributes["http.response.status_code"] == 200
    assert isinstance(attributes["lorafleet.wait_ms"], float)
    assert (attributes["lorafleet.attempts"], attributes["lorafleet.retries"]) == (1, 0)
    assert attributes["lorafleet.request_id"] == loaded.headers["x-request-id"]
    # Upstream, the same trace with the router's span as the parent.
    sent = standin.app.calls_to("completions")[0].headers["traceparent"]
    assert sent == f"00-{TRACE}-{first.context.span_id:016x}-01"
    assert dict(second.attributes or {})["lorafleet.how"] == "hit"
    assert dict(second.attributes or {})["http.response.status_code"] == hit.status_code == 404
    assert second.parent is None  # no traceparent: a trace of its own
    assert dict(third.attributes or {})["lorafleet.model"] == "tiny"
    assert dict(third.attributes or {})["lorafleet.how"] == "base"
    assert base.status_code == 200


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_the_span_counts_the_retries_and_marks_a_failure(
    serve: Serve, adapter_dir: Path, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    standins = [serve(), serve()]
    for standin in standins:
        standin.app.fail_prompts("boom")
    async with (
        RouterServer(config_of(standins, adapter_dir), environ={}, tracer_provider=provider) as server,
        httpx.AsyncClient(base_url=server.url, timeout=30) as client,
    ):
        answer = await client.post("/v1/completions", json={"model": "a0", "prompt": "boom", "max_tokens": 2})
        await eventually(lambda: len(exporter.get_finished_spans()) == 1)
    assert answer.status_code == 502
    [span] = exporter.get_finished_spans()
    attributes = dict(span.attributes or {})
    assert (attributes["lorafleet.attempts"], attributes["lorafleet.retries"]) == (2, 1)
    assert attributes["lorafleet.retry_reasons"] == ("server_error",)
    assert attributes["error.type"] == "engine_error"
    assert span.status.status_code is StatusCode.ERROR


class Collector:
    """What an OpenTelemetry collector's OTLP/HTTP receiver does with traces, on 127.0.0.1: takes
    ``POST /v1/traces`` (protobuf, gzip or not) and keeps the spans. No collector installs from the
    package registries here (the OpenTelemetry Collector and Jaeger ship as Go binaries and images)."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces" or self.headers["Content-Type"] != "application/x-protobuf":
                    self.send_error(404)
                    return
                collector.requests.append(ExportTraceServiceRequest.FromString(body))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def collector() -> Iterator[Collector]:
    receiver = Collector()
    yield receiver
    receiver.close()


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_tracing_sends_spans_by_otlp_where_the_standard_variables_say(
    serve: Serve, adapter_dir: Path, collector: Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    # serve's own provider: what `tracing = true` makes, with no tracer_provider given.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "router-a")
    standin = serve()
    async with (
        RouterServer(config_of([standin], adapter_dir, tracing=True), environ={}) as server,
        httpx.AsyncClient(base_url=server.url, timeout=30) as client,
    ):
        answer = await client.post(
            "/v1/completions", json={"model": "a0", **HELLO}, headers={"traceparent": TRACEPARENT}
        )
    # Batched: the server's stop sends what is left.
    assert answer.status_code == 200
    [resource] = [r for request in collector.requests for r in request.resource_spans]
    service = {a.key: a.value.string_value for a in resource.resource.attributes}["service.name"]
    assert service == "router-a"
    [span] = [span for scope in resource.scope_spans for span in scope.spans]
    assert span.name == "POST /v1/completions"
    assert (span.trace_id.hex(), span.parent_span_id.hex()) == (TRACE, "b7ad6b7169203331")
    attributes = {a.key: a.value for a in span.attributes}
    assert attributes["lorafleet.how"].string_value == "loaded"
    assert attributes["lorafleet.request_id"].string_value == answer.headers["x-request-id"]
    sent = standin.app.calls_to("completions")[0].headers["traceparent"]
    assert sent == f"00-{TRACE}-{span.span_id.hex()}-01"


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_without_tracing_the_traceparent_goes_as_sent(serve: Serve, adapter_dir: Path) -> None:
    standin = serve()
    async with (
        RouterServer(config_of([standin], adapter_dir), environ={}) as server,
        httpx.AsyncClient(base_url=server.url, timeout=30) as client,
    ):
        headers = {"traceparent": TRACEPARENT, "tracestate": "vendor=1"}
        await client.post("/v1/completions", json={"model": "a0", **HELLO}, headers=headers)
    sent = standin.app.calls_to("completions")[0].headers
    assert (sent["traceparent"], sent["tracestate"]) == (TRACEPARENT, "vendor=1")


def test_tracing_without_opentelemetry_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, adapter_dir: Path
) -> None:
    config = Config(
        replicas=(ReplicaConfig(id="r0", url="http://127.0.0.1:1", model="tiny", limit=2),),
        adapter_root=adapter_dir,
        tracing=True,
    )
    check(config)  # installed here (the dev extra has lorafleet[otel])
    # As without the extra: nothing of opentelemetry can be imported.
    for name in [n for n in sys.modules if n == "opentelemetry" or n.startswith("opentelemetry.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_NoOpenTelemetry(), *sys.meta_path])
    with pytest.raises(
        ConfigError, match=r"server.tracing: OpenTelemetry is not installed here: pip install"
    ):
        check(config)
    check(Config(replicas=config.replicas, adapter_root=adapter_dir))  # without tracing: as ever


class _NoOpenTelemetry:
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None


# -- time to first token and duration --------------------------------------------------------------


def histograms(text: str, family: str) -> dict[tuple[str, str], float]:
    """Each series' count of ``family`` (a histogram), by (adapter, how)."""
    out = {}
    for metric in text_string_to_metric_families(text):
        if metric.name == family:
            for sample in metric.samples:
                if sample.name == f"{family}_count":
                    out[sample.labels["adapter"], sample.labels["how"]] = sample.value
    return out


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_time_to_first_token_and_duration_per_adapter_and_how(serve: Serve, adapter_dir: Path) -> None:
    standin = serve()
    async with (
        RouterServer(config_of([standin], adapter_dir, metrics_adapters=1), environ={}) as server,
        httpx.AsyncClient(base_url=server.url, timeout=30) as client,
    ):

        async def post(model: str, stream: bool) -> None:
            answer = await client.post("/v1/completions", json={"model": model, "stream": stream, **HELLO})
            assert answer.status_code == 200

        await post("a0", True)  # loaded
        await post("a0", True)  # hit
        await post("a0", False)
        await post("tiny", True)
        await client.get("/metrics")  # a scrape ranks the adapters: a0 has its label from now on
        await post("a0", True)
        await post("a1", True)  # beyond the top 1: summed under _other
        await post("a1", False)
        page = (await client.get("/metrics")).text
    ttft = histograms(page, "lorafleet_serve_time_to_first_token_seconds")
    duration = histograms(page, "lorafleet_serve_request_duration_seconds")
    assert ttft == {("a0", "hit"): 1, ("_base", "base"): 1, ("_other", "loaded"): 2, ("_other", "hit"): 1}
    assert duration == {
        ("a0", "hit"): 1,
        ("_base", "base"): 1,
        ("_other", "loaded"): 2,
        ("_other", "hit"): 3,
    }
    assert "lorafleet_serve_time_to_first_token_seconds_bucket" in page

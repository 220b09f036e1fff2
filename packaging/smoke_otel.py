"""Smoke test of ``pip install 'lorafleet[serve,otel]'``: ``lorafleet serve --tracing``, run as a user
runs it, sends its span of a completion by OTLP over HTTP (the extra's own exporter, configured by the
standard ``OTEL_*`` variables) to a receiver started in this script, which decodes it with
OpenTelemetry's protobuf: the client's trace, continued, with the adapter and how it was granted.

Run by packaging/check.py in a fresh venv.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from lorafleet_standin import StandInServer, VllmStandIn

TRACE = "0af7651916cd43dd8448eb211c80319c"


class Receiver(BaseHTTPRequestHandler):
    spans: ClassVar[list[Any]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest.FromString(body)
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                Receiver.spans.extend(scope.spans)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        return


def main() -> None:
    command = Path(sys.executable).parent / "lorafleet"
    collector = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    env = dict(
        os.environ,
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{collector.server_address[1]}",
        OTEL_BSP_SCHEDULE_DELAY="100",
    )
    with tempfile.TemporaryDirectory() as tmp, StandInServer(VllmStandIn(model="tiny")) as server:
        adapter = Path(tmp) / "adapters" / "sql"
        adapter.mkdir(parents=True)
        (adapter / "adapter_config.json").write_text('{"r": 8}')
        (adapter / "adapter_model.safetensors").write_bytes(b"\0" * 64)
        log = Path(tmp) / "serve.log"
        with log.open("w") as out:
            proc = subprocess.Popen(
                [
                    *(str(command), "serve", "--replica", f"id=r0,url={server.url},model=tiny,limit=2"),
                    *("--adapters-root", str(adapter.parent), "--port", "0", "--tracing"),
                ],
                stderr=out,
                env=env,
            )
        try:
            deadline = time.monotonic() + 60
            while "ready on " not in log.read_text():
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
            url = log.read_text().split("ready on ")[1].split()[0]
            body = json.dumps({"model": "sql", "prompt": "hello", "max_tokens": 3}).encode()
            headers = {"Content-Type": "application/json", "traceparent": f"00-{TRACE}-b7ad6b7169203331-01"}
            request = urllib.request.Request(f"{url}/v1/completions", data=body, headers=headers)
            with urllib.request.urlopen(request, timeout=30) as answer:
                assert answer.status == 200, answer.status
            proc.send_signal(signal.SIGINT)  # the last spans go out as it stops
            assert proc.wait(30) == 0, log.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    collector.shutdown()
    [span] = Receiver.spans
    attributes = {a.key: a.value for a in span.attributes}
    assert span.trace_id.hex() == TRACE, span.trace_id.hex()
    assert (attributes["lorafleet.adapter"].string_value, attributes["lorafleet.how"].string_value) == (
        "sql",
        "loaded",
    ), attributes
    print(f"otel: lorafleet serve --tracing sent {span.name!r} by OTLP, in the client's trace, as 'loaded'")


if __name__ == "__main__":
    main()

"""What the reference router costs on a hit, against a bare pass-through proxy on the same stack.

    .venv/bin/python bench/serve_bench.py [--runtime asyncio|trio] [--rounds N] [--out FILE]

Three processes on 127.0.0.1: a vLLM stand-in, and in front of it, in turn, ``lorafleet serve`` (its
adapter already loaded: every request is a hit, and logs its line) and a bare proxy that forwards each
request as it came (hypercorn, httpx, the same runtime, no routing). A client in this process, on
plain blocking sockets (so that its own cost is small beside either proxy's), measures each:

- latency: one request at a time, the p50 and p99 of many;
- throughput: requests answered per second with several connections busy at once.

The two proxies are measured in alternating rounds, so that the machine's drift (this machine's
figures move by 40 % from run to run) falls on both alike, and the figures are given as ratios of the
router's to the bare proxy's. Targets: p50 at most 1.2x, throughput at least 0.8x.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs

HERE = Path(__file__).resolve().parent
REQUEST = {"model": "a0", "prompt": "hello", "max_tokens": 4}
LATENCY_TARGET = 1.2
THROUGHPUT_TARGET = 0.8


# -- the bare proxy (run as its own process: ``serve_bench.py --bare URL --runtime R``) --------------


def bare_proxy(upstream: str, runtime: str) -> None:
    """Serve a pass-through proxy to ``upstream`` on a free port; prints its URL, runs until killed.

    What a proxy on hypercorn and httpx cannot do without: read the body, forward it, relay the
    status, headers and body as they come. Nothing else.
    """
    import anyio
    import httpx
    from hypercorn.config import Config

    hop = {b"connection", b"keep-alive", b"transfer-encoding", b"date", b"server"}

    async def main() -> None:
        limits = httpx.Limits(max_connections=1000, max_keepalive_connections=1000)
        async with httpx.AsyncClient(timeout=60, limits=limits) as client:

            async def app(scope: Any, receive: Any, send: Any) -> None:
                if scope["type"] == "lifespan":
                    while True:
                        kind = (await receive())["type"]
                        if kind == "lifespan.startup":
                            await send({"type": "lifespan.startup.complete"})
                        elif kind == "lifespan.shutdown":
                            await send({"type": "lifespan.shutdown.complete"})
                            return
                chunks = []
                while True:
                    message = await receive()
                    chunks.append(message.get("body", b""))
                    if not message.get("more_body"):
                        break
                request = client.build_request(
                    "POST",
                    upstream + scope["path"],
                    content=b"".join(chunks),
                    headers=[(b"content-type", b"application/json")],
                )
                response = await client.send(request, stream=True)
                try:
                    headers = [(k, v) for k, v in response.headers.raw if k.lower() not in hop]
                    await send(
                        {"type": "http.response.start", "status": response.status_code, "headers": headers}
                    )
                    async for chunk in response.aiter_raw():
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                finally:
                    await response.aclose()

            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sock.listen(1024)
            print(f"ready on http://127.0.0.1:{sock.getsockname()[1]}", file=sys.stderr, flush=True)
            config = Config()
            config.bind = [f"fd://{sock.detach()}"]
            config.accesslog = None
            config.include_server_header = False
            if runtime == "trio":
                from hypercorn.trio import serve as serve_trio

                await serve_trio(app, config)
            else:
                from hypercorn.asyncio import serve as serve_asyncio

                await serve_asyncio(app, config)

    anyio.run(main, backend=runtime)


# -- processes -------------------------------------------------------------------------------------


@attrs.frozen
class Process:
    url: str
    pid: int

    def cpu(self) -> float:
        """Seconds of CPU the process has used (user and system), from /proc."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def started(command: list[str], log: Path, env: dict[str, str] | None = None) -> Iterator[Process]:
    """Run ``command`` with its stderr in ``log`` until it says "ready on URL"."""
    with log.open("w") as out:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=out, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            text = log.read_text()
            if "ready on " in text:
                yield Process(text.split("ready on ")[1].split()[0], proc.pid)
                return
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{command[:3]} did not start:\n{text}")
            time.sleep(0.05)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def standin() -> Iterator[str]:
    """A stand-in vLLM in a process of its own, on a free port; yields its URL."""
    code = (
        "import sys, threading\n"
        "from lorafleet_standin import StandInServer, VllmStandIn\n"
        "with StandInServer(VllmStandIn(model='tiny')) as s:\n"
        "    print('ready on', s.url, file=sys.stderr, flush=True)\n"
        "    threading.Event().wait()\n"
    )
    with (
        tempfile.TemporaryDirectory() as tmp,
        started([sys.executable, "-c", code], Path(tmp) / "log") as server,
    ):
        yield server.url


# -- the client ------------------------------------------------------------------------------------


class Connection:
    """A keep-alive HTTP/1.1 connection on a blocking socket: about the least a client can cost.

    Opened again when the server closes it (hypercorn does after 1,000 requests on one connection).
    """

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.address = (host, int(port))
        body = json.dumps(REQUEST).encode()
        self.request = (
            f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        self.sock: socket.socket | None = None
        self.buffer = b""

    def post(self) -> int:
        """Send the completion; returns the status once the whole answer is read."""
        if self.sock is None:
            self.sock = socket.create_connection(self.address)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.buffer = b""
        self.sock.sendall(self.request)
        while b"\r\n\r\n" not in self.buffer:
            self.buffer += self._recv()
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines[1:])}
        length = int(headers[b"content-length"])
        while len(self.buffer) < length:
            self.buffer += self._recv()
        self.buffer = self.buffer[length:]
        if headers.get(b"connection", b"").lower() == b"close":
            self.close()
        return status

    def _recv(self) -> bytes:
        assert self.sock is not None
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("the server closed the connection")
        return data

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def latencies(url: str, count: int) -> list[float]:
    """Seconds each of ``count`` requests took, one at a time on one connection."""
    conn = Connection(url)
    try:
        out = []
        for _ in range(count):
            started = time.perf_counter()
            status = conn.post()
            out.append(time.perf_counter() - started)
            assert status == 200, status
        return out
    finally:
        conn.close()


def throughput(url: str, connections: int, seconds: float) -> float:
    """Requests answered per second with ``connections`` kept busy for ``seconds``."""
    counts = [0] * connections
    start = threading.Barrier(connections + 1)
    stop_at = [0.0]

    def run(i: int) -> None:
        conn = Connection(url)
        try:
            conn.post()
            start.wait()
            while time.perf_counter() < stop_at[0]:
                assert conn.post() == 200
                counts[i] += 1
        finally:
            conn.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(connections)]
    for thread in threads:
        thread.start()
    stop_at[0] = time.perf_counter() + seconds + 3600  # held until every thread is connected
    start.wait()
    began = time.perf_counter()
    stop_at[0] = began + seconds
    for thread in threads:
        thread.join()
    return sum(counts) / (time.perf_counter() - began)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


# -- the run ---------------------------------------------------------------------------------------


def measure(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="lorafleet-serve-bench-") as tmp:
        root = Path(tmp)
        adapter = root / "adapters" / "a0"
        adapter.mkdir(parents=True)
        (adapter / "adapter_config.json").write_text('{"r": 8}')
        (adapter / "adapter_model.safetensors").write_bytes(b"\0" * 64)
        router_command = [
            *(sys.executable, "-m", "lorafleet_serve", "--port", "0", "--runtime", args.runtime),
            *("--replica", "", "--adapters-root", str(root / "adapters"), "--log-level", "INFO"),
        ]
        bare_command = [sys.executable, str(Path(__file__)), "--bare", "", "--runtime", args.runtime]
        with standin() as upstream:
            router_command[router_command.index("--replica") + 1] = f"id=r0,url={upstream},model=tiny,limit=4"
            bare_command[bare_command.index("--bare") + 1] = upstream
            with (
                started(router_command, root / "router.log") as router,
                started(bare_command, root / "bare.log") as bare,
            ):
                proxies = {"router": router, "bare": bare}
                latencies(router.url, 5)  # loads a0: every request after is a hit
                samples: dict[str, list[float]] = {"router": [], "bare": []}
                cpu: dict[str, float] = {"router": 0.0, "bare": 0.0}
                rates: dict[str, list[float]] = {"router": [], "bare": []}
                for proxy in proxies.values():
                    latencies(proxy.url, 50)  # warm: connections, code paths
                # Rounds alternate between the proxies, and which goes first, so that drift falls on both.
                for i in range(args.rounds):
                    for name, proxy in sorted(proxies.items(), reverse=i % 2 == 1):
                        before = proxy.cpu()
                        samples[name] += latencies(proxy.url, args.requests)
                        cpu[name] += proxy.cpu() - before
                for i in range(args.rounds):
                    for name, proxy in sorted(proxies.items(), reverse=i % 2 == 1):
                        rates[name].append(throughput(proxy.url, args.connections, args.seconds))
                logged = (root / "router.log").read_text().count("how=hit status=200")
    requests = args.rounds * args.requests
    return {
        "samples": samples,
        "rates": rates,
        "logged": logged,
        "cpu": {k: v / requests for k, v in cpu.items()},
    }


def report(args: argparse.Namespace, figures: dict[str, Any]) -> str:
    samples, rates, cpu = figures["samples"], figures["rates"], figures["cpu"]
    p50 = {k: percentile(v, 0.5) * 1000 for k, v in samples.items()}
    p99 = {k: percentile(v, 0.99) * 1000 for k, v in samples.items()}
    rate = {k: statistics.median(v) for k, v in rates.items()}
    latency_ratio = p50["router"] / p50["bare"]
    # Each round's pair ran back to back, under the same load: the median of their ratios is what one
    # disturbed round (another process's burst) moves least.
    rate_ratio = statistics.median(r / b for r, b in zip(rates["router"], rates["bare"], strict=True))
    ok = latency_ratio <= LATENCY_TARGET and rate_ratio >= THROUGHPUT_TARGET
    command = "python bench/serve_bench.py " + " ".join(args.argv)
    lines = [
        "# The reference router on a hit, against a bare pass-through proxy",
        "",
        f"Written by `{command.strip()}` on {datetime.date.today().isoformat()}: "
        f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"{args.runtime}, load average {os.getloadavg()[0]:.1f} at the end.",
        "",
        "Same stand-in, same server stack (hypercorn, httpx, the same runtime), loopback only; the router's",
        "adapter is loaded, so every request is a hit, and it logs its line per request (INFO, to a file).",
        f"Latency: {args.rounds} rounds of {args.requests} requests one at a time, per proxy, alternating.",
        f"Throughput: {args.rounds} rounds of {args.seconds:g} s with {args.connections} connections busy, "
        "per proxy, alternating; the median of each proxy's rounds, and the median of the rounds' ratios.",
        "",
        "| | bare proxy | lorafleet serve | ratio | target |",
        "|---|---:|---:|---:|---|",
        f"| latency p50 (ms) | {p50['bare']:.2f} | {p50['router']:.2f} | {latency_ratio:.2f}x | "
        f"at most {LATENCY_TARGET}x: {'met' if latency_ratio <= LATENCY_TARGET else 'MISSED'} |",
        f"| latency p99 (ms) | {p99['bare']:.2f} | {p99['router']:.2f} | "
        f"{p99['router'] / p99['bare']:.2f}x | |",
        f"| CPU per request, the proxy's process (ms) | {cpu['bare'] * 1000:.2f} | "
        f"{cpu['router'] * 1000:.2f} | {cpu['router'] / cpu['bare']:.2f}x | |",
        f"| throughput (requests/s) | {rate['bare']:.0f} | {rate['router']:.0f} | {rate_ratio:.2f}x | "
        f"at least {THROUGHPUT_TARGET}x: {'met' if rate_ratio >= THROUGHPUT_TARGET else 'MISSED'} |",
        "",
        "Throughput rounds (requests/s), in order: "
        + "; ".join(f"{k} " + ", ".join(f"{r:.0f}" for r in v) for k, v in sorted(rates.items())),
        "",
        f"The router logged {figures['logged']} hits with status 200.",
        "",
        "Both targets met." if ok else "A target was missed.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench/serve_bench.py", description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", choices=["asyncio", "trio"], default="asyncio")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--requests", type=int, default=100, help="requests per latency round per proxy")
    parser.add_argument("--seconds", type=float, default=0.5, help="seconds per throughput round per proxy")
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--out", type=Path, default=HERE / "serve_results.md")
    parser.add_argument("--bare", metavar="UPSTREAM", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.bare:
        bare_proxy(args.bare, args.runtime)
        return 0
    args.argv = argv
    started_at = time.monotonic()
    text = report(args, measure(args))
    args.out.write_text(text)
    print(text)
    print(f"({time.monotonic() - started_at:.1f} s; written to {args.out})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

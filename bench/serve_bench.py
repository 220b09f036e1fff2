"""What the reference router costs on a hit, against a bare pass-through proxy on the same stack.

    .venv/bin/python bench/serve_bench.py [--runtime asyncio|trio] [--runs N] [--rounds N] [--slices N]
        [--interleave slice|batch] [--py-spy PREFIX] [--out FILE]
    .venv/bin/python bench/serve_bench.py --sweep 1,8,128 [--no-peer] [--no-bare]   (issue 38)

Three processes on 127.0.0.1: a vLLM stand-in, and in front of it, in turn, ``lorafleet serve`` (its
adapter already loaded: every request is a hit, and logs its line) and a bare proxy that forwards each
request as it came (the router's server and client, the same runtime, no routing). A client in this
process, on plain blocking sockets (so that its own cost is small beside either proxy's), measures each:

- latency: one request at a time, the p50 of a batch;
- throughput: requests answered per second with several connections busy at once.

Each round measures both proxies, each in turn five times (``--slices``) for a fifth of the round's
requests and seconds, the first swapped every round, and takes the router's figure over the bare
proxy's: on this shared machine one run of each gave ratios anywhere from 0.67x to 1.77x, where turns
a tenth of a second apart see both proxies under the same load. A run's figure is the median of its
rounds' ratios; ``--runs`` repeats the whole with fresh processes. Targets: p50 at most 1.2x,
throughput at least 0.8x. ``--interleave batch`` gives each proxy one batch a round instead.

``--sweep`` measures throughput and each process's CPU per request at each number of connections
for the router, the bare proxy and vLLM's own router (``vllm-router``, installed in a venv of its own
under ~/.cache/lorafleet the first time; skipped with a line saying why when it cannot be), in
alternated turns, and prints the ratios issue 38 sets targets on.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import math
import os
import platform
import shlex
import signal
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
from typing import Any, ClassVar

import attrs

HERE = Path(__file__).resolve().parent
REQUEST = {"model": "a0", "prompt": "hello", "max_tokens": 4}
OPENAI_HEADERS = (
    "Accept: application/json\r\nUser-Agent: OpenAI/Python 3.51.0\r\nX-Stainless-Lang: python\r\n"
    "X-Stainless-Package-Version: 3.51.0\r\nX-Stainless-OS: Linux\r\nX-Stainless-Arch: x64\r\n"
    "X-Stainless-Runtime: CPython\r\nX-Stainless-Runtime-Version: 3.11.7\r\n"
    "X-Stainless-Retry-Count: 0\r\nX-Stainless-Read-Timeout: 600\r\nAuthorization: Bearer sk-unused\r\n"
    "traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n"
)
"""What the official client sends beside the body (``--headers openai``): the router passes all of them
but its own credential."""
HEADERS = {"plain": "", "openai": OPENAI_HEADERS}
LATENCY_TARGET = 1.2
THROUGHPUT_TARGET = 0.8


# -- the bare proxy (run as its own process: ``serve_bench.py --bare URL --runtime R``) --------------


def bare_proxy(upstream: str, runtime: str) -> None:
    """Serve a pass-through proxy to ``upstream`` on a free port; prints its URL, runs until killed.

    What a proxy on the router's stack cannot do without: read the body, forward it with the client's
    headers (less the hop's own), relay the status, headers and body as they come. Nothing else. The
    stack is the router's: uvicorn (httptools), aiohttp and uvloop under asyncio, hypercorn and httpx
    under trio.
    """
    import anyio

    hop = {b"connection", b"keep-alive", b"transfer-encoding", b"date", b"server"}
    # Of the client's: its client sets ``host`` and ``content-length`` for the upstream.
    own = hop | {b"host", b"content-length"}

    async def main() -> None:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(1024)
        print(f"ready on http://127.0.0.1:{sock.getsockname()[1]}", file=sys.stderr, flush=True)
        if runtime == "asyncio":
            await _bare_asyncio(upstream, hop, own, sock)
        else:
            await _bare_trio(upstream, hop, own, sock)

    options = {"use_uvloop": True} if runtime == "asyncio" else {}
    anyio.run(main, backend=runtime, backend_options=options)


async def _read(receive: Any) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def _bare_asyncio(upstream: str, hop: set[bytes], own: set[bytes], sock: socket.socket) -> None:
    import aiohttp
    import uvicorn

    connector = aiohttp.TCPConnector(limit=1000, limit_per_host=0)
    async with aiohttp.ClientSession(
        connector=connector, cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False
    ) as client:

        async def app(scope: Any, receive: Any, send: Any) -> None:
            body = await _read(receive)
            sent = scope["headers"]
            headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in sent if k not in own]
            async with client.post(upstream + scope["path"], data=body, headers=headers) as response:
                relayed = [(k, v) for k, v in response.raw_headers if k.lower() not in hop]
                await send({"type": "http.response.start", "status": response.status, "headers": relayed})
                async for chunk in response.content.iter_any():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})

        config = uvicorn.Config(
            app,
            http="httptools",
            ws="none",
            lifespan="off",
            loop="none",
            access_log=False,
            server_header=False,
        )
        await uvicorn.Server(config).serve(sockets=[sock])


async def _bare_trio(upstream: str, hop: set[bytes], own: set[bytes], sock: socket.socket) -> None:
    import httpx
    from hypercorn.config import Config
    from hypercorn.trio import serve

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
            request = client.build_request(
                "POST",
                upstream + scope["path"],
                content=await _read(receive),
                headers=[(k, v) for k, v in scope["headers"] if k not in own],
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

        config = Config()
        config.bind = [f"fd://{sock.detach()}"]
        config.accesslog = None
        config.include_server_header = False
        await serve(app, config)


# -- processes -------------------------------------------------------------------------------------


@attrs.frozen
class Process:
    url: str
    pid: int

    def cpu(self) -> float:
        """Seconds of CPU the process has used (user and system), from /proc."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ended(proc: subprocess.Popen[bytes], grace: float) -> None:
    """Stop ``proc``: SIGTERM, then SIGKILL if it is still there after ``grace`` seconds."""
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


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
        ended(proc, 10)


@contextmanager
def standin(options: str = "", collect: bool = True) -> Iterator[str]:
    """A stand-in vLLM in a process of its own, on a free port; yields its URL.

    Started, it sets start-up's objects aside from the collector, as vLLM's API server does (its
    lifespan's ``gc.freeze()``).

    Args:
        options: more arguments to ``VllmStandIn``, as Python source (``"stream_interval=0.5"``).
        collect: False: no garbage collection at all after start-up. With 1,000 open streams the
            stand-in's own full passes stalled every path, the direct one too, for up to 170 ms.
    """
    code = (
        "import gc, sys, threading\n"
        "from lorafleet_standin import StandInServer, VllmStandIn\n"
        f"with StandInServer(VllmStandIn(model='tiny', {options})) as s:\n"
        "    gc.collect()\n"
        "    gc.freeze()\n"
        + ("" if collect else "    gc.disable()\n")
        + "    print('ready on', s.url, file=sys.stderr, flush=True)\n"
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

    headers: ClassVar[str] = ""
    """More header lines every connection sends (``--headers``)."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.address = (host, int(port))
        body = json.dumps(REQUEST).encode()
        self.request = (
            f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"{self.headers}Content-Length: {len(body)}\r\n\r\n"
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


def paired_latencies(urls: dict[str, str], count: int, slices: int) -> dict[str, list[float]]:
    """Seconds each of ``count`` requests took through each proxy, one at a time, the proxies taking
    turns every ``count / slices`` requests (in the order ``urls`` gives): a burst of other work lands
    on both.

    Not request by request: a proxy would then rest while the other answers, and work it does after
    answering (the router's log line, its release) would leave the measured path; within a turn each
    request follows the last at once, as in a batch.
    """
    conns = {name: Connection(url) for name, url in urls.items()}
    out: dict[str, list[float]] = {name: [] for name in urls}
    try:
        for turn in range(slices):
            share = count * (turn + 1) // slices - count * turn // slices
            for name, conn in conns.items():
                for _ in range(share):
                    started = time.perf_counter()
                    status = conn.post()
                    out[name].append(time.perf_counter() - started)
                    assert status == 200, status
        return out
    finally:
        for conn in conns.values():
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


def paired_throughput(
    urls: dict[str, str], connections: int, seconds: float, slices: int
) -> dict[str, float]:
    """Requests per second through each proxy, with ``connections`` kept busy, all of them switching
    from one proxy to the other every ``seconds / slices`` (in the order ``urls`` gives), so that each
    proxy has ``seconds`` in all and a burst of other work lands on both.

    A request counts for the proxy it went to; one still running at a switch ends in the next
    slice, as often for one proxy as for the other.
    """
    names = list(urls)
    counts = {name: [0] * connections for name in names}
    target = [names[0]]
    stop = threading.Event()
    start = threading.Barrier(connections + 1)

    def run(i: int) -> None:
        conns = {name: Connection(url) for name, url in urls.items()}
        try:
            for conn in conns.values():
                conn.post()
            start.wait()
            while not stop.is_set():
                name = target[0]
                assert conns[name].post() == 200
                counts[name][i] += 1
        finally:
            for conn in conns.values():
                conn.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(connections)]
    for thread in threads:
        thread.start()
    start.wait()
    spent = dict.fromkeys(names, 0.0)
    for k in range(slices * len(names)):
        name = target[0] = names[k % len(names)]
        began = time.perf_counter()
        time.sleep(seconds / slices)
        spent[name] += time.perf_counter() - began
    stop.set()
    for thread in threads:
        thread.join()
    return {name: sum(counts[name]) / spent[name] for name in names}


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


# -- the run ---------------------------------------------------------------------------------------


@attrs.frozen
class Run:
    """One run: fresh processes, then rounds; per round each proxy's p50, requests/s and CPU."""

    p50: dict[str, list[float]]
    """Seconds, per proxy, one per round."""
    rates: dict[str, list[float]]
    """Requests per second, per proxy, one per round."""
    cpu: dict[str, list[float]]
    """CPU seconds per request of the proxy's process in the latency batch, per proxy, per round."""
    samples: dict[str, list[float]]
    """Every latency, per proxy, for the pooled p50 and p99."""
    logged: int
    load: tuple[float, float]
    """The 1-minute load average when the run began and when it ended."""
    seconds: float

    def ratios(self, figure: str) -> list[float]:
        values = {"p50": self.p50, "rate": self.rates, "cpu": self.cpu}[figure]
        # A round too short for the bare proxy to finish a request has no ratio to speak of: inf
        # (or 1 when neither finished one), so that a quick run still prints.
        return [
            r / b if b else (math.inf if r else 1.0)
            for r, b in zip(values["router"], values["bare"], strict=True)
        ]

    def ratio(self, figure: str) -> float:
        return statistics.median(self.ratios(figure))

    def ok(self) -> bool:
        return self.ratio("p50") <= LATENCY_TARGET and self.ratio("rate") >= THROUGHPUT_TARGET


def spread(values: list[float]) -> str:
    ordered = sorted(values)
    if len(ordered) < 2:
        return f"{ordered[0]:.2f}"
    q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    return f"{ordered[0]:.2f}-{ordered[-1]:.2f}, IQR {q1:.2f}-{q3:.2f}"


@contextmanager
def profiled(pids: dict[str, int], prefix: Path | None, run: int) -> Iterator[None]:
    """``py-spy record`` on each process while the block runs, when ``prefix`` is given.

    Non-blocking: py-spy's default stops the process for each sample, which added a quarter to the
    router's CPU per request here (1.42x the bare proxy's, against 1.15x). Writes collapsed stacks to
    ``PREFIX.NAME.RUN.txt``.
    """
    if prefix is None:
        yield
        return
    spy = Path(sys.executable).with_name("py-spy")
    procs = []
    for name, pid in pids.items():
        out = prefix.with_name(f"{prefix.name}.{name}.{run}.txt")
        command = [str(spy), "record", "--pid", str(pid), "--nonblocking", "--rate", "200"]
        command += ["--format", "raw", "--output", str(out)]
        procs.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    try:
        yield
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        for proc in procs:
            proc.wait(30)


GROUPS = (
    ("lorafleet_serve", "lorafleet_serve/"),
    ("lorafleet_fleet (the shell)", "lorafleet_fleet/"),
    ("lorafleet (the core)", "lorafleet/"),
    ("logging", "logging/"),
    ("httpx, httpcore, aiohttp (the client side)", "httpx/", "httpcore/", "aiohttp/"),
    ("hypercorn, h11, uvicorn (the server side)", "hypercorn/", "h11/", "uvicorn/"),
    ("asyncio, anyio, selectors (the loop)", "asyncio/", "anyio/", "selectors.py", "trio/"),
)


def where_time_goes(paths: list[Path]) -> tuple[dict[str, float], int]:
    """Share of py-spy raw profiles' samples by the package of the innermost frame (self time), and
    how many samples."""
    counts: dict[str, int] = {}
    total = 0
    for line in (line for path in paths for line in path.read_text().splitlines()):
        stack, _, n = line.rpartition(" ")
        frame = stack.rsplit(";", 1)[-1]
        group = next(
            (g[0] for g in GROUPS if any(f"({m}" in frame or f" {m}" in frame for m in g[1:])), "other"
        )
        counts[group] = counts.get(group, 0) + int(n)
        total += int(n)
    shares = {group: count / total for group, count in sorted(counts.items(), key=lambda kv: -kv[1])}
    return shares, total


def measure(args: argparse.Namespace, run: int) -> Run:
    """Start the three processes afresh and measure both proxies in alternating rounds."""
    load = os.getloadavg()[0]
    began = time.monotonic()
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
                p50: dict[str, list[float]] = {"router": [], "bare": []}
                rates: dict[str, list[float]] = {"router": [], "bare": []}
                cpu: dict[str, list[float]] = {"router": [], "bare": []}
                samples: dict[str, list[float]] = {"router": [], "bare": []}
                for proxy in proxies.values():
                    latencies(proxy.url, 50)  # warm: connections, code paths
                    throughput(proxy.url, args.connections, 0.2)
                with profiled({name: p.pid for name, p in proxies.items()}, args.py_spy, run):
                    for i in range(args.rounds):
                        # Both proxies in each round, the first swapped every round: the machine's
                        # drift and other work's bursts fall on both alike.
                        order = ("bare", "router") if i % 2 == 0 else ("router", "bare")
                        if args.interleave == "slice":
                            before = {name: proxies[name].cpu() for name in order}
                            turns = {name: proxies[name].url for name in order}
                            batches = paired_latencies(turns, args.requests, args.slices)
                            for name in order:
                                cpu[name].append((proxies[name].cpu() - before[name]) / args.requests)
                        else:
                            batches = {}
                            for name in order:
                                before_cpu = proxies[name].cpu()
                                batches[name] = latencies(proxies[name].url, args.requests)
                                cpu[name].append((proxies[name].cpu() - before_cpu) / args.requests)
                        for name in order:
                            p50[name].append(percentile(batches[name], 0.5))
                            samples[name] += batches[name]
                        if args.interleave == "slice":
                            urls = {name: proxies[name].url for name in reversed(order)}
                            paired = paired_throughput(urls, args.connections, args.seconds, args.slices)
                            for name in order:
                                rates[name].append(paired[name])
                        else:
                            for name in reversed(order):  # the last to go keeps its turn: ABBA
                                rates[name].append(
                                    throughput(proxies[name].url, args.connections, args.seconds)
                                )
                logged = (root / "router.log").read_text().count("how=hit status=200")
    return Run(p50, rates, cpu, samples, logged, (load, os.getloadavg()[0]), time.monotonic() - began)


def summary(run: Run, i: int) -> str:
    """One run in one line, for the terminal as it goes."""
    return (
        f"run {i}: p50 {run.ratio('p50'):.2f}x [{spread(run.ratios('p50'))}], "
        f"throughput {run.ratio('rate'):.2f}x [{spread(run.ratios('rate'))}], "
        f"CPU {run.ratio('cpu'):.2f}x; load {run.load[0]:.2f}→{run.load[1]:.2f}; "
        f"{'met' if run.ok() else 'MISSED'}"
    )


def report(args: argparse.Namespace, runs: list[Run], loads: tuple[Any, Any]) -> str:
    first, last = (" / ".join(f"{x:.2f}" for x in load) for load in loads)
    met = sum(run.ok() for run in runs)
    command = shlex.join([".venv/bin/python", "bench/serve_bench.py", *args.argv])
    lines = [
        "# The reference router on a hit, against a bare pass-through proxy",
        "",
        f"Written by `{command}` on {datetime.date.today().isoformat()}: "
        f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, {args.runtime}; "
        f"load average (1, 5, 15 min) {first} at the start, {last} at the end.",
        "",
        "Same stand-in, same stack (asyncio: uvicorn, aiohttp, uvloop; trio: hypercorn, httpx), three",
        "processes on loopback;",
        "the router's adapter is loaded, so every request is a hit, and it logs its line per request (INFO,",
        "to a file). Each run starts the processes afresh, then measures in rounds; in each round, latency:",
        f"{args.requests} requests one at a time through each proxy (their p50, and the CPU the proxy's",
        f"process spent on them), then throughput: {args.seconds:g} s with {args.connections} connections "
        "busy, per proxy,",
        (
            f"the two proxies taking turns {args.slices} times a round (a turn is "
            f"{args.requests // args.slices} requests, {args.seconds / args.slices:g} s)."
            if args.interleave == "slice"
            else "one batch per proxy a round."
        ),
        f"The proxy that goes first swaps every round. {args.rounds} rounds a run.",
        "",
        "**How to read it.** A ratio is the router's figure over the bare proxy's in the same round, and",
        "the run's figure is the median of its rounds' ratios, with their least and greatest and the middle",
        "half (IQR). Both proxies see the same machine within a round, so the ratios hold while the",
        "milliseconds move with the machine's load. Targets: p50 at most "
        f"{LATENCY_TARGET}x, throughput at least {THROUGHPUT_TARGET}x.",
        "",
        "| run | p50 ratio | p50 ratios, min-max and IQR | throughput ratio "
        "| throughput ratios, min-max and IQR | CPU per request ratio | bare p50 ms | router p50 ms "
        "| bare req/s | router req/s | load | |",
        "| ---: | ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for i, run in enumerate(runs, 1):
        p50 = {k: statistics.median(v) * 1000 for k, v in run.p50.items()}
        lines.append(
            f"| {i} | {run.ratio('p50'):.2f}x | {spread(run.ratios('p50'))} | {run.ratio('rate'):.2f}x | "
            f"{spread(run.ratios('rate'))} | {run.ratio('cpu'):.2f}x | "
            f"{p50['bare']:.2f} | {p50['router']:.2f} | "
            f"{statistics.median(run.rates['bare']):.0f} | {statistics.median(run.rates['router']):.0f} | "
            f"{run.load[0]:.2f} → {run.load[1]:.2f} | {'met' if run.ok() else 'missed'} |"
        )
    pooled = {k: [x for run in runs for x in run.samples[k]] for k in ("bare", "router")}
    cpu = {k: statistics.median(x for run in runs for x in run.cpu[k]) * 1000 for k in ("bare", "router")}
    lines += [
        "",
        f"Both targets met in {met} of {len(runs)} runs.",
        "",
        "Over every run (the milliseconds, pooled; for scale, not for comparison across runs):",
        "",
        "| | bare proxy | lorafleet serve |",
        "|---|---:|---:|",
        f"| latency p50 (ms) | {percentile(pooled['bare'], 0.5) * 1000:.2f} | "
        f"{percentile(pooled['router'], 0.5) * 1000:.2f} |",
        f"| latency p99 (ms) | {percentile(pooled['bare'], 0.99) * 1000:.2f} | "
        f"{percentile(pooled['router'], 0.99) * 1000:.2f} |",
        f"| CPU per request, the proxy's process, median of the rounds (ms) | {cpu['bare']:.2f} | "
        f"{cpu['router']:.2f} |",
        "",
        f"The router logged {sum(run.logged for run in runs)} hits with status 200.",
    ]
    if args.py_spy:
        profiles = {
            name: where_time_goes(
                [args.py_spy.with_name(f"{args.py_spy.name}.{name}.{i}.txt") for i in range(1, len(runs) + 1)]
            )
            for name in ("bare", "router")
        }
        cpu_ms = {
            k: statistics.median(x for run in runs for x in run.cpu[k]) * 1000 for k in ("bare", "router")
        }
        lines += [
            "",
            "## Where the time goes",
            "",
            "Both proxies sampled by `py-spy record --nonblocking` through the rounds of every run above:",
            "the share of each process's samples whose innermost frame is in each package, and that share",
            "of the process's CPU per request (median of the rounds), so that the two columns add up to",
            "each one's CPU per request.",
            "",
            "| package | bare: share | bare: ms per request | router: share | router: ms per request |",
            "| --- | ---: | ---: | ---: | ---: |",
        ]
        groups = [g[0] for g in GROUPS] + ["other"]
        for group in groups:
            b, r = profiles["bare"][0].get(group, 0.0), profiles["router"][0].get(group, 0.0)
            lines.append(
                f"| {group} | {b:.1%} | {b * cpu_ms['bare']:.3f} | {r:.1%} | {r * cpu_ms['router']:.3f} |"
            )
        lines.append(f"| samples | {profiles['bare'][1]} | | {profiles['router'][1]} | |")
    return "\n".join(lines) + "\n"


# -- the sweep: concurrency, CPU per request, and vLLM's own router ----------------------------------

ROUTER_VERSION = "0.1.17"
ROUTER_VENV = Path.home() / ".cache" / "lorafleet" / f"vllm-router-{ROUTER_VERSION}"
"""Where vllm-router is installed, as bench/peer_bench.py (branch peerbench) installs it."""
CPU_TARGET = 3.0
"""Issue 38: the router's CPU per proxied hit at most this times vllm-router's, in the same run."""
FOLD_TARGET = 0.9
"""Issue 38: throughput at the most connections at least this share of the router's best."""


def vllm_router() -> tuple[Path | None, str]:
    """vllm-router's command, installed in a venv of its own the first time; or None and why not."""
    command = ROUTER_VENV / "bin" / "vllm-router"
    if command.exists():
        return command, f"vllm-router {ROUTER_VERSION} ({ROUTER_VENV})"
    try:
        subprocess.run([sys.executable, "-m", "venv", str(ROUTER_VENV)], check=True, capture_output=True)
        subprocess.run(
            [str(ROUTER_VENV / "bin" / "pip"), "install", "--quiet", f"vllm-router=={ROUTER_VERSION}"],
            check=True,
            capture_output=True,
            text=True,
            timeout=900,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        import shutil

        shutil.rmtree(ROUTER_VENV, ignore_errors=True)
        tail = getattr(exc, "stderr", "") or str(exc)
        return None, f"vllm-router {ROUTER_VERSION} could not be installed: {str(tail).strip()[-300:]}"
    return command, f"vllm-router {ROUTER_VERSION} (installed in {ROUTER_VENV})"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def peer(command: Path, upstream: str, log: Path) -> Iterator[Process]:
    """vllm-router (round robin) in front of ``upstream``, once it answers /health."""
    port = free_port()
    argv = [str(command), "--host", "127.0.0.1", "--port", str(port), "--policy", "round_robin"]
    argv += ["--prometheus-port", str(free_port()), "--worker-urls", upstream]
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                    sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    if b" 200 " in sock.recv(100):
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"vllm-router did not start:\n{log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield Process(url, proc.pid)
    finally:
        ended(proc, 10)


def sweep(args: argparse.Namespace) -> str:
    """Every proxy at each number of connections, in alternated turns: requests per second, CPU per
    request and busy share of its process; ratios to vllm-router and to the router's own best."""
    levels = [int(x) for x in args.sweep.split(",")]
    command, said = vllm_router() if args.peer else (None, "vllm-router not asked for (--no-peer)")
    load_start = os.getloadavg()
    figures: dict[tuple[int, str], list[tuple[float, float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="lorafleet-serve-sweep-") as tmp:
        root = Path(tmp)
        adapter = root / "adapters" / "a0"
        adapter.mkdir(parents=True)
        (adapter / "adapter_config.json").write_text('{"r": 8}')
        (adapter / "adapter_model.safetensors").write_bytes(b"\0" * 64)
        with standin() as upstream, contextlib.ExitStack() as stack:
            router_command = [
                *(sys.executable, "-m", "lorafleet_serve", "--port", "0", "--runtime", args.runtime),
                *("--replica", f"id=r0,url={upstream},model=tiny,limit=4"),
                *("--adapters-root", str(root / "adapters"), "--log-level", "INFO"),
            ]
            proxies = {"router": stack.enter_context(started(router_command, root / "router.log"))}
            latencies(proxies["router"].url, 5)  # loads a0 on the stand-in: every request after is a hit
            if args.baseline is not None:
                # Another checkout's router (its venv's python), on the same stand-in: before and after.
                base_command = [str(args.baseline), *router_command[1:]]
                proxies["baseline"] = stack.enter_context(started(base_command, root / "baseline.log"))
            if args.bare_arm:
                bare_command = [
                    sys.executable,
                    str(Path(__file__)),
                    "--bare",
                    upstream,
                    "--runtime",
                    args.runtime,
                ]
                proxies["bare"] = stack.enter_context(started(bare_command, root / "bare.log"))
            if command is not None:
                proxies["vllm-router"] = stack.enter_context(peer(command, upstream, root / "peer.log"))
            for proxy in proxies.values():
                latencies(proxy.url, 50)
                throughput(proxy.url, 8, 0.2)
            names = list(proxies)
            for i in range(args.rounds):
                for level in levels:
                    # The first to go swaps every round: the machine's drift falls on all alike.
                    for name in names if i % 2 == 0 else reversed(names):
                        proxy = proxies[name]
                        before, began = proxy.cpu(), time.perf_counter()
                        rate = throughput(proxy.url, level, args.seconds)
                        spent, cpu = time.perf_counter() - began, proxy.cpu() - before
                        per = cpu / max(1.0, rate * args.seconds)
                        figures.setdefault((level, name), []).append((rate, per, cpu / spent))
    load_end = os.getloadavg()
    med = {
        key: tuple(statistics.median(v[k] for v in values) for k in range(3))
        for key, values in figures.items()
    }
    command_line = shlex.join([".venv/bin/python", "bench/serve_bench.py", *args.argv])
    lines = [
        f"Written by `{command_line}` on {datetime.date.today().isoformat()}: {platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, {args.runtime}; load average "
        f"{' / '.join(f'{x:.2f}' for x in load_start)} at the start, "
        f"{' / '.join(f'{x:.2f}' for x in load_end)} at the end. {said}. Client headers: {args.headers}"
        + (f"; baseline: the router of {args.baseline}." if args.baseline is not None else "."),
        "",
        f"Each proxy in turn for {args.seconds:g} s at each number of connections, {args.rounds} rounds, the "
        "first swapped every round; medians of the rounds. CPU: the proxy's process (user + system).",
        "",
        "| connections | proxy | req/s | CPU per request (µs) | its process busy |",
        "| ---: | --- | ---: | ---: | ---: |",
    ]
    for level in levels:
        for name in names:
            rate, per, busy = med[level, name]
            lines.append(f"| {level} | {name} | {rate:.0f} | {per * 1e6:.0f} | {busy:.0%} |")
    best = max(med[level, "router"][0] for level in levels)
    fold = med[levels[-1], "router"][0] / best
    lines += [
        "",
        f"- router throughput at {levels[-1]} connections over its best: {fold:.2f}x "
        f"(target at least {FOLD_TARGET}x: {'met' if fold >= FOLD_TARGET else 'missed'})",
    ]
    if "vllm-router" in names:
        for level in levels:
            ratio = med[level, "router"][1] / med[level, "vllm-router"][1]
            rates = med[level, "router"][0] / med[level, "vllm-router"][0]
            lines.append(
                f"- at {level} connections: router CPU per request {ratio:.2f}x vllm-router's "
                f"(target at most {CPU_TARGET}x: {'met' if ratio <= CPU_TARGET else 'missed'}), "
                f"its req/s {rates:.2f}x"
            )
    if "baseline" in names:
        for level in levels:
            ratio = med[level, "router"][1] / med[level, "baseline"][1]
            rates = med[level, "router"][0] / med[level, "baseline"][0]
            lines.append(
                f"- at {level} connections: router CPU per request {ratio:.2f}x the baseline's, "
                f"its req/s {rates:.2f}x"
            )
    return "\n".join(lines) + "\n"


# -- the streaming arm: many open streams at a steady rate ------------------------------------------


@attrs.frozen
class StreamTurn:
    """One turn of ``streams`` streams through one proxy."""

    lateness: list[float]
    """Seconds each token chunk came after its stream's schedule, less the stream's least."""
    chunks: int
    cpu: float
    """CPU seconds of the proxy's process in the turn (0 for none)."""
    wall: float
    streams: int
    """Streams that ended with ``[DONE]``."""


def stream_turn(url: str, streams: int, interval: float, tokens: int, proxy: Process | None) -> StreamTurn:
    """Open ``streams`` streams of ``tokens`` chunks each at ``interval`` seconds, their starts spread
    over one interval, and read them all on one thread (non-blocking sockets, a selector) until each
    has ended: when each chunk came, against its stream's schedule.

    A chunk's lateness is when it came less ``i * interval`` (its step), less the least of that over
    its stream: what the path from the stand-in's send to here added, beyond its best.
    """
    import selectors

    host, port = url.removeprefix("http://").split(":")
    body = json.dumps({"model": "a0", "prompt": "hello", "max_tokens": tokens, "stream": True}).encode()
    request = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    selector = selectors.DefaultSelector()
    arrivals: list[list[float]] = [[] for _ in range(streams)]
    carry = [b""] * streams
    heads: dict[int, bytes] = {}
    done = 0
    socks: list[socket.socket] = []
    cpu_before = proxy.cpu() if proxy is not None else 0.0
    # This client's own collections would stall every stream it reads, whichever path's turn it is.
    gc.collect()
    gc.disable()
    began = time.perf_counter()
    try:
        while done < streams:
            now = time.perf_counter()
            while len(socks) < streams and now >= began + len(socks) * interval / streams:
                # Connected without blocking: a connect the server's backlog makes wait (a SYN sent
                # again a second later) must not hold up this one thread, and every stream with it.
                sock = socket.socket()
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.setblocking(False)
                sock.connect_ex((host, int(port)))
                selector.register(sock, selectors.EVENT_WRITE, len(socks))
                socks.append(sock)
            opened = len(socks)
            timeout = max(0.0, began + opened * interval / streams - now) if opened < streams else 1.0
            for key, events in selector.select(timeout):
                conn, k = key.fileobj, key.data
                assert isinstance(conn, socket.socket)
                if events & selectors.EVENT_WRITE:
                    conn.sendall(request)  # a few hundred bytes: the send buffer takes them at once
                    selector.modify(conn, selectors.EVENT_READ, k)
                    continue
                data = conn.recv(65536)
                at = time.perf_counter()
                if not data:
                    raise ConnectionError(f"{url}: stream {k} closed before [DONE]: {heads.get(k)!r}")
                if not arrivals[k] and k not in heads:
                    heads[k] = data[:400]
                text = carry[k] + data
                found = text.count(b"data: ")
                end = text.rfind(b"data: ") + 6 if found else 0
                carry[k] = text[max(end, len(text) - 5) :]
                if b"data: [DONE]" in text:
                    found -= 1
                    done += 1
                    selector.unregister(conn)
                    conn.close()
                arrivals[k] += [at] * found
    finally:
        gc.enable()
        for left in socks:
            left.close()
        selector.close()
    wall = time.perf_counter() - began
    cpu = proxy.cpu() - cpu_before if proxy is not None else 0.0
    lateness: list[float] = []
    for times in arrivals:
        offsets = [t - i * interval for i, t in enumerate(times)]
        if offsets:
            least = min(offsets)
            lateness += [o - least for o in offsets]
    return StreamTurn(lateness, sum(len(t) for t in arrivals), cpu, wall, done)


def streaming(args: argparse.Namespace) -> str:
    """The streaming arm: ``--streams`` open streams at ``--stream-interval`` through the router, to
    the stand-in directly and through vllm-router, in alternated turns."""
    interval = args.stream_interval
    tokens = max(2, min(512, round(args.stream_seconds / interval)))
    command, said = vllm_router() if args.peer else (None, "vllm-router not asked for (--no-peer)")
    load_start = os.getloadavg()
    turns: dict[str, list[StreamTurn]] = {}
    with tempfile.TemporaryDirectory(prefix="lorafleet-serve-streams-") as tmp:
        root = Path(tmp)
        adapter = root / "adapters" / "a0"
        adapter.mkdir(parents=True)
        (adapter / "adapter_config.json").write_text('{"r": 8}')
        (adapter / "adapter_model.safetensors").write_bytes(b"\0" * 64)
        options = f"max_num_seqs={args.streams * 2}, stream_interval={interval!r}"
        with standin(options, collect=False) as upstream, contextlib.ExitStack() as stack:
            router_command = [
                *(sys.executable, "-m", "lorafleet_serve", "--port", "0", "--runtime", args.runtime),
                *("--replica", f"id=r0,url={upstream},model=tiny,limit=4"),
                *("--adapters-root", str(root / "adapters"), "--log-level", "INFO"),
            ]
            router = stack.enter_context(started(router_command, root / "router.log"))
            proxies: dict[str, Process | None] = {"direct": None, "router": router}
            urls = {"direct": upstream, "router": router.url}
            stream_turn(urls["router"], 1, 0.001, 2, None)  # loads a0 on the stand-in
            if args.baseline is not None:
                base_command = [str(args.baseline), *router_command[1:]]
                base = stack.enter_context(started(base_command, root / "baseline.log"))
                proxies["baseline"], urls["baseline"] = base, base.url
            if command is not None:
                peer_process = stack.enter_context(peer(command, upstream, root / "peer.log"))
                proxies["vllm-router"], urls["vllm-router"] = peer_process, peer_process.url
            names = list(proxies)
            for i in range(args.rounds):
                for name in names if i % 2 == 0 else reversed(names):
                    turn = stream_turn(urls[name], args.streams, interval, tokens, proxies[name])
                    turns.setdefault(name, []).append(turn)
    load_end = os.getloadavg()
    command_line = shlex.join([".venv/bin/python", "bench/serve_bench.py", *args.argv])
    lines = [
        f"Written by `{command_line}` on {datetime.date.today().isoformat()}: {platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, {args.runtime}; load average "
        f"{' / '.join(f'{x:.2f}' for x in load_start)} at the start, "
        f"{' / '.join(f'{x:.2f}' for x in load_end)} at the end. {said}.",
        "",
        f"{args.streams} streams a turn, each of {tokens} chunks {interval * 1000:g} ms apart (the "
        f"stand-in's schedule), their starts spread over {interval * 1000:g} ms; each way in turn, "
        f"{args.rounds} rounds, the first swapped every round. Lateness: when a chunk came, less its "
        "step, less its stream's least; pooled over the rounds. Added: the proxy's less the direct "
        "path's, round by round, median.",
        "",
        "| path | chunks/s | lateness p50 (ms) | p99 (ms) | added p50 (ms) | added p99 (ms) "
        "| its process busy | chunks per CPU second |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    if args.baseline is not None:
        lines[0] += f" Baseline: the router {args.baseline} runs, on the same stand-in."
    for name in names:
        pooled = [x for turn in turns[name] for x in turn.lateness]
        rate = statistics.median(t.chunks / t.wall for t in turns[name])
        added = {
            share: statistics.median(
                percentile(t.lateness, share) - percentile(d.lateness, share)
                for t, d in zip(turns[name], turns["direct"], strict=True)
            )
            for share in (0.5, 0.99)
        }
        if name == "direct":
            busy, per_core, extra = "", "", "| | "
        else:
            busy = f"{statistics.median(t.cpu / t.wall for t in turns[name]):.0%}"
            per_core = f"{statistics.median(t.chunks / t.cpu for t in turns[name] if t.cpu):.0f}"
            extra = f"| {added[0.5] * 1000:.2f} | {added[0.99] * 1000:.2f} "
        lines.append(
            f"| {name} | {rate:.0f} | {percentile(pooled, 0.5) * 1000:.2f} | "
            f"{percentile(pooled, 0.99) * 1000:.2f} {extra}| {busy} | {per_core} |"
        )
    ended = {name: sum(t.streams for t in turns[name]) for name in names}
    lines += ["", f"Streams that ended with [DONE], of {args.streams * args.rounds} a path: {ended}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench/serve_bench.py", description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", choices=["asyncio", "trio"], default="asyncio")
    parser.add_argument("--runs", type=int, default=1, help="runs, each with fresh processes (default 1)")
    parser.add_argument("--rounds", type=int, default=12, help="rounds per run (default 12)")
    parser.add_argument("--requests", type=int, default=100, help="requests per latency batch (default 100)")
    parser.add_argument(
        "--seconds", type=float, default=0.5, help="seconds per throughput batch (default 0.5)"
    )
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument(
        "--interleave",
        choices=["slice", "batch"],
        default="slice",
        help="the proxies take turns --slices times a round (default), or once: a batch each",
    )
    parser.add_argument(
        "--slices",
        type=int,
        default=5,
        help="throughput: turns per proxy per round with --interleave request",
    )
    parser.add_argument(
        "--py-spy",
        type=Path,
        metavar="PREFIX",
        help="sample both proxies with py-spy, to PREFIX.{bare,router}.RUN.txt (needs py-spy in the venv)",
    )
    parser.add_argument("--out", type=Path, default=HERE / "serve_results.md")
    parser.add_argument(
        "--sweep",
        metavar="N,N,...",
        help="instead: the router, the bare proxy and vllm-router at each number of connections "
        "(e.g. 1,8,128), CPU per request and ratios; prints, writes nothing",
    )
    parser.add_argument(
        "--streams",
        type=int,
        metavar="N",
        help="instead: N open streams a turn (up to 1,000 or so) through the router, directly and "
        "through vllm-router: chunks per CPU second and the delay added between chunks; prints",
    )
    parser.add_argument("--stream-interval", type=float, default=0.5, help="seconds between chunks (0.5)")
    parser.add_argument("--stream-seconds", type=float, default=10.0, help="seconds a stream lasts (10)")
    parser.add_argument("--no-peer", dest="peer", action="store_false", help="--sweep without vllm-router")
    parser.add_argument(
        "--no-bare", dest="bare_arm", action="store_false", help="--sweep without the bare proxy"
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="PYTHON",
        help="--sweep, --streams: also another checkout's router (that venv's python), in alternated turns",
    )
    parser.add_argument(
        "--headers",
        choices=sorted(HEADERS),
        default="plain",
        help="the client's headers: Host, Content-Type and Content-Length (plain), or the openai client's",
    )
    parser.add_argument("--bare", metavar="UPSTREAM", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    Connection.headers = HEADERS[args.headers]
    if args.bare:
        bare_proxy(args.bare, args.runtime)
        return 0
    args.argv = argv
    if args.sweep:
        print(sweep(args), end="")
        return 0
    if args.streams:
        print(streaming(args), end="")
        return 0
    started_at = time.monotonic()
    load_start = os.getloadavg()
    runs = []
    for i in range(1, args.runs + 1):
        runs.append(measure(args, i))
        print(summary(runs[-1], i), flush=True)
    text = report(args, runs, (load_start, os.getloadavg()))
    args.out.write_text(text)
    print(text)
    print(f"({time.monotonic() - started_at:.1f} s; written to {args.out})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

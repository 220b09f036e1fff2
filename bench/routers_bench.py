"""Several ``lorafleet serve`` processes in front of the same stand-ins, against one (issue 33).

    .venv/bin/python bench/routers_bench.py [--routers 3] [--requests 5000] [--runs 3] [--out FILE]

Stand-in vLLM replicas run in this process, each with the memory of ``--memory`` adapters (its
``--max-cpu-loras`` and ``--max-loras``), a load that takes ``--load-ms`` and a completion that
takes ``--token-ms`` a token. Each router is its own ``lorafleet serve`` process with the shipped
defaults, its replicas given as ``--replica ...,limit=<memory>`` as docs/vllm.md has it. A client
in this process sends a Zipf stream over more adapters than fit, ``--concurrency`` at a time, each
request to one of the live routers drawn at random.

Each run sends the same stream twice, on stand-ins restarted empty: through one router, then through
``--routers`` routers, of which the first is killed (SIGKILL) when half the stream is sent and
started again ``--down`` seconds later. A request whose router is gone (refused, or cut by the kill)
is sent to another live router, as a Service in front of the routers would: counted as "moved", not
failed. Failed: any answer but a 200. Loads: every load the stand-ins were asked for, plus every
adapter they read back from disk after their memory dropped it while registered (vLLM does not
free memory on unload: SPEC.md §3.16). Engine GETs/s: the routers' listings (``/v1/models``) and
reads (``/metrics``) of each stand-in, per second of the run, what they cost an engine's API server.

Targets (issue 33): 0 failed requests; loads within 1.1x one router's.
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import json
import os
import platform
import queue
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import attrs

from lorafleet_standin import StandInServer, VllmStandIn, make_adapters

HERE = Path(__file__).resolve().parent
LOADS_TARGET = 1.1


@attrs.define
class Router:
    """One ``lorafleet serve`` process and the URL it said it is ready on."""

    proc: subprocess.Popen[str]
    url: str
    log: list[str]

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(20)


def start_router(
    replicas: list[str], root: Path, routers: int | None, extra: list[str], port: int = 0
) -> Router:
    """A ``lorafleet serve`` process on ``port`` (0: a free one) of 127.0.0.1, once it says it is ready."""
    argv = [sys.executable, "-m", "lorafleet_serve", "--adapters-root", str(root), "--port", str(port)]
    argv += extra
    for spec in replicas:
        argv += ["--replica", spec]
    if routers is not None:
        argv += ["--routers", str(routers)]
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    log: list[str] = []
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            log.append(line)
            lines.put(line)
        lines.put("")

    threading.Thread(target=read, daemon=True).start()
    while True:
        line = lines.get(timeout=60)
        if not line:
            raise SystemExit("lorafleet serve ended before it was ready:\n" + "".join(log))
        if "ready on " in line:
            return Router(proc, line.split("ready on ")[1].split()[0], log)


@attrs.define
class Live:
    """The routers a client may send to now; the kill takes one out and the restart puts it back."""

    urls: list[str]
    lock: threading.Lock = attrs.field(factory=threading.Lock)

    def pick(self, rng: random.Random, avoid: str | None) -> str:
        with self.lock:
            choices = [u for u in self.urls if u != avoid] or list(self.urls)
        return rng.choice(choices)

    def remove(self, url: str) -> None:
        with self.lock:
            if url in self.urls and len(self.urls) > 1:
                self.urls.remove(url)

    def add(self, url: str) -> None:
        with self.lock:
            self.urls.append(url)


@attrs.define
class Result:
    """One arm's run of the stream."""

    ok: int = 0
    failed: int = 0
    moved: int = 0
    latencies: list[float] = attrs.field(factory=list)
    statuses: dict[int, int] = attrs.field(factory=dict)
    loads: int = 0
    rereads: int = 0
    drops: int = 0
    retries: dict[str, int] = attrs.field(factory=dict)
    engine_gets: int = 0
    """The routers' listings (``/v1/models``) and reads (``/metrics``) of the stand-ins."""
    seconds: float = 0.0

    @property
    def disk(self) -> int:
        return self.loads + self.rereads

    @property
    def gets_per_second(self) -> float:
        """Listings and reads per stand-in per second: what the routers cost each engine's API server."""
        return self.engine_gets / max(self.seconds, 1e-9)


def send_stream(
    live: Live, stream: list[str], concurrency: int, seed: int, halfway: threading.Event
) -> Result:
    """Send each adapter's completion to a live router, ``concurrency`` at a time."""
    result = Result()
    jobs: queue.Queue[tuple[int, str] | None] = queue.Queue()
    for item in enumerate(stream):
        jobs.put(item)
    for _ in range(concurrency):
        jobs.put(None)
    lock = threading.Lock()
    half = len(stream) // 2

    def worker(w: int) -> None:
        rng = random.Random(seed * 1000 + w)
        connections: dict[str, http.client.HTTPConnection] = {}
        while (job := jobs.get()) is not None:
            index, adapter = job
            if index == half:
                halfway.set()
            body = json.dumps({"model": adapter, "prompt": "hello", "max_tokens": 4})
            avoid = None
            started = time.perf_counter()
            while True:
                url = live.pick(rng, avoid)
                conn = connections.get(url)
                if conn is None:
                    conn = connections[url] = connect(url, 120)
                try:
                    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
                    answer = conn.getresponse()
                    answer.read()
                    status = answer.status
                except (OSError, http.client.HTTPException):
                    conn.close()
                    del connections[url]
                    with lock:
                        result.moved += 1
                    avoid = url
                    continue
                break
            with lock:
                result.latencies.append((time.perf_counter() - started) * 1000)
                result.statuses[status] = result.statuses.get(status, 0) + 1
                if status == 200:
                    result.ok += 1
                else:
                    result.failed += 1
        for conn in connections.values():
            conn.close()

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return result


def connect(url: str, timeout: float) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    return http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)


def retries_of(url: str) -> dict[str, int]:
    """``lorafleet_serve_retries_total`` by reason, from a router's /metrics."""
    conn = connect(url, 10)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    out: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith("lorafleet_serve_retries_total{"):
            reason = line.split('reason="')[1].split('"')[0]
            out[reason] = out.get(reason, 0) + int(float(line.rsplit(" ", 1)[1]))
    return out


def run_arm(
    args: argparse.Namespace,
    servers: list[StandInServer],
    root: Path,
    stream: list[str],
    routers: int,
    seed: int,
    kill: bool,
) -> Result:
    """The stream through ``routers`` routers on stand-ins restarted empty; with ``kill``, the first
    router is killed halfway and started again ``--down`` seconds later."""
    for server in servers:
        server.app.restart()
    loads_before = [len(s.app.calls_to("load")) for s in servers]
    gets_before = sum(engine_gets(s) for s in servers)
    memory_before = [s.app.memory() for s in servers]
    specs = [f"id=replica-{i},url={s.url},model=tiny,limit={args.memory}" for i, s in enumerate(servers)]
    told = args.told and routers > 1
    extra = list(args.serve)
    ports = [0] * routers
    if args.peers and routers > 1:
        # Each router is told them all; a restarted one comes back on its port, as a pod behind the
        # same name would.
        ports = free_ports(routers)
        extra += [f"--peer=http://127.0.0.1:{port}" for port in ports]
    running = [start_router(specs, root, routers if told else None, extra, port) for port in ports]
    live = Live([r.url for r in running])
    halfway = threading.Event()
    retries: dict[str, int] = {}

    def killer() -> None:
        halfway.wait()
        victim = running[0]
        live.remove(victim.url)
        victim.stop(signal.SIGKILL)
        time.sleep(args.down)  # the router is down this long, as a pod restarting is
        again = start_router(specs, root, routers if told else None, extra, ports[0])
        running.append(again)
        live.add(again.url)

    side = threading.Thread(target=killer, daemon=True) if kill and routers > 1 else None
    if side is not None:
        side.start()
    try:
        started = time.monotonic()
        result = send_stream(live, stream, args.concurrency, seed, halfway)
        result.seconds = time.monotonic() - started
        if side is not None:
            side.join(120)
        for router in running:
            if router.proc.poll() is None:
                for reason, n in retries_of(router.url).items():
                    retries[reason] = retries.get(reason, 0) + n
    finally:
        for router in running:
            router.stop()
    result.retries = retries
    result.loads = sum(len(s.app.calls_to("load")) - b for s, b in zip(servers, loads_before, strict=True))
    result.engine_gets = (sum(engine_gets(s) for s in servers) - gets_before) // len(servers)
    after = [s.app.memory() for s in servers]
    result.rereads = sum(a.rereads - b.rereads for a, b in zip(after, memory_before, strict=True))
    result.drops = sum(a.drops - b.drops for a, b in zip(after, memory_before, strict=True))
    return result


def engine_gets(server: StandInServer) -> int:
    return len(server.app.calls_to("models")) + len(server.app.calls_to("metrics"))


def free_ports(count: int) -> list[int]:
    """``count`` ports of 127.0.0.1 free now (a router's own listens with SO_REUSEADDR)."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def stream_for(adapters: int, skew: float, requests: int, seed: int) -> list[str]:
    """The adapters of ``requests`` requests, Zipf(``skew``) over ``adapters``: the same for a seed."""
    rng = random.Random(seed)
    weights = [1 / (k + 1) ** skew for k in range(adapters)]
    return [f"adapter-{k:03d}" for k in rng.choices(range(adapters), weights=weights, k=requests)]


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/routers_bench.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--routers", type=int, default=3)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--memory", type=int, default=8, help="adapters each engine keeps (default 8)")
    parser.add_argument("--adapters", type=int, default=60)
    parser.add_argument("--skew", type=float, default=1.0)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=12)
    parser.add_argument("--load-ms", type=float, default=20.0)
    parser.add_argument("--token-ms", type=float, default=25.0)
    parser.add_argument("--down", type=float, default=2.0, help="seconds the killed router stays down")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--told", action="store_true", help="start each router with --routers R ([share])")
    parser.add_argument("--no-kill", action="store_true")
    parser.add_argument(
        "--peers",
        action="store_true",
        help="tell each router the others (--peer): the one up the longest decides, the others relay",
    )
    parser.add_argument(
        "--serve", action="append", default=[], metavar="FLAG", help="a flag for every router (repeat)"
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    started = time.time()
    rows: list[tuple[int, Result, Result]] = []
    with tempfile.TemporaryDirectory(prefix="lorafleet-routers-") as tmp:
        root = Path(tmp)
        make_adapters(root, [f"adapter-{i:03d}" for i in range(args.adapters)])
        servers = [
            StandInServer(
                VllmStandIn(
                    model="tiny",
                    max_loras=args.memory,
                    max_cpu_loras=args.memory,
                    max_num_seqs=8,
                    load_seconds=args.load_ms / 1000,
                    token_seconds=args.token_ms / 1000,
                )
            ).start()
            for _ in range(args.replicas)
        ]
        try:
            for run in range(args.runs):
                seed = args.seed + run
                stream = stream_for(args.adapters, args.skew, args.requests, seed)
                one = run_arm(args, servers, root, stream, 1, seed, kill=False)
                many = run_arm(args, servers, root, stream, args.routers, seed, kill=not args.no_kill)
                rows.append((seed, one, many))
                print(
                    f"seed {seed}: loads {one.disk} -> {many.disk} ({many.disk / max(one.disk, 1):.2f}x), "
                    f"failed {one.failed} / {many.failed}, moved {many.moved}, retries {many.retries}",
                    file=sys.stderr,
                )
        finally:
            for server in servers:
                server.stop()
    lines = report(args, rows, time.time() - started)
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.out is not None:
        args.out.write_text(text)
    return 0


def report(args: argparse.Namespace, rows: list[tuple[int, Result, Result]], seconds: float) -> list[str]:
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    command = "bench/routers_bench.py " + " ".join(sys.argv[1:])
    out = [
        f"# {args.routers} routers against one ({when})",
        "",
        f"`{command}`: {args.replicas} stand-ins keeping {args.memory} adapters each, "
        f"Zipf({args.skew:g}) over {args.adapters} adapters, {args.requests} requests "
        f"{args.concurrency} at a time, loads of {args.load_ms:g} ms, {args.token_ms:g} ms a token; "
        + (
            "no router killed"
            if args.no_kill
            else f"the first router killed halfway and down {args.down:g} s"
        )
        + (
            f"; each router told `--routers {args.routers}`"
            if args.told
            else "; every router at its defaults"
        )
        + ("; each told the others (`--peer`)" if args.peers else "")
        + f". {platform.processor() or platform.machine()}, load average {load}, {seconds:.0f} s.",
        "",
        "| seed | arm | failed | moved | loads + re-reads | x one | drops | mean ms | p99 ms | retries "
        "| engine GETs/s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for seed, one, many in rows:
        for name, r in (("1 router", one), (f"{args.routers} routers", many)):
            retried = ", ".join(f"{k} {v}" for k, v in sorted(r.retries.items()) if v) or "none"
            out.append(
                f"| {seed} | {name} | {r.failed} | {r.moved} | {r.loads} + {r.rereads} | "
                f"{r.disk / max(one.disk, 1):.2f} | {r.drops} | {statistics.fmean(r.latencies):.1f} | "
                f"{percentile(r.latencies, 0.99):.1f} | {retried} | {r.gets_per_second:.2f} |"
            )
    ratios = [many.disk / max(one.disk, 1) for _, one, many in rows]
    failed = sum(many.failed for _, _, many in rows)
    out += [
        "",
        f"Loads, {args.routers} routers over one: median {statistics.median(ratios):.2f}x "
        f"(target {LOADS_TARGET}x: {'met' if statistics.median(ratios) <= LOADS_TARGET else 'missed'}); "
        f"failed requests {failed} (target 0: {'met' if failed == 0 else 'missed'}).",
    ]
    return out


if __name__ == "__main__":
    sys.exit(main())

"""lorafleet's router against holders-first and least-loaded ones, in front of stand-in vLLM replicas.

Requests for many adapters, skewed as real traffic is (Zipf), go over HTTP through lorafleet's
reference router (``lorafleet serve``), which sends each to a replica that holds its adapter or
loads it where that costs least. Then the same stream, on the same replicas restarted empty, goes
through two routers written here for the comparison, each holding the adapter where it chose
through lorafleet's own ``Fleet``, built as lorafleet's router builds it: holders-first (the
replica holding the adapter with the fewest requests in flight, else the one with a free slot and
the fewest, else the one with the fewest: what the peers ship) and least-loaded (the replica with
the fewest requests in flight: a router that knows nothing of adapters). The loads, evictions and
cap are the same code on every side, and only placement differs, with each router's own work per
request. The summary says what lorafleet saved: the loads, which carry over to real replicas, and
the latency they add, which does too but for each router's own work; then request latency and
requests per second, which time this machine only.
"""

# The demo lives beside the stand-in, on the testing side, so that a router's install of the core
# and a shell carries no test server. It uses the public APIs of the router, the fleet and the
# stand-in only.

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import logging
import math
import random
import socket
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from importlib import import_module
from pathlib import Path
from typing import Any, TextIO

import anyio
import attrs
import httpx
import sniffio

from lorafleet import How
from lorafleet_fleet import HEADROOM, Fleet, FleetError, Lease, Replica
from lorafleet_serve import Config, ReplicaConfig, RouterServer
from lorafleet_standin import StandInServer, VllmStandIn, make_adapters

from ._asgi import Receive, Scope, Send, lifespan, read_body

PROG = "lorafleet demo"
ROWS = 16
"""The most replicas the table shows one row each; past it, the first ``FIRST`` and one line for the rest."""
FIRST = 10
PROGRESS_EVERY = 2.0
"""Seconds between progress lines when stderr is not a terminal."""
LORAFLEET = "lorafleet"
HOLDERS = "holders-first"
BASELINE = "least-loaded"


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _finite_not_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number, 0 or more, not {text}")
    return value


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def parse(argv: list[str]) -> argparse.Namespace:
    """The demo's command line; exits with its own usage on a bad flag, as argparse does."""
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add("--replicas", metavar="N", type=_at_least_one, default=3, help="stand-in vLLM replicas (default 3)")
    add("--limit", metavar="N", type=_at_least_one, default=4, help="adapters a replica may hold (default 4)")
    add("--adapters", metavar="N", type=_at_least_one, default=40, help="distinct adapters (default 40)")
    add(
        "--requests",
        metavar="N",
        type=_at_least_one,
        default=1000,
        help="requests to send through each router (default 1000)",
    )
    add(
        "--skew",
        metavar="ALPHA",
        type=_finite_not_negative,
        default=1.1,
        help="Zipf exponent of adapter popularity, 0 for uniform (default 1.1)",
    )
    add(
        "--concurrency",
        metavar="N",
        type=_at_least_one,
        default=32,
        help="requests in flight at once (default 32)",
    )
    add(
        "--load-ms",
        metavar="MS",
        type=_finite_not_negative,
        default=100.0,
        help="how long a stand-in takes to load an adapter, in ms (default 100; a real one takes from "
        "about that, for a small adapter on a local disk, to seconds)",
    )
    default_runtime = "trio" if _installed("trio") else "asyncio"
    add(
        "--runtime",
        choices=["trio", "asyncio"],
        default=default_runtime,
        help="the event loop the routers run on (default trio, or asyncio when trio is not installed)",
    )
    add(
        "--seed",
        metavar="N",
        type=int,
        default=1,
        help="seed of the request stream (default 1): it fixes which adapters are asked for and in what "
        "order, not the timing of a run over real HTTP, so the counts still vary from run to run",
    )
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    """Run ``lorafleet demo`` with the flags after ``demo``; returns the exit status."""
    args = parse(argv)
    try:
        import_module(args.runtime)  # ModuleNotFoundError names what to install
    except ModuleNotFoundError as exc:
        sys.stderr.write(
            f"{PROG} --runtime {args.runtime} needs {exc.name}: pip install 'lorafleet[{args.runtime}]'\n"
        )
        return 2
    stream = stream_of(args)
    try:
        with standins(args) as (root, servers, replicas):
            routers: list[tuple[str, _Serving]] = [
                (LORAFLEET, lorafleet_router),
                (HOLDERS, holders_first_router),
                (BASELINE, least_loaded_router),
            ]
            # A short stream through each first, thrown away: whichever ran first would otherwise pay
            # for the process's first imports, connections and code paths alone.
            warm_up = stream[: min(len(stream), 4 * args.concurrency)]
            for _, serving in routers:
                run_stream(
                    args, serving, replicas, servers, root, warm_up, Progress(len(warm_up), io.StringIO())
                )
            runs = {
                name: run_stream(
                    args,
                    serving,
                    replicas,
                    servers,
                    root,
                    stream,
                    Progress(args.requests, sys.stderr, label=f"{name} router"),
                )
                for name, serving in routers
            }
    except KeyboardInterrupt:
        sys.stderr.write(f"\n{PROG}: interrupted\n")
        return 130
    report = Report([r.id for r in replicas])
    report.add(runs[LORAFLEET])
    report.print(args, sys.stdout)
    baselines = {name: runs[name] for name in (HOLDERS, BASELINE)}
    sys.stdout.write("\n" + "\n".join(comparison(runs[LORAFLEET], baselines, args.concurrency)) + "\n")
    return 0


def stream_of(args: argparse.Namespace) -> list[str]:
    """The demo's request stream: an adapter name per request, Zipf-skewed, fixed by ``--seed``."""
    rng = random.Random(args.seed)
    weights = [1 / (k + 1) ** args.skew for k in range(args.adapters)]
    return [f"adapter-{k:03d}" for k in rng.choices(range(args.adapters), weights=weights, k=args.requests)]


@contextlib.contextmanager
def standins(
    args: argparse.Namespace,
) -> Iterator[tuple[Path, list[StandInServer], list[ReplicaConfig]]]:
    """The demo's adapter folders and stand-in replicas, as its flags say, until the block ends."""
    with tempfile.TemporaryDirectory(prefix="lorafleet-demo-") as tmp:
        root = Path(tmp)
        make_adapters(root, [f"adapter-{i:03d}" for i in range(args.adapters)])
        servers: list[StandInServer] = []
        try:
            for _ in range(args.replicas):
                # Engines started as docs/vllm.md has it: --max-loras and --max-cpu-loras the limit.
                engine = VllmStandIn(model="tiny", max_loras=args.limit, max_cpu_loras=args.limit)
                servers.append(StandInServer(engine).start())
            for server in servers:
                server.app.delay("load", args.load_ms / 1000, times=None)
            yield (
                root,
                servers,
                [
                    ReplicaConfig(id=f"replica-{i}", url=s.url, model="tiny", limit=args.limit)
                    for i, s in enumerate(servers)
                ],
            )
        finally:
            for server in servers:
                server.stop()


def run_stream(
    args: argparse.Namespace,
    serving: _Serving,
    replicas: list[ReplicaConfig],
    servers: list[StandInServer],
    root: Path,
    stream: list[str],
    progress: Progress,
) -> Run:
    """``stream`` through the router ``serving`` makes, in front of ``servers`` restarted empty."""
    for server in servers:
        server.app.restart()  # every run starts from replicas that hold nothing
    calls = [_lora_calls(s) for s in servers]
    memory = [s.app.memory() for s in servers]

    async def drive() -> Run:
        async with serving(replicas, root) as router:
            return await send_stream(router.url, stream, args.concurrency, progress)

    run: Run = anyio.run(drive, backend=args.runtime)
    for replica, server, before in zip(replicas, servers, calls, strict=True):
        loads, unloads = _lora_calls(server)
        run.loads[replica.id] = loads - before[0]
        run.evictions[replica.id] = unloads - before[1]
    after = [s.app.memory() for s in servers]
    run.drops = sum(a.drops - b.drops for a, b in zip(after, memory, strict=True))
    run.rereads = sum(a.rereads - b.rereads for a, b in zip(after, memory, strict=True))
    return run


def _lora_calls(server: StandInServer) -> tuple[int, int]:
    """How many loads and unloads ``server`` has been asked for so far."""
    return len(server.app.calls_to("load")), len(server.app.calls_to("unload"))


# -- the two routers ------------------------------------------------------------------------------

_Serving = Callable[[list[ReplicaConfig], Path], Any]
"""A router on a free port, as an async context manager that gives it: anything with its ``url``."""


@asynccontextmanager
async def lorafleet_router(replicas: list[ReplicaConfig], root: Path) -> AsyncIterator[RouterServer]:
    """lorafleet's reference router, as ``lorafleet serve`` runs it, on a free port."""
    config = Config(replicas=tuple(replicas), adapter_root=root, port=0, shutdown_timeout=1.0)
    async with RouterServer(config) as server:
        yield server


@asynccontextmanager
async def least_loaded_router(replicas: list[ReplicaConfig], root: Path) -> AsyncIterator[PlacingProxy]:
    """The demo's least-loaded proxy on a free port, with the ``Fleet`` it holds its adapters through."""
    async with _placing_router(replicas, root, holders_first=False) as proxy:
        yield proxy


@asynccontextmanager
async def holders_first_router(replicas: list[ReplicaConfig], root: Path) -> AsyncIterator[PlacingProxy]:
    """The demo's holders-first proxy on a free port, with the ``Fleet`` it holds its adapters through."""
    async with _placing_router(replicas, root, holders_first=True) as proxy:
        yield proxy


@asynccontextmanager
async def placing_router(replicas: list[ReplicaConfig], root: Path) -> AsyncIterator[PlacingProxy]:
    """The demo's proxy placing as the fleet does (``Fleet.route``, lorafleet's placement), on a free
    port, for ``bench/demo_arms.py`` to run beside lorafleet's router."""
    async with _placing_router(replicas, root, own=True) as proxy:
        yield proxy


@asynccontextmanager
async def _placing_router(
    replicas: list[ReplicaConfig], root: Path, *, holders_first: bool = False, own: bool = False
) -> AsyncIterator[PlacingProxy]:
    """A comparison proxy on a free port. Its fleet is built as ``lorafleet serve`` builds its own,
    with the defaults (``FLEET_DEFAULTS``), and it forwards with a client per replica, as lorafleet's
    router does."""
    async with contextlib.AsyncExitStack() as stack:
        served = [Replica(r.id, r.url, model=r.model, limit=r.resolved_limit) for r in replicas]
        fleet = await stack.enter_async_context(Fleet(replicas=served))
        clients = {
            r.id: await stack.enter_async_context(
                httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=1000))
            )
            for r in replicas
        }
        proxy = PlacingProxy(fleet, served, root, clients, holders_first=holders_first, own=own)
        proxy.url = await stack.enter_async_context(_served(proxy))
        yield proxy


class PlacingProxy:
    """The demo's comparisons, not part of lorafleet: lorafleet's fleet behind another placement.

    Each completion goes to the replica with the fewest requests in flight through this proxy (ties
    in turn), as a router that knows nothing of adapters sends it; with ``holders_first``, to the
    replica among those holding (or loading) its adapter with the fewest, else among those with a
    free slot, else among all (the fleet's ``view``): what the peers' routers do. The proxy then
    holds the adapter there with ``Fleet.acquire``. Loading, shared loads, eviction and the cap are
    the fleet's, the same code and settings as lorafleet's router's, so the difference it shows is
    placement's. It serves ``POST /v1/completions`` and ``/v1/chat/completions`` and says, as
    lorafleet's router does, which replica served (``x-lorafleet-replica``), how the adapter was there
    (``x-lorafleet-how``) and how long the request waited for it (``server-timing: adapter;dur=<ms>``).

    Args:
        fleet: the entered fleet, which knows ``replicas``.
        replicas: where requests go.
        root: the folder with one folder per adapter.
        clients: the client that forwards to each replica, by replica id.
        holders_first: prefer the replicas that hold the adapter, then those with room.
        own: place as the fleet does (``Fleet.route``), as lorafleet's router does: lorafleet's
            placement behind this proxy's own request path, which tells placement from the router's
            own cost (``bench/demo_arms.py``).
    """

    def __init__(
        self,
        fleet: Fleet,
        replicas: list[Replica],
        root: Path,
        clients: dict[str, httpx.AsyncClient],
        *,
        holders_first: bool = False,
        own: bool = False,
    ) -> None:
        self.fleet = fleet
        self._holders_first = holders_first
        self._own = own
        self.url = ""
        """Where it is served, once it is."""
        self._root = root
        self._clients = clients
        self._replicas = replicas
        self._in_flight = [0] * len(replicas)
        """This proxy's requests on each replica that have not ended."""
        self._turn = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        raw = await read_body(receive)
        name = json.loads(raw)["model"]
        path = str(self._root / name)
        if self._own:
            await self._serve(self.fleet.route(name, path=path), scope["path"], raw, send)
            return
        self._turn += 1
        count = len(self._replicas)
        among = list(range(count))
        if self._holders_first:
            view = self.fleet.view(self._replicas, name)
            holders = [i for i in among if self._replicas[i].id in view.holders]
            room = [i for i in among if self._replicas[i].id in view.with_room]
            among = holders or room or among
        i = min(among, key=lambda i: (self._in_flight[i], (i - self._turn) % count))
        self._in_flight[i] += 1
        try:
            await self._serve(self.fleet.acquire(self._replicas[i], name, path), scope["path"], raw, send)
        finally:
            self._in_flight[i] -= 1

    async def _serve(self, leasing: Lease, route: str, raw: bytes, send: Send) -> None:
        """Forward the request to the replica ``leasing`` holds its adapter on, and answer."""
        asked = time.perf_counter()
        try:
            async with leasing as lease:
                waited = (time.perf_counter() - asked) * 1000
                replica = lease.replica
                answer = await self._clients[replica.id].post(
                    replica.url + route, content=raw, headers={"content-type": "application/json"}
                )
                lease.check_answer(answer.status_code, answer.content[:4096])  # as lorafleet's router
        except FleetError as exc:  # the adapter or the replica failed: no lease
            await _answer(send, 502, f"no lease: {exc}".encode(), [])
            return
        headers = [
            (b"content-type", answer.headers.get("content-type", "application/json").encode()),
            (b"x-lorafleet-replica", replica.id.encode()),
            (b"x-lorafleet-how", lease.how.value.encode()),
            (b"server-timing", f"adapter;dur={waited:.1f}".encode()),
        ]
        await _answer(send, answer.status_code, answer.content, headers)


async def _answer(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


HYPERCORN_LOG = logging.getLogger("lorafleet.demo.hypercorn")
HYPERCORN_LOG.setLevel(logging.WARNING)


@asynccontextmanager
async def _served(app: Any) -> AsyncIterator[str]:
    """``app`` served by hypercorn on a free port of 127.0.0.1, as lorafleet's router is."""
    from hypercorn.config import Config as HypercornConfig

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    port = sock.getsockname()[1]
    config = HypercornConfig()
    config.bind = [f"fd://{sock.detach()}"]
    config.accesslog = None
    # Its "Running on ... (CTRL + C to quit)" would land in the middle of the demo's output.
    config.errorlog = HYPERCORN_LOG
    config.graceful_timeout = 1.0
    config.include_server_header = False
    stop = anyio.Event()
    if sniffio.current_async_library() == "trio":
        from hypercorn.trio import serve as serve_trio

        serve: Any = serve_trio
    else:
        from hypercorn.asyncio import serve as serve_asyncio

        serve = serve_asyncio
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(lambda: serve(app, config, shutdown_trigger=stop.wait))
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            stop.set()


# -- the load, and what it saw --------------------------------------------------------------------


@attrs.frozen
class Outcome:
    """One request as the load generator saw it."""

    status: int
    seconds: float
    replica: str | None
    how: str | None
    waited: float | None
    """Milliseconds the router says the request waited for its adapter."""


@attrs.define
class Run:
    """One router's run of the stream."""

    outcomes: list[Outcome]
    elapsed: float
    loads: dict[str, int] = attrs.field(factory=dict)
    """Per replica: loads the stand-in was asked for."""
    evictions: dict[str, int] = attrs.field(factory=dict)
    drops: int = 0
    """Adapters the engines dropped from memory while the router still held them (SPEC.md §3.16)."""
    rereads: int = 0
    """And read back from disk when a completion needed them."""

    @property
    def rate(self) -> float:
        return len(self.outcomes) / self.elapsed if self.elapsed > 0 else math.inf

    def waits(self) -> list[float]:
        """Milliseconds waited, over the requests that waited for a load (their own or joined)."""
        return sorted(
            o.waited for o in self.outcomes if o.how in ("loaded", "joined") and o.waited is not None
        )

    def latencies(self) -> list[float]:
        return sorted(o.seconds * 1000 for o in self.outcomes)


async def send_stream(url: str, stream: list[str], concurrency: int, progress: Progress) -> Run:
    """Send a completion for each adapter of ``stream`` to ``url``, ``concurrency`` at a time."""
    outcomes: list[Outcome] = []
    send, receive = anyio.create_memory_object_stream[str](concurrency)
    async with contextlib.AsyncExitStack() as stack:

        async def worker(client: httpx.AsyncClient) -> None:
            async with receive.clone() as jobs:
                async for adapter in jobs:
                    body = {"model": adapter, "prompt": "hello", "max_tokens": 4}
                    started = time.perf_counter()
                    try:
                        answer = await client.post("/v1/completions", json=body)
                    except httpx.HTTPError:
                        outcomes.append(Outcome(0, time.perf_counter() - started, None, None, None))
                    else:
                        outcomes.append(
                            Outcome(
                                answer.status_code,
                                time.perf_counter() - started,
                                answer.headers.get("x-lorafleet-replica"),
                                answer.headers.get("x-lorafleet-how"),
                                _adapter_wait(answer.headers.get("server-timing")),
                            )
                        )
                    progress.step()

        # A client per worker: httpx looks over every connection of a pool for each request.
        tls = httpx.create_ssl_context()  # one for all: each reads the CA bundle
        clients = [
            await stack.enter_async_context(httpx.AsyncClient(base_url=url, timeout=120, verify=tls))
            for _ in range(concurrency)
        ]
        started = time.perf_counter()
        async with anyio.create_task_group() as tasks:
            for client in clients:
                tasks.start_soon(worker, client)
            async with send:
                for adapter in stream:
                    await send.send(adapter)
            receive.close()
    return Run(outcomes, time.perf_counter() - started)


def _adapter_wait(timing: str | None) -> float | None:
    """The ``dur`` of ``adapter`` in a Server-Timing header, in ms."""
    for metric in (timing or "").split(","):
        name, _, params = metric.strip().partition(";")
        if name == "adapter":
            for param in params.split(";"):
                key, _, value = param.strip().partition("=")
                if key == "dur":
                    try:
                        return float(value)
                    except ValueError:
                        return None
    return None


def percentile(values: list[float], share: float) -> float:
    """The value below which ``share`` of the sorted ``values`` lie (nearest rank); nan when empty."""
    if not values:
        return math.nan
    return values[min(len(values) - 1, int(len(values) * share))]


def comparison(ours: Run, baselines: dict[str, Run], concurrency: int) -> list[str]:
    """What lorafleet saved against each baseline router: first the figures that carry over to real
    replicas, then those that time this machine only, each part with what it measures."""
    names = list(baselines)
    runs = [ours, *baselines.values()]
    carried: list[list[str]] = []
    local: list[list[str]] = []

    def change(a: float, b: float, fewer: str = "fewer", more: str = "more") -> str:
        if b <= 0 or math.isnan(a) or math.isnan(b) or a == b:
            return ""
        return f"{(1 - a / b) * 100:.0f}% {fewer}" if a < b else f"{(a / b - 1) * 100:.0f}% {more}"

    def count(rows: list[list[str]], label: str, values: list[int]) -> None:
        rows.append([label, *map(str, values), *(change(values[0], b) for b in values[1:])])

    def millis(rows: list[list[str]], label: str, values: list[float]) -> None:
        rows.append(
            [label, *(f"{v:.1f}" for v in values), *(change(values[0], b, "less") for b in values[1:])]
        )

    count(carried, "loads", [sum(r.loads.values()) for r in runs])
    count(carried, "evictions", [sum(r.evictions.values()) for r in runs])
    count(carried, "engine drops of adapters held", [r.drops for r in runs])
    count(carried, "requests that waited for a load", [len(r.waits()) for r in runs])
    for share, label in ((0.5, "p50"), (0.99, "p99")):
        # Over the whole stream: each request's wait for its adapter, 0 for a hit.
        millis(
            carried,
            f"latency loads added, {label} (ms)",
            [percentile(sorted(o.waited or 0.0 for o in r.outcomes), share) for r in runs],
        )
    count(carried, "failed requests", [sum(o.status != 200 for o in r.outcomes) for r in runs])
    for share, label in ((0.5, "p50"), (0.99, "p99")):
        millis(local, f"request latency, {label} (ms)", [percentile(r.latencies(), share) for r in runs])
    rates = [r.rate for r in runs]
    gains = [f"{rates[0] / b:.2f}x" if b > 0 and math.isfinite(rates[0]) else "" for b in rates[1:]]
    local.append(["requests/s", *(f"{v:.0f}" for v in rates), *gains])
    width = max(len(r[0]) for r in carried + local)
    columns = len(runs)
    wide = [
        max(len(f"vs {name}"), *(len(row[1 + columns + k]) for row in carried + local))
        for k, name in enumerate(names)
    ]

    def lines(rows: list[list[str]]) -> list[str]:
        return [
            (
                f"{row[0]:<{width}}"
                + "".join(f"  {cell:>13}" for cell in row[1 : 1 + columns])
                + "".join(f"  {cell:<{wide[k]}}" for k, cell in enumerate(row[1 + columns :]))
            ).rstrip()
            for row in rows
        ]

    return [
        f"{'':<{width}}"
        + "".join(f"  {name:>13}" for name in (LORAFLEET, *names))
        + "".join(f"  {'vs ' + name:<{wide[k]}}" for k, name in enumerate(names)).rstrip(),
        *lines(carried),
        "this machine only:",
        *lines(local),
        "",
        "Loads carry over to real replicas, and so does the latency they add, but for each router's own",
        "work: a stand-in answers a completion at once, so an adapter stays in use about as long as a",
        "router takes to pass a request on and take its answer in (bench/demo_arms.py takes the two",
        "apart). Request latency and requests/s time this machine's Python processes (three routers and",
        "the stand-ins sharing its CPUs), not vLLM: a load is only a wait.",
        "",
        "loads, evictions: the load and unload calls the stand-ins answered. engine drops: adapters a",
        "stand-in, keeping --max-cpu-loras adapters in memory as vLLM does, dropped while the router still",
        "held them (it reads them back inside a step). latency loads added: how long",
        "each request waited for its adapter (0 for a hit), as each router timed it. request latency: from",
        f"sending a request to its whole answer, {concurrency} in flight. requests/s: the stream's requests",
        "over its wall time. lorafleet's router runs as `lorafleet serve` does with no settings (its",
        f"defaults: headroom {HEADROOM}, the engines' /metrics read). holders-first sends each request to",
        "the replica holding its adapter with the fewest requests in flight, else to the one with a free",
        "slot and the fewest, else to the one with the fewest; least-loaded to the replica with the fewest.",
        "Both hold the adapter there through a Fleet with the same defaults: the same machine loads, evicts",
        "and caps on every side, and only placement differs. Every router sees the same stream.",
    ]


class Report:
    """The lorafleet router's run, per replica, and how it prints."""

    def __init__(self, replicas: list[str]) -> None:
        self.replicas = replicas
        self.how: dict[str, Counter[str]] = {r: Counter() for r in replicas}
        self.failures: Counter[str] = Counter()
        self.unplaced = 0
        """Requests that failed before a replica was chosen for them."""
        self.waits: list[float] = []
        self.evictions: dict[str, int] = {}
        self.elapsed = 0.0

    def add(self, run: Run) -> None:
        """Count ``run``'s requests, by the replica and the way the router says served them."""
        for outcome in run.outcomes:
            replica = outcome.replica if outcome.replica in self.how else None
            if outcome.status != 200 or outcome.how is None:
                if replica is None:
                    self.unplaced += 1
                else:
                    self.failures[replica] += 1
            elif replica is not None:
                self.how[replica][How(outcome.how)] += 1
        self.waits = [w / 1000 for w in run.waits()]
        self.evictions = dict(run.evictions)
        self.elapsed = run.elapsed

    COLUMNS = ("replica", "requests", "hits", "joins", "loads", "evictions", "failures")

    def row(self, replica: str) -> Counter[str]:
        how = self.how[replica]
        return Counter(
            {
                "requests": sum(how.values()) + self.failures[replica],
                "hits": how[How.HIT],
                "joins": how[How.JOINED],
                "loads": how[How.LOADED],
                "evictions": self.evictions.get(replica, 0),
                "failures": self.failures[replica],
            }
        )

    def table(self) -> list[str]:
        """The table's lines: a row per replica up to ``ROWS`` of them, else the first few and the rest
        summed on one line; then the total."""

        def line(label: str, row: Counter[str]) -> str:
            return f"{label:>11}" + "".join(f"{row[c]:>11}" for c in self.COLUMNS[1:])

        lines = ["".join(f"{c:>11}" for c in self.COLUMNS)]
        shown = self.replicas if len(self.replicas) <= ROWS else self.replicas[:FIRST]
        total: Counter[str] = Counter()
        for replica in shown:
            row = self.row(replica)
            total.update(row)
            lines.append(line(replica, row))
        rest = self.replicas[len(shown) :]
        if rest:
            summed: Counter[str] = Counter()
            for replica in rest:
                summed.update(self.row(replica))
            total.update(summed)
            lines.append(line(f"{len(rest)} more", summed))
        total.update({"requests": self.unplaced, "failures": self.unplaced})
        lines.append(line("all", total))
        return lines

    def print(self, args: argparse.Namespace, out: TextIO) -> None:
        requests = sum(self.row(r)["requests"] for r in self.replicas) + self.unplaced
        rate = requests / self.elapsed if self.elapsed > 0 else math.inf
        out.write(
            f"\n{requests} requests for {args.adapters} adapters (Zipf {args.skew}) on {args.replicas} "
            f"replicas of limit {args.limit}, {args.concurrency} in flight, over HTTP through "
            f"lorafleet's router ({args.runtime}): {self.elapsed:.2f} s ({rate:.0f} requests/s)\n\n"
        )
        out.write("\n".join(self.table()) + "\n")
        if self.waits:
            waits = sorted(self.waits)
            p50 = waits[len(waits) // 2] * 1000
            p99 = waits[min(len(waits) - 1, int(len(waits) * 0.99))] * 1000
            out.write(
                f"\nthe {len(waits)} requests that waited for a load: "
                f"wait p50 {p50:.1f} ms, p99 {p99:.1f} ms\n"
            )


class Progress:
    """How far a run is, on ``out``: a bar redrawn in place on a terminal, else a line every
    ``every`` seconds (a log or a pipe would get one endless line of redraws).

    Args:
        total: how many requests there are.
        out: where to write (stderr, so the summary on stdout stays clean).
        label: which run this is.
        clock: monotonic seconds.
        every: seconds between lines when ``out`` is not a terminal.
    """

    def __init__(
        self,
        total: int,
        out: TextIO,
        *,
        label: str = "",
        clock: Callable[[], float] = time.monotonic,
        every: float = PROGRESS_EVERY,
    ) -> None:
        self.total = total
        self.out = out
        self.label = label
        self.clock = clock
        self.every = every
        self.terminal = out.isatty()
        self.done = 0
        self._last = clock()

    def step(self) -> None:
        """One more request is done."""
        self.done += 1
        if self.terminal:
            if self.done % 50 == 0 or self.done == self.total:
                filled = 40 * self.done // self.total
                label = f"{self.label:<22}" if self.label else ""
                self.out.write(f"\r{label}[{'#' * filled}{'.' * (40 - filled)}] {self.done}/{self.total}")
                self.out.flush()
                if self.done == self.total:
                    self.out.write("\n")
            return
        now = self.clock()
        if now - self._last >= self.every or self.done == self.total:
            self._last = now
            label = f" {self.label}:" if self.label else ""
            self.out.write(f"{PROG}:{label} {self.done}/{self.total} requests done\n")
            self.out.flush()

"""A router on lorafleet, against stand-in vLLM replicas on 127.0.0.1.

Requests for many adapters, skewed as real traffic is (Zipf), go through one of the shells: each
acquires its adapter on a replica the scheduler picks from fleet.view, then is forwarded to that
replica as a completion. The summary says what it cost: hits, joins, loads, evictions, and the latency
that loads added to the requests that waited for them.
"""

# The demo lives beside the stand-in, on the testing side, so that a router's install of the core
# and a shell carries no test server. It uses the shell's public API only.

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from importlib import import_module
from pathlib import Path
from typing import Any, TextIO

import anyio
import httpx

from lorafleet import How
from lorafleet_fleet import Fleet, LoadError, Replica
from lorafleet_standin import StandInServer, VllmStandIn

PROG = "lorafleet demo"
ROWS = 16
"""The most replicas the table shows one row each; past it, the first ``FIRST`` and one line for the rest."""
FIRST = 10
PROGRESS_EVERY = 2.0
"""Seconds between progress lines when stderr is not a terminal."""


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
    add("--requests", metavar="N", type=_at_least_one, default=2000, help="requests to send (default 2000)")
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
        default=20.0,
        help="how long a stand-in takes to load an adapter, in ms (default 20)",
    )
    default_runtime = "trio" if _installed("trio") else "asyncio"
    add(
        "--runtime",
        choices=["trio", "asyncio"],
        default=default_runtime,
        help="which shell (default trio, or asyncio when trio is not installed)",
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
        fleet_type = _fleet_type(args.runtime)
    except ModuleNotFoundError as exc:
        sys.stderr.write(
            f"{PROG} --runtime {args.runtime} needs {exc.name}: pip install 'lorafleet[{args.runtime}]'\n"
        )
        return 2
    with tempfile.TemporaryDirectory(prefix="lorafleet-demo-") as tmp:
        root = Path(tmp)
        for i in range(args.adapters):
            folder = root / f"adapter-{i:03d}"
            folder.mkdir()
            (folder / "adapter_config.json").write_text(json.dumps({"r": 8}))
            (folder / "adapter_model.safetensors").write_bytes(b"\0" * 64)
        servers: list[StandInServer] = []
        try:
            for _ in range(args.replicas):
                servers.append(StandInServer(VllmStandIn(model="tiny")).start())
            for server in servers:
                server.app.delay("load", args.load_ms / 1000, times=None)
            replicas = [
                Replica(id=f"replica-{i}", url=s.url, model="tiny", limit=args.limit)
                for i, s in enumerate(servers)
            ]
            report = Report([r.id for r in replicas])
            progress = Progress(args.requests, sys.stderr)
            started = time.monotonic()
            run = _runner(args.runtime)
            run(lambda: drive(args, fleet_type, replicas, root, report, progress))
            report.elapsed = time.monotonic() - started
            for replica, server in zip(replicas, servers, strict=True):
                report.evictions[replica.id] = len(server.app.calls_to("unload"))
        except KeyboardInterrupt:
            sys.stderr.write(f"\n{PROG}: interrupted\n")
            return 130
        finally:
            for server in servers:
                server.stop()
    report.print(args, sys.stdout)
    return 0


def _fleet_type(runtime: str) -> type[Fleet]:
    """The one Fleet, once the runtime it will run under is known to be installed."""
    import_module(runtime)  # ModuleNotFoundError names what to install
    return Fleet


def _runner(runtime: str) -> Callable[[Callable[[], Coroutine[Any, Any, None]]], None]:
    if runtime == "trio":
        import trio

        return lambda f: trio.run(f)
    import asyncio

    return lambda f: asyncio.run(f())


class Report:
    """What the demo counted, per replica, and how it prints."""

    def __init__(self, replicas: list[str]) -> None:
        self.replicas = replicas
        self.how: dict[str, Counter[str]] = {r: Counter() for r in replicas}
        self.failures: Counter[str] = Counter()
        self.waits: list[float] = []
        self.evictions: dict[str, int] = {}
        self.elapsed = 0.0

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
        lines.append(line("all", total))
        return lines

    def print(self, args: argparse.Namespace, out: TextIO) -> None:
        rate = args.requests / self.elapsed if self.elapsed > 0 else math.inf
        out.write(
            f"\n{args.requests} requests for {args.adapters} adapters (Zipf {args.skew}) on {args.replicas} "
            f"replicas of limit {args.limit}, {args.runtime} shell, {args.concurrency} in flight: "
            f"{self.elapsed:.2f} s ({rate:.0f} requests/s)\n\n"
        )
        out.write("\n".join(self.table()) + "\n")
        if self.waits:
            waits = sorted(self.waits)
            p50 = waits[len(waits) // 2] * 1000
            p99 = waits[min(len(waits) - 1, int(len(waits) * 0.99))] * 1000
            out.write(
                f"\nlatency the loads added, over the {len(waits)} requests that waited for one: "
                f"p50 {p50:.1f} ms, p99 {p99:.1f} ms\n"
            )


class Progress:
    """How far the demo is, on ``out``: a bar redrawn in place on a terminal, else a line every
    ``every`` seconds (a log or a pipe would get one endless line of redraws).

    Args:
        total: how many requests there are.
        out: where to write (stderr, so the summary on stdout stays clean).
        clock: monotonic seconds.
        every: seconds between lines when ``out`` is not a terminal.
    """

    def __init__(
        self,
        total: int,
        out: TextIO,
        *,
        clock: Callable[[], float] = time.monotonic,
        every: float = PROGRESS_EVERY,
    ) -> None:
        self.total = total
        self.out = out
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
                self.out.write(f"\r[{'#' * filled}{'.' * (40 - filled)}] {self.done}/{self.total}")
                self.out.flush()
                if self.done == self.total:
                    self.out.write("\n")
            return
        now = self.clock()
        if now - self._last >= self.every or self.done == self.total:
            self._last = now
            self.out.write(f"{PROG}: {self.done}/{self.total} requests done\n")
            self.out.flush()


def pick(fleet: Fleet, replicas: list[Replica], adapter: str, rng: random.Random) -> Replica:
    """The demo's scheduler: a replica holding the adapter, else one with room, else any."""
    view = fleet.view(replicas, adapter)
    for group in (view.holders, view.with_room):
        choices = [r for r in replicas if r.id in group]
        if choices:
            return rng.choice(choices)
    return rng.choice(replicas)


async def drive(
    args: argparse.Namespace,
    fleet_type: type[Fleet],
    replicas: list[Replica],
    root: Path,
    report: Report,
    progress: Progress,
) -> None:
    """Send the request stream through a fleet of ``fleet_type``, ``args.concurrency`` at a time."""
    rng = random.Random(args.seed)
    weights = [1 / (k + 1) ** args.skew for k in range(args.adapters)]
    stream = rng.choices(range(args.adapters), weights=weights, k=args.requests)
    send, receive = anyio.create_memory_object_stream[int](args.concurrency)
    async with httpx.AsyncClient() as client, fleet_type(client=client) as fleet:
        await fleet.sync_unknown(replicas)

        async def worker() -> None:
            async with receive.clone() as jobs:
                async for k in jobs:
                    adapter = f"adapter-{k:03d}"
                    replica = pick(fleet, replicas, adapter, rng)
                    asked = time.monotonic()
                    try:
                        async with fleet.acquire(replica, adapter, str(root / adapter)) as lease:
                            if lease.how is not How.HIT:
                                report.waits.append(time.monotonic() - asked)
                            report.how[replica.id][lease.how] += 1
                            answer = await client.post(
                                f"{replica.url}/v1/completions",
                                json={"model": adapter, "prompt": "hello", "max_tokens": 4},
                            )
                            answer.raise_for_status()
                    except LoadError:
                        report.failures[replica.id] += 1
                    progress.step()

        async with anyio.create_task_group() as tasks:
            for _ in range(args.concurrency):
                tasks.start_soon(worker)
            async with send:
                for k in stream:
                    await send.send(k)
            receive.close()

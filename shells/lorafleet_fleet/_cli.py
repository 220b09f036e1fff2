"""``lorafleet demo``: a router on lorafleet, against stand-in vLLM replicas on 127.0.0.1.

Requests for many adapters, skewed as real traffic is (Zipf), go through one of the shells: each
acquires its adapter on a replica the scheduler picks from ``fleet.view``, then is forwarded to that
replica as a completion. The summary says what it cost: hits, joins, loads, evictions, and the latency
that loads added to the requests that waited for them.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import anyio
import httpx

from lorafleet import How

from ._fleet import Fleet
from ._types import LoadError, Replica


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="lorafleet", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="drive a skewed request stream through a shell, against stand-ins")
    demo.add_argument("--replicas", type=int, default=3, help="stand-in vLLM replicas (default 3)")
    demo.add_argument("--limit", type=int, default=4, help="adapters a replica may hold (default 4)")
    demo.add_argument("--adapters", type=int, default=40, help="distinct adapters (default 40)")
    demo.add_argument("--requests", type=int, default=2000, help="requests to send (default 2000)")
    demo.add_argument(
        "--skew", type=float, default=1.1, help="Zipf exponent of adapter popularity (default 1.1)"
    )
    demo.add_argument("--concurrency", type=int, default=32, help="requests in flight at once (default 32)")
    demo.add_argument(
        "--load-ms", type=float, default=20.0, help="how long a stand-in takes to load (default 20)"
    )
    demo.add_argument(
        "--runtime", choices=["trio", "asyncio"], default="trio", help="which shell (default trio)"
    )
    demo.add_argument("--seed", type=int, default=1, help="seed of the request stream (default 1)")
    args = parser.parse_args(argv)
    for name in ("replicas", "limit", "adapters", "requests", "concurrency"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    from lorafleet_standin import StandInServer, VllmStandIn

    with tempfile.TemporaryDirectory(prefix="lorafleet-demo-") as tmp:
        root = Path(tmp)
        for i in range(args.adapters):
            folder = root / f"adapter-{i:03d}"
            folder.mkdir()
            (folder / "adapter_config.json").write_text(json.dumps({"r": 8}))
            (folder / "adapter_model.safetensors").write_bytes(b"\0" * 64)
        servers = [StandInServer(VllmStandIn(model="tiny")).start() for _ in range(args.replicas)]
        try:
            for server in servers:
                server.app.delay("load", args.load_ms / 1000, times=None)
            replicas = [Replica(f"replica-{i}", s.url, "tiny", args.limit) for i, s in enumerate(servers)]
            report = Report(replicas)
            started = time.monotonic()
            runner = _runner(args.runtime)
            runner(lambda: drive(args, replicas, root, report))
            report.elapsed = time.monotonic() - started
            for replica, server in zip(replicas, servers, strict=True):
                report.evictions[replica.id] = len(server.app.calls_to("unload"))
        finally:
            for server in servers:
                server.stop()
    report.print(args)
    return 0


def _shell(runtime: str) -> type[Fleet]:
    if runtime == "trio":
        import lorafleet_trio

        return lorafleet_trio.Fleet
    import lorafleet_asyncio

    return lorafleet_asyncio.Fleet


def _runner(runtime: str) -> Callable[[Callable[[], Coroutine[Any, Any, None]]], None]:
    if runtime == "trio":
        import trio

        return lambda f: trio.run(f)
    import asyncio

    return lambda f: asyncio.run(f())


class Report:
    def __init__(self, replicas: list[Replica]) -> None:
        self.replicas = replicas
        self.how: dict[str, Counter[str]] = {r.id: Counter() for r in replicas}
        self.failures: Counter[str] = Counter()
        self.waits: list[float] = []
        self.evictions: dict[str, int] = {}
        self.elapsed = 0.0
        self.done = 0

    def print(self, args: argparse.Namespace) -> None:
        out = sys.stdout
        out.write(
            f"\n{args.requests} requests for {args.adapters} adapters (Zipf {args.skew}) on {args.replicas} "
            f"replicas of limit {args.limit}, {args.runtime} shell, {args.concurrency} in flight: "
            f"{self.elapsed:.2f} s ({args.requests / self.elapsed:.0f} requests/s)\n\n"
        )
        columns = ("replica", "requests", "hits", "joins", "loads", "evictions", "failures")
        out.write("".join(f"{c:>11}" for c in columns) + "\n")
        total: Counter[str] = Counter()
        for replica in self.replicas:
            how = self.how[replica.id]
            row = {
                "requests": sum(how.values()) + self.failures[replica.id],
                "hits": how[How.HIT],
                "joins": how[How.JOINED],
                "loads": how[How.LOADED],
                "evictions": self.evictions.get(replica.id, 0),
                "failures": self.failures[replica.id],
            }
            total.update(row)
            out.write(f"{replica.id:>11}" + "".join(f"{row[c]:>11}" for c in columns[1:]) + "\n")
        out.write(f"{'all':>11}" + "".join(f"{total[c]:>11}" for c in columns[1:]) + "\n")
        if self.waits:
            waits = sorted(self.waits)
            p50 = waits[len(waits) // 2] * 1000
            p99 = waits[min(len(waits) - 1, int(len(waits) * 0.99))] * 1000
            out.write(
                f"\nlatency the loads added, over the {len(waits)} requests that waited for one: "
                f"p50 {p50:.1f} ms, p99 {p99:.1f} ms\n"
            )


def pick(fleet: Fleet, replicas: list[Replica], adapter: str, rng: random.Random) -> Replica:
    """The demo's scheduler: a replica holding the adapter, else one with room, else any."""
    view = fleet.view(replicas, adapter)
    for group in (view.holders, view.with_room):
        choices = [r for r in replicas if r.id in group]
        if choices:
            return rng.choice(choices)
    return rng.choice(replicas)


async def drive(args: argparse.Namespace, replicas: list[Replica], root: Path, report: Report) -> None:
    rng = random.Random(args.seed)
    weights = [1 / (k + 1) ** args.skew for k in range(args.adapters)]
    stream = rng.choices(range(args.adapters), weights=weights, k=args.requests)
    send, receive = anyio.create_memory_object_stream[int](args.concurrency)
    async with httpx.AsyncClient() as client, _shell(args.runtime)(client=client) as fleet:
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
                    report.done += 1
                    if report.done % 50 == 0 or report.done == args.requests:
                        progress(report.done, args.requests)

        async with anyio.create_task_group() as tasks:
            for _ in range(args.concurrency):
                tasks.start_soon(worker)
            async with send:
                for k in stream:
                    await send.send(k)
            receive.close()
    sys.stderr.write("\n")


def progress(done: int, total: int, width: int = 40) -> None:
    filled = width * done // total
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
    sys.stderr.flush()


if __name__ == "__main__":
    raise SystemExit(main())

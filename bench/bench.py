"""What the core and the shells cost, as figures from one run, beside the floors they stand on.

    .venv/bin/python bench/bench.py [--quick] [--out bench/results.md]

Each figure is the best of several timed batches (the least disturbed by the rest of the machine),
per operation, and is also given as a ratio to its floor: a plain OrderedDict LRU hit with an in-use
counter (the least this work can cost in CPython), an await of a finished asyncio future, and
``trio.lowlevel.checkpoint()``. Ratios hold from machine to machine where microseconds do not.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import gc
import math
import os
import platform
import sys
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lorafleet import AdapterStateMachine, IssueLoad, IssueUnload, LoadOutcome, ReadListing, UnloadOutcome

HERE = Path(__file__).resolve().parent
LOADED, UNLOADED = LoadOutcome.LOADED, UnloadOutcome.UNLOADED
Row = tuple[str, float, str, str]  # what, microseconds per op, floor name, note


def best(run: Callable[[int], None], n: int, repeat: int = 7) -> float:
    """Seconds per operation: ``run(n)`` does n operations; the best of ``repeat`` batches."""
    run(max(1, n // 10))  # warm up
    times = []
    gc.disable()
    try:
        for _ in range(repeat):
            started = time.perf_counter()
            run(n)
            times.append((time.perf_counter() - started) / n)
    finally:
        gc.enable()
    return min(times)


# -- floors ----------------------------------------------------------------------------------


def floor_lru(n: int) -> None:
    lru: OrderedDict[str, None] = OrderedDict((f"a{i}", None) for i in range(64))
    in_use = dict.fromkeys(lru, 0)
    for _ in range(n):
        lru.move_to_end("a7")
        in_use["a7"] += 1
        in_use["a7"] -= 1


def floor_future(n: int) -> float:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        future.set_result(None)
        started = time.perf_counter()
        for _ in range(n):
            await future
        return time.perf_counter() - started

    return asyncio.run(main()) / n


def floor_checkpoint(n: int) -> float:
    import trio

    async def main() -> float:
        started = time.perf_counter()
        for _ in range(n):
            await trio.lowlevel.checkpoint()
        return time.perf_counter() - started

    return trio.run(main) / n


# -- the core --------------------------------------------------------------------------------


def fleet_machine(replicas: int, held: int) -> AdapterStateMachine:
    """A machine with ``replicas`` replicas each holding ``held`` idle adapters, every listing in."""
    m = AdapterStateMachine()
    for r in range(replicas):
        rid = f"r{r}"
        (listing,) = m.add_replica(rid, model="m", limit=held)
        assert isinstance(listing, ReadListing)
        m.listing_received(listing.listing, [f"a{i}" for i in range(held)])
    return m


def hit_path(replicas: int, held: int) -> Callable[[int], None]:
    m = fleet_machine(replicas, held)
    rid = f"r{replicas // 2}"
    adapter = f"a{held // 2}"

    def run(n: int) -> None:
        request, release = m.request, m.release
        ticket = m.next_ticket
        for t in range(ticket, ticket + n):
            request(t, replica=rid, adapter=adapter, path="/p")
            release(t)

    return run


def cold_path(replicas: int, held: int) -> Callable[[int], None]:
    """A full cold cycle with one eviction: request, unload answered, load answered, release."""
    m = fleet_machine(replicas, held)
    rid = f"r{replicas // 2}"

    def cycle(n: int) -> None:
        ticket = m.next_ticket
        for t in range(ticket, ticket + n):
            (unload,) = m.request(
                t, replica=rid, adapter=f"b{t}", path="/p"
            )  # a new name each time: always cold
            assert isinstance(unload, IssueUnload)
            (load,) = m.unload_finished(unload.unload, UNLOADED)
            assert isinstance(load, IssueLoad)
            m.load_finished(load.load, LOADED)
            m.release(t)

    return cycle


def victim_choice(held: int, n: int, repeat: int = 7) -> float:
    """Seconds per request that chooses a victim; the rest of each cold cycle is not timed."""
    m = fleet_machine(1, held)
    clock = time.perf_counter
    batches = []
    gc.disable()
    try:
        for _ in range(repeat + 1):
            spent = 0.0
            ticket = m.next_ticket
            for t in range(ticket, ticket + n):
                name = f"b{t}"
                started = clock()
                (unload,) = m.request(t, replica="r0", adapter=name, path="/p")
                spent += clock() - started
                assert isinstance(unload, IssueUnload)
                (load,) = m.unload_finished(unload.unload, UNLOADED)
                assert isinstance(load, IssueLoad)
                m.load_finished(load.load, LOADED)
                m.release(t)
            batches.append(spent / n)
    finally:
        gc.enable()
    return min(batches[1:])


def listing_of(names: int) -> Callable[[int], None]:
    m = fleet_machine(1, 64)
    listed = [f"a{i}" for i in range(names)]
    now = [0.0]

    def run(n: int) -> None:
        for _ in range(n):
            now[0] += 30.0
            (listing,) = m.advance(now[0])
            assert isinstance(listing, ReadListing)
            m.listing_received(listing.listing, listed)

    return run


def view_over(candidates: int) -> Callable[[int], None]:
    m = fleet_machine(candidates, 8)
    ids = [f"r{i}" for i in range(candidates)]

    def run(n: int) -> None:
        view = m.view
        for _ in range(n):
            view(ids, "a3")

    return run


def placement(replicas: int, holders: bool) -> Callable[[int], None]:
    """[place] for an adapter two replicas hold (from the index), or one nobody holds (a scan)."""
    m = fleet_machine(replicas, 8)
    if holders:
        for rid in ("r0", f"r{replicas // 2}"):
            (load,) = m.request(m.next_ticket, replica=rid, adapter="hot", path="/p")[-1:]
            assert isinstance(load, IssueLoad | IssueUnload)
    adapter = "hot" if holders else "cold"

    def run(n: int) -> None:
        place = m.place
        for _ in range(n):
            place(adapter)

    return run


def routed_hit_path(replicas: int) -> Callable[[int], None]:
    """``place_hit`` + release: a warm request placed by the machine, on 2 idle holders among ``replicas``."""
    m = fleet_machine(replicas, 4)  # every replica holds a0..a3: keep the holders of a1 to two
    for r in range(2, replicas):
        m.adapter_missing(replica=f"r{r}", adapter="a1")

    def run(n: int) -> None:
        place_hit, release = m.place_hit, m.release
        ticket = m.next_ticket
        for t in range(ticket, ticket + n):
            place_hit(t, adapter="a1")
            release(t)

    return run


# -- the shells ------------------------------------------------------------------------------


def shell_hits(runtime: str, n: int) -> dict[str, float]:
    """A hit through the shell, by acquire and by route, in turns: no HTTP (only the first listings).

    "acquire": ``async with fleet.acquire(replica, name, path)``, on the router's own choice of replica;
    "route": ``async with fleet.route(name)``, placement's choice among 3 replicas, 2 of them holders
    (a tie the rendezvous weight breaks). Turns in each run, and the best of each over 5 runs, so that
    the two see the same machine.
    """
    from prometheus_client import CollectorRegistry

    from lorafleet_fleet import PrometheusMetrics, Replica
    from lorafleet_standin import StandInServer

    with StandInServer() as server, StandInServer() as other, StandInServer() as third:
        server.app.register("a0", "/adapters/a0")
        other.app.register("a0", "/adapters/a0")
        replicas = [Replica(f"r{i}", s.url, "tiny", 4) for i, s in enumerate((server, other, third))]
        replica = replicas[0]

        async def main(fleet_type: Any) -> dict[str, float]:
            async with fleet_type(
                metrics=PrometheusMetrics(CollectorRegistry()),
                replicas=replicas,
                adapters={"a0": "/adapters/a0"},
            ) as fleet:
                acquire, route = fleet.acquire, fleet.route

                async def by_acquire(count: int) -> None:
                    for _ in range(count):
                        async with acquire(replica, "a0", "/adapters/a0"):
                            pass

                async def by_route(count: int) -> None:
                    for _ in range(count):
                        async with route("a0"):
                            pass

                best = {"acquire": math.inf, "route": math.inf}
                await by_acquire(n // 10)
                await by_route(n // 10)
                for _ in range(3):
                    for call, hits in (("acquire", by_acquire), ("route", by_route)):
                        started = time.perf_counter()
                        await hits(n)
                        best[call] = min(best[call], (time.perf_counter() - started) / n)
                assert fleet.statistics().grants["hit"] >= 6 * n
                return best

        if runtime == "trio":
            import trio

            import lorafleet_trio

            runs = [trio.run(main, lorafleet_trio.Fleet) for _ in range(5)]
        else:
            import lorafleet_asyncio

            runs = [asyncio.run(main(lorafleet_asyncio.Fleet)) for _ in range(5)]
        return {call: min(run[call] for run in runs) for call in ("acquire", "route")}


def shell_cold(runtime: str, n: int) -> float:
    """A cold load with one eviction through the stand-in over loopback, per load."""
    import tempfile

    from lorafleet_fleet import Replica
    from lorafleet_standin import StandInServer

    with tempfile.TemporaryDirectory() as tmp, StandInServer() as server:
        folder = Path(tmp) / "a"
        folder.mkdir()
        (folder / "adapter_config.json").write_text('{"r": 8}')
        (folder / "adapter_model.safetensors").write_bytes(b"\0")
        replica = Replica("r0", server.url, "tiny", 1)

        async def main(fleet_type: Any) -> float:
            async with fleet_type() as fleet:
                await fleet.sync_unknown([replica])
                for i in range(3):
                    async with fleet.acquire(replica, f"w{i}", str(folder)):
                        pass
                started = time.perf_counter()
                for i in range(n):
                    async with fleet.acquire(replica, f"c{i % 2}", str(folder)):
                        pass
                return (time.perf_counter() - started) / n

        if runtime == "trio":
            import trio

            import lorafleet_trio

            return trio.run(main, lorafleet_trio.Fleet)
        import lorafleet_asyncio

        return asyncio.run(main(lorafleet_asyncio.Fleet))


# -- the run ---------------------------------------------------------------------------------


def machine_info() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{platform.python_implementation()} {platform.python_version()} on {platform.system()} "
        f"{platform.machine()}, {model}, {os.cpu_count()} cores"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations: a smoke run, not figures")
    parser.add_argument("--out", type=Path, default=HERE / "results.md", help="where to write the table")
    args = parser.parse_args()
    scale = 0.05 if args.quick else 1.0

    def n(count: int) -> int:
        return max(10, int(count * scale))

    floors = {
        "lru": best(floor_lru, n(500_000)),
        "future": min(floor_future(n(500_000)) for _ in range(5)),
        "checkpoint": min(floor_checkpoint(n(200_000)) for _ in range(5)),
    }
    rows: list[Row] = []

    def add(what: str, seconds: float, floor: str, note: str = "") -> float:
        rows.append((what, seconds * 1e6, floor, note))
        print(
            f"{what:58} {seconds * 1e6:9.3f} µs  {seconds / floors[floor]:6.1f}x {floor} {note}", flush=True
        )
        return seconds

    print(
        f"floors: lru {floors['lru'] * 1e6:.3f} µs, future {floors['future'] * 1e6:.3f} µs, "
        f"checkpoint {floors['checkpoint'] * 1e6:.3f} µs",
        flush=True,
    )
    hit_small = add(
        "core hit path (request + release), 1 replica, 4 held", best(hit_path(1, 4), n(300_000)), "lru"
    )
    for limit in (4, 32, 256):
        cycle = cold_path(1, limit)
        add(f"core cold load with one eviction, limit {limit} (full cycle)", best(cycle, n(50_000)), "lru")
    victim = {}
    for limit in (4, 256):
        victim[limit] = add(
            f"  victim choice (the request alone), limit {limit}", victim_choice(limit, n(50_000)), "lru"
        )
    add("core listing of 1,000 names applied to a replica", best(listing_of(1000), n(2_000)), "lru")
    view_1000 = add(
        "core view over 1,000 candidate replicas", best(view_over(1000), n(2_000)), "lru", "(target ≤ 230 µs)"
    )
    places: dict[tuple[int, bool], float] = {}
    for replicas in (10, 100, 1_000):
        for holders in (True, False):
            what = "held or loading on 2 (index)" if holders else "cold (every candidate)"
            places[(replicas, holders)] = add(
                f"  placement, {replicas:,} replicas, adapter {what}",
                best(placement(replicas, holders), n(100_000 if holders else 100_000 // replicas)),
                "lru",
            )
    routed = add(
        "core routed hit (place_hit + release), 2 holders of 10 replicas",
        best(routed_hit_path(10), n(300_000)),
        "lru",
    )
    hits = {}
    for replicas, held in ((1, 4), (10, 10), (100, 64), (1_000, 64), (10_000, 64), (10_000, 10)):
        hits[(replicas, held)] = add(
            f"  scaling: hit path, {replicas:,} replicas x {held} held ({replicas * held:,} adapters)",
            best(hit_path(replicas, held), n(200_000)),
            "lru",
        )
    colds = {}
    for replicas, held in ((10, 10), (10_000, 10)):
        cycle = cold_path(replicas, held)
        colds[replicas] = add(
            f"  scaling: cold cycle, {replicas:,} replicas x {held} held ({replicas * held:,} adapters)",
            best(cycle, n(30_000)),
            "lru",
        )
    hits_asyncio = shell_hits("asyncio", n(50_000))
    asyncio_hit = add("asyncio shell hit (acquire + release, metrics on)", hits_asyncio["acquire"], "future")
    hits_trio = shell_hits("trio", n(50_000))
    trio_hit = add("trio shell hit (acquire + release, metrics on)", hits_trio["acquire"], "checkpoint")
    asyncio_route = add("asyncio shell hit by route (place + hit + release)", hits_asyncio["route"], "future")
    trio_route = add("trio shell hit by route (place + hit + release)", hits_trio["route"], "checkpoint")
    add(
        "asyncio shell cold load + eviction via the stand-in (loopback)",
        shell_cold("asyncio", n(300)),
        "future",
    )
    add(
        "trio shell cold load + eviction via the stand-in (loopback)",
        shell_cold("trio", n(300)),
        "checkpoint",
    )

    hit_ratio = hit_small / floors["lru"]
    flat = hits[(10_000, 64)] / hits[(1, 4)]
    largest = max(hits.values()) / min(hits.values())
    cold_flat = colds[10_000] / colds[10]
    victim_ratio = victim[256] / victim[4]
    place_flat = places[(1_000, True)] / places[(10, True)]
    verdicts = [
        ("core hit path ≤ 8x the LRU floor (never above 12x)", f"{hit_ratio:.1f}x", hit_ratio <= 8),
        ("hit path, 10,000 replicas x 64 held vs 1 x 4, ≤ 1.2x", f"{flat:.2f}x", flat <= 1.2),
        ("hit path, largest / smallest over every size", f"{largest:.2f}x", None),
        ("cold cycle, 100,000 adapters vs 100", f"{cold_flat:.2f}x", None),
        ("victim choice, 256 held vs 4, ≤ 1.5x", f"{victim_ratio:.2f}x", victim_ratio <= 1.5),
        ("placement among holders, 1,000 replicas vs 10, ≤ 1.2x", f"{place_flat:.2f}x", place_flat <= 1.2),
        ("placement of a cold adapter, 1,000 replicas", f"{places[(1_000, False)] * 1e6:.0f} µs", None),
        ("view over 1,000 candidates ≤ 230 µs", f"{view_1000 * 1e6:.0f} µs", view_1000 <= 230e-6),
        ("asyncio shell hit ≤ 2.2 µs", f"{asyncio_hit * 1e6:.2f} µs", asyncio_hit <= 2.2e-6),
        ("trio shell hit ≤ 6 µs", f"{trio_hit * 1e6:.2f} µs", trio_hit <= 6e-6),
        (
            "asyncio route hit ≤ 8x the LRU floor",
            f"{asyncio_route / floors['lru']:.1f}x",
            asyncio_route <= 8 * floors["lru"],
        ),
        (
            "trio route hit ≤ 1.3x the checkpoint floor",
            f"{trio_route / floors['checkpoint']:.2f}x",
            trio_route <= 1.3 * floors["checkpoint"],
        ),
        ("core routed hit / core hit", f"{routed / hit_small:.2f}x", None),
        ("asyncio route hit / acquire hit", f"{asyncio_route / asyncio_hit:.2f}x", None),
        ("trio route hit / acquire hit", f"{trio_route / trio_hit:.2f}x", None),
    ]
    print()
    for what, figure, ok in verdicts:
        mark = "" if ok is None else ("met" if ok else "MISSED")
        print(f"{what:58} {figure:>10}  {mark}")
    if not args.quick:
        write(args.out, floors, rows, verdicts)
    return 0


def write(
    out: Path, floors: dict[str, float], rows: list[Row], verdicts: list[tuple[str, str, bool | None]]
) -> None:
    lines = [
        "# Benchmark results",
        "",
        f"Run {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC with `bench/bench.py`",
        f"on {machine_info()}.",
        "",
        "| floor | µs |",
        "| --- | ---: |",
        f"| OrderedDict LRU hit + in-use counter up and down (`lru`) | {floors['lru'] * 1e6:.3f} |",
        f"| await of a finished asyncio future (`future`) | {floors['future'] * 1e6:.3f} |",
        f"| `trio.lowlevel.checkpoint()` (`checkpoint`) | {floors['checkpoint'] * 1e6:.3f} |",
        "",
        "| what | µs per op | x floor | floor |",
        "| --- | ---: | ---: | --- |",
    ]
    for what, micros, floor, note in rows:
        lines.append(
            f"| {what.strip()} {note} | {micros:.3f} | {micros / (floors[floor] * 1e6):.1f} | {floor} |"
        )
    lines += ["", "| target | figure | |", "| --- | ---: | --- |"]
    for what, figure, ok in verdicts:
        lines.append(f"| {what} | {figure} | {'' if ok is None else ('met' if ok else 'missed')} |")
    out.write_text("\n".join(lines) + "\n")
    print(f"\nwritten to {out}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())

"""What the core and the shells cost, each row timed in rounds that alternate with its floor.

    .venv/bin/python bench/bench.py [--rounds N] [--batch MS] [--only KEY,...] [--wall] [--quick] [--out FILE]

Each row is measured in rounds: a batch of its floor then a batch of the row (the other way round
in every second round, so that a machine speeding up or slowing down falls on both alike), each
batch about ``--batch`` ms long. The figure is the median over the rounds of the row's time over
its floor's time in the same round, with the spread of those ratios, beside the median time per
operation. On a machine shared with other work the ratios hold where the microseconds do not.

Floors, the least the work can cost in CPython: a plain OrderedDict LRU hit with an in-use counter
(``lru``), an await of a finished asyncio future (``future``), ``trio.lowlevel.checkpoint()``
(``checkpoint``), and, for a cold load through the stand-in, the two HTTP calls it makes sent
directly with httpx (``http``). Times are CPU time of this process (``time.process_time``) unless
the row says ``wall``: preemption by other work then costs nothing, though shared caches still do.
``--list`` names the rows' keys for ``--only``.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import datetime
import gc
import itertools
import math
import os
import platform
import random
import shlex
import statistics
import sys
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lorafleet import (
    AdapterStateMachine,
    Fail,
    Grant,
    How,
    IssueLoad,
    IssueUnload,
    LoadOutcome,
    ReadListing,
    UnloadOutcome,
)

HERE = Path(__file__).resolve().parent
LOADED, UNLOADED = LoadOutcome.LOADED, UnloadOutcome.UNLOADED
FLOOR = ""
"""The floor's name among a group's batches."""

Clock = Callable[[], float]
Batch = Callable[[int], float]
"""Does ``n`` operations; returns the seconds they took, by the row's clock."""
AsyncBatch = Callable[[int], Awaitable[float]]
Schedule = Generator[tuple[str, int], float, dict[str, list[float]]]


@dataclass(frozen=True)
class Settings:
    rounds: int
    batch: float
    """Seconds a batch should take: long enough to time well, short enough to follow the machine."""
    clock: Clock
    quick: bool


@dataclass
class Row:
    """One measured row: per round, its seconds per op and its floor's, taken side by side."""

    key: str
    what: str
    floor: str
    subject: list[float]
    floors: list[float]
    clock: str
    load: tuple[float, float]
    """The 1-minute load average when the row began and when it ended."""
    note: str = ""

    @property
    def ratios(self) -> list[float]:
        return [s / f for s, f in zip(self.subject, self.floors, strict=True)]

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)

    @property
    def seconds(self) -> float:
        return statistics.median(self.subject)

    @property
    def floor_seconds(self) -> float:
        return statistics.median(self.floors)

    def spread(self) -> tuple[float, float, float, float]:
        """The ratios' min, first quartile, third quartile and max."""
        ratios = sorted(self.ratios)
        if len(ratios) < 2:
            return ratios[0], ratios[0], ratios[0], ratios[0]
        q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
        return ratios[0], q1, q3, ratios[-1]


# -- rounds ----------------------------------------------------------------------------------


def schedule(names: list[str], settings: Settings, least: int = 1) -> Schedule:
    """Which batch to run next and how big, given what the last took: calibration, then the rounds.

    ``names`` are the subjects; the floor is ``FLOOR``. Each subject's batch is sized to take
    ``settings.batch`` (at least ``least`` operations), the floor's to take as long as the median
    subject batch, so that the two see the machine for the same time. Each round runs the floor and
    every subject once, in reverse order every second round. Returns seconds per operation, per
    name, one per round.
    """
    per_op: dict[str, float] = {}
    for name in [*names, FLOOR]:  # doubling until the batch is long enough to time: a warm-up too
        n = 1
        while True:
            took = yield name, n
            if took >= settings.batch / 4 or n >= 1 << 24:
                break
            n *= 2
        per_op[name] = max(took, 1e-9) / n
    counts = {name: max(least, round(settings.batch / per_op[name])) for name in names}
    span = statistics.median(counts[name] * per_op[name] for name in names)
    counts[FLOOR] = max(1, round(span / per_op[FLOOR]))
    order = [FLOOR, *names]
    out: dict[str, list[float]] = {name: [] for name in order}
    for i in range(settings.rounds):
        for name in order if i % 2 == 0 else reversed(order):
            took = yield name, counts[name]
            out[name].append(took / counts[name])
    return out


def run_rounds(
    floor: Batch, subjects: Mapping[str, Batch], settings: Settings, least: int = 1
) -> dict[str, list[float]]:
    """``schedule`` driven by plain calls, with the collector off (its pauses land on one batch)."""
    batches = {FLOOR: floor, **subjects}
    plan = schedule(list(subjects), settings, least)
    gc.collect()
    gc.disable()
    try:
        name, n = next(plan)
        while True:
            name, n = plan.send(batches[name](n))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    finally:
        gc.enable()


async def run_rounds_async(
    floor: AsyncBatch,
    subjects: Mapping[str, AsyncBatch],
    settings: Settings,
    least: int = 1,
) -> dict[str, list[float]]:
    """``schedule`` driven from inside an event loop, so that the floor runs on the same loop."""
    batches = {FLOOR: floor, **subjects}
    plan = schedule(list(subjects), settings, least)
    gc.collect()
    gc.disable()
    try:
        name, n = next(plan)
        while True:
            name, n = plan.send(await batches[name](n))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    finally:
        gc.enable()


def timed(run: Callable[[int], object], clock: Clock) -> Batch:
    def batch(n: int) -> float:
        started = clock()
        run(n)
        return clock() - started

    return batch


def clock_name(clock: Clock) -> str:
    return "cpu" if clock is time.process_time else "wall"


def empty_interval(clock: Clock) -> float:
    """What timing nothing reads on ``clock``: taken off each op timed alone."""
    gaps = []
    for _ in range(2001):
        started = clock()
        gaps.append(clock() - started)
    return statistics.median(gaps)


# -- floors ----------------------------------------------------------------------------------


def floor_lru(n: int) -> None:
    """An LRU hit with an in-use counter: the least a warm request can cost in CPython."""
    lru: OrderedDict[str, None] = OrderedDict((f"a{i}", None) for i in range(64))
    in_use = dict.fromkeys(lru, 0)
    for _ in range(n):
        lru.move_to_end("a7")
        in_use["a7"] += 1
        in_use["a7"] -= 1


def asyncio_floor(clock: Clock) -> AsyncBatch:
    """Awaits of one finished future, on the running loop."""

    async def batch(n: int) -> float:
        future = asyncio.get_running_loop().create_future()
        future.set_result(None)
        started = clock()
        for _ in range(n):
            await future
        return clock() - started

    return batch


def trio_floor(clock: Clock) -> AsyncBatch:
    """``trio.lowlevel.checkpoint()``, the least a trio operation that may switch tasks costs."""
    import trio

    async def batch(n: int) -> float:
        checkpoint = trio.lowlevel.checkpoint
        started = clock()
        for _ in range(n):
            await checkpoint()
        return clock() - started

    return batch


# -- the core --------------------------------------------------------------------------------


def fleet_machine(replicas: int, held: int, **settings: Any) -> AdapterStateMachine:
    """A machine with ``replicas`` replicas each holding ``held`` idle adapters, every listing in."""
    m = AdapterStateMachine(**settings)
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
        hit, release = m.hit, m.release  # the Fleet's warm path: hit, then release
        ticket = m.next_ticket
        for t in range(ticket, ticket + n):
            hit(t, replica=rid, adapter=adapter)
            release(t)

    return run


def cold_path(replicas: int, held: int) -> Callable[[int], None]:
    """A full cold cycle with one eviction: request, load answered (the excess unloaded, [settle]),
    unload answered, release."""
    m = fleet_machine(replicas, held)
    rid = f"r{replicas // 2}"

    def cycle(n: int) -> None:
        ticket = m.next_ticket
        for t in range(ticket, ticket + n):
            (load,) = m.request(t, replica=rid, adapter=f"b{t}", path="/p")  # a new name: always cold
            assert isinstance(load, IssueLoad)
            _grant, unload = m.load_finished(load.load, LOADED)
            assert isinstance(unload, IssueUnload)
            m.unload_finished(unload.unload, UNLOADED)
            m.release(t)

    return cycle


def victim_choice(held: int, clock: Clock) -> Batch:
    """Seconds the cold requests that choose a victim took ([evict] chooses it as the load goes out); the
    rest of each cold cycle is not timed."""
    m = fleet_machine(1, held)
    gap = empty_interval(clock)

    def batch(n: int) -> float:
        spent = 0.0
        ticket = m.next_ticket
        for t in range(ticket, ticket + n):
            started = clock()
            (load,) = m.request(t, replica="r0", adapter=f"b{t}", path="/p")
            spent += clock() - started - gap
            assert isinstance(load, IssueLoad)
            _grant, unload = m.load_finished(load.load, LOADED)
            assert isinstance(unload, IssueUnload)
            m.unload_finished(unload.unload, UNLOADED)
            m.release(t)
        return spent

    return batch


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
    m.place(adapter)  # placed before: the new-adapter row times a first placement

    def run(n: int) -> None:
        place = m.place
        for _ in range(n):
            place(adapter)

    return run


def placement_new(replicas: int) -> Callable[[int], None]:
    """[place] for an adapter never placed before, each time: its rendezvous weights are computed anew
    for every replica tied on the least cold key (here all of them, as on a fleet just listed)."""
    m = fleet_machine(replicas, 8)
    names = iter(range(10**12))

    def run(n: int) -> None:
        place = m.place
        for _ in range(n):
            place(f"new{next(names)}")

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


# -- placements per second: the calibration workload, scaled ----------------------------------

GAMMA = 0.5772156649015329
COLD_SHARE = 0.4
"""The calibration workload's cold share (lorafleet simulate, defaults: 56 % hits, 397 loads/1k)."""
IDEAL_COLD = 0.35
"""The share an ideal placement (the most asked-for adapters held, one copy each) would leave cold:
the machine's placement and eviction leave 3 to 6 points more (measured at 100 and 1,000 replicas),
so this gives about ``COLD_SHARE``; each run prints the share it had."""
LIMIT = 4


def harmonic(n: int) -> float:
    """H(n) = 1 + 1/2 + ... + 1/n, summed when small, else by its expansion (exact to 1e-12)."""
    if n < 1000:
        return math.fsum(1 / k for k in range(1, n + 1))
    return math.log(n) + GAMMA + 1 / (2 * n) - 1 / (12 * n * n)


def adapters_for(replicas: int, cold: float = IDEAL_COLD) -> int:
    """How many adapters a Zipf(1) stream needs for ``cold`` of it to miss the ``LIMIT * replicas`` most
    asked-for: H(slots) / H(adapters) = 1 - cold."""
    want = harmonic(LIMIT * replicas) / (1 - cold)
    return max(LIMIT * replicas + 1, round(math.exp(want - GAMMA)))


class Zipf:
    """Adapter ranks from 1 to ``count``, rank k drawn in proportion to 1/k; seeded.

    Exact over the first ``head`` ranks (a cumulative table), the tail by the inverse of
    H(k) - H(head) ~ ln(k / head), which is exact to 1e-5 past 100,000: a table of 70 million ranks
    would not fit.
    """

    def __init__(self, count: int, seed: int, head: int = 100_000) -> None:
        self.count = count
        self.head = min(count, head)
        self.cumulative = list(itertools.accumulate(1 / k for k in range(1, self.head + 1)))
        self.top = self.cumulative[-1]
        self.total = self.top + (harmonic(count) - harmonic(self.head) if count > self.head else 0.0)
        self.random = random.Random(seed)

    def draw(self) -> int:
        x = self.random.random() * self.total
        if x < self.top:
            return bisect.bisect_right(self.cumulative, x) + 1
        return min(self.count, int(self.head * math.exp(x - self.top)) + 1)


@dataclass
class Mix:
    """What the requests of a batch were: counts, and CPU seconds, of hits and of cold requests."""

    hits: int = 0
    hit_seconds: float = 0.0
    colds: int = 0
    cold_seconds: float = 0.0


def fleet_of(replicas: int) -> tuple[AdapterStateMachine, Zipf]:
    """The calibration workload's machine (limit 4, concurrency 8) over ``replicas``, warm.

    Warm as a listing would leave it: the ``LIMIT * replicas`` most asked-for adapters, one per slot,
    dealt round the replicas. Warming by requests would take minutes at 10,000 replicas.
    """
    m = AdapterStateMachine(concurrency=8)
    for r in range(replicas):
        (listing,) = m.add_replica(f"r{r}", model="m", limit=LIMIT)
        assert isinstance(listing, ReadListing)
        m.listing_received(listing.listing, [f"z{r + 1 + k * replicas}" for k in range(LIMIT)])
    return m, Zipf(adapters_for(replicas), seed=replicas)


def routed_requests(replicas: int, clock: Clock, mixes: list[Mix]) -> Batch:
    """Requests from the Zipf stream, each by ``route()``, its loads and unloads answered at once and
    released: the seconds they took, each timed alone (the names are drawn before the clock starts)."""
    m, zipf = fleet_of(replicas)
    gap = empty_interval(clock)
    route, release = m.route, m.release
    unload_finished, load_finished = m.unload_finished, m.load_finished

    def batch(n: int) -> float:
        names = [f"z{zipf.draw()}" for _ in range(n)]
        mix = Mix()
        ticket = m.next_ticket
        for t, name in zip(range(ticket, ticket + n), names, strict=True):
            started = clock()
            commands = route(t, adapter=name, path="/p")
            hit = False
            while commands:
                after = []
                for command in commands:
                    kind = type(command)
                    if kind is Grant:
                        hit = command.how is How.HIT  # type: ignore[union-attr]
                    elif kind is IssueUnload:
                        after += unload_finished(command.unload, UNLOADED)  # type: ignore[union-attr]
                    elif kind is IssueLoad:
                        after += load_finished(command.load, LOADED)  # type: ignore[union-attr]
                    elif kind is Fail:
                        raise AssertionError(f"request {t} failed: {command}")
                commands = after
            release(t)
            spent = clock() - started - gap
            if hit:
                mix.hits += 1
                mix.hit_seconds += spent
            else:
                mix.colds += 1
                mix.cold_seconds += spent
        mixes.append(mix)
        return mix.hit_seconds + mix.cold_seconds

    return batch


# -- the shells ------------------------------------------------------------------------------


def shell_hits(runtime: str, settings: Settings) -> dict[str, list[float]]:
    """A hit through the shell, by acquire and by route, in rounds with the runtime's floor: no HTTP.

    "acquire": ``async with fleet.acquire(replica, name, path)``, on the router's own choice of replica;
    "route": ``async with fleet.route(name)``, placement's choice among 3 replicas, 2 of them holders
    (a tie the rendezvous weight breaks). Both, and the floor, run on the same loop.
    """
    from prometheus_client import CollectorRegistry

    from lorafleet_fleet import PrometheusMetrics, Replica
    from lorafleet_standin import StandInServer

    clock = settings.clock
    with StandInServer() as server, StandInServer() as other, StandInServer() as third:
        server.app.register("a0", "/adapters/a0")
        other.app.register("a0", "/adapters/a0")
        replicas = [Replica(f"r{i}", s.url, "tiny", 4) for i, s in enumerate((server, other, third))]
        replica = replicas[0]

        async def main(fleet_type: Any, floor: AsyncBatch) -> dict[str, list[float]]:
            async with fleet_type(
                metrics=PrometheusMetrics(CollectorRegistry()),
                replicas=replicas,
                adapters={"a0": "/adapters/a0"},
            ) as fleet:
                acquire, route = fleet.acquire, fleet.route

                async def by_acquire(n: int) -> float:
                    started = clock()
                    for _ in range(n):
                        async with acquire(replica, "a0", "/adapters/a0"):
                            pass
                    return clock() - started

                async def by_route(n: int) -> float:
                    started = clock()
                    for _ in range(n):
                        async with route("a0"):
                            pass
                    return clock() - started

                async def lru(n: int) -> float:  # the core's floor, for a target stated against it
                    started = clock()
                    floor_lru(n)
                    return clock() - started

                subjects = {"acquire": by_acquire, "route": by_route, "lru": lru}
                before = fleet.statistics().grants.get("hit", 0)
                out = await run_rounds_async(floor, subjects, settings)
                assert fleet.statistics().grants["hit"] > before  # hits, not something slower
                return out

        if runtime == "trio":
            import trio

            import lorafleet_trio

            return trio.run(main, lorafleet_trio.Fleet, trio_floor(clock))
        import lorafleet_asyncio

        return asyncio.run(main(lorafleet_asyncio.Fleet, asyncio_floor(clock)))


def shell_cold(runtime: str, settings: Settings) -> dict[str, list[float]]:
    """A cold load with one eviction through the stand-in over loopback, against its two HTTP calls.

    The floor sends the same two calls (a load and an unload, as ``lorafleet.vllm.http_request``
    spells them) to a second stand-in with httpx on the same runtime, without a fleet: the row's ratio
    is what the fleet adds to the HTTP it cannot avoid (the read of ``/metrics`` it makes before an
    eviction, [read], included). Wall clock: the stand-ins run in threads of
    this process, and the time is theirs as much as the client's.
    """
    import tempfile

    import httpx

    from lorafleet.vllm import http_request
    from lorafleet_fleet import Replica
    from lorafleet_standin import StandInServer

    clock = time.perf_counter
    with tempfile.TemporaryDirectory() as tmp, StandInServer() as server, StandInServer() as bare:
        folder = Path(tmp) / "a"
        folder.mkdir()
        (folder / "adapter_config.json").write_text('{"r": 8}')
        (folder / "adapter_model.safetensors").write_bytes(b"\0")
        replica = Replica("r0", server.url, "tiny", 1)
        calls = [
            http_request(IssueLoad(load=1, replica="f", adapter="floor", path=str(folder))),
            http_request(IssueUnload(unload=2, replica="f", adapter="floor")),
        ]

        async def main(fleet_type: Any) -> dict[str, list[float]]:
            async with fleet_type() as fleet, httpx.AsyncClient() as client:
                await fleet.sync_unknown([replica])
                count = [0]

                async def cold(n: int) -> float:
                    started = clock()
                    for _ in range(n):
                        count[0] += 1
                        async with fleet.acquire(replica, f"c{count[0] % 2}", str(folder)):
                            pass
                    return clock() - started

                async def floor(n: int) -> float:
                    started = clock()
                    for _ in range(n):
                        for call in calls:
                            response = await client.request(
                                call.method,
                                bare.url + call.path,
                                headers=list(call.headers),
                                content=call.body,
                            )
                            assert response.status_code == 200, response.text
                    return clock() - started

                for i in range(3):  # the first loads fill the replica; from here on each one evicts
                    async with fleet.acquire(replica, f"w{i}", str(folder)):
                        pass
                return await run_rounds_async(floor, {"cold": cold}, settings, least=3)

        if runtime == "trio":
            import trio

            import lorafleet_trio

            return trio.run(main, lorafleet_trio.Fleet)
        import lorafleet_asyncio

        return asyncio.run(main(lorafleet_asyncio.Fleet))


# -- the rows --------------------------------------------------------------------------------


class Bench:
    """The rows measured so far, printed as they come."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.rows: dict[str, Row] = {}
        self.placements: list[dict[str, Any]] = []
        self.warmups: list[Warmup] = []

    def core(
        self,
        key: str,
        what: str,
        subject: Batch | Callable[[int], None],
        *,
        note: str = "",
        per_batch: bool = False,
        least: int = 1,
    ) -> Row:
        """A core row against the ``lru`` floor; ``per_batch``: ``subject`` times itself (a Batch)."""
        clock = self.settings.clock
        load = os.getloadavg()[0]
        batch: Batch = subject if per_batch else timed(subject, clock)  # type: ignore[assignment]
        out = run_rounds(timed(floor_lru, clock), {"s": batch}, self.settings, least)
        return self.add(Row(key, what, "lru", out["s"], out[FLOOR], clock_name(clock), (load, 0.0), note))

    def add(self, row: Row) -> Row:
        row.load = (row.load[0], os.getloadavg()[0])
        self.rows[row.what] = row
        low, q1, q3, high = row.spread()
        print(
            f"{row.what:64} {row.seconds * 1e6:10.3f} µs {row.ratio:8.1f}x {row.floor:10} "
            f"[{low:.1f}-{high:.1f}, IQR {q1:.1f}-{q3:.1f}]  load {row.load[0]:.2f}→{row.load[1]:.2f} "
            f"{row.note}",
            flush=True,
        )
        return row


def core_rows(bench: Bench, only: Callable[[str], bool]) -> None:
    quick = bench.settings.quick
    if only("hit"):
        bench.core("hit", "core hit path (hit + release), 1 replica, 4 held", hit_path(1, 4))
    if only("cold"):
        for limit in (4, 32, 256):
            bench.core(
                "cold", f"core cold load with one eviction, limit {limit} (full cycle)", cold_path(1, limit)
            )
    if only("victim"):
        for limit in (4, 256):
            bench.core(
                "victim",
                f"  victim choice (the request alone), limit {limit}",
                victim_choice(limit, bench.settings.clock),
                per_batch=True,
            )
    if only("listing"):
        bench.core("listing", "core listing of 1,000 names applied to a replica", listing_of(1000))
    if only("view"):
        bench.core(
            "view", "core view over 1,000 candidate replicas", view_over(1000), note="(target ≤ 230 µs)"
        )
    if only("place"):
        for replicas in (10, 100) if quick else (10, 100, 1_000, 10_000):
            for holders in (True, False):
                if holders and replicas > 1_000:
                    continue
                what = "held or loading on 2 (index)" if holders else "cold (every candidate)"
                bench.core(
                    "place",
                    f"  placement, {replicas:,} replicas, adapter {what}",
                    placement(replicas, holders),
                )
        for replicas in (100,) if quick else (100, 1_000):
            bench.core(
                "place",
                f"  placement, {replicas:,} replicas, a new adapter each time (all tied)",
                placement_new(replicas),
            )
    if only("routed"):
        bench.core(
            "routed", "core routed hit (place_hit + release), 2 holders of 10 replicas", routed_hit_path(10)
        )
    if only("scaling"):
        sizes = (
            ((1, 4), (10, 10), (100, 64))
            if quick
            else ((1, 4), (10, 10), (100, 64), (1_000, 64), (10_000, 64))
        )
        for replicas, held in (*sizes, (10_000, 10)):
            bench.core(
                "scaling",
                f"  scaling: hit path, {replicas:,} replicas x {held} held ({replicas * held:,} adapters)",
                hit_path(replicas, held),
            )
        for replicas, held in ((10, 10), (10_000, 10)):
            bench.core(
                "scaling",
                f"  scaling: cold cycle, {replicas:,} replicas x {held} held ({replicas * held:,} adapters)",
                cold_path(replicas, held),
            )


def placement_rows(bench: Bench) -> None:
    """Requests per second per core, hits and cold requests by ``route()``, at 100 to 10,000 replicas.

    A batch's time depends on how many of its requests were cold, 300 times a hit's at 10,000
    replicas: so hits and cold requests are rows of their own, each against the round's floor, and
    the mix is costed from their medians and the share of each over every round.
    """
    settings = bench.settings
    for replicas in (100,) if settings.quick else (100, 1_000, 10_000):
        mixes: list[Mix] = []
        adapters = adapters_for(replicas)
        clock = settings.clock
        load = os.getloadavg()[0]
        batch = routed_requests(replicas, clock, mixes)
        out = run_rounds(timed(floor_lru, clock), {"s": batch}, settings, least=30)
        rounds = list(zip(mixes[-settings.rounds :], out[FLOOR], strict=True))  # not calibration's
        hits = sum(mix.hits for mix, _ in rounds)
        colds = sum(mix.colds for mix, _ in rounds)
        share = hits / (hits + colds)
        where = f"{replicas:,} replicas x {LIMIT}, Zipf(1) over {adapters:,}"
        hit, cold = (
            bench.add(
                Row(
                    "placements",
                    f"  routed {kind} by route(), {where}",
                    "lru",
                    [spent / count for spent, count, _ in pairs],
                    [floor for _, _, floor in pairs],
                    clock_name(clock),
                    (load, 0.0),
                )
            )
            for kind, pairs in (
                ("hit", [(m.hit_seconds, m.hits, f) for m, f in rounds if m.hits]),
                ("cold request", [(m.cold_seconds, m.colds, f) for m, f in rounds if m.colds]),
            )
        )
        per_request = share * hit.seconds + (1 - share) * cold.seconds
        summary = {
            "replicas": replicas,
            "adapters": adapters,
            "requests": hits + colds,
            "hit share": share,
            "per request": per_request,
            "ratio": share * hit.ratio + (1 - share) * cold.ratio,
            "hit": hit,
            "cold": cold,
        }
        bench.placements.append(summary)
        print(
            f"    {replicas:,} replicas: {hits + colds:,} requests, {share:.1%} hits, {1 - share:.1%} cold: "
            f"{per_request * 1e6:.1f} µs a request, {1 / per_request:,.0f} requests/s per core, "
            f"{summary['ratio']:.0f}x lru",
            flush=True,
        )


def shell_rows(bench: Bench, only: Callable[[str], bool]) -> None:
    clock = clock_name(bench.settings.clock)
    for runtime, floor in (("asyncio", "future"), ("trio", "checkpoint")):
        if only(f"shell-{runtime}"):
            load = os.getloadavg()[0]
            out = shell_hits(runtime, bench.settings)
            bench.add(
                Row(
                    f"shell-{runtime}",
                    f"{runtime} shell hit (acquire + release, metrics on)",
                    floor,
                    out["acquire"],
                    out[FLOOR],
                    clock,
                    (load, 0.0),
                )
            )
            bench.add(
                Row(
                    f"shell-{runtime}",
                    f"{runtime} shell hit by route (place + hit + release)",
                    floor,
                    out["route"],
                    out[FLOOR],
                    clock,
                    (load, 0.0),
                )
            )
            bench.add(
                Row(
                    f"shell-{runtime}",
                    f"  {runtime} shell hit by route, against the lru floor on the same loop",
                    "lru",
                    out["route"],
                    out["lru"],
                    clock,
                    (load, 0.0),
                )
            )
    for runtime in ("asyncio", "trio"):
        if only(f"loopback-{runtime}"):
            load = os.getloadavg()[0]
            out = shell_cold(runtime, bench.settings)
            bench.add(
                Row(
                    f"loopback-{runtime}",
                    f"{runtime} shell cold load + eviction via the stand-in (loopback)",
                    "http",
                    out["cold"],
                    out[FLOOR],
                    "wall",
                    (load, 0.0),
                )
            )


KEYS = (
    "hit",
    "cold",
    "victim",
    "listing",
    "view",
    "place",
    "routed",
    "scaling",
    "placements",
    "warmup",
    "shell-asyncio",
    "shell-trio",
    "loopback-asyncio",
    "loopback-trio",
)


# -- verdicts and the file -------------------------------------------------------------------

Verdict = tuple[str, str, bool | None]


def verdicts(rows: dict[str, Row]) -> list[Verdict]:
    """The targets, from the rows measured; a comparison of two rows is of their ratios to the floor,
    each taken beside its own floor, so that the machine's drift between the two rows cancels."""
    out: list[Verdict] = []

    def get(what: str) -> Row | None:
        return rows.get(what)

    def versus(label: str, top: str, bottom: str, limit: float | None) -> None:
        a, b = get(top), get(bottom)
        if a is not None and b is not None:
            ratio = a.ratio / b.ratio
            out.append((label, f"{ratio:.2f}x", None if limit is None else ratio <= limit))

    hit = get("core hit path (hit + release), 1 replica, 4 held")
    if hit is not None:
        # Reported, not a goal: chasing it put fast paths no caller takes into the core (issue 36).
        out.append(("core hit path, x the LRU floor", f"{hit.ratio:.1f}x", None))
    versus(
        "hit path, 10,000 replicas x 64 held vs 1 x 4, ≤ 1.2x",
        "  scaling: hit path, 10,000 replicas x 64 held (640,000 adapters)",
        "  scaling: hit path, 1 replicas x 4 held (4 adapters)",
        1.2,
    )
    scaling = [r for r in rows.values() if r.what.startswith("  scaling: hit path")]
    if len(scaling) > 1:
        largest = max(r.ratio for r in scaling) / min(r.ratio for r in scaling)
        out.append(("hit path, largest / smallest over every size", f"{largest:.2f}x", None))
    versus(
        "cold cycle, 100,000 adapters vs 100",
        "  scaling: cold cycle, 10,000 replicas x 10 held (100,000 adapters)",
        "  scaling: cold cycle, 10 replicas x 10 held (100 adapters)",
        None,
    )
    versus(
        "victim choice, 256 held vs 4, ≤ 1.5x",
        "  victim choice (the request alone), limit 256",
        "  victim choice (the request alone), limit 4",
        1.5,
    )
    versus(
        "placement among holders, 1,000 replicas vs 10, ≤ 1.2x",
        "  placement, 1,000 replicas, adapter held or loading on 2 (index)",
        "  placement, 10 replicas, adapter held or loading on 2 (index)",
        1.2,
    )
    cold = get("  placement, 1,000 replicas, adapter cold (every candidate)")
    if cold is not None:
        out.append(
            (
                "placement of a cold adapter, 1,000 replicas, ≤ 200 µs",
                f"{cold.seconds * 1e6:.0f} µs",
                cold.seconds <= 200e-6,
            )
        )
    versus(
        "placement of a cold adapter, 10,000 replicas vs 100, ≤ 10x",
        "  placement, 10,000 replicas, adapter cold (every candidate)",
        "  placement, 100 replicas, adapter cold (every candidate)",
        10,
    )
    view = get("core view over 1,000 candidate replicas")
    if view is not None:
        out.append(
            ("view over 1,000 candidates ≤ 230 µs", f"{view.seconds * 1e6:.0f} µs", view.seconds <= 230e-6)
        )
    for runtime, target in (("asyncio", 2.2), ("trio", 6.0)):
        row = get(f"{runtime} shell hit (acquire + release, metrics on)")
        if row is not None:
            out.append(
                (
                    f"{runtime} shell hit ≤ {target:g} µs",
                    f"{row.seconds * 1e6:.2f} µs",
                    row.seconds <= target * 1e-6,
                )
            )
    route = get("  asyncio shell hit by route, against the lru floor on the same loop")
    if route is not None:
        out.append(("asyncio route hit ≤ 8x the LRU floor", f"{route.ratio:.1f}x", route.ratio <= 8))
    route = get("trio shell hit by route (place + hit + release)")
    if route is not None:
        out.append(("trio route hit ≤ 1.3x the checkpoint floor", f"{route.ratio:.2f}x", route.ratio <= 1.3))
    versus(
        "core routed hit / core hit",
        "core routed hit (place_hit + release), 2 holders of 10 replicas",
        "core hit path (hit + release), 1 replica, 4 held",
        None,
    )
    for runtime in ("asyncio", "trio"):
        versus(
            f"{runtime} route hit / acquire hit",
            f"{runtime} shell hit by route (place + hit + release)",
            f"{runtime} shell hit (acquire + release, metrics on)",
            None,
        )
    return out


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


@dataclass
class Warmup:
    """A fleet just started, its requests in batches from the first: each batch's cold requests and
    hits, and the lru floor timed just before it."""

    replicas: int
    mixes: list[Mix]
    floors: list[float]


def warmup_rows(bench: Bench) -> None:
    """Cold requests by ``route()`` on a fleet just listed, batch by batch from its first request.

    On such a fleet every replica ties on its cold key until its listed adapters are used or evicted,
    so that [place]'s rendezvous weight decides among most of the fleet; the placement rows above
    average over the first few thousand requests, and this says how that cost falls as the fleet warms.
    """
    settings = bench.settings
    clock = settings.clock
    sizes, batches, per_batch = ((100,), 3, 100) if settings.quick else ((1_000, 10_000), 12, 1_000)
    floor = timed(floor_lru, clock)
    for replicas in sizes:
        mixes: list[Mix] = []
        floors: list[float] = []
        run = routed_requests(replicas, clock, mixes)
        for _ in range(batches):
            floors.append(floor(20_000) / 20_000)
            run(per_batch)
        warmup = Warmup(replicas, mixes, floors)
        bench.warmups.append(warmup)
        colds = ", ".join(f"{m.cold_seconds / m.colds * 1e6:.0f}" for m in mixes if m.colds)
        print(
            f"    {replicas:,} replicas just listed, µs per cold request by batch of {per_batch:,}: {colds}"
        )


def write(
    out: Path,
    bench: Bench,
    results: list[Verdict],
    command: str,
    loads: tuple[tuple[float, float, float], tuple[float, float, float]],
    seconds: float,
) -> None:
    settings = bench.settings
    first, last = (" / ".join(f"{x:.2f}" for x in load) for load in loads)
    lines = [
        "# Benchmark results",
        "",
        f"Run {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC by `{command}` "
        f"on {machine_info()}, in {seconds:.0f} s;",
        f"load average (1, 5, 15 min) {first} at the start, {last} at the end.",
        "",
        f"**How to read it.** Each row ran in {settings.rounds} rounds, each a batch of the row's floor",
        f"and a batch of the row, of about {settings.batch * 1000:g} ms each, the floor first in one round",
        'and last in the next. "x floor"',
        "is the median over the rounds of the row's time over its floor's in the same round, with the",
        "least and the greatest of those ratios and the middle half of them (IQR): it is the figure that",
        "holds from run to run on a busy machine, and the one to compare across runs and commits. The",
        "microseconds (medians too) move with the machine's load: on this 2-core machine shared with",
        "other work they have moved by half from one hour to the next, and so do the requests per second",
        "below. Times are CPU time of the process (clock `cpu`), so time spent waiting for a core is not",
        "counted, though a core shared with other work still runs slower; the loopback rows are wall",
        "time (clock `wall`). Load is the 1-minute load average when the row began → ended.",
        "",
        "Floors: `lru` an OrderedDict LRU hit with an in-use counter up and down (the least a warm request",
        "can cost in CPython); `future` an await of a finished asyncio future; `checkpoint`",
        "`trio.lowlevel.checkpoint()`; `http` the two HTTP calls a cold load with one eviction makes (a",
        "load and an unload, sent straight to a second stand-in with httpx on the same runtime), so that",
        "the loopback rows say what the fleet adds to the HTTP it cannot avoid.",
        "",
        "| what | µs per op | x floor | min-max | IQR | floor | floor µs | clock | load |",
        "| --- | ---: | ---: | ---: | ---: | --- | ---: | --- | --- |",
    ]
    for row in bench.rows.values():
        low, q1, q3, high = row.spread()
        lines.append(
            f"| {row.what.strip()} {row.note} | {row.seconds * 1e6:.3f} | {row.ratio:.1f} | "
            f"{low:.1f}-{high:.1f} | {q1:.1f}-{q3:.1f} | {row.floor} | {row.floor_seconds * 1e6:.3f} | "
            f"{row.clock} | {row.load[0]:.2f} → {row.load[1]:.2f} |"
        )
    if bench.placements:
        lines += [
            "",
            "## Placements per second per core",
            "",
            "The calibration workload's mix (`lorafleet simulate`'s defaults: Zipf(1), limit 4,",
            f"concurrency 8, about {COLD_SHARE:.0%} of requests cold) scaled to more replicas: Zipf(1) over",
            f"enough adapters that an ideal placement would leave {IDEAL_COLD:.0%} of requests cold (the",
            "machine leaves a few points more: the table says how many were), the replicas warm with the",
            "most asked-for (as a listing would leave them), then every request by `route()`, its unload",
            "and load answered at once, and released. Each request is timed alone on the process's CPU",
            "clock, less what timing nothing reads, so requests/s is per core. A hit and a cold request",
            "are rows of their own above (their cost differs by up to 1,000 times, and a batch's by how",
            "many were cold); the mix is costed from their medians and the share of each.",
            "",
            "| replicas | adapters | requests | hits | cold | µs per request | requests/s per core "
            "| µs per hit | µs per cold | x lru |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for p in bench.placements:
            lines.append(
                f"| {p['replicas']:,} | {p['adapters']:,} | {p['requests']:,} | {p['hit share']:.1%} | "
                f"{1 - p['hit share']:.1%} | {p['per request'] * 1e6:.1f} | {1 / p['per request']:,.0f} | "
                f"{p['hit'].seconds * 1e6:.1f} | {p['cold'].seconds * 1e6:.1f} | {p['ratio']:.0f} |"
            )
    if bench.warmups:
        lines += [
            "",
            "## A fleet just started",
            "",
            "The same workload from the first request after the listings, in batches: on a fleet just",
            "listed every replica ties on its cold key (its listed adapters idle since the listing, no",
            "request served), so [place]'s rendezvous weight chooses among most of the fleet until the",
            "listed adapters are used or evicted. The rows above average over the first few thousand",
            "requests; this is how a cold request's cost falls as the fleet warms. x lru: the batch's",
            "µs per cold request over the lru floor timed just before the batch.",
            "",
            "| replicas | requests | cold | µs per cold | x lru | µs per hit |",
            "| ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for w in bench.warmups:
            done = 0
            for mix, floor in zip(w.mixes, w.floors, strict=True):
                begun, done = done + 1, done + mix.hits + mix.colds
                cold = mix.cold_seconds / mix.colds if mix.colds else float("nan")
                hit = mix.hit_seconds / mix.hits if mix.hits else float("nan")
                lines.append(
                    f"| {w.replicas:,} | {begun:,}-{done:,} | {mix.colds:,} | {cold * 1e6:.1f} | "
                    f"{cold / floor:.0f} | {hit * 1e6:.1f} |"
                )
    lines += ["", "## Targets", "", "| target | figure | |", "| --- | ---: | --- |"]
    for what, figure, ok in results:
        lines.append(f"| {what} | {figure} | {'' if ok is None else ('met' if ok else 'missed')} |")
    out.write_text("\n".join(lines) + "\n")
    print(f"\nwritten to {out}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/bench.py", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="rounds per row (default 20)")
    parser.add_argument("--batch", type=float, default=20.0, help="milliseconds per batch (default 20)")
    parser.add_argument("--only", default="", help="comma-separated row keys (prefixes); see --list")
    parser.add_argument("--list", action="store_true", help="print the row keys and stop")
    parser.add_argument("--wall", action="store_true", help="time every row by the wall clock, not CPU time")
    parser.add_argument("--quick", action="store_true", help="3 rounds of 2 ms, smaller sizes: a smoke run")
    parser.add_argument(
        "--out", type=Path, help="where to write the table (default bench/results.md, full runs)"
    )
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(KEYS))
        return 0
    wanted = [key.strip() for key in args.only.split(",") if key.strip()]
    unknown = [key for key in wanted if not any(k.startswith(key) for k in KEYS)]
    if unknown:
        parser.error(f"no row key starts with {', '.join(unknown)}; see --list")

    def only(key: str) -> bool:
        return not wanted or any(key.startswith(prefix) for prefix in wanted)

    settings = Settings(
        rounds=3 if args.quick else args.rounds,
        batch=0.002 if args.quick else args.batch / 1000,
        clock=time.perf_counter if args.wall else time.process_time,
        quick=args.quick,
    )
    bench = Bench(settings)
    started, load_start = time.monotonic(), os.getloadavg()
    print(f"{machine_info()}; load average {' / '.join(f'{x:.2f}' for x in load_start)}", flush=True)
    print(f"{'what':64} {'median':>13} {'x floor':>9} {'floor':10} [min-max, IQR of the per-round ratios]")
    core_rows(bench, only)
    if only("placements"):
        placement_rows(bench)
    if only("warmup"):
        warmup_rows(bench)
    shell_rows(bench, only)
    load_end = os.getloadavg()
    results = verdicts(bench.rows)
    print()
    for what, figure, ok in results:
        mark = "" if ok is None else ("met" if ok else "MISSED")
        print(f"{what:64} {figure:>10}  {mark}")
    print(
        f"\nload average {' / '.join(f'{x:.2f}' for x in load_end)} at the end; "
        f"{time.monotonic() - started:.0f} s"
    )
    out = args.out if args.out is not None else (None if args.quick or wanted else HERE / "results.md")
    if out is not None:
        command = shlex.join(
            [".venv/bin/python", "bench/bench.py", *(argv if argv is not None else sys.argv[1:])]
        )
        write(out, bench, results, command, (load_start, load_end), time.monotonic() - started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

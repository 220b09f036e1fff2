"""Three fleets on the same stand-ins under a seeded random workload, with restarts, cancellations and
spells of failing gauge reads.

In one process (three ``Fleet``s, one loop) and in three processes (one ``Fleet`` each). After the
run, the stand-ins' call logs and the routers' results must say (see ``routers_workload``):

- every request ended, no lease is left, each machine's invariants hold;
- no router unloaded an adapter that its last reading of the engine's gauge named as running when
  it chose it (a load's victim: as the load went out; its name goes once the load lands); the
  unloads that landed on a running request anyway are those of requests that started after that
  reading (docs/routers.md's sampling window), counted and printed;
- every reading a router applied is what the engine's gauge answered it, or empty after a read that
  failed after a listing (a failed read before a request reports nothing);
- no engine held more adapters than docs/routers.md's bound for R routers (sampled at every load),
  leaving out the victims whose names go once their load lands (SPEC.md §3.16: their room is the
  load's), and the engines' memory (``--max-cpu-loras`` at that bound) never went past it; what it
  dropped that a router still held (another router's requests move its order) is printed.
"""

from __future__ import annotations

import contextlib
import functools
import json
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from lorafleet_fleet import HEADROOM, Fleet, Replica
from lorafleet_standin import Memory, StandInServer

from conftest import make_adapter
from routers_workload import (
    ADAPTERS,
    GAUGE_FAULTS,
    LIMIT,
    LISTING_INTERVAL,
    ROUTERS,
    Findings,
    Probe,
    Tally,
    findings,
    hold_completions,
    key_of,
    plan,
    results,
    run_steps,
)

SEEDS = (1, 2, 3)
REQUESTS = 300
ENGINES = 2
README_BOUND = len(ROUTERS) * LIMIT
"""docs/routers.md, "What holds, and what can go wrong": ``limit + (R - 1) * f`` at worst, ``R * limit``
for a replica that was empty.

It leaves out what each router takes past the limit when every adapter it holds is in use, its own
or named by the gauge (``headroom``, **[cap]**): the random runs, with the shipped headroom 0, stay
within ``R * limit``, and ``test_each_router_goes_over_by_its_headroom`` (headroom 2) reaches
``R * (limit + headroom)``.
"""
BOUND = len(ROUTERS) * (LIMIT + HEADROOM)
"""What holds: each router's own view of a replica is at most ``limit + headroom`` (**[cap]**), and the
engine holds nothing that no router's view has (the listing shows each router the others' loads)."""
WORKER = Path(__file__).with_name("routers_workload.py")


@pytest.fixture(scope="module")
def adapter_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The workload's adapters, as vLLM validates them."""
    root = tmp_path_factory.mktemp("workload-adapters")
    for name in ADAPTERS:
        make_adapter(root / name)
    return root


def check(found: Findings, routers: list[dict[str, Any]], seed: int, memories: list[Memory]) -> None:
    for result in routers:
        assert result["started"] == result["ended"], result
        assert (result["leases"], result["waiting"]) == (0, 0), result
        assert result["invariants"] == "ok", result
    completed = sum(result["outcomes"].get("completed", 0) for result in routers)
    named = sum(bool(reading) for result in routers for r in result["readings"].values() for reading in r)
    print(
        f"seed {seed}: {found.loads} loads, {found.unloads} unloads ({found.unloads_of_nothing} of nothing), "
        f"{found.under_running} on a running "
        f"request: {len(found.named)} named by the last reading, {found.after_reading} started after it; "
        f"most held {found.max_held} (README {README_BOUND}, bound {BOUND}; names {found.max_names}); "
        f"{completed} completed, {named} readings named adapters, {found.failed_reads} reads failed; "
        f"engines' memory (--max-cpu-loras {BOUND}) "
        f"{[(m.most, m.drops, m.rereads, m.over) for m in memories]} "
        "(most, drops, re-reads, over); " + "; ".join(f"{r['router']}: {r['outcomes']}" for r in routers)
    )
    # The run did what it is for: loads, evictions and readings that named running adapters.
    assert found.loads > 0
    assert found.unloads > 0
    assert completed > 0
    assert named > 0
    assert found.unmatched == []
    assert found.readings_not_from_the_gauge == []
    assert found.named == []
    assert found.max_held <= BOUND
    # The engines' memory holds every router's adapters: it is full, and past it only when every copy
    # in it runs, which only the requests that started after a router's last reading bring about
    # (counted above: an unload or a load of theirs lands under them). It may drop one a router
    # still holds, which the machines cannot help: another router's requests and restarts move the
    # engine's order out of step with each machine's (SPEC.md §3.16); printed.
    assert all(m.most <= BOUND or (m.over > 0 and found.after_reading > 0) for m in memories), memories


def _fail_gauge_reads(server: StandInServer) -> None:
    server.app.answer("metrics", 500, "Internal Server Error", times=GAUGE_FAULTS)


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
@pytest.mark.parametrize("seed", SEEDS)
async def test_three_fleets_in_one_process(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path, seed: int
) -> None:
    servers = [serve(max_cpu_loras=BOUND) for _ in range(ENGINES)]
    the_plan = plan(seed, REQUESTS, ENGINES)
    for server in servers:
        hold_completions(server, the_plan.holds)
    replicas = {
        router: [
            Replica(f"r{k}", s.url, "tiny", LIMIT, api_key=key_of(router)) for k, s in enumerate(servers)
        ]
        for router in ROUTERS
    }
    adapters = {name: str(adapter_dir / name) for name in ADAPTERS}
    fleets = {
        router: fleet_type(replicas=replicas[router], adapters=adapters, listing_interval=LISTING_INTERVAL)
        for router in ROUTERS
    }
    probes = {router: Probe(router) for router in ROUTERS}
    tallies = {router: Tally() for router in ROUTERS}
    events: dict[int, list[Callable[[], None]]] = {}
    for index, k in the_plan.restarts:
        events.setdefault(index, []).append(servers[k].app.restart)
    for index, k in the_plan.gauge_faults:
        events.setdefault(index, []).append(functools.partial(_fail_gauge_reads, servers[k]))
    async with contextlib.AsyncExitStack() as stack:
        for router, fleet in fleets.items():
            probes[router].attach(fleet)
            await stack.enter_async_context(fleet)
        with anyio.fail_after(60):
            steps = list(enumerate(the_plan.steps))
            await run_steps(fleets, replicas, steps, events, adapter_dir, tallies)
        routers = [results(r, fleets[r], probes[r], tallies[r]) for r in ROUTERS]
    for server in servers:
        server.app.clear_faults()
    found = findings({f"r{k}": s.app.calls for k, s in enumerate(servers)}, routers)
    check(found, routers, seed, [s.app.memory() for s in servers])


def test_three_fleets_in_three_processes(
    serve: Callable[..., StandInServer], adapter_dir: Path, tmp_path: Path
) -> None:
    seed = SEEDS[0]
    servers = [serve(max_cpu_loras=BOUND) for _ in range(ENGINES)]
    the_plan = plan(seed, REQUESTS, ENGINES)
    for server in servers:
        hold_completions(server, the_plan.holds)
    workers = []
    for router in ROUTERS:
        config = {
            "router": router,
            "seed": seed,
            "requests": REQUESTS,
            "urls": [s.url for s in servers],
            "adapters": str(adapter_dir),
        }
        (tmp_path / f"{router}.json").write_text(json.dumps(config))
        command = [
            sys.executable,
            str(WORKER),
            str(tmp_path / f"{router}.json"),
            str(tmp_path / f"{router}.out"),
        ]
        workers.append(subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
    failed: list[BaseException] = []

    # Restarts and failing gauge reads at points of the run the engines' own logs mark: once an
    # engine has had this many completions (the in-process test acts when a step of the plan starts).
    actions = [
        (at, k, servers[k].app.restart)
        for at, (_, k) in zip((REQUESTS // 6, REQUESTS // 4), the_plan.restarts, strict=True)
    ]
    actions += [
        (index // 4, k, functools.partial(_fail_gauge_reads, servers[k]))
        for index, k in the_plan.gauge_faults
    ]

    def act() -> None:
        try:
            for at, k, action in sorted(actions, key=lambda a: a[0]):
                servers[k].app.wait_for_calls("completions", at, timeout=30)
                action()
        except BaseException as exc:
            failed.append(exc)

    actor = threading.Thread(target=act, daemon=True)
    try:
        for worker in workers:
            assert worker.stdout is not None
            assert worker.stdout.readline() == "ready\n"
        actor.start()
        for worker in workers:
            assert worker.stdin is not None
            worker.stdin.write("go\n")
            worker.stdin.flush()
        for worker in workers:
            assert worker.wait(timeout=60) == 0
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    actor.join(30)
    assert not failed, failed
    for server in servers:
        server.app.clear_faults()
    routers = [json.loads((tmp_path / f"{router}.out").read_text()) for router in ROUTERS]
    found = findings({f"r{k}": s.app.calls for k, s in enumerate(servers)}, routers)
    check(found, routers, seed, [s.app.memory() for s in servers])


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_each_router_goes_over_by_its_headroom(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    """Three routers that met an empty replica each run requests on ``limit + headroom`` adapters of
    their own there, at once: the replica holds ``R * (limit + headroom)``, past docs/routers.md's
    ``R * limit``. No router evicts (every adapter it holds is in use) or waits (none is at its cap).
    Headroom 2: the shipped 0 never goes past the limit, which is what this test is not about. The
    engine's batch runs them all (--max-loras 12): with one, a router whose reading came in before
    its third load would queue it ([cap]: more in use than one batch runs) and wait forever."""
    headroom = 2
    per_router = LIMIT + headroom
    standin = serve(max_loras=len(ROUTERS) * per_router)
    assert len(ADAPTERS) >= len(ROUTERS) * per_router
    held = anyio.Event()
    granted = 0

    async def hold(fleet: Fleet, replica: Replica, name: str) -> None:
        nonlocal granted
        async with fleet.acquire(replica, name, str(adapter_dir / name)):
            granted += 1
            if granted == len(ROUTERS) * per_router:
                held.set()
            await held.wait()

    async with contextlib.AsyncExitStack() as stack:
        fleets = []
        for router in ROUTERS:
            replica = Replica("r0", standin.url, "tiny", LIMIT, api_key=key_of(router))
            # No listing between their loads: each sees only its own (docs/routers.md's window, made long).
            fleet = await stack.enter_async_context(
                fleet_type(replicas=[replica], listing_interval=600, headroom=headroom)
            )
            fleets.append((fleet, replica))
        async with anyio.create_task_group() as tasks:
            for i, (fleet, replica) in enumerate(fleets):
                for name in ADAPTERS[i * per_router : (i + 1) * per_router]:
                    tasks.start_soon(hold, fleet, replica, name)
            await held.wait()
            assert len(standin.app.adapters) == len(ROUTERS) * (LIMIT + headroom) > README_BOUND
        assert standin.app.calls_to("unload") == []

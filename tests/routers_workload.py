"""A seeded random workload for several fleets on the same stand-ins, and what to check after it.

The plan (which router, which adapter, how, held how long, cancelled or not) is drawn from the seed;
the run is real: fleets over HTTP, completions held in flight on the stand-in, restarts, cancellations.
Each fleet's machine is probed: every unload it decides is recorded with the engine's gauge as the
fleet last read it when it chose the adapter (the reading **[reading]** applies): for a load's victim,
as the load went out (**[evict]**: its unload follows once the load lands), else as the unload went
out (**[settle]**). So an unload the stand-in saw land on a running request can be told apart: named
by that reading (a bug) or started after it (the sampling window docs/routers.md admits, which for a
victim runs to its load's landing).

Run as a script, it is one router of a workload run in several processes (``main``).
"""

from __future__ import annotations

import json
import random
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import attrs
import httpx

from lorafleet import (
    Command,
    Event,
    IssueLoad,
    IssueUnload,
    LoadFinished,
    LoadOutcome,
    ReadEngine,
    ReadingFailed,
    ReadingReceived,
    Released,
)
from lorafleet._state import Load
from lorafleet_fleet import Fleet, FleetError, LoadError, Replica
from lorafleet_standin import Call

ADAPTERS = tuple(f"a{i}" for i in range(12))
ADAPTER_WEIGHTS = (10, 6, 4, 3, 2, 2, 1, 1, 1, 1, 1, 1)
"""As many adapters as three routers may hold on one engine (``R * (limit + headroom)``): a bound can fail."""
ROUTERS = ("A", "B", "C")
ROUTER_WEIGHTS = (3, 2, 1)
LIMIT = 2
LISTING_INTERVAL = 0.2
CONCURRENCY = 9
"""Requests in flight at once, over all the routers of a process."""


@attrs.frozen
class Step:
    """One request of the plan."""

    router: int
    adapter: str
    routed: bool
    """``route()`` (placement chooses); else ``acquire()`` on ``replica``."""
    replica: int
    cancel_after: float | None
    """Seconds after which the request is cancelled wherever it is; None: it runs to its end."""


@attrs.frozen
class Plan:
    steps: tuple[Step, ...]
    holds: tuple[float, ...]
    """Seconds each completion is held in flight on a stand-in, in the order completions arrive there."""
    restarts: tuple[tuple[int, int], ...]
    """(step index, replica index): restart that replica's engine when the step starts."""
    gauge_faults: tuple[tuple[int, int], ...]
    """(step index, replica index): that replica's next ``GAUGE_FAULTS`` reads of /metrics, from any
    router, answer 500, from when the step starts."""


GAUGE_FAULTS = 3


def plan(seed: int, requests: int, replicas: int) -> Plan:
    """The seed's workload: ``requests`` steps over ``replicas`` engines, with two restarts and four
    spells of failing gauge reads."""
    rng = random.Random(seed)
    steps = []
    for _ in range(requests):
        router = rng.choices(range(len(ROUTERS)), ROUTER_WEIGHTS)[0]
        adapter = rng.choices(ADAPTERS, ADAPTER_WEIGHTS)[0]
        routed = rng.random() < 0.7
        replica = rng.randrange(replicas)
        cancel_after = rng.uniform(0.0, 0.03) if rng.random() < 0.1 else None
        steps.append(Step(router, adapter, routed, replica, cancel_after))
    holds = tuple(rng.uniform(0.002, 0.03) for _ in range(requests))
    restarts = ((requests // 3, 0), (2 * requests // 3, replicas - 1))
    gauge_faults = tuple(sorted((rng.randrange(requests), rng.randrange(replicas)) for _ in range(4)))
    return Plan(tuple(steps), holds, restarts, gauge_faults)


def key_of(router: str) -> str:
    """The API key a router's replicas carry: the stand-in (started without a key) logs it per call."""
    return f"router-{router}"


def router_of(call: Call) -> str:
    authorization = call.authorization or ""
    assert authorization.startswith("Bearer router-"), call
    return authorization.removeprefix("Bearer router-")


@attrs.define
class Probe:
    """What one fleet's machine decided: its loads and unloads, each with the last reading it applied.

    It wraps the machine's ``handle``, every event's way in (the fleet sends each input through it),
    and ``release``, which a lease's release calls instead and which skips ``handle`` unless the
    machine's class overrides it; it changes nothing: the commands go on as they came.
    """

    router: str
    unloads: list[dict[str, Any]] = attrs.field(factory=list)
    """Each unload issued, in order: replica, adapter, and the adapters of the last reading when the
    adapter was chosen (a victim's: when its load went out)."""
    loads: list[dict[str, Any]] = attrs.field(factory=list)
    """Each load decided, in order: replica, adapter, the adapters of the last reading, which the
    decision saw (the reading it waited for, when [read] made it wait), the victims it took
    ([evict]), and whether it landed (None while it is out)."""
    readings: dict[str, list[list[str]]] = attrs.field(factory=dict)
    """Replica id to the readings the machine applied, in order: each answered read, and the empty
    reading a failed read leaves when it ends the last one ([read-failed])."""
    _reads: dict[int, str] = attrs.field(factory=dict)
    """Read operation to its replica, from the machine's ``ReadEngine`` commands."""
    _out: dict[int, dict[str, Any]] = attrs.field(factory=dict)
    """Load operation still out to its entry in ``loads``."""

    def attach(self, fleet: Fleet) -> None:
        machine = fleet._machine
        handle = machine.handle

        def probed(event: Event) -> list[Command]:
            # The reading in effect is the machine's last one: its answer to named().
            read = event.read if isinstance(event, ReadingReceived | ReadingFailed) else None
            replica = self._reads.pop(read, None) if read is not None else None
            standing = machine.named(replica) if replica is not None else None
            # A load's answer: its victims' unloads, if it landed, go out with it ([load-outcome]).
            answered = self._out.pop(event.load, None) if isinstance(event, LoadFinished) else None
            if answered is not None:
                assert isinstance(event, LoadFinished)
                answered["landed"] = event.outcome in (LoadOutcome.LOADED, LoadOutcome.ALREADY_LOADED)
            commands = handle(event)
            if replica is not None and isinstance(event, ReadingReceived):
                self.readings.setdefault(replica, []).append(sorted(event.adapters or ()))
            elif replica is not None and standing and not machine.named(replica):
                self.readings.setdefault(replica, []).append([])  # [read-failed] ended the reading
            # An event's commands see the reading it applied (a reading that frees a queue may evict).
            for command in commands:
                if isinstance(command, ReadEngine):
                    self._reads[command.read] = command.replica
                elif isinstance(command, IssueLoad):
                    load = machine._ops[command.load]
                    assert isinstance(load, Load)
                    decided = {
                        "replica": command.replica,
                        "adapter": command.adapter,
                        "reading": sorted(machine.named(command.replica)),
                        "victims": [victim.adapter for victim in load.victims],
                        "landed": None,
                    }
                    self.loads.append(decided)
                    self._out[command.load] = decided
                elif isinstance(command, IssueUnload):
                    # A victim was chosen by the reading its load saw; [settle]'s excess, by this one.
                    if answered is not None and command.adapter in answered["victims"]:
                        reading = answered["reading"]
                    else:
                        reading = sorted(machine.named(command.replica))
                    self.unloads.append(
                        {"replica": command.replica, "adapter": command.adapter, "reading": reading}
                    )
            return commands

        setattr(machine, "handle", probed)  # noqa: B010 (mypy: a method is not assigned to)

        def probed_release(ticket: int) -> list[Command]:
            return probed(Released(ticket=ticket))  # the release() the machine spells, probed

        setattr(machine, "release", probed_release)  # noqa: B010 (as handle)


@attrs.define
class Tally:
    """How the requests of one router ended."""

    outcomes: Counter[str] = attrs.field(factory=Counter)
    started: int = 0
    ended: int = 0


async def run_steps(
    fleets: dict[str, Fleet],
    replicas: dict[str, list[Replica]],
    steps: Sequence[tuple[int, Step]],
    events: dict[int, list[Callable[[], None]]],
    folder: Path,
    tallies: dict[str, Tally],
) -> None:
    """Run ``steps`` (index, step), ``CONCURRENCY`` at a time; every request ends before this returns.

    Args:
        events: step index to what befalls the engines as that step starts (a restart, faults).
    """
    limiter = anyio.Semaphore(CONCURRENCY)
    async with httpx.AsyncClient(timeout=30) as client, anyio.create_task_group() as tasks:
        for index, step in steps:
            for event in events.get(index, ()):
                event()
            await limiter.acquire()
            router = ROUTERS[step.router]
            tasks.start_soon(
                _one, fleets[router], replicas[router], step, folder, client, tallies[router], limiter
            )


async def _one(
    fleet: Fleet,
    replicas: list[Replica],
    step: Step,
    folder: Path,
    client: httpx.AsyncClient,
    tally: Tally,
    limiter: anyio.Semaphore,
) -> None:
    tally.started += 1
    scope = anyio.CancelScope() if step.cancel_after is None else anyio.move_on_after(step.cancel_after)
    try:
        with scope:
            try:
                if step.routed:
                    async with fleet.route(step.adapter) as lease:
                        tally.outcomes[await _complete(client, lease)] += 1
                else:
                    replica = replicas[step.replica]
                    async with fleet.acquire(replica, step.adapter, str(folder / step.adapter)) as lease:
                        tally.outcomes[await _complete(client, lease)] += 1
            except LoadError as exc:
                tally.outcomes[type(exc).__name__] += 1
            except FleetError as exc:  # the fleet closed: never while the workload runs
                raise AssertionError(f"a request failed with {exc!r}") from exc
        if scope.cancelled_caught:
            tally.outcomes["cancelled"] += 1
        tally.ended += 1
    finally:
        limiter.release()


async def _complete(client: httpx.AsyncClient, lease: Any) -> str:
    """Send the request's completion to its replica; the stand-in holds it in flight for a while."""
    replica = lease.replica
    headers = {"Authorization": f"Bearer {replica.api_key}"}
    body = {"model": lease.adapter, "prompt": "hello", "max_tokens": 4}
    answer = await client.post(f"{replica.url}/v1/completions", json=body, headers=headers)
    if answer.status_code == 200:
        return "completed"
    if lease.check_answer(answer.status_code, answer.content[:4096]):
        return "adapter missing"
    return f"HTTP {answer.status_code}"


def results(router: str, fleet: Fleet, probe: Probe, tally: Tally) -> dict[str, Any]:
    """One router's results, as JSON: its unloads and readings, its statistics, how requests ended."""
    stats = fleet.statistics()
    try:
        fleet._machine.check_invariants()
        invariants = "ok"
    except AssertionError as exc:
        invariants = f"broken: {exc}"
    return {
        "router": router,
        "unloads": probe.unloads,
        "loads": probe.loads,
        "readings": probe.readings,
        "leases": stats.leases,
        "waiting": stats.waiting,
        "invariants": invariants,
        "outcomes": dict(tally.outcomes),
        "started": tally.started,
        "ended": tally.ended,
    }


@attrs.frozen
class Findings:
    """What the stand-ins' logs and the routers' results say about one run."""

    under_running: int
    """Unloads the stand-in received while a completion ran on that adapter there."""
    named: list[str]
    """(i) of those, the ones whose adapter the deciding router's last reading named as it chose the
    adapter (a victim: as its load went out): bugs."""
    after_reading: int
    """(ii) the others: the request started after that reading (for a victim, a request of another
    router started before its load landed)."""
    unmatched: list[str]
    """Unloads the stand-in received that no router decided (must be none)."""
    readings_not_from_the_gauge: list[str]
    """Readings a router applied that no answer of the engine's /metrics to it gave (must be none),
    but for the empty ones a read that failed after a listing leaves ([read-failed])."""
    failed_reads: int
    """Reads of /metrics that met an injected fault."""
    max_held: int
    """The most adapters an engine held for the routers, sampled as each load came: its registered
    names and the one loading, but for the victims a router had chosen for a load that landed, whose
    names it unloads only after (**[evict]**: their room is the load's, SPEC.md §3.16)."""
    max_names: int
    """The most names an engine had registered, victims too, sampled as each load came."""
    loads: int
    unloads: int
    unloads_of_nothing: int
    """Unloads of an adapter the engine did not have (another router's unload, or a restart, was first)."""


def findings(engines: dict[str, list[Call]], routers: list[dict[str, Any]]) -> Findings:
    """Compare the stand-ins' call logs (replica id to its calls) with the routers' results."""
    named: list[str] = []
    unmatched: list[str] = []
    strange: list[str] = []
    under = after = max_held = max_names = loads = unloads = nothing = failed = 0
    by_router = {result["router"]: result for result in routers}
    for rid, calls in engines.items():
        # A router's loads of one adapter on one replica never overlap either: each call is its
        # decision, in order, and its victims' names go with the router's next unload of them.
        decisions: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for result in routers:
            for load in result["loads"]:
                if load["replica"] == rid:
                    decisions.setdefault((result["router"], load["adapter"]), []).append(load)
        taken: Counter[tuple[str, str]] = Counter()
        victims: dict[str, set[str]] = {router: set() for router in by_router}
        for call in calls:
            if call.path == "/v1/unload_lora_adapter":
                victims[router_of(call)].discard(call.body["lora_name"])
            if call.path != "/v1/load_lora_adapter":
                continue
            loads += 1
            router, adapter = router_of(call), call.body["lora_name"]
            ordered = decisions.get((router, adapter), [])
            if taken[router, adapter] < len(ordered):
                load = ordered[taken[router, adapter]]
                if load["landed"]:  # a failed load's victims were held again all along
                    victims[router].update(load["victims"])
            taken[router, adapter] += 1
            names = {*call.registered, adapter}
            max_names = max(max_names, len(names))
            max_held = max(max_held, len(names - set().union(*victims.values())))
        for router, result in by_router.items():
            mine = [c for c in calls if router_of(c) == router]
            # A router's unloads of one adapter on one replica never overlap, so its decisions and
            # the stand-in's calls pair up in order (the last decisions may have had no call yet).
            decided: dict[str, list[list[str]]] = {}
            for unload in result["unloads"]:
                if unload["replica"] == rid:
                    decided.setdefault(unload["adapter"], []).append(unload["reading"])
            seen: Counter[str] = Counter()
            for call in (c for c in mine if c.path == "/v1/unload_lora_adapter"):
                unloads += 1
                adapter = call.body["lora_name"]
                nothing += adapter not in call.registered
                readings = decided.get(adapter, [])
                if seen[adapter] >= len(readings):
                    unmatched.append(f"{router} unloaded {adapter} on {rid} with no decision")
                    continue
                reading = readings[seen[adapter]]
                seen[adapter] += 1
                if adapter in call.running:
                    under += 1
                    if adapter in reading:
                        named.append(f"{router} unloaded {adapter} on {rid}, named by its reading {reading}")
                    else:
                        after += 1
            # Each reading is the gauge as the engine answered one of this router's /metrics calls,
            # in order (most failed reads change nothing, so some answers have no reading), or
            # (None here) the empty one a failed read after a listing leaves ([read-failed]).
            answered = [None if c.misbehaviour else sorted(c.running) for c in mine if c.path == "/metrics"]
            failed += answered.count(None)
            at = 0
            for reading in result["readings"].get(rid, []):
                while at < len(answered) and not _gave(answered[at], reading):
                    at += 1
                if at == len(answered):
                    strange.append(f"{router} read {reading} on {rid}, which the gauge never said then")
                    break
                at += 1
    return Findings(
        under, named, after, unmatched, strange, failed, max_held, max_names, loads, unloads, nothing
    )


def _gave(answer: list[str] | None, reading: list[str]) -> bool:
    """Whether a read answered ``answer`` (None: it failed) could have reported ``reading``."""
    return answer == reading if answer is not None else not reading


def hold_completions(server: Any, holds: Sequence[float]) -> None:
    """Have the stand-in hold its next completions in flight, one hold each, in arrival order."""
    for seconds in holds:
        server.app.delay("completions", seconds)


# -- one router of a run in several processes ----------------------------------------------------


async def _main(config: dict[str, Any]) -> dict[str, Any]:
    router = config["router"]
    the_plan = plan(config["seed"], config["requests"], len(config["urls"]))
    mine = [(i, s) for i, s in enumerate(the_plan.steps) if ROUTERS[s.router] == router]
    folder = Path(config["adapters"])
    replicas = [
        Replica(f"r{k}", url, "tiny", LIMIT, api_key=key_of(router)) for k, url in enumerate(config["urls"])
    ]
    probe = Probe(router)
    tally = Tally()
    fleet = Fleet(
        replicas=replicas,
        adapters={name: str(folder / name) for name in ADAPTERS},
        listing_interval=LISTING_INTERVAL,
    )
    probe.attach(fleet)
    async with fleet:
        print("ready", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)  # the test starts every router at once
        with anyio.fail_after(60):
            await run_steps({router: fleet}, {router: replicas}, mine, {}, folder, {router: tally})
        return results(router, fleet, probe, tally)


def main() -> None:
    """``python routers_workload.py CONFIG OUT``: run one router of the plan, write its results to OUT."""
    config = json.loads(Path(sys.argv[1]).read_text())
    result = anyio.run(_main, config)
    Path(sys.argv[2]).write_text(json.dumps(result))


if __name__ == "__main__":
    main()

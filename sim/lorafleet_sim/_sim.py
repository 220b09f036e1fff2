"""The discrete-event simulator: real ``AdapterStateMachine`` routers against simulated vLLM replicas.

Virtual time only. Each router runs its own machine (the fleet's settings, with the policy's over
them), fed ``TimeAdvanced`` with the virtual clock, ``hit`` on the warm path and ``handle`` for
everything else. A baseline policy picks each request's replica and sends ``Requested``; lorafleet's
sends ``Routed`` and the machine places it (``Assign``); the limit, the eviction, the cap and when to
read an engine are the machine's alone. The simulator plays the shell (it carries out every command
as a shell would, and decides nothing) and the engines:

- a replica runs at most ``concurrency`` requests at once, first come first served beyond that; a
  request reaches it once its lease is granted, and keeps its lease until its service ends;
- a load takes ``load_time``; loads of different adapters overlap and take no request slot; a load of
  an adapter the engine is loading already waits for that one, and one of an adapter it holds is
  answered "already loaded" at once; unloads are immediate;
- a listing is answered at once with what the engine really holds; a request for an adapter the
  engine does not hold is answered "no such model" (404), which the router reports as
  ``AdapterMissing`` before it releases the request and routes it again, elsewhere if it can;
- the engine knows which adapters have requests running or waiting in its queue, from every router
  (vLLM's ``vllm:lora_requests_info``), and how many requests it runs and queues; a ``ReadEngine``
  (the machine asks for one with ``read_engine``) samples them when it is sent, and its answer
  arrives ``read_latency`` seconds later (0: at once, like a listing), or fails (``read_failures``);
- a restart empties the engine; loads in flight there fail (a replica fault: the waiters are routed
  again).

Several routers see each other's work only through listings, running reports and those answers.
An unload is counted as under another router's request when that router has a request running or
waiting on the adapter on that replica at the moment the unload is carried out (vLLM lets a running
request finish on an adapter it no longer lists).
"""

from __future__ import annotations

import bisect
import enum
import heapq
import math
import random
from collections import deque
from collections.abc import Mapping
from typing import Any

import attrs

import lorafleet
from lorafleet import (
    AdapterMissing,
    AdapterStateMachine,
    Assign,
    Fail,
    Grant,
    How,
    IssueLoad,
    IssueUnload,
    ListingReceived,
    LoadFinished,
    LoadOutcome,
    ReadEngine,
    ReadingFailed,
    ReadingReceived,
    ReadListing,
    Released,
    ReplicaAdded,
    Requested,
    Routed,
    TimeAdvanced,
    UnloadFinished,
    UnloadOutcome,
)

from ._belady import belady_loads
from ._state import MODEL, Chooser, Policy, RouterView
from ._workload import Workload

RELOAD_WINDOW = 10.0
"""A load of an adapter evicted from the same replica at most this many seconds before is a reload."""

_LOAD_DONE, _SERVICE_DONE, _TICK, _RESTART, _RETRY, _READ_DONE = range(6)


class _Unset(enum.Enum):
    UNSET = "as the policy's routers ship"


UNSET = _Unset.UNSET
"""A machine setting the fleet leaves to the policy: ``Fleet()``'s for lorafleet, the core's defaults
for the baselines."""


@attrs.frozen
class Fleet:
    """The simulated fleet.

    Args:
        replicas: how many vLLM replicas.
        limit: the most adapters each may hold (the machine's limit).
        concurrency: the most requests each runs at once.
        load_time: seconds a load takes.
        routers: how many routers, each with its own machine.
        listing_interval: seconds between two readings of a replica's listing.
        headroom, overflow, half_life, read_engine: the machine's settings of those names ([cap],
            [place], [evict], [read]), for every policy; unset, lorafleet's routers have ``Fleet()``'s
            (``lorafleet.FLEET_DEFAULTS``) and the baselines' the core's defaults.
        read_latency: seconds from a read's sample to its answer reaching the router.
        read_failures: the fraction of reads that get no answer, drawn from the seed, answered
            ``ReadingFailed`` ([read-failed]), as ``Fleet`` does.
        failed_read_drops: every failed read is answered as a reading that names nothing instead,
            as the Fleet did before [read-failed] (for comparison).
        settings: any other machine settings, by name, passed to every router's machine.
    """

    replicas: int
    limit: int
    concurrency: int
    load_time: float
    routers: int = 1
    listing_interval: float = lorafleet.DEFAULT_LISTING_INTERVAL
    headroom: int | _Unset | None = UNSET
    overflow: int | _Unset = UNSET
    half_life: int | _Unset = UNSET
    read_engine: bool | _Unset = UNSET
    read_latency: float = 0.0
    read_failures: float = 0.0
    failed_read_drops: bool = False
    settings: Mapping[str, Any] = attrs.field(factory=dict)
    limits: tuple[int, ...] | None = None
    """Each replica's limit, when they differ (``limit`` is then unused)."""
    tell_concurrency: bool = False
    """Give every router's machine the replicas' ``concurrency`` (a Fleet is told nothing of it)."""

    def machine(self, policy: Policy) -> AdapterStateMachine:
        """A router's machine: as its policy's routers ship it (lorafleet's as ``Fleet()`` makes it,
        the baselines' with the core's defaults), with the fleet's settings that were given over it,
        and those ``policy`` sets over them."""
        settings: dict[str, Any] = {"listing_interval": self.listing_interval}
        if policy.routes:
            settings.update(lorafleet.FLEET_DEFAULTS)
        for name in ("headroom", "overflow", "half_life", "read_engine"):
            value = getattr(self, name)
            if value is not UNSET:
                settings[name] = value
        if self.tell_concurrency:
            settings["concurrency"] = self.concurrency
        settings.update(self.settings)
        settings.update(policy.settings)
        return AdapterStateMachine(**settings)

    def limit_of(self, index: int) -> int:
        return self.limit if self.limits is None else self.limits[index]


@attrs.frozen
class Figures:
    """What one policy cost on one workload."""

    policy: str
    requests: int
    loads: int
    """Loads the engines really did (an "already loaded" answer is not one)."""
    hits: int
    """Grants the routers' machines gave as hits."""
    wait_mean: float
    """Seconds from a request's arrival to the start of its service, mean and 99th percentile."""
    wait_p99: float
    load_wait_mean: float
    """Seconds from arrival to the grant, per request: the latency loads (and 404s) added."""
    imbalance: float
    """The busiest replica's service time over the mean replica's."""
    reloads: int
    """Loads of an adapter evicted from the same replica within ``RELOAD_WINDOW`` seconds."""
    held_mean: float
    """Adapters an engine holds, time-mean over the run and the replicas, and the most at any time."""
    held_max: int
    belady: int
    """Belady's MIN on each replica's request sequence with the capacity the policy had there."""
    compulsory: int
    """Distinct adapters in the workload."""
    missing: int
    """Requests answered "no such model" by an engine."""
    failed: int
    """Requests failed by a failed load (and routed again)."""
    evictions: int
    copies: int = 0
    """Loads of an adapter another replica held or was loading: extra copies, made to spread load."""
    unloads_under_others: int = 0
    """Unloads of an adapter another router had requests running or waiting on, on that replica."""
    unloads_under_own: int = 0
    """Unloads of an adapter the unloading router itself had requests running or waiting on there."""
    reads: int = 0
    """Reads of an engine the machines asked for ([read])."""
    failed_reads: int = 0
    """Of those, the ones that got no answer (``read_failures``)."""
    load_times: tuple[float, ...] = attrs.field(default=(), repr=False, eq=False)
    """When each load went out, in order: for the loads of a window (after a popularity shift)."""

    def loads_between(self, start: float, end: float) -> int:
        """Loads that went out from ``start`` up to ``end``."""
        return bisect.bisect_left(self.load_times, end) - bisect.bisect_left(self.load_times, start)

    def per_1k(self, count: int) -> float:
        return 1000.0 * count / self.requests if self.requests else 0.0

    @property
    def hit_rate(self) -> float:
        return self.hits / self.requests if self.requests else 0.0

    @property
    def belady_ratio(self) -> float:
        return self.loads / self.belady if self.belady else math.inf


@attrs.define(eq=False)
class _Engine:
    id: str
    index: int
    registered: set[str] = attrs.field(factory=set)
    loading: dict[str, list[tuple[int, int]]] = attrs.field(factory=dict)
    """Adapter being loaded to the (router, load op) pairs waiting for its answer."""
    queue: deque[_Attempt] = attrs.field(factory=deque)
    running: int = 0
    busy: float = 0.0
    epoch: int = 0
    evicted: dict[str, float] = attrs.field(factory=dict)
    held_area: float = 0.0
    held_at: float = 0.0
    held_max: int = 0
    sequence: list[str] = attrs.field(factory=list)
    capacities: list[int] = attrs.field(factory=list)
    requests: dict[str, dict[int, int]] = attrs.field(factory=dict)
    """Adapter to router to its requests running or waiting here: what vLLM's gauge names."""

    def arrive(self, adapter: str, router: int) -> None:
        counts = self.requests.setdefault(adapter, {})
        counts[router] = counts.get(router, 0) + 1

    def leave(self, adapter: str, router: int) -> None:
        counts = self.requests[adapter]
        counts[router] -= 1
        if not counts[router]:
            del counts[router]
            if not counts:
                del self.requests[adapter]

    def account(self, now: float) -> None:
        """Integrate the number of adapters held up to ``now``; call before it changes."""
        self.held_area += (now - self.held_at) * len(self.registered)
        self.held_at = now


@attrs.define(eq=False)
class _Attempt:
    request: int
    router: int
    replica: int
    """-1 for a routed request the machine has not assigned yet."""
    ticket: int
    tried: frozenset[int]


@attrs.define(eq=False)
class _Router:
    index: int
    view: RouterView
    chooser: Chooser
    attempts: dict[int, _Attempt] = attrs.field(factory=dict)
    loads: dict[int, tuple[int, str]] = attrs.field(factory=dict)
    ticket: int = 0


class Simulation:
    """One policy on one workload over one simulated fleet; ``run()`` gives its figures.

    Args:
        workload: the requests (and restarts).
        fleet: the replicas and routers.
        policy: how each router chooses a replica, and the machine settings it changes.
        seed: seeds the policy's generators (baselines draw random numbers; lorafleet does not).
        check: after every step, check each router's machine's invariants and its count of
            requests in flight per replica against the router's (for tests).
    """

    def __init__(
        self, workload: Workload, fleet: Fleet, policy: Policy, *, seed: int = 1, check: bool = False
    ) -> None:
        self.workload = workload
        self.fleet = fleet
        self.policy = policy
        self.check = check
        self.engines = [_Engine(f"replica-{i}", i) for i in range(fleet.replicas)]
        self.engine_by_id = {e.id: e for e in self.engines}
        self.everyone = list(range(fleet.replicas))
        ids = tuple(e.id for e in self.engines)
        index = {e.id: e.index for e in self.engines}
        self.routers: list[_Router] = []
        for r in range(fleet.routers):
            view = RouterView(fleet.machine(policy), ids, index, [0] * fleet.replicas)
            rng = random.Random(f"{seed}:{policy.name}:{r}")
            self.routers.append(_Router(r, view, policy.make(view, rng, fleet.concurrency)))
        self.heap: list[tuple[float, int, int, Any]] = []
        self.seq = 0
        self.now = 0.0
        n = len(workload)
        self.started = [math.nan] * n
        self.granted = [math.nan] * n
        self.pending = 0
        self.loads = 0
        self.hits = 0
        self.reloads = 0
        self.missing = 0
        self.failed = 0
        self.evictions = 0
        self.copies = 0
        self.deferred = 0
        self.unloads_under_others = 0
        self.unloads_under_own = 0
        self.reads = 0
        self.failed_reads = 0
        self.load_times: list[float] = []
        # Its own stream, so that every policy meets the same failures and no other draw moves.
        self.read_rng = random.Random(f"{seed}:reads")

    # -- the loop ------------------------------------------------------------------------------

    def _push(self, at: float, kind: int, payload: Any) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (at, self.seq, kind, payload))

    def run(self) -> Figures:
        """Run the whole workload and return its figures."""
        for router in self.routers:
            m = router.view.machine
            self._commands(router, m.handle(TimeAdvanced(now=0.0)))
            for engine in self.engines:
                limit = self.fleet.limit_of(engine.index)
                self._commands(router, m.handle(ReplicaAdded(replica=engine.id, model=MODEL, limit=limit)))
            self._schedule_tick(router)
        for at, replica in self.workload.restarts:
            self._push(at, _RESTART, replica)
        times = self.workload.times
        n = len(times)
        heap = self.heap
        i = 0
        while i < n or self.pending:
            if heap and (i >= n or heap[0][0] <= times[i]):
                at, _, kind, payload = heapq.heappop(heap)
                self.now = at
                if kind == _SERVICE_DONE:
                    self._service_done(payload)
                elif kind == _LOAD_DONE:
                    self._load_done(*payload)
                elif kind == _TICK:
                    self._tick(payload)
                elif kind == _RETRY:
                    self._route(*payload)
                elif kind == _READ_DONE:
                    self._read_done(*payload)
                else:
                    self._restart(payload)
            else:
                self.now = times[i]
                self.pending += 1
                self._route(i, self.workload.routers[i], frozenset())
                i += 1
            if self.check:
                self._check()
        return self._figures()

    def _schedule_tick(self, router: _Router) -> None:
        due = router.view.machine.next_due()
        if due is not None:
            self._push(due, _TICK, router)

    def _tick(self, router: _Router) -> None:
        self._commands(router, router.view.machine.handle(TimeAdvanced(now=self.now)))
        self._schedule_tick(router)

    # -- requests ------------------------------------------------------------------------------

    def _route(self, request: int, r: int, tried: frozenset[int]) -> None:
        """Send a request: to the replica its policy chooses, or (lorafleet's) as the machine places it."""
        router = self.routers[r]
        view = router.view
        adapter = self.workload.adapters[request]
        m = view.machine
        router.ticket += 1
        ticket = router.ticket
        if self.policy.routes:
            attempt = _Attempt(request, r, -1, ticket, tried)
            router.attempts[ticket] = attempt
            exclude = tuple(view.ids[i] for i in sorted(tried))
            self._commands(
                router,
                m.handle(Routed(ticket=ticket, adapter=adapter, path=adapter, model=MODEL, exclude=exclude)),
            )
            return
        candidates = [i for i in self.everyone if i not in tried] if tried else self.everyone
        index = router.chooser.choose(adapter, candidates, tried)
        if index is None:
            # Every replica it may try is avoided after a failure: try again after a load's time.
            self.deferred += 1
            self._push(self.now + max(self.fleet.load_time, 0.001), _RETRY, (request, r, frozenset()))
            return
        attempt = _Attempt(request, r, -1, ticket, tried)
        router.attempts[ticket] = attempt
        position = self._assign(router, attempt, index)
        engine = self.engines[index]
        if m.hit(ticket, replica=engine.id, adapter=adapter):
            self.hits += 1
            self._forward(attempt)
        else:
            self._commands(
                router, m.handle(Requested(ticket=ticket, replica=engine.id, adapter=adapter, path=adapter))
            )
        self._capacity(engine, position)

    def _assign(self, router: _Router, attempt: _Attempt, index: int) -> int:
        """The request goes to replica ``index``: count it there; its place in the replica's sequence."""
        attempt.replica = index
        router.view.outstanding[index] += 1
        engine = self.engines[index]
        engine.sequence.append(self.workload.adapters[attempt.request])
        engine.capacities.append(0)
        return len(engine.sequence) - 1

    def _capacity(self, engine: _Engine, position: int) -> None:
        """What the replica held once the request was admitted: the capacity the policy had there."""
        limit = self.fleet.limit_of(engine.index)
        engine.capacities[position] = max(limit, len(engine.registered) + len(engine.loading))

    def _forward(self, attempt: _Attempt) -> None:
        """The granted request reaches its engine: 404, or its queue."""
        request = attempt.request
        engine = self.engines[attempt.replica]
        adapter = self.workload.adapters[request]
        if adapter not in engine.registered:
            self._not_found(attempt, adapter)
            return
        self.granted[request] = self.now
        engine.arrive(adapter, attempt.router)
        if engine.running < self.fleet.concurrency:
            self._start(engine, attempt)
        else:
            engine.queue.append(attempt)

    def _start(self, engine: _Engine, attempt: _Attempt) -> None:
        engine.running += 1
        request = attempt.request
        self.started[request] = self.now
        duration = self.workload.durations[request]
        engine.busy += duration
        self._push(self.now + duration, _SERVICE_DONE, attempt)

    def _service_done(self, attempt: _Attempt) -> None:
        engine = self.engines[attempt.replica]
        engine.running -= 1
        self.pending -= 1
        engine.leave(self.workload.adapters[attempt.request], attempt.router)
        self._end(attempt)
        if engine.queue:
            self._start(engine, engine.queue.popleft())

    def _end(self, attempt: _Attempt) -> None:
        """Release the request's lease."""
        router = self.routers[attempt.router]
        del router.attempts[attempt.ticket]
        router.view.outstanding[attempt.replica] -= 1
        self._commands(router, router.view.machine.handle(Released(ticket=attempt.ticket)))

    def _not_found(self, attempt: _Attempt, adapter: str) -> None:
        """The engine answered "no such model": report it, release, and route the request again."""
        self.missing += 1
        router = self.routers[attempt.router]
        m = router.view.machine
        del router.attempts[attempt.ticket]
        router.view.outstanding[attempt.replica] -= 1
        replica = self.engines[attempt.replica].id
        self._commands(
            router, m.handle(AdapterMissing(replica=replica, adapter=adapter, ticket=attempt.ticket))
        )
        self._commands(router, m.handle(Released(ticket=attempt.ticket)))
        self._retry(attempt)

    def _retry(self, attempt: _Attempt) -> None:
        """Route a request again, to a replica it has not tried yet if there is one.

        When it has tried them all (or none would take it), it tries again after a load's time.
        """
        if attempt.replica < 0:
            self.deferred += 1
            self._push(
                self.now + max(self.fleet.load_time, 0.001),
                _RETRY,
                (attempt.request, attempt.router, frozenset()),
            )
            return
        tried = attempt.tried | {attempt.replica}
        if len(tried) < self.fleet.replicas:
            self._push(self.now, _RETRY, (attempt.request, attempt.router, tried))
        else:
            self._push(
                self.now + self.fleet.load_time, _RETRY, (attempt.request, attempt.router, frozenset())
            )

    # -- commands ------------------------------------------------------------------------------

    def _commands(self, router: _Router, commands: list[lorafleet.Command]) -> None:
        """Carry out the machine's commands, as a shell would, feeding back each answer.

        The engines answer some calls at once, so an answer's commands are carried out before the
        rest of the list: each ``Assign`` of the list is noted first, as a shell notes it before any
        answer can come, so that a grant among those nested commands finds its replica.
        """
        assigned: list[tuple[_Engine, int]] = []
        for command in commands:
            if type(command) is Assign:
                assert isinstance(command, Assign)
                attempt = router.attempts[command.ticket]
                index = router.view.index[command.replica]
                assigned.append((self.engines[index], self._assign(router, attempt, index)))
        for command in commands:
            kind = type(command)
            if kind is Grant:
                assert isinstance(command, Grant)
                if command.how is How.HIT:
                    self.hits += 1
                self._forward(router.attempts[command.ticket])
            elif kind is IssueLoad:
                assert isinstance(command, IssueLoad)
                self._issue_load(router, command)
            elif kind is IssueUnload:
                assert isinstance(command, IssueUnload)
                self._issue_unload(router, command)
            elif kind is ReadListing:
                assert isinstance(command, ReadListing)
                engine = self.engine_by_id[command.replica]
                listed = tuple(sorted(engine.registered))
                self._commands(
                    router,
                    router.view.machine.handle(ListingReceived(listing=command.listing, adapters=listed)),
                )
            elif kind is ReadEngine:
                assert isinstance(command, ReadEngine)
                self._read(router, self.engine_by_id[command.replica], command.read)
            elif kind is Fail:
                assert isinstance(command, Fail)
                attempt = router.attempts.pop(command.ticket)
                if attempt.replica >= 0:
                    router.view.outstanding[attempt.replica] -= 1
                    self.failed += 1
                self._retry(attempt)
            # MarkMet asks nothing of a shell that never waits for a replica to be met.
        for engine, position in assigned:
            self._capacity(engine, position)

    def _read(self, router: _Router, engine: _Engine, read: int) -> None:
        """Read ``engine`` for the machine: a sample now (or a failure, ``read_failures``), answered
        ``read_latency`` seconds later (at once when it is 0)."""
        self.reads += 1
        sample: tuple[tuple[str, ...], int, int] | None = (
            tuple(sorted(engine.requests)),
            engine.running,
            len(engine.queue),
        )
        if self._read_fails():
            self.failed_reads += 1
            sample = None
        latency = self.fleet.read_latency
        if latency > 0:
            self._push(self.now + latency, _READ_DONE, (router, read, sample))
        else:
            self._read_done(router, read, sample)

    def _read_fails(self) -> bool:
        """Whether the read being sent gets no answer (``read_failures``)."""
        return bool(self.fleet.read_failures) and self.read_rng.random() < self.fleet.read_failures

    def _read_done(self, router: _Router, read: int, sample: tuple[tuple[str, ...], int, int] | None) -> None:
        machine = router.view.machine
        if sample is None and not self.fleet.failed_read_drops:
            self._commands(router, machine.handle(ReadingFailed(read=read, message="no answer")))
            return
        names, running, waiting = sample or ((), None, None)
        # The simulated engine runs any mix of adapters in a batch: up to its concurrency of them.
        max_loras = None if sample is None else self.fleet.concurrency
        reading = ReadingReceived(
            read=read, adapters=names, running=running, waiting=waiting, max_loras=max_loras
        )
        self._commands(router, machine.handle(reading))

    def _issue_load(self, router: _Router, command: IssueLoad) -> None:
        engine = self.engine_by_id[command.replica]
        adapter = command.adapter
        router.loads[command.load] = (engine.index, adapter)
        waiting = engine.loading.get(adapter)
        if waiting is not None:
            waiting.append((router.index, command.load))
            return
        if adapter in engine.registered:
            self._load_answered(router, command.load, LoadOutcome.ALREADY_LOADED)
            return
        engine.loading[adapter] = [(router.index, command.load)]
        self.loads += 1
        self.load_times.append(self.now)
        for other in self.engines:
            if other is not engine and (adapter in other.registered or adapter in other.loading):
                self.copies += 1
                break
        evicted = engine.evicted.get(adapter)
        if evicted is not None and self.now - evicted <= RELOAD_WINDOW:
            self.reloads += 1
        self._push(self.now + self.fleet.load_time, _LOAD_DONE, (engine, adapter, engine.epoch))

    def _load_done(self, engine: _Engine, adapter: str, epoch: int) -> None:
        if epoch != engine.epoch:
            return  # the engine restarted meanwhile; its waiters were answered then
        waiters = engine.loading.pop(adapter)
        engine.account(self.now)
        engine.registered.add(adapter)
        engine.held_max = max(engine.held_max, len(engine.registered))
        for r, load in waiters:
            self._load_answered(self.routers[r], load, LoadOutcome.LOADED)

    def _load_answered(self, router: _Router, load: int, outcome: LoadOutcome) -> None:
        del router.loads[load]
        self._commands(router, router.view.machine.handle(LoadFinished(load=load, outcome=outcome)))

    def _issue_unload(self, router: _Router, command: IssueUnload) -> None:
        engine = self.engine_by_id[command.replica]
        adapter = command.adapter
        if adapter in engine.registered:
            engine.account(self.now)
            engine.registered.discard(adapter)
            engine.evicted[adapter] = self.now
            self.evictions += 1
            counts = engine.requests.get(adapter)
            if counts:
                if router.index in counts:
                    self.unloads_under_own += 1
                if len(counts) > (router.index in counts):
                    self.unloads_under_others += 1
            outcome = UnloadOutcome.UNLOADED
        else:
            outcome = UnloadOutcome.NOT_FOUND
        self._commands(
            router, router.view.machine.handle(UnloadFinished(unload=command.unload, outcome=outcome))
        )

    def _restart(self, replica: int) -> None:
        engine = self.engines[replica]
        engine.epoch += 1
        engine.account(self.now)
        engine.registered.clear()
        loading = engine.loading
        engine.loading = {}
        for waiters in loading.values():
            for r, load in waiters:
                self._load_answered(self.routers[r], load, LoadOutcome.REPLICA_FAULT)

    def _check(self) -> None:
        for router in self.routers:
            m = router.view.machine
            m.check_invariants()
            seen = m.statistics().replicas
            for engine in self.engines:
                in_flight = seen[engine.id].in_flight
                mine = router.view.outstanding[engine.index]
                assert in_flight == mine, (engine.id, in_flight, mine)
                assert in_flight == sum(1 for a in router.attempts.values() if a.replica == engine.index)

    # -- figures -------------------------------------------------------------------------------

    def _figures(self) -> Figures:
        n = len(self.workload)
        waits = sorted(s - t for s, t in zip(self.started, self.workload.times, strict=True))
        grant_waits = [g - t for g, t in zip(self.granted, self.workload.times, strict=True)]
        end = self.now
        busy = [e.busy for e in self.engines]
        mean_busy = sum(busy) / len(busy)
        held_mean = 0.0
        for engine in self.engines:
            engine.account(end)
            held_mean += engine.held_area / end if end > 0 else 0.0
        belady = sum(belady_loads(e.sequence, e.capacities) for e in self.engines)
        return Figures(
            policy=self.policy.name,
            requests=n,
            loads=self.loads,
            hits=self.hits,
            wait_mean=sum(waits) / n if n else 0.0,
            wait_p99=_percentile(waits, 0.99),
            load_wait_mean=sum(grant_waits) / n if n else 0.0,
            imbalance=max(busy) / mean_busy if mean_busy > 0 else 1.0,
            reloads=self.reloads,
            held_mean=held_mean / len(self.engines),
            held_max=max(e.held_max for e in self.engines),
            belady=belady,
            compulsory=self.workload.distinct,
            missing=self.missing,
            failed=self.failed,
            evictions=self.evictions,
            copies=self.copies,
            unloads_under_others=self.unloads_under_others,
            unloads_under_own=self.unloads_under_own,
            reads=self.reads,
            failed_reads=self.failed_reads,
            load_times=tuple(self.load_times),
        )


def _percentile(ordered: list[float], q: float) -> float:
    """The nearest-rank percentile of a sorted list."""
    if not ordered:
        return 0.0
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def simulate(workload: Workload, fleet: Fleet, policy: Policy, *, seed: int = 1) -> Figures:
    """Run ``policy`` on ``workload`` over ``fleet`` and return its figures."""
    return Simulation(workload, fleet, policy, seed=seed).run()

"""The discrete-event simulator: real ``AdapterStateMachine`` routers against simulated vLLM replicas.

Virtual time only. Each router runs its own machine (the fleet's settings, with the policy's over
them), fed ``TimeAdvanced`` with the virtual clock, ``hit`` on the warm path and ``handle`` for
everything else. A baseline policy picks each request's replica and sends ``Requested``; lorafleet's
sends ``Routed`` with the virtual clock and the machine places it (``Assign``); the limit, the
eviction, the cap and when to read an engine are the machine's alone. A policy over vLLM's own
loading (``engine_loads``) runs no machine's loads: it only picks the replica, and the engine loads
what it lacks itself (vLLM's filesystem resolver). The simulator plays the shell (it carries out
every command as a shell would, and decides nothing) and the engines, each a vLLM replica as
``_engine.Engine`` describes it:

- every engine has the same memory for every policy (``--max-cpu-loras``), dropping its least recently
  used adapter when a load finds it full; an unload forgets the name and frees nothing (unless the
  fleet ``frees``); an adapter a request needs that memory dropped is read from disk again;
- its scheduler runs at most ``concurrency`` requests using at most ``max_loras`` distinct adapters,
  first come first served among those that fit; a request reaches it once its lease is granted, and
  keeps its lease until its service ends;
- a load takes ``load_time``; loads of different adapters overlap and take no request slot; a load of
  an adapter the engine is loading already waits for that one, and one of an adapter it lists is
  answered "already loaded" at once;
- a listing is answered at once with the names the engine lists; a request for an adapter the
  engine does not list is answered "no such model" (404), which the router reports as
  ``AdapterMissing`` before it releases the request and routes it again, elsewhere if it can;
- the engine knows which adapters have requests running or waiting in its queue, from every router
  (vLLM's ``vllm:lora_requests_info``), how many requests it runs and queues, and its ``max_loras``; a
  ``ReadEngine`` samples them ``read_delay`` seconds after it is sent (0: as it is sent), and its
  answer arrives ``read_latency`` seconds after the sample (0: at once, like a listing), or fails
  (``read_failures``);
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
    StandingBy,
    TimeAdvanced,
    UnloadFinished,
    UnloadOutcome,
)

from ._belady import belady_loads
from ._engine import BATCH, FULL, READ, Engine, Job
from ._state import MODEL, Chooser, Policy, RouterView
from ._workload import Workload

RELOAD_WINDOW = 10.0
"""A load of an adapter evicted from the same replica at most this many seconds before is a reload."""

_LOAD_DONE, _SERVICE_DONE, _TICK, _RESTART, _RETRY, _READ_DONE, _RESOLVED, _READ_SAMPLE = range(8)


class _Unset(enum.Enum):
    UNSET = "as the policy's routers ship"


UNSET = _Unset.UNSET
"""A machine setting the fleet leaves to the policy: ``Fleet()``'s for lorafleet, the core's defaults
for the baselines."""


@attrs.frozen
class Fleet:
    """The simulated fleet: vLLM replicas that every policy meets alike, and the routers in front.

    Args:
        replicas: how many vLLM replicas.
        memory: the adapters each engine keeps in memory (vLLM's ``--max-cpu-loras``), the same for
            every policy. A router's machine gets the limit that fits it (``lorafleet.limit_for``,
            with that machine's headroom and routers), unless ``limit`` says otherwise.
        concurrency: the most requests each runs at once (``--max-num-seqs``).
        load_time: seconds a read of an adapter from disk takes.
        max_loras: the distinct adapters one batch may use (``--max-loras``); None: ``memory``.
        routers: how many routers, each with its own machine.
        listing_interval: seconds between two readings of a replica's listing.
        headroom, overflow, half_life, read_engine: the machine's settings of those names ([cap],
            [place], [evict], [read]), for every policy; unset, lorafleet's routers have ``Fleet()``'s
            (``lorafleet.FLEET_DEFAULTS``) and the baselines' the core's defaults.
        read_latency: seconds from a read's sample to its answer reaching the router.
        read_delay: seconds from a read's sending to the engine's sample: the sample counts the
            requests that started meanwhile and not those that ended, as a real engine's counts
            are taken when the GET reaches it.
        read_failures: the fraction of reads that get no answer, drawn from the seed, answered
            ``ReadingFailed`` ([read-failed]), as ``Fleet`` does.
        failed_read_drops: every failed read is answered as a reading that names nothing instead,
            as the Fleet did before [read-failed] (for comparison).
        settings: any other machine settings, by name, passed to every router's machine.
        frees: an unload frees the adapter's memory (a frontend that calls ``remove_lora``; vLLM's
            Python frontend, every version through 0.34, does not).
        relay: seconds a request that reached another router takes to reach the first, which decides
            for all (``lorafleet serve``'s ``[peers]``); None: every router decides its own.
    """

    replicas: int
    memory: int
    concurrency: int
    load_time: float
    max_loras: int | None = None
    routers: int = 1
    listing_interval: float = lorafleet.DEFAULT_LISTING_INTERVAL
    headroom: int | _Unset | None = UNSET
    overflow: int | _Unset = UNSET
    half_life: int | _Unset = UNSET
    read_engine: bool | _Unset = UNSET
    shared_interval: float | _Unset | None = UNSET
    read_latency: float = 0.0
    read_delay: float = 0.0
    read_failures: float = 0.0
    failed_read_drops: bool = False
    settings: Mapping[str, Any] = attrs.field(factory=dict)
    memories: tuple[int, ...] | None = None
    """Each replica's memory, when they differ (``memory`` is then unused)."""
    limit: int | None = None
    """The limit every router's machine gives every replica, whatever fits the memory; None: what
    fits (``lorafleet.limit_for``)."""
    frees: bool = False
    tell_concurrency: bool = False
    """Give every router's machine the replicas' ``concurrency`` (a Fleet is told nothing of it)."""
    relay: float | None = None

    def __attrs_post_init__(self) -> None:
        for index in range(self.replicas):
            refused = lorafleet.engine_refusal(self.memory_of(index), self.batch_of(index))
            if refused is not None:
                raise ValueError(f"replica {index}: {refused}")

    def settings_of(self, policy: Policy) -> dict[str, Any]:
        """A router's machine settings: as its policy's routers ship them (lorafleet's as ``Fleet()``
        makes them, the baselines' the core's defaults), with the fleet's settings that were given over
        them, and those ``policy`` sets over them."""
        settings: dict[str, Any] = {"listing_interval": self.listing_interval}
        if policy.routes:
            settings.update(lorafleet.FLEET_DEFAULTS)
        for name in ("headroom", "overflow", "half_life", "read_engine", "shared_interval"):
            value = getattr(self, name)
            if value is not UNSET:
                settings[name] = value
        if self.tell_concurrency:
            settings["concurrency"] = self.concurrency
        settings.update(self.settings)
        settings.update(policy.settings)
        return settings

    def machine(self, policy: Policy) -> AdapterStateMachine:
        """A router's machine, made with ``settings_of(policy)``."""
        return AdapterStateMachine(**self.settings_of(policy))

    def memory_of(self, index: int) -> int:
        return self.memory if self.memories is None else self.memories[index]

    def batch_of(self, index: int) -> int:
        """Replica ``index``'s ``--max-loras``."""
        return self.memory_of(index) if self.max_loras is None else self.max_loras

    def limit_of(self, index: int, policy: Policy) -> int:
        """The limit ``policy``'s machines give replica ``index``: what fits its memory, by the sizing
        rule everyone shares (``lorafleet.limit_for``), unless the fleet sets one."""
        if self.limit is not None:
            return self.limit
        settings = self.settings_of(policy)
        return lorafleet.limit_for(
            self.memory_of(index), settings.get("headroom"), settings.get("routers", 1)
        )


@attrs.frozen
class Figures:
    """What one policy cost on one workload."""

    policy: str
    requests: int
    loads: int
    """Adapters the engines read from disk: loads (an "already loaded" answer is not one), their own
    loads of a name they lacked (``engine_loads``), and re-reads."""
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
    rereads: int = 0
    """Of the loads, reads inside a step of an adapter an engine had dropped from memory while it was
    registered: its memory and its registry disagreed."""
    drops: int = 0
    """Adapters an engine dropped from memory while their name was registered there (for a policy
    whose machine loads: an adapter its router holds, as far as it knows)."""
    load_times: tuple[float, ...] = attrs.field(default=(), repr=False, eq=False)
    """When each load went out, in order: for the loads of a window (after a popularity shift)."""
    span: float = 0.0
    """Seconds from the first arrival to the last."""
    utilisation: float = 0.0
    """Seconds requests held engines' request slots (reads from disk that paused them included) over
    the slots the fleet had while requests arrived (replicas x concurrency x ``span``): at 1 or past
    it the fleet cannot keep up."""
    wait_early: float = 0.0
    """Mean wait of the second quarter of the requests (by arrival; the first warms up)."""
    wait_late: float = 0.0
    """Mean wait of the last quarter: far above ``wait_early``, the queue grew through the run."""
    service_mean: float = 0.0
    """The requests' mean service, seconds."""
    engine_waits: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """Seconds from the grant to the start of service, per request, of the requests that reached an
    engine running all it could at once, one whose batch had no room for one more adapter, or one
    reading an adapter from disk first (``Engine.holdup``): what of the wait the engine's queue
    made, by its cause."""

    @property
    def loads_per_second(self) -> float:
        return self.loads / self.span if self.span > 0 else 0.0

    @property
    def overloaded(self) -> str | None:
        """Why the fleet could not keep up, in words, or None: its utilisation is at 1 or past it, or
        the queue grew through the run (the last quarter's mean wait is more than twice the second's
        and more than a mean service above it)."""
        if self.utilisation >= 1:
            return f"utilisation {self.utilisation:.2f}"
        if self.wait_late > max(2 * self.wait_early, self.wait_early + self.service_mean):
            return (
                f"a queue that grew: mean wait {1000 * self.wait_late:.0f} ms in the last quarter of the "
                f"run, {1000 * self.wait_early:.0f} ms in the second"
            )
        return None

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
class _Attempt:
    request: int
    router: int
    replica: int
    """-1 for a routed request the machine has not assigned yet."""
    ticket: int
    """0 for a request of a policy over the engines' own loading: no machine knows of it."""
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
        self.engines = [
            Engine(
                f"replica-{i}",
                i,
                memory=fleet.memory_of(i),
                max_loras=fleet.batch_of(i),
                concurrency=fleet.concurrency,
                load_time=fleet.load_time,
                frees=fleet.frees,
            )
            for i in range(fleet.replicas)
        ]
        self.engine_by_id = {e.id: e for e in self.engines}
        self.everyone = list(range(fleet.replicas))
        ids = tuple(e.id for e in self.engines)
        index = {e.id: e.index for e in self.engines}
        self.routers: list[_Router] = []
        for r in range(fleet.routers):
            view = RouterView(fleet.machine(policy), ids, index, [0] * fleet.replicas)
            rng = random.Random(f"{seed}:{policy.name}:{r}")
            self.routers.append(_Router(r, view, policy.make(view, rng, fleet.concurrency)))
        self.sequences: list[list[str]] = [[] for _ in self.engines]
        """Each replica's requests, by adapter, in the order they were sent: for Belady's bound."""
        self.capacities: list[list[int]] = [[] for _ in self.engines]
        """And the adapters it could hold as each was admitted."""
        self.jobs: dict[int, tuple[_Attempt, Job]] = {}
        """Request to its attempt and its job, once it reached an engine."""
        self.heap: list[tuple[float, int, int, Any]] = []
        self.seq = 0
        self.now = 0.0
        n = len(workload)
        self.started = [math.nan] * n
        self.slot_seconds = 0.0
        """Seconds requests held an engine's request slot, from their start to their end (reads from
        disk that paused them included): the fleet's work, for the utilisation."""
        self.granted = [math.nan] * n
        self.holdups = [0] * n
        """Why each request did not start at once on reaching its engine (``Engine.holdup``), or 0."""
        self.pending = 0
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
        self.evicted: dict[tuple[int, str], float] = {}
        """(replica, adapter) to when a router last unloaded it there: for reloads."""
        # Its own stream, so that every policy meets the same failures and no other draw moves.
        self.read_rng = random.Random(f"{seed}:reads")

    # -- the loop ------------------------------------------------------------------------------

    def _push(self, at: float, kind: int, payload: Any) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (at, self.seq, kind, payload))

    def run(self) -> Figures:
        """Run the whole workload and return its figures."""
        for router in self.routers:
            if self.policy.engine_loads:
                continue  # its machine never hears of the replicas: the engines load for it
            m = router.view.machine
            self._commands(router, m.handle(TimeAdvanced(now=0.0)))
            if self.fleet.relay is not None and router is not self.routers[0]:
                # It relays to the first, which decides ([standby]).
                self._commands(router, m.handle(StandingBy(on=True)))
            for engine in self.engines:
                limit = self.fleet.limit_of(engine.index, self.policy)
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
                    self._service_done(*payload)
                elif kind == _LOAD_DONE:
                    self._load_done(*payload)
                elif kind == _TICK:
                    self._tick(payload)
                elif kind == _RETRY:
                    self._route(*payload)
                elif kind == _READ_DONE:
                    self._read_done(*payload)
                elif kind == _RESOLVED:
                    self._resolved(*payload)
                elif kind == _READ_SAMPLE:
                    self._sample(*payload)
                else:
                    self._restart(payload)
            else:
                self.now = times[i]
                self.pending += 1
                came = self.workload.routers[i]
                relay = self.fleet.relay
                if relay is None or came == 0:
                    self._route(i, came, frozenset())
                else:
                    self._push(self.now + relay, _RETRY, (i, 0, frozenset()))
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
        if self.policy.routes:
            router.ticket += 1
            attempt = _Attempt(request, r, -1, router.ticket, tried)
            router.attempts[attempt.ticket] = attempt
            exclude = tuple(view.ids[i] for i in sorted(tried))
            self._commands(
                router,
                m.handle(
                    Routed(
                        ticket=attempt.ticket,
                        adapter=adapter,
                        path=adapter,
                        model=MODEL,
                        exclude=exclude,
                        now=self.now,
                    )
                ),
            )
            return
        candidates = [i for i in self.everyone if i not in tried] if tried else self.everyone
        index = router.chooser.choose(adapter, candidates, tried)
        if index is None:
            # Every replica it may try is avoided after a failure: try again after a load's time.
            self.deferred += 1
            self._push(self.now + max(self.fleet.load_time, 0.001), _RETRY, (request, r, frozenset()))
            return
        engine = self.engines[index]
        if self.policy.engine_loads:
            attempt = _Attempt(request, r, -1, 0, tried)
            position = self._assign(router, attempt, index)
            self._forward(attempt)
            self._capacity(engine, position)
            return
        router.ticket += 1
        ticket = router.ticket
        attempt = _Attempt(request, r, -1, ticket, tried)
        router.attempts[ticket] = attempt
        position = self._assign(router, attempt, index)
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
        engine_sequence = self.sequences[index]
        engine_sequence.append(self.workload.adapters[attempt.request])
        self.capacities[index].append(0)
        return len(engine_sequence) - 1

    def _capacity(self, engine: Engine, position: int) -> None:
        """What the replica held once the request was admitted: the capacity the policy had there."""
        self.capacities[engine.index][position] = max(
            engine.memory, len(engine.registry) + len(engine.loaded) + len(engine.resolving)
        )

    def _forward(self, attempt: _Attempt) -> None:
        """The granted request reaches its engine: 404, the engine's own load, or its queue."""
        request = attempt.request
        engine = self.engines[attempt.replica]
        adapter = self.workload.adapters[request]
        lora = engine.registry.get(adapter)
        if lora is None:
            if not self.policy.engine_loads:
                self._not_found(attempt, adapter)
                return
            # vLLM's resolver: the engine loads the adapter by its name first, one load per name.
            waiting = engine.resolving.get(adapter)
            job = Job(request, attempt.router, adapter, 0, self.workload.durations[request])
            self.jobs[request] = (attempt, job)
            if waiting is None:
                engine.resolving[adapter] = [job]
                self._loaded_from_disk(engine, adapter)
                done = engine.read(self.now)
                self._moved(engine)
                self._push(done, _RESOLVED, (engine, adapter, engine.epoch))
            else:
                waiting.append(job)
            return
        job = Job(request, attempt.router, adapter, lora, self.workload.durations[request])
        self.jobs[request] = (attempt, job)
        self._enqueue(engine, job)
        self._run(engine)

    def _enqueue(self, engine: Engine, job: Job) -> None:
        """The granted request joins its engine's queue, with why it would not start at once."""
        self.granted[job.request] = self.now
        self.holdups[job.request] = engine.holdup(job.lora, self.now)
        engine.enqueue(job)

    def _resolved(self, engine: Engine, adapter: str, epoch: int) -> None:
        """The engine's own load of ``adapter`` landed: its requests go into the queue with its id."""
        jobs = engine.resolving.pop(adapter)
        if epoch != engine.epoch:
            for job in jobs:
                attempt, _ = self.jobs.pop(job.request)
                self._leave(attempt)
                self._retry(attempt)
            return
        lora = engine.register(adapter, self.now)
        self._moved(engine)
        for job in jobs:
            job.lora = lora
            self._enqueue(engine, job)
        self._run(engine)

    def _run(self, engine: Engine) -> None:
        """Start what the engine's scheduler starts now."""
        for job in engine.schedule(self.now):
            engine.busy += job.duration
            self._push(job.end, _SERVICE_DONE, (job, job.end))
        self._moved(engine)

    def _moved(self, engine: Engine) -> None:
        """The running requests a read from disk paused end later: their old ends are stale."""
        for job in engine.moved:
            self._push(job.end, _SERVICE_DONE, (job, job.end))
        engine.moved.clear()

    def _service_done(self, job: Job, end: float) -> None:
        if job.end != end or job.request not in self.jobs:
            return  # a read from disk paused it since: its end moved on
        self.started[job.request] = job.start
        self.slot_seconds += end - job.start
        attempt, _ = self.jobs.pop(job.request)
        engine = self.engines[attempt.replica]
        engine.finish(job, self.now)
        self.pending -= 1
        self._end(attempt)
        self._run(engine)

    def _leave(self, attempt: _Attempt) -> None:
        """The request is no longer on its replica, for its router's count."""
        self.routers[attempt.router].view.outstanding[attempt.replica] -= 1

    def _end(self, attempt: _Attempt) -> None:
        """Release the request's lease."""
        self._leave(attempt)
        if not attempt.ticket:
            return
        router = self.routers[attempt.router]
        del router.attempts[attempt.ticket]
        self._commands(router, router.view.machine.handle(Released(ticket=attempt.ticket)))

    def _not_found(self, attempt: _Attempt, adapter: str) -> None:
        """The engine answered "no such model": report it, release, and route the request again."""
        self.missing += 1
        router = self.routers[attempt.router]
        m = router.view.machine
        del router.attempts[attempt.ticket]
        self._leave(attempt)
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
        assigned: list[tuple[Engine, int]] = []
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
                listed = tuple(sorted(engine.registry))
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
                    self._leave(attempt)
                    self.failed += 1
                self._retry(attempt)
            # MarkMet asks nothing of a shell that never waits for a replica to be met.
        for engine, position in assigned:
            self._capacity(engine, position)

    def _read(self, router: _Router, engine: Engine, read: int) -> None:
        """Read ``engine`` for the machine: whether it fails is drawn as it is sent
        (``read_failures``), its sample taken ``read_delay`` seconds later (at once when 0)."""
        self.reads += 1
        failed = self._read_fails()
        if failed:
            self.failed_reads += 1
        if self.fleet.read_delay > 0:
            self._push(self.now + self.fleet.read_delay, _READ_SAMPLE, (router, engine, read, failed))
        else:
            self._sample(router, engine, read, failed)

    def _sample(self, router: _Router, engine: Engine, read: int, failed: bool) -> None:
        """The engine's sample for a read (none for a failed one), answered ``read_latency`` seconds
        later (at once when it is 0)."""
        sample: tuple[tuple[str, ...], int, int, int] | None = (
            None
            if failed
            else (tuple(sorted(engine.requests)), len(engine.active), len(engine.queue), engine.max_loras)
        )
        latency = self.fleet.read_latency
        if latency > 0:
            self._push(self.now + latency, _READ_DONE, (router, read, sample))
        else:
            self._read_done(router, read, sample)

    def _read_fails(self) -> bool:
        """Whether the read being sent gets no answer (``read_failures``)."""
        return bool(self.fleet.read_failures) and self.read_rng.random() < self.fleet.read_failures

    def _read_done(
        self, router: _Router, read: int, sample: tuple[tuple[str, ...], int, int, int] | None
    ) -> None:
        machine = router.view.machine
        if sample is None and not self.fleet.failed_read_drops:
            self._commands(router, machine.handle(ReadingFailed(read=read, message="no answer")))
            return
        names, running, waiting, max_loras = sample or ((), None, None, None)
        reading = ReadingReceived(
            read=read, adapters=names, running=running, waiting=waiting, max_loras=max_loras
        )
        self._commands(router, machine.handle(reading))

    def _loaded_from_disk(self, engine: Engine, adapter: str) -> None:
        """A load of ``adapter`` from disk starts on ``engine``: count it, its copies and reloads."""
        self.load_times.append(self.now)
        for other in self.engines:
            if other is not engine and (
                adapter in other.registry or adapter in other.loaded or adapter in other.resolving
            ):
                self.copies += 1
                break
        evicted = self.evicted.get((engine.index, adapter))
        if evicted is not None and self.now - evicted <= RELOAD_WINDOW:
            self.reloads += 1

    def _issue_load(self, router: _Router, command: IssueLoad) -> None:
        engine = self.engine_by_id[command.replica]
        adapter = command.adapter
        router.loads[command.load] = (engine.index, adapter)
        waiting = engine.loaded.get(adapter)
        if waiting is not None:
            waiting.append((router.index, command.load))
            return
        if adapter in engine.registry:
            self._load_answered(router, command.load, LoadOutcome.ALREADY_LOADED)
            return
        engine.loaded[adapter] = [(router.index, command.load)]
        self._loaded_from_disk(engine, adapter)
        done = engine.read(self.now)
        self._moved(engine)
        self._push(done, _LOAD_DONE, (engine, adapter, engine.epoch))

    def _load_done(self, engine: Engine, adapter: str, epoch: int) -> None:
        if epoch != engine.epoch:
            return  # the engine restarted meanwhile; its waiters were answered then
        waiters = engine.loaded.pop(adapter)
        engine.register(adapter, self.now)
        self._moved(engine)
        for r, load in waiters:
            self._load_answered(self.routers[r], load, LoadOutcome.LOADED)

    def _load_answered(self, router: _Router, load: int, outcome: LoadOutcome) -> None:
        del router.loads[load]
        self._commands(router, router.view.machine.handle(LoadFinished(load=load, outcome=outcome)))

    def _issue_unload(self, router: _Router, command: IssueUnload) -> None:
        engine = self.engine_by_id[command.replica]
        adapter = command.adapter
        if engine.unregister(adapter, self.now):
            self.evicted[(engine.index, adapter)] = self.now
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
        engine.restart(self.now)
        loaded = engine.loaded
        engine.loaded = {}
        for waiters in loaded.values():
            for r, load in waiters:
                self._load_answered(self.routers[r], load, LoadOutcome.REPLICA_FAULT)

    def _check(self) -> None:
        for router in self.routers:
            if self.policy.engine_loads:
                continue
            m = router.view.machine
            m.check_invariants()
            seen = m.statistics().replicas
            for engine in self.engines:
                in_flight = seen[engine.id].in_flight
                mine = router.view.outstanding[engine.index]
                assert in_flight == mine, (engine.id, in_flight, mine)
                assert in_flight == sum(1 for a in router.attempts.values() if a.replica == engine.index)
        for engine in self.engines:
            # One over after every adapter in memory ran at a load (Engine._insert), until the next.
            assert len(engine.cache) <= engine.memory + 1, engine.id
            assert len(engine.running) <= engine.max_loras, (engine.id, engine.running)
            assert len(engine.active) <= engine.concurrency, engine.id

    # -- figures -------------------------------------------------------------------------------

    def _figures(self) -> Figures:
        n = len(self.workload)
        unsorted = [s - t for s, t in zip(self.started, self.workload.times, strict=True)]
        waits = sorted(unsorted)
        quarter = n // 4
        span = self.workload.times[-1] - self.workload.times[0] if n else 0.0
        slots = sum(e.concurrency for e in self.engines)
        grant_waits = [g - t for g, t in zip(self.granted, self.workload.times, strict=True)]
        end = self.now
        busy = [e.busy for e in self.engines]
        mean_busy = sum(busy) / len(busy)
        held_mean = 0.0
        for engine in self.engines:
            engine.account(end)
            held_mean += engine.held_area / end if end > 0 else 0.0
        belady = sum(
            belady_loads(sequence, capacities)
            for sequence, capacities in zip(self.sequences, self.capacities, strict=True)
        )
        engine_waits = [0.0, 0.0, 0.0, 0.0]
        for holdup, start, granted in zip(self.holdups, self.started, self.granted, strict=True):
            if holdup:
                engine_waits[holdup] += start - granted
        return Figures(
            policy=self.policy.name,
            requests=n,
            loads=sum(e.disk_reads for e in self.engines),
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
            rereads=sum(e.rereads for e in self.engines),
            drops=sum(e.drops for e in self.engines),
            load_times=tuple(self.load_times),
            span=span,
            utilisation=self.slot_seconds / (slots * span) if span > 0 else 0.0,
            wait_early=_mean(unsorted[quarter : 2 * quarter]),
            wait_late=_mean(unsorted[n - quarter :]) if quarter else 0.0,
            service_mean=_mean(self.workload.durations),
            engine_waits=(
                engine_waits[FULL] / n if n else 0.0,
                engine_waits[BATCH] / n if n else 0.0,
                engine_waits[READ] / n if n else 0.0,
            ),
        )


def _mean(values: list[float] | tuple[float, ...]) -> float:
    return sum(values) / len(values) if values else 0.0


def _percentile(ordered: list[float], q: float) -> float:
    """The nearest-rank percentile of a sorted list."""
    if not ordered:
        return 0.0
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def simulate(workload: Workload, fleet: Fleet, policy: Policy, *, seed: int = 1) -> Figures:
    """Run ``policy`` on ``workload`` over ``fleet`` and return its figures."""
    return Simulation(workload, fleet, policy, seed=seed).run()

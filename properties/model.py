"""A naive model of the machine: SPEC.md's rules written as plainly as they read.

Per replica a plain least-recently-used list of the idle adapters (``lru``, first to go first), dicts
of what is held, loading and unloading, and a counter for operation numbers. The property tests feed
every event to the model and to the machine and want the same commands, in the same order, and the
same statistics, view, next due time and met replicas after every step: the model predicts what the
machine decides, not only that it is safe.

Where the machine dates things with a logical clock, the model says what the rule says: a listing
drops the adapters that were held *when it started* (``at_listing_start``, by identity), and keeps
out of its additions those dropped *while it was out* (``dropped_while_listing``).

It follows [refuse], [health], [cap] (a queue per replica, raised by the engine's ``max_loras``, and
closed to a load that would take a victim while more adapters are in use than one batch runs, or
while more requests are granted there than the engine runs at once),
[evict] (least recently used victims, unloaded once their load lands, held again if it fails),
[settle], [read] (the reads it asks for, and the requests that
wait for them), [reading] (a reading of only this router's own requests stands as empty),
[read-failed], [share] (each replica's line, from its last listing and what the engine lost since),
[load] (the engine's counts as readings gave them) and [route]. Its [place] is SPEC §3.12 read
literally: every candidate scanned, every key built and compared, no index and no cache, so that the
machine's indexed placement is checked against the plain one after every step; ``decide`` says where a
request goes before it is sent (its victims included), and ``unseen_state`` what no query shows (the
idle order the victims come from, the line, demand and [load]'s figures). It keeps the logical
clock the idle stamps come from (§1.2), which placement compares across replicas. It does not follow
[pin]: the properties send no pins.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from lorafleet import (
    DEFAULT_BACKOFF,
    DEFAULT_HALF_LIFE,
    DEFAULT_LISTING_INTERVAL,
    DEFAULT_MAX_BACKOFF,
    DEFAULT_REFUSAL,
    AdapterChanged,
    AdapterDismissed,
    AdapterMissing,
    AdapterPinned,
    AdapterUnpinned,
    Assign,
    Cancelled,
    Command,
    Event,
    Fail,
    Fault,
    Grant,
    How,
    IssueLoad,
    IssueUnload,
    LimitSet,
    ListingFailed,
    ListingReceived,
    LoadFinished,
    LoadOutcome,
    MarkMet,
    NotIdleError,
    Placed,
    Placement,
    ReadEngine,
    Reading,
    ReadingFailed,
    ReadingReceived,
    ReadListing,
    RefusalForgotten,
    Released,
    ReplicaAdded,
    ReplicaFailed,
    ReplicasRemoved,
    ReplicaStatistics,
    Requested,
    Routed,
    ServedElsewhere,
    StandingBy,
    Statistics,
    TimeAdvanced,
    UnknownReplicaError,
    UnloadFinished,
    UnloadOutcome,
    View,
)

REMOVED = "the replica was removed while the request waited"
SPILL_MARGIN = 2
"""[place] step 3: how much shorter another engine's queue must be for a request to leave its holder."""
REFRESH = 4
"""[read]: requests sent to a replica other routers use before its reading is stale."""
KINDS = {0: Placed.FREE, 1: Placed.OVER, 2: Placed.EVICT, 3: Placed.OVER, 4: Placed.WAIT}
"""[place]: how a cold load is placed, by the kind of its replica."""


@attrs.define(eq=False)
class Copy:
    """One held copy of an adapter on a replica; a lease is on a copy, not on a name."""

    replica: Replica
    adapter: str
    users: int
    current: bool = True
    """False once the replica stopped holding this copy: releasing a lease on it does nothing."""


@attrs.define(eq=False)
class Load:
    op: int
    adapter: str
    path: str
    waiters: list[int]
    starter: int | None
    victims: list[Unload] = attrs.field(factory=list)
    """The adapters whose room it takes: unloaded once it lands, held again if it fails ([evict])."""


@attrs.define(eq=False)
class Unload:
    op: int | None
    """None while it is a victim whose load is out."""
    adapter: str
    waiters: list[tuple[int, str]] = attrs.field(factory=list)
    copy: Copy | None = None
    """A victim's copy and its idle stamp, to hold it again as it was."""
    stamp: int = 0


@attrs.define(eq=False)
class Listing:
    op: int


@attrs.define(eq=False)
class Route:
    """A routed request's placement record ([route])."""

    ticket: int
    adapter: str
    path: str
    model: str | None
    exclude: frozenset[str]
    read: set[str] = attrs.field(factory=set)
    """The replicas read for it so far."""


@attrs.define(eq=False)
class Read:
    """A read of an engine ([read]), and the requests (ticket, adapter, path, route) waiting for its
    answer: ``route`` is None for a ``requested`` one."""

    op: int
    in_flight: int
    """The replica's requests counted when the read went out ([load])."""
    served: int
    """The replica's ``served`` when the read went out ([load], [read]'s staleness)."""
    waiters: list[tuple[int, str, str, Route | None]] = attrs.field(factory=list)
    ended: set[str] = attrs.field(factory=set)
    """Adapters whose last request of this router there ended while it was out ([reading])."""


@attrs.define(eq=False)
class Replica:
    id: str
    model: str
    limit: int
    due: float
    held: dict[str, Copy] = attrs.field(factory=dict)
    lru: list[str] = attrs.field(factory=list)
    """The idle held adapters, least recently used first."""
    stamps: dict[str, int] = attrs.field(factory=dict)
    """The idle stamp each adapter took as it last entered ``lru`` (below 0 at the front, from a
    listing: counting down from ``front``)."""
    front: int = 0
    loading: dict[str, Load] = attrs.field(factory=dict)
    unloading: dict[str, Unload] = attrs.field(factory=dict)
    listing: Listing | None = None
    at_listing_start: list[Copy] = attrs.field(factory=list)
    dropped_while_listing: set[str] = attrs.field(factory=set)
    met: bool = False
    removed: bool = False
    out: set[int] = attrs.field(factory=set)
    """Operations issued to it and not yet answered."""
    queue: list[tuple[int, str, str]] = attrs.field(factory=list)
    """(ticket, adapter, path) of cold requests waiting for room at its cap, first come first served."""
    failures: int = 0
    """Its faults in a row ([health])."""
    avoid_until: float = 0.0
    in_flight: int = 0
    """Requests counted on it that have not ended."""
    named: set[str] = attrs.field(factory=set)
    """What the engine last said runs on it, from any router ([reading]): never in ``lru``."""
    listed_since_reading: bool = False
    """A listing of it was received after that reading ([read-failed])."""
    read: Read | None = None
    names_adapters: bool = False
    """Its engine's last answered read named what runs there ([read])."""
    foreign: bool = False
    """That reading named an adapter none of this router's requests ran on there ([reading])."""
    settle: bool = False
    """A load landed over its limit and waits for the read out to unload the excess ([settle])."""
    max_loras: int | None = None
    """What the engine said one batch may use ([cap])."""
    served: int = 0
    """This router's requests counted on it, ever."""
    sampled: tuple[int, int] | None = None
    """The engine's (running, waiting) as the last reading that gave both counted them ([load])."""
    others: int = 0
    read_served: int = 0
    seqs: int | None = None
    ran: int = 0
    calm: int = 0
    base: int = 0
    """Its count when its last listing was applied, or when it was added ([share])."""
    unseen: int = 0
    """Adapters the engine lost since then without this router's unload ([share])."""

    def count(self) -> int:
        return len(self.held) + len(self.loading)


@attrs.define
class Model:
    """What the machine should do, event by event. It is given only events the contract allows.

    Its settings are the machine's, with the same defaults.
    """

    interval: float = DEFAULT_LISTING_INTERVAL
    headroom: int | None = None
    backoff: float = DEFAULT_BACKOFF
    max_backoff: float = DEFAULT_MAX_BACKOFF
    refusal: float = DEFAULT_REFUSAL
    half_life: int = DEFAULT_HALF_LIFE
    read_engine: bool = False
    concurrency: int | None = None
    overflow: int = 2
    routers: int = 1
    clock: int = 0
    """The logical clock of idle stamps (§1.2)."""
    demand: dict[str, int] = attrs.field(factory=dict)
    """Requests per adapter, all halved every ``half_life`` requests ([evict])."""
    requests: int = 0
    counted: dict[int, Replica] = attrs.field(factory=dict)
    """The replica each request not yet ended is counted on."""
    refused: dict[str, tuple[float, str]] = attrs.field(factory=dict)
    """Adapters the engine refused as their own fault: until when, and its words."""
    replicas: dict[str, Replica] = attrs.field(factory=dict)
    ops: dict[int, tuple[Replica, Load | Unload | Listing | Read]] = attrs.field(factory=dict)
    next_op: int = 1
    last_ticket: int = 0
    now: float = 0.0
    standing_by: bool = False
    """[standby]: another router decides for this one."""
    leases: dict[int, Copy] = attrs.field(factory=dict)
    waiting: dict[int, Load | Unload | Replica | Read] = attrs.field(factory=dict)
    """What each waiting request waits for: a load, an unload, room at a replica's cap, or a read."""
    loads: dict[tuple[str, str], int] = attrs.field(factory=dict)
    evictions: dict[tuple[str, str], int] = attrs.field(factory=dict)
    grants: dict[str, int] = attrs.field(factory=lambda: {h.value: 0 for h in How})
    failures: dict[str, int] = attrs.field(factory=dict)

    def handle(self, event: Event) -> list[Command]:
        """The commands ``event`` should give, in order."""
        match event:
            case Requested():
                return self.requested(event)
            case Released():
                return self.release(event.ticket)
            case Cancelled():
                return self.cancel(event.ticket)
            case LoadFinished():
                return self.load_finished(event)
            case UnloadFinished():
                return self.unload_finished(event)
            case ListingReceived():
                return self.listing_received(event.listing, event.adapters)
            case ListingFailed():
                return self.listing_failed(event.listing)
            case AdapterMissing():
                return self.adapter_missing(event.replica, event.adapter, event.ticket)
            case ReplicaFailed():
                if event.replica in self.replicas and not self.replicas[event.replica].removed:
                    self.fault(self.replicas[event.replica])
                return []
            case ReplicaAdded():
                return self.replica_added(event.replica, event.model, event.limit)
            case ReplicasRemoved():
                return self.replicas_removed(event.replicas)
            case LimitSet():
                return self.limit_set(event.model, event.limit)
            case TimeAdvanced():
                return self.time_advanced(event.now)
            case StandingBy():
                return self.stood_by(event.on)
            case ReadingReceived():
                counted = event.running is not None and event.waiting is not None
                return self.reading_answered(
                    event.read,
                    event.adapters,
                    failed=False,
                    max_loras=event.max_loras,
                    counts=(event.running or 0, event.waiting or 0) if counted else None,
                )
            case ReadingFailed():
                return self.reading_answered(event.read, None, failed=True)
            case ServedElsewhere():
                # [blame]: each replica that answered a 5xx to what the replica then served failed.
                for replica in sorted(set(event.failed) - {event.replica}):
                    rep = self.replicas.get(replica)
                    if rep is not None and not rep.removed:
                        self.fault(rep)
                return []
            case Routed():
                self.last_ticket = event.ticket
                route = Route(event.ticket, event.adapter, event.path, event.model, frozenset(event.exclude))
                return self.place_route(route)
            case RefusalForgotten():
                # [forgive]: with no pins, only the record goes.
                if event.adapter is None:
                    self.refused.clear()
                else:
                    self.refused.pop(event.adapter, None)
                return []
            case AdapterDismissed():
                return self.dismiss(event.replica, event.adapter)
            case AdapterPinned() | AdapterUnpinned() | AdapterChanged():
                # The properties send no pins.
                raise NotImplementedError(f"the model does not follow {type(event).__name__}")

    def hit(self, ticket: int, replica: str, adapter: str) -> bool:
        """The fast path: True, and the request holds a lease, when the replica holds the adapter."""
        rep = self.replicas[replica]
        if adapter not in rep.held:
            return False
        self.last_ticket = ticket
        self.count(ticket, rep, adapter)
        self.use(ticket, rep, rep.held[adapter])
        return True

    def count(self, ticket: int, rep: Replica, adapter: str) -> None:
        """A request counts: in flight on its replica until it ends, and one more for its adapter's demand."""
        self.counted[ticket] = rep
        rep.in_flight += 1
        rep.served += 1
        self.demand[adapter] = self.demand.get(adapter, 0) + 1
        self.requests += 1
        if self.requests % self.half_life == 0:
            self.demand = {a: n // 2 for a, n in self.demand.items() if n // 2}

    def ended(self, ticket: int) -> None:
        """A request ended: off its replica's count, unless it was routed and never assigned."""
        rep = self.counted.pop(ticket, None)
        if rep is not None:
            rep.in_flight -= 1

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def idle(self, rep: Replica, adapter: str, stamp: int) -> None:
        """``adapter`` enters ``idle`` at its end, most recently used, stamped ``stamp``."""
        rep.lru.append(adapter)
        rep.stamps[adapter] = stamp

    # -- requests -----------------------------------------------------------------------------------

    def requested(self, event: Requested) -> list[Command]:
        self.last_ticket = event.ticket
        rep = self.replicas[event.replica]
        self.count(event.ticket, rep, event.adapter)
        refused = self.refused.get(event.adapter)
        if refused is not None and event.adapter not in rep.held:  # held: the engine took it there
            until, message = refused
            if until > self.now:  # [refuse]: the engine's words again, without a call
                return [self.fail(event.ticket, Fault.ADAPTER, message)]
            del self.refused[event.adapter]
        return self.admit(event.ticket, rep, event.adapter, event.path, first=True)

    def admit(
        self, ticket: int, rep: Replica, adapter: str, path: str, *, first: bool = False
    ) -> list[Command]:
        if adapter in rep.held:  # [hit]
            self.use(ticket, rep, rep.held[adapter])
            return [Grant(ticket=ticket, how=How.HIT)]
        if adapter in rep.loading:  # [join]
            load = rep.loading[adapter]
            load.waiters.append(ticket)
            self.waiting[ticket] = load
            return []
        if adapter in rep.unloading:  # [wait-unload]
            unload = rep.unloading[adapter]
            unload.waiters.append((ticket, path))
            self.waiting[ticket] = unload
            return []
        # [read]: the first time a request is admitted, a replica whose load would evict first, where
        # another router's request ran at the last reading (or whose first read is out), is read
        # first, and the request waits for the answer.
        if first and self.needs_reading(rep):
            return self.wait_for_reading(ticket, rep, adapter, path, None)
        return self.cold(ticket, rep, adapter, path)

    def wait_for_reading(
        self, ticket: int, rep: Replica, adapter: str, path: str, route: Route | None
    ) -> list[Command]:
        commands: list[Command] = []
        if rep.read is None:
            commands.append(self.start_read(rep))
        assert rep.read is not None
        rep.read.waiters.append((ticket, adapter, path, route))
        self.waiting[ticket] = rep.read
        return commands

    def wants_reading(self, rep: Replica) -> bool:
        return self.read_engine and (rep.foreign if rep.names_adapters else rep.read is not None)

    def needs_reading(self, rep: Replica) -> bool:
        """[read]: a cold load here would take a victim, and the replica wants a reading."""
        return self.wants_reading(rep) and rep.count() + 1 > self.line(rep)

    def stale(self, rep: Replica) -> bool:
        """[read]: a request assigned here asks for a fresh reading, and does not wait for it."""
        if not self.read_engine or not rep.names_adapters or rep.read is not None:
            return False
        if rep.foreign and rep.served - rep.read_served >= REFRESH:
            return True
        return (
            rep.sampled is not None and self.capacity(rep) is None and rep.in_flight + rep.others > rep.calm
        )

    def line(self, rep: Replica) -> int:
        """[share]: the count a landed load brings the replica back to."""
        if self.routers == 1:
            return rep.limit
        free = rep.limit - rep.base
        if free > 0:
            return max(1, rep.base + -(-free // self.routers) - rep.unseen)
        return max(1, rep.limit - rep.unseen)

    def granted(self, rep: Replica) -> int:
        """[cap]: this router's requests granted on ``rep`` and not released: on its engine."""
        return sum(1 for copy in self.leases.values() if copy.replica is rep)

    def at_cap(self, rep: Replica) -> bool:
        """[cap]: the adapters no request could give up reach the cap, or a load would take a victim
        while more are in use than one batch of the engine runs, or while the engine queues (more
        requests granted there, with the other routers', than its capacity)."""
        if self.headroom is None:
            return False
        capacity = self.capacity(rep)
        queues = capacity is not None and self.granted(rep) + rep.others > capacity
        if queues and rep.count() >= self.line(rep):
            return True
        in_use = rep.count() - len(rep.lru)
        if in_use >= max(self.line(rep) + self.headroom, rep.max_loras or 0):
            return True
        return rep.max_loras is not None and rep.count() >= self.line(rep) and in_use > rep.max_loras

    def start_read(self, rep: Replica) -> ReadEngine:
        rep.read = Read(self.new_op(rep), rep.in_flight, rep.served)
        self.ops[rep.read.op] = (rep, rep.read)
        return ReadEngine(read=rep.read.op, replica=rep.id)

    def reading_answered(
        self,
        op: int,
        names: Iterable[str] | None,
        *,
        failed: bool,
        max_loras: int | None = None,
        counts: tuple[int, int] | None = None,
    ) -> list[Command]:
        """[reading], [read-failed]: the reading replaces the last (a failed read: an empty one, only
        after a listing since); a pending [settle]; then the requests that waited for it are admitted
        afresh, in order."""
        rep, read, live = self.answered(op)
        if not live or rep.read is not read:
            return []
        assert isinstance(read, Read)
        rep.read = None
        commands: list[Command] = []
        if not failed:
            rep.names_adapters = names is not None
            rep.read_served = read.served
            if counts is not None:  # [load]
                running, waiting = counts
                rep.sampled = counts
                rep.others = max(0, running + waiting - read.in_flight)
                rep.ran = max(rep.ran, running)
                if waiting > 0:
                    rep.seqs = max(rep.ran, rep.seqs or 1)
                else:
                    rep.calm = max(rep.calm, read.in_flight + rep.others)
            raised = max_loras is not None and max_loras > (rep.max_loras or 0)
            if max_loras:
                rep.max_loras = max_loras
            named = set(names or ())
            # Only this router's own running requests: nothing of another router's, an empty reading.
            # Or requests the engine counts beyond this router's own when the read went out.
            others = counts is not None and rep.others > 0
            rep.foreign = others or any(
                name not in rep.held or not (rep.held[name].users or name in read.ended) for name in named
            )
            commands += self.new_reading(rep, named if rep.foreign else set())
            if raised:  # [cap]: the cap may have risen
                commands += self.admit_queued(rep)
        elif rep.listed_since_reading:
            commands += self.new_reading(rep, set())
        if rep.settle:
            rep.settle = False
            commands += self.unload_excess(rep)
        for ticket, adapter, path, route in read.waiters:
            del self.waiting[ticket]
            if route is None:
                commands += self.admit(ticket, rep, adapter, path)
            else:
                commands += self.place_route(route)
        return commands

    def use(self, ticket: int, rep: Replica, copy: Copy) -> None:
        if copy.adapter in rep.lru:
            rep.lru.remove(copy.adapter)
        copy.users += 1
        self.leases[ticket] = copy
        self.grants[How.HIT.value] += 1

    def cold(self, ticket: int, rep: Replica, adapter: str, path: str) -> list[Command]:
        """[cold] and [evict]: the load goes out at once, taking the room of the least recently used
        idle adapters past the line; [cap]: wait for room instead when the replica is at its cap."""
        if self.at_cap(rep):
            rep.queue.append((ticket, adapter, path))
            self.waiting[ticket] = rep
            return []
        load = Load(self.new_op(rep), adapter, path, [ticket], ticket)
        rep.loading[adapter] = load
        self.ops[load.op] = (rep, load)
        self.waiting[ticket] = load
        excess = rep.count() - self.line(rep)
        while excess > 0 and rep.lru:
            excess -= 1
            victim = rep.lru.pop(0)
            unload = Unload(None, victim, copy=rep.held[victim], stamp=rep.stamps[victim])
            self.drop(rep, victim)
            rep.unloading[victim] = unload
            load.victims.append(unload)
        return [IssueLoad(load=load.op, replica=rep.id, adapter=adapter, path=path)]

    def issue_unload(self, rep: Replica, unload: Unload) -> IssueUnload:
        unload.op = self.new_op(rep)
        self.ops[unload.op] = (rep, unload)
        return IssueUnload(unload=unload.op, replica=rep.id, adapter=unload.adapter)

    def unload_excess(self, rep: Replica) -> list[Command]:
        """[settle]: down to the line, idle adapters least recently used first; loads still out do not
        count."""
        commands: list[Command] = []
        excess = len(rep.held) - self.line(rep)
        while excess > 0 and rep.lru:
            excess -= 1
            victim = rep.lru.pop(0)
            self.drop(rep, victim)
            rep.unloading[victim] = Unload(None, victim)
            commands.append(self.issue_unload(rep, rep.unloading[victim]))
        return commands

    def dismiss(self, replica: str, adapter: str) -> list[Command]:
        """[dismiss]: an idle adapter is unloaded now, as [settle] unloads; anything else is refused."""
        rep = self.replicas.get(replica)
        if rep is None or rep.removed:
            raise UnknownReplicaError(replica, replica=replica)
        if adapter not in rep.lru:
            raise NotIdleError(adapter, replica=replica, adapter=adapter, reason="")
        rep.lru.remove(adapter)
        self.drop(rep, adapter)
        rep.unloading[adapter] = Unload(None, adapter)
        return [self.issue_unload(rep, rep.unloading[adapter])]

    def release(self, ticket: int) -> list[Command]:
        copy = self.leases.pop(ticket, None)
        if copy is None:
            return []  # ended already
        self.ended(ticket)
        copy.users -= 1
        rep = copy.replica
        if copy.users or not copy.current:
            capacity = self.capacity(rep)
            drained = capacity is not None and self.granted(rep) + rep.others == capacity
            if rep.queue and not rep.removed and drained:
                return self.admit_queued(rep)  # [cap]: the engine's queue emptied: room
            return []
        if rep.removed:  # kept only while requests ran on it
            self.drop(rep, copy.adapter)
            self.forget_if_done(rep)
            return []
        if rep.read is not None:
            rep.read.ended.add(copy.adapter)  # a sample taken before it ended may name it
        if copy.adapter in rep.named:
            # Named by the last reading: not idle; with requests waiting at the cap, read again.
            if self.read_engine and rep.queue and rep.read is None:
                return [self.start_read(rep)]
            return []
        self.idle(rep, copy.adapter, self.tick())
        return self.admit_queued(rep)

    def cancel(self, ticket: int) -> list[Command]:
        if ticket in self.leases:
            return self.release(ticket)
        waited = self.waiting.pop(ticket, None)
        if waited is not None:
            self.ended(ticket)
        if isinstance(waited, Load):
            waited.waiters.remove(ticket)
            if waited.starter == ticket:
                waited.starter = None
        elif isinstance(waited, Unload):
            waited.waiters = [(t, p) for t, p in waited.waiters if t != ticket]
        elif isinstance(waited, Replica):
            waited.queue = [w for w in waited.queue if w[0] != ticket]
        elif isinstance(waited, Read):  # a routed request not yet assigned was counted nowhere
            waited.waiters = [w for w in waited.waiters if w[0] != ticket]
        return []

    def admit_queued(self, rep: Replica) -> list[Command]:
        """[cap]: the requests waiting for room, in order, while there is room (or their adapter is known)."""
        commands: list[Command] = []
        while rep.queue:
            ticket, adapter, path = rep.queue[0]
            known = adapter in rep.held or adapter in rep.loading or adapter in rep.unloading
            if not known and self.at_cap(rep):
                break
            rep.queue.pop(0)
            del self.waiting[ticket]
            commands += self.admit(ticket, rep, adapter, path)
        return commands

    # -- answers ------------------------------------------------------------------------------------

    def answered(self, op: int) -> tuple[Replica, Load | Unload | Listing | Read, bool]:
        """Take ``op`` off the books; the bool is False when the answer is to be ignored (removed)."""
        rep, what = self.ops.pop(op)
        rep.out.discard(op)
        if rep.removed:
            self.forget_if_done(rep)
            return rep, what, False
        return rep, what, True

    def load_finished(self, event: LoadFinished) -> list[Command]:
        rep, load, live = self.answered(event.load)
        assert isinstance(load, Load)
        del rep.loading[load.adapter]
        key = (rep.model, event.outcome.value)
        self.loads[key] = self.loads.get(key, 0) + 1
        if not live:
            return []
        if event.outcome is LoadOutcome.REPLICA_FAULT:
            self.fault(rep)
        else:
            self.healthy(rep)
        if event.outcome is LoadOutcome.ADAPTER_FAULT:
            message = event.message or f"the load of '{load.adapter}' on '{rep.id}' failed"
            self.refused[load.adapter] = (self.now + self.refusal, message)
        commands: list[Command] = []
        if event.outcome.succeeded:
            copy = Copy(rep, load.adapter, len(load.waiters))
            rep.held[load.adapter] = copy
            since = self.tick()
            if not load.waiters and load.adapter not in rep.named:
                self.idle(rep, load.adapter, since)
            for ticket in load.waiters:
                del self.waiting[ticket]
                self.leases[ticket] = copy
                how = How.LOADED if ticket == load.starter else How.JOINED
                self.grants[how.value] += 1
                commands.append(Grant(ticket=ticket, how=how))
            commands += [self.issue_unload(rep, victim) for victim in load.victims]  # [evict]
            if len(rep.held) > self.line(rep) and rep.lru:  # [settle]
                if self.wants_reading(rep):
                    rep.settle = True
                    if rep.read is None:
                        commands.append(self.start_read(rep))
                else:
                    commands += self.unload_excess(rep)
        else:
            fault = Fault.ADAPTER if event.outcome is LoadOutcome.ADAPTER_FAULT else Fault.REPLICA
            message = event.message or f"the load of '{load.adapter}' on '{rep.id}' failed"
            for ticket in load.waiters:
                del self.waiting[ticket]
                commands.append(self.fail(ticket, fault, message))
            # [evict]: the engine took no room for it: its victims are held again, where they were.
            for victim in load.victims:
                del rep.unloading[victim.adapter]
                assert victim.copy is not None
                victim.copy.current = True
                rep.held[victim.adapter] = victim.copy
                if victim.adapter not in rep.named:
                    rep.stamps[victim.adapter] = victim.stamp
                    rep.lru.append(victim.adapter)
                    rep.lru.sort(key=lambda name: rep.stamps[name])
            for victim in load.victims:
                for ticket, path in victim.waiters:
                    del self.waiting[ticket]
                    commands += self.admit(ticket, rep, victim.adapter, path)
        return commands + self.admit_queued(rep)

    def unload_finished(self, event: UnloadFinished) -> list[Command]:
        rep, unload, live = self.answered(event.unload)
        assert isinstance(unload, Unload)
        del rep.unloading[unload.adapter]
        key = (rep.model, event.outcome.value)
        self.evictions[key] = self.evictions.get(key, 0) + 1
        if not live:
            return []
        if rep.listing is not None:
            rep.dropped_while_listing.add(unload.adapter)
        commands: list[Command] = []
        if self.routers > 1 and event.outcome is UnloadOutcome.NOT_FOUND:
            rep.unseen += 1  # [share]: another router's adapter took the slot
        for ticket, path in unload.waiters:
            del self.waiting[ticket]
            commands += self.admit(ticket, rep, unload.adapter, path)
        return commands

    # -- listings -----------------------------------------------------------------------------------

    def time_advanced(self, now: float) -> list[Command]:
        self.now = now
        commands: list[Command] = []
        due = sorted((rep.due, rep.id) for rep in self.in_use() if rep.due <= now)
        for _, replica in due:
            rep = self.replicas[replica]
            rep.due = now + self.interval
            if rep.listing is None:
                commands.append(self.start_listing(rep))
        return commands

    def stood_by(self, on: bool) -> list[Command]:
        """[standby]: deciding again, every replica in use with no listing out is listed now."""
        was, self.standing_by = self.standing_by, on
        if on or not was:
            return []
        commands: list[Command] = []
        for rep in sorted(self.in_use(), key=lambda r: r.id):
            if rep.listing is None:
                rep.due = self.now + self.interval
                commands.append(self.start_listing(rep))
        return commands

    def start_listing(self, rep: Replica) -> ReadListing:
        rep.listing = Listing(self.new_op(rep))
        self.tick()  # the listing's start, which the machine dates by this clock
        self.ops[rep.listing.op] = (rep, rep.listing)
        # A victim whose load is out is still on the engine, and is held again, as it was, if that
        # load fails: the listing judges its copy too.
        victims = [u.copy for u in rep.unloading.values() if u.op is None and u.copy is not None]
        rep.at_listing_start = [*rep.held.values(), *victims]
        rep.dropped_while_listing = set()
        return ReadListing(listing=rep.listing.op, replica=rep.id)

    def listing_answered(self, op: int) -> tuple[Replica | None, list[Command]]:
        """The replica whose listing ``op`` was answered (None when the answer is ignored), and the
        ``MarkMet`` if it is the replica's first since it was added."""
        rep, listing, live = self.answered(op)
        if not live or rep.listing is not listing:
            return None, []
        rep.listing = None
        if rep.met:
            return rep, []
        rep.met = True
        return rep, [MarkMet(replica=rep.id)]

    def listing_received(self, op: int, names: Iterable[str]) -> list[Command]:
        rep, commands = self.listing_answered(op)
        if rep is None:
            return []
        self.healthy(rep)
        listed = set(names)
        # The engine does not have what it does not list: held since before the listing started,
        # the copy goes, in use or not (its leases go dead; nothing to unload).
        for copy in rep.at_listing_start:
            if copy.current and copy.adapter not in listed:
                self.stop_holding(rep, copy.adapter)
        known = rep.held.keys() | rep.loading.keys() | rep.unloading.keys() | rep.dropped_while_listing
        added = sorted(listed - known)
        self.tick()  # one for the whole listing: what it adds became held then
        for name in reversed(added):
            rep.held[name] = Copy(rep, name, 0)
            rep.front -= 1  # at the front: older than anything, the stamps still rising along lru
            rep.stamps[name] = rep.front
        rep.lru = [name for name in added if name not in rep.named] + rep.lru
        rep.dropped_while_listing = set()
        rep.base, rep.unseen = rep.count(), 0  # [share]: shared afresh
        rep.listed_since_reading = True
        commands += self.admit_queued(rep)
        if self.read_engine and rep.read is None:
            commands.append(self.start_read(rep))
        return commands

    def listing_failed(self, op: int) -> list[Command]:
        rep, commands = self.listing_answered(op)
        if rep is not None:
            rep.dropped_while_listing = set()
            self.fault(rep)
        return commands

    def adapter_missing(self, replica: str, adapter: str, ticket: int | None) -> list[Command]:
        """[forget]: the copy held goes, in use or not, unless the report is about another copy."""
        rep = self.replicas.get(replica)
        if rep is None or rep.removed or adapter not in rep.held:
            return []
        if ticket is not None and self.leases.get(ticket) is not rep.held[adapter]:
            return []  # its request ran on an older copy, or has ended: the report may be stale
        self.stop_holding(rep, adapter)
        rep.unseen += 1  # [share]: the engine lost it without this router's unload
        return self.admit_queued(rep)

    def stop_holding(self, rep: Replica, adapter: str) -> None:
        if adapter in rep.lru:
            rep.lru.remove(adapter)
        self.drop(rep, adapter)

    def drop(self, rep: Replica, adapter: str) -> None:
        rep.held.pop(adapter).current = False
        if rep.listing is not None:
            rep.dropped_while_listing.add(adapter)

    # -- replicas -----------------------------------------------------------------------------------

    def replica_added(self, replica: str, model: str, limit: int) -> list[Command]:
        rep = self.replicas.get(replica)
        if rep is not None and not rep.removed:
            rep.limit = limit
            return self.admit_queued(rep)
        due = self.now + self.interval
        if rep is None:
            rep = self.replicas[replica] = Replica(replica, model, limit, due)
        else:  # still answering calls, or running requests, from before its removal: they carry on
            rep.removed, rep.model, rep.limit, rep.met, rep.due = False, model, limit, False, due
        rep.base, rep.unseen = rep.count(), 0  # [share]: what it knows
        return [self.start_listing(rep)]

    def new_reading(self, rep: Replica, names: set[str]) -> list[Command]:
        """[reading]: ``names`` replace the last reading; those it no longer names, held with no
        request of this router on them, are idle again, most recently used, in name order."""
        before, rep.named, rep.listed_since_reading = rep.named, names, False
        rep.lru = [name for name in rep.lru if name not in names]
        freed = [name for name in sorted(before - names) if name in rep.held and rep.held[name].users == 0]
        for name in freed:
            self.idle(rep, name, self.tick())
        return self.admit_queued(rep) if freed else []

    def replicas_removed(self, replicas: Iterable[str]) -> list[Command]:
        failed: list[int] = []
        rerouted: list[Route] = []
        for replica in replicas:
            rep = self.replicas.get(replica)
            if rep is None or rep.removed:
                continue
            rep.removed = True
            rep.named, rep.listed_since_reading, rep.names_adapters = set(), False, False
            rep.foreign, rep.settle, rep.max_loras = False, False, None
            rep.sampled, rep.others, rep.read_served, rep.seqs, rep.ran, rep.calm = None, 0, 0, None, 0, 0
            if rep.read is not None:  # abandoned: its answer is ignored; its requests fail, or go elsewhere
                failed += [t for t, _, _, route in rep.read.waiters if route is None]
                rerouted += [route for _, _, _, route in rep.read.waiters if route is not None]
                rep.read = None
            # Idle adapters go (those a reading named too); those requests still run on are kept, unseen,
            # until they end.
            for name in [name for name, copy in rep.held.items() if copy.users == 0]:
                self.drop(rep, name)
            rep.lru = []
            for load in rep.loading.values():
                failed += load.waiters
                load.waiters = []
                load.starter = None
                load.victims = []
            for name, unload in list(rep.unloading.items()):
                failed += [t for t, _ in unload.waiters]
                unload.waiters = []
                if unload.op is None:  # a victim whose load is out: never unloaded now
                    del rep.unloading[name]
            failed += [t for t, _, _ in rep.queue]
            rep.queue = []
            rep.listing = None
            rep.dropped_while_listing = set()
            self.forget_if_done(rep)
        for ticket in failed:
            del self.waiting[ticket]
        for route in rerouted:
            del self.waiting[route.ticket]
        commands: list[Command] = [self.fail(ticket, Fault.REPLICA, REMOVED) for ticket in sorted(failed)]
        for route in sorted(rerouted, key=lambda r: r.ticket):
            commands += self.place_route(route)
        return commands

    def limit_set(self, model: str, limit: int) -> list[Command]:
        commands: list[Command] = []
        for rep in sorted(self.in_use(), key=lambda r: r.id):
            if rep.model == model:
                rep.limit = limit
                commands += self.admit_queued(rep)
        return commands

    def forget_if_done(self, rep: Replica) -> None:
        if rep.removed and not rep.out and not rep.held and self.replicas.get(rep.id) is rep:
            del self.replicas[rep.id]

    def in_use(self) -> list[Replica]:
        return [rep for rep in self.replicas.values() if not rep.removed]

    # -- what the machine tells ---------------------------------------------------------------------

    def view(self, replicas: Iterable[str], adapter: str) -> View:
        holders, with_room = set(), set()
        for replica in replicas:
            rep = self.replicas.get(replica)
            if rep is None or rep.removed:
                with_room.add(replica)
                continue
            if adapter in rep.held or adapter in rep.loading:
                holders.add(replica)
            if rep.count() < self.line(rep) and rep.avoid_until <= self.now:
                with_room.add(replica)
        return View(holders=frozenset(holders), with_room=frozenset(with_room))

    def next_due(self) -> float | None:
        return min((rep.due for rep in self.in_use()), default=None)

    # -- [place] and [route] ------------------------------------------------------------------------

    def capacity(self, rep: Replica) -> int | None:
        """[load]: ``concurrency`` when set, else what readings showed; None: not known."""
        return self.concurrency if self.concurrency is not None else rep.seqs

    def kind(self, rep: Replica, adapter: str) -> tuple[int, int, int]:
        """[place]: what a cold load of ``adapter`` would cost on ``rep``: (kind, a, b)."""
        if self.at_cap(rep):
            return 4, 0, 0
        if rep.count() < self.line(rep):
            return 0, 0, 0
        if not rep.lru:
            return (1 if rep.count() < self.line(rep) + self.overflow else 3), 0, 0
        victim = rep.lru[0]
        return 2, self.demand.get(victim, 0).bit_length(), max(rep.stamps[victim], 0)

    def cold_key(self, rep: Replica, adapter: str, busy: float, weight: int) -> tuple[float, ...]:
        """[place] step 2's key: (kind, busy, a, b, served, -weight)."""
        kind, a, b = self.kind(rep, adapter)
        return (kind, busy, a, b, rep.served, weight)

    def place(
        self,
        adapter: str,
        model: str | None = None,
        exclude: Iterable[str] = (),
        load: Mapping[str, float] | None = None,
    ) -> Placement:
        """[place], SPEC §3.12 step by step: every candidate, every key, nothing cached."""
        extra = load or {}
        skip = set(exclude)
        candidates = [
            rep
            for rep in self.in_use()
            if rep.met
            and (model is None or rep.model == model)
            and rep.id not in skip
            and not rep.avoid_until > self.now
        ]

        def busy(rep: Replica) -> float:
            return rep.in_flight + rep.others + extra.get(rep.id, 0)

        def weight(rep: Replica) -> int:
            return rendezvous_weight(adapter, rep.id)

        def saturated(rep: Replica) -> bool:
            capacity = self.capacity(rep)
            return capacity is not None and busy(rep) >= capacity

        def queue(rep: Replica) -> float | None:
            capacity = self.capacity(rep)
            return None if capacity is None else max(0, busy(rep) - capacity)

        def at(rep: Replica) -> Placement:
            return Placement(replica=rep.id, placed=Placed.HELD if adapter in rep.held else Placed.LOADING)

        def cold(rep: Replica) -> Placement:
            return Placement(replica=rep.id, placed=KINDS[self.kind(rep, adapter)[0]])

        holders = [rep for rep in candidates if adapter in rep.held or adapter in rep.loading]
        holder = min(holders, key=lambda r: (busy(r), r.served, -weight(r)), default=None)
        if holder is not None and not saturated(holder):  # 1
            return at(holder)
        others = [rep for rep in candidates if rep not in holders]
        room = []  # 2: not at its cap, and room for a burst where the capacity is known
        for rep in others:
            capacity = self.capacity(rep)
            if self.kind(rep, adapter)[0] != 4 and (capacity is None or 4 * busy(rep) < 3 * capacity):
                room.append(rep)
        if room:
            return cold(min(room, key=lambda r: self.cold_key(r, adapter, busy(r), -weight(r))))
        other = min(  # 3
            others, key=lambda r: (self.kind(r, adapter)[0] == 4, busy(r), r.served, -weight(r)), default=None
        )
        if holder is None:
            return Placement(replica=None, placed=None) if other is None else cold(other)
        if other is not None:
            mine, theirs = queue(holder), queue(other)
            if mine is not None and theirs == 0 and mine >= SPILL_MARGIN:
                return cold(other)
        return at(holder)

    def decide(self, replica: str, adapter: str, *, first: bool = True) -> Decision:
        """Where a request for ``adapter`` on ``replica`` goes, from the state as it is, changing
        nothing: SPEC §3.1's rules tried in their order. ``first``: its first admission (a
        ``requested`` one, which may wait for a reading); a routed one is admitted without reading."""
        rep = self.replicas[replica]
        refused = self.refused.get(adapter)
        if first and refused is not None and refused[0] > self.now and adapter not in rep.held:
            return Decision("refuse", replica)
        for way, where in (("hit", rep.held), ("join", rep.loading), ("wait-unload", rep.unloading)):
            if adapter in where:
                return Decision(way, replica)
        if first and self.needs_reading(rep):
            return Decision("read", replica)
        if self.at_cap(rep):
            return Decision("queue", replica)
        # [evict]: the least recently used idle adapters, as many as take the count back to the line.
        excess = rep.count() + 1 - self.line(rep)
        return Decision("cold", replica, victims=frozenset(rep.lru[: max(excess, 0)]))

    def decide_route(self, adapter: str, model: str | None, exclude: Iterable[str]) -> Decision:
        """Where a ``routed`` request goes ([route]), from the state as it is, changing nothing: no
        replica, refused, a read first, or assigned where [place] says and admitted there."""
        placement = self.place(adapter, model, exclude)
        if placement.replica is None:
            return Decision("no replica")
        rep = self.replicas[placement.replica]
        refused = self.refused.get(adapter)
        if refused is not None and refused[0] > self.now and adapter not in rep.held:
            return Decision("refuse")
        full = placement.placed in (Placed.EVICT, Placed.OVER, Placed.WAIT)
        if full and self.needs_reading(rep):  # a new request: its record has read nothing yet
            return Decision("read", rep.id)
        decided = self.decide(rep.id, adapter, first=False)
        return attrs.evolve(decided, placed=placement.placed)

    def place_route(self, route: Route) -> list[Command]:
        """[route]: place the request; read a full replica first if [read] asks; assign and admit it."""
        ticket, adapter = route.ticket, route.adapter
        placement = self.place(adapter, route.model, route.exclude)
        if placement.replica is None:
            of = "" if route.model is None else f" of model '{route.model}'"
            message = f"no replica{of} to place '{adapter}' on: each is failing, excluded, or not in use"
            return [self.fail(ticket, Fault.REPLICA, message)]
        rep = self.replicas[placement.replica]
        refused = self.refused.get(adapter)
        if refused is not None and adapter not in rep.held:
            until, message = refused
            if until > self.now:
                return [self.fail(ticket, Fault.ADAPTER, message)]
            del self.refused[adapter]
        full = placement.placed in (Placed.EVICT, Placed.OVER, Placed.WAIT)
        if full and rep.id not in route.read and self.needs_reading(rep):
            route.read.add(rep.id)
            return self.wait_for_reading(ticket, rep, adapter, route.path, route)
        assert placement.placed is not None
        self.count(ticket, rep, adapter)
        commands: list[Command] = [Assign(ticket=ticket, replica=rep.id, placed=placement.placed)]
        commands += self.admit(ticket, rep, adapter, route.path)
        if self.stale(rep):
            commands.append(self.start_read(rep))
        return commands

    def is_met(self, replica: str) -> bool:
        rep = self.replicas.get(replica)
        return rep is not None and not rep.removed and rep.met

    def statistics(self) -> Statistics:
        return Statistics(
            loads=dict(sorted(self.loads.items())),
            evictions=dict(sorted(self.evictions.items())),
            grants=dict(self.grants),
            failures=dict(sorted(self.failures.items())),
            replicas={
                rep.id: ReplicaStatistics(
                    model=rep.model,
                    limit=rep.limit,
                    met=rep.met,
                    held={name: rep.held[name].users for name in sorted(rep.held)},
                    loading=tuple(sorted(rep.loading)),
                    unloading=tuple(sorted(rep.unloading)),
                    queued=len(rep.queue),
                    in_flight=rep.in_flight,
                    failing_until=rep.avoid_until if rep.avoid_until > self.now else None,
                )
                for rep in sorted(self.in_use(), key=lambda r: r.id)
            },
            waiting=len(self.waiting),
            leases=len(self.leases),
        )

    def named(self, replica: str) -> frozenset[str]:
        rep = self.replicas.get(replica)
        return frozenset() if rep is None or rep.removed else frozenset(rep.named)

    def reading(self, replica: str) -> Reading | None:
        """§3.11: what readings say of a replica in use."""
        rep = self.replicas.get(replica)
        if rep is None or rep.removed:
            return None
        running, waiting = rep.sampled or (None, None)
        return Reading(
            adapters=frozenset(rep.named),
            foreign=rep.foreign,
            running=running,
            waiting=waiting,
            others=rep.others,
            load=rep.in_flight + rep.others,
            capacity=self.capacity(rep),
            max_loras=rep.max_loras,
        )

    def idle_order(self, replica: str) -> list[str]:
        """The replica's idle adapters, first to go first."""
        return list(self.replicas[replica].lru)

    def unseen_state(self) -> Unseen:
        """What SPEC §1.2 and §1.3 say of every replica in use that no query shows: [evict]'s order of
        victims, [place]'s idle stamps and demand, [share]'s line, [load]'s figures, [settle]'s wait."""
        reps = sorted(self.in_use(), key=lambda r: r.id)
        return Unseen.of(
            {
                rep.id: (
                    [(name, rep.stamps[name]) for name in rep.lru],
                    (self.line(rep), rep.base, rep.unseen),
                    (rep.seqs, rep.ran, rep.calm, rep.read_served, rep.settle),
                )
                for rep in reps
            },
            self.demand,
            routers=self.routers,
        )

    # -- helpers ------------------------------------------------------------------------------------

    def fault(self, rep: Replica) -> None:
        """[health]: avoided for a while, twice as long as last time in a row, up to the longest."""
        rep.failures += 1
        rep.avoid_until = self.now + min(self.backoff * 2.0 ** min(rep.failures - 1, 32), self.max_backoff)

    def healthy(self, rep: Replica) -> None:
        rep.failures, rep.avoid_until = 0, 0.0

    def new_op(self, rep: Replica | None = None) -> int:
        op = self.next_op
        self.next_op += 1
        if rep is not None:
            rep.out.add(op)
        return op

    def fail(self, ticket: int, fault: Fault, message: str) -> Fail:
        self.ended(ticket)
        self.failures[fault.value] = self.failures.get(fault.value, 0) + 1
        return Fail(ticket=ticket, fault=fault, message=message)


@attrs.frozen
class Decision:
    """Where a request goes, as SPEC says from the state it finds: ``way`` is ``hit``, ``join``,
    ``wait-unload``, ``read`` (it waits for a reading first), ``queue`` (it waits at the cap),
    ``cold`` (a load goes out, taking ``victims``), ``refuse``, or ``no replica`` (a routed one);
    ``replica`` and ``placed`` where it goes, when that is known."""

    way: str
    replica: str | None = None
    placed: Placed | None = None
    victims: frozenset[str] = frozenset()


@attrs.frozen
class Unseen:
    """The state no query shows, in a form two readers of SPEC compare: per replica its idle adapters
    in eviction order (the victims a cold load would take, first to go first), their idle stamps as
    ranks across the fleet (placement reads a stamp below 0 as 0, and compares only their order,
    §1.2), its line with the ``base`` and ``unseen`` it comes from ([share]; both never read with one
    router), [load]'s ``seqs``, ``ran``, ``calm`` and ``read_served``, and whether a [settle] waits;
    and the demand counts ([place]'s victim weights, §1.3)."""

    idle: Mapping[str, tuple[str, ...]]
    stamps: Mapping[str, tuple[int, ...]]
    line: Mapping[str, tuple[int, int, int]]
    load: Mapping[str, tuple[int | None, int, int, int, bool]]
    demand: Mapping[str, int]

    @classmethod
    def of(
        cls,
        replicas: Mapping[
            str,
            tuple[list[tuple[str, int]], tuple[int, int, int], tuple[int | None, int, int, int, bool]],
        ],
        demand: Mapping[str, int],
        *,
        routers: int,
    ) -> Unseen:
        """From each replica's (idle (name, stamp) pairs in order, (line, base, unseen), [load]'s)."""
        clamped = sorted({max(stamp, 0) for idle, _, _ in replicas.values() for _, stamp in idle})
        rank = {stamp: i for i, stamp in enumerate(clamped)}
        return cls(
            idle={r: tuple(name for name, _ in idle) for r, (idle, _, _) in replicas.items()},
            stamps={r: tuple(rank[max(s, 0)] for _, s in idle) for r, (idle, _, _) in replicas.items()},
            line={r: line if routers > 1 else (line[0], 0, 0) for r, (_, line, _) in replicas.items()},
            load={r: load for r, (_, _, load) in replicas.items()},
            demand=dict(sorted(demand.items())),
        )


def rendezvous_weight(adapter: str, replica: str) -> int:
    """[place]'s weight, as SPEC §3.12 writes it: SplitMix64's output from the XOR of the names' FNV-1a."""

    def fnv1a(name: str) -> int:
        h = 0xCBF29CE484222325
        for byte in name.encode():
            h = ((h ^ byte) * 0x100000001B3) % 2**64
        return h

    z = ((fnv1a(adapter) ^ fnv1a(replica)) + 0x9E3779B97F4A7C15) % 2**64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % 2**64
    return z ^ (z >> 31)

"""The adapter state machine: every rule about which replica holds which adapter lives here.

Nothing in this module does I/O, reads a clock or draws a random number. Events come in (as method
calls or through ``handle``), commands come out as lists, in an order fixed by the rules below, so
the same events always give the same commands.

The rules, by the names the tests, SPEC.md and the conformance vectors use:

- ``hit``: a request for an adapter the replica holds is granted at once.
- ``join``: a request for an adapter being loaded there waits for that load.
- ``wait-unload``: a request for an adapter being unloaded there waits for the unload, then is
  handled afresh; a load and an unload of one adapter on one replica never cross.
- ``cold``: otherwise the request starts a load; ``evict`` chooses victims first when the load
  would take the replica over its limit.
- ``load-outcome`` and ``unload-outcome``: what an engine's answer does.
- ``release``, ``cancel``: the end of a request's life.
- ``listing``: when a replica's adapters are read, and how a listing is applied.
- ``forget``: the engine said it does not have an adapter.
- ``replicas``: replicas come and go.
- ``view`` and ``statistics``: what the machine tells the router.

Time: the machine reads no clock. Least recently used order comes from a logical counter that every
change of state advances. The only thing that needs real time is when a listing is due; the shell
reports its monotonic clock with ``advance(now)`` (aioquic's ``handle_timer``), and ``next_due()``
says when the machine next wants to hear it.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from collections.abc import Iterable
from typing import assert_never

import attrs

from ._commands import Command, Fail, Grant, IssueLoad, IssueUnload, ReadListing
from ._errors import (
    ClockWentBackwardsError,
    InvalidValueError,
    ReplicaConflictError,
    TicketOrderError,
    UnknownOperationError,
    UnknownReplicaError,
    UnknownTicketError,
)
from ._events import (
    AdapterMissing,
    Cancelled,
    Event,
    LimitSet,
    ListingFailed,
    ListingReceived,
    LoadFinished,
    Released,
    ReplicaAdded,
    ReplicasRemoved,
    Requested,
    TimeAdvanced,
    UnloadFinished,
)
from ._snapshots import ReplicaStatistics, Statistics, View
from ._values import Fault, How, LoadOutcome, UnloadOutcome

DEFAULT_LISTING_INTERVAL = 30.0
"""Seconds between two readings of a replica's listing."""

REPLICA_REMOVED = "the replica was removed while the request waited"
_HIT = How.HIT  # looked up once: the hit path is every warm request's


@attrs.define(eq=False)
class _Held:
    """An adapter a replica holds; leases point at it, so a release never reaches a newer copy."""

    replica: _Replica
    adapter: str
    in_use: int
    since: int
    """The logical time it became held, which a listing compares with its own start."""
    live: bool = True


@attrs.define(eq=False)
class _Load:
    replica: _Replica
    adapter: str
    path: str
    op: int
    waiters: list[int]
    starter: int | None
    """The ticket granted "loaded"; every other waiter joined."""
    blockers: set[int]
    """Victims' unloads that must finish before the load is issued."""
    issued: bool = False


@attrs.define(eq=False)
class _Unload:
    replica: _Replica
    adapter: str
    op: int
    waiters: list[tuple[int, str]] = attrs.field(factory=list)
    """(ticket, path) of requests to handle afresh when the unload finishes."""
    blocks: _Load | None = None


@attrs.define(eq=False)
class _Listing:
    replica: _Replica
    op: int
    started: int


_Operation = _Load | _Unload | _Listing


@attrs.define(eq=False)
class _Replica:
    id: str
    model: str
    limit: int
    due: float
    held: dict[str, _Held] = attrs.field(factory=dict)
    idle: OrderedDict[str, None] = attrs.field(factory=OrderedDict)
    """Held adapters no request runs on, least recently used first: the eviction order."""
    loading: dict[str, _Load] = attrs.field(factory=dict)
    unloading: dict[str, _Unload] = attrs.field(factory=dict)
    listing: _Listing | None = None
    gone: set[str] = attrs.field(factory=set)
    """Adapters dropped while ``listing`` was out, so that an older listing does not bring them back."""
    met: bool = False
    removed: bool = False
    outstanding: int = 0
    """Issued operations not yet answered; a removed replica is kept until they are."""


class AdapterStateMachine:
    """Decides which replica holds which LoRA adapter, as a sans-IO state machine.

    Feed it events, as method calls (``request``, ``release``, ``load_finished``...) or as event
    values through ``handle``; each call returns the commands the shell must carry out, in order.

    Args:
        listing_interval: seconds between two readings of a replica's listing.
    """

    def __init__(self, *, listing_interval: float = DEFAULT_LISTING_INTERVAL) -> None:
        if not (isinstance(listing_interval, int | float) and listing_interval > 0):
            raise InvalidValueError(f"listing_interval must be a positive number, not {listing_interval!r}")
        self._interval = float(listing_interval)
        self._clock = 0.0
        self._logical = 0
        self._next_op = 1
        self._last_ticket = 0
        self._replicas: dict[str, _Replica] = {}
        self._due: list[tuple[float, str]] = []
        self._ops: dict[int, _Operation] = {}
        self._leases: dict[int, _Held] = {}
        self._waiting: dict[int, _Load | _Unload] = {}
        self._hits = 0
        self._joined = 0
        self._loaded = 0
        self._failures: dict[str, int] = {}
        self._loads: dict[tuple[str, str], int] = {}
        self._evictions: dict[tuple[str, str], int] = {}

    # -- the one entry point for values ------------------------------------------------------

    def handle(self, event: Event) -> list[Command]:
        """Apply one event and return the commands it gives.

        Raises:
            UsageError: the event breaks the contract; nothing changed.
        """
        match event:
            case Requested():
                return self.request(event.ticket, event.replica, event.adapter, event.path)
            case Released():
                return self.release(event.ticket)
            case Cancelled():
                return self.cancel(event.ticket)
            case LoadFinished():
                return self.load_finished(event.load, event.outcome, event.message)
            case UnloadFinished():
                return self.unload_finished(event.unload, event.outcome, event.message)
            case ListingReceived():
                return self.listing_received(event.listing, event.adapters)
            case ListingFailed():
                return self.listing_failed(event.listing, event.message)
            case AdapterMissing():
                return self.adapter_missing(event.replica, event.adapter)
            case ReplicaAdded():
                return self.add_replica(event.replica, event.model, event.limit)
            case ReplicasRemoved():
                return self.remove_replicas(event.replicas)
            case LimitSet():
                return self.set_limit(event.model, event.limit)
            case TimeAdvanced():
                return self.advance(event.now)
            case _:
                assert_never(event)

    # -- requests ----------------------------------------------------------------------------

    @property
    def next_ticket(self) -> int:
        """The lowest ticket a new request may take."""
        return self._last_ticket + 1

    def request(self, ticket: int, replica: str, adapter: str, path: str) -> list[Command]:
        """A request wants ``adapter`` on ``replica`` ([hit], [join], [wait-unload], [cold]).

        Returns ``[Grant(ticket, HIT)]`` at once when the replica holds the adapter; otherwise the
        request waits and the commands start whatever it waits for.
        """
        rep = self._replica_for(ticket, replica)
        if type(adapter) is not str or not adapter:
            raise InvalidValueError(f"adapter name must be a non-empty str, not {adapter!r}")
        if type(path) is not str or not path:
            raise InvalidValueError(f"adapter path must be a non-empty str, not {path!r}")
        self._last_ticket = ticket
        return self._admit(ticket, rep, adapter, path)

    def hit(self, ticket: int, replica: str, adapter: str) -> bool:
        """``request`` for a shell's fast path: True when it was a [hit], now granted without a command.

        Returns False, having changed nothing, when the replica does not hold the adapter: then call
        ``request`` with the same ticket.
        """
        rep = self._replica_for(ticket, replica)
        held = rep.held.get(adapter)
        if held is None:
            return False
        self._last_ticket = ticket
        self._take(ticket, rep, held)
        return True

    def _replica_for(self, ticket: int, replica: str) -> _Replica:
        """The replica a new request names, once its ticket and replica are known to be good."""
        if type(ticket) is not int or ticket <= self._last_ticket:
            raise TicketOrderError(
                f"ticket {ticket!r} must be an int above {self._last_ticket}, the highest seen so far"
            )
        rep = self._replicas.get(replica)
        if rep is None or rep.removed:
            raise UnknownReplicaError(f"replica {replica!r} was never added, or was removed")
        return rep

    def _take(self, ticket: int, rep: _Replica, held: _Held) -> None:
        """[hit]: the request uses a held adapter, which is then in use and no eviction candidate."""
        if not held.in_use:
            del rep.idle[held.adapter]
        held.in_use += 1
        self._leases[ticket] = held
        self._hits += 1

    def _admit(self, ticket: int, rep: _Replica, adapter: str, path: str) -> list[Command]:
        held = rep.held.get(adapter)
        if held is not None:  # [hit]
            self._take(ticket, rep, held)
            return [Grant(ticket, _HIT)]
        load = rep.loading.get(adapter)
        if load is not None:  # [join]
            load.waiters.append(ticket)
            self._waiting[ticket] = load
            return []
        unload = rep.unloading.get(adapter)
        if unload is not None:  # [wait-unload]
            unload.waiters.append((ticket, path))
            self._waiting[ticket] = unload
            return []
        return self._start_load(ticket, rep, adapter, path)

    def _start_load(self, ticket: int, rep: _Replica, adapter: str, path: str) -> list[Command]:
        """[cold]: start a load, unloading the [evict] victims first."""
        commands: list[Command] = []
        victims: list[_Unload] = []
        excess = len(rep.held) + len(rep.loading) + 1 - rep.limit
        # [evict] The least recently used adapters no request runs on, until the load fits. When
        # every held adapter is in use the replica goes over its limit for now: refusing the
        # request would serve no one, and a later load brings the replica back.
        while excess > 0 and rep.idle:
            victim, _ = rep.idle.popitem(last=False)
            self._drop(rep, victim)
            unload = _Unload(rep, victim, self._new_op())
            rep.unloading[victim] = unload
            rep.outstanding += 1
            self._ops[unload.op] = unload
            victims.append(unload)
            commands.append(IssueUnload(unload.op, rep.id, victim))
            excess -= 1
        # Numbered after its victims, so operation numbers follow the order calls go out.
        load = _Load(rep, adapter, path, self._new_op(), [ticket], ticket, {u.op for u in victims})
        for unload in victims:
            unload.blocks = load
        rep.loading[adapter] = load
        self._ops[load.op] = load
        self._waiting[ticket] = load
        if not victims:
            commands.append(self._issue(load))
        return commands

    def _issue(self, load: _Load) -> IssueLoad:
        load.issued = True
        load.replica.outstanding += 1
        return IssueLoad(load.op, load.replica.id, load.adapter, load.path)

    def release(self, ticket: int) -> list[Command]:
        """The request is done with its adapter ([release]).

        A second release of one ticket does nothing, and so does a release after the adapter or its
        replica was forgotten.
        """
        held = self._leases.pop(ticket, None)
        if held is None:
            self._check_ended(ticket, "release")
            return []
        held.in_use -= 1
        if not held.in_use and held.live:
            # Least recently used order is the order in which adapters became idle: any use of an
            # idle adapter takes it out of the idle list, so its last use is its release.
            held.replica.idle[held.adapter] = None
        return []

    def cancel(self, ticket: int) -> list[Command]:
        """The request went away ([cancel]): a waiting one gets no grant, a granted one is released.

        The load it waited on goes on for the others; a load not yet issued that no one waits for
        any more is not issued at all.
        """
        if ticket in self._leases:
            return self.release(ticket)
        waited = self._waiting.pop(ticket, None)
        if waited is None:
            self._check_ended(ticket, "cancel")
            return []
        if isinstance(waited, _Load):
            waited.waiters.remove(ticket)
            if waited.starter == ticket:
                waited.starter = None
            if not waited.waiters and not waited.issued:
                self._abandon_pending(waited)
        else:
            waited.waiters = [(t, p) for t, p in waited.waiters if t != ticket]
        return []

    def _check_ended(self, ticket: int, what: str) -> None:
        if ticket in self._waiting:
            raise UnknownTicketError(f"cannot {what} ticket {ticket}: it is still waiting (cancel it)")
        if type(ticket) is not int or not 0 < ticket <= self._last_ticket:
            raise UnknownTicketError(f"cannot {what} ticket {ticket!r}: no request ever had it")

    def _abandon_pending(self, load: _Load) -> None:
        del load.replica.loading[load.adapter]
        del self._ops[load.op]
        for op in load.blockers:
            unload = self._ops[op]
            assert isinstance(unload, _Unload)
            unload.blocks = None

    # -- the engine's answers ----------------------------------------------------------------

    def load_finished(self, load: int, outcome: LoadOutcome, message: str = "") -> list[Command]:
        """The engine answered a load ([load-outcome]).

        Success wakes every waiter with a grant and holds the adapter with one use per waiter; a
        failure wakes every waiter with a ``Fail`` whose fault says whether to retry elsewhere.
        """
        if not isinstance(outcome, LoadOutcome):
            raise InvalidValueError(f"outcome must be a LoadOutcome, not {outcome!r}")
        op = self._ops.get(load)
        if not isinstance(op, _Load) or not op.issued:
            raise UnknownOperationError(f"load {load!r} is not an issued load awaiting its answer")
        del self._ops[load]
        rep = op.replica
        del rep.loading[op.adapter]
        key = (rep.model, outcome.value)
        self._loads[key] = self._loads.get(key, 0) + 1
        if self._answered(rep):
            return []
        commands: list[Command] = []
        if outcome.succeeded:
            held = _Held(rep, op.adapter, len(op.waiters), self._tick())
            rep.held[op.adapter] = held
            if not held.in_use:
                rep.idle[op.adapter] = None
            for ticket in op.waiters:
                del self._waiting[ticket]
                self._leases[ticket] = held
                if ticket == op.starter:
                    self._loaded += 1
                    commands.append(Grant(ticket, How.LOADED))
                else:
                    self._joined += 1
                    commands.append(Grant(ticket, How.JOINED))
        else:
            fault = Fault.ADAPTER if outcome is LoadOutcome.ADAPTER_FAULT else Fault.REPLICA
            text = message or f"the load of {op.adapter!r} on {rep.id!r} failed"
            for ticket in op.waiters:
                del self._waiting[ticket]
                commands.append(self._fail(ticket, fault, text))
        return commands

    def unload_finished(self, unload: int, outcome: UnloadOutcome, message: str = "") -> list[Command]:
        """The engine answered an unload ([unload-outcome]).

        Whatever the answer, the adapter is gone from the machine's view (a failed unload may leave
        it on the engine; the next listing says so). The load waiting on it is issued once no other
        unload blocks it, and requests waiting for it are handled afresh.
        """
        del message  # the shell logs it; the machine decides the same either way
        if not isinstance(outcome, UnloadOutcome):
            raise InvalidValueError(f"outcome must be an UnloadOutcome, not {outcome!r}")
        op = self._ops.get(unload)
        if not isinstance(op, _Unload):
            raise UnknownOperationError(f"unload {unload!r} is not an issued unload awaiting its answer")
        del self._ops[unload]
        rep = op.replica
        del rep.unloading[op.adapter]
        key = (rep.model, outcome.value)
        self._evictions[key] = self._evictions.get(key, 0) + 1
        if self._answered(rep):
            return []
        if rep.listing is not None:
            rep.gone.add(op.adapter)
        commands: list[Command] = []
        load = op.blocks
        if load is not None:
            load.blockers.discard(unload)
            if not load.blockers:
                commands.append(self._issue(load))
        for ticket, path in op.waiters:
            del self._waiting[ticket]
            commands.extend(self._admit(ticket, rep, op.adapter, path))
        return commands

    def _answered(self, rep: _Replica) -> bool:
        """Count an operation of ``rep`` as answered; True when the answer is to be ignored."""
        rep.outstanding -= 1
        if not rep.removed:
            return False
        if not rep.outstanding and self._replicas.get(rep.id) is rep:
            del self._replicas[rep.id]
        return True

    # -- listings ----------------------------------------------------------------------------

    def advance(self, now: float) -> list[Command]:
        """The shell's clock reads ``now``; read the listings that are due ([listing]).

        Raises:
            ClockWentBackwardsError: ``now`` is before a time given earlier.
        """
        if not isinstance(now, int | float) or math.isnan(now):
            raise InvalidValueError(f"now must be a number, not {now!r}")
        if now < self._clock:
            raise ClockWentBackwardsError(f"now {now} is before {self._clock}, given earlier")
        self._clock = float(now)
        commands: list[Command] = []
        due = self._due
        while due and due[0][0] <= now:
            at, replica = heapq.heappop(due)
            rep = self._replicas.get(replica)
            if rep is None or rep.removed or rep.due != at:
                continue  # left behind by a removal or a re-add
            rep.due = now + self._interval
            heapq.heappush(due, (rep.due, replica))
            if rep.listing is None:
                commands.append(self._start_listing(rep))
        return commands

    def next_due(self) -> float | None:
        """When the machine next wants ``advance`` called, or None when no replica is known."""
        due = self._due
        while due:
            at, replica = due[0]
            rep = self._replicas.get(replica)
            if rep is not None and not rep.removed and rep.due == at:
                return at
            heapq.heappop(due)  # left behind; dropping it changes nothing the caller can see
        return None

    def _start_listing(self, rep: _Replica) -> ReadListing:
        listing = _Listing(rep, self._new_op(), self._tick())
        rep.listing = listing
        rep.gone = set()
        rep.outstanding += 1
        self._ops[listing.op] = listing
        return ReadListing(listing.op, rep.id)

    def _finish_listing(self, listing: int) -> _Listing | None:
        op = self._ops.get(listing)
        if not isinstance(op, _Listing):
            raise UnknownOperationError(f"listing {listing!r} is not an issued listing awaiting its answer")
        del self._ops[listing]
        rep = op.replica
        if self._answered(rep) or rep.listing is not op:
            return None
        rep.listing = None
        rep.met = True
        return op

    def listing_received(self, listing: int, adapters: Iterable[str]) -> list[Command]:
        """The replica's listing named ``adapters``; apply it as of when it started ([listing]).

        Listed adapters the machine did not know are held, least recently used of all (in name
        order). Held adapters not listed are dropped if they were held before the listing started
        and no request runs on them. Adapters being loaded or unloaded are left to their outcome,
        and adapters dropped since the listing started stay dropped.
        """
        names = tuple(adapters)
        for name in names:
            if not name or type(name) is not str:
                raise InvalidValueError(f"listed adapter names must be non-empty strs, not {name!r}")
        finished = self._finish_listing(listing)
        if finished is None:
            return []
        rep = finished.replica
        listed = set(names)
        for name, held in list(rep.held.items()):
            if name not in listed and held.since < finished.started and not held.in_use:
                self._drop(rep, name)
                del rep.idle[name]
        known = rep.held.keys() | rep.loading.keys() | rep.unloading.keys() | rep.gone
        rep.gone = set()
        since = self._tick()
        for name in sorted(listed - known, reverse=True):
            rep.held[name] = _Held(rep, name, 0, since)
            rep.idle[name] = None
            rep.idle.move_to_end(name, last=False)
        return []

    def listing_failed(self, listing: int, message: str = "") -> list[Command]:
        """The replica's listing could not be read ([listing]): nothing changes but that it is met."""
        del message
        finished = self._finish_listing(listing)
        if finished is not None:
            finished.replica.gone = set()
        return []

    # -- forget, replicas, limits ------------------------------------------------------------

    def adapter_missing(self, replica: str, adapter: str) -> list[Command]:
        """The replica answered a request for ``adapter`` with "no such model" ([forget]).

        The adapter is forgotten there unless a request is running on it: that request will report
        it too when it fails, and the next listing settles it either way. Adapters being loaded or
        unloaded are left to their outcome.
        """
        rep = self._replicas.get(replica)
        if rep is None or rep.removed:
            return []
        held = rep.held.get(adapter)
        if held is not None and not held.in_use:
            self._drop(rep, adapter)
            del rep.idle[adapter]
        return []

    def add_replica(self, replica: str, model: str, limit: int) -> list[Command]:
        """The router will use ``replica`` ([replicas]); a new one's listing is read at once.

        Adding a known replica again with the same model sets its limit.

        Raises:
            ReplicaConflictError: the replica is known with another model.
        """
        if not replica or type(replica) is not str:
            raise InvalidValueError(f"replica id must be a non-empty str, not {replica!r}")
        if not model or type(model) is not str:
            raise InvalidValueError(f"model must be a non-empty str, not {model!r}")
        _check_limit(limit)
        rep = self._replicas.get(replica)
        if rep is not None and not rep.removed:
            if rep.model != model:
                raise ReplicaConflictError(
                    f"replica {replica!r} is known with model {rep.model!r}; "
                    f"remove it before adding it with {model!r}"
                )
            rep.limit = limit
            return []
        if rep is None:
            rep = _Replica(replica, model, limit, self._clock + self._interval)
            self._replicas[replica] = rep
        else:
            # Re-added while calls made before its removal are still out: keep them, so that a new
            # load never crosses an old one.
            rep.removed, rep.model, rep.limit, rep.met = False, model, limit, False
            rep.due = self._clock + self._interval
        heapq.heappush(self._due, (rep.due, replica))
        return [self._start_listing(rep)]

    def remove_replicas(self, replicas: Iterable[str]) -> list[Command]:
        """The router no longer uses these replicas ([replicas]).

        Their waiting requests fail with a replica fault; what they held is forgotten, so a release
        of a lease on them does nothing; answers to calls already made are ignored. Unknown ids are
        passed over.
        """
        ids = tuple(replicas)
        failed: list[int] = []
        for replica in ids:
            rep = self._replicas.get(replica)
            if rep is None or rep.removed:
                continue
            rep.removed = True
            for name in list(rep.held):
                self._drop(rep, name)
            rep.idle.clear()
            for load in list(rep.loading.values()):
                failed.extend(load.waiters)
                load.waiters.clear()
                load.starter = None
                if not load.issued:
                    self._abandon_pending(load)
            for unload in rep.unloading.values():
                failed.extend(t for t, _ in unload.waiters)
                unload.waiters.clear()
            if rep.listing is not None:
                rep.listing = None  # its answer is ignored, even if the replica comes back
            rep.gone = set()
            if not rep.outstanding:
                del self._replicas[replica]
        commands: list[Command] = []
        for ticket in sorted(failed):
            del self._waiting[ticket]
            commands.append(self._fail(ticket, Fault.REPLICA, REPLICA_REMOVED))
        return commands

    def set_limit(self, model: str, limit: int) -> list[Command]:
        """Every replica of ``model`` may hold ``limit`` adapters; a lower one applies at the next load."""
        _check_limit(limit)
        for rep in self._replicas.values():
            if rep.model == model and not rep.removed:
                rep.limit = limit
        return []

    # -- what the machine tells the router ----------------------------------------------------

    def view(self, replicas: Iterable[str], adapter: str) -> View:
        """Which of ``replicas`` hold ``adapter`` (held or loading) and which have room ([view])."""
        holders: list[str] = []
        with_room: list[str] = []
        known = self._replicas
        for replica in replicas:
            rep = known.get(replica)
            if rep is None or rep.removed:
                with_room.append(replica)
                continue
            held = rep.held
            loading = rep.loading
            if adapter in held or adapter in loading:
                holders.append(replica)
            if len(held) + len(loading) < rep.limit:
                with_room.append(replica)
        return View(frozenset(holders), frozenset(with_room))

    def is_met(self, replica: str) -> bool:
        """Whether ``replica`` is known and its first listing was answered."""
        rep = self._replicas.get(replica)
        return rep is not None and not rep.removed and rep.met

    def statistics(self) -> Statistics:
        """A frozen snapshot of the counts and of what every replica holds ([statistics])."""
        replicas = {
            rep.id: ReplicaStatistics(
                model=rep.model,
                limit=rep.limit,
                met=rep.met,
                held={name: rep.held[name].in_use for name in sorted(rep.held)},
                loading=tuple(sorted(rep.loading)),
                unloading=tuple(sorted(rep.unloading)),
            )
            for rep in sorted(self._replicas.values(), key=lambda r: r.id)
            if not rep.removed
        }
        return Statistics(
            loads=dict(sorted(self._loads.items())),
            evictions=dict(sorted(self._evictions.items())),
            grants={
                How.HIT.value: self._hits,
                How.JOINED.value: self._joined,
                How.LOADED.value: self._loaded,
            },
            failures=dict(sorted(self._failures.items())),
            replicas=replicas,
            waiting=len(self._waiting),
            leases=len(self._leases),
        )

    # -- helpers ------------------------------------------------------------------------------

    def _new_op(self) -> int:
        op = self._next_op
        self._next_op = op + 1
        return op

    def _tick(self) -> int:
        self._logical += 1
        return self._logical

    def _drop(self, rep: _Replica, name: str) -> None:
        """Stop holding ``name`` (the caller takes it off the idle list); its leases go dead."""
        held = rep.held.pop(name)
        held.live = False
        if rep.listing is not None:
            rep.gone.add(name)

    def _fail(self, ticket: int, fault: Fault, message: str) -> Fail:
        self._failures[fault.value] = self._failures.get(fault.value, 0) + 1
        return Fail(ticket, fault, message)


def _check_limit(limit: int) -> None:
    if type(limit) is not int or limit < 1:
        raise InvalidValueError(f"limit must be an int of at least 1, not {limit!r}")

"""The adapter state machine: every rule about which replica holds which adapter lives here.

Nothing in this module does I/O, reads a clock or draws a random number. Events come in through
``handle`` (the methods named after events are spellings of it), commands come out as lists, in an
order fixed by the rules below, so the same events always give the same commands. ``hit`` is the one
shortcut: the path every warm request takes, answered with a bool instead of a ``Grant``.

Theory of operation
===================

One adapter on one replica is in exactly one of these states (``Replica`` keeps one dict or list for
each). The table is every way out of each state; anything else leaves the state as it is.

==============  ==========================================  ===================================  ========
state           event                                       next state                           rule
==============  ==========================================  ===================================  ========
absent          requested                                   loading (issued at once)             cold
absent          listing_received names it                   held, idle (front of ``idle``)       listing
loading         load_finished, loaded or already_loaded     held, in use by every waiter (idle   load-
                                                            if none is left)                     outcome
loading         load_finished, a fault                      absent; every waiter fails           load-
                                                                                                 outcome
held, idle      requested (or ``hit``)                      held, in use                         hit
held, in use    released or cancelled, the last lease       held, idle (end of ``idle``)         release
held, idle      load_finished of another adapter leaves     unloading                            settle
                the replica over its line; it is the
                least recently used
held, idle      requested for another adapter past the      unloading, not issued until that     evict
                line; it is the least recently used         load lands
unloading, not  load_finished of its load, loaded or        unloading (issued)                   evict
issued          already_loaded
unloading, not  load_finished of its load, a fault          held, idle (where it was)            load-
issued                                                                                           outcome
held, any       listing_received does not name it, and      absent (dropped: no unload; leases   listing
                it was held before the listing started      on it go dead)
held, any       adapter_missing                             absent (dropped)                     forget
unloading       unload_finished, any outcome                absent; its waiters are admitted     unload-
                                                            afresh                               outcome
any             replicas_removed                            absent, except held in use: kept,    replicas
                                                            unseen, until its leases end
absent          adapter_pinned, placement finds room        loading, with no waiter              pin
held, idle      adapter_pinned                              held, pinned (never in ``idle``)     pin
held, pinned    adapter_unpinned, no request on it          held, idle (end of ``idle``)         pin
held, idle      reading_received names it                   held, named (not idle)               reading
held, named     reading_received no longer names it, no     held, idle (end of ``idle``)         reading
                request of this router on it
held, named     reading_failed, a listing received since    held, idle (end of ``idle``)         read-
                the last reading, no request of this                                             failed
                router on it
==============  ==========================================  ===================================  ========

Beside that table, these rules decide without moving an adapter: [load] keeps how busy each engine
is (this router's requests and, as its readings showed, the others') and what it runs at once;
[place] answers where a request should go (a query: the least busy holder unless its engine queues,
else a cold load where it costs least, ties by a rendezvous hash every router computes alike);
[route] places a request and admits it there (read first, when [read] asks); [read] reads an engine
when a decision needs it (after a listing, before evicting where another router's requests ran, when
a landed load's excess waits for a reading, when a release at the cap leaves an adapter the last
reading named, and now and then after a routed request), and the requests that need the reading wait
for it; [health] avoids a replica after a failure, for a time that doubles with each failure in a
row; [blame] tells a request's server errors from a replica's; [refuse] fails at once a request for
an adapter the engine refused as its own fault, for a while; [cap] makes a cold request wait in the
replica's queue, rather than take it past ``line + headroom`` (or the engine's ``max_loras``), until
an adapter goes idle or room comes otherwise.

The engine's memory ([cold], [evict], SPEC.md §3.16). vLLM keeps ``--max-cpu-loras`` adapters in
memory and a load into a full memory drops the one a step used least recently; its unload forgets
only the name. So a replica's limit is that memory, and a cold load past the line takes the least
recently used idle adapter as its victim: the victim takes no request from then on (it stays the
engine's least recently used, the one the engine drops for the load), the load goes out at once, and
the victim's name is unloaded once the load has landed. No request waits for an unload, and a load
the engine refuses evicts nothing: its victims are held again where they were.

Several routers ([share]). With ``routers=R`` above 1, every rule that asks whether a load has room
([evict], [settle], [cap], [place], [view]) compares the replica's count with its *line* instead of
its limit:
``max(1, base + ceil(f / R) - unseen)``, where ``base`` is its count once its last listing was applied and
``f = limit - base`` the free slots that listing left (the limit itself when ``f <= 0``), and
``unseen`` the adapters the engine lost since without this router's unload (an unload answered
``not_found``, an ``adapter_missing``): another router's adapter took their slot. Past its line a cold
load takes a victim, or with nothing idle the replica goes over as past the limit. R routers whose last
listings saw ``c`` adapters then hold a replica to ``max(c, limit + R - 1 + R * headroom)`` until
their next listings, as they count it (SPEC.md §3.14 gives the exceptions, and the bound when
listings are read at different moments). With one router the line is the limit, and nothing here
applies.

A request that finds its adapter loading joins the load ([join]); one that finds it unloading waits
for the unload and is then handled afresh ([wait-unload]), so a load and an unload of one adapter on
one replica are never outstanding together.

Operation numbers. Loads, unloads, listings and reads take their numbers from one counter as they go
out: a victim's unload is numbered when its load lands and it is issued, not when it is chosen.

Order and time. Least recently used order is the order of ``idle``: an adapter joins its end when its
last request ends (or when a load lands with no one waiting), leaves it when a request uses it, and a
listing puts the adapters it adds at the front, oldest of all. The logical clock (``_tick``) is not
about that order: it dates when an adapter became held and when a listing started, so that a listing
drops only adapters held before it started. Real time matters only for when listings are due: the
shell reports its monotonic clock with ``advance(now)`` (aioquic's ``handle_timer``), and
``next_due()`` says when the machine next wants to hear it.

Listings in flight. While a listing is out, adapters the machine drops (evicted, forgotten) are noted
in ``dropped_while_listing``, so that the listing, which may have been served before the drop, does
not bring them back.

Removal. A removed replica is invisible (no requests, no view, no statistics) but kept until every
call made to it is answered and every request still running on it has ended: its late answers must
not be mistaken for a new replica's of the same id, a load must never cross an unload of the same
adapter if it is added back, and an adapter a request still runs on must never be unloaded, even after
a removal and a re-add.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Container, Iterable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar, assert_never

from ._commands import Assign, Command, Fail, Grant, IssueLoad, IssueUnload, MarkMet, ReadEngine, ReadListing
from ._errors import (
    ClockWentBackwardsError,
    NotIdleError,
    ReplicaConflictError,
    TicketOrderError,
    UnknownOperationError,
    UnknownReplicaError,
    UnknownTicketError,
)
from ._events import (
    AdapterChanged,
    AdapterDismissed,
    AdapterMissing,
    AdapterPinned,
    AdapterUnpinned,
    Cancelled,
    Event,
    LimitSet,
    ListingFailed,
    ListingReceived,
    LoadFinished,
    ReadingFailed,
    ReadingReceived,
    RefusalForgotten,
    Released,
    ReplicaAdded,
    ReplicaFailed,
    ReplicasRemoved,
    Requested,
    Routed,
    ServedElsewhere,
    StandingBy,
    TimeAdvanced,
    UnloadFinished,
)
from ._fields import ADAPTER, MODEL, check_fields, invalid
from ._index import PLACED, ColdIndex, Key
from ._indexing import Indexing
from ._invariants import Invariants
from ._queries import Queries
from ._rendezvous import weight as _rendezvous
from ._shortcuts import Shortcuts
from ._snapshots import Placement
from ._spellings import Spellings
from ._state import (
    NOWHERE,
    Counts,
    Held,
    Listing,
    Load,
    Operation,
    Parked,
    Queue,
    Read,
    Replica,
    Route,
    Settings,
    Unload,
    Wait,
)
from ._values import Fault, How, LoadOutcome, Placed, UnloadOutcome

DEFAULT_LISTING_INTERVAL = 30.0
"""Seconds between two readings of a replica's listing."""
DEFAULT_BACKOFF = 5.0
"""Seconds placement avoids a replica after its first failure; each failure in a row doubles it."""
DEFAULT_MAX_BACKOFF = 300.0
"""The longest a failing replica is avoided at a time (AIBrix's 5 s·2ⁿ up to 300 s)."""
DEFAULT_OVERFLOW = 2
"""How far past its limit placement prefers to take a replica whose adapters are all in use."""
DEFAULT_HALF_LIFE = 500
"""Requests between two halvings of the demand counts, which [place] reads to choose where a cold load
evicts (``lorafleet simulate --grid``, sim/grid.md)."""
FLEET_DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {"headroom": 0, "read_engine": True, "shared_interval": 0.5}
)
"""The settings a ``Fleet`` (and so ``lorafleet serve``) gives its machine unless told otherwise, the
others as here: what ``lorafleet simulate`` runs lorafleet with, and what sim/grid.md measures. With
headroom 0 a replica's limit is its engine's whole memory (``--max-cpu-loras``, SPEC.md §3.16)."""
DEFAULT_REFUSAL = 900.0
"""Seconds an adapter the engine refused as the adapter's fault is refused without a call (ModelMesh
keeps load failures 15 minutes)."""

REPLICA_REMOVED = "the replica was removed while the request waited"
"""The message of the ``Fail`` a removal gives every request waiting on the replica."""

REFRESH = 4
"""[read]: requests this router sends a replica other routers use before it reads that engine again."""
SPILL_MARGIN = 2
"""[place]: with every engine busy, a cold load goes elsewhere only to an engine with no queue, and only if
the request would wait behind at least this many on the holder (a load costs a wait of its own, and on an
engine that queues it stalls them all and may take the room of an adapter one waits on)."""

_FULL = frozenset({Placed.EVICT, Placed.OVER, Placed.WAIT})
"""Placements where a cold load finds no free slot: it would evict, go over the limit, or wait."""


_HIT = How.HIT  # looked up once: the hit path is every warm request's
_Op = TypeVar("_Op", Load, Unload, Listing, Read)


def load_failed_message(adapter: str, replica: str) -> str:
    """The message of a failed load whose answer came with none."""
    return f"the load of '{adapter}' on '{replica}' failed"


def no_replica_message(adapter: str, model: str | None) -> str:
    """The message of the ``Fail`` of a routed request placement found no replica for ([route])."""
    of = "" if model is None else f" of model '{model}'"
    return f"no replica{of} to place '{adapter}' on: each is failing, excluded, or not in use"


class AdapterStateMachine(Shortcuts, Spellings, Queries, Indexing, Invariants):
    """Decides which replica holds which LoRA adapter, as a sans-IO state machine.

    Feed it events with ``handle`` (or the methods that spell it: ``request``, ``release``,
    ``load_finished``...); each call returns the commands the shell must carry out, in order.

    Args:
        listing_interval: seconds between two readings of a replica's listing.
        headroom: how many adapters past its limit a replica may go when every adapter it holds is
            in use ([cap]); at that cap a cold request waits for room. None: no cap.
        concurrency: the requests one replica runs at once (vLLM's ``--max-num-seqs``), which
            [place] spills past: a holder with this many in flight is saturated, and a replica with
            three quarters of it or more in flight takes no cold load while another can. None: never
            saturated.
        overflow: how far past its limit a cold load may take a replica whose adapters are all in
            use, in preference to evicting elsewhere ([place]).
        half_life: requests between two halvings of every adapter's demand count ([evict]).
        backoff, max_backoff: seconds placement avoids a replica after a failure, doubling with
            each failure in a row up to ``max_backoff`` ([health]).
        refusal: seconds an adapter the engine refused as the adapter's fault is refused at once,
            without a call ([refuse]).
        routers: how many routers share the fleet ([share]): between two listings of a replica,
            this one fills at most ``ceil(f / routers)`` of the ``f`` free slots the last listing
            left, and counts the replica full past that. 1: all of them.
        read_engine: ask to read what runs on each engine ([read]): after its listings, before a
            cold load with no free slot there, and when a release leaves its queue waiting on an
            adapter the last reading named. False: never (the shell reads nothing).
        shared_interval: seconds between two listings of a replica other routers use, as its last
            reading showed ([time]): their loads and unloads there are seen this soon. None: every
            replica is listed every ``listing_interval``.
    """

    def __init__(
        self,
        *,
        listing_interval: float = DEFAULT_LISTING_INTERVAL,
        headroom: int | None = None,
        concurrency: int | None = None,
        overflow: int = DEFAULT_OVERFLOW,
        half_life: int = DEFAULT_HALF_LIFE,
        backoff: float = DEFAULT_BACKOFF,
        max_backoff: float = DEFAULT_MAX_BACKOFF,
        refusal: float = DEFAULT_REFUSAL,
        routers: int = 1,
        read_engine: bool = False,
        shared_interval: float | None = None,
    ) -> None:
        self._settings = Settings.checked(
            listing_interval=listing_interval,
            headroom=headroom,
            concurrency=concurrency,
            overflow=overflow,
            half_life=half_life,
            backoff=backoff,
            max_backoff=max_backoff,
            refusal=refusal,
            routers=routers,
            read_engine=read_engine,
            shared_interval=shared_interval,
        )
        # The spellings may skip the event objects only where no subclass watches them go by.
        cls = type(self)
        self._direct = cls.handle is AdapterStateMachine.handle and cls.hit is AdapterStateMachine.hit
        self._demand: dict[str, int] = {}
        """Adapter name to its decayed request count: +1 a request, all halved every half_life."""
        self._to_halving = self._settings.half_life
        """Requests until the next halving of the demand."""
        self._epoch = 0
        """Halvings of the demand so far: ``_level`` counts from it, so that a halving moves no level."""
        self._index: ColdIndex[Replica] = ColdIndex()
        """[place]'s index of cold loads (``_place_indexed``)."""
        self._dirty = self._index.dirty
        """The index's list of replicas whose cold key may have changed, appended to inline where a
        request passes (``_touch`` elsewhere)."""
        self._reweighed: set[str] = set()
        """Adapters whose demand weight changed since ``_reindex``: the replicas where one is idle may
        have another victim. Read then, not as it changes, so that a hit's count stays apart from
        the fleet's size (a hot adapter may be held on every replica)."""
        self._refused: dict[str, tuple[float, str]] = {}
        """Adapters the engine refused as their own fault: until when, and the engine's words."""
        self._pins: dict[str, AdapterPinned] = {}
        self._clock = 0.0
        self._standing_by = False
        """[standby]: another router decides for this one, so no replica is listed at the shared pace."""
        self._logical = 0
        self._next_op = 1
        self._last_ticket = 0
        self._replicas: dict[str, Replica] = {}
        self._due: list[tuple[float, str]] = []
        self._ops: dict[int, Operation] = {}
        self._leases: dict[int, Held] = {}
        self._waiting: dict[int, Wait] = {}
        self._parked: dict[str, Parked] = {}
        """[renew]: adapter name to the routed requests waiting for a replica to place them on."""
        self._where: dict[str, dict[str, Replica]] = {}
        """Adapter name to the replicas in use that hold it or are loading it: placement's index."""
        self._counts = Counts()
        self._found: tuple[int, str, str | None, float, Replica | None] | None = None
        """``place_hit``'s holder search for a request it left to ``Routed`` (ticket, adapter, model,
        clock, holder): that request's [place] takes it rather than search again, while nothing has
        moved since (``_found_for``)."""
        self._avoiding = 0.0
        """The latest time a replica was set to be avoided until ([health]): a clock past a search's
        may have let one back only while the search's clock is before it."""

    # -- the one way in --------------------------------------------------------------------------------

    def handle(self, event: Event) -> list[Command]:
        """Apply one event and return the commands it gives.

        Raises:
            UsageError: the event breaks the contract; nothing changed.
        """
        commands = self._handle(event)
        self._found = None  # used by the Routed it was for, or stale now
        if self._parked:
            commands.extend(self._place_parked())
        return commands

    def _handle(self, event: Event) -> list[Command]:
        match event:
            case Requested():
                return self._requested(event)
            case Released():
                return self._released(event.ticket)
            case Cancelled():
                return self._cancelled(event.ticket)
            case LoadFinished():
                return self._load_finished(event)
            case UnloadFinished():
                return self._unload_finished(event)
            case ListingReceived():
                return self._listing_received(event)
            case ListingFailed():
                return self._listing_failed(event)
            case AdapterMissing():
                return self._adapter_missing(event)
            case ReplicaFailed():
                return self._replica_failed_event(event)
            case ServedElsewhere():
                return self._served_elsewhere(event)
            case AdapterPinned():
                return self._adapter_pinned(event)
            case AdapterUnpinned():
                return self._adapter_unpinned(event)
            case RefusalForgotten():
                return self._refusal_forgotten(event)
            case AdapterChanged():
                return self._adapter_changed(event)
            case AdapterDismissed():
                return self._adapter_dismissed(event)
            case Routed():
                return self._routed(event)
            case ReadingReceived():
                return self._reading_received(event)
            case ReadingFailed():
                return self._reading_failed(event)
            case ReplicaAdded():
                return self._replica_added(event)
            case ReplicasRemoved():
                return self._replicas_removed(event)
            case LimitSet():
                return self._limit_set(event)
            case TimeAdvanced():
                return self._time_advanced(event)
            case StandingBy():
                return self._stood_by(event)
            case _:
                assert_never(event)

    # -- §3.1 requests: [hit], [join], [wait-unload], [read], [cold], [evict] --------------------------

    @property
    def next_ticket(self) -> int:
        """The lowest ticket a new request may take (1 before any request)."""
        return self._last_ticket + 1

    def _requested(self, event: Requested) -> list[Command]:
        """[hit], [join], [wait-unload] or [cold]: ``Grant(HIT)`` at once, or the request waits."""
        ticket, adapter, path = event.ticket, event.adapter, event.path
        rep = self._replica_for(ticket, event.replica)
        if type(adapter) is not str or not adapter or type(path) is not str or not path:
            check_fields(event)  # the error of the first wrong one (as fast as can be when none is)
        self._last_ticket = ticket
        self._count(rep, adapter)
        refused = self._refused_now(rep, adapter)
        if refused is not None:  # [refuse]: no call, the engine's words again
            return [self._fail(ticket, rep, Fault.ADAPTER, refused)]
        return self._admit(ticket, rep, adapter, path, fresh=False)

    def _refused_now(self, rep: Replica, adapter: str) -> str | None:
        """[refuse]: the engine's words if a request for ``adapter`` on ``rep`` fails at once, else None.

        A replica that holds it took it (a listing named it): that is a hit. A refusal that has run
        out is forgotten.
        """
        refused = self._refused.get(adapter)
        if refused is None or adapter in rep.held:
            return None
        if refused[0] > self._clock:  # [refuse]
            return refused[1]
        del self._refused[adapter]
        return None

    def _replica_for(self, ticket: int, replica: str) -> Replica:
        """The replica a new request names, once its ticket and replica are known to be good."""
        self._check_ticket(ticket)
        rep = self._replicas.get(replica) if type(replica) is str else None
        if rep is None or rep.removed:
            raise UnknownReplicaError(f"replica {replica!r} was never added, or was removed", replica=replica)
        return rep

    def _check_ticket(self, ticket: int) -> None:
        if type(ticket) is not int or ticket <= self._last_ticket:
            raise TicketOrderError(
                f"ticket {ticket!r} must be an int above {self._last_ticket}, the highest seen so far",
                ticket=ticket,
                highest=self._last_ticket,
            )

    def _count(self, rep: Replica, adapter: str) -> None:
        """A new request on ``rep``: in flight there, one more served, one more for the demand."""
        rep.in_flight += 1
        rep.served += 1
        if not rep.dirty:  # _touch, inline: every request's
            rep.dirty = True
            self._dirty.append(rep)
        demand = self._demand
        count = demand.get(adapter, 0) + 1
        demand[adapter] = count
        if not count & (count - 1):
            # A power of two: its weight rose, and with it the victim of a replica where it is idle.
            self._reweighed.add(adapter)
        self._to_halving -= 1
        if not self._to_halving:
            self._halve()

    def _halve(self) -> None:
        """Every ``half_life`` requests, every adapter's demand count is halved ([evict]).

        A halving takes one from every weight but 0: ``_level`` counts the halvings, so that the
        levels, and the order of [evict]'s index and of [place]'s, stand. Only a weight of 1 moves (to
        0, where it ties with the others at 0 and the idle stamps decide).
        """
        self._to_halving = self._settings.half_life
        self._epoch += 1
        demand = self._demand
        for name, count in list(demand.items()):
            if count > 1:
                demand[name] = count >> 1
            else:
                del demand[name]
                self._reweighed.add(name)

    def _hit(self, ticket: int, rep: Replica, held: Held) -> None:
        """[hit] for a new request, which counts ([place], [evict]'s demand) and then takes the adapter."""
        self._last_ticket = ticket
        self._count(rep, held.adapter)
        self._take(ticket, rep, held)

    def _ended(self, rep: Replica) -> None:
        """A request counted on ``rep`` ended (released, cancelled, failed)."""
        rep.in_flight -= 1
        self._touch(rep)

    def _take(self, ticket: int, rep: Replica, held: Held) -> None:
        """[hit]: the request uses a held adapter, which is then in use and no eviction candidate."""
        if not held.in_use:
            rep.idle.pop(held.adapter, None)  # not there if pinned
        if not rep.dirty:
            self._touch(rep)  # [cap] reads the grants
        rep.granted += 1
        held.in_use += 1
        self._leases[ticket] = held
        self._counts.hits += 1

    def _admit(
        self, ticket: int, rep: Replica, adapter: str, path: str, *, fresh: bool = True
    ) -> list[Command]:
        """[hit], [join], [wait-unload] or [cold] for a request on ``rep``.

        ``fresh`` False: its first admission, which reads the engine before a cold load with no free
        slot ([read]); admitted afresh later (after a read, an unload, from the queue), it reads no more.
        """
        unload = rep.unloading.get(adapter)
        if unload is not None:  # [wait-unload], and [renew]: the copy held or loading here is old
            unload.waiters.append((ticket, path))
            self._waiting[ticket] = unload
            return []
        held = rep.held.get(adapter)
        if held is not None:  # [hit]
            self._take(ticket, rep, held)
            return [Grant(ticket=ticket, how=_HIT)]
        load = rep.loading.get(adapter)
        if load is not None:  # [join]
            load.waiters.append(ticket)
            self._waiting[ticket] = load
            return []
        if not fresh and self._needs_read(rep):
            return self._park(ticket, rep, adapter, path, None)
        return self._start_load(ticket, rep, adapter, path)

    def _start_load(self, ticket: int | None, rep: Replica, adapter: str, path: str) -> list[Command]:
        """[cold]: start a load, taking the room of the [evict] victims; ``ticket`` None is a [pin]'s."""
        if self._at_cap(rep):
            # [cap] Even with every idle adapter unloaded the load would take the replica past its
            # cap: wait for room, first come first served.
            assert ticket is not None, "a pin is placed only where there is room"
            if rep.queue is None:
                rep.queue = Queue(rep)
            rep.queue.waiters.append((ticket, adapter, path))
            self._waiting[ticket] = rep.queue
            return []
        waiters = [] if ticket is None else [ticket]
        load = Load(rep, adapter, path, self._new_op(), waiters, ticket)
        # [evict] The engine makes room for the load by dropping the adapter it used least recently,
        # which is the machine's least recently used idle one: that victim takes no request from now
        # on, so that it stays the engine's least recently used, and its name is unloaded once the
        # load has landed. A load that fails evicts nothing, and no request waits for an unload.
        load.victims = self._doom(rep, len(rep.held) + len(rep.loading) + 1 - self._line(rep))
        rep.loading[adapter] = load
        self._where.setdefault(adapter, {})[rep.id] = rep
        self._touch(rep)
        self._ops[load.op] = load
        if ticket is not None:
            self._waiting[ticket] = load
        rep.outstanding += 1
        return [IssueLoad(load=load.op, replica=rep.id, adapter=adapter, path=path)]

    def _doom(self, rep: Replica, excess: int) -> list[Unload]:
        """[evict] Take ``excess`` idle adapters, least recently used first (or as many as are idle),
        out of ``held`` into ``unloading``, their unloads not issued yet."""
        victims: list[Unload] = []
        while excess > 0 and rep.idle:
            victim, stamp = next(iter(rep.idle.items()))
            since = rep.held[victim].since
            self._drop(rep, victim)
            unload = Unload(rep, victim, None, since=since, stamp=stamp)
            rep.unloading[victim] = unload
            victims.append(unload)
            excess -= 1
        return victims

    def _unload(self, unload: Unload) -> IssueUnload:
        """Issue ``unload``: a number, and the command."""
        unload.op = self._new_op()
        unload.replica.outstanding += 1
        self._ops[unload.op] = unload
        return IssueUnload(unload=unload.op, replica=unload.replica.id, adapter=unload.adapter)

    def _evict(self, rep: Replica, excess: int) -> list[Command]:
        """[settle] Unload ``excess`` idle adapters now, least recently used first, or as many as are idle."""
        commands: list[Command] = []
        while excess > 0 and rep.idle:
            commands.append(self._unload_idle(rep, next(iter(rep.idle))))
            excess -= 1
        return commands

    def _unload_idle(self, rep: Replica, name: str) -> IssueUnload:
        """Unload ``name``, idle on ``rep``, now ([settle], [dismiss]): no request may take it."""
        self._drop(rep, name)
        unload = Unload(rep, name, None)
        rep.unloading[name] = unload
        return self._unload(unload)

    # -- §3.2 the engine's answers: [load-outcome], [settle], [unload-outcome] -------------------------

    def _load_finished(self, event: LoadFinished) -> list[Command]:
        """[load-outcome]: success grants every waiter; a failure fails every waiter with its fault."""
        op = self._issued(event.load, Load, "load")
        check_fields(event)
        outcome = event.outcome
        del self._ops[event.load]
        rep = op.replica
        del rep.loading[op.adapter]
        self._unwhere(rep, op.adapter)
        self._touch(rep)
        key = (rep.model, outcome.value)
        self._counts.loads[key] = self._counts.loads.get(key, 0) + 1
        renewal = rep.unloading.get(op.adapter)  # [renew]: the adapter changed while it loaded
        if self._count_answer(rep):
            if renewal is not None:
                del rep.unloading[op.adapter]
            return []
        commands: list[Command] = []
        if outcome is LoadOutcome.REPLICA_FAULT:
            self._replica_fault(rep)
        else:
            self._replica_ok(rep)
        if outcome is LoadOutcome.ADAPTER_FAULT and renewal is None:  # [renew]: files since replaced
            self._refused[op.adapter] = (
                self._clock + self._settings.refusal,
                event.message or load_failed_message(op.adapter, rep.id),
            )
        if outcome.succeeded:
            held = Held(rep, op.adapter, len(op.waiters), self._tick())
            rep.held[op.adapter] = held
            rep.granted += len(op.waiters)
            if renewal is None:
                self._where.setdefault(op.adapter, {})[rep.id] = rep
                if not held.in_use and op.adapter not in self._pins and op.adapter not in rep.named:
                    rep.idle[op.adapter] = held.since
            for ticket in op.waiters:
                del self._waiting[ticket]
                self._leases[ticket] = held
                if ticket == op.starter:
                    self._counts.loaded += 1
                    commands.append(Grant(ticket=ticket, how=How.LOADED))
                else:
                    self._counts.joined += 1
                    commands.append(Grant(ticket=ticket, how=How.JOINED))
            commands.extend(self._unload(unload) for unload in op.victims)  # [evict]: room it took
            if renewal is not None:
                commands.extend(self._retire(rep, held))  # [renew]: its waiters asked before the change
            commands.extend(self._settle(rep))
            if renewal is None and self._pins:
                commands.extend(self._warmed(rep, op.adapter))
        else:
            fault = Fault.ADAPTER if outcome is LoadOutcome.ADAPTER_FAULT else Fault.REPLICA
            text = event.message or load_failed_message(op.adapter, rep.id)
            for ticket in op.waiters:
                del self._waiting[ticket]
                commands.append(self._fail(ticket, rep, fault, text))
            commands.extend(self._spare(op))
            if renewal is not None:
                # [renew]: no old copy came: the requests that waited for it load the new files.
                del rep.unloading[op.adapter]
                commands.extend(self._readmit(renewal))
        commands.extend(self._admit_queued(rep))
        if self._pins and not outcome.succeeded:
            commands.extend(self._ensure_pins())
        return commands

    def _spare(self, load: Load) -> list[Command]:
        """[evict]: a load that failed took no room: its victims are held again, idle where they were,
        and the requests that waited for their unloads are admitted afresh."""
        rep = load.replica
        commands: list[Command] = []
        for unload in load.victims:
            if unload.renew:
                commands.append(self._unload(unload))  # [renew]: an old copy is never held again
                continue
            del rep.unloading[unload.adapter]
            rep.held[unload.adapter] = Held(rep, unload.adapter, 0, unload.since)
            self._where.setdefault(unload.adapter, {})[rep.id] = rep
            if unload.adapter not in self._pins and unload.adapter not in rep.named:
                _idle_at(rep.idle, unload.adapter, unload.stamp)
            self._touch(rep)
        for unload in load.victims:
            if not unload.renew:
                commands.extend(self._readmit(unload))
        return commands

    def _readmit(self, unload: Unload) -> list[Command]:
        """Admit afresh, in order, the requests that waited for ``unload`` (answered, or not needed)."""
        commands: list[Command] = []
        for ticket, path in unload.waiters:
            del self._waiting[ticket]
            commands.extend(self._admit(ticket, unload.replica, unload.adapter, path))
        return commands

    def _settle(self, rep: Replica) -> list[Command]:
        """[settle]: a replica holding more than its line unloads the excess, idle adapters least
        recently used first, once a reading says which run on the engine ([read]): now, when no
        other router's requests run there. Loads still out are not counted: one that fails evicts
        nothing."""
        if len(rep.held) <= self._line(rep) or not rep.idle:
            return []
        if self._wants_reading(rep):
            rep.settle = True
            return [] if rep.read is not None else [self._start_read(rep)]
        return self._evict(rep, len(rep.held) - self._line(rep))

    def _settled(self, rep: Replica) -> list[Command]:
        """[settle]: the reading a landed load waited for has come: unload the excess now."""
        if not rep.settle:
            return []
        rep.settle = False
        if len(rep.held) <= self._line(rep):
            return []
        return self._evict(rep, len(rep.held) - self._line(rep))

    def _unload_finished(self, event: UnloadFinished) -> list[Command]:
        """[unload-outcome]: whatever the answer, the adapter is gone from the machine's view.

        A failed unload may leave it on the engine; the next listing says so. The load waiting on
        it goes out once no other unload holds it back, and requests waiting for it are handled
        afresh.
        """
        op = self._issued(event.unload, Unload, "unload")  # one not yet issued is not in the operations
        check_fields(event)
        del self._ops[event.unload]
        rep = op.replica
        del rep.unloading[op.adapter]
        key = (rep.model, event.outcome.value)
        self._counts.evictions[key] = self._counts.evictions.get(key, 0) + 1
        if self._count_answer(rep):
            return []
        if rep.listing is not None:
            rep.dropped_while_listing.add(op.adapter)
        commands: list[Command] = []
        if self._settings.routers > 1 and event.outcome is UnloadOutcome.NOT_FOUND and not op.renew:
            # [share] Another router unloaded it first, most likely to make room for an adapter this
            # one does not see: count that one until the next listing. (An old copy of a changed
            # adapter every router unloads: no other adapter took its slot.)
            rep.unseen += 1
            self._touch(rep)
        commands.extend(self._readmit(op))
        if op.renew and op.adapter in self._pins:
            commands.extend(self._ensure_pins())  # [renew], [pin]: the new files, where placement says
        return commands

    def _count_answer(self, rep: Replica) -> bool:
        """Count an answered operation of ``rep``; True when ``rep`` was removed, so the answer is ignored.

        The last answer a removed replica waited for lets it be forgotten.
        """
        rep.outstanding -= 1
        if not rep.removed:
            return False
        self._forget_if_done(rep)
        return True

    def _forget_if_done(self, rep: Replica) -> None:
        """Forget a removed replica once no call to it is out and no request runs on it."""
        if not rep.outstanding and not rep.held and self._replicas.get(rep.id) is rep:
            del self._replicas[rep.id]

    # -- §3.3 the end of a request: [release], [cancel] ------------------------------------------------

    def _released(self, ticket: int) -> list[Command]:
        """[release]: the request is done with its adapter; a second release does nothing.

        An adapter it leaves idle is room for a request waiting at the replica's cap ([cap]).
        """
        held = self._leases.pop(ticket, None) if type(ticket) is int else None
        if held is None:
            self._check_ended_ticket(ticket, "release")
            return []
        held.in_use -= 1
        rep = held.replica
        rep.in_flight -= 1  # the request ended
        rep.granted -= 1
        if not rep.dirty:
            self._touch(rep)
        if held.in_use or not held.current:
            if rep.queue is not None and not rep.removed and self._engine_drained(rep):
                return self._admit_queued(rep)  # [cap]: the engine's queue may have emptied: room
            return []
        if rep.removed:
            # Kept only while requests ran on it (see Removal above): now it can go.
            self._drop(rep, held.adapter)
            rep.unloading.pop(held.adapter, None)  # [renew]: an old copy's unload, never issued now
            self._forget_if_done(rep)
            return []
        if rep.read is not None:
            rep.read.ended.add(held.adapter)  # [reading]: the sample may have caught it running
        if rep.unloading and held.adapter in rep.unloading:
            return self._retire(rep, held)  # [renew]: the old copy's last request ended
        if held.adapter in self._pins:
            return []  # [pin]: never a victim, so never idle
        if held.adapter in rep.named:
            # [reading]: the last reading keeps it out of idle. [read]: with requests waiting at the
            # cap, read again, so that the room this request leaves does not wait for the next listing.
            if self._settings.read_engine and rep.queue is not None and rep.read is None:
                return [self._start_read(rep)]
            return []
        # Least recently used order is the order in which adapters became idle: any use of an
        # idle adapter takes it out of the idle list, so its last use is its release.
        self._logical += 1  # _tick
        rep.idle[held.adapter] = self._logical
        return self._admit_queued(rep) if rep.queue is not None else []

    def _cancelled(self, ticket: int) -> list[Command]:
        """[cancel]: a waiting request gets no grant; a granted one is released.

        The load it waited on goes on for the others, and lands idle if no one waits for it any more.
        """
        if type(ticket) is int and ticket in self._leases:
            return self._released(ticket)
        waited = self._waiting.pop(ticket, None) if type(ticket) is int else None
        if waited is None:
            self._check_ended_ticket(ticket, "cancel")
            return []
        if isinstance(waited, Parked):  # counted on no replica
            waited.routes = [r for r in waited.routes if r.ticket != ticket]
            if not waited.routes and self._parked.get(waited.adapter) is waited:
                del self._parked[waited.adapter]
            return []
        rep = waited.replica
        if isinstance(waited, Read):
            entry = next(w for w in waited.waiters if w[0] == ticket)
            waited.waiters.remove(entry)
            if entry[3] is None:
                self._ended(rep)  # a routed request not yet assigned is counted nowhere
            return []
        self._ended(rep)
        if isinstance(waited, Load):
            waited.waiters.remove(ticket)
            if waited.starter == ticket:
                waited.starter = None
        elif isinstance(waited, Unload):
            waited.waiters = [(t, p) for t, p in waited.waiters if t != ticket]
        else:
            waited.waiters = [w for w in waited.waiters if w[0] != ticket]
            if not waited.waiters and rep.queue is waited:
                rep.queue = None  # no request waits at the cap any more ([read] reads for those that do)
        return []

    def _check_ended_ticket(self, ticket: int, what: str) -> None:
        """Raise unless ``ticket`` names a request that has ended (so ending it again does nothing)."""
        if type(ticket) is int and ticket in self._waiting:
            raise UnknownTicketError(
                f"cannot {what} ticket {ticket}: it is still waiting (cancel it)", ticket=ticket
            )
        if type(ticket) is not int or not 0 < ticket <= self._last_ticket:
            raise UnknownTicketError(
                f"cannot {what} ticket {ticket!r}: no request ever had it", ticket=ticket
            )

    # -- §3.4 listings: [time], [listing] --------------------------------------------------------------

    def _time_advanced(self, event: TimeAdvanced) -> list[Command]:
        """[time]: the shell's clock reads ``now``; start the listings that are due."""
        check_fields(event)
        self._check_clock(event.now)
        return self._advance(event.now)

    def _check_clock(self, now: float) -> None:
        if now < self._clock:
            raise ClockWentBackwardsError(
                f"now {now} is before {self._clock}, given earlier", now=now, last=self._clock
            )

    def _advance(self, now: float) -> list[Command]:
        """[time], its checks passed."""
        self._clock = float(now)
        commands: list[Command] = []
        due = self._due
        while due and due[0][0] <= now:
            at, replica = heapq.heappop(due)
            rep = self._replicas.get(replica)
            if rep is None or rep.removed or rep.due != at:
                continue  # left behind by a removal or a re-add
            rep.due = now + self._interval(rep)
            heapq.heappush(due, (rep.due, replica))
            if rep.listing is None:
                commands.append(self._start_listing(rep))
        if self._pins:
            commands.extend(self._ensure_pins())  # replicas back from their backoff
        return commands

    def _interval(self, rep: Replica) -> float:
        """[time]: seconds to ``rep``'s next listing: ``shared_interval`` while other routers use it,
        unless one of them decides for this one ([standby])."""
        shared = self._settings.shared_interval
        return (
            shared
            if shared is not None and rep.shared_until > self._clock and not self._standing_by
            else self._settings.listing_interval
        )

    def _stood_by(self, event: StandingBy) -> list[Command]:
        """[standby]: while another router decides, this one's picture of the engines is wanted only
        once it decides again: it lists them at the listing interval meanwhile, and every one then."""
        check_fields(event)
        was, self._standing_by = self._standing_by, event.on
        if event.on or not was:
            return []
        commands: list[Command] = []
        for rep in sorted(self._replicas.values(), key=lambda r: r.id):
            if rep.removed or rep.listing is not None:
                continue
            rep.due = self._clock + self._interval(rep)
            heapq.heappush(self._due, (rep.due, rep.id))
            commands.append(self._start_listing(rep))
        return commands

    def _shared(self, rep: Replica) -> None:
        """[time]: another router works on ``rep`` (a reading showed it): it is listed every
        ``shared_interval`` for the next ``listing_interval``, the next listing that soon at the latest."""
        rep.shared_until = self._clock + self._settings.listing_interval
        sooner = self._clock + self._interval(rep)
        if rep.due > sooner:
            rep.due = sooner
            heapq.heappush(self._due, (sooner, rep.id))

    def next_due(self) -> float | None:
        """When the machine next wants ``advance`` called: the least due time of the replicas in use.

        None when no replica is in use. Removed replicas have no due time.
        """
        due = self._due
        while due:
            at, replica = due[0]
            rep = self._replicas.get(replica)
            if rep is not None and not rep.removed and rep.due == at:
                return at
            heapq.heappop(due)  # left behind; dropping it changes nothing the caller can see
        return None

    def _start_listing(self, rep: Replica) -> ReadListing:
        listing = Listing(rep, self._new_op(), self._tick())
        rep.listing = listing
        rep.dropped_while_listing = set()
        rep.outstanding += 1
        self._ops[listing.op] = listing
        return ReadListing(listing=listing.op, replica=rep.id)

    def _issued(self, number: int, kind: type[_Op], noun: str) -> _Op:
        """The operation ``number`` names, of ``kind``, issued and awaiting its answer."""
        op = self._ops.get(number) if type(number) is int else None
        if not isinstance(op, kind):
            raise UnknownOperationError(
                f"{noun} {number!r} is not an issued {noun} awaiting its answer", operation=number, kind=noun
            )
        return op

    def _finish(self, op: Listing | Read) -> bool:
        """Count ``op`` as answered; False when its answer is to be ignored (removed, or abandoned)."""
        del self._ops[op.op]
        rep = op.replica
        if self._count_answer(rep):
            return False
        if rep.listing is op:
            rep.listing = None
        elif rep.read is op:
            rep.read = None
        else:
            return False  # abandoned: a newer one went out
        return True

    def _met(self, rep: Replica) -> list[Command]:
        if rep.met:
            return []
        rep.met = True
        return [MarkMet(replica=rep.id)]

    def _listing_received(self, event: ListingReceived) -> list[Command]:
        """[listing]: the replica listed ``adapters``; apply it as of when it started.

        Listed adapters the machine did not know are held, least recently used of all (in name
        order). Held adapters not listed are dropped if they were held before the listing started,
        in use or not: the engine does not have them. Adapters being loaded or unloaded are left to
        their outcome, and adapters dropped since the listing started stay dropped.
        """
        names = event.adapters
        finished = self._issued(event.listing, Listing, "listing")
        check_fields(event)
        if not self._finish(finished):
            return []
        rep = finished.replica
        self._replica_ok(rep)
        commands = self._met(rep)
        listed = set(names)
        renewals: list[Unload] = []
        for name, held in list(rep.held.items()):
            if name not in listed and held.since < finished.started:
                self._drop(rep, name)
                renewals.extend(self._unrenew(rep, name))
        known = rep.held.keys() | rep.loading.keys() | rep.unloading.keys() | rep.dropped_while_listing
        rep.dropped_while_listing = set()
        since = self._tick()
        for name in sorted(listed - known, reverse=True):
            rep.held[name] = Held(rep, name, 0, since)
            self._where.setdefault(name, {})[rep.id] = rep
            if name not in self._pins and name not in rep.named:
                rep.front -= 1  # older than anything, and the stamps still rise along idle
                rep.idle[name] = rep.front
                rep.idle.move_to_end(name, last=False)
        rep.base, rep.unseen = len(rep.held) + len(rep.loading), 0  # [share]: shared afresh
        self._touch(rep)
        rep.listed_since_reading = True
        if self._pins:
            for name in sorted(listed - known):
                commands.extend(self._warmed(rep, name))
        for renewal in renewals:
            commands.extend(self._readmit(renewal))
        commands.extend(self._admit_queued(rep))
        if self._pins:
            commands.extend(self._ensure_pins())
        if self._settings.read_engine and rep.read is None:
            commands.append(self._start_read(rep))  # [read]: what runs there, as of the listing
        return commands

    def _listing_failed(self, event: ListingFailed) -> list[Command]:
        """[listing]: the listing could not be read: nothing changes but that the replica is met."""
        finished = self._issued(event.listing, Listing, "listing")
        check_fields(event)
        if not self._finish(finished):
            return []
        finished.replica.dropped_while_listing = set()
        self._replica_fault(finished.replica)
        commands = self._met(finished.replica)
        if self._pins:
            commands.extend(self._ensure_pins())  # placed elsewhere while this one is avoided
        return commands

    # -- §3.5 to §3.7: [forget], dropping, [replicas], [limit] -----------------------------------------

    def _adapter_missing(self, event: AdapterMissing) -> list[Command]:
        """[forget]: the replica said it does not have ``adapter``: stop holding it, in use or not.

        No unload is issued (the engine does not have it); leases on it go dead, and the next request
        loads it again. A report with the ticket of a request whose lease is not on the copy held now
        (an older copy, or the lease has ended) is stale and changes nothing. Adapters being loaded
        or unloaded are left to their outcome.
        """
        check_fields(event)
        replica, adapter, ticket = event.replica, event.adapter, event.ticket
        if ticket is not None and not 0 < ticket <= self._last_ticket:
            raise UnknownTicketError(f"no request ever had ticket {ticket}", ticket=ticket)
        rep = self._replicas.get(replica)
        if rep is None or rep.removed:
            return []
        held = rep.held.get(adapter)
        if held is None:
            return []
        if ticket is not None and self._leases.get(ticket) is not held:
            return []
        self._drop(rep, adapter)
        if self._settings.routers > 1:
            rep.unseen += 1  # [share]: as an unload another router answered first
            self._touch(rep)
        commands: list[Command] = []
        for renewal in self._unrenew(rep, adapter):
            commands.extend(self._readmit(renewal))
        commands.extend(self._admit_queued(rep))
        if adapter in self._pins:
            commands.extend(self._ensure_pins())
        return commands

    def _drop(self, rep: Replica, name: str) -> None:
        """Stop holding ``name`` (leaving ``idle`` too); leases on it go dead."""
        held = rep.held.pop(name)
        held.current = False
        rep.idle.pop(name, None)
        self._touch(rep)
        self._unwhere(rep, name)
        if rep.listing is not None:
            rep.dropped_while_listing.add(name)

    def _unrenew(self, rep: Replica, name: str) -> list[Unload]:
        """[renew]: ``rep`` no longer holds the old copy of ``name`` (a listing or the engine said so):
        the unload that waited for it is not needed; its waiters are the caller's to admit afresh."""
        unload = rep.unloading.get(name)
        if unload is None or name in rep.loading:
            return []
        del rep.unloading[name]
        return [unload]

    def _unwhere(self, rep: Replica, adapter: str) -> None:
        where = self._where.get(adapter)
        if where is not None and where.pop(rep.id, None) is not None and not where:
            del self._where[adapter]

    def _replica_added(self, event: ReplicaAdded) -> list[Command]:
        """[replicas]: the router will use ``replica``; a new one's listing is read at once.

        Adding a known replica again with the same model sets its limit.

        Raises:
            ReplicaConflictError: the replica is known with another model.
        """
        check_fields(event)
        replica, model, limit = event.replica, event.model, event.limit
        rep = self._replicas.get(replica)
        if rep is not None and not rep.removed:
            if rep.model != model:
                raise ReplicaConflictError(
                    f"replica {replica!r} is known with model {rep.model!r}; "
                    f"remove it before adding it with {model!r}",
                    replica=replica,
                    known_model=rep.model,
                    model=model,
                )
            rep.limit = limit
            self._touch(rep)
            return self._admit_queued(rep)
        if rep is None:
            rep = Replica(replica, model, limit, self._clock + self._settings.listing_interval)
            self._replicas[replica] = rep
        else:
            # Back while calls or requests from before its removal are still out: keep them, so
            # that a new load never crosses an old one and a running request's adapter stays held.
            rep.removed, rep.model, rep.limit, rep.met = False, model, limit, False
            rep.due = self._clock + self._settings.listing_interval
            rep.base, rep.unseen = len(rep.held) + len(rep.loading), 0  # [share]: what it knows
            for name in list(rep.held) + list(rep.loading):
                if name not in rep.unloading:  # [renew]: an old copy is no holder
                    self._where.setdefault(name, {})[rep.id] = rep
        self._touch(rep)
        heapq.heappush(self._due, (rep.due, replica))
        return [self._start_listing(rep)]

    def _replicas_removed(self, event: ReplicasRemoved) -> list[Command]:
        """[replicas]: the router no longer uses these replicas.

        Their waiting requests fail with a replica fault, in ticket order; idle adapters are
        forgotten, adapters requests still run on are kept (unseen) until those end; answers to
        calls already made are ignored. Unknown ids are passed over.
        """
        check_fields(event)
        ids = event.replicas
        failed: list[int] = []
        rerouted: list[Route] = []
        for replica in ids:
            rep = self._replicas.get(replica)
            if rep is None or rep.removed:
                continue
            rep.removed = True
            self._touch(rep)  # out of [place]'s index
            # What readings said is about the old engine; a re-added one is read afresh.
            rep.named = frozenset()
            rep.listed_since_reading = rep.names_adapters = rep.foreign = rep.settle = False
            rep.others = rep.read_served = rep.ran = rep.calm = 0
            rep.seqs = rep.max_loras = rep.sampled = None
            if rep.read is not None:
                # Its answer will be ignored: requests on the replica fail, routed ones are placed anew.
                for ticket, _, _, route in rep.read.waiters:
                    if route is None:
                        failed.append(ticket)
                    else:
                        del self._waiting[ticket]
                        rerouted.append(route)
                rep.read.waiters.clear()
                rep.read = None
            for name in [n for n, held in rep.held.items() if not held.in_use]:
                self._drop(rep, name)  # idle ones, and pinned ones no request runs on
            for name in list(rep.held) + list(rep.loading):
                self._unwhere(rep, name)  # unseen: placement never chooses a removed replica
            for load in rep.loading.values():
                failed.extend(load.waiters)
                load.waiters.clear()
                load.starter = None
                load.victims = []  # never unloaded: the replica is not in use
            for name, unload in list(rep.unloading.items()):
                failed.extend(t for t, _ in unload.waiters)
                unload.waiters.clear()
                if unload.op is None and name not in rep.held and name not in rep.loading:
                    del rep.unloading[name]  # a victim whose load is still out: never issued
                # [renew]: an old copy's stays, so that a re-add does not hold it as current
            if rep.queue is not None:
                failed.extend(t for t, _, _ in rep.queue.waiters)
                rep.queue = None
            rep.listing = None  # its answer is ignored, even if the replica comes back
            rep.dropped_while_listing = set()
            self._forget_if_done(rep)
        commands: list[Command] = []
        for ticket in sorted(failed):
            waited = self._waiting.pop(ticket)
            assert not isinstance(waited, Parked)  # on no replica: a removal fails none of them
            commands.append(self._fail(ticket, waited.replica, Fault.REPLICA, REPLICA_REMOVED))
        for route in sorted(rerouted, key=lambda r: r.ticket):
            commands.extend(self._place_route(route))
        if self._pins:
            commands.extend(self._ensure_pins())
        return commands

    def _limit_set(self, event: LimitSet) -> list[Command]:
        """[limit]: every replica of ``model`` may hold ``limit`` adapters, from its next load on."""
        check_fields(event)
        commands: list[Command] = []
        for rep in sorted(self._replicas.values(), key=lambda r: r.id):
            if rep.model == event.model and not rep.removed:
                rep.limit = event.limit
                self._touch(rep)
                commands.extend(self._admit_queued(rep))
        return commands

    # -- §3.8 failing replicas and refused adapters: [health], [blame], [refuse] -----------------------

    def _replica_ok(self, rep: Replica) -> None:
        rep.failures = 0
        rep.avoid_until = 0.0

    def _replica_fault(self, rep: Replica) -> None:
        """[health]: avoid ``rep`` for a while, twice as long as last time, up to the longest."""
        rep.failures += 1
        wait = self._settings.backoff * 2.0 ** min(rep.failures - 1, 32)
        rep.avoid_until = self._clock + min(wait, self._settings.max_backoff)
        self._avoiding = max(self._avoiding, rep.avoid_until)

    def _replica_failed_event(self, event: ReplicaFailed) -> list[Command]:
        """[health]: the router saw the replica fail; placement avoids it for a while."""
        check_fields(event)
        rep = self._replicas.get(event.replica)
        if rep is not None and not rep.removed:
            self._replica_fault(rep)
        return []

    def _served_elsewhere(self, event: ServedElsewhere) -> list[Command]:
        """[blame]: each replica that answered the request with a server error, where another then
        served it, failed; placement avoids it for a while."""
        check_fields(event)
        for replica in sorted(set(event.failed) - {event.replica}):
            rep = self._replicas.get(replica)
            if rep is not None and not rep.removed:
                self._replica_fault(rep)
        return []

    def _refusal_forgotten(self, event: RefusalForgotten) -> list[Command]:
        """[forgive]: the next request for the adapter asks an engine again, and a pin waiting out
        the refusal loads now."""
        check_fields(event)
        if event.adapter is None:
            forgot = bool(self._refused)
            self._refused.clear()
        else:
            forgot = self._refused.pop(event.adapter, None) is not None
        return self._ensure_pins() if forgot and self._pins else []

    # -- §3.17 changed adapters: [renew] ---------------------------------------------------------------

    def _adapter_changed(self, event: AdapterChanged) -> list[Command]:
        """[renew]: no request is granted a copy of ``adapter`` loaded before its files changed.

        On each replica, in id order, an idle copy is unloaded at once; a copy requests run on (this
        router's, or another's as the last reading named them), or one loading, is unloaded once the
        last of them ends, and requests for it there wait for that unload, then load the new files.
        A victim whose load is out is never held again. The refusal is forgotten, and a pinned
        adapter gets its copies of the new files where placement puts them.
        """
        check_fields(event)
        adapter = event.adapter
        self._refused.pop(adapter, None)
        commands: list[Command] = []
        for rep in sorted(self._replicas.values(), key=lambda r: r.id):
            unload = rep.unloading.get(adapter)
            if unload is not None:
                if unload.op is None:
                    unload.renew = True  # a victim, or already an old copy's unload
                continue
            held = rep.held.get(adapter)
            if held is None and adapter not in rep.loading:
                continue
            rep.unloading[adapter] = Unload(rep, adapter, None, renew=True)
            self._unwhere(rep, adapter)  # no holder any more, for placement
            if held is not None:
                rep.idle.pop(adapter, None)
                self._touch(rep)
                commands.extend(self._retire(rep, held))
        if self._pins:
            commands.extend(self._ensure_pins())
        return commands

    def _retire(self, rep: Replica, held: Held) -> list[Command]:
        """[renew]: unload the old copy ``held`` of a changed adapter if no request runs on it now."""
        unload = rep.unloading[held.adapter]
        if held.in_use or rep.removed:
            return []
        if held.adapter in rep.named:
            # Another router's requests may run on it. [read]: read again, rather than leave the
            # requests that will wait for the unload to wait for the next listing's reading.
            return [self._start_read(rep)] if self._settings.read_engine and rep.read is None else []
        self._drop(rep, held.adapter)
        return [self._unload(unload)]

    # -- §3.18 the operator's hand: [dismiss] ------------------------------------------------------------

    def _adapter_dismissed(self, event: AdapterDismissed) -> list[Command]:
        """[dismiss]: unload an adapter idle on a replica now, as [settle] unloads its excess; one that
        is not idle there (a request may run on it, or it is pinned, loading or going) is an error."""
        rep = self._replicas.get(event.replica) if type(event.replica) is str else None
        if rep is None or rep.removed:
            raise UnknownReplicaError(
                f"replica {event.replica!r} was never added, or was removed", replica=event.replica
            )
        check_fields(event)
        adapter = event.adapter
        if adapter not in rep.idle:
            reason = self._not_idle(rep, adapter)
            raise NotIdleError(
                f"adapter {adapter!r} is not idle on replica {rep.id!r}: {reason}",
                replica=rep.id,
                adapter=adapter,
                reason=reason,
            )
        return [self._unload_idle(rep, adapter)]

    def _not_idle(self, rep: Replica, adapter: str) -> str:
        """Why ``adapter`` is not idle on ``rep``, in the operator's words."""
        held = rep.held.get(adapter)
        if held is None:
            if adapter in rep.loading:
                return "it is loading there"
            if adapter in rep.unloading:
                return "it is being unloaded there"
            return "it is not held there"
        if held.in_use:
            return f"{held.in_use} of this router's requests run on it"
        if adapter in rep.unloading:
            return "its files changed: this old copy goes once no request runs on it ([renew])"
        if adapter in self._pins:
            return "it is pinned: unpin it first"
        if adapter in rep.named:
            return "the engine's last reading names it: another router's requests may run on it"
        return "it is not idle there"

    def _renewing(
        self, adapter: str, model: str | None, skip: Container[str], extra: Mapping[str, float]
    ) -> Placement:
        """[place]'s last resort: the replica replacing an old copy of ``adapter``, where a request
        waits for that copy to go; the least (busy, served, -weight) of them."""
        chosen: Replica | None = None
        chosen_key: tuple[float, int, int] = (0, 0, 0)
        clock = self._clock
        for rep in self._replicas.values():
            if rep.removed or not rep.met or rep.id in skip or rep.avoid_until > clock:
                continue
            if (model is not None and rep.model != model) or adapter not in rep.unloading:
                continue
            key = (self._busy(rep, extra), rep.served, -_rendezvous(adapter, rep.id))
            if chosen is None or key < chosen_key:
                chosen, chosen_key = rep, key
        if chosen is None:
            return Placement(replica=None, placed=None)
        return Placement(replica=chosen.id, placed=Placed.WAIT)

    @staticmethod
    def blame(replica: str, failed: Iterable[str] = ()) -> Fault:
        """[blame]: whose fault it is that ``replica`` answered a forwarded request with a server error
        (a 5xx), when the replicas ``failed`` had answered it so before: the request's when another
        replica did too (answer it, and try no more replicas), else the replica's (try another; it is
        avoided once another serves the request, ``ServedElsewhere``)."""
        return Fault.REQUEST if any(other != replica for other in failed) else Fault.REPLICA

    def _fail(self, ticket: int, rep: Replica, fault: Fault, message: str) -> Fail:
        """End a waiting request (already taken off ``_waiting``) with a ``Fail``."""
        self._ended(rep)
        self._counts.failures[fault.value] = self._counts.failures.get(fault.value, 0) + 1
        return Fail(ticket=ticket, fault=fault, message=message)

    # -- §3.9 waiting for room: [cap] ------------------------------------------------------------------

    def _at_cap(self, rep: Replica) -> bool:
        """[cap]: whether a cold load on ``rep`` waits for room: the adapters in use there (held or
        loading, and not idle) fill its line plus the headroom, so that it would pass the cap even
        with every idle one unloaded; or the load would take a victim while more adapters are in use
        than one batch of the engine runs, or while the engine queues requests (more are granted
        there, this router's and the others', than it runs at once, when that is known): either way
        an adapter in use may wait in the engine's queue, unused since before the victim's last
        request ended, and be what the engine drops instead of the victim (SPEC.md §3.16).
        """
        headroom = self._settings.headroom
        if headroom is None:
            return False
        count = len(rep.held) + len(rep.loading)
        in_use = count - len(rep.idle)
        line = self._line(rep)
        batch = rep.max_loras
        if count >= line:
            seqs = self._seqs(rep)
            if seqs is not None and rep.granted + rep.others > seqs:
                return True  # the engine queues: the load waits until it runs all it has
        if batch is None:
            return in_use >= line + headroom
        # The cap is never below what one batch of the engine can run.
        return in_use >= max(line + headroom, batch) or (count >= line and in_use > batch)

    def _engine_drained(self, rep: Replica) -> bool:
        """[cap]: a release just brought the requests granted on ``rep`` (this router's and the
        others') down to what its engine runs at once: its queue may have emptied, which is room."""
        seqs = self._seqs(rep)
        return seqs is not None and rep.granted + rep.others == seqs

    def _admit_queued(self, rep: Replica) -> list[Command]:
        """[cap]: admit the requests waiting for room on ``rep``, in order, while there is room."""
        queue = rep.queue
        if queue is None:
            return []
        commands: list[Command] = []
        while queue.waiters:
            ticket, adapter, path = queue.waiters[0]
            known = adapter in rep.held or adapter in rep.loading or adapter in rep.unloading
            if not known and self._at_cap(rep):
                break
            del queue.waiters[0]
            del self._waiting[ticket]
            commands.extend(self._admit(ticket, rep, adapter, path))
        if not queue.waiters and rep.queue is queue:
            rep.queue = None
        return commands

    # -- §3.10 pinned adapters: [pin] ------------------------------------------------------------------

    def _adapter_pinned(self, event: AdapterPinned) -> list[Command]:
        """[pin]: keep the adapter loaded on ``copies`` replicas, chosen by placement, never evicted.
        [warm]: until one copy is held, where none is and no pin is kept already."""
        check_fields(event)
        adapter = event.adapter
        if event.until_held and (adapter in self._pins or self._holds(adapter, event.model)):
            return []
        self._pins[adapter] = event
        for rep in self._where.get(adapter, {}).values():
            rep.idle.pop(adapter, None)
            self._touch(rep)
        return self._ensure_pins()

    def _holds(self, adapter: str, model: str | None) -> bool:
        """[warm]: whether a replica in use (of ``model``, if given) holds a copy of ``adapter``."""
        return any(
            adapter in rep.held and adapter not in rep.unloading and model in (None, rep.model)
            for rep in self._where.get(adapter, NOWHERE).values()
        )

    def _warmed(self, rep: Replica, adapter: str) -> list[Command]:
        """[warm]: ``rep`` holds ``adapter`` now: a pin of it that lasts until a copy is held lifts."""
        pin = self._pins.get(adapter)
        if pin is None or not pin.until_held or pin.model not in (None, rep.model):
            return []
        return self._adapter_unpinned(AdapterUnpinned(adapter=adapter))

    def _adapter_unpinned(self, event: AdapterUnpinned) -> list[Command]:
        """[pin]: the adapter's copies no request runs on become idle, most recently used."""
        check_fields(event)
        adapter = event.adapter
        if self._pins.pop(adapter, None) is None:
            return []
        commands: list[Command] = []
        for rep in sorted(self._replicas.values(), key=lambda r: r.id):
            held = rep.held.get(adapter)
            if held is not None and not held.in_use and not rep.removed and adapter not in rep.named:
                rep.idle[adapter] = self._tick()
                self._touch(rep)
                commands.extend(self._admit_queued(rep))
        return commands

    def _ensure_pins(self) -> list[Command]:
        """[pin]: start loads of pinned adapters short of their copies, where placement puts them.

        Only where there is room (a free slot, or an idle adapter to evict); replicas avoided for
        their failures, and adapters the engine refused, wait until that passes.
        """
        commands: list[Command] = []
        clock = self._clock
        for adapter in sorted(self._pins):
            pin = self._pins[adapter]
            refused = self._refused.get(adapter)
            if refused is not None and refused[0] > clock:
                continue
            have = {
                rep.id
                for rep in self._where.get(adapter, {}).values()
                if rep.avoid_until <= clock and (pin.model is None or rep.model == pin.model)
            }
            skip = set(self._where.get(adapter, {}))
            # Nor where it is being unloaded: a load and an unload of one adapter never cross.
            skip.update(rep.id for rep in self._replicas.values() if adapter in rep.unloading)
            for _ in range(pin.copies - len(have)):
                placement = self._place_cold(adapter, pin.model, skip, {}, spread=False)
                if placement.placed not in (Placed.FREE, Placed.EVICT) or placement.replica is None:
                    break
                rep = self._replicas[placement.replica]
                commands.extend(self._start_load(None, rep, adapter, pin.path))
                skip.add(rep.id)
        return commands

    # -- §3.12 placement: [load], [place] --------------------------------------------------------------

    @staticmethod
    def _load(rep: Replica) -> int:
        """[load]: the requests on ``rep``'s engine from every router: this router's own in flight,
        and the others' as its last reading showed them."""
        return rep.in_flight + rep.others

    def _busy(self, rep: Replica, extra: Mapping[str, float] | None) -> float:
        """[place]'s busy: the load, plus what the caller reports for the replica."""
        return self._load(rep) + extra.get(rep.id, 0) if extra else self._load(rep)

    def _seqs(self, rep: Replica) -> int | None:
        """[load]: requests ``rep``'s engine runs at once: the setting, else what a reading showed."""
        return self._settings.concurrency if self._settings.concurrency is not None else rep.seqs

    def _saturated(self, rep: Replica, extra: Mapping[str, float] | None) -> bool:
        """[load]: a request sent to ``rep`` would wait in its engine's queue: every slot is taken."""
        seqs = self._seqs(rep)
        return seqs is not None and self._busy(rep, extra) >= seqs

    def _queue(self, rep: Replica, extra: Mapping[str, float] | None) -> float | None:
        """[load]: the requests a new one would wait behind on ``rep``'s engine; None when unknown."""
        seqs = self._seqs(rep)
        return None if seqs is None else max(0.0, self._busy(rep, extra) - seqs)

    def place(
        self,
        adapter: str,
        *,
        model: str | None = None,
        exclude: Iterable[str] = (),
        load: Mapping[str, float] | None = None,
    ) -> Placement:
        """Where to send a request for ``adapter`` ([place]): pure, and the same for the same state.

        Candidates are the replicas in use (of ``model`` when given), not avoided, less ``exclude``
        (replicas this request already tried). The least busy holder takes it unless its engine is full (at
        ``concurrency``); else a cold load goes where it costs least: a free slot, a replica whose
        adapters are all in use (a little over its limit evicts nothing), else the least busy replica
        with an adapter to evict, the one whose victim is in least demand and idle longest among
        equally busy ones. Ties go to the replica that has served fewest,
        then to the highest rendezvous hash, so that routers with the same view choose alike.

        Args:
            load: a figure per replica id the router may report (e.g. the engine's queue length),
                added to this router's own requests in flight there.
        """
        if type(adapter) is not str or not adapter:
            raise ADAPTER.error("adapter", adapter)
        skip = exclude if isinstance(exclude, set | frozenset | dict) else set(exclude)
        return self._placement(adapter, model, skip, load or {})

    def _placement(
        self, adapter: str, model: str | None, skip: Container[str], extra: Mapping[str, float]
    ) -> Placement:
        """[place], for ``place`` and [route] alike (a subclass that records ``place`` sees queries only)."""
        return self._place_from(self._holder(adapter, model, skip, extra), adapter, model, skip, extra)

    def _place_from(
        self,
        holder: Replica | None,
        adapter: str,
        model: str | None,
        skip: Container[str],
        extra: Mapping[str, float],
    ) -> Placement:
        """[place], the holder search's answer ``holder`` in hand."""
        if holder is not None and not self._saturated(holder, extra):
            return self._at(holder, adapter)
        cold = self._place_cold(adapter, model, skip, extra, spread=True)
        if cold.replica is not None:
            return cold
        if holder is None:
            least = self._place_cold(adapter, model, skip, extra, spread=False, least=True)
            return least if least.replica is not None else self._renewing(adapter, model, skip, extra)
        # Every engine is busy: the holder's queue, unless another engine has none and the holder's
        # is at least SPILL_MARGIN long (a copy on an engine that queues stalls it and takes room).
        other = self._place_cold(adapter, model, skip, extra, spread=False, least=True)
        if other.replica is not None:
            mine = self._queue(holder, extra)
            theirs = self._queue(self._replicas[other.replica], extra)
            if mine is not None and theirs == 0 and mine >= SPILL_MARGIN:
                return other  # an engine that runs all it has: the copy neither queues nor stalls a queue
        return self._at(holder, adapter)

    def place_base(
        self,
        model: str,
        *,
        exclude: Iterable[str] = (),
        load: Mapping[str, float] | None = None,
        turn: int = 0,
        healthy: Iterable[str] = (),
    ) -> str | None:
        """Where a request for the base model ``model`` itself should go ([place-base]): pure.

        The least busy of ``model``'s replicas in use, less ``exclude``, and less those placement
        avoids ([health]) unless the caller knows them ``healthy`` for the base model; ties go round,
        from the replica ``turn`` places first (the caller moves ``turn`` on at each request). None
        when no replica is left.

        Args:
            load: a figure per replica id the router reports (e.g. its base-model requests there),
                added to its [load].
        """
        if type(model) is not str or not model:
            raise MODEL.error("model", model)
        if type(turn) is not int:
            raise invalid("turn", turn, "turn must be an int")
        ids = sorted(rid for rid, rep in self._replicas.items() if not rep.removed and rep.model == model)
        skip = set(exclude)
        allowed = set(healthy)
        extra = load or {}
        best: str | None = None
        best_key: tuple[float, int] = (0.0, 0)
        for i, rid in enumerate(ids):
            rep = self._replicas[rid]
            if rid in skip or (rep.avoid_until > self._clock and rid not in allowed):
                continue
            key = (self._busy(rep, extra), (i - turn) % len(ids))
            if best is None or key < best_key:
                best, best_key = rid, key
        return best

    @staticmethod
    def _at(rep: Replica, adapter: str) -> Placement:
        return Placement(replica=rep.id, placed=Placed.HELD if adapter in rep.held else Placed.LOADING)

    def _holder(
        self, adapter: str, model: str | None, skip: Container[str], extra: Mapping[str, float] | None
    ) -> Replica | None:
        """[place]'s first choice: the holder (held or loading) with the least (busy, served, -weight).

        The rendezvous weights are computed only for a tie: a warm request's placement is its hot path.
        """
        best: Replica | None = None
        best_busy: float = 0
        best_served = 0
        best_weight = -1
        clock = self._clock
        for rep in self._where.get(adapter, NOWHERE).values():
            if not rep.met or rep.avoid_until > clock or rep.id in skip:
                continue
            if model is not None and rep.model != model:
                continue
            busy: float = rep.in_flight + rep.others  # _busy, inline, as is the key's comparison
            if extra:
                busy += extra.get(rep.id, 0)
            served = rep.served
            if best is None or busy < best_busy or (busy == best_busy and served < best_served):
                best, best_busy, best_served, best_weight = rep, busy, served, -1
            elif busy == best_busy and served == best_served:
                if best_weight < 0:
                    best_weight = _rendezvous(adapter, best.id)
                weight = _rendezvous(adapter, rep.id)
                if weight > best_weight:
                    best, best_weight = rep, weight
        return best

    def _place_cold(
        self,
        adapter: str,
        model: str | None,
        skip: Container[str],
        extra: Mapping[str, float],
        *,
        spread: bool,
        least: bool = False,
    ) -> Placement:
        """[place], a cold load: the candidate not holding ``adapter`` where the load costs least.

        With ``spread``, only replicas whose engine runs under three quarters of what it can at once
        (when that is known); ``least`` picks the least busy instead, whatever the load would cost.

        Without ``least`` or a load the caller reports (every routed request's case), the index of
        cold keys answers (``_place_indexed``); else every candidate is scanned, as here.
        """
        if not least and not extra:
            return self._place_indexed(adapter, model, skip, spread)
        chosen: Replica | None = None
        chosen_key: tuple[Any, ...] = ()
        chosen_kind = 0
        clock = self._clock
        for rep in self._replicas.values():
            if rep.removed:
                continue
            busy = self._busy(rep, extra)
            if not self._candidate(adapter, model, skip, spread, busy, clock, rep):
                continue
            kind, _, a, b, served = self._cold_key(rep)
            if spread and kind == 4:
                continue  # at its cap: the request would wait for room, while others may have some
            weight = -_rendezvous(adapter, rep.id)
            key = (kind == 4, busy, served, weight) if least else (kind, busy, a, b, served, weight)
            if chosen is None or key < chosen_key:
                chosen, chosen_key, chosen_kind = rep, key, kind
        if chosen is None:
            return Placement(replica=None, placed=None)
        return Placement(replica=chosen.id, placed=PLACED[chosen_kind])

    def _candidate(
        self,
        adapter: str,
        model: str | None,
        skip: Container[str],
        spread: bool,
        busy: float,
        clock: float,
        rep: Replica,
    ) -> bool:
        """[place]: whether ``rep`` (in use) is a candidate for a cold load of ``adapter``, the scan's
        and the index's alike (a candidate at its cap is the caller's to pass over or not).

        The replica comes last, so that a ``functools.partial`` binds the rest for a walk (``_first``).
        """
        if not rep.met or rep.avoid_until > clock or rep.id in skip:
            return False
        if (model is not None and rep.model != model) or adapter in rep.held or adapter in rep.loading:
            return False
        if spread:
            seqs = self._seqs(rep)
            # Three quarters exactly, in integers. Rounded down, an engine of 2 at once took a copy
            # only when idle, one of 3, 5, 6 or 7 stopped a request early, and a hot adapter's holder
            # queued instead: p99 1.7 to 2.2x least-loaded's (the grid's max_num_seqs rows, docs/sizing.md).
            if seqs is not None and 4 * busy >= 3 * seqs:
                return False
        return True

    def _cold_key(self, rep: Replica) -> Key:
        """[place] What a cold load would cost on ``rep``, whatever the adapter: (kind, busy, a, b,
        served), ``a`` the victim's level (``_level``: ordered as its weight, and moved by no halving)."""
        count = len(rep.held) + len(rep.loading)
        line = self._line(rep)
        headroom = self._settings.headroom
        busy = rep.in_flight + rep.others
        if headroom is not None and self._at_cap(rep):
            return (4, busy, 0, 0, rep.served)
        if count < line:
            return (0, busy, 0, 0, rep.served)
        if not rep.idle:
            return (1 if count < line + self._settings.overflow else 3, busy, 0, 0, rep.served)
        victim = self._victim(rep)
        return (2, busy, self._level(victim), max(rep.idle[victim], 0), rep.served)

    def _weight(self, adapter: str) -> int:
        """[evict] An adapter's demand class: the bit length of its decayed request count."""
        return self._demand.get(adapter, 0).bit_length()

    def _level(self, adapter: str) -> int:
        """[evict] An adapter's weight as a level that no halving moves: 0 for a weight of 0, else the
        weight plus the halvings so far (a halving takes 1 from both, while the count stays above 0).
        Levels order adapters as their weights do."""
        count = self._demand.get(adapter, 0)
        return count.bit_length() + self._epoch if count else 0

    @staticmethod
    def _victim(rep: Replica) -> str:
        """[evict] The idle adapter used least recently (``idle`` not empty): the engine's own victim."""
        return next(iter(rep.idle))

    # -- §3.13 several routers: [reading], [read-failed] ---------------------------------------------

    def _reading_received(self, event: ReadingReceived) -> list[Command]:
        """[read], [reading]: the engine's figures replace the last reading; waiting requests go on."""
        op = self._issued(event.read, Read, "read")
        check_fields(event)
        names, running, waiting, max_loras = event.adapters, event.running, event.waiting, event.max_loras
        if not self._finish(op):
            return []
        rep = op.replica
        self._touch(rep)  # others and max_loras, in its cold key
        rep.names_adapters = names is not None  # without the gauge: empty readings, no reads before requests
        rep.read_served = op.served
        if running is not None and waiting is not None:
            # [load]: the engine's own count, and what it says of its capacity: a queue means full.
            rep.sampled = running, waiting
            rep.others = max(0, running + waiting - op.in_flight)
            rep.ran = max(rep.ran, running)
            if waiting:
                rep.seqs = max(rep.ran, rep.seqs or 1)  # a sample may fall between two steps
            else:
                # With this many requests on it (ours counted as the read went out) nothing waited.
                rep.calm = max(rep.calm, op.in_flight + rep.others)
        raised = max_loras is not None and max_loras > (rep.max_loras or 0)
        rep.max_loras = max_loras if max_loras else rep.max_loras
        # Another router's doing, unless it names only adapters this router runs on there, or ran on
        # while the read was out (the sample may predate their end), and counts no request beyond.
        mine, named = rep.held, frozenset(names or ())
        foreign = (running is not None and waiting is not None and rep.others > 0) or any(
            name not in mine or not (mine[name].in_use or name in op.ended) for name in named
        )
        commands = self._new_reading(rep, named, foreign)
        if raised:
            commands.extend(self._admit_queued(rep))  # [cap]: a higher max_loras may raise the cap
        commands.extend(self._settled(rep))
        commands.extend(self._unpark(op))
        return commands

    def _reading_failed(self, event: ReadingFailed) -> list[Command]:
        """[read-failed]: a read got no answer; the last reading stands unless a listing came in since.

        A read fails most often when the engine is busiest, which is when what the last reading named
        most likely still runs: so it stands, unless a listing of the replica came in after it. The
        engine has been read afresh since that reading, and no reading outlives the next listing by
        more than a read: then it ends, as an empty one would end it. The requests waiting for the
        read go on with what the machine knows.
        """
        op = self._issued(event.read, Read, "read")
        check_fields(event)
        if not self._finish(op):
            return []
        rep = op.replica
        commands = self._new_reading(rep, frozenset(), None) if rep.listed_since_reading else []
        commands.extend(self._settled(rep))
        commands.extend(self._unpark(op))
        return commands

    def _new_reading(self, rep: Replica, names: frozenset[str], foreign: bool | None) -> list[Command]:
        """[reading]: ``names`` replace the replica's last reading; ``foreign``: another router's doing
        (None: an ended reading, [read-failed], which leaves that judgement as it was).

        One that is not says nothing of another router: it stands as an empty one, and what it names
        goes idle as its requests end, as without a reading. One that is keeps all it names out of
        ``idle`` until the next reading (another router's request may run on an adapter of ours),
        and evictions there wait for a fresh one ([read]).
        """
        rep.listed_since_reading = False
        self._touch(rep)  # idle may change
        if foreign is not None:
            rep.foreign = foreign
            if not foreign:
                names = frozenset()
            elif self._settings.shared_interval is not None and any(_theirs(rep, name) for name in names):
                self._shared(rep)
        before, rep.named = rep.named, names
        for name in rep.named - before:
            rep.idle.pop(name, None)
        freed = False
        commands: list[Command] = []
        for name in sorted(before - rep.named):
            held = rep.held.get(name)
            if held is None or held.in_use:
                continue
            if name in rep.unloading:
                commands.extend(self._retire(rep, held))  # [renew]: its last request ended
                freed = True
            elif name not in self._pins:
                rep.idle[name] = self._tick()
                freed = True
        if freed:
            commands.extend(self._admit_queued(rep))
        return commands

    # -- §3.14 limits across routers: [share] ----------------------------------------------------------

    def _line(self, rep: Replica) -> int:
        """[share] How many adapters this router lets ``rep`` hold before a cold load evicts.

        Its limit, less the other routers' shares of the ``f`` free slots its last listing left
        (this router fills ``ceil(f / routers)`` of them), less one for each adapter the engine lost
        since without this router's unload (another router's took its slot), and at least 1. With
        one router, the limit.
        """
        if self._settings.routers == 1:
            return rep.limit
        free = rep.limit - rep.base
        line = rep.limit if free <= 0 else rep.base + -(-free // self._settings.routers)
        # Never below 1: a line at 0 would close the cap (line + headroom) on a replica whose every
        # adapter is in use until the next listing; the simulator's waits grew a hundredfold without it.
        return max(line - rep.unseen, 1)

    # -- §3.15 reading engines, and routed requests: [read], [route] -----------------------------------

    def _needs_read(self, rep: Replica) -> bool:
        """[read]: whether a cold load on ``rep`` waits for a reading of its engine first.

        When it has no free slot (the load would evict, go over its limit or wait at its cap) and its
        engine names what runs there, or is being read: a fresh reading may spare a victim another
        router runs on, or show room an ended request left.
        """
        return self._wants_reading(rep) and len(rep.held) + len(rep.loading) + 1 > self._line(rep)

    def _wants_reading(self, rep: Replica) -> bool:
        """[read]: whether an eviction on ``rep`` waits for a fresh reading: its last reading named an
        adapter no request of this router runs on there (another router's), or its first reading is
        on its way. A router alone, whose readings name only its own requests, never waits."""
        if not self._settings.read_engine:
            return False
        return rep.foreign if rep.names_adapters else rep.read is not None

    def _stale(self, rep: Replica, coming: int = 0) -> bool:
        """[read]: whether a request placed on ``rep`` asks for a fresh reading (nothing waits for it):
        its engine counts its requests, its capacity is unknown, and its load is above any a reading
        found it carry with no queue (a read may show it full, and a hot adapter needs a copy); or
        other routers use it, and this router has sent it ``REFRESH`` requests since its last reading
        (their load moves too). ``coming``: the request is not counted yet (``place_hit``)."""
        if not self._settings.read_engine or not rep.names_adapters or rep.read is not None:
            return False
        if rep.foreign and rep.served + coming - rep.read_served >= REFRESH:
            return True
        if rep.sampled is None or rep.seqs is not None or self._settings.concurrency is not None:
            return False
        return self._load(rep) + coming > rep.calm

    def _park(self, ticket: int, rep: Replica, adapter: str, path: str, route: Route | None) -> list[Command]:
        """[read]: the request waits for the read of ``rep`` in flight, or for one started now."""
        commands: list[Command] = []
        if rep.read is None:
            commands.append(self._start_read(rep))
        assert rep.read is not None
        rep.read.waiters.append((ticket, adapter, path, route))
        self._waiting[ticket] = rep.read
        return commands

    def _start_read(self, rep: Replica) -> ReadEngine:
        read = Read(rep, self._new_op(), rep.in_flight, rep.served)
        rep.read = read
        rep.outstanding += 1
        self._ops[read.op] = read
        return ReadEngine(read=read.op, replica=rep.id)

    def _unpark(self, op: Read) -> list[Command]:
        """[read]: admit afresh the requests that waited for ``op``, in order; routed ones placed afresh."""
        commands: list[Command] = []
        rep = op.replica
        for ticket, adapter, path, route in op.waiters:
            del self._waiting[ticket]
            if route is None:
                commands.extend(self._admit(ticket, rep, adapter, path))
            else:
                commands.extend(self._place_route(route))
        return commands

    def _routed(self, event: Routed) -> list[Command]:
        """[route]: a request for ``adapter`` wherever placement puts it."""
        ticket = event.ticket
        self._check_ticket(ticket)
        check_fields(event)
        found = self._found
        commands: list[Command] = []
        if event.now is not None:
            self._check_clock(event.now)
            commands = self._advance(event.now)  # [time] first: the clock placement reads
        self._last_ticket = ticket
        route = Route(ticket, event.adapter, event.path, event.model, frozenset(event.exclude))
        placement = None
        if found is not None and not commands and self._found_for(found, route):
            placement = self._place_from(found[4], route.adapter, route.model, route.exclude, {})
        commands.extend(self._place_route(route, placement))
        return commands

    def _place_route(self, route: Route, placement: Placement | None = None) -> list[Command]:
        """[route]: place the request (unless ``placement`` did), read the replica first if [read]
        asks, then assign and admit it."""
        ticket, adapter = route.ticket, route.adapter
        if placement is None:
            placement = self._placement(adapter, route.model, route.exclude, {})
        if placement.replica is None or placement.placed is None:
            self._counts.failures[Fault.REPLICA.value] = self._counts.failures.get(Fault.REPLICA.value, 0) + 1
            return [
                Fail(ticket=ticket, fault=Fault.REPLICA, message=no_replica_message(adapter, route.model))
            ]
        rep = self._replicas[placement.replica]
        refused = self._refused_now(rep, adapter)
        if refused is not None:  # no call, no replica, the engine's words again
            self._counts.failures[Fault.ADAPTER.value] = self._counts.failures.get(Fault.ADAPTER.value, 0) + 1
            return [Fail(ticket=ticket, fault=Fault.ADAPTER, message=refused)]
        if self._renewing_at(placement, adapter):
            # [renew]: only replicas replacing an old copy are left. Wait for one to be placed on
            # (one whose old copy has gone, or a holder), rather than behind one copy's requests.
            parked = self._parked.setdefault(adapter, Parked(adapter))
            parked.routes.append(route)
            self._waiting[ticket] = parked
            return []
        if placement.placed in _FULL and rep.id not in route.read and self._needs_read(rep):
            route.read.add(rep.id)
            return self._park(ticket, rep, adapter, route.path, route)
        self._count(rep, adapter)
        commands: list[Command] = [Assign(ticket=ticket, replica=rep.id, placed=placement.placed)]
        commands.extend(self._admit(ticket, rep, adapter, route.path))
        if self._stale(rep):
            commands.append(self._start_read(rep))  # [read]: is its engine full? Nothing waits for it.
        return commands

    def _renewing_at(self, placement: Placement, adapter: str) -> bool:
        """Whether ``placement`` is [place]'s last resort: ``wait`` where an old copy of ``adapter`` is
        held or loading (a ``wait`` at a replica's cap is a cold candidate's, which holds none)."""
        if placement.placed is not Placed.WAIT or placement.replica is None:
            return False
        rep = self._replicas[placement.replica]
        return adapter in rep.held or adapter in rep.loading

    def _place_parked(self) -> list[Command]:
        """[renew]: after each event, place again the parked routed requests [place] now puts on a
        holder or a cold candidate (or nowhere: they fail), adapters in name order, tickets in order."""
        commands: list[Command] = []
        for adapter in sorted(self._parked):
            parked = self._parked[adapter]
            for route in list(parked.routes):
                placement = self._placement(adapter, route.model, route.exclude, {})
                if self._renewing_at(placement, adapter):
                    continue
                parked.routes.remove(route)
                del self._waiting[route.ticket]
                commands.extend(self._place_route(route))
            if not parked.routes and self._parked.get(adapter) is parked:
                del self._parked[adapter]
        return commands

    # -- numbers and ticks (the invariants: _invariants.Invariants) ------------------------------------

    def _new_op(self) -> int:
        op = self._next_op
        self._next_op = op + 1
        return op

    def _tick(self) -> int:
        self._logical += 1
        return self._logical


def _theirs(rep: Replica, name: str) -> bool:
    """[time]: a reading of ``rep`` that names ``name`` shows another router's load: this router neither
    holds it there nor is loading or unloading it (the engine names an adapter while a request waits for
    its load, and while one runs on it after its unload)."""
    return name not in rep.held and name not in rep.loading and name not in rep.unloading


def _idle_at(idle: OrderedDict[str, int], name: str, stamp: int) -> None:
    """Put ``name`` back into ``idle`` where its ``stamp`` places it (the stamps rise along ``idle``)."""
    idle[name] = stamp
    later = [other for other, at in idle.items() if at > stamp]
    for other in later:
        idle.move_to_end(other)

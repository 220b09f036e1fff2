"""A Hypothesis state machine that plays the shell around the machine, in a simulated world, beside a model.

Each example starts a machine with drawn settings (no cap or a cap, the default refusal or a short
one, the default backoff or a short or long one and its cap, demand halved often or not, reads of the
engines or none, ``concurrency``, ``overflow`` and ``routers``). Then Hypothesis chooses what happens
next: a request (through the ``hit`` fast path or not, or routed: placed by the machine), a release, a
cancel, which outstanding call the engine answers
and how (world.py: as asked, already loaded, not found, the adapter's fault, the replica's fault
before or after the engine acted, worded as one vLLM release or another and read back through the
wire protocol or not), another router loading or unloading behind the machine's back, an engine
restarting, a 404 on a forwarded request, replicas failing, removed and added back, limits changed,
time passing, other routers' requests running on an engine (and engines queueing them) and the
machine's reads of it answered (or failing), listings racing all of these, and calls that break the
contract. Two stories take one step each, so that the random runs reach what takes many steps: a
replica filled, its adapters released in a drawn order and a cold load taking victims while other
things happen there (the victim asked for, read as another router's, unloaded behind the machine's
back; a join, a cancel, a second load, the replica removed), its load answered any way; and an
engine read again and again as its queue grows and shrinks ([load]).

Every event goes to the machine and to a naive model (model.py): the commands must be the same list,
and after every step the statistics (in key order), the views, the next due time, which replicas are
met and the next ticket must be the same too, and so must ``place()`` for every adapter, against
the model's plain reading of SPEC §3.12 (each step also with a model, an exclusion or a caller's load,
in turn, and for each replica alone: what a cold load would find there, chosen or not). The model is
also an oracle of where each request goes: before it is sent the model decides, from its own plain
state (``Model.decide``: a hit, a join, a wait for an unload, a reading or room at the cap, a cold
load and exactly which victims [evict] takes, a refusal; a routed one, the replica and the placement
[place] gives), and what the machine did, read from its commands and statistics, must be that. What
no query shows must agree too (``Unseen``): each replica's idle adapters in eviction order, their
stamps' order, the demand, the line [share] gives, [load]'s figures, a pending [settle]. Beside the
model, what the world itself says must hold is checked on its own (``with_model = False`` checks only
that): no grant for an adapter being unloaded, no unload of an adapter a request runs on (across remove
and re-add), one call at a time per adapter and replica, every request ended once, a request waiting on
a load answered by that load (a cancel, its starter's included, abandons no load others joined), a
request is a hit exactly when the adapter is held and otherwise loads it or waits for room; once the
engine has said it does not have an adapter, the machine stops holding it, so overlapping requests for
it load it again (issue 8's liveness); once the engines go quiet the machine holds what they hold.
``note()`` tells each step as a story.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import hypothesis
from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from lorafleet import (
    DEFAULT_BACKOFF,
    DEFAULT_HALF_LIFE,
    DEFAULT_LISTING_INTERVAL,
    DEFAULT_MAX_BACKOFF,
    DEFAULT_REFUSAL,
    AdapterDismissed,
    AdapterMissing,
    AdapterStateMachine,
    Assign,
    Cancelled,
    ClockWentBackwardsError,
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
    ReadEngine,
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
    TicketOrderError,
    TimeAdvanced,
    UnknownOperationError,
    UnknownReplicaError,
    UnknownTicketError,
    UnloadFinished,
    UnloadOutcome,
    UsageError,
)

import profiles  # noqa: F401 - registers and loads the Hypothesis profiles
from model import Decision, Model, Unseen
from world import Way, World

REPLICAS = {"r0": "m0", "r1": "m0", "r2": "m1"}
ADAPTERS = ("a0", "a1", "a2", "bad")
UNKNOWN = "elsewhere"
"""A replica id the router never added."""
LIMITS = {"m0": 1, "m1": 2}


class State(enum.Enum):
    """Where a request is in its life, as the shell sees it."""

    WAITING = "waiting"
    GRANTED = "granted"
    DEAD = "granted, on a copy the machine no longer holds"
    """The engine said it does not have the adapter: the request fails on its own, and its release
    changes nothing."""
    RELEASED = "released"
    FAILED = "failed"
    CANCELLED = "cancelled"


LEASED = (State.GRANTED, State.DEAD)
RACES = [
    "a call is answered",
    "the engine carries out a call",
    "a request ends",
    "a request is answered 404",
    "a request",
]
"""What may happen while a listing is out, in FleetModel.a_listing_races."""
AROUND = [
    "another_router_fills_an_engine",
    "engine_serves_listing",
    "a_late_404",
    "another_router",
    "another_router_unloads_what_the_machine_holds",
    "engine_restarts",
    "replica_fails",
    "set_limit",
    "add_replica",
    "remove_replicas",
    "remove_and_add_back_while_leased",
    "break_the_contract",
    "settle",
    "served_elsewhere",
    "refusal_forgotten",
    "stand_by",
]
"""What FleetModel.something_else_happens may do: the world around the requests changes."""

MEANWHILE = [
    "the victim is asked for",
    "another request joins",
    "the request goes away",
    "a second cold request",
    "another router unloads the victim",
    "other routers run on the victim, and the engine is read",
    "the replica is removed, and added back",
]
"""What may happen while a victim's load is out, in FleetModel.a_replica_fills_then_evicts."""


PLACES: list[tuple[str | None, tuple[str, ...], dict[str, float]]] = [
    ("m0", (), {}),
    (None, ("r0",), {}),
    (None, (), {"r1": 2.0}),
    ("m1", (), {"r2": 1.0}),
    (None, ("r1", "r2"), {"r0": 3.0}),
]
"""The arguments ``place()`` is also asked with, one set per step in turn: a model, exclusions, and
load figures the router reports."""


@attrs.define
class Ticket:
    replica: str
    """Empty while a routed request is not yet assigned."""
    adapter: str
    state: State = State.WAITING
    ended: int = 0
    """Grants and failures given to it: must never pass 1."""


@attrs.frozen
class Hit:
    """A ``hit()`` call, kept in the log beside the events so that a replay makes it too."""

    ticket: int
    replica: str
    adapter: str


@attrs.frozen
class PlaceHit:
    """A ``place_hit()`` call that granted, kept in the log as ``Hit`` is. One that did not is left
    out, so that the replay's ``Routed`` searches afresh: the search ``place_hit`` kept for it must
    place the request as that one does."""

    ticket: int
    adapter: str
    model: str | None


MachineFactory = Callable[..., AdapterStateMachine]


class FleetModel(RuleBasedStateMachine):
    """The shell, the world and the model, around one AdapterStateMachine."""

    factory: MachineFactory = AdapterStateMachine
    with_model: bool = True
    """Compare with the model; without it, only what the world itself says must hold is checked."""
    renewing: bool = False
    """Adapters change ([renew]), so an old copy may be held or loading while it is being replaced."""

    def __init__(self) -> None:
        super().__init__()
        self.machine = type(self).factory()
        self.model = Model()
        self.config: dict[str, Any] = {}
        self.world = World(REPLICAS)
        self.log: list[tuple[Event | Hit | PlaceHit, list[Command] | bool | str]] = []
        self.tickets: dict[int, Ticket] = {}
        self.active: set[str] = set()
        self.met: set[str] = set()
        self.now = 0.0
        self.steps = 0
        self.held_since: dict[tuple[str, str], int] = {}
        """The step at which the machine came to hold the copy of an adapter it holds now."""
        self.listings: dict[int, tuple[str, int]] = {}
        """Listings out that the machine will read: the replica, and the step that started it."""
        self.loads: dict[int, IssueLoad] = {}
        """The loads out, to know whose answer the machine will apply."""
        self.refused: dict[str, float] = {}
        """Adapters an engine refused as their own fault, and until when the machine refuses them."""

    @initialize(
        headroom=st.sampled_from([None, None, 0, 1]),
        refusal=st.sampled_from([45.0, 45.0, DEFAULT_REFUSAL]),
        backoff=st.sampled_from([DEFAULT_BACKOFF, 40.0, 0.5]),
        max_backoff=st.sampled_from([DEFAULT_MAX_BACKOFF, DEFAULT_MAX_BACKOFF, 1.0]),
        half_life=st.sampled_from([DEFAULT_HALF_LIFE, 3]),
        read_engine=st.booleans(),
        max_loras=st.sampled_from([1, 2, 4]),
        concurrency=st.sampled_from([None, None, 1, 2]),
        overflow=st.sampled_from([2, 0, 1]),
        routers=st.sampled_from([1, 1, 2, 3]),
    )
    def start(
        self,
        headroom: int | None,
        refusal: float,
        backoff: float,
        max_backoff: float,
        half_life: int,
        read_engine: bool,
        max_loras: int,
        concurrency: int | None,
        overflow: int,
        routers: int,
    ) -> None:
        """A machine with these settings: the defaults, or a cap, a short refusal, a short or long
        backoff and a short cap on it (a failed replica comes back within a step or two: routed requests
        see it leave and return), demand halved every few requests, reads of the engines ([read]), a
        set ``concurrency`` ([load]), ``overflow`` ([place]), several routers ([share]); engines whose
        batch may use 1, 2 or 4 adapters, which their readings say ([cap])."""
        self.world.max_loras = max_loras
        self.config = {
            "headroom": headroom,
            "refusal": refusal,
            "backoff": backoff,
            "max_backoff": max_backoff,
            "half_life": half_life,
            "read_engine": read_engine,
            "concurrency": concurrency,
            "overflow": overflow,
            "routers": routers,
        }
        self.machine = type(self).factory(**self.config)
        self.model = Model(**self.config)  # its settings are the machine's, by the same names
        for replica in sorted(REPLICAS):
            self.add(replica, LIMITS[REPLICAS[replica]])

    # -- the shell ---------------------------------------------------------------------------------

    def send(self, event: Event) -> list[Command]:
        """Feed ``event`` to the machine and the model; their commands must be the same list."""
        self.steps += 1
        before = self.held()
        # [renew]: a load out when its adapter changed (loading, and in unloading as an old copy) is
        # refused for files that are gone, so no refusal is recorded.
        old = False
        if isinstance(event, LoadFinished) and (out := self.loads.get(event.load)) is not None:
            at = self.machine.statistics().replicas.get(out.replica)
            old = at is not None and out.adapter in at.unloading
        joined = self.waiting_on_loads()
        try:
            expected = self.model.handle(event) if self.with_model else None
        except UsageError as refused:  # the machine must refuse it alike, and change nothing
            snapshot = (self.machine.statistics(), self.machine.next_due())
            try:
                self.machine.handle(event)
            except type(refused) as exc:
                note(f"{event!r}\n    -> {type(exc).__name__}: {exc}")
                assert (self.machine.statistics(), self.machine.next_due()) == snapshot
                raise
            raise AssertionError(
                f"the model refused {event} ({type(refused).__name__}), the machine did not"
            ) from refused
        commands = self.machine.handle(event)
        note(f"{event!r}\n    -> {commands!r}")
        self.log.append((event, commands))
        if expected is not None:
            assert commands == expected, f"after {event}:\n  machine {commands}\n  model   {expected}"
        self.take(commands)
        self.loads_answer_their_waiters(event, joined, commands)
        self.what_the_engine_said(event, before)
        if isinstance(event, LoadFinished):
            load = self.loads.pop(event.load)
            if (
                event.outcome is LoadOutcome.ADAPTER_FAULT and load.replica in self.active and not old
            ):  # [refuse]
                self.refused[load.adapter] = self.now + self.config["refusal"]
        return commands

    def waiting_on_loads(self) -> dict[int, int]:
        """The waiting requests whose adapter a load out is bringing to their replica, and that load."""
        out = {
            (c.command.replica, c.command.adapter): op
            for op, c in self.world.calls.items()
            if isinstance(c.command, IssueLoad)
        }
        return {
            number: out[t.replica, t.adapter]
            for number, t in self.tickets.items()
            if t.state is State.WAITING
            and (t.replica, t.adapter) in out
            and number < self.machine.next_ticket  # not the request being sent
        }

    def loads_answer_their_waiters(
        self, event: Event, joined: Mapping[int, int], commands: list[Command]
    ) -> None:
        """A request waiting on a load is answered by that load's answer, or failed by its replica's
        removal: nothing else grants or fails it while the load is out ([cancel]: a request that
        goes away, the one that started the load included, never abandons it for those that joined)."""
        if isinstance(event, ReplicasRemoved):
            return
        for command in commands:
            if isinstance(command, Grant | Fail) and joined.get(command.ticket) in self.world.calls:
                raise AssertionError(
                    f"{command} after {event}, while load {joined[command.ticket]} it waits on is out"
                )

    def held(self) -> dict[str, dict[str, int]]:
        return {r: dict(s.held) for r, s in self.machine.statistics().replicas.items()}

    def what_the_engine_said(self, event: Event, before: dict[str, dict[str, int]]) -> None:
        """Once the engine said it does not have an adapter, the machine stops holding it ([listing],
        [forget]), in use or not: its leases go dead, and no request for it is granted a hit."""
        after = self.held()
        lost: set[tuple[str, str]] = set()
        if isinstance(event, AdapterMissing) and event.adapter in before.get(event.replica, {}):
            # A report without a ticket is trusted; with one, it is about the copy held now when that
            # request still runs on it (a granted request's copy is the one held, or it would be dead).
            ticket = self.tickets.get(event.ticket) if event.ticket is not None else None
            on = (event.replica, event.adapter)
            if ticket is None or (ticket.state is State.GRANTED and (ticket.replica, ticket.adapter) == on):
                lost.add((event.replica, event.adapter))
            else:  # about a copy the machine no longer holds, or a request that has ended: stale
                assert after.get(event.replica) == before.get(event.replica), f"{event} is stale"
        if isinstance(event, ListingReceived) and event.listing in self.listings:
            replica, started = self.listings.pop(event.listing)
            for name in before.get(replica, {}).keys() - set(event.adapters):
                if self.held_since[replica, name] < started:
                    lost.add((replica, name))
        for replica, adapter in sorted(lost):
            assert adapter not in after.get(replica, {}), f"{replica} still holds {adapter} after {event}"
        if not isinstance(event, ReplicaAdded):  # what a replica added back shows, it held before
            for replica, names in after.items():
                for name in names.keys() - before.get(replica, {}).keys():
                    self.held_since[replica, name] = self.steps
        if not isinstance(event, ListingReceived | AdapterMissing):
            return  # nothing else drops an adapter a request runs on
        for number, ticket in self.tickets.items():
            shown = after.get(ticket.replica)  # None: removed, and what its requests run on is kept
            if ticket.state is State.GRANTED and shown is not None and ticket.adapter not in shown:
                ticket.state = State.DEAD
                if self.with_model:
                    assert not self.model.leases[number].current, number

    def take(self, commands: list[Command]) -> None:
        """Carry out the commands as a shell would, checking what must hold of each in the world."""
        for command in commands:
            if isinstance(command, Assign):
                ticket = self.tickets[command.ticket]
                assert ticket.state is State.WAITING, f"{command} for {ticket}"
                assert not ticket.replica, f"{command} for {ticket}"
                assert command.replica in self.active, command
                ticket.replica = command.replica
            elif isinstance(command, MarkMet):
                assert command.replica not in self.met, f"{command} twice"
                assert self.machine.is_met(command.replica), command
                self.met.add(command.replica)
            elif isinstance(command, ReadListing):
                self.listings[command.listing] = (command.replica, self.steps)
            elif isinstance(command, Grant | Fail):
                ticket = self.tickets[command.ticket]
                assert ticket.state is State.WAITING, f"{command} for a ticket that is {ticket.state.value}"
                ticket.ended += 1
                ticket.state = State.GRANTED if isinstance(command, Grant) else State.FAILED
                if isinstance(command, Grant):
                    assert not any(
                        isinstance(c, IssueUnload) for c in self.world.out(ticket.replica, ticket.adapter)
                    ), f"{command} while the adapter is being unloaded"
            elif isinstance(command, IssueUnload):
                running = self.running(command.replica, command.adapter)
                assert not running, f"{command} while requests {running} run on it"
            elif isinstance(command, IssueLoad):
                self.loads[command.load] = command
        self.world.took(commands)

    def running(self, replica: str, adapter: str) -> list[int]:
        """The requests running on ``adapter`` on ``replica``, on a copy the machine still holds."""
        return [
            n
            for n, t in self.tickets.items()
            if t.state is State.GRANTED and (t.replica, t.adapter) == (replica, adapter)
        ]

    def in_state(self, *states: State) -> list[int]:
        return sorted(n for n, t in self.tickets.items() if t.state in states)

    def add(self, replica: str, limit: int) -> list[Command]:
        if replica not in self.active:
            self.met.discard(replica)  # the next listing answered marks it met again
        self.active.add(replica)
        return self.send(ReplicaAdded(replica=replica, model=REPLICAS[replica], limit=limit))

    def remove(self, replicas: tuple[str, ...]) -> list[Command]:
        self.active -= set(replicas)
        # Their listings out are abandoned: the machine ignores the answers, even once they are back.
        self.listings = {op: (r, started) for op, (r, started) in self.listings.items() if r not in replicas}
        return self.send(ReplicasRemoved(replicas=replicas))

    def new_ticket(self, replica: str, adapter: str, gap: int = 1) -> int:
        ticket = self.machine.next_ticket + gap - 1
        self.tickets[ticket] = Ticket(replica, adapter)
        return ticket

    def ask(self, replica: str, adapter: str, *, fast: bool, gap: int = 1) -> None:
        """A request, the way a shell makes one: the fast path first, if it takes it.

        It is a hit exactly when the replica holds the adapter; otherwise it joins a load, waits
        out an unload, or starts a load of its own.
        """
        ticket = self.new_ticket(replica, adapter, gap)
        was = self.machine.statistics().replicas[replica]
        decided = self.model.decide(replica, adapter) if self.with_model else None
        if fast:
            granted = self.machine.hit(ticket, replica=replica, adapter=adapter)
            note(f"hit({ticket}, {replica!r}, {adapter!r}) -> {granted}")
            self.log.append((Hit(ticket, replica, adapter), granted))
            fresh = adapter in was.held and adapter not in was.unloading  # [renew]: else an old copy
            assert granted == fresh, f"hit({ticket}, {replica}, {adapter}) gave {granted}"
            if self.with_model:
                assert self.model.hit(ticket, replica, adapter) == granted
            if granted:
                self.tickets[ticket].state = State.GRANTED
                self.tickets[ticket].ended = 1
                return
        event = Requested(ticket=ticket, replica=replica, adapter=adapter, path=f"/adapters/{adapter}")
        commands = self.send(event)
        if decided is not None:
            self.went_as_decided(event, decided, commands, {replica: was})
        if self.refused.get(adapter, -1.0) > self.now and adapter not in was.held:
            # [refuse]: the engine said the adapter is at fault, so the request fails at once.
            (fail,) = commands
            assert isinstance(fail, Fail), commands
            assert (fail.ticket, fail.fault) == (ticket, Fault.ADAPTER), commands
            return
        hit = Grant(ticket=ticket, how=How.HIT)
        fresh = adapter in was.held and adapter not in was.unloading
        assert (hit in commands) == fresh, f"{event} gave {commands}"
        if adapter not in was.held and adapter not in was.loading and adapter not in was.unloading:
            now = self.machine.statistics().replicas[replica]
            # [cold], or [cap]: a load starts, or the request waits for room; [read]: or for a reading.
            read = self.reading(replica)
            started = adapter in now.loading or now.queued > was.queued
            assert started or read, f"{event} started no load: {commands}"

    def reading(self, replica: str) -> bool:
        """Whether a read of ``replica``'s engine is out."""
        return any(
            isinstance(self.world.calls[op].command, ReadEngine)
            and self.world.calls[op].command.replica == replica
            for op in self.world.pending(ReadEngine)
        )

    # -- requests ----------------------------------------------------------------------------------

    @precondition(lambda self: bool(self.active))
    @rule(
        data=st.data(),
        adapter=st.sampled_from(ADAPTERS),
        fast=st.booleans(),
        gap=st.sampled_from([1, 1, 1, 3]),
        contested=st.booleans(),
    )
    def request(self, data: st.DataObject, adapter: str, fast: bool, gap: int, contested: bool) -> None:
        """A request, through the fast path or not; ``contested``: for an adapter with a call out, if
        any (where joins, waits and races happen)."""
        if contested and (calls := self.contested()):
            replica, adapter = data.draw(st.sampled_from(calls))
        else:
            replica = data.draw(st.sampled_from(sorted(self.active)))
        self.ask(replica, adapter, fast=fast, gap=gap)

    @precondition(lambda self: bool(self.active))
    @rule(
        adapter=st.sampled_from(ADAPTERS),
        model=st.sampled_from([None, None, "m0", "m1"]),
        exclude=st.sets(st.sampled_from(sorted(REPLICAS)), max_size=2),
        gap=st.sampled_from([1, 1, 1, 3]),
        fast=st.booleans(),
    )
    def route(self, adapter: str, model: str | None, exclude: set[str], gap: int, fast: bool) -> None:
        """A request the machine places ([route]): assigned where [place] says, or after a read of a
        full replica, or failed when no replica will do (all failing, excluded, or of another model).
        ``fast``: the way the Fleet routes one, ``place_hit`` first, unless it excludes a replica."""
        ticket = self.new_ticket("", adapter, gap)
        decided = self.model.decide_route(adapter, model, exclude) if self.with_model else None
        was = self.machine.statistics().replicas
        if fast and not exclude:
            rid = self.machine.place_hit(ticket, adapter=adapter, model=model)
            note(f"place_hit({ticket}, {adapter!r}, model={model!r}) -> {rid!r}")
            if rid is not None:
                self.log.append((PlaceHit(ticket, adapter, model), rid))
                if decided is not None:
                    assert decided == Decision("hit", rid, placed=Placed.HELD), decided
                    assert self.model.hit(ticket, rid, adapter)
                self.tickets[ticket] = Ticket(rid, adapter, State.GRANTED, ended=1)
                return
        event = Routed(
            ticket=ticket,
            adapter=adapter,
            path=f"/adapters/{adapter}",
            model=model,
            exclude=tuple(sorted(exclude)),
        )
        commands = self.send(event)
        if decided is not None:
            self.went_as_decided(event, decided, commands, was)

    def went_as_decided(
        self,
        event: Requested | Routed,
        decided: Decision,
        commands: list[Command],
        was: Mapping[str, ReplicaStatistics],
    ) -> None:
        """The request went where the model, reading SPEC from the state it found, said it would go:
        a hit, a join, a wait for an unload, a reading or room at the cap, or a cold load taking
        exactly the victims [evict] names; a routed one, to the replica [place] names, placed as it
        says. What the machine did is read from its commands and its statistics only."""
        ticket = event.ticket
        mine = [c for c in commands if getattr(c, "ticket", None) == ticket]
        replica = event.replica if isinstance(event, Requested) else None
        placed = None
        did: Decision | None = None
        for command in mine:
            if isinstance(command, Fail):
                did = Decision("refuse" if command.fault is Fault.ADAPTER else "no replica", replica)
            elif isinstance(command, Assign):
                replica, placed = command.replica, command.placed
        if did is None and replica is None:  # routed, and neither placed nor failed: it waits to read
            read = [c.replica for c in commands if isinstance(c, ReadEngine)]
            did = Decision("read", read[0] if read else None)
            decided = attrs.evolve(decided, replica=did.replica)  # a read already out: not shown
        if did is None:
            assert replica is not None
            before, after = was[replica], self.machine.statistics().replicas[replica]
            adapter = event.adapter
            if Grant(ticket=ticket, how=How.HIT) in mine:
                did = Decision("hit", replica)
            elif IssueLoad(load=0, replica=replica, adapter=adapter, path=event.path) in [
                attrs.evolve(c, load=0) for c in commands if isinstance(c, IssueLoad)
            ]:
                victims = frozenset(after.unloading) - frozenset(before.unloading)
                did = Decision("cold", replica, victims=victims)
            elif after.queued > before.queued:
                did = Decision("queue", replica)
            elif adapter in before.loading:
                did = Decision("join", replica)
            elif adapter in before.unloading:
                did = Decision("wait-unload", replica)
            else:
                did = Decision("read", replica)
            did = attrs.evolve(did, placed=placed)
        assert did == decided, f"{event} went\n  {did}\n  where SPEC sends it: {decided}"

    def contested(self) -> list[tuple[str, str]]:
        return sorted(
            {
                (c.command.replica, c.command.adapter)
                for c in self.world.calls.values()
                if isinstance(c.command, IssueLoad | IssueUnload) and c.command.replica in self.active
            }
        )

    def held_somewhere(self) -> list[tuple[str, str]]:
        return sorted(
            (replica, name)
            for replica, r in self.machine.statistics().replicas.items()
            for name in r.held
            if name != "bad"
        )

    @precondition(lambda self: bool(self.held_somewhere()))
    @rule(data=st.data())
    def request_warm(self, data: st.DataObject) -> None:
        """A request for an adapter the replica holds, through the fast path: every warm request's way."""
        replica, adapter = data.draw(st.sampled_from(self.held_somewhere()))
        self.ask(replica, adapter, fast=True)

    @precondition(lambda self: bool(self.in_state(*LEASED)))
    @rule(data=st.data(), twice=st.booleans())
    def release(self, data: st.DataObject, twice: bool) -> None:
        ticket = data.draw(st.sampled_from(self.in_state(*LEASED)))
        self.tickets[ticket].state = State.RELEASED
        self.send(Released(ticket=ticket))
        if twice:
            self.send(Released(ticket=ticket))

    @precondition(lambda self: bool(self.in_state(State.WAITING, *LEASED)))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        ticket = data.draw(st.sampled_from(self.in_state(State.WAITING, *LEASED)))
        t = self.tickets[ticket]
        t.state = State.CANCELLED if t.state is State.WAITING else State.RELEASED
        self.send(Cancelled(ticket=ticket))

    @precondition(lambda self: bool(self.in_state(*LEASED)))
    @rule(data=st.data(), how=st.sampled_from(["with its ticket", "after release", "stale"]))
    def forward(self, data: st.DataObject, how: str) -> None:
        """The router forwards a granted request: served, it is released; if the engine lacks the
        adapter it answers 404, and the router reports it: with the request's ticket while the lease
        is held (a shell's way), without a ticket after releasing it, or with the ticket after
        releasing it (stale)."""
        ticket = data.draw(st.sampled_from(self.in_state(*LEASED)))
        t = self.tickets[ticket]
        if self.world.has(t.replica, t.adapter):  # served: the request is done
            t.state = State.RELEASED
            self.send(Released(ticket=ticket))
            return
        note(f"request {ticket} is answered 404: {t.adapter} is not on {t.replica}")
        if how == "with its ticket":
            self.send(AdapterMissing(replica=t.replica, adapter=t.adapter, ticket=ticket))
        t.state = State.RELEASED
        self.send(Released(ticket=ticket))
        if how != "with its ticket":
            reporter = ticket if how == "stale" else None
            self.send(AdapterMissing(replica=t.replica, adapter=t.adapter, ticket=reporter))

    # -- the engines answer ------------------------------------------------------------------------

    def answer(self, op: int, way: Way, variant: int, wire: bool) -> None:
        """The engine answers call ``op`` in ``way``, read back through the wire or not."""
        reply = self.world.answer(op, way, variant)
        event = reply.event
        if wire:
            event = reply.over_the_wire()
            note(f"the engine answered {reply.status} {reply.body[:120]!r}")
            assert reply.means(event), (
                f"the wire read {reply.status} {reply.body!r} as {event}, not {reply.event}"
            )
        self.send(event)

    @precondition(lambda self: bool(self.world.pending(IssueLoad)))
    @rule(
        data=st.data(),
        way=st.sampled_from(
            [Way.AS_ASKED] * 6
            + [Way.ADAPTER_FAULT, Way.ANOTHER_ROUTER_FIRST]
            + [Way.FAULT_BEFORE, Way.FAULT_AFTER] * 2
        ),
        variant=st.integers(0, 11),
        wire=st.booleans(),
    )
    def answer_load(self, data: st.DataObject, way: Way, variant: int, wire: bool) -> None:
        self.answer(data.draw(st.sampled_from(self.world.pending(IssueLoad))), way, variant, wire)

    @precondition(lambda self: bool(self.world.pending(IssueLoad | IssueUnload)))
    @rule(variant=st.integers(0, 11))
    def the_oldest_call_is_answered(self, variant: int) -> None:
        """The call out longest is answered as asked (most calls are), read through the wire: so
        requests do not wait long."""
        self.answer(self.world.pending((IssueLoad, IssueUnload))[0], Way.AS_ASKED, variant, wire=True)

    @precondition(lambda self: bool(self.world.pending(IssueUnload)))
    @rule(
        data=st.data(),
        way=st.sampled_from(
            [Way.AS_ASKED] * 2 + [Way.ANOTHER_ROUTER_FIRST, Way.FAULT_BEFORE, Way.FAULT_AFTER]
        ),
        variant=st.integers(0, 11),
        wire=st.booleans(),
    )
    def answer_unload(self, data: st.DataObject, way: Way, variant: int, wire: bool) -> None:
        self.answer(data.draw(st.sampled_from(self.world.pending(IssueUnload))), way, variant, wire)

    def engine_serves_listing(self, data: st.DataObject) -> None:
        """The engine reads its registry for a listing; the answer is still on its way."""
        if unserved := self.world.unserved_listings():
            self.world.serve_listing(data.draw(st.sampled_from(unserved)))

    @precondition(lambda self: bool(self.world.pending(ReadListing)))
    @rule(
        data=st.data(),
        way=st.sampled_from([Way.AS_ASKED, Way.AS_ASKED, Way.FAULT_BEFORE]),
        variant=st.integers(0, 11),
        wire=st.booleans(),
    )
    def answer_listing(self, data: st.DataObject, way: Way, variant: int, wire: bool) -> None:
        self.answer(data.draw(st.sampled_from(self.world.pending(ReadListing))), way, variant, wire)

    # -- the world around --------------------------------------------------------------------------

    @rule(data=st.data(), what=st.sampled_from(AROUND))
    def something_else_happens(self, data: st.DataObject, what: str) -> None:
        """Once in a while, one of the things around the requests (AROUND): one rule for all of them,
        so that requests and answers keep most of the steps."""
        getattr(self, what)(data)

    def another_router(self, data: st.DataObject) -> None:
        """Another router loads or unloads an adapter on an engine, behind the machine's back."""
        replica = data.draw(st.sampled_from(sorted(REPLICAS)))
        adapter, load = data.draw(st.sampled_from(ADAPTERS[:-1])), data.draw(st.booleans())
        note(f"another router {'loads' if load else 'unloads'} {adapter} on {replica}")
        self.world.other_router(replica, adapter, load=load)

    def another_router_fills_an_engine(self, data: st.DataObject) -> None:
        """Another router loads every adapter on an engine: the next listing adds them all, and the
        next cold request there has several victims, unloaded in eviction order."""
        replica = data.draw(st.sampled_from(sorted(REPLICAS)))
        note(f"another router loads {', '.join(ADAPTERS[:-1])} on {replica}")
        for adapter in ADAPTERS[:-1]:
            self.world.other_router(replica, adapter, load=True)

    def another_router_unloads_what_the_machine_holds(self, data: st.DataObject) -> None:
        """Another router unloads an adapter the machine holds: the engine no longer has it, and the
        machine learns it from a listing, a 404, or an unload answered "not found"."""
        if held := self.held_somewhere():
            replica, adapter = data.draw(st.sampled_from(held))
            note(f"another router unloads {adapter} on {replica}")
            self.world.other_router(replica, adapter, load=False)

    @precondition(lambda self: bool(self.contested()))
    @rule(data=st.data(), back=st.booleans())
    def remove_a_replica_with_calls_out(self, data: st.DataObject, back: bool) -> None:
        """A replica is removed while calls to it are out (and maybe added back at once): its waiting
        requests fail in ticket order; the late answers are counted and change nothing else, or carry
        on for the replica that came back."""
        replica, _ = data.draw(st.sampled_from(self.contested()))
        self.remove((replica,))
        if back:
            self.add(replica, LIMITS[REPLICAS[replica]])

    def replica_fails(self, data: st.DataObject) -> None:
        """The router saw a replica fail on its own (a forwarded request got no answer): [health]."""
        replica = data.draw(st.sampled_from([*sorted(REPLICAS), UNKNOWN]))
        self.send(ReplicaFailed(replica=replica, message="no answer"))

    def served_elsewhere(self, data: st.DataObject) -> None:
        """A replica served a request others answered with a server error: they failed it ([blame])."""
        replica = data.draw(st.sampled_from([*sorted(REPLICAS), UNKNOWN]))
        failed = data.draw(st.lists(st.sampled_from([*sorted(REPLICAS), UNKNOWN]), max_size=3))
        self.send(ServedElsewhere(replica=replica, failed=tuple(failed)))

    def refusal_forgotten(self, data: st.DataObject) -> None:
        """The router says the engine may take an adapter now, or any ([forgive]): it was fixed."""
        adapter = data.draw(st.sampled_from([*ADAPTERS, None]))
        note(f"the refusal of {adapter or 'every adapter'} is forgotten")
        if adapter is None:
            self.refused.clear()
        else:
            self.refused.pop(adapter, None)
        self.send(RefusalForgotten(adapter=adapter))
        if adapter is None:
            self.refused.clear()
        else:
            self.refused.pop(adapter, None)

    @rule(data=st.data())
    def an_operator_dismisses(self, data: st.DataObject) -> None:
        """An operator asks a replica to unload an adapter ([dismiss]), most often one it holds: it goes
        at once when it is idle there; otherwise the machine refuses, changing nothing. Never an
        unload under a request (``take``)."""
        anywhere = st.tuples(st.sampled_from([*sorted(REPLICAS), UNKNOWN]), st.sampled_from(ADAPTERS))
        held = self.held_somewhere()
        replica, adapter = data.draw(st.sampled_from(held) | anywhere if held else anywhere)
        stats = self.machine.statistics().replicas.get(replica)
        try:
            self.send(AdapterDismissed(replica=replica, adapter=adapter))
        except (UnknownReplicaError, NotIdleError) as exc:
            hypothesis.event(f"dismiss refused: {type(exc).__name__}")
            return
        hypothesis.event("dismissed")
        assert stats is not None, replica
        assert stats.held.get(adapter) == 0, f"{adapter} on {replica} was {stats}"

    @rule(data=st.data())
    def others_run_requests(self, data: st.DataObject) -> None:
        """Other routers' requests run on some adapters of an engine now (and on nothing else): its
        ``/metrics`` names them, and this router's own, to the machine's next read ([reading])."""
        replica = data.draw(st.sampled_from(sorted(REPLICAS)))
        theirs = data.draw(st.sets(st.sampled_from(ADAPTERS[:-1]), max_size=2))
        note(f"other routers' requests run on {sorted(theirs) or 'nothing'} on {replica}")
        self.world.others_run(replica, theirs)

    @precondition(lambda self: bool(self.world.pending(ReadEngine)))
    @rule(
        data=st.data(),
        way=st.sampled_from([Way.AS_ASKED, Way.AS_ASKED, Way.FAULT_BEFORE]),
        variant=st.integers(0, 11),
        wire=st.booleans(),
    )
    def the_engine_is_read(self, data: st.DataObject, way: Way, variant: int, wire: bool) -> None:
        """A read the machine asked for is answered: the gauge names this router's running adapters
        there and the others' ([reading]), or the read gets no answer ([read-failed])."""
        op = data.draw(st.sampled_from(self.world.pending(ReadEngine)))
        replica = self.world.calls[op].command.replica
        ours = {t.adapter for t in self.tickets.values() if t.replica == replica and t.state in LEASED}
        theirs = self.world.running[replica]
        self.world.others_run(replica, theirs | ours)
        self.answer(op, way, variant, wire)
        self.world.others_run(replica, theirs)

    @rule(replica=st.sampled_from(sorted(REPLICAS)), running=st.integers(0, 3), waiting=st.integers(0, 2))
    def an_engine_queues(self, replica: str, running: int, waiting: int) -> None:
        """An engine runs requests besides those ``/metrics`` names by adapter, and queues some: its
        next reading gives [load] its counts (another router's requests, the engine's batch)."""
        note(f"the engine of {replica} runs {running} more requests and queues {waiting}")
        self.world.busy(replica, running, waiting)

    def engine_restarts(self, data: st.DataObject) -> None:
        replica = data.draw(st.sampled_from(sorted(REPLICAS)))
        note(f"the engine of {replica} restarts")
        self.world.restart(replica)

    def remove_replicas(self, data: st.DataObject) -> None:
        """Replicas removed; requests still running on them keep their adapters, unseen."""
        ids = data.draw(st.lists(st.sampled_from([*sorted(REPLICAS), UNKNOWN]), min_size=1, max_size=3))
        self.remove(tuple(ids))

    def add_replica(self, data: st.DataObject) -> None:
        """A replica added (back), or added again while in use: then only its limit changes."""
        self.add(data.draw(st.sampled_from(sorted(REPLICAS))), data.draw(st.integers(1, 3)))

    def remove_and_add_back_while_leased(self, data: st.DataObject) -> None:
        """The router drops a replica a request runs on, and uses it again at once."""
        if granted := self.in_state(State.GRANTED):
            ticket = self.tickets[data.draw(st.sampled_from(granted))]
            self.remove((ticket.replica,))
            self.add(ticket.replica, LIMITS[REPLICAS[ticket.replica]])

    def set_limit(self, data: st.DataObject) -> None:
        model, limit = data.draw(st.sampled_from(["m0", "m1"])), data.draw(st.integers(1, 3))
        self.send(LimitSet(model=model, limit=limit))

    def stand_by(self, data: st.DataObject) -> None:
        """Another router decides for this one, or no more ([standby])."""
        self.send(StandingBy(on=data.draw(st.booleans())))

    @rule(dt=st.sampled_from([DEFAULT_LISTING_INTERVAL, DEFAULT_LISTING_INTERVAL, 1.0, 0.0, 12.5]))
    def time_passes(self, dt: float) -> None:
        self.now += dt
        self.send(TimeAdvanced(now=self.now))

    def break_the_contract(self, data: st.DataObject) -> None:
        """A call the contract forbids raises its usage error and changes nothing."""
        m = self.machine
        cases: list[tuple[type[UsageError], Callable[[], object]]] = [
            (UnknownTicketError, lambda: m.handle(Released(ticket=m.next_ticket + 4))),
            (UnknownOperationError, lambda: m.handle(LoadFinished(load=10_000, outcome=LoadOutcome.LOADED))),
            (UnknownOperationError, lambda: m.handle(ListingFailed(listing=10_000, message="x"))),
            (UnknownReplicaError, lambda: m.hit(m.next_ticket, replica=UNKNOWN, adapter="a0")),
            (
                UnknownReplicaError,
                lambda: m.handle(Requested(ticket=m.next_ticket, replica=UNKNOWN, adapter="a0", path="/a0")),
            ),
        ]
        if m.next_ticket > 1:
            stale = m.next_ticket - 1
            path = "/adapters/a0"
            cases.append(
                (
                    TicketOrderError,
                    lambda: m.handle(Requested(ticket=stale, replica="r0", adapter="a0", path=path)),
                )
            )
            cases.append((TicketOrderError, lambda: m.hit(stale, replica="r0", adapter="a0")))
        if self.now > 0:
            cases.append((ClockWentBackwardsError, lambda: m.handle(TimeAdvanced(now=self.now - 1))))
        if waiting := self.in_state(State.WAITING):
            cases.append((UnknownTicketError, lambda: m.handle(Released(ticket=waiting[0]))))
        if answered := [
            e.load if isinstance(e, LoadFinished) else e.unload
            for e, _ in self.log
            if isinstance(e, LoadFinished | UnloadFinished)
        ]:
            # Answered already, and asked as an unload whatever it was.
            late = UnloadFinished(unload=answered[-1], outcome=UnloadOutcome.UNLOADED)
            cases.append((UnknownOperationError, lambda: m.handle(late)))
        error, call = data.draw(st.sampled_from(cases))
        before = (m.statistics(), m.next_ticket, m.next_due())
        try:
            call()
        except error as exc:
            note(f"{error.__name__}: {exc}")
        else:
            raise AssertionError(f"no {error.__name__}")
        assert (m.statistics(), m.next_ticket, m.next_due()) == before

    def only_queued_wait(self) -> bool:
        """Whether every waiting request waits for room at its replica's cap ([cap]), not for a call;
        or for an old copy that requests still run on ([renew]: held, and in unloading), there or,
        parked, anywhere."""
        stats = self.machine.statistics().replicas

        def on_old_copy(t: Ticket) -> bool:
            if not t.replica:  # a routed request parked until an old copy goes ([renew])
                return any(t.adapter in at.unloading and t.adapter in at.held for at in stats.values())
            at = stats.get(t.replica)
            return at is not None and t.adapter in at.unloading and t.adapter in at.held

        waiting = Counter(
            self.tickets[n].replica for n in self.in_state(State.WAITING) if not on_old_copy(self.tickets[n])
        )
        return all(r in stats and stats[r].queued == count for r, count in waiting.items())

    def busy(self) -> list[tuple[str, str]]:
        return sorted({(t.replica, t.adapter) for t in self.tickets.values() if t.state is State.GRANTED})

    @precondition(lambda self: bool(self.busy()))
    @rule(data=st.data(), told=st.sampled_from(["by a request's 404", "by a listing"]), fast=st.booleans())
    def the_engine_loses_a_busy_adapter(self, data: st.DataObject, told: str, fast: bool) -> None:
        """An adapter requests run on is lost by the engine (another router unloads it), and requests
        for it keep coming, overlapping: once the engine has said so, none is a hit, and it is loaded
        again (the liveness issue 8 asks for)."""
        replica, adapter = data.draw(st.sampled_from(self.busy()))
        note(f"the engine of {replica} loses {adapter} while requests run on it; told {told}")
        self.world.other_router(replica, adapter, load=False)
        if replica not in self.active:
            return  # removed: what its requests run on is kept, unseen, and no one asks it anything
        if told == "by a listing":
            self.list_afresh(replica)
        else:
            reporter = self.running(replica, adapter)[0]
            self.send(AdapterMissing(replica=replica, adapter=adapter, ticket=reporter))
        self.ask(replica, adapter, fast=fast)
        self.ask(replica, adapter, fast=not fast)

    @precondition(lambda self: bool(self.active))
    @rule(
        data=st.data(),
        meanwhile=st.sampled_from(RACES),
        way=st.sampled_from(list(Way)),
        served_first=st.booleans(),
    )
    def a_listing_races(self, data: st.DataObject, meanwhile: str, way: Way, served_first: bool) -> None:
        """A listing of a replica is out, served by the engine before or after something else happens
        there, and answered after it: a call answered (or carried out by the engine, its answer still
        on its way), a request ending, a request answered 404, a new request. The listing shows what
        the engine had when it was served, which the machine must read as of when it started (the
        seed's faults 1 to 4, and [listing]'s own edges, live here)."""
        # Where a load or an unload is out, if anywhere: that is where a listing has something to race.
        replica = data.draw(st.sampled_from(sorted({r for r, _ in self.contested()}) or sorted(self.active)))
        listing = self.start_listing(replica)
        note(f"listing {listing} of {replica} is out, {'' if served_first else 'not '}served; {meanwhile}")
        if served_first:
            self.world.serve_listing(listing)
        calls = [
            op
            for op in self.world.pending((IssueLoad, IssueUnload))
            if self.world.calls[op].command.replica == replica and not self.world.acted(op)
        ]
        running = [n for n in self.in_state(State.GRANTED) if self.tickets[n].replica == replica]
        if meanwhile == "a call is answered" and calls:
            # An unload rather than a load if there is one: loads are many, and unloads are where a
            # listing served before the call must not bring the adapter back.
            unloads = [op for op in calls if isinstance(self.world.calls[op].command, IssueUnload)]
            op = data.draw(st.sampled_from(unloads or calls))
            self.answer(op, way, data.draw(st.integers(0, 11)), wire=True)
        elif meanwhile == "the engine carries out a call" and calls:
            op = data.draw(st.sampled_from(calls))
            self.world.act(op, way)
            note(f"the engine carries out {self.world.calls[op].command} ({way.value}); its answer waits")
        elif meanwhile == "a request ends" and running:
            ticket = data.draw(st.sampled_from(running))
            if data.draw(st.booleans()):  # the engine lost its adapter first: the listing must drop it
                note(f"another router unloads {self.tickets[ticket].adapter} on {replica} first")
                self.world.other_router(replica, self.tickets[ticket].adapter, load=False)
            self.tickets[ticket].state = State.RELEASED
            self.send(Released(ticket=ticket))
        elif meanwhile == "a request is answered 404" and running:
            ticket = data.draw(st.sampled_from(running))
            adapter = self.tickets[ticket].adapter
            self.world.other_router(replica, adapter, load=False)
            self.send(AdapterMissing(replica=replica, adapter=adapter, ticket=ticket))
        elif meanwhile == "a request":
            self.ask(replica, data.draw(st.sampled_from(ADAPTERS)), fast=data.draw(st.booleans()))
        if listing in self.world.calls:  # unless the replica went away meanwhile
            if self.world.calls[listing].served is None:
                self.world.serve_listing(listing)
            self.send(self.world.answer(listing).event)

    def start_listing(self, replica: str) -> int:
        """A listing of ``replica`` that starts now (one already out is answered first)."""
        for op in self.world.pending(ReadListing):
            if self.world.calls[op].command.replica == replica:
                self.send(self.world.answer(op).event)
        for _ in range(len(REPLICAS) + 1):
            due = self.machine.next_due()
            assert due is not None
            self.now = max(self.now, due)
            for command in self.send(TimeAdvanced(now=self.now)):
                if isinstance(command, ReadListing) and command.replica == replica:
                    return command.listing
        raise AssertionError(f"{replica} is never listed")

    def list_afresh(self, replica: str) -> None:
        """A listing of ``replica`` that starts now, served and answered at once."""
        self.send(self.world.answer(self.start_listing(replica)).event)

    def load_out(self, replica: str, adapter: str) -> int | None:
        """The load of ``adapter`` out to ``replica``, if one is."""
        out = [c for c in self.world.out(replica, adapter) if isinstance(c, IssueLoad)]
        return out[0].load if out else None

    @precondition(lambda self: bool(self.active))
    @rule(
        data=st.data(),
        keep=st.integers(0, 2),
        meanwhile=st.lists(st.sampled_from(MEANWHILE), max_size=2),
        way=st.sampled_from([Way.AS_ASKED] * 2 + [Way.ADAPTER_FAULT, Way.FAULT_BEFORE, Way.FAULT_AFTER]),
        then=st.sampled_from([None, Way.AS_ASKED, Way.ANOTHER_ROUTER_FIRST, Way.FAULT_BEFORE]),
        listed=st.booleans(),
    )
    def a_replica_fills_then_evicts(
        self, data: st.DataObject, keep: int, meanwhile: list[str], way: Way, then: Way | None, listed: bool
    ) -> None:
        """[evict] on the engine's memory, as one story: a replica is filled to its limit with adapters
        loaded as asked, all but ``keep`` of them released in a drawn order (the idle list, least
        recently used first), and a cold request takes the least recently used as its victim (or
        waits: at its cap, [cap]'s batch clause included, or for a reading). Meanwhile other things
        happen there (MEANWHILE); then the load is answered in ``way`` (failed, its victims are spared
        where they were; landed, their unloads go out) and an unload out there in ``then``. With
        ``listed``, a listing of the replica goes out as the load does and is answered last."""
        replica = data.draw(st.sampled_from(sorted(self.active)))
        for adapter in ADAPTERS[:-1]:  # fill it
            r = self.machine.statistics().replicas[replica]
            if len(r.held) + len(r.loading) >= r.limit:
                break
            if adapter not in r.held and adapter not in r.loading and adapter not in r.unloading:
                self.ask(replica, adapter, fast=False)
                if (op := self.load_out(replica, adapter)) is not None:
                    self.answer(op, Way.AS_ASKED, 0, wire=False)
        granted = [n for n in self.in_state(State.GRANTED) if self.tickets[n].replica == replica]
        for ticket in data.draw(st.permutations(granted))[keep:]:
            self.tickets[ticket].state = State.RELEASED
            self.send(Released(ticket=ticket))
        r = self.machine.statistics().replicas[replica]
        cold = [a for a in ADAPTERS if a not in r.held and a not in r.loading and a not in r.unloading]
        if not cold:
            return
        adapter = data.draw(st.sampled_from(cold))
        self.ask(replica, adapter, fast=False)
        starter = max(self.tickets)
        self.read_out(replica)  # a request that waits for a reading gets it, and loads
        victims = sorted(set(self.machine.statistics().replicas[replica].unloading) - set(r.unloading))
        listing = self.start_listing(replica) if listed and replica in self.active else None
        note(f"{adapter} on {replica} takes the room of {victims or 'nothing'}; meanwhile {meanwhile}")
        for what in meanwhile:
            if replica not in self.active:
                break
            if what == "the victim is asked for" and victims:
                self.ask(replica, data.draw(st.sampled_from(victims)), fast=data.draw(st.booleans()))
            elif what == "another request joins" and self.load_out(replica, adapter) is not None:
                self.ask(replica, adapter, fast=False)
            elif what == "the request goes away" and self.tickets[starter].state is State.WAITING:
                self.tickets[starter].state = State.CANCELLED
                self.send(Cancelled(ticket=starter))
            elif what == "a second cold request" and len(cold) > 1:
                self.ask(replica, data.draw(st.sampled_from([a for a in cold if a != adapter])), fast=False)
            elif what == "another router unloads the victim" and victims:
                self.world.other_router(replica, data.draw(st.sampled_from(victims)), load=False)
            elif what == "other routers run on the victim, and the engine is read" and victims:
                self.world.others_run(replica, {data.draw(st.sampled_from(victims))})
                self.read_now(replica)
            elif what == "the replica is removed, and added back":
                self.remove((replica,))
                self.add(replica, LIMITS[REPLICAS[replica]])
        if (op := self.load_out(replica, adapter)) is not None:
            self.answer(op, way, data.draw(st.integers(0, 11)), wire=data.draw(st.booleans()))
        unloads = [
            op for op in self.world.pending(IssueUnload) if self.world.calls[op].command.replica == replica
        ]
        if then is not None and unloads:
            self.answer(data.draw(st.sampled_from(unloads)), then, data.draw(st.integers(0, 11)), wire=True)
        if listing is not None and listing in self.world.calls:
            self.send(self.world.answer(listing).event)

    def read_now(self, replica: str) -> None:
        """The machine reads ``replica``'s engine now (after a listing, if no read is out), and the read
        is answered as asked; nothing, if it reads no engine."""
        if not self.config["read_engine"] or replica not in self.active:
            return
        if not self.reading(replica):
            self.list_afresh(replica)
        self.read_out(replica)

    def read_out(self, replica: str) -> None:
        """The read of ``replica``'s engine out, if one is, is answered as asked."""
        for op in self.world.pending(ReadEngine):
            if self.world.calls[op].command.replica == replica:
                self.answer(op, Way.AS_ASKED, 0, wire=False)

    @precondition(lambda self: self.config.get("read_engine", False) and bool(self.active))
    @rule(
        replica=st.sampled_from(sorted(REPLICAS)),
        loads=st.lists(
            st.tuples(st.integers(0, 4), st.integers(0, 2), st.sets(st.sampled_from(ADAPTERS[:-1]))),
            min_size=2,
            max_size=3,
        ),
    )
    def an_engine_is_read_as_its_load_moves(
        self, replica: str, loads: list[tuple[int, int, set[str]]]
    ) -> None:
        """[load] and [reading] as one story: the engine runs and queues more, then less (``loads``:
        requests running besides one per adapter named, waiting, and the adapters other routers run
        on), read after each change: its capacity is the most a reading showed running while some
        waited, its calm load the most it carried with none, and what a reading no longer names is
        idle again (several at once, in name order)."""
        for running, waiting, theirs in loads:
            others = sorted(theirs) or "nothing"
            note(f"{replica}'s engine runs {running} more, queues {waiting}, others run on {others}; read")
            self.world.busy(replica, running, waiting)
            self.world.others_run(replica, theirs)
            self.read_now(replica)

    def a_late_404(self, data: st.DataObject) -> None:
        """A request answered 404 reports it late, with its ticket, once its lease has ended or its copy
        is gone: the report is stale, and the machine keeps what it holds now."""
        if ended := self.in_state(State.RELEASED, State.DEAD):
            t = self.tickets[ticket := data.draw(st.sampled_from(ended))]
            self.send(AdapterMissing(replica=t.replica, adapter=t.adapter, ticket=ticket))

    def settle(self, data: st.DataObject | None = None) -> None:
        """The engines go quiet: every call answered as asked, then every replica listed afresh.

        After that the machine holds what the engines hold, adapters in use included.
        """
        while self.world.calls:
            self.send(self.world.answer(min(self.world.calls)).event)
        assert self.only_queued_wait()
        self.now += DEFAULT_LISTING_INTERVAL
        listings = self.send(TimeAdvanced(now=self.now))
        assert sorted(c.replica for c in listings if isinstance(c, ReadListing)) == sorted(self.active)
        for command in listings:
            assert isinstance(command, ReadListing)
            self.send(self.world.answer(command.listing).event)
        stats = self.machine.statistics()
        for replica in self.active:
            held = stats.replicas[replica].held
            assert held.keys() == self.world.engines[replica].keys(), (
                replica,
                self.world.engines[replica],
                held,
            )

    # -- invariants --------------------------------------------------------------------------------

    @invariant()
    def the_machine_tells_what_the_model_tells(self) -> None:
        m, model = self.machine, self.model
        m.check_invariants()
        if not self.with_model:
            return
        stats = m.statistics()
        expected = model.statistics()
        assert ordered(stats) == ordered(expected), f"statistics\n  machine {stats}\n  model   {expected}"
        ids = [*sorted(REPLICAS), UNKNOWN]
        for adapter in ADAPTERS:
            assert m.view(ids, adapter) == model.view(ids, adapter), adapter
        assert m.next_due() == model.next_due()
        assert [m.is_met(r) for r in ids] == [model.is_met(r) for r in ids]
        assert [m.named(r) for r in ids] == [model.named(r) for r in ids]
        assert [m.reading(r) for r in ids] == [model.reading(r) for r in ids]
        assert m.next_ticket == model.last_ticket + 1
        for adapter in ADAPTERS:
            assert m.place(adapter) == model.place(adapter), f"place({adapter!r})"
        # Each replica alone, less every other: what a request finds there, whether or not placement
        # would choose it (its kind: a free slot, over, evict or wait, SPEC §3.12; its line, [share]).
        for replica in REPLICAS:
            others = [r for r in REPLICAS if r != replica]
            for adapter in ADAPTERS:
                assert m.place(adapter, exclude=others) == model.place(adapter, None, others), (
                    f"place({adapter!r}) on {replica} alone"
                )
        # One other way of asking per step, in turn: the plain oracle is slow, and the steps are many.
        model_, exclude, load = PLACES[self.steps % len(PLACES)]
        for adapter in ADAPTERS:
            got = m.place(adapter, model=model_, exclude=exclude, load=load)
            assert got == model.place(adapter, model_, exclude, load), (
                f"place({adapter!r}, {model_}, {exclude}, {load})"
            )

    @invariant()
    def the_machine_would_evict_and_share_as_the_model_reads_spec(self) -> None:
        """What no query shows, as the model reads SPEC: the victims a cold load would take on each
        replica, in order ([evict]), their idle stamps' order and the demand ([place] weighs victims by
        both), each replica's line ([share]), [load]'s figures and a pending [settle]."""
        if not self.with_model:
            return
        got, want = machine_unseen(self.machine), self.model.unseen_state()
        for field in attrs.fields(Unseen):
            mine, spec = getattr(got, field.name), getattr(want, field.name)
            assert mine == spec, f"{field.name}\n  machine {mine}\n  model   {spec}"

    @invariant()
    def in_use_counts_are_the_requests_running(self) -> None:
        stats = self.machine.statistics()
        assert sorted(stats.replicas) == sorted(self.active)
        for replica in self.active:
            held = stats.replicas[replica].held
            for adapter in ADAPTERS:
                assert held.get(adapter, 0) == len(self.running(replica, adapter)), (replica, adapter, held)
        assert stats.leases == len(self.in_state(*LEASED))
        assert {r for r in REPLICAS if self.machine.is_met(r)} == self.met & self.active

    @invariant()
    def an_adapter_is_held_loading_or_unloading_never_two_at_once(self) -> None:
        for replica, r in self.machine.statistics().replicas.items():
            assert not (r.held.keys() & set(r.loading)), (replica, r)
            if self.renewing:
                continue  # [renew]: an old copy is held or loading, and being replaced
            assert not (r.held.keys() & set(r.unloading)), (replica, r)
            assert not (set(r.loading) & set(r.unloading)), (replica, r)

    @invariant()
    def every_request_ends_at_most_once_and_none_waits_when_nothing_is_out(self) -> None:
        assert all(t.ended <= 1 for t in self.tickets.values())
        waiting = self.in_state(State.WAITING)
        assert self.machine.statistics().waiting == len(waiting)
        if not self.world.calls:  # only a request waiting for room at a cap waits for no call
            assert self.only_queued_wait(), waiting

    def teardown(self) -> None:
        """The same events give the same commands: replay the log on a fresh machine."""
        fresh = type(self).factory(**self.config)
        for step, result in self.log:
            if isinstance(step, Hit):
                assert fresh.hit(step.ticket, replica=step.replica, adapter=step.adapter) == result, step
            elif isinstance(step, PlaceHit):
                assert fresh.place_hit(step.ticket, adapter=step.adapter, model=step.model) == result, step
            else:
                assert fresh.handle(step) == result, step


def machine_unseen(m: AdapterStateMachine) -> Unseen:
    """The machine's state that no query shows (``Unseen``), read from its private fields: the one
    place the properties look inside it, so that a change of its representation changes only this."""
    reps = sorted((rep for rep in m._replicas.values() if not rep.removed), key=lambda r: r.id)
    return Unseen.of(
        {
            rep.id: (
                list(rep.idle.items()),
                (m._line(rep), rep.base, rep.unseen),
                (rep.seqs, rep.ran, rep.calm, rep.read_served, rep.settle),
            )
            for rep in reps
        },
        m._demand,
        routers=m._settings.routers,
    )


def ordered(value: Any) -> object:
    """A snapshot as nested lists of items: two compare equal only with their keys in the same order."""
    if attrs.has(type(value)):
        return [(name, ordered(field)) for name, field in attrs.asdict(value, recurse=False).items()]
    if isinstance(value, Mapping):
        return [(k, ordered(v)) for k, v in value.items()]
    if isinstance(value, tuple | list):
        return [ordered(v) for v in value]
    return value

"""A Hypothesis state machine that plays the shell and a simulated engine around the machine.

Hypothesis chooses what happens next: a request, a release, a cancel, which outstanding call the
engine answers and how (as asked, already loaded, not found, the adapter's fault, the replica's fault
before or after the engine acted), another router loading or unloading behind the machine's back, a
replica restarting, replicas removed and added back, limits changed, time passing. A deliberately
naive model (dicts and sets of tickets and calls) sits beside the machine; the invariants compare them.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from lorafleet import (
    DEFAULT_LISTING_INTERVAL,
    AdapterMissing,
    AdapterStateMachine,
    Cancelled,
    Command,
    Event,
    Fail,
    Grant,
    IssueLoad,
    IssueUnload,
    LimitSet,
    ListingFailed,
    ListingReceived,
    LoadFinished,
    LoadOutcome,
    MarkMet,
    ReadListing,
    Released,
    ReplicaAdded,
    ReplicasRemoved,
    Requested,
    TimeAdvanced,
    UnloadFinished,
    UnloadOutcome,
)

import profiles  # noqa: F401 - registers and loads the Hypothesis profiles

REPLICAS = {"r0": "m0", "r1": "m0", "r2": "m1"}
ADAPTERS = ("a0", "a1", "a2", "bad")
BAD = "bad"  # every engine refuses it: the adapter's fault


@attrs.define
class Ticket:
    replica: str
    adapter: str
    epoch: int
    """The replica's epoch when it was requested: a removal starts a new one and orphans leases."""
    state: str = "waiting"  # waiting, granted, released, failed, cancelled
    ended: int = 0
    """Grants and failures given to it: must never pass 1."""


@attrs.define
class Call:
    command: IssueLoad | IssueUnload | ReadListing
    snapshot: frozenset[str] | None = None
    """For a listing: what the engine held when it served it, once it has."""


MachineFactory = Callable[[], AdapterStateMachine]


def operation(command: IssueLoad | IssueUnload | ReadListing) -> int:
    match command:
        case IssueLoad():
            return command.load
        case IssueUnload():
            return command.unload
        case ReadListing():
            return command.listing


class FleetModel(RuleBasedStateMachine):
    """The shell, the engines and the naive model, around one AdapterStateMachine."""

    factory: MachineFactory = AdapterStateMachine

    def __init__(self) -> None:
        super().__init__()
        self.machine = type(self).factory()
        self.log: list[tuple[Event, list[Command]]] = []
        self.engine: dict[str, set[str]] = {r: set() for r in REPLICAS}
        self.limits = {"m0": 1, "m1": 2}
        self.active: set[str] = set()
        self.epoch = dict.fromkeys(REPLICAS, 0)
        self.tickets: dict[int, Ticket] = {}
        self.calls: dict[int, Call] = {}
        self.now = 0.0
        self.next_ticket = 1
        for replica in sorted(REPLICAS):
            self.add(replica)

    # -- the shell ---------------------------------------------------------------------------

    def send(self, event: Event) -> list[Command]:
        commands = self.machine.handle(event)
        self.machine.check_invariants()
        self.log.append((event, commands))
        for command in commands:
            self.take(command)
        if isinstance(event, ListingReceived | AdapterMissing):
            # The engine said it does not have these: the machine stops holding them, in use or
            # not, and the leases on them are dead.
            stats = self.machine.statistics().replicas
            for ticket in self.tickets.values():
                on = stats.get(ticket.replica)
                if ticket.state == "granted" and on is not None and ticket.adapter not in on.held:
                    ticket.state = "orphaned"
        return commands

    def take(self, command: Command) -> None:
        if isinstance(command, MarkMet):
            assert self.machine.is_met(command.replica), command
            return
        if isinstance(command, Grant | Fail):
            ticket = self.tickets[command.ticket]
            assert ticket.state == "waiting", f"{command} for a ticket that is {ticket.state}"
            ticket.ended += 1
            ticket.state = "granted" if isinstance(command, Grant) else "failed"
            if isinstance(command, Grant):
                # No grant for an adapter whose unload is outstanding.
                assert not self.outstanding(IssueUnload, ticket.replica, ticket.adapter), command
            return
        op = operation(command)
        assert op not in self.calls, f"operation {op} issued twice"
        if isinstance(command, IssueLoad):
            # One load per adapter per replica, and never a load across an unload of the same.
            assert not self.outstanding(IssueLoad, command.replica, command.adapter), command
            assert not self.outstanding(IssueUnload, command.replica, command.adapter), command
        if isinstance(command, IssueUnload):
            assert not self.outstanding(IssueLoad, command.replica, command.adapter), command
            assert not self.outstanding(IssueUnload, command.replica, command.adapter), command
            # Never unload an adapter a request runs on.
            assert not self.leases(command.replica, command.adapter), (command, self.leases_of(command))
        self.calls[op] = Call(command)

    def add(self, replica: str) -> None:
        self.active.add(replica)
        self.send(
            ReplicaAdded(replica=replica, model=REPLICAS[replica], limit=self.limits[REPLICAS[replica]])
        )

    def outstanding(self, kind: type[IssueLoad | IssueUnload], replica: str, adapter: str) -> bool:
        for call in self.calls.values():
            c = call.command
            if (
                isinstance(c, kind)
                and not isinstance(c, ReadListing)
                and (c.replica, c.adapter) == (replica, adapter)
            ):
                return True
        return False

    def leases(self, replica: str, adapter: str) -> int:
        return sum(
            1
            for t in self.tickets.values()
            if t.state == "granted" and (t.replica, t.adapter) == (replica, adapter)
        )

    def leases_of(self, command: IssueUnload) -> list[int]:
        return [
            n for n, t in self.tickets.items() if (t.replica, t.adapter) == (command.replica, command.adapter)
        ]

    def pick_call(self, data: st.DataObject, kind: type) -> tuple[int, Call]:
        ops = sorted(op for op, c in self.calls.items() if isinstance(c.command, kind))
        op = data.draw(st.sampled_from(ops))
        return op, self.calls[op]

    def has(self, kind: type) -> bool:
        return any(isinstance(c.command, kind) for c in self.calls.values())

    # -- requests ----------------------------------------------------------------------------

    @precondition(lambda self: bool(self.active))
    @rule(data=st.data(), adapter=st.sampled_from(ADAPTERS))
    def request(self, data: st.DataObject, adapter: str) -> None:
        replica = data.draw(st.sampled_from(sorted(self.active)))
        ticket = self.next_ticket
        self.next_ticket += 1
        self.tickets[ticket] = Ticket(replica, adapter, self.epoch[replica])
        self.send(Requested(ticket=ticket, replica=replica, adapter=adapter, path=f"/adapters/{adapter}"))

    def contested(self) -> list[tuple[str, str]]:
        return sorted(
            {
                (c.command.replica, c.command.adapter)
                for c in self.calls.values()
                if isinstance(c.command, IssueLoad | IssueUnload) and c.command.replica in self.active
            }
        )

    @precondition(lambda self: bool(self.contested()))
    @rule(data=st.data())
    def request_contested(self, data: st.DataObject) -> None:
        """A request for an adapter with a call out: where joins, waits and races happen."""
        replica, adapter = data.draw(st.sampled_from(self.contested()))
        ticket = self.next_ticket
        self.next_ticket += 1
        self.tickets[ticket] = Ticket(replica, adapter, self.epoch[replica])
        self.send(Requested(ticket=ticket, replica=replica, adapter=adapter, path=f"/adapters/{adapter}"))

    def in_state(self, *states: str) -> list[int]:
        return sorted(n for n, t in self.tickets.items() if t.state in states)

    @precondition(lambda self: bool(self.in_state("granted")))
    @rule(data=st.data(), twice=st.booleans())
    def release(self, data: st.DataObject, twice: bool) -> None:
        ticket = data.draw(st.sampled_from(self.in_state("granted")))
        self.tickets[ticket].state = "released"
        assert self.send(Released(ticket=ticket)) == []
        if twice:
            assert self.send(Released(ticket=ticket)) == []

    @precondition(lambda self: bool(self.in_state("waiting", "granted")))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        ticket = data.draw(st.sampled_from(self.in_state("waiting", "granted")))
        t = self.tickets[ticket]
        t.state = "released" if t.state == "granted" else "cancelled"
        assert self.send(Cancelled(ticket=ticket)) == []

    @precondition(lambda self: bool(self.in_state("granted")))
    @rule(data=st.data())
    def forward(self, data: st.DataObject) -> None:
        """The router forwards a granted request; if the engine lacks the adapter it says so."""
        ticket = data.draw(st.sampled_from(self.in_state("granted")))
        t = self.tickets[ticket]
        if t.adapter not in self.engine[t.replica]:
            self.send(AdapterMissing(replica=t.replica, adapter=t.adapter, ticket=ticket))
            t.state = "released"
            self.send(Released(ticket=ticket))

    # -- the engine answers ------------------------------------------------------------------

    @precondition(lambda self: self.has(IssueLoad))
    @rule(
        data=st.data(),
        how=st.sampled_from(["engine", "engine", "engine", "adapter_fault", "fault_before", "fault_after"]),
    )
    def answer_load(self, data: st.DataObject, how: str) -> None:
        op, call = self.pick_call(data, IssueLoad)
        del self.calls[op]
        cmd = call.command
        assert isinstance(cmd, IssueLoad)
        names = self.engine[cmd.replica]
        if cmd.adapter == BAD or how == "adapter_fault":
            outcome = LoadOutcome.ADAPTER_FAULT
        elif how == "fault_before":
            outcome = LoadOutcome.REPLICA_FAULT
        elif how == "fault_after":  # the engine loaded it; the answer was lost
            names.add(cmd.adapter)
            outcome = LoadOutcome.REPLICA_FAULT
        elif cmd.adapter in names:
            outcome = LoadOutcome.ALREADY_LOADED
        else:
            names.add(cmd.adapter)
            outcome = LoadOutcome.LOADED
        self.send(LoadFinished(load=op, outcome=outcome, message="sim"))

    @precondition(lambda self: self.has(IssueUnload))
    @rule(data=st.data(), how=st.sampled_from(["engine", "engine", "fault_before", "fault_after"]))
    def answer_unload(self, data: st.DataObject, how: str) -> None:
        op, call = self.pick_call(data, IssueUnload)
        del self.calls[op]
        cmd = call.command
        assert isinstance(cmd, IssueUnload)
        names = self.engine[cmd.replica]
        if how == "fault_before":
            outcome = UnloadOutcome.FAILED
        elif how == "fault_after":
            names.discard(cmd.adapter)
            outcome = UnloadOutcome.FAILED
        elif cmd.adapter in names:
            names.discard(cmd.adapter)
            outcome = UnloadOutcome.UNLOADED
        else:
            outcome = UnloadOutcome.NOT_FOUND
        self.send(UnloadFinished(unload=op, outcome=outcome, message="sim"))

    @precondition(
        lambda self: any(
            isinstance(c.command, ReadListing) and c.snapshot is None for c in self.calls.values()
        )
    )
    @rule(data=st.data())
    def engine_serves_listing(self, data: st.DataObject) -> None:
        """The engine reads its registry for a listing; the answer is still on its way."""
        ops = sorted(
            op for op, c in self.calls.items() if isinstance(c.command, ReadListing) and c.snapshot is None
        )
        call = self.calls[data.draw(st.sampled_from(ops))]
        call.snapshot = frozenset(self.engine[call.command.replica])

    @precondition(lambda self: self.has(ReadListing))
    @rule(data=st.data())
    def listing_fails(self, data: st.DataObject) -> None:
        op, _ = self.pick_call(data, ReadListing)
        del self.calls[op]
        self.send(ListingFailed(listing=op, message="sim"))

    @precondition(lambda self: self.has(ReadListing))
    @rule(data=st.data())
    def answer_listing(self, data: st.DataObject) -> None:
        op, call = self.pick_call(data, ReadListing)
        del self.calls[op]
        snapshot = call.snapshot
        if snapshot is None:
            snapshot = frozenset(self.engine[call.command.replica])
        self.send(ListingReceived(listing=op, adapters=tuple(sorted(snapshot))))

    # -- the world around --------------------------------------------------------------------

    @rule(
        replica=st.sampled_from(sorted(REPLICAS)), adapter=st.sampled_from(ADAPTERS[:-1]), load=st.booleans()
    )
    def another_router(self, replica: str, adapter: str, load: bool) -> None:
        if load:
            self.engine[replica].add(adapter)
        else:
            self.engine[replica].discard(adapter)

    @rule(replica=st.sampled_from(sorted(REPLICAS)))
    def engine_restarts(self, replica: str) -> None:
        self.engine[replica].clear()

    @precondition(lambda self: bool(self.active))
    @rule(data=st.data())
    def remove_replica(self, data: st.DataObject) -> None:
        replica = data.draw(st.sampled_from(sorted(self.active)))
        self.active.discard(replica)
        self.epoch[replica] += 1
        commands = self.send(ReplicasRemoved(replicas=(replica,)))
        assert all(isinstance(c, Fail) for c in commands)
        # Requests still running on it keep their adapters held (unseen), even if it comes back.

    @precondition(lambda self: len(self.active) < len(REPLICAS))
    @rule(data=st.data())
    def add_replica_back(self, data: st.DataObject) -> None:
        self.add(data.draw(st.sampled_from(sorted(set(REPLICAS) - self.active))))

    @rule(model=st.sampled_from(["m0", "m1"]), limit=st.integers(1, 3))
    def set_limit(self, model: str, limit: int) -> None:
        self.limits[model] = limit
        assert self.send(LimitSet(model=model, limit=limit)) == []

    @rule(dt=st.sampled_from([DEFAULT_LISTING_INTERVAL, DEFAULT_LISTING_INTERVAL, 1.0]))
    def time_passes(self, dt: float) -> None:
        self.now += dt
        self.send(TimeAdvanced(now=self.now))

    @precondition(lambda self: bool(self.in_state("orphaned")))
    @rule(data=st.data())
    def release_orphan(self, data: st.DataObject) -> None:
        ticket = data.draw(st.sampled_from(self.in_state("orphaned")))
        self.tickets[ticket].state = "released"
        before = self.machine.statistics()
        assert self.send(Released(ticket=ticket)) == []
        after = self.machine.statistics().replicas
        # The request ended, so its replica has one in flight fewer; nothing else moves.
        assert {r: attrs.evolve(s, in_flight=0) for r, s in after.items()} == {
            r: attrs.evolve(s, in_flight=0) for r, s in before.replicas.items()
        }

    @rule()
    def settle(self) -> None:
        """The engines go quiet: answer everything as asked, then list every replica.

        After that the machine's view is the engines', adapters in use included.
        """
        while self.calls:
            op = min(self.calls)
            call = self.calls.pop(op)
            cmd = call.command
            if isinstance(cmd, IssueLoad):
                names = self.engine[cmd.replica]
                if cmd.adapter == BAD:
                    outcome = LoadOutcome.ADAPTER_FAULT
                else:
                    outcome = LoadOutcome.ALREADY_LOADED if cmd.adapter in names else LoadOutcome.LOADED
                    names.add(cmd.adapter)
                self.send(LoadFinished(load=op, outcome=outcome))
            elif isinstance(cmd, IssueUnload):
                names = self.engine[cmd.replica]
                outcome_u = UnloadOutcome.UNLOADED if cmd.adapter in names else UnloadOutcome.NOT_FOUND
                names.discard(cmd.adapter)
                self.send(UnloadFinished(unload=op, outcome=outcome_u))
            else:
                snapshot = call.snapshot if call.snapshot is not None else frozenset(self.engine[cmd.replica])
                self.send(ListingReceived(listing=op, adapters=tuple(sorted(snapshot))))
        assert self.machine.statistics().waiting == 0
        assert not self.in_state("waiting")
        self.now += DEFAULT_LISTING_INTERVAL
        listings = self.send(TimeAdvanced(now=self.now))
        assert sorted(c.replica for c in listings if isinstance(c, ReadListing)) == sorted(self.active)
        for command in listings:
            assert isinstance(command, ReadListing)
            del self.calls[command.listing]
            self.send(
                ListingReceived(listing=command.listing, adapters=tuple(sorted(self.engine[command.replica])))
            )
        stats = self.machine.statistics()
        for replica in self.active:
            held = stats.replicas[replica].held
            assert held.keys() == self.engine[replica], (replica, self.engine[replica], held)

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def in_use_counts_are_the_grants_not_yet_released(self) -> None:
        stats = self.machine.statistics()
        assert sorted(stats.replicas) == sorted(self.active)
        for replica in self.active:
            held = stats.replicas[replica].held
            for adapter in ADAPTERS:
                assert held.get(adapter, 0) == self.leases(replica, adapter), (replica, adapter, held)
        live = sum(1 for t in self.tickets.values() if t.state in ("granted", "orphaned"))
        assert stats.leases == live

    @invariant()
    def an_adapter_is_held_loading_or_unloading_never_two_at_once(self) -> None:
        for replica, r in self.machine.statistics().replicas.items():
            assert not (r.held.keys() & set(r.loading)), (replica, r)
            assert not (r.held.keys() & set(r.unloading)), (replica, r)
            assert not (set(r.loading) & set(r.unloading)), (replica, r)

    @invariant()
    def within_the_limit_unless_every_held_adapter_is_in_use(self) -> None:
        # The limit binds when a request starts a load, the moment victims are chosen: a lower
        # limit, or adapters another router loaded, wait for the next load.
        if not self.log:
            return
        event, commands = self.log[-1]
        started = any(isinstance(c, IssueLoad | IssueUnload) for c in commands)
        if not (isinstance(event, Requested) and started) or event.replica not in self.active:
            return
        r = self.machine.statistics().replicas[event.replica]
        if len(r.held) + len(r.loading) > r.limit:
            assert all(n > 0 for n in r.held.values()), (event, r)

    @invariant()
    def every_request_ends_at_most_once_and_none_waits_when_nothing_is_out(self) -> None:
        assert all(t.ended <= 1 for t in self.tickets.values())
        waiting = self.in_state("waiting")
        assert self.machine.statistics().waiting == len(waiting)
        if not self.calls:
            assert waiting == []

    def teardown(self) -> None:
        """The same events give the same commands: replay the log on a fresh machine."""
        fresh = type(self).factory()
        for event, commands in self.log:
            assert fresh.handle(event) == commands, event

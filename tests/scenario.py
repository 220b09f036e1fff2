"""A small driver for writing machine tests as scenarios: events in, expected commands out."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import attrs

from lorafleet import (
    AdapterStateMachine,
    Command,
    Event,
    Fail,
    Fault,
    Grant,
    How,
    IssueLoad,
    IssueUnload,
    ListingReceived,
    LoadFinished,
    LoadOutcome,
    MarkMet,
    ReadEngine,
    ReadingFailed,
    ReadingReceived,
    ReadListing,
    ReplicaAdded,
    Requested,
    TimeAdvanced,
    UnloadFinished,
    UnloadOutcome,
)


@attrs.define
class Step:
    event: Event
    commands: list[Command]


MACHINE: Callable[..., AdapterStateMachine] = AdapterStateMachine
"""What a scenario drives; vectors/generate.py swaps in a recording machine to write the vectors."""


@attrs.define
class Scenario:
    """Drives one machine and keeps every step, so a failing test shows the whole story."""

    machine: AdapterStateMachine = attrs.field(factory=lambda: MACHINE())
    steps: list[Step] = attrs.field(factory=list)
    ticket: int = 0
    reads: dict[str, int] = attrs.field(factory=dict)
    """Replica id to the read of its engine in flight ([read])."""

    @classmethod
    def configured(cls, **config: Any) -> Scenario:
        """A machine made with these settings (``headroom``, ``backoff``...)."""
        return cls(machine=MACHINE(**config))

    @classmethod
    def with_replicas(
        cls, *replicas: tuple[str, int], model: str = "base", listed: bool = True, **config: Any
    ) -> Scenario:
        """A machine made with these settings that knows these (replica, limit) pairs, each listed empty
        unless ``listed`` is False."""
        s = cls.configured(**config)
        for replica, limit in replicas:
            (cmd,) = s(ReplicaAdded(replica=replica, model=model, limit=limit))
            assert isinstance(cmd, ReadListing)
            if listed:
                s.expect(ListingReceived(listing=cmd.listing, adapters=()), MarkMet(replica=replica))
        return s

    @classmethod
    def reading(cls, *replicas: tuple[str, int], **config: Any) -> Scenario:
        """A machine that reads engines ([read]), knowing these (replica, limit) pairs, each listed empty
        and its engine read as running nothing."""
        s = cls.configured(read_engine=True, **config)
        for replica, limit in replicas:
            (cmd,) = s(ReplicaAdded(replica=replica, model="base", limit=limit))
            assert isinstance(cmd, ReadListing)
            read = s.reads.get(replica)
            s.expect(
                ListingReceived(listing=cmd.listing, adapters=()),
                MarkMet(replica=replica),
                *([] if read else [ReadEngine(read=cmd.listing + 1, replica=replica)]),
            )
            s.expect(ReadingReceived(read=s.reads[replica], adapters=()))
        return s

    def __call__(self, event: Event) -> list[Command]:
        commands = self.machine.handle(event)
        self.steps.append(Step(event, commands))
        self.machine.check_invariants()
        if isinstance(event, ReadingReceived | ReadingFailed):
            self.reads = {rid: op for rid, op in self.reads.items() if op != event.read}
        for command in commands:
            if isinstance(command, ReadEngine):
                self.reads[command.replica] = command.read
        return commands

    def answer_read(
        self,
        replica: str,
        adapters: Iterable[str] | None = (),
        running: int | None = None,
        waiting: int | None = None,
        max_loras: int | None = None,
    ) -> list[Command]:
        """Answer the read of ``replica``'s engine in flight: these adapters run there."""
        names = None if adapters is None else tuple(adapters)
        return self(
            ReadingReceived(
                read=self.reads[replica],
                adapters=names,
                running=running,
                waiting=waiting,
                max_loras=max_loras,
            )
        )

    def fail_read(self, replica: str, message: str = "") -> list[Command]:
        """The read of ``replica``'s engine in flight got no answer."""
        return self(ReadingFailed(read=self.reads[replica], message=message))

    def list_and_read(
        self, now: float, replica: str, listed: Iterable[str], running: Iterable[str]
    ) -> list[Command]:
        """Advance to ``now``, when ``replica``'s listing is due, answer it with ``listed`` and the read
        that follows with ``running``: the commands of both answers, but for the read itself. Other
        replicas listed then are answered with what they hold, and their engines read as running nothing.
        """
        commands: list[Command] = []
        for listing in self(TimeAdvanced(now=now)):
            assert isinstance(listing, ReadListing), listing
            mine = listing.replica == replica
            names = tuple(listed) if mine else tuple(self.machine.statistics().replicas[listing.replica].held)
            got = self(ListingReceived(listing=listing.listing, adapters=names))
            assert got[-1:] == [ReadEngine(read=self.reads[listing.replica], replica=listing.replica)], got
            if mine:
                commands += got[:-1] + self.answer_read(replica, running)
            else:
                self.answer_read(listing.replica, ())
        return commands

    def expect(self, event: Event, *commands: Command) -> list[Command]:
        got = self(event)
        assert got == list(commands), f"after {event}:\n  got      {got}\n  expected {list(commands)}"
        return got

    def request(self, replica: str, adapter: str, path: str | None = None) -> tuple[int, list[Command]]:
        """A new request with the next ticket; returns the ticket and the commands."""
        self.ticket += 1
        return self.ticket, self(
            Requested(
                ticket=self.ticket, replica=replica, adapter=adapter, path=path or f"/adapters/{adapter}"
            )
        )

    def hit(self, replica: str, adapter: str) -> int:
        ticket, commands = self.request(replica, adapter)
        assert commands == [Grant(ticket=ticket, how=How.HIT)], commands
        return ticket

    def load(self, replica: str, adapter: str) -> int:
        """Request ``adapter`` cold with no victims, answer the load, return the granted ticket."""
        ticket, commands = self.request(replica, adapter)
        (cmd,) = commands
        assert isinstance(cmd, IssueLoad), commands
        self.expect(
            LoadFinished(load=cmd.load, outcome=LoadOutcome.LOADED), Grant(ticket=ticket, how=How.LOADED)
        )
        return ticket


def loads(commands: Iterable[Command]) -> list[IssueLoad]:
    return [c for c in commands if isinstance(c, IssueLoad)]


def unloads(commands: Iterable[Command]) -> list[IssueUnload]:
    return [c for c in commands if isinstance(c, IssueUnload)]


def landed(load: IssueLoad, outcome: LoadOutcome = LoadOutcome.LOADED) -> LoadFinished:
    return LoadFinished(load=load.load, outcome=outcome)


def unloaded(unload: IssueUnload, outcome: UnloadOutcome = UnloadOutcome.UNLOADED) -> UnloadFinished:
    return UnloadFinished(unload=unload.unload, outcome=outcome)


def failed(ticket: int, fault: Fault, message: str) -> Fail:
    return Fail(ticket=ticket, fault=fault, message=message)

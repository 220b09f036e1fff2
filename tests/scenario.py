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
    ReadListing,
    ReplicaAdded,
    Requested,
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

    @classmethod
    def configured(cls, **config: Any) -> Scenario:
        """A machine made with these settings (``headroom``, ``backoff``...)."""
        return cls(machine=MACHINE(**config))

    @classmethod
    def with_replicas(cls, *replicas: tuple[str, int], model: str = "base", listed: bool = True) -> Scenario:
        """A machine that knows these (replica, limit) pairs, each listed empty unless ``listed`` is False."""
        s = cls()
        for replica, limit in replicas:
            (cmd,) = s(ReplicaAdded(replica=replica, model=model, limit=limit))
            assert isinstance(cmd, ReadListing)
            if listed:
                s.expect(ListingReceived(listing=cmd.listing, adapters=()), MarkMet(replica=replica))
        return s

    def __call__(self, event: Event) -> list[Command]:
        commands = self.machine.handle(event)
        self.steps.append(Step(event, commands))
        self.machine.check_invariants()
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


def unloaded(unload: IssueUnload, outcome: UnloadOutcome = UnloadOutcome.UNLOADED) -> UnloadFinished:
    return UnloadFinished(unload=unload.unload, outcome=outcome)


def failed(ticket: int, fault: Fault, message: str) -> Fail:
    return Fail(ticket=ticket, fault=fault, message=message)

"""[renew] under the stateful rules: adapters change while requests, loads and listings go on.

The machine alone (no model): besides every check of ``FleetModel``, no request asked after an
adapter changed is granted a copy whose load went out before the change.
"""

from __future__ import annotations

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from lorafleet import AdapterChanged, Command, Event, Grant, IssueLoad, LoadFinished

from fleet_model import ADAPTERS, FleetModel, State


class RenewFleet(FleetModel):
    with_model = False
    renewing = True

    def __init__(self) -> None:
        super().__init__()
        self.changed: dict[str, int] = {}
        """The step at which each adapter last changed."""
        self.asked: dict[int, int] = {}
        """The step at which each request was asked."""
        self.issued: dict[int, int] = {}
        """The step at which each load went out."""
        self.content: dict[tuple[str, str], int] = {}
        """For each copy the machine holds: the step its files were read (its load went out, or the
        listing that brought it in was applied)."""

    @precondition(lambda self: bool(self.active))
    @rule(adapter=st.sampled_from(ADAPTERS))
    def adapter_changes(self, adapter: str) -> None:
        """New files under an adapter's name ([renew])."""
        note(f"{adapter}'s files change")
        self.changed[adapter] = self.steps + 1
        self.refused.pop(adapter, None)  # [renew] forgets the refusal
        self.send(AdapterChanged(adapter=adapter))

    def new_ticket(self, replica: str, adapter: str, gap: int = 1) -> int:
        ticket = super().new_ticket(replica, adapter, gap)
        self.asked[ticket] = self.steps + 1
        return ticket

    def ask(self, replica: str, adapter: str, *, fast: bool, gap: int = 1) -> None:
        ticket = self.machine.next_ticket + gap - 1
        super().ask(replica, adapter, fast=fast, gap=gap)
        if self.tickets[ticket].state is State.GRANTED and self.tickets[ticket].ended == 1:
            self.check_fresh(ticket)

    def send(self, event: Event) -> list[Command]:
        before = self.held()
        load = self.loads.get(event.load) if isinstance(event, LoadFinished) else None
        commands = super().send(event)
        for command in commands:
            if isinstance(command, IssueLoad):
                self.issued[command.load] = self.steps
        for replica, names in self.held().items():
            for name in names.keys() - before.get(replica, {}).keys():
                landed = load is not None and (load.replica, load.adapter) == (replica, name)
                self.content[replica, name] = self.issued[load.load] if landed and load else self.steps
        for command in commands:
            if isinstance(command, Grant):
                self.check_fresh(command.ticket)
        return commands

    def check_fresh(self, ticket: int) -> None:
        t = self.tickets[ticket]
        changed = self.changed.get(t.adapter)
        if changed is None or self.asked[ticket] <= changed:
            return
        read = self.content[t.replica, t.adapter]
        assert read >= changed, f"ticket {ticket}, asked after {t.adapter} changed, granted an old copy"


TestRenew = RenewFleet.TestCase

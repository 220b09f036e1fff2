"""What a policy sees and is: one router's view of each replica as its machine keeps it, and the policy type.

The simulator keeps this beside each router's ``AdapterStateMachine`` from the commands the machine
gives and the events it is fed, and re-reads it from ``statistics()`` after the events that change
the machine's view without a command (a listing, an "adapter missing"). ``tests/test_sim.py`` checks it
against the machine after every step of a run.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Protocol

import attrs

from lorafleet import AdapterStateMachine


@attrs.define(eq=False)
class ReplicaState:
    """One replica as one router's machine sees it, plus what the router counts there."""

    id: str
    index: int
    limit: int
    held: dict[str, int] = attrs.field(factory=dict)
    """Adapter to the number of this router's requests holding a lease on it."""
    idle: dict[str, int] = attrs.field(factory=dict)
    """Held adapters with no lease, least recently used first, to when each became idle.

    "When" is the router's request clock (how many requests it had routed); adapters a listing added
    count as idle since 0, as they are least recently used of all.
    """
    loading: set[str] = attrs.field(factory=set)
    outstanding: int = 0
    """This router's requests routed here and not yet released (waiting, granted or running)."""
    copies: dict[str, int] = attrs.field(factory=dict)
    """Adapter to the number of its current copy here, so that a lease on an older copy is ignored."""

    served: int = 0
    """This router's requests routed here in all, kept by policies that balance on it."""

    @property
    def occupied(self) -> int:
        """Adapters held or loading: what counts against the limit."""
        return len(self.held) + len(self.loading)

    def holds(self, adapter: str) -> bool:
        """Whether the adapter is held or loading here."""
        return adapter in self.held or adapter in self.loading

    def oldest_idle(self) -> int | None:
        """The logical time the least recently used idle adapter became idle, or None."""
        for stamp in self.idle.values():
            return stamp
        return None


class Chooser(Protocol):
    """One router's instance of a policy."""

    def choose(self, adapter: str, candidates: Sequence[ReplicaState], now: float) -> ReplicaState:
        """The replica to send a request for ``adapter`` to, among ``candidates`` (never empty)."""
        ...


@attrs.frozen
class Policy:
    """A named routing policy, and the machine its routers run (the real one unless researching)."""

    name: str
    make: Callable[[random.Random, int], Chooser]
    """Given the router's seeded generator and the replicas' concurrency, a chooser for one router."""
    machine: Callable[[float], AdapterStateMachine] = attrs.field(
        default=lambda interval: AdapterStateMachine(listing_interval=interval)
    )
    description: str = ""

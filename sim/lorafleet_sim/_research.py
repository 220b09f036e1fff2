"""RESEARCH ONLY: a machine with another eviction rule, to measure it before the core adopts it.

``FrequencyEvictingMachine`` reaches into ``AdapterStateMachine``'s private state to change one thing,
the choice of victims in [evict]: instead of the least recently used idle adapter, the idle adapter
with the lowest demand weight (the policy's decayed request count, or its class: see
``_placement.Demand``), the least recently used among equals. Everything else is the real machine's.
It is tied to the core's internals on purpose and is not part of the simulator's public API: when the
core adopts the rule this goes away.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from lorafleet import AdapterStateMachine, Command, IssueUnload
from lorafleet._machine import _Load, _Replica, _Unload

from ._placement import Demand, Placement, PlacementChooser, rendezvous
from ._state import Policy, ReplicaState


class FrequencyEvictingMachine(AdapterStateMachine):
    """The real machine, evicting the idle adapter with the lowest demand weight first.

    ``attach`` hands it the policy's count of (replica, adapter) before the first request.
    """

    def __init__(self, *, listing_interval: float) -> None:
        super().__init__(listing_interval=listing_interval)
        self._score: Callable[[str, str], int] = lambda replica, adapter: 0

    def attach(self, score: Callable[[str, str], int]) -> None:
        self._score = score

    def _start_load(self, ticket: int, rep: _Replica, adapter: str, path: str) -> list[Command]:
        commands: list[Command] = []
        victims: list[_Unload] = []
        excess = len(rep.held) + len(rep.loading) + 1 - rep.limit
        score = self._score
        replica = rep.id
        while excess > 0 and rep.idle:
            # The lowest weight; the least recently used (first in ``idle``) among equals.
            victim = min(rep.idle, key=lambda name: score(replica, name))
            del rep.idle[victim]
            self._drop(rep, victim)
            unload = _Unload(rep, victim, self._new_op())
            rep.unloading[victim] = unload
            rep.outstanding += 1
            self._ops[unload.op] = unload
            victims.append(unload)
            commands.append(IssueUnload(unload=unload.op, replica=rep.id, adapter=victim))
            excess -= 1
        load = _Load(rep, adapter, path, self._new_op(), [ticket], ticket, {u.op for u in victims})
        for unload in victims:
            unload.blocks = load
        rep.loading[adapter] = load
        self._ops[load.op] = load
        self._waiting[ticket] = load
        if not victims:
            commands.append(self._issue(load))
        return commands


@attrs.define
class _HoldersFirstTies:
    """Holders-first with lorafleet's deterministic ties (fewest outstanding, fewest routed, rendezvous)."""

    concurrency: int
    demand: Demand = attrs.field(factory=lambda: Demand(2000))

    def _least(self, adapter: str, states: Sequence[ReplicaState]) -> ReplicaState:
        return min(states, key=lambda s: (s.outstanding, s.served, -rendezvous(adapter, s.id)))

    def choose(self, adapter: str, candidates: Sequence[ReplicaState], now: float) -> ReplicaState:
        holders = [s for s in candidates if s.holds(adapter)]
        chosen = self._least(adapter, holders) if holders else None
        if chosen is None or chosen.outstanding > self.concurrency:
            with_room = [s for s in candidates if s.occupied < s.limit]
            chosen = self._least(adapter, with_room or candidates)
        self.demand.count(adapter)
        chosen.served += 1
        return chosen

    def score(self, replica: str, adapter: str) -> int:
        return self.demand.of(adapter)


def _frequency(interval: float) -> AdapterStateMachine:
    return FrequencyEvictingMachine(listing_interval=interval)


def _ties(rng: random.Random, concurrency: int) -> _HoldersFirstTies:
    return _HoldersFirstTies(concurrency)


def _placement(**changes: Any) -> Callable[[random.Random, int], PlacementChooser]:
    def make(rng: random.Random, concurrency: int) -> PlacementChooser:
        return PlacementChooser.make(attrs.evolve(Placement.for_concurrency(concurrency), **changes))

    return make


RESEARCH: dict[str, Policy] = {
    p.name: p
    for p in (
        Policy("holders-first-ties", _ties, description="holders-first, ties broken as lorafleet does"),
        Policy(
            "holders-first-lfu",
            _ties,
            machine=_frequency,
            description="holders-first-ties with frequency-aware eviction",
        ),
        Policy(
            "lorafleet-lru",
            _placement(half_life=0),
            description="lorafleet's placement with the core's LRU eviction and LRU-valued victims",
        ),
        Policy(
            "lorafleet-no-overflow",
            _placement(overflow=0),
            machine=_frequency,
            description="lorafleet that never prefers a replica whose adapters are all in use",
        ),
        Policy(
            "lorafleet-counts",
            _placement(classes=False, half_life=2000),
            machine=_frequency,
            description="lorafleet weighing raw decayed counts (half-life 2,000) instead of their classes",
        ),
        Policy(
            "lorafleet-spread7",
            _placement(spread=7),
            machine=_frequency,
            description="lorafleet with spread 7 instead of 3C/4",
        ),
    )
}
"""Variants measured while choosing lorafleet's placement: accepted by --policy, not run by default."""

"""Routing policies: the published baselines the simulator compares lorafleet's placement with.

A policy is made once per router (``Policy.make``) and then asked, for each request, which of the
candidate replicas to send it to. Baselines may draw random numbers (from a generator seeded by the
run); lorafleet's placement may not.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import attrs

from ._placement import Placement, PlacementChooser
from ._research import RESEARCH as RESEARCH
from ._research import _frequency
from ._state import Policy, ReplicaState


def _least(candidates: Sequence[ReplicaState], rng: random.Random) -> ReplicaState:
    """The candidate with the fewest outstanding requests, ties broken at random."""
    best = candidates[0]
    fewest = best.outstanding
    ties = 1
    for rep in candidates[1:]:
        n = rep.outstanding
        if n < fewest:
            best, fewest, ties = rep, n, 1
        elif n == fewest:
            # Reservoir sampling over the ties: each is kept with equal chance, in one pass.
            ties += 1
            if rng.random() * ties < 1:
                best = rep
    return best


@attrs.define
class _Random:
    rng: random.Random

    def choose(self, adapter: str, candidates: Sequence[ReplicaState], now: float) -> ReplicaState:
        return candidates[int(self.rng.random() * len(candidates))]


@attrs.define
class _LeastLoaded:
    rng: random.Random

    def choose(self, adapter: str, candidates: Sequence[ReplicaState], now: float) -> ReplicaState:
        return _least(candidates, self.rng)


@attrs.define
class _RoundRobin:
    turn: int = 0

    def choose(self, adapter: str, candidates: Sequence[ReplicaState], now: float) -> ReplicaState:
        self.turn += 1
        return candidates[self.turn % len(candidates)]


@attrs.define
class _HoldersFirst:
    """Issue 10's holders-first with the busiest-holder spill rule."""

    rng: random.Random
    concurrency: int

    def choose(self, adapter: str, candidates: Sequence[ReplicaState], now: float) -> ReplicaState:
        holders = [rep for rep in candidates if adapter in rep.held or adapter in rep.loading]
        if holders:
            best = _least(holders, self.rng)
            if best.outstanding <= self.concurrency:
                return best
        with_room = [rep for rep in candidates if len(rep.held) + len(rep.loading) < rep.limit]
        return _least(with_room or candidates, self.rng)


BASELINES: dict[str, Policy] = {
    p.name: p
    for p in (
        Policy("random", lambda rng, c: _Random(rng), description="a replica drawn uniformly"),
        Policy(
            "least-loaded",
            lambda rng, c: _LeastLoaded(rng),
            description="the replica with the fewest outstanding requests",
        ),
        Policy("round-robin", lambda rng, c: _RoundRobin(), description="each replica in turn"),
        Policy(
            "holders-first",
            _HoldersFirst,
            description=(
                "the least loaded holder unless it has more than C outstanding, else the least "
                "loaded replica with room, else the least loaded"
            ),
        ),
    )
}


def _lorafleet() -> Policy:
    return Policy(
        "lorafleet",
        lambda rng, c: PlacementChooser.make(Placement.for_concurrency(c)),
        machine=_frequency,
        description=(
            "holders first up to C outstanding; cold loads on a not-busy replica with room, else one "
            "that evicts nothing, else the cheapest victim by decayed demand; frequency-aware eviction"
        ),
    )


POLICIES: dict[str, Policy] = {**BASELINES, "lorafleet": _lorafleet()}
"""Every policy the simulator compares, by name, in the order it prints them."""

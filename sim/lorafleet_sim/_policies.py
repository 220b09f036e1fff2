"""Routing policies: lorafleet's own placement, and the published baselines it is compared with.

Every policy runs over the same real ``AdapterStateMachine`` (its limit, eviction and cap); they
differ only in which replica a request is sent to. lorafleet asks the machine (``place``); the
baselines rank replicas by their own rule, from the router's request counts and the machine's
``view``, and may draw random numbers (from a generator seeded by the run).
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence

import attrs

from ._state import Policy, RouterView


def _least(candidates: Sequence[int], outstanding: list[int], rng: random.Random) -> int:
    """The candidate with the fewest outstanding requests, ties broken at random."""
    best = candidates[0]
    fewest = outstanding[best]
    ties = 1
    for rep in candidates[1:]:
        n = outstanding[rep]
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

    def choose(self, adapter: str, candidates: Sequence[int], tried: frozenset[int]) -> int:
        return candidates[int(self.rng.random() * len(candidates))]


@attrs.define
class _LeastLoaded:
    router: RouterView
    rng: random.Random

    def choose(self, adapter: str, candidates: Sequence[int], tried: frozenset[int]) -> int:
        return _least(candidates, self.router.outstanding, self.rng)


@attrs.define
class _RoundRobin:
    turn: int = 0

    def choose(self, adapter: str, candidates: Sequence[int], tried: frozenset[int]) -> int:
        self.turn += 1
        return candidates[self.turn % len(candidates)]


@attrs.define
class _HoldersFirst:
    """Issue 10's holders-first with the busiest-holder spill rule, over the machine's ``view``."""

    router: RouterView
    rng: random.Random
    concurrency: int

    def choose(self, adapter: str, candidates: Sequence[int], tried: frozenset[int]) -> int:
        router = self.router
        ids = router.ids
        outstanding = router.outstanding
        view = router.machine.view(ids, adapter)
        holders = [i for i in candidates if ids[i] in view.holders]
        if holders:
            best = _least(holders, outstanding, self.rng)
            if outstanding[best] <= self.concurrency:
                return best
        with_room = [i for i in candidates if ids[i] in view.with_room]
        return _least(with_room or candidates, outstanding, self.rng)


@attrs.define
class _BoundedLoad:
    """Consistent hashing with bounded loads (Mirrokni, Thorup and Zadimoghaddam, 2018): each adapter's
    replicas in its hash order, the first whose load stays within ``1 + epsilon`` of the mean."""

    router: RouterView
    epsilon: float = 0.25
    orders: dict[str, list[int]] = attrs.field(factory=dict)

    def choose(self, adapter: str, candidates: Sequence[int], tried: frozenset[int]) -> int:
        outstanding = self.router.outstanding
        order = self.orders.get(adapter)
        if order is None:
            ids = self.router.ids
            order = self.orders[adapter] = sorted(range(len(ids)), key=lambda i: _hash(adapter, ids[i]))
        total = sum(outstanding[i] for i in candidates) + 1
        bound = math.ceil((1 + self.epsilon) * total / len(candidates))
        allowed = set(candidates)
        first = -1
        for i in order:
            if i in allowed:
                if outstanding[i] + 1 <= bound:
                    return i
                if first < 0:
                    first = i
        return first


@attrs.define
class _ConsistentHash:
    """Consistent hashing on the adapter's name with no load bound: every request for an adapter goes
    to its first replica in the hash order (vLLM's router keys its ``consistent_hash`` on a header
    the client sets to the adapter), the next one only when that one was tried."""

    router: RouterView
    orders: dict[str, list[int]] = attrs.field(factory=dict)

    def choose(self, adapter: str, candidates: Sequence[int], tried: frozenset[int]) -> int:
        order = self.orders.get(adapter)
        if order is None:
            ids = self.router.ids
            order = self.orders[adapter] = sorted(range(len(ids)), key=lambda i: _hash(adapter, ids[i]))
        allowed = set(candidates)
        return next(i for i in order if i in allowed)


def _hash(adapter: str, replica: str) -> bytes:
    return hashlib.blake2b(f"{adapter}\0{replica}".encode(), digest_size=8).digest()


@attrs.define
class _Placed:
    """The machine's own [place]: the router sends ``Routed``, and the machine chooses; never asked."""

    def choose(self, adapter: str, candidates: Sequence[int], tried: frozenset[int]) -> int | None:
        raise AssertionError("a policy that routes is never asked to choose")


BASELINES: dict[str, Policy] = {
    p.name: p
    for p in (
        Policy("random", lambda router, rng, c: _Random(rng), description="a replica drawn uniformly"),
        Policy(
            "least-loaded",
            lambda router, rng, c: _LeastLoaded(router, rng),
            description="the replica with the fewest outstanding requests",
        ),
        Policy("round-robin", lambda router, rng, c: _RoundRobin(), description="each replica in turn"),
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

LRU = {"half_life": 1}
"""Machine settings under which [evict] is least recently used: every demand count halves to 0 at once."""

ENGINE_BASELINES: dict[str, Policy] = {
    p.name: p
    for p in (
        Policy(
            "least-loaded-engine",
            lambda router, rng, c: _LeastLoaded(router, rng),
            description=(
                "the replica with the fewest requests out, over engines that load adapters themselves "
                "and evict by their own memory's order (vLLM's router's load balancing over vLLM's resolver)"
            ),
            engine_loads=True,
        ),
        Policy(
            "consistent-hash",
            lambda router, rng, c: _ConsistentHash(router),
            description=(
                "consistent hashing on the adapter's name over engines that load adapters themselves "
                "and evict by their own memory's order (vLLM's router over vLLM's resolver)"
            ),
            engine_loads=True,
        ),
        Policy(
            "bounded-load",
            lambda router, rng, c: _BoundedLoad(router),
            description=(
                "consistent hashing with bounded loads (epsilon 0.25) over engines that load adapters "
                "themselves and evict by their own memory's order"
            ),
            engine_loads=True,
        ),
    )
}
"""Policies that only pick a replica: the engines load and evict (vLLM's filesystem resolver)."""

CAPPED = {"headroom": 0}
"""Machine settings under which a replica never holds more than its limit, its engine's memory: a
cold load with every adapter in use waits for one to end ([cap])."""

GRID_BASELINES: dict[str, Policy] = {
    p.name: p
    for p in (
        Policy(
            "holders-first",
            _HoldersFirst,
            settings=CAPPED,
            description="holders-first over a machine capped at the engines' memory",
        ),
        *ENGINE_BASELINES.values(),
    )
}
"""The baselines ``lorafleet simulate --grid`` compares lorafleet with."""


def _lorafleet(router: RouterView, rng: random.Random, concurrency: int) -> _Placed:
    return _Placed()


POLICIES: dict[str, Policy] = {
    **BASELINES,
    **ENGINE_BASELINES,
    "lorafleet": Policy(
        "lorafleet",
        _lorafleet,
        description="the machine's [route]: its [place] and [evict] (Routed)",
        routes=True,
    ),
}
"""Every policy the simulator compares by default, by name, in the order it prints them."""

VARIANTS: dict[str, Policy] = {
    p.name: p
    for p in (
        Policy(
            "holders-first-lru",
            _HoldersFirst,
            settings=LRU,
            description="holders-first over a machine that evicts the least recently used (half_life=1)",
        ),
        Policy(
            "lorafleet-lru",
            _lorafleet,
            settings=LRU,
            description="lorafleet with victims valued by idle age alone (half_life=1)",
            routes=True,
        ),
        Policy(
            "lorafleet-no-overflow",
            _lorafleet,
            settings={"overflow": 0},
            description="lorafleet that never prefers a replica whose adapters are all in use (overflow=0)",
            routes=True,
        ),
        Policy(
            "lorafleet-no-spill",
            _lorafleet,
            settings={"concurrency": None},
            description="lorafleet that never spills past a busy holder (concurrency=None)",
            routes=True,
        ),
    )
}
"""The machine's settings varied one at a time: accepted by --policy, not run by default."""

"""lorafleet's placement: where to send a request, as a pure function of what the machine knows.

No clock, no randomness: the same state gives the same replica, so that a Go or Rust port can
reproduce every choice. The last tie-break is a rendezvous weight, FNV-1a 64 of the UTF-8 bytes of
``adapter \\0 replica``, which any language computes byte for byte and which spreads adapters over
replicas without herding.

The state it reads is what the machine has or could keep (``ReplicaState`` and ``Demand``):

- per replica: the adapters held with their in-use counts, those loading, the idle ones in least
  recently used order with the request clock at which each went idle, the limit, this router's
  requests outstanding there (routed and not yet released) and routed there in all (``served``);
- per adapter: a decayed request count (``Demand``), +1 per request routed, every count halved
  (integer shift) each ``half_life`` requests the router routes.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import attrs

from ._state import ReplicaState

_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK = (1 << 64) - 1
_NEVER = 1 << 62


def fnv1a64(data: bytes) -> int:
    """The 64-bit FNV-1a hash of ``data``."""
    h = _FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * _FNV_PRIME) & _MASK
    return h


@functools.lru_cache(maxsize=1 << 16)
def rendezvous(adapter: str, replica: str) -> int:
    """The rendezvous weight of ``adapter`` on ``replica``: FNV-1a 64 of ``adapter \\0 replica`` in UTF-8."""
    return fnv1a64(f"{adapter}\0{replica}".encode())


@attrs.frozen
class Placement:
    """The placement rule's settings.

    Args:
        busy: a holder takes the request while it has fewer than this many outstanding.
        spread: a replica that does not hold the adapter is a candidate for loading it only while
            it has fewer than this many outstanding (when none has, the least loaded replica is).
        overflow: how far over its limit a cold load may take a replica whose adapters are all in
            use (the machine's soft limit), in preference to evicting an adapter elsewhere; 0 never.
        half_life: requests the router routes between two halvings of every adapter's count; 0
            counts nothing, so that victims are valued by idle age alone (least recently used).
        classes: weigh an adapter by the bit length of its count (0; 1; 2-3; 4-7; ...) rather than by
            the count, so that recency decides among adapters of about the same demand.
    """

    busy: int
    spread: int
    overflow: int = 2
    half_life: int = 4000
    classes: bool = True

    @classmethod
    def for_concurrency(cls, concurrency: int) -> Placement:
        """The settings measured best for replicas that run ``concurrency`` requests at once."""
        return cls(busy=concurrency + 1, spread=max(1, (3 * concurrency) // 4))


@attrs.define
class Demand:
    """Decayed request counts per adapter, the frequency the eviction and the cold choice weigh."""

    half_life: int
    counts: dict[str, int] = attrs.field(factory=dict)
    routed: int = 0

    def count(self, adapter: str) -> None:
        """Count one request for ``adapter``; every ``half_life`` requests, halve every count."""
        counts = self.counts
        counts[adapter] = counts.get(adapter, 0) + 1
        self.routed += 1
        if self.routed % self.half_life == 0:
            for name in list(counts):
                halved = counts[name] >> 1
                if halved:
                    counts[name] = halved
                else:
                    del counts[name]

    classes: bool = False
    """Weigh adapters by the bit length of their counts (1, 2-3, 4-7...): recency decides within a class."""

    def of(self, adapter: str) -> int:
        count = self.counts.get(adapter, 0)
        return count.bit_length() if self.classes else count


def victim(state: ReplicaState, demand: Demand) -> tuple[int, int, str] | None:
    """The idle adapter a load on ``state`` would evict: the lowest demand weight, then least recently used.

    Returns (weight, went idle at, adapter), or None when no adapter there is idle.
    """
    best: tuple[int, int, str] | None = None
    counts = demand.counts
    for name, since in state.idle.items():
        count = counts.get(name, 0)
        value = (count.bit_length() if demand.classes else count, since, name)
        # ``idle`` is in least recently used order, so on equal counts the first one seen stays.
        if best is None or value[0] < best[0]:
            best = value
    return best


def place(
    adapter: str, candidates: Sequence[ReplicaState], settings: Placement, demand: Demand
) -> ReplicaState:
    """The replica a request for ``adapter`` goes to, among ``candidates`` (not empty).

    1. The least loaded replica holding or loading the adapter, if it has fewer than ``busy``
       outstanding. Least loaded: fewest outstanding, then fewest routed in all, then the highest
       rendezvous weight.
    2. Else a replica that does not hold it and has fewer than ``spread`` outstanding, the first of:
       one with room (fewer held and loading than its limit); one where every adapter is in use, so
       that the load evicts nothing, while it is less than ``overflow`` over its limit; the one whose
       victim (see ``victim``) has the lowest demand weight, then went idle longest ago. Least loaded
       breaks ties within each.
    3. When no replica qualifies for 2: the least loaded holder, else the least loaded replica.
    """
    holder: ReplicaState | None = None
    holder_key: tuple[int, int, int] = (0, 0, 0)
    for state in candidates:
        if adapter in state.held or adapter in state.loading:
            key = (state.outstanding, state.served, -rendezvous(adapter, state.id))
            if holder is None or key < holder_key:
                holder, holder_key = state, key
    if holder is not None and holder.outstanding < settings.busy:
        return holder
    target: ReplicaState | None = None
    target_key: tuple[int, int, int, int, int, int] = (0, 0, 0, 0, 0, 0)
    for state in candidates:
        if state.outstanding >= settings.spread or adapter in state.held or adapter in state.loading:
            continue
        load = (state.outstanding, state.served, -rendezvous(adapter, state.id))
        occupied = len(state.held) + len(state.loading)
        if occupied < state.limit:
            rank = (0, 0, 0, *load)
        elif not state.idle:
            rank = (1 if occupied < state.limit + settings.overflow else 3, 0, 0, *load)
        else:
            count, since, _ = victim(state, demand) or (0, 0, "")
            rank = (2, count, since, *load)
        if target is None or rank < target_key:
            target, target_key = state, rank
    if target is not None:
        return target
    if holder is not None:
        return holder
    return min(candidates, key=lambda s: (s.outstanding, s.served, -rendezvous(adapter, s.id)))


@attrs.define
class PlacementChooser:
    """One router's placement: keeps the demand counts and each replica's routed count, and places."""

    settings: Placement
    demand: Demand

    @classmethod
    def make(cls, settings: Placement) -> PlacementChooser:
        return cls(settings, Demand(settings.half_life, classes=settings.classes))

    def choose(self, adapter: str, candidates: Sequence[ReplicaState], now: float) -> ReplicaState:
        state = place(adapter, candidates, self.settings, self.demand)
        if self.settings.half_life:
            self.demand.count(adapter)
        state.served += 1
        return state

    def score(self, replica: str, adapter: str) -> int:
        """The eviction's weight of ``adapter``: its decayed count (the same on every replica)."""
        return self.demand.of(adapter)

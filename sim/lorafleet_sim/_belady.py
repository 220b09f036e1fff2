"""Belady's MIN: the fewest loads any eviction could have paid for one replica's request sequence.

The model: after request ``i`` the replica holds its adapter and at most ``capacities[i]`` adapters,
all of them held before or asked for now; a request whose adapter was not held costs one load. With a
capacity that changes from request to request (the capacity a policy really had, over its limit when
every adapter was in use), evicting the adapters whose next use is furthest away, only when needed,
is still optimal; ``tests/test_sim.py`` checks it against exhaustive search.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence


def belady_loads(adapters: Sequence[str], capacities: Sequence[int]) -> int:
    """The fewest loads that serve ``adapters`` in order within ``capacities``, starting empty.

    Raises:
        ValueError: the sequences differ in length, or a capacity is below 1.
    """
    n = len(adapters)
    if len(capacities) != n:
        raise ValueError(f"{n} adapters but {len(capacities)} capacities")
    never = n  # a next use beyond the end: evicted first
    next_use = [never] * n
    seen: dict[str, int] = {}
    for i in range(n - 1, -1, -1):
        name = adapters[i]
        next_use[i] = seen.get(name, never)
        seen[name] = i
    held: dict[str, int] = {}  # adapter -> its next use
    furthest: list[tuple[int, str]] = []  # (-next use, adapter), stale entries skipped on pop
    loads = 0
    for i in range(n):
        name = adapters[i]
        capacity = capacities[i]
        if capacity < 1:
            raise ValueError(f"capacity {capacity} at request {i} is below 1")
        if name not in held:
            loads += 1
        use = next_use[i]
        held[name] = use
        heapq.heappush(furthest, (-use, name))
        deferred = None
        while len(held) > capacity:
            entry = heapq.heappop(furthest)
            negative, victim = entry
            if held.get(victim) != -negative:
                continue  # stale: the adapter was asked for again, or evicted
            if victim == name:
                deferred = entry  # the adapter just asked for stays
                continue
            del held[victim]
        if deferred is not None:
            heapq.heappush(furthest, deferred)
    return loads

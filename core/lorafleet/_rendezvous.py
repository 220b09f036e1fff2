"""Rendezvous weights ([place]), and the replicas in an adapter's rendezvous order without a hash per pair.

The weight of a replica for an adapter is FNV-1a (64 bits) over the UTF-8 bytes of the adapter, a zero
byte and the replica (SPEC §3.12). A cold load among many tied replicas goes to the one of highest
weight, so an adapter never placed before would hash every replica: on a fleet just started, where
every replica ties, most of a millisecond at 1,000 replicas and 7 ms at 10,000, per request.

``Orders`` reads the order from sorted tables instead. FNV-1a's step ``h -> (h ^ b) * P`` (mod 2**64)
moves ``h ^ b`` away from ``h`` by an amount that depends only on ``h``'s low byte, and a product's low
byte depends only on its factors' low bytes. So over a replica's ``n`` bytes ``r``, from any state ``s``::

    fnv(s, r) = s * P**n + C_r(s & 255)   (mod 2**64),   where C_r(l) = fnv(l, r) - l * P**n

For one adapter, ``s`` (the state after its bytes and the zero byte) is fixed. Among the replicas whose
ids are ``n`` bytes long, each weight is then ``K + C_r(l)`` for one ``K`` and one low byte ``l``: in the
order of ``C_r(l)``, but for the wrap past 2**64, which a bisection finds. One sorted table per length
and low byte, built the first time an adapter needs it (at most 256 per length), serves every adapter.
"""

from __future__ import annotations

import functools
from array import array
from bisect import bisect_left
from collections.abc import Callable, Container, Iterable
from itertools import chain
from typing import Generic, TypeVar

T = TypeVar("T")

_OFFSET = 0xCBF29CE484222325
_PRIME = 0x100000001B3
_MASK = 0xFFFFFFFFFFFFFFFF
_WRAP = 1 << 64


def fnv(h: int, data: bytes) -> int:
    """FNV-1a (64 bits) of ``data``, from the state ``h`` (``_OFFSET`` to start)."""
    for byte in data:
        h = ((h ^ byte) * _PRIME) & _MASK
    return h


@functools.lru_cache(maxsize=4096)  # pure, and a tie among a hot adapter's holders is every request's
def weight(adapter: str, replica: str) -> int:
    """FNV-1a (64 bits) of the UTF-8 bytes of ``adapter``, a zero byte, and ``replica``.

    The rendezvous weight of a replica for an adapter: any language computes the same number, so
    independent routers break ties alike.
    """
    return fnv(_OFFSET, f"{adapter}\0{replica}".encode())


@functools.lru_cache(maxsize=4096)
def _start(adapter: str) -> int:
    """The state after ``adapter``'s bytes and the zero byte: what every replica's weight starts from."""
    return fnv(_OFFSET, f"{adapter}\0".encode())


class _Length(Generic[T]):
    """The replicas whose ids are ``n`` bytes long, and their tables by low byte."""

    __slots__ = ("ids", "items", "power", "tables")

    def __init__(self, n: int) -> None:
        self.power = pow(_PRIME, n, _WRAP)
        self.ids: list[bytes] = []
        self.items: list[T] = []
        self.tables: dict[int, tuple[array[int], array[int]]] = {}
        """Low byte to (``C_r(l)`` ascending, the index in ``items`` of each)."""

    def table(self, low: int) -> tuple[array[int], array[int]]:
        found = self.tables.get(low)
        if found is None:
            base = low * self.power
            cs: list[int] = []
            for rid in self.ids:  # fnv(low, rid), inline: a table costs a hash of every replica
                h = low
                for byte in rid:
                    h = ((h ^ byte) * _PRIME) & _MASK
                cs.append((h - base) & _MASK)
            order = sorted(range(len(cs)), key=cs.__getitem__)
            found = self.tables[low] = (array("Q", [cs[i] for i in order]), array("I", order))
        return found


class Orders(Generic[T]):
    """``replicas`` (id, item) in each adapter's rendezvous order, highest ``weight(adapter, id)`` first.

    Weights are distinct, as SPEC assumes. Made for one set of replicas: another set needs new ``Orders``.
    """

    __slots__ = ("_lengths",)

    def __init__(self, replicas: Iterable[tuple[str, T]]) -> None:
        lengths: dict[int, _Length[T]] = {}
        for rid, item in replicas:
            data = rid.encode()
            length = lengths.get(len(data))
            if length is None:
                length = lengths[len(data)] = _Length(len(data))
            length.ids.append(data)
            length.items.append(item)
        self._lengths = list(lengths.values())

    def first(self, adapter: str, among: Container[T], accept: Callable[[T], bool]) -> T | None:
        """The item of highest weight for ``adapter`` that is in ``among`` and that ``accept`` takes.

        None when there is none. Each id length is read in its own order only while its weights stay
        above the best found in another; ``among`` (a set, a dict) is asked first, so that a walk past
        many items outside it costs a lookup each.
        """
        start = _start(adapter)
        best: T | None = None
        best_weight = -1
        for length in self._lengths:
            k = (start * length.power) & _MASK
            cs, index = length.table(start & 255)
            items = length.items
            cut = bisect_left(cs, _WRAP - k)  # from here on k + c wraps past 2**64, to below every other
            for i in chain(range(cut - 1, -1, -1), range(len(cs) - 1, cut - 1, -1)):
                mine = k + cs[i] if i < cut else k + cs[i] - _WRAP
                if mine <= best_weight:
                    break  # the rest of this length weighs less still
                item = items[index[i]]
                if item in among and accept(item):
                    best, best_weight = item, mine
                    break
        return best

"""Rendezvous weights ([place]): which replica of a tie a cold load goes to.

The weight of a replica for an adapter is SplitMix64's output from the state ``fnv(adapter) XOR
fnv(replica)``, each name hashed with 64-bit FNV-1a over its UTF-8 bytes (SPEC §3.12). Any language
computes the same number from the names alone, so independent routers break ties alike. The final
mixing is what spreads the ties: FNV-1a alone keeps ids that differ only in their last bytes within a
64th of its range for every adapter, so a few of them came first for most adapters (bench/NOTES.md).
Each name is hashed once; weighing a replica is then one mix, with no pass over its bytes.
"""

from __future__ import annotations

import functools
import sys
from array import array
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

T = TypeVar("T")

_OFFSET = 0xCBF29CE484222325
_PRIME = 0x100000001B3
_MASK = 0xFFFFFFFFFFFFFFFF
_GAMMA = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB


def fnv(data: bytes) -> int:
    """FNV-1a (64 bits) of ``data``."""
    h = _OFFSET
    for byte in data:
        h = ((h ^ byte) * _PRIME) & _MASK
    return h


def mix(state: int) -> int:
    """SplitMix64's output from ``state``: add the golden gamma, then its two multiply-xorshift rounds."""
    z = (state + _GAMMA) & _MASK
    z = ((z ^ (z >> 30)) * _M1) & _MASK
    z = ((z ^ (z >> 27)) * _M2) & _MASK
    return z ^ (z >> 31)


@functools.lru_cache(maxsize=1 << 16)  # a fleet's ids, and the adapters placed lately
def name_hash(name: str) -> int:
    """FNV-1a (64 bits) of the UTF-8 bytes of ``name``: a name's half of every weight it takes part in."""
    return fnv(name.encode())


@functools.lru_cache(maxsize=4096)  # a tie among a hot adapter's holders is every request's
def weight(adapter: str, replica: str) -> int:
    """The rendezvous weight of ``replica`` for ``adapter``: ``mix(fnv(adapter) ^ fnv(replica))``."""
    return mix(name_hash(adapter) ^ name_hash(replica))


LANE = 128
"""Bits a replica's lane takes in ``Lanes``: its 64-bit value, and room for that value times a 64-bit
factor, so that no lane's product reaches the next."""
_LANE_BYTES = LANE // 8


class Lanes(Generic[T]):
    """Items (replicas) each in a lane of one integer, holding its name's hash, so that the weights of
    all of them for one adapter are some twenty operations on that integer: each of ``mix``'s steps,
    masked back to 64 bits a lane, is one. A right shift brings a neighbour's bits only above bit 64,
    which the mask clears; a product of two 64-bit values fits in a lane. In C, not a Python loop: a
    tie of every replica of a fleet just listed costs a mix per replica, 0.3 µs each in the loop.

    A lane freed is taken again by the next item added.
    """

    __slots__ = ("_at", "_free", "_full", "_hashes", "_ones", "_slot")

    def __init__(self) -> None:
        self._slot: dict[T, int] = {}
        self._at: list[T | None] = []
        self._free: list[int] = []
        self._hashes = 0
        """Lane i: the name hash of the item in slot i (0 while free)."""
        self._ones = 0
        """1 in every lane of ``_at``'s length: times a 64-bit value, that value in every lane."""
        self._full = 0
        """64 ones in every lane: the mask that keeps each lane to 64 bits."""

    def add(self, item: T, name: str) -> None:
        if item in self._slot:
            return
        if self._free:
            slot = self._free.pop()
            self._at[slot] = item
        else:
            slot = len(self._at)
            self._at.append(item)
            self._ones |= 1 << (LANE * slot)
            self._full |= _MASK << (LANE * slot)
        self._slot[item] = slot
        self._hashes |= name_hash(name) << (LANE * slot)

    def discard(self, item: T, name: str) -> None:
        slot = self._slot.pop(item, None)
        if slot is not None:
            self._hashes ^= name_hash(name) << (LANE * slot)
            self._at[slot] = None
            self._free.append(slot)

    def __len__(self) -> int:
        return len(self._slot)

    def lane(self, item: T) -> int:
        """``item``'s lane, all ones: for masks of a subset (``|``, ``^``)."""
        return _MASK << (LANE * self._slot[item])

    def mask(self, items: Iterable[T]) -> int:
        """The lanes of ``items``, all ones."""
        lanes = bytearray(len(self._at) * _LANE_BYTES)
        full = b"\xff" * 8
        for item in items:
            start = self._slot[item] * _LANE_BYTES
            lanes[start : start + 8] = full
        return int.from_bytes(lanes, "little")

    def weights(self, adapter: str) -> int:
        """Every item's ``weight(adapter, its name)``, each in its lane (garbage in free lanes)."""
        full = self._full
        z = ((self._hashes ^ (name_hash(adapter) * self._ones)) + _GAMMA * self._ones) & full
        z = ((z ^ ((z >> 30) & full)) * _M1) & full
        z = ((z ^ ((z >> 27) & full)) * _M2) & full
        return z ^ ((z >> 31) & full)

    def first(self, weights: int, mask: int, accept: Callable[[T], bool], tries: int) -> T | None:
        """The item of highest weight among ``mask``'s lanes that ``accept`` takes, or None when
        ``tries`` were turned away or only lanes of weight 0 are left (a member's weight may be 0, as a
        lane outside ``mask`` reads): then weigh them one at a time."""
        data = (weights & mask).to_bytes(len(self._at) * _LANE_BYTES, "little")
        words = array("Q", data)
        if sys.byteorder != "little":
            words.byteswap()
        values = words[::2]
        at = self._at
        for _ in range(tries):
            best = max(values, default=0)
            if best == 0:
                return None
            slot = values.index(best)
            item = at[slot]
            if item is not None and accept(item):
                return item
            values[slot] = 0
        return None

    def check(self, names: dict[T, str]) -> None:
        """Raise AssertionError unless the lanes hold exactly ``names`` (item to name), each hashed."""
        assert self._slot.keys() == names.keys(), "lanes"
        assert all(self._at[slot] is item for item, slot in self._slot.items()), "slots"
        assert sorted(self._free) == [i for i, item in enumerate(self._at) if item is None], "free"
        hashes = sum(name_hash(names[item]) << (LANE * slot) for item, slot in self._slot.items())
        assert self._hashes == hashes, "hashes"

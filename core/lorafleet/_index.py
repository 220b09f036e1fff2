"""[place]'s index of cold loads: the replicas by what a cold load there would cost, for any adapter.

A cold load goes to the candidate of least ``(cold key, -rendezvous weight)`` (SPEC §3.12). The cold
key of a replica (what a load there costs: a free slot, going over, a victim and its demand, how busy)
is the same for every adapter, so the replicas are kept grouped by it, the keys in order, and a
placement reads the groups in that order until one has a candidate: the rule's answer, found without
scanning the fleet. The machine computes the keys and says which replicas are candidates; this module
only keeps them in order and finds the heaviest candidate in a group.

A replica whose key may have changed is marked ``dirty`` (the machine does so on the paths that change
what a key reads) and listed; ``refresh`` computes those keys again before the next read.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from typing import Generic, Protocol, TypeVar

from ._rendezvous import Lanes, mix, name_hash
from ._values import Placed

Key = tuple[int, int, int, int, int]
"""A cold key: (kind, busy, victim's level, victim's idle stamp, served), compared as a tuple."""

PLACED = (Placed.FREE, Placed.OVER, Placed.EVICT, Placed.OVER, Placed.WAIT)
"""A cold load's placement by its key's kind."""

TIE = 16
"""Past this many replicas tied on a cold key, and past a quarter of the replicas in use (a pass over
the lanes weighs every one of them), weigh the tie in its lanes rather than one replica at a time."""
TRIES = 4
"""The heaviest replicas of a tie offered before weighing it one at a time: a tie whose replicas the
acceptor turns away (another model's, excluded) is rare past a few."""


class Indexed(Protocol):
    """What the index reads and writes of a replica."""

    id: str
    cold: Key | None
    """Its key in the index; None while it is not in it."""
    dirty: bool
    """Its key may have changed since ``cold`` was computed: it waits in ``ColdIndex.dirty``."""


R = TypeVar("R", bound=Indexed)


class ColdIndex(Generic[R]):
    """The replicas in use, grouped by cold key, the keys in order."""

    __slots__ = ("_groups", "_keys", "_lanes", "_masks", "dirty")

    def __init__(self) -> None:
        self._keys: list[Key] = []
        """Every key some replica has, once each, in order."""
        self._groups: dict[Key, dict[R, int]] = {}
        """Key to the replicas that have it, each with its id's ``name_hash``: ties that the rendezvous
        weight breaks."""
        self.dirty: list[R] = []
        """Replicas whose key may have changed since ``refresh``: the machine appends (and sets
        ``dirty``) inline on its hottest paths, where a call would cost a tenth of a hit."""
        self._lanes: Lanes[R] = Lanes()
        """Every replica with a key, in a lane: a large tie is weighed in one pass (``best``)."""
        self._masks: dict[Key, int] = {}
        """The lanes of each group ``best`` weighed in lanes, kept as replicas join and leave it until
        it is an eighth of the lanes."""

    def touch(self, rep: R) -> None:
        """``rep``'s key may have changed: ``refresh`` computes it again."""
        if not rep.dirty:
            rep.dirty = True
            self.dirty.append(rep)

    def refresh(self, key_of: Callable[[R], Key | None]) -> None:
        """Give each touched replica its key again (``key_of``: None for one no longer in use)."""
        dirty = self.dirty
        if not dirty:
            return
        keys, groups, lanes, masks = self._keys, self._groups, self._lanes, self._masks
        for rep in dirty:
            rep.dirty = False
            key = key_of(rep)
            old = rep.cold
            if key == old:
                continue
            if old is not None:
                left = groups[old]
                del left[rep]
                mask = masks.get(old)
                if mask is not None:
                    if 8 * len(left) < len(lanes):
                        del masks[old]  # a tie this small is weighed one at a time
                    else:
                        masks[old] = mask ^ lanes.lane(rep)
                if not left:
                    del groups[old]
                    del keys[bisect.bisect_left(keys, old)]
            if key is None:
                lanes.discard(rep, rep.id)
            else:
                lanes.add(rep, rep.id)
            rep.cold = key
            if key is not None:
                group = groups.get(key)
                if group is None:
                    groups[key] = {rep: name_hash(rep.id)}
                    bisect.insort(keys, key)
                else:
                    group[rep] = name_hash(rep.id)
                    mask = masks.get(key)
                    if mask is not None:
                        masks[key] = mask | lanes.lane(rep)
        dirty.clear()

    def best(self, adapter: str, accept: Callable[[Key], Callable[[R], bool] | None]) -> tuple[Key, R] | None:
        """The replica of least ``(key, -weight for adapter)`` that its key's acceptor takes, and its key.

        ``accept(key)`` gives the test for the replicas of that key, or None to look no further; the
        keys are read in order.
        """
        groups, lanes = self._groups, self._lanes
        mine = name_hash(adapter)
        weights: int | None = None
        for key in self._keys:
            take = accept(key)
            if take is None:
                return None
            group = groups[key]
            chosen: R | None = None
            if len(group) > TIE and 4 * len(group) > len(lanes):
                mask = self._masks.get(key)
                if mask is None:
                    mask = self._masks[key] = lanes.mask(group)
                if weights is None:
                    weights = lanes.weights(adapter)
                chosen = lanes.first(weights, mask, take, TRIES)
                if chosen is not None:
                    return key, chosen
                # Several turned away: weigh them one at a time.
            best = -1
            for rep, theirs in group.items():
                z = mix(mine ^ theirs)
                if z > best and take(rep):  # the weight first: most of a tie weighs less than the best
                    chosen, best = rep, z
            if chosen is not None:
                return key, chosen
        return None

    def check(self, in_use: Iterable[R], key_of: Callable[[R], Key | None]) -> None:
        """Raise AssertionError unless the index holds each replica under its key (after ``refresh``)."""
        assert not self.dirty, "refresh before check"
        replicas = list(in_use)
        members = set(replicas)
        assert self._keys == sorted(self._groups), "cold keys"
        for key, group in self._groups.items():
            assert group, key
            assert all(rep.cold == key and rep in members for rep in group), key
        for rep in replicas:
            assert rep.cold == key_of(rep), rep.id
            assert rep.cold is None or rep in self._groups[rep.cold], rep.id
        self._lanes.check({rep: rep.id for group in self._groups.values() for rep in group})
        for key, mask in self._masks.items():
            assert mask == self._lanes.mask(self._groups[key]), key

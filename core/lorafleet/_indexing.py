"""[place]'s index kept by the machine: which replicas' cold keys to compute again, and a cold load
placed from the index (``_place_indexed``), for ``AdapterStateMachine``.

None of this is a rule. The rule is the machine's scan (``_place_cold``), whose candidates and keys
(``_candidate``, ``_cold_key``) the index reads too, and ``check_invariants`` compares the two.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Container

from ._index import PLACED, ColdIndex, Key
from ._snapshots import Placement
from ._state import NOWHERE, Replica


class Indexing:
    """The index's upkeep and its placement, for ``AdapterStateMachine``: the state they read is the
    machine's."""

    _clock: float
    _index: ColdIndex[Replica]
    _dirty: list[Replica]
    _reweighed: set[str]
    _where: dict[str, dict[str, Replica]]

    _candidate: Callable[[str, str | None, Container[str], bool, float, float, Replica], bool]
    """The machine's [place] candidate test (``AdapterStateMachine._candidate``)."""

    def _cold_key(self, rep: Replica) -> Key:
        raise NotImplementedError  # the machine's ([place])

    def _touch(self, rep: Replica) -> None:
        """Something ``rep``'s cold key reads changed: [place]'s index reads it again (``_reindex``)."""
        if not rep.dirty:
            rep.dirty = True
            self._dirty.append(rep)

    def _place_indexed(
        self, adapter: str, model: str | None, skip: Container[str], spread: bool
    ) -> Placement:
        """[place], a cold load, from the index: the same answer as the scan of ``_place_cold``.

        The key ``(kind, busy, a, b, served, -weight)`` of a candidate is its cold key (``_cold_key``,
        the same for every adapter) and the rendezvous weight: the index reads the cold keys in order
        and answers with the heaviest candidate of the first that has one.
        """
        self._reindex()
        clock = self._clock

        def accept(key: Key) -> Callable[[Replica], bool] | None:
            if spread and key[0] == 4:
                return None  # at its cap: the request would wait for room, while others may have some
            return functools.partial(self._candidate, adapter, model, skip, spread, key[1], clock)

        found = self._index.best(adapter, accept)
        if found is None:
            return Placement(replica=None, placed=None)
        key, chosen = found
        return Placement(replica=chosen.id, placed=PLACED[key[0]])

    def _reindex(self) -> None:
        """Bring [place]'s index up to date: the cold key of each replica touched since (``_touch``),
        and of each where an adapter whose weight changed since is idle (its victim may be another)."""
        if self._reweighed:
            for name in self._reweighed:
                for rep in self._where.get(name, NOWHERE).values():
                    if name in rep.idle:
                        self._touch(rep)
            self._reweighed.clear()
        self._index.refresh(self._indexed_key)

    def _indexed_key(self, rep: Replica) -> Key | None:
        return None if rep.removed else self._cold_key(rep)

"""What a policy is, and what it sees of one router: the router's machine and its own request counts."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import attrs

from lorafleet import AdapterStateMachine

MODEL = "base"
"""The one base model every simulated replica serves."""


@attrs.define(eq=False)
class RouterView:
    """One router as a policy sees it: its machine, the replicas, and its requests on each.

    ``outstanding`` is what a router written from docs/embedding.md keeps itself: its requests routed to
    each replica and not yet ended. The machine counts the same (``in_flight``) for [place].
    """

    machine: AdapterStateMachine
    ids: tuple[str, ...]
    """Replica ids, by index."""
    index: Mapping[str, int]
    """Replica id to index."""
    outstanding: list[int]
    """This router's requests on each replica (by index) that have not ended."""


class Chooser(Protocol):
    """One router's instance of a policy."""

    def choose(self, adapter: str, candidates: Sequence[int], tried: frozenset[int]) -> int | None:
        """The replica (an index) to send a request for ``adapter`` to, or None to try again later.

        Args:
            candidates: the indexes of the replicas this request has not tried (never empty).
            tried: the indexes it has tried (after a 404 or a failed load).
        """
        ...


@attrs.frozen
class Policy:
    """A named routing policy, and the settings of the machine its routers run.

    Every policy runs the real ``AdapterStateMachine``; ``settings`` are keyword arguments for it
    that this policy sets, over the fleet's (``concurrency``, ``headroom``, ``overflow``,
    ``half_life``).
    """

    name: str
    make: Callable[[RouterView, random.Random, int], Chooser]
    """Given the router, its seeded generator and the replicas' concurrency, a chooser for it."""
    settings: Mapping[str, Any] = attrs.field(factory=dict)
    description: str = ""
    routes: bool = False
    """The machine places each request (``Routed``), and ``make``'s chooser is never asked."""
    engine_loads: bool = False
    """The engines load what a request names themselves (vLLM's filesystem resolver) and evict by
    their own memory's order: the router only picks the replica, and its machine is never used."""

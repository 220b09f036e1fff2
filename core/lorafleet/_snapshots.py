"""Frozen snapshots the machine hands out: a view for the scheduler and statistics for metrics."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from ._values import Placed


@attrs.frozen(kw_only=True)
class View:
    """Where one adapter stands among candidate replicas, for the router's scheduler.

    ``holders`` hold the adapter or are loading it; ``with_room`` hold fewer adapters (held plus
    loading) than their limit. A replica never added has room and holds nothing.
    """

    holders: frozenset[str]
    with_room: frozenset[str]


@attrs.frozen(kw_only=True)
class Reading:
    """What this router knows of one replica's engine from reading it ([reading], [load]).

    ``running`` and ``waiting`` are the engine's requests as its last reading counted them (None before
    any reading counted them); ``load`` is this router's requests on it now plus ``others``, the other
    routers' as that reading showed them; ``capacity`` the requests it runs at once (the machine's
    ``concurrency``, else learned from a reading with a queue; None unknown).
    """

    adapters: frozenset[str]
    """What the last reading names: adapters another router's requests run on there ([reading])."""
    foreign: bool
    """The last reading named an adapter none of this router's requests ran on there."""
    running: int | None
    waiting: int | None
    others: int
    load: int
    capacity: int | None
    max_loras: int | None
    """Distinct adapters one batch of the engine may use (vLLM's ``--max-loras``), None unknown."""


@attrs.frozen(kw_only=True)
class Refusal:
    """An adapter the engine refused as its own fault: requests for it fail without a call until
    ``until`` on the machine's clock ([refuse]), with the engine's words, ``message``."""

    until: float
    message: str


@attrs.frozen(kw_only=True)
class Placement:
    """Where to send a request for an adapter ([place]): the replica, and what it will find there.

    ``replica`` is None when there is no candidate (none given, none in use, or all excluded).
    """

    replica: str | None
    placed: Placed | None


@attrs.frozen
class ReplicaStatistics:
    """One replica as the machine sees it."""

    model: str
    limit: int
    met: bool
    """Its first listing has been answered, well or not."""
    held: Mapping[str, int] = attrs.field(hash=False)
    """Adapter name to the number of requests running on it, sorted by name."""
    loading: tuple[str, ...]
    unloading: tuple[str, ...]
    queued: int = 0
    """Requests waiting for room at the replica's cap ([cap])."""
    in_flight: int = 0
    """This router's requests on the replica that have not ended (waiting or granted)."""
    failing_until: float | None = None
    """While the machine's clock is below this, placement avoids the replica ([health])."""


@attrs.frozen
class Statistics:
    """Counts since the machine was made, and what every replica holds now.

    Keys are sorted so that two snapshots of equal machines compare and print alike.
    """

    loads: Mapping[tuple[str, str], int] = attrs.field(hash=False)
    """(model, load outcome) to count."""
    evictions: Mapping[tuple[str, str], int] = attrs.field(hash=False)
    """(model, unload outcome) to count, for unloads made to make room."""
    grants: Mapping[str, int] = attrs.field(hash=False)
    """How (hit, joined, loaded) to count."""
    failures: Mapping[str, int] = attrs.field(hash=False)
    """Fault (adapter, replica) to the number of requests failed with it."""
    replicas: Mapping[str, ReplicaStatistics] = attrs.field(hash=False)
    waiting: int
    """Requests waiting for a load or an unload."""
    leases: int
    """Requests granted and not yet released."""
    pins: Mapping[str, int] = attrs.field(hash=False, factory=dict)
    """Pinned adapter to the number of copies kept loaded, sorted by name."""
    warming: frozenset[str] = frozenset()
    """The pinned adapters whose pin lifts itself once a copy is held ([warm])."""

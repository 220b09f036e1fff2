"""What the adapter state machine keeps: a record for each lease, load, unload, queue, listing, read,
routed request and replica, and its settings and counts. Records only: every rule that reads or
changes them is in ``_machine``."""

from __future__ import annotations

import math
from collections import OrderedDict

import attrs

from ._fields import invalid, is_number
from ._index import Key


@attrs.define(eq=False)
class Held:
    """An adapter a replica holds; leases point at it, so a release never reaches a newer copy."""

    replica: Replica
    adapter: str
    in_use: int
    since: int
    """The logical time it became held, which a listing compares with its own start."""
    current: bool = True
    """False once dropped: releases of leases on it change nothing any more."""


@attrs.define(eq=False)
class Load:
    replica: Replica
    adapter: str
    path: str
    op: int
    waiters: list[int]
    starter: int | None
    """The ticket granted "loaded"; every other waiter joined."""
    victims: list[Unload] = attrs.field(factory=list)
    """The adapters it takes the room of ([evict]): unloaded once it lands, held again if it fails."""


@attrs.define(eq=False)
class Unload:
    replica: Replica
    adapter: str
    op: int | None
    """None while it waits for the load it makes room for to land: not issued yet ([evict])."""
    waiters: list[tuple[int, str]] = attrs.field(factory=list)
    """(ticket, path) of requests to handle afresh when the unload finishes."""
    since: int = 0
    """A victim's: when it became held, and (``stamp``) its place in ``idle``, should it be held again."""
    stamp: int = 0
    renew: bool = False
    """The adapter changed ([renew]): this copy is never held again. While the replica still holds it
    (in use) or loads it, the unload waits (``op`` None) for the last request on it to end."""


@attrs.define(eq=False)
class Queue:
    """Requests waiting for room on a replica at its cap, first come first served ([cap])."""

    replica: Replica
    waiters: list[tuple[int, str, str]] = attrs.field(factory=list)
    """(ticket, adapter, path), to be admitted afresh in order once there is room."""


@attrs.define(eq=False)
class Listing:
    replica: Replica
    op: int
    started: int


@attrs.define(eq=False)
class Route:
    """A routed request not yet assigned to a replica: what placing it again needs ([route])."""

    ticket: int
    adapter: str
    path: str
    model: str | None
    exclude: frozenset[str]
    read: set[str] = attrs.field(factory=set)
    """Replicas read for it already: each is read at most once for one request."""


@attrs.define(eq=False)
class Read:
    """A read of a replica's engine ([read]), and the requests that wait for its answer."""

    replica: Replica
    op: int
    in_flight: int
    """This router's ``in_flight`` on the replica when the read went out."""
    served: int
    """And its ``served`` count."""
    waiters: list[tuple[int, str, str, Route | None]] = attrs.field(factory=list)
    """(ticket, adapter, path, route): admitted afresh on the replica once the answer comes (placed
    afresh, for a routed request not yet assigned)."""
    ended: set[str] = attrs.field(factory=set)
    """Adapters whose last request of this router on the replica ended while the read was out: its
    sample may name them, as this router's own."""


Operation = Load | Unload | Listing | Read


@attrs.define(eq=False)
class Parked:
    """Routed requests for ``adapter`` that found only replicas replacing an old copy of it
    ([renew]): unassigned, counted on no replica, placed again once [place] finds them another."""

    adapter: str
    routes: list[Route] = attrs.field(factory=list)
    """In ticket order."""


Wait = Load | Unload | Queue | Read | Parked


@attrs.define(eq=False)
class Replica:
    id: str
    model: str
    limit: int
    due: float
    held: dict[str, Held] = attrs.field(factory=dict)
    idle: OrderedDict[str, int] = attrs.field(factory=OrderedDict)
    """Held adapters no request runs on, least recently used first: the eviction order.

    Each maps to the logical time it became idle, which placement compares across replicas; an
    adapter a listing brought in is older than anything: its stamp is 0 or below, counting down from
    ``front`` so that the stamps rise along the list (placement reads any of them as 0).
    """
    front: int = 0
    """The stamp of the last adapter a listing put at the front of ``idle``."""
    cold: Key | None = None
    """Its key in [place]'s index of cold loads (``_cold_key``); None while not in it."""
    dirty: bool = False
    """Something its cold key reads changed since ``cold`` was computed: it waits in ``_dirty``."""
    loading: dict[str, Load] = attrs.field(factory=dict)
    unloading: dict[str, Unload] = attrs.field(factory=dict)
    listing: Listing | None = None
    dropped_while_listing: set[str] = attrs.field(factory=set)
    """Adapters dropped while ``listing`` was out, so that an older listing does not bring them back."""
    met: bool = False
    removed: bool = False
    outstanding: int = 0
    """Issued operations not yet answered; a removed replica is kept until they are."""
    in_flight: int = 0
    """This router's requests on the replica that have not ended (waiting or granted)."""
    served: int = 0
    """Requests this router has sent to the replica, ever: placement's first tie-break."""
    granted: int = 0
    """This router's requests granted on the replica and not yet released: on its engine, running or
    in the engine's own queue ([cap])."""
    queue: Queue | None = None
    failures: int = 0
    """Failures in a row ([health]); a success sets it back to 0."""
    avoid_until: float = 0.0
    """Placement avoids the replica while the clock is below this."""
    named: frozenset[str] = frozenset()
    """Adapters the engine last said have requests on it, any router's ([reading]): never idle."""
    listed_since_reading: bool = False
    """A listing of it was received after its last reading: a failed read ends it ([read-failed])."""
    read: Read | None = None
    """Its engine's read in flight ([read]): one at a time."""
    sampled: tuple[int, int] | None = None
    """(running, waiting): its engine's requests as its last reading that counted them said ([load])."""
    others: int = 0
    """Other routers' requests on its engine, as its last reading showed them: the reading's count
    less this router's own when the read went out ([load])."""
    read_served: int = 0
    """Its ``served`` when the read of its last reading went out."""
    seqs: int | None = None
    """Requests its engine runs at once, as a reading showed it (running, when some waited) ([load])."""
    ran: int = 0
    """The most requests a reading showed it running: it runs at least that many at once ([load])."""
    calm: int = 0
    """The most load a reading found on it with none waiting ([load]): more may fill it ([read])."""
    max_loras: int | None = None
    """Distinct adapters one batch of its engine may use (vLLM's ``--max-loras``), None unknown ([cap])."""
    names_adapters: bool = False
    """Its engine's last answered read named what runs there: it is read before a cold load with no
    free slot ([read])."""
    foreign: bool = False
    """Its last reading named an adapter no request of this router ran on there: another router's
    ([reading], [read])."""
    shared_until: float = -math.inf
    """A reading named another router's adapter there (one this router neither holds, loads nor
    unloads) ``listing_interval`` before this time: until then it is listed every ``shared_interval``
    ([time])."""
    settle: bool = False
    """It holds more than its line since a load landed, and unloads the excess when the read in flight
    is answered ([settle])."""
    base: int = 0
    """Its count (held and loading) once its last listing was applied, or when it was added ([share])."""
    unseen: int = 0
    """Adapters it held that the engine lost since then, not by this router's unload ([share])."""


@attrs.frozen(kw_only=True)
class Settings:
    """The machine's settings, as ``AdapterStateMachine`` takes them."""

    listing_interval: float
    headroom: int | None
    concurrency: int | None
    overflow: int
    half_life: int
    backoff: float
    max_backoff: float
    refusal: float
    routers: int
    read_engine: bool
    shared_interval: float | None

    @classmethod
    def checked(
        cls,
        *,
        listing_interval: float,
        headroom: int | None,
        concurrency: int | None,
        overflow: int,
        half_life: int,
        backoff: float,
        max_backoff: float,
        refusal: float,
        routers: int,
        read_engine: bool,
        shared_interval: float | None,
    ) -> Settings:
        """The settings, each of its kind (SPEC.md §1.4); else the first wrong one's InvalidValueError."""
        for name, seconds in (
            ("listing_interval", listing_interval),
            ("backoff", backoff),
            ("max_backoff", max_backoff),
            ("refusal", refusal),
        ):
            if not (is_number(seconds) and 0 < seconds < math.inf):
                raise invalid(name, seconds, f"{name} must be a positive number of seconds")
        if headroom is not None and (type(headroom) is not int or headroom < 0):
            raise invalid("headroom", headroom, "headroom must be an int of at least 0, or None")
        if concurrency is not None and (type(concurrency) is not int or concurrency < 1):
            raise invalid("concurrency", concurrency, "concurrency must be an int of at least 1, or None")
        if type(overflow) is not int or overflow < 0:
            raise invalid("overflow", overflow, "overflow must be an int of at least 0")
        if type(half_life) is not int or half_life < 1:
            raise invalid("half_life", half_life, "half_life must be an int of at least 1")
        if type(routers) is not int or routers < 1:
            raise invalid("routers", routers, "routers must be an int of at least 1")
        if type(read_engine) is not bool:
            raise invalid("read_engine", read_engine, "read_engine must be a bool")
        if shared_interval is not None and not (
            is_number(shared_interval) and 0 < shared_interval < math.inf
        ):
            raise invalid(
                "shared_interval",
                shared_interval,
                "shared_interval must be a positive number of seconds, or None",
            )
        return cls(
            listing_interval=float(listing_interval),
            headroom=headroom,
            concurrency=concurrency,
            overflow=overflow,
            half_life=half_life,
            backoff=float(backoff),
            max_backoff=float(max_backoff),
            refusal=float(refusal),
            routers=routers,
            read_engine=read_engine,
            shared_interval=None if shared_interval is None else float(shared_interval),
        )


@attrs.define(eq=False)
class Counts:
    """What ``statistics()`` counts from the start: grants by how, loads and evictions by (replica,
    adapter), failures by fault."""

    hits: int = 0
    joined: int = 0
    loaded: int = 0
    failures: dict[str, int] = attrs.Factory(dict)
    loads: dict[tuple[str, str], int] = attrs.Factory(dict)
    evictions: dict[tuple[str, str], int] = attrs.Factory(dict)


NOWHERE: dict[str, Replica] = {}
"""The replicas of an adapter none holds: what a look-up in the machine's ``_where`` gives for it.
Never written."""

__all__ = [
    "NOWHERE",
    "Counts",
    "Held",
    "Listing",
    "Load",
    "Operation",
    "Parked",
    "Queue",
    "Read",
    "Replica",
    "Route",
    "Settings",
    "Unload",
    "Wait",
]

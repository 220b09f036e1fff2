"""The shell: runs the machine's commands over HTTP and turns the answers back into events.

Every decision is the machine's. This module only makes calls, waits, keeps time and logs. Every input
reaches the machine through ``Fleet._send``, which also carries out what the machine answers; the
shortcuts are ``AdapterStateMachine.hit`` and ``place_hit``, a warm request's path, which has no
command to carry out, and ``release``, whose commands (rarely any) are carried out the same way.
``Fleet.route`` sends ``Routed`` and the machine places the request (reading
an engine first when it wants to, [read]); when a replica fails before the lease is granted, the
request is routed again without it. A retry of a request the router forwarded (``route(after=...)``)
carries the replicas it tried and those that answered it with a server error, for [blame].

It is written on anyio, which runs natively on trio and on asyncio: one ``Fleet`` serves both, and
keeps trio's rule for a hit (a checkpoint) when it finds itself under trio.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
from collections.abc import Awaitable, Callable, Coroutine, Generator, Iterable, Mapping
from types import MappingProxyType, TracebackType
from typing import Any, Protocol, Self

import anyio
import anyio.abc
import httpx

from lorafleet import (
    DEFAULT_BACKOFF,
    DEFAULT_MAX_BACKOFF,
    DEFAULT_REFUSAL,
    FLEET_DEFAULTS,
    AdapterChanged,
    AdapterDismissed,
    AdapterMissing,
    AdapterPinned,
    AdapterStateMachine,
    AdapterUnpinned,
    Assign,
    Cancelled,
    Command,
    Event,
    Fail,
    Fault,
    Grant,
    How,
    IssueLoad,
    IssueUnload,
    LimitSet,
    ListingFailed,
    ListingReceived,
    LoadFinished,
    MarkMet,
    Placed,
    ReadEngine,
    Reading,
    ReadingFailed,
    ReadingReceived,
    ReadListing,
    Refusal,
    RefusalForgotten,
    Released,
    ReplicaAdded,
    ReplicaFailed,
    ReplicasRemoved,
    ReplicaStatistics,
    Requested,
    Routed,
    ServedElsewhere,
    StandingBy,
    Statistics,
    TimeAdvanced,
    UnloadFinished,
    UsageError,
    View,
    vllm,
)

from ._adapter_counts import AdapterStatistics, Tallies
from ._http import CutShortError, fetch
from ._metrics import ENGINE_READS
from ._records import LoadFailure, Records, ReplicaFailure
from ._resolve import AdapterSource, Resolver, resolver
from ._types import (
    AdapterError,
    EnteredTwiceError,
    FleetClosedError,
    FleetError,
    LoadError,
    OutsideBlockError,
    Replica,
    ReplicaChanges,
    ReplicaError,
    _invalid,
)

log = logging.getLogger("lorafleet")

LOAD_TIMEOUT = 120.0
"""An adapter is tens to hundreds of MB read from local disk: one taking minutes is a replica in trouble."""
LISTING_TIMEOUT = 5.0
LISTING_INTERVAL = 30.0
KEEPALIVE_EXPIRY = 4.0
"""Seconds an idle connection to a replica is kept for reuse: less than vLLM's 5 (its
``VLLM_HTTP_TIMEOUT_KEEP_ALIVE``), as a request sent on a connection the server is closing fails
without an answer. httpx's own default is 5 s, racing the server's close."""
HEADROOM: int = FLEET_DEFAULTS["headroom"]
"""How far over its limit a replica may go when all its adapters are in use ([cap]): the core's
``FLEET_DEFAULTS``, measured in sim/grid.md (``lorafleet simulate --grid``)."""
ATTEMPTS = 3
"""Replicas ``Fleet.route`` tries for one request (ModelMesh: at most 3 failures per request)."""

_HIT = How.HIT
_HELD = Placed.HELD
_NO_PINS: Mapping[str, int] = MappingProxyType({})


class _Waiter:
    """One request that was not a hit: the event it waits on, and what it gets."""

    __slots__ = ("assigned", "closed", "event", "failed", "how", "replica", "timeout")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.how: How | None = None
        self.failed: Fail | None = None
        self.timeout: float | None = None
        self.closed = False
        self.assigned: Assign | None = None
        """Where the machine sent a routed request, once it did, and that replica."""
        self.replica: Replica | None = None


class _Call:
    """One call out to a replica's server, until its answer is fed to the machine."""

    __slots__ = ("abandoned", "command", "replica", "scope")

    def __init__(self, command: IssueLoad | IssueUnload | ReadListing | ReadEngine, replica: Replica) -> None:
        self.command = command
        self.replica = replica
        self.scope = anyio.CancelScope()
        self.abandoned = False
        """Its answer was given up on (the replica moved to another server) and reported already."""


class FleetMetrics(Protocol):
    """What a fleet gives its metrics: itself, to read whenever its counts are wanted, and load times."""

    def watch(self, fleet: Fleet) -> None:
        """The fleet to read (``statistics()``, ``placements()``) when counts are wanted.

        ``Fleet()`` calls it.
        """

    def load_took(self, model: str, seconds: float) -> None:
        """A load on a replica of ``model`` was answered (or failed, or timed out) after ``seconds``."""


class Fleet:
    """Which vLLM replica holds which LoRA adapter, over HTTP: a router's one object for it.

    Use it as ``async with Fleet(...) as fleet``, under trio or asyncio: the block owns the background
    work (calls to replicas, loads that outlive the request that started them, the listing schedule),
    and leaving it ends that work and fails the requests still waiting with ``FleetClosedError``. An
    exception from the block comes out as itself.

    Args:
        client: the httpx client for calls to replicas; the fleet makes and closes its own when None.
        load_timeout: seconds one load (or unload) may take.
        listing_timeout: seconds one read of a replica's listing may take.
        listing_interval: seconds between two readings of a replica's listing.
        metrics: exports the fleet's counts and load latency (see ``PrometheusMetrics``).
        replicas: replicas to use from the start: entering the fleet reads their listings.
        adapters: where ``route`` finds an adapter's path by its name (see ``AdapterSource``): a
            mapping of names to paths, a folder with one folder per adapter, or a callable.
        pins: adapter name to the number of replicas to keep it loaded on, from the start (``pin``).
        headroom: how many adapters past its limit a replica may go when every adapter it holds is
            in use; at that cap a cold request waits for room, or goes elsewhere. None: no cap.
        concurrency: the requests one replica runs at once (vLLM's ``--max-num-seqs``): ``route``
            sends a request for a held adapter elsewhere once its holder's engine has more than this
            (this fleet's requests and, as read, the others'), so a hot adapter gets a second copy
            instead of a queue. None: learned from the engines' ``/metrics`` (a reading that shows
            requests waiting), when ``read_engine`` is on.
        attempts: how many replicas ``route`` tries for one request, its retries (``after``) included.
        backoff, max_backoff: seconds placement avoids a replica after a failure, doubling with each
            failure in a row up to ``max_backoff``.
        refusal: seconds an adapter the engine refused as the adapter's fault is refused at once,
            without a call.
        read_engine: read the engines' ``/metrics`` when the machine asks ([read]): which adapters
            have requests there from any router (``vllm:lora_requests_info``), so that none of them
            is evicted, and how many requests run and wait (``vllm:num_requests_running`` and
            ``_waiting``), so that placement sees every router's load ([load]). After each listing,
            when a load landed over the line where another router's requests ran, before a cold
            request that would evict first there, when a request ends on an adapter the last reading
            named while requests wait at the cap, and now and then as requests are placed (``reading``
            says what the last reads said). One read at a time per replica, bounded by
            ``listing_timeout``. False: listings only, and no load but this fleet's own.
        routers: how many routers (fleets, in any process) share these replicas: each fills at most
            its share of the free slots a replica's last listing left (the core's [share];
            docs/routers.md). 1: a router alone.
        shared_interval: seconds between two listings of a replica another router works on (a
            reading named an adapter there that this fleet neither holds, loads nor unloads), for a
            listing interval after that reading ([time]): what the other routers load and unload
            there is seen this soon. None: every replica every ``listing_interval``.

    Raises:
        InvalidValueError: a timeout or the interval is not a positive number of seconds, or another
            argument is not what it must be (a pin that ``adapters`` does not resolve...).
    """

    def __init__(
        self,
        *,
        client: httpx.AsyncClient | None = None,
        load_timeout: float = LOAD_TIMEOUT,
        listing_timeout: float = LISTING_TIMEOUT,
        listing_interval: float = LISTING_INTERVAL,
        metrics: FleetMetrics | None = None,
        replicas: Iterable[Replica] = (),
        adapters: AdapterSource | None = None,
        pins: Mapping[str, int] = _NO_PINS,
        headroom: int | None = HEADROOM,
        concurrency: int | None = None,
        attempts: int = ATTEMPTS,
        backoff: float = DEFAULT_BACKOFF,
        max_backoff: float = DEFAULT_MAX_BACKOFF,
        refusal: float = DEFAULT_REFUSAL,
        read_engine: bool = FLEET_DEFAULTS["read_engine"],
        routers: int = 1,
        shared_interval: float | None = FLEET_DEFAULTS["shared_interval"],
    ) -> None:
        for name, value in (
            ("load_timeout", load_timeout),
            ("listing_timeout", listing_timeout),
            ("listing_interval", listing_interval),
        ):
            if type(value) not in (int, float) or not 0 < value < math.inf:
                raise _invalid(name, value, f"{name} must be a positive number of seconds")
        if type(attempts) is not int or attempts < 1:
            raise _invalid("attempts", attempts, "attempts must be an int of at least 1")
        self._machine = AdapterStateMachine(
            listing_interval=listing_interval,
            headroom=headroom,
            concurrency=concurrency,
            backoff=backoff,
            max_backoff=max_backoff,
            refusal=refusal,
            routers=routers,
            read_engine=read_engine,
            shared_interval=shared_interval,
        )
        self._first = tuple(replicas)
        for replica in self._first:
            if not isinstance(replica, Replica):
                raise _invalid("replicas", replica, "replicas must be Replica values")
        self._known: Mapping[str, str] | None = None
        """Adapter names to paths, looked in first; None when the fleet has no adapters."""
        self._resolve: Resolver | None = None
        """For names not in ``_known``: the folder or the router's callable."""
        self._unknown = ""
        """Why a name the adapters do not have fails."""
        if adapters is not None:
            self._known, self._resolve, self._unknown = resolver(adapters)
        self._first_pins = self._resolve_pins(pins)
        self._attempts = attempts
        self._tallies = Tallies()  # per-adapter counts (adapter_statistics, PrometheusMetrics)
        self._records = Records()  # what failed last, per replica and per adapter (failure, load_failure)
        self._standing_by = False
        self._warming: set[str] = set()
        """The adapters ``warm`` pinned whose end the log has not said yet (the machine lifts the pin)."""
        self._placed = dict.fromkeys(Placed, 0)
        """Placements ``route`` acted on, by what the request found there."""
        self._engine_reads = dict.fromkeys(ENGINE_READS, 0)
        """Reads of the engines, by how they ended (``engine_reads``)."""
        self._leased: set[int] = set()
        """Tickets of routed leases granted and not released: the fleet releases them when it closes."""
        self._orphans: list[int] = []
        """Tickets of routed leases garbage collected unreleased, for the timer task to release."""
        self._poke: Callable[[], None] | None = None
        self._client = client
        self._own_client = client is None
        self._load_timeout = load_timeout
        self._listing_timeout = listing_timeout
        self._metrics = metrics
        self._replicas: dict[str, Replica] = {}
        self._waiters: dict[int, _Waiter] = {}
        self._unmet: dict[str, anyio.Event] = {}
        self._calls: dict[str, set[_Call]] = {}
        """Calls out, by replica id, whether the replica is still in use or not."""
        self._tasks: anyio.abc.TaskGroup | None = None
        self._wake: anyio.Event | None = None
        self._entered = False
        self._open = False
        self._checkpoint: Callable[[], Awaitable[None]] | None = None
        """What every acquire awaits first, even a hit: trio's checkpoint under trio, else nothing."""
        if metrics is not None:
            metrics.watch(self)

    def _resolve_pins(self, pins: Mapping[str, int]) -> dict[str, tuple[str, int]]:
        if not isinstance(pins, Mapping):
            raise _invalid("pins", pins, "pins must be a mapping of adapter names to copies")
        resolved = {}
        for name, copies in pins.items():
            if type(copies) is not int or copies < 1:
                raise _invalid("pins", {name: copies}, "a pin's copies must be an int of at least 1")
            if type(name) is not str or not name:
                raise _invalid("pins", name, "a pinned adapter's name must be a non-empty str")
            try:
                path = self._path_of(name)
            except (UsageError, AdapterError):
                raise _invalid("pins", name, "a pinned adapter must be among the fleet's adapters") from None
            resolved[name] = (path, copies)
        return resolved

    # -- lifetime ------------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._entered:
            raise EnteredTwiceError("a Fleet is entered once: make a new Fleet for another 'async with'")
        self._entered = True
        self._checkpoint = _trio_checkpoint()
        if self._client is None:
            self._client = httpx.AsyncClient(limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY))
        try:
            tasks = anyio.create_task_group()
            await tasks.__aenter__()
        except BaseException:
            await self._close_client()
            raise
        self._tasks = tasks
        self._wake = anyio.Event()
        self._open = True
        self._poke = _poker(self._wake_up)
        tasks.start_soon(self._keep_time)
        try:
            if self._first:
                await self.sync_unknown(self._first)
            for name, (path, copies) in self._first_pins.items():
                self._send(AdapterPinned(adapter=name, path=path, copies=copies))
        except BaseException as exc:
            await self.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._close()
        tasks = self._tasks
        assert tasks is not None
        tasks.cancel_scope.cancel()
        try:
            # The block's exception is not handed to the task group, which would wrap it in an
            # ExceptionGroup: the group is the fleet's own business (trio's advice for a library's
            # nursery). Its tasks end by the cancellation alone; if one failed, that is a bug here,
            # and the group says so.
            await tasks.__aexit__(None, None, None)
        finally:
            await self._close_client()

    async def _close_client(self) -> None:
        if self._own_client and self._client is not None:
            with anyio.CancelScope(shield=True):
                await self._client.aclose()

    def _close(self) -> None:
        self._open = False
        waiters, self._waiters = self._waiters, {}
        for waiter in waiters.values():
            waiter.closed = True
            waiter.event.set()
        unmet, self._unmet = self._unmet, {}
        for event in unmet.values():
            event.set()
        # Routed leases still held end with the fleet; their holders' release() then does nothing.
        leased, self._leased = self._leased, set()
        for ticket in sorted(leased):
            self._send(Released(ticket=ticket))
        self._orphans.clear()
        self._poke = None

    def _check_open(self) -> None:
        if not self._open:
            raise self._not_open()

    def _not_open(self) -> Exception:
        if self._entered:
            return FleetClosedError("the fleet is closed: it takes no more requests")
        return OutsideBlockError("the fleet is not open yet: use it inside 'async with Fleet() as fleet'")

    # -- what a router calls -------------------------------------------------------------------

    def acquire(self, replica: Replica, adapter: str, path: str, *, after: Lease | None = None) -> Lease:
        """Hold ``adapter`` (stored at ``path``) on ``replica`` for an ``async with`` block.

        The block gets the ``Lease`` once the adapter is there, loading it first if need be; the
        adapter is never unloaded while the block runs. Cancelling the request while it waits gets it
        no lease, and the load goes on for the others. ``after``: the lease of this request's previous
        attempt, as for ``route`` (the replica is yours to choose: none is excluded).

        Raises (when the block is entered):
            AdapterError: the adapter is wrong; do not retry it on another replica.
            ReplicaError: this replica failed; another may serve the request.
            FleetClosedError: the fleet is closed, or closed while the request waited.
            ReplicaConflictError: ``replica``'s id is known here with another model and the same URL.
            InvalidValueError: ``adapter`` or ``path`` is not a non-empty str, or ``after`` is not
                a lease of this fleet.
            OutsideBlockError: the fleet was never entered.
            EnteredTwiceError: the lease was entered before.
        """
        lease = Lease(self, replica, adapter, path)
        lease._after = after
        return lease

    def route(
        self, adapter: str, *, model: str | None = None, path: str | None = None, after: Lease | None = None
    ) -> Route:
        """A lease on ``adapter`` wherever placement puts it: the replica, loaded if need be.

        Await it (``lease = await fleet.route("sql")``) and call ``lease.release()`` when the request
        is done, or hold it for an ``async with`` block. The path comes from the fleet's ``adapters``,
        unless the caller, having looked it up already, gives it as ``path``.
        Placement chooses among the replicas in use (of ``model``, when given); when a replica fails
        before the lease is granted, the next placement is tried, at most ``attempts`` replicas and
        never one twice. An adapter's fault ends the request at once.

        ``after`` makes it a retry of the request whose previous attempt was that lease (released or
        held): placement passes over every replica the request tried (but one that answered that it
        had lost the adapter, where the adapter is loaded again), ``attempts`` counting them all, and
        the lease remembers those that answered the request with a server error
        (``Lease.server_error``): released after a good answer, it makes each of them a failure
        ([blame]).

        Raises (when awaited or entered):
            AdapterError: the adapter is wrong (or not among the fleet's adapters: then no replica
                was asked, and ``replica`` is None); no replica would take it.
            ReplicaError: no healthy replica was left to try; ``tried`` holds each one's error.
            FleetClosedError: the fleet is closed, or closed while the request waited.
            InvalidValueError: ``adapter``, ``model`` or ``path`` is not a non-empty str (``model``
                and ``path`` may be None), or ``after`` is not a lease of this fleet.
            UsageError: no ``path``, and the fleet has no ``adapters`` to find it in.
            OutsideBlockError: the fleet was never entered.
            EnteredTwiceError: the route was awaited or entered before.
        """
        return Route(self, adapter, model, after, path)

    async def prewarm(self, adapters: Iterable[str], *, model: str | None = None) -> dict[str, LoadError]:
        """Load each of ``adapters`` where placement puts it, all at once, before taking traffic.

        Returns once each is loaded or has failed: the adapters that failed, with their errors. Each is
        tried once; ``warm`` keeps at one until it lands (its replicas may not be up yet).

        Raises:
            FleetClosedError: the fleet is closed, or closed meanwhile.
            InvalidValueError: a name is not a non-empty str.
            UsageError: the fleet has no ``adapters``.
            OutsideBlockError: the fleet was never entered.
        """
        failed: dict[str, LoadError] = {}
        closed: list[FleetError] = []

        async def load(name: str) -> None:
            try:
                async with self.route(name, model=model):
                    pass
            except LoadError as exc:
                failed[name] = exc
            except FleetError as exc:
                closed.append(exc)

        self._check_open()
        if self._known is None:
            raise UsageError("prewarming by name needs the fleet's adapters: Fleet(adapters=...)")
        names = list(dict.fromkeys(adapters))
        for name in names:  # misuse is raised here, not from inside the task group
            if type(name) is not str or not name:
                raise _invalid("adapters", name, "adapter names must be non-empty strs")
        async with anyio.create_task_group() as tasks:
            for name in names:
                tasks.start_soon(load, name)
        if closed:
            raise FleetClosedError("the fleet was closed while adapters were being prewarmed")
        return failed

    def warm(self, adapter: str, *, model: str | None = None) -> None:
        """Load ``adapter`` on one replica (of ``model``, if given) as soon as one takes it, however
        long that takes: ``prewarm``, kept at until it lands. Returns at once.

        Meanwhile it is pinned to one copy, so the machine's [pin] does the trying: a load where
        placement finds a free slot or an idle adapter to evict, again when a replica is added and
        listed, comes back from its backoff, or when the engines' refusal of the adapter runs out or is
        forgotten. Once a copy is held the pin is lifted, and the adapter is evicted in its turn like
        any other. An adapter held already, pinned, or being warmed is left as it is; pinning or
        unpinning it meanwhile ends its warming (``warming`` says which are still at it).

        Raises:
            AdapterError: ``adapter`` is not among the fleet's adapters.
            InvalidValueError: ``adapter`` or ``model`` is not a non-empty str.
            FleetClosedError, OutsideBlockError: the fleet is not open.
        """
        self._check_open()
        path = self._path_of(adapter)
        if model is not None and (type(model) is not str or not model):
            raise _invalid("model", model, "model must be a non-empty str or None")
        self._send(AdapterPinned(adapter=adapter, path=path, copies=1, model=model, until_held=True))
        if adapter in self.warming and adapter not in self._warming:
            self._warming.add(adapter)
            log.info("adapter %r is loaded on a replica as soon as one takes it", adapter)

    @property
    def warming(self) -> frozenset[str]:
        """The adapters ``warm`` is still loading: no copy of them is held yet."""
        return self._machine.statistics().warming

    def _warmed(self, rid: str) -> None:
        """A load on ``rid`` landed, or its listing was read: say which warmings the machine ended."""
        if not self._warming:
            return
        stats = self._machine.replica_statistics(rid)
        for adapter in sorted(self._warming - self.warming):
            self._warming.discard(adapter)
            if stats is not None and adapter in stats.held:
                log.info("adapter %r is loaded on %s: warmed", adapter, rid)

    def pin(self, adapter: str, copies: int = 1, model: str | None = None) -> None:
        """Keep ``adapter`` loaded on ``copies`` replicas (of ``model``, if given), never evicted.

        Placement chooses the replicas, and loads it on them as room allows; a replica lost or
        failing is replaced. Pinning it again changes the copies or the model.

        Raises:
            AdapterError: ``adapter`` is not among the fleet's adapters.
            InvalidValueError: ``copies`` is not an int of at least 1, or ``model`` not a non-empty str.
            FleetClosedError, OutsideBlockError: the fleet is not open.
        """
        self._check_open()
        path = self._path_of(adapter)
        self._send(AdapterPinned(adapter=adapter, path=path, copies=copies, model=model))
        self._warming.discard(adapter)  # the caller's pin now, never lifted by the machine

    def unpin(self, adapter: str) -> None:
        """``adapter`` may be evicted again, once no request runs on it. Unknown names change nothing."""
        self._check_open()
        self._warming.discard(adapter)
        self._send(AdapterUnpinned(adapter=adapter))

    def forget_refusal(self, adapter: str | None = None) -> None:
        """The engines may take ``adapter`` now (its files were fixed): its next request asks one again
        rather than fail at once, and a pin of it loads. None: every adapter the engines refused.

        Raises:
            InvalidValueError: ``adapter`` is not a non-empty str or None.
        """
        self._check_open()
        self._send(RefusalForgotten(adapter=adapter))

    def adapter_changed(self, adapter: str) -> None:
        """The files behind ``adapter`` changed ([renew]): no request is granted a copy loaded before.

        Idle copies are unloaded now, copies in use once their last request ends; requests for it wait
        for that and load the new files. Its refusal is forgotten.

        Raises:
            InvalidValueError: ``adapter`` is not a non-empty str.
        """
        self._check_open()
        self._send(AdapterChanged(adapter=adapter))

    def dismiss(self, replica: str, adapter: str) -> None:
        """Unload ``adapter`` from ``replica`` now, an operator's hand ([dismiss]): only where it is idle.

        Raises:
            NotIdleError: it is not idle there (a request may run on it, or it is pinned, loading or
                going); nothing changed. Its ``reason`` says which.
            UnknownReplicaError: ``replica`` is not in use.
            InvalidValueError: ``adapter`` is not a non-empty str.
        """
        self._check_open()
        self._send(AdapterDismissed(replica=replica, adapter=adapter))

    async def sync_unknown(self, replicas: Iterable[Replica]) -> None:
        """Read the listings of the replicas not met yet, all at once, and wait for them.

        A listing that fails still counts: its replica is taken to hold what this fleet loaded there.

        Raises:
            FleetClosedError: the fleet is closed, or closed while this waited.
            ReplicaConflictError: a replica's id is known here with another model and the same URL.
            OutsideBlockError: the fleet was never entered.
        """
        self._check_open()
        ids = []
        for replica in replicas:
            self._declare(replica)
            ids.append(replica.id)
        for rid in ids:
            # Again after each wait: a replica declared anew meanwhile (another URL) has a new listing.
            while (met := self._unmet.get(rid)) is not None:
                await met.wait()
        self._check_open()

    def view(self, replicas: Iterable[Replica], adapter: str) -> View:
        """Which of ``replicas`` hold ``adapter`` (held or loading) and which have room."""
        return self._machine.view([r.id for r in replicas], adapter)

    def forget(self, replica: Replica, adapter: str) -> None:
        """The replica said it does not have ``adapter``: stop holding it there, in use or not.

        From inside an ``acquire`` block, ``lease.adapter_missing()`` is better: it tells the copy the
        request ran on from one loaded since, which this cannot.
        """
        self._send(AdapterMissing(replica=replica.id, adapter=adapter))

    def replica_failed(self, replica: Replica | str, message: str = "") -> None:
        """The replica gave a request no answer (refused, reset, timed out): placement avoids it for a
        while ([health]), as after a failed load, until a listing or a load there succeeds.

        For traffic that holds no lease, such as a base model's requests; from inside a lease's block,
        ``lease.replica_failed()`` says the same. A replica the fleet does not use is ignored.
        """
        rid = replica if isinstance(replica, str) else replica.id
        log.warning("replica %s gave a request no answer: %s", rid, message)
        known = self._replicas.get(rid) if isinstance(rid, str) else None
        if known is not None:
            self._records.failed(known, message or "it gave a request no answer", anyio.current_time())
        self._send(ReplicaFailed(replica=rid, message=message))

    def blame(self, replica: Replica | str, failed: Iterable[Replica | str] = ()) -> Fault:
        """Whose fault it is that ``replica`` answered a request with a server error (a 5xx), when the
        replicas ``failed`` answered that request so before ([blame]).

        ``Fault.REQUEST`` when one of ``failed`` is another replica: the request makes engines fail;
        answer it with the engine's error and try no more replicas. ``Fault.REPLICA`` otherwise: try
        another replica, and once one serves the request, call ``served_elsewhere``. Nothing is
        reported. For traffic that holds no lease, such as a base model's; a lease has
        ``Lease.server_error``.
        """
        return self._machine.blame(_id_of(replica), [_id_of(r) for r in failed])

    def served_elsewhere(self, replica: Replica | str, failed: Iterable[Replica | str]) -> None:
        """``replica`` served a request that the replicas ``failed`` had answered with a server error:
        each of them failed ([blame]), and placement avoids it for a while, as after a failed load.

        For traffic that holds no lease; a retry's lease (``route(after=...)``) says it when released.
        Replicas the fleet does not use are ignored.

        Raises:
            InvalidValueError: a replica id is not a non-empty str, or ``failed`` is a str.
        """
        if isinstance(failed, str):
            raise _invalid("failed", failed, "failed must be a list of replica ids, not one str")
        self._served_elsewhere(_id_of(replica), tuple(_id_of(r) for r in failed))

    def _served_elsewhere(self, rid: str, failed: tuple[str, ...]) -> None:
        blamed = sorted(set(failed) - {rid})
        if blamed:
            log.warning(
                "%s answered a request with a server error that %s then served: avoided for a while",
                ", ".join(f"replica {name}" for name in blamed),
                rid,
            )
            for name in blamed:
                known = self._replicas.get(name)
                if known is not None:
                    said = f"it answered a request with a server error that {rid} then served"
                    self._records.failed(known, said, anyio.current_time())
        self._send(ServedElsewhere(replica=rid, failed=failed))

    def remove(self, replicas: Iterable[Replica | str]) -> None:
        """Stop using these replicas: requests waiting on them fail with ``ReplicaError``.

        Using one again adds it again, and its listing is read afresh.
        """
        ids = tuple(r if isinstance(r, str) else r.id for r in replicas)
        for rid in ids:
            self._drop_replica(rid)
        self._send(ReplicasRemoved(replicas=ids))

    def keep(self, replicas: Iterable[Replica]) -> None:
        """Stop using every replica not among ``replicas``."""
        wanted = {r.id for r in replicas}
        self.remove(sorted(rid for rid in self._replicas if rid not in wanted))

    def set_replicas(self, replicas: Iterable[Replica]) -> ReplicaChanges:
        """Use exactly ``replicas`` from now on; as often as they change, with the whole set each time.

        A replica the fleet uses already with the same URL and key keeps all it knows (a new limit
        applies from its next load). A new one, or one whose URL or key changed (another server, as
        far as anyone knows), has its listing and its engine read before requests are placed there.
        One no longer named is removed: requests running there end and release as ever, and nothing
        is unloaded for its sake; requests waiting there fail with ``ReplicaError`` (``route`` places
        them elsewhere). Calling it again with the same set changes nothing.

        Returns:
            What changed, by replica id.

        Raises:
            InvalidValueError: an item is not a ``Replica``, or two have the same id.
            ReplicaConflictError: an id is known here with another model and the same URL.
            FleetClosedError, OutsideBlockError: the fleet is not open.
        """
        self._check_open()
        wanted: dict[str, Replica] = {}
        for replica in replicas:
            if not isinstance(replica, Replica):
                raise _invalid("replicas", replica, "replicas must be Replica values")
            if replica.id in wanted:
                raise _invalid("replicas", replica.id, "two replicas have the same id")
            wanted[replica.id] = replica
        gone = sorted(rid for rid in self._replicas if rid not in wanted)
        added: list[str] = []
        changed: list[str] = []
        for rid, replica in wanted.items():
            known = self._replicas.get(rid)
            if known is None:
                added.append(rid)
            elif (known.url, known.api_key) != (replica.url, replica.api_key):
                # Another server, as far as anyone knows: read afresh, as a replica never met.
                self.remove([rid])
                changed.append(rid)
            elif known.limit != replica.limit:
                changed.append(rid)
        if gone:
            self.remove(gone)
        for replica in wanted.values():
            self._declare(replica)
        return ReplicaChanges(added=tuple(added), removed=tuple(gone), changed=tuple(sorted(changed)))

    def set_limit(self, model: str, limit: int) -> None:
        """Every replica of ``model`` may hold ``limit`` adapters (a lower one applies at the next load).

        Raises:
            InvalidValueError: ``limit`` is not an int of at least 1.
        """
        self._send(LimitSet(model=model, limit=limit))

    def stand_by(self, on: bool = True) -> None:
        """Another router decides for this one, which relays its requests to it (``on``), or no more:
        the machine lists the engines at the listing interval meanwhile, and all at once when this
        router decides again ([standby])."""
        self._send(TimeAdvanced(now=anyio.current_time()))
        self._send(StandingBy(on=on))
        self._standing_by = on
        self._wake_up()  # the listings' due times moved

    @property
    def standing_by(self) -> bool:
        """Whether another router decides for this one (``stand_by``)."""
        return self._standing_by

    def statistics(self) -> Statistics:
        """The machine's frozen snapshot: counts, and what every replica holds with its in-use counts."""
        return self._machine.statistics()

    def place_base(
        self,
        model: str,
        *,
        exclude: Iterable[str] = (),
        load: Mapping[str, float] | None = None,
        turn: int = 0,
        healthy: Iterable[str] = (),
    ) -> Replica | None:
        """The replica a request for the base model ``model`` itself should go to ([place-base]), or
        None: the least busy of its replicas (``load``, the caller's own requests there, added),
        equal ones in turn as ``turn`` moves on; one placement avoids only if it is in ``healthy``.
        ``AdapterStateMachine.place_base`` says the rest."""
        rid = self._machine.place_base(model, exclude=exclude, load=load, turn=turn, healthy=healthy)
        return None if rid is None else self._replicas[rid]

    def replica_statistics(self, replica: str) -> ReplicaStatistics | None:
        """One replica's part of ``statistics()`` (held, in use, in flight, failing), None if not in use."""
        return self._machine.replica_statistics(replica)

    def reading(self, replica: str) -> Reading | None:
        """What the reads of one replica's engine said: who runs there, how busy it is, what it runs
        at once (``lorafleet.Reading``); None when the replica is not in use."""
        return self._machine.reading(replica)

    def demand(self, adapter: str) -> int:
        """The machine's decayed count of requests for ``adapter``, which placement weighs ([demand])."""
        return self._machine.demand(adapter)

    def refusal(self, adapter: str) -> Refusal | None:
        """The engines' refusal of ``adapter`` in force ([refuse]), on the fleet's clock; None when its
        next request asks an engine."""
        self._send(TimeAdvanced(now=anyio.current_time()))  # one run out since the last event is none
        return self._machine.refusal(adapter)

    def placements(self) -> dict[str, int]:
        """How many placements ``route`` acted on, by what the request found (held, free, evict...)."""
        return {placed.value: count for placed, count in self._placed.items()}

    def adapter_statistics(self, top: int | None = None) -> AdapterStatistics:
        """Per-adapter counts: the ``top`` most requested adapters' (all when None), and the rest's sum."""
        return self._tallies.statistics(top)

    def engine_reads(self) -> dict[str, int]:
        """How the reads of the engines' ``/metrics`` ended (see ``read_engine``).

        ``read``: the engine said what runs. ``absent``: it answered without the gauge (older vLLM,
        the Rust frontend), so the replica is read again only after its next listing. ``failed``: no
        usable answer within ``listing_timeout`` (none, an error, a 5xx, a body cut or too long):
        the last reading stands until the read after the next listing.
        """
        return dict(self._engine_reads)

    def failure(self, replica: str) -> ReplicaFailure | None:
        """What ``replica`` failed last, at which URL and when, while that is news: from a failed read
        of its listing until one succeeds (however long the machine's backoff), or after another call
        failed (a load, a forwarded request) until its next good read. None for a replica doing well,
        or not in use. Words for operators: placement never reads them ([health] is the machine's).
        """
        return self._records.replica(replica)

    def load_failures(self) -> Mapping[str, LoadFailure]:
        """Each adapter's last load that failed, on any replica, with the engine's words (an adapter
        no load of which failed is absent). Kept after a later load succeeds: ``at`` says when."""
        return self._records.loads()

    # -- acquiring, for Lease ------------------------------------------------------------------

    def _hit(self, lease: Lease) -> bool:
        """Start ``lease``'s request: True when it is a hit, granted at once (every warm request's path)."""
        if not self._open:
            raise self._not_open()
        if lease.ticket:
            raise EnteredTwiceError("a lease is entered once: call fleet.acquire() for each request")
        if lease._after is not None:
            lease._tried, lease._failed = self._chain(lease._after)
            lease._after = None
        replica = lease.replica
        known = self._replicas.get(replica.id)
        if known is not replica and known != replica:
            self._declare(replica)
        machine = self._machine
        ticket = lease.ticket = machine.next_ticket
        if machine.hit(ticket, replica=replica.id, adapter=lease.adapter):
            lease._how = _HIT
            self._tallies.hit(lease.adapter)
            return True
        return False

    async def _acquire_cold(self, lease: Lease) -> None:
        """The rest of ``acquire`` when it was not a hit: wait for the load, a read, or an unload."""
        replica = lease.replica
        event = Requested(ticket=lease.ticket, replica=replica.id, adapter=lease.adapter, path=lease._path)
        waiter = await self._wait(lease.ticket, event)
        failed = waiter.failed
        if failed is not None:
            kind = AdapterError if failed.fault is Fault.ADAPTER else ReplicaError
            raise kind(replica, lease.adapter, failed.message, timeout=waiter.timeout)
        lease._how = waiter.how

    async def _wait(self, ticket: int, event: Requested | Routed) -> _Waiter:
        """Send ``event`` and wait until the machine grants or fails its request."""
        waiter = self._waiters[ticket] = _Waiter()
        try:
            self._send(event)
        except BaseException:
            del self._waiters[ticket]  # refused: the machine never took the ticket
            raise
        try:
            await waiter.event.wait()
        except BaseException:
            # Cancelled while waiting: the load goes on for the others, and a grant that arrived
            # meanwhile is released by the cancel.
            self._waiters.pop(ticket, None)
            self._send(Cancelled(ticket=ticket))
            raise
        if waiter.closed:
            raise FleetClosedError("the fleet was closed while the request waited for its adapter")
        return waiter

    # -- routing, for Route --------------------------------------------------------------------

    def _path_of(self, adapter: str) -> str:
        """``adapter``'s path from the fleet's adapters.

        Raises:
            AdapterError: the adapters do not have it (no replica is asked).
            InvalidValueError: ``adapter`` is not a non-empty str.
            UsageError: the fleet has no adapters.
        """
        known = self._known
        if known is None:
            raise UsageError("routing by name needs the fleet's adapters: Fleet(adapters=...)")
        if type(adapter) is not str or not adapter:
            raise _invalid("adapter", adapter, "adapter name must be a non-empty str")
        path = known.get(adapter)
        if path is None and self._resolve is not None:
            path = self._resolve(adapter)
        if path is None:
            raise AdapterError(None, adapter, self._unknown)
        return path

    async def _route(self, lease: Route) -> Route:
        """Grant ``lease`` where placement puts it; a hit on a holder placement chose is the fast path."""
        checkpoint = self._checkpoint
        if checkpoint is not None:
            await checkpoint()
        if not self._open:
            raise self._not_open()
        if lease._entered:
            raise EnteredTwiceError("a route is awaited or entered once: call fleet.route() for each request")
        lease._entered = True
        adapter = lease.adapter
        path = lease._given
        if path is None:
            known = self._known
            path = known.get(adapter) if known is not None and type(adapter) is str else None
            if path is None:
                path = self._path_of(adapter)
        elif type(adapter) is not str or not adapter:
            raise _invalid("adapter", adapter, "adapter name must be a non-empty str")
        elif type(path) is not str or not path:
            raise _invalid("path", path, "adapter path must be a non-empty str or None")
        model = lease._model
        if model is not None and (type(model) is not str or not model):
            raise _invalid("model", model, "model must be a non-empty str or None")
        if lease._after is not None:
            lease._tried, lease._failed = self._chain(lease._after)
            lease._after = None
        machine = self._machine
        ticket = machine.next_ticket
        # place_hit excludes nothing: a retry that tried a replica goes through Routed.
        rid = machine.place_hit(ticket, adapter=adapter, model=model) if not lease._tried else None
        if rid is not None:
            lease.replica = self._replicas[rid]
            lease.ticket = ticket
            lease.placed = _HELD
            lease._how = _HIT
            self._placed[_HELD] += 1
            self._leased.add(ticket)
            self._tallies.hit(adapter)
            return lease
        lease._path = path
        with self._tallies.waiting(lease):
            return await self._route_cold(lease)

    async def _route_cold(self, lease: Route) -> Route:
        """The rest of ``_route``: the machine places the request and it waits for a load, a read, an
        unload or room; on a replica's fault, it is routed again without that replica."""
        machine = self._machine
        adapter, model = lease.adapter, lease._model
        tried: list[ReplicaError] = []
        exclude = list(lease._tried)  # a retry's: the replicas its request tried before
        while len(exclude) < self._attempts:
            ticket = lease.ticket = machine.next_ticket
            # The clock rides with the request: a failed replica's backoff may be over by now.
            event = Routed(
                ticket=ticket,
                adapter=adapter,
                path=lease._path,
                model=model,
                exclude=tuple(exclude),
                now=anyio.current_time(),
            )
            waiter = await self._wait(ticket, event)
            assigned = waiter.assigned
            failed = waiter.failed
            replica = waiter.replica
            if assigned is None or replica is None:
                assert failed is not None
                if failed.fault is Fault.ADAPTER:  # refused at once, on no replica
                    raise AdapterError(None, adapter, failed.message)
                break  # no replica left to place it on
            if failed is not None:
                if failed.fault is Fault.ADAPTER:
                    raise AdapterError(replica, adapter, failed.message, timeout=waiter.timeout)
                tried.append(ReplicaError(replica, adapter, failed.message, timeout=waiter.timeout))
                exclude.append(assigned.replica)
                continue
            lease.replica = replica
            lease.placed = assigned.placed
            lease._how = waiter.how
            lease._tried = tuple(exclude)
            self._leased.add(ticket)
            return lease
        raise self._no_replica(adapter, model, tried, lease._tried)

    def _no_replica(
        self, adapter: str, model: str | None, tried: list[ReplicaError], before: tuple[str, ...]
    ) -> ReplicaError:
        of = f" of model {model!r}" if model is not None else ""
        if not tried and before:
            names = ", ".join(repr(rid) for rid in before)
            message = f"no healthy replica{of} left to try: the request tried {names} before"
        elif not tried:
            message = f"no healthy replica{of} to serve it: each is failing, or none is in use"
        else:
            names = ", ".join(repr(error.replica.id) for error in tried if error.replica is not None)
            left = "tried" if len(before) + len(tried) >= self._attempts else "tried, and none left to try"
            message = f"no healthy replica{of} served it ({names} {left}); the last said: {tried[-1].message}"
        return ReplicaError(None, adapter, message, tried=tuple(tried))

    def _chain(self, after: Lease) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """What a retry of ``after``'s request carries ([blame]): the replicas the request tried (to
        pass over; not one that lost the adapter, where it is loaded again) and those that answered it
        with a server error.

        Raises:
            InvalidValueError: ``after`` is not a lease of this fleet.
        """
        if not isinstance(after, Lease) or after._fleet is not self:
            raise _invalid("after", after, "after must be a lease this fleet gave, or None")
        tried, failed = after._tried, after._failed
        if after._how is not None:
            rid = after.replica.id
            if after._said != _MISSING and rid not in tried:
                tried += (rid,)
            if after._said == _SERVER_ERROR and rid not in failed:
                failed += (rid,)
        return tried, failed

    def _served(self, lease: Lease) -> None:
        """A lease ended with a good answer: if replicas answered its request with a server error
        before, it was served elsewhere ([blame])."""
        if lease._failed and lease._said is None and self._open:
            self._served_elsewhere(lease.replica.id, lease._failed)

    def _release_routed(self, ticket: int) -> bool:
        """End a routed lease: False when the fleet had closed and released it then."""
        try:
            self._leased.remove(ticket)
        except KeyError:
            return False
        self._release(ticket)
        return True

    def _release(self, ticket: int) -> None:
        """End a lease: the machine's ``release``, which skips the event where nothing watches events
        go by, and gives no command at all unless the release lets a waiting request in."""
        commands = self._machine.release(ticket)
        if commands:
            self._carry_out(commands)

    def _orphan(self, ticket: int) -> None:
        """A routed lease was garbage collected unreleased: release it soon, from the timer task.

        Called from ``__del__``, which may run in the middle of anything: it only notes the ticket
        and wakes the loop the way signal handlers may.
        """
        poke = self._poke
        if poke is None:
            return
        self._orphans.append(ticket)
        with contextlib.suppress(Exception):  # the loop is ending: closing releases everything
            poke()

    def _wake_up(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _release_orphans(self) -> None:
        orphans = self._orphans
        while orphans:
            ticket = orphans.pop()
            if ticket in self._leased:
                log.debug("released the lease of request %d, garbage collected without release()", ticket)
                self._release_routed(ticket)

    # -- the loop: event in, commands out ------------------------------------------------------

    def _send(self, event: Event, *, timed_out: float | None = None) -> None:
        """Feed ``event`` to the machine and carry out the commands it gives: every input's way in but
        the warm request's (``hit``, ``place_hit``, ``release``).

        Args:
            timed_out: the event answers a call that took longer than this many seconds.
        """
        self._carry_out(self._machine.handle(event), timed_out)

    def _carry_out(self, commands: list[Command], timed_out: float | None = None) -> None:
        """Wake the requests the machine granted or failed, and start the calls it asks for."""
        for command in commands:
            if isinstance(command, Grant | Fail):
                waiter = self._waiters.pop(command.ticket, None)
                if waiter is None:
                    continue  # the fleet closed, and failed the request already
                if isinstance(command, Grant):
                    waiter.how = command.how
                else:
                    waiter.failed = command
                    waiter.timeout = timed_out
                waiter.event.set()
            elif isinstance(command, Assign):
                waiter = self._waiters.get(command.ticket)
                if waiter is not None:
                    waiter.assigned = command
                    waiter.replica = self._replicas[command.replica]
                self._placed[command.placed] += 1
            elif isinstance(command, MarkMet):
                met = self._unmet.pop(command.replica, None)
                if met is not None:
                    met.set()
            elif self._open:
                assert self._tasks is not None
                call = _Call(command, self._replicas[command.replica])
                self._calls.setdefault(command.replica, set()).add(call)
                self._tasks.start_soon(self._make, call)

    def _declare(self, replica: Replica) -> None:
        """Tell the machine of ``replica``: new, or known with another URL, limit or key."""
        rid = replica.id
        known = self._replicas.get(rid)
        if known is not None and known.url == replica.url:
            if (known.model, known.limit) != (replica.model, replica.limit):
                self._send(ReplicaAdded(replica=rid, model=replica.model, limit=replica.limit))
                log.info("replica %s may now hold %d adapters", rid, replica.limit)
            self._replicas[rid] = replica
            return
        if known is not None:
            log.info(
                "replica %s moved from %s to %s: its adapters are read afresh", rid, known.url, replica.url
            )
            self._drop_replica(rid)
            self._send(ReplicasRemoved(replicas=(rid,)))
        self._abandon_calls(rid, replica.url)
        self._replicas[rid] = replica
        self._unmet[rid] = anyio.Event()
        try:
            self._send(TimeAdvanced(now=anyio.current_time()))
            self._send(ReplicaAdded(replica=rid, model=replica.model, limit=replica.limit))
        except BaseException:
            self._drop_replica(rid)
            raise
        assert self._wake is not None
        self._wake.set()  # its next listing may be due before the timer's

    def _abandon_calls(self, rid: str, url: str) -> None:
        """Give up on calls still out to a server that ``rid`` no longer names.

        The machine would wait for their answers before it forgets the old replica, so that a load
        never crosses an unload; but those answers are another server's, and a dead server's may take
        a whole timeout. They are answered now, as failed, and the replica is met afresh.
        """
        for call in list(self._calls.get(rid, ())):
            if call.replica.url != url:
                call.abandoned = True
                call.scope.cancel()
                self._calls[rid].discard(call)
                event = vllm.failure_event(call.command, f"abandoned: replica {rid} moved to {url}")
                self._tallies.answered(call.command, event)
                self._send(event)

    def _replica_failed_on(self, replica: Replica, message: str) -> None:
        """A lease's forwarded request got no answer from ``replica``: its last failure, if it is the
        server the fleet uses under its id."""
        known = self._replicas.get(replica.id)
        if known is not None and known.url == replica.url:
            self._records.failed(known, message or "it gave a request no answer", anyio.current_time())

    def _drop_replica(self, rid: str) -> None:
        # Calls still out hold their own Replica; their answers go to the machine, which ignores them.
        self._replicas.pop(rid, None)
        self._records.forget(rid)
        met = self._unmet.pop(rid, None)
        if met is not None:
            met.set()

    async def _make(self, call: _Call) -> None:
        """Make one call to a replica and feed its answer to the machine."""
        command, replica = call.command, call.replica
        timeout = (
            self._listing_timeout if isinstance(command, ReadListing | ReadEngine) else self._load_timeout
        )
        request = vllm.http_request(command, replica.api_key)
        if isinstance(command, IssueLoad):
            log.debug("loading adapter %r on %s from %s", command.adapter, replica.id, command.path)
        assert self._client is not None
        started = anyio.current_time()
        timed_out = None
        with call.scope:
            try:
                with anyio.fail_after(timeout):
                    status, body, truncated = await fetch(self._client, replica.url, request, timeout)
                event = vllm.answer_event(command, status, body, truncated=truncated)
            except (TimeoutError, httpx.TimeoutException):
                timed_out = timeout
                event = vllm.failure_event(command, f"no answer from the replica within {timeout:g} s")
            except CutShortError as exc:
                event = vllm.failure_event(command, f"the replica closed the connection mid-answer ({exc})")
            except httpx.HTTPError as exc:
                event = vllm.failure_event(
                    command, f"no answer from the replica: {type(exc).__name__}: {exc}"
                )
        if call.abandoned or not self._open:
            return
        calls = self._calls[replica.id]
        calls.discard(call)
        if not calls:
            del self._calls[replica.id]
        self._report(replica, command, event, anyio.current_time() - started)
        self._send(event, timed_out=timed_out)
        if self._warming and isinstance(event, LoadFinished | ListingReceived):
            self._warmed(replica.id)

    def _report(
        self,
        replica: Replica,
        command: IssueLoad | IssueUnload | ReadListing | ReadEngine,
        event: Event,
        seconds: float,
    ) -> None:
        """Log one answer, time a load, count a read and note a failure; the machine counts the rest
        itself."""
        self._tallies.answered(command, event)
        known = self._replicas.get(replica.id)
        current = known is not None and known.url == replica.url
        before = self._records.replica(replica.id) if current else None
        self._records.answered(replica, current, command, event, anyio.current_time())
        if isinstance(event, LoadFinished):
            assert isinstance(command, IssueLoad)
            if event.outcome.succeeded:
                log.info("loaded adapter %r on %s in %.0f ms", command.adapter, replica.id, seconds * 1000)
            else:
                log.warning("could not load adapter %r on %s: %s", command.adapter, replica.id, event.message)
            if self._metrics is not None:
                self._metrics.load_took(replica.model, seconds)
        elif isinstance(event, UnloadFinished):
            assert isinstance(command, IssueUnload)
            if event.outcome.value == "failed":
                log.warning(
                    "could not unload adapter %r from %s to make room; it may hold one more than its limit: "
                    "%s",
                    command.adapter,
                    replica.id,
                    event.message,
                )
            else:
                log.info("evicted adapter %r from %s", command.adapter, replica.id)
        elif isinstance(event, ListingFailed):
            failed = self._records.replica(replica.id) if current else None
            reads = failed.failed_reads if failed is not None else 1
            log.warning(
                "could not read the adapters of %s (%s): %s%s",
                replica.id,
                replica.url,
                event.message,
                f" ({reads} reads in a row)" if reads > 1 else "",
            )
        elif isinstance(event, ReadingReceived):
            self._engine_reads["read" if event.adapters is not None else "absent"] += 1
        elif isinstance(event, ReadingFailed):
            self._engine_reads["failed"] += 1
            log.warning("could not read which adapters run on %s: %s", replica.id, event.message)
        else:
            assert isinstance(event, ListingReceived)
            if before is not None and before.failed_reads:
                log.info(
                    "replica %s (%s) answered again, after %d failed reads of its adapters",
                    replica.id,
                    replica.url,
                    before.failed_reads,
                )

    async def _keep_time(self) -> None:
        """Tell the machine the time when it said it wants to hear it."""
        while True:
            self._release_orphans()
            self._send(TimeAdvanced(now=anyio.current_time()))
            due = self._machine.next_due()
            wait = math.inf if due is None else max(0.0, due - anyio.current_time())
            assert self._wake is not None
            with anyio.move_on_after(wait):
                await self._wake.wait()
            self._wake = anyio.Event()


def _id_of(replica: Replica | str) -> str:
    """A replica's id; anything else is left for the machine to refuse."""
    return replica.id if isinstance(replica, Replica) else replica


_SERVER_ERROR = "server_error"
_NO_ANSWER = "no_answer"
_MISSING = "adapter_missing"


def _poker(wake: Callable[[], None]) -> Callable[[], None]:
    """A function that has ``wake`` called soon in the running loop, safe to call from ``__del__``.

    Both loops take such calls from signal handlers and other threads: trio's token, asyncio's
    ``call_soon_threadsafe``.
    """
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            token = trio.lowlevel.current_trio_token()
        except RuntimeError:
            pass
        else:
            return lambda: token.run_sync_soon(wake)
    import asyncio

    loop = asyncio.get_running_loop()

    def poke() -> None:
        loop.call_soon_threadsafe(wake)

    return poke


def _trio_checkpoint() -> Callable[[], Awaitable[None]] | None:
    """trio's checkpoint when running under trio, None otherwise.

    trio's rule: every async function that can block checkpoints, even when it does not block, so a
    hit can still be cancelled and lets other tasks run. asyncio has no such rule, and a hit there
    returns without yielding. Looked up without importing trio where it is not already in use.
    """
    trio = sys.modules.get("trio")
    if trio is None:
        return None
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        return None
    checkpoint: Callable[[], Awaitable[None]] = trio.lowlevel.checkpoint
    return checkpoint


class Lease:
    """An adapter held on a replica for one request: the handle ``Fleet.acquire`` gives.

    Enter it with ``async with``; the fleet does the acquiring. ``how`` and ``ticket`` are set once
    the block is entered; the adapter is held until it is left. It is one object per request, the
    only one a warm request makes.

    Say what the replica did with the forwarded request when it went wrong: ``check_answer`` (or
    ``adapter_missing``) for an adapter it lost, ``server_error`` for a 5xx, ``replica_failed`` for no
    answer at all. A lease none of them was called on ends with a good answer.
    """

    __slots__ = (
        "_after",
        "_failed",
        "_fleet",
        "_how",
        "_left",
        "_path",
        "_said",
        "_tried",
        "adapter",
        "replica",
        "ticket",
    )

    def __init__(self, fleet: Fleet, replica: Replica, adapter: str, path: str) -> None:
        self._fleet = fleet
        self.replica = replica
        self.adapter = adapter
        self._path = path
        self._how: How | None = None
        self._left = False
        self.ticket = 0
        """The machine's name for the request (0 until entered)."""
        self._after: Lease | None = None
        """The lease of the request's previous attempt, until this one is entered."""
        self._tried: tuple[str, ...] = ()
        """Replicas the request tried before this lease (its retries pass them over)."""
        self._failed: tuple[str, ...] = ()
        """Replicas that answered the request with a server error before this lease ([blame])."""
        self._said: str | None = None
        """What went wrong with the forwarded request, as reported: a server error, no answer, the
        adapter missing; None while nothing did."""

    @property
    def how(self) -> How:
        """ "hit" (it was there), "joined" (another request's load), "loaded" (this request's load).

        Raises:
            OutsideBlockError: the lease has not been granted (its block was not entered, or failed).
        """
        if self._how is None:
            raise OutsideBlockError("a lease says how it was granted once its 'async with' block is entered")
        return self._how

    def adapter_missing(self) -> None:
        """The replica answered this request "The model ... does not exist.": report it while held.

        The fleet stops holding the adapter on the replica, so the next request loads it again, unless
        the copy held now is not this lease's (the adapter was forgotten and loaded again meanwhile):
        then nothing changes. Requests still running on the old copy keep their leases.

        Raises:
            OutsideBlockError: the lease is not held (not granted yet, or released; ``Fleet.forget``
                is for then).
        """
        if self._how is None or self._left:
            raise OutsideBlockError(
                "adapter_missing() reports while the lease is held: call it inside its 'async with' block"
            )
        self._said = _MISSING
        self._fleet._send(AdapterMissing(replica=self.replica.id, adapter=self.adapter, ticket=self.ticket))

    def check_answer(self, status: int, body_head: bytes | str) -> bool:
        """Read the replica's answer to the forwarded request: True when it said the adapter is gone.

        Then it was reported as ``adapter_missing()`` does (see ``lorafleet.vllm.adapter_missing``
        for the answers that say so); answer the client, and route the request again if you like.

        Args:
            status: the answer's HTTP status.
            body_head: the start of its body, as bytes (httpx's ``response.content``) or text
                (``response.text``); vLLM's answer fits in its first 4 KiB.

        Raises:
            InvalidValueError: ``body_head`` is neither bytes nor str.
            OutsideBlockError: the lease is not held.
        """
        if isinstance(body_head, str):
            body_head = body_head.encode()
        elif not isinstance(body_head, bytes | bytearray | memoryview):
            raise _invalid("body_head", body_head, "body_head must be the answer's body, as bytes or str")
        if status != 404 or not vllm.adapter_missing(status, bytes(body_head), self.adapter):
            return False
        self.adapter_missing()
        return True

    def replica_failed(self, message: str = "") -> None:
        """The replica gave the forwarded request no answer (refused, reset, timed out).

        Placement avoids the replica for a while, as after a failed load, until a listing or a load
        there succeeds. A server error is an answer: ``server_error`` says that.

        Raises:
            OutsideBlockError: the lease was never granted.
        """
        if self._how is None:
            raise OutsideBlockError("replica_failed() reports on a granted lease")
        self._said = _NO_ANSWER
        log.warning("replica %s gave a forwarded request no answer: %s", self.replica.id, message)
        self._fleet._replica_failed_on(self.replica, message)
        self._fleet._send(ReplicaFailed(replica=self.replica.id, message=message))

    def server_error(self, message: str = "") -> bool:
        """The replica answered the forwarded request with a server error (a 5xx): True when the
        request is to blame ([blame]).

        True: a replica this request tried before (``route(after=...)``) answered it with a server
        error too, so the request itself makes engines fail: answer the client with the engine's
        error and try no other replica; no replica is blamed. False: the replica may be in trouble:
        route the request again with ``fleet.route(adapter, after=lease)``. Only when another
        replica then serves it (that lease is released after a good answer) is this one a failure,
        avoided for a while; a request no replica serves blames none.

        Raises:
            OutsideBlockError: the lease was never granted.
        """
        if self._how is None:
            raise OutsideBlockError("server_error() reports on a granted lease")
        self._said = _SERVER_ERROR
        rid = self.replica.id
        if self._fleet._machine.blame(rid, self._failed) is Fault.REQUEST:
            log.warning(
                "replica %s answered a request with a server error, as %s did: the request's fault, "
                "not tried again: %s",
                rid,
                ", ".join(sorted(set(self._failed) - {rid})),
                message,
            )
            return True
        log.warning("replica %s answered a forwarded request with a server error: %s", rid, message)
        return False

    def release(self, *, served: bool = True) -> None:
        """End the request: the adapter is no longer held for it. Releasing again does nothing.

        Args:
            served: False when the replica did not answer the request (the client went away first,
                the router gave up): then a retry's release blames no replica ([blame]).
        """
        if self._how is None or self._left:
            return
        self._left = True
        self._fleet._release(self.ticket)
        if served and self._failed:  # only a retry after a server error has a replica to blame
            self._fleet._served(self)

    def __repr__(self) -> str:
        how = self._how.value if self._how is not None else None
        replica = getattr(self, "replica", None)
        rid = replica.id if replica is not None else None
        return f"{type(self).__name__}(replica={rid!r}, adapter={self.adapter!r}, how={how!r})"

    async def __aenter__(self) -> Lease:
        fleet = self._fleet
        checkpoint = fleet._checkpoint
        if checkpoint is not None:
            await checkpoint()
        if not fleet._hit(self):
            with fleet._tallies.waiting(self):
                await fleet._acquire_cold(self)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self._left:
            self._left = True
            self._fleet._release(self.ticket)
            # An exception out of the block is no answer served; only a retry after a server error
            # has a replica to blame.
            if exc_type is None and self._failed:
                self._fleet._served(self)


class Route(Lease):
    """A request for an adapter wherever placement puts it: what ``Fleet.route`` gives.

    Await it for the lease (itself, granted), held until ``release()``, until the fleet closes, or
    until it is garbage collected; or enter it with ``async with``, which releases it at the end.
    ``replica``, ``how``, ``placed`` and ``ticket`` are set once granted.
    """

    __slots__ = ("_entered", "_given", "_model", "placed")

    def __init__(
        self,
        fleet: Fleet,
        adapter: str,
        model: str | None,
        after: Lease | None = None,
        path: str | None = None,
    ) -> None:
        self._fleet = fleet
        self.adapter = adapter
        self._model = model
        self._path = ""
        self._given = path
        """The caller's path (``Fleet.route(path=...)``); None: the fleet's adapters have it."""
        self._how = None
        self._left = False
        self._entered = False
        self.ticket = 0
        self.placed: Placed | None = None
        """What placement found on the replica: held, loading, free, evict, over or wait."""
        self._after = after
        self._tried = ()
        self._failed = ()
        self._said = None

    def __await__(self) -> Generator[Any, None, Route]:
        return self._fleet._route(self).__await__()

    def release(self, *, served: bool = True) -> None:
        """End the request: the adapter is no longer held for it. Releasing again does nothing.

        Args:
            served: False when the replica did not answer the request (the client went away first,
                the router gave up): then a retry's release blames no replica ([blame]).
        """
        if self._how is None or self._left:
            return
        self._left = True
        if self._fleet._release_routed(self.ticket) and served and self._failed:
            self._fleet._served(self)

    def __del__(self) -> None:
        if self._how is not None and not self._left:
            self._fleet._orphan(self.ticket)

    def __aenter__(self) -> Coroutine[Any, Any, Route]:
        return self._fleet._route(self)  # the coroutine itself: one frame less on every request

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self._left:
            self._left = True
            released = self._fleet._release_routed(self.ticket)
            if released and exc_type is None and self._failed:  # as Lease.__aexit__
                self._fleet._served(self)

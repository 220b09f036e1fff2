"""The shell: runs the machine's commands over HTTP and turns the answers back into events.

Every decision is the machine's. This module only makes calls, waits, keeps time and counts. It is
written on anyio, which runs natively on trio and on asyncio, so both runtimes' shells are this one
class; lorafleet_trio and lorafleet_asyncio only add their runtime's rules for a hit.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Any

import anyio
import httpx

from lorafleet import (
    AdapterStateMachine,
    Command,
    Fail,
    Fault,
    Grant,
    How,
    IssueLoad,
    IssueUnload,
    ListingFailed,
    LoadFinished,
    MarkMet,
    ReadListing,
    Statistics,
    UnloadFinished,
    View,
    vllm,
)

from ._http import fetch
from ._metrics import FleetMetrics
from ._types import AdapterError, FleetClosedError, Replica, ReplicaError

log = logging.getLogger("lorafleet")

LOAD_TIMEOUT = 120.0
"""An adapter is tens to hundreds of MB read from local disk: one taking minutes is a replica in trouble."""
LISTING_TIMEOUT = 5.0
LISTING_INTERVAL = 30.0

_Call = IssueLoad | IssueUnload | ReadListing


class _Waiter:
    """One waiting request: the event it waits on, and what it gets."""

    __slots__ = ("closed", "event", "failed", "how")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.how: How | None = None
        self.failed: Fail | None = None
        self.closed: FleetClosedError | None = None


class Fleet:
    """Which vLLM replica holds which LoRA adapter, over HTTP: a router's one object for it.

    Use it as ``async with Fleet(...) as fleet``: the block owns the background work (calls to
    replicas, loads that outlive the request that started them, the listing schedule), and leaving it
    ends that work and fails the requests still waiting with ``FleetClosedError``.

    Args:
        client: the httpx client for calls to replicas; the fleet makes and closes its own when None.
        load_timeout: seconds one load (or unload) may take.
        listing_timeout: seconds one read of a replica's listing may take.
        listing_interval: seconds between two readings of a replica's listing.
        metrics: receives counts of grants, loads and evictions (see ``PrometheusMetrics``).
    """

    def __init__(
        self,
        *,
        client: httpx.AsyncClient | None = None,
        load_timeout: float = LOAD_TIMEOUT,
        listing_timeout: float = LISTING_TIMEOUT,
        listing_interval: float = LISTING_INTERVAL,
        metrics: FleetMetrics | None = None,
    ) -> None:
        for name, value in (
            ("load_timeout", load_timeout),
            ("listing_timeout", listing_timeout),
            ("listing_interval", listing_interval),
        ):
            if not value > 0:
                raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")
        self._machine = AdapterStateMachine(listing_interval=listing_interval)
        self._client = client
        self._load_timeout = load_timeout
        self._listing_timeout = listing_timeout
        self._metrics = metrics
        self._replicas: dict[str, Replica] = {}
        self._waiters: dict[int, _Waiter] = {}
        self._unmet: dict[str, anyio.Event] = {}
        self._stack: AsyncExitStack | None = None
        self._tasks: anyio.abc.TaskGroup | None = None
        self._wake = anyio.Event()
        self._open = False

    # -- lifetime ------------------------------------------------------------------------------

    async def __aenter__(self) -> Any:
        if self._stack is not None:
            raise RuntimeError("a Fleet can be entered once")
        stack = AsyncExitStack()
        try:
            if self._client is None:
                self._client = await stack.enter_async_context(httpx.AsyncClient())
            self._tasks = await stack.enter_async_context(anyio.create_task_group())
            self._tasks.start_soon(self._keep_time)
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        self._open = True
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._close()
        assert self._stack is not None
        assert self._tasks is not None
        self._tasks.cancel_scope.cancel()
        await self._stack.__aexit__(exc_type, exc, tb)

    def _close(self) -> None:
        self._open = False
        closed = FleetClosedError("the fleet was closed while the request waited for its adapter")
        waiters, self._waiters = self._waiters, {}
        for waiter in waiters.values():
            waiter.closed = closed
            waiter.event.set()
        unmet, self._unmet = self._unmet, {}
        for event in unmet.values():
            event.set()

    # -- what a router calls -------------------------------------------------------------------

    def acquire(self, replica: Replica, adapter: str, path: str) -> Lease:
        """Hold ``adapter`` (stored at ``path``) on ``replica`` for an ``async with`` block.

        The block gets a ``Lease`` once the adapter is there, loading it first if need be; the
        adapter is never unloaded while the block runs. Cancelling the request while it waits gets it
        no lease, and the load goes on for the others.

        Raises:
            AdapterError: the adapter is wrong; do not retry it on another replica.
            ReplicaError: this replica failed; another may serve the request.
            FleetClosedError: the fleet closed while the request waited.
        """
        return Lease(self, replica, adapter, path)

    async def sync_unknown(self, replicas: Iterable[Replica]) -> None:
        """Read the listings of the replicas not met yet, all at once, and wait for them.

        A listing that fails still counts: its replica is taken to hold what this fleet loaded there.
        """
        self._check_open()
        waits = []
        for replica in replicas:
            self._declare(replica)
            event = self._unmet.get(replica.id)
            if event is not None:
                waits.append(event)
        for event in waits:
            await event.wait()
        self._check_open()

    def view(self, replicas: Iterable[Replica], adapter: str) -> View:
        """Which of ``replicas`` hold ``adapter`` (held or loading) and which have room."""
        return self._machine.view([r.id for r in replicas], adapter)

    def forget(self, replica: Replica, adapter: str) -> None:
        """The replica answered a request for ``adapter`` with "no such model" (call it after the block)."""
        self._machine.adapter_missing(replica=replica.id, adapter=adapter)

    def remove(self, replicas: Iterable[Replica | str]) -> None:
        """Stop using these replicas: requests waiting on them fail with ``ReplicaError``."""
        ids = [r if isinstance(r, str) else r.id for r in replicas]
        for rid in ids:
            # Forgotten here too, so that using the replica again adds it again. Calls still out hold
            # their own Replica; their answers go to the machine, which ignores them.
            self._replicas.pop(rid, None)
            met = self._unmet.pop(rid, None)
            if met is not None:
                met.set()
        self._run(self._machine.remove_replicas(ids))

    def keep(self, replicas: Iterable[Replica]) -> None:
        """Stop using every replica not among ``replicas``."""
        wanted = {r.id for r in replicas}
        self.remove(sorted(rid for rid in self._replicas if rid not in wanted))

    def set_limit(self, model: str, limit: int) -> None:
        """Every replica of ``model`` may hold ``limit`` adapters (a lower one applies at the next load)."""
        self._machine.set_limit(model, limit)

    def statistics(self) -> Statistics:
        """The machine's frozen snapshot: counts, and what every replica holds with its in-use counts."""
        return self._machine.statistics()

    # -- the loop: event in, commands out ------------------------------------------------------

    def _check_open(self) -> None:
        if not self._open:
            raise FleetClosedError("the fleet is not open: use it inside 'async with'")

    def _declare(self, replica: Replica) -> None:
        """Tell the machine of a replica it has not met, or whose limit changed."""
        current = self._replicas.get(replica.id)
        if current is replica or current == replica:
            return
        self._run(self._machine.advance(anyio.current_time()))
        commands = self._machine.add_replica(replica.id, model=replica.model, limit=replica.limit)
        self._replicas[replica.id] = replica
        if commands:
            self._unmet[replica.id] = anyio.Event()
            self._wake.set()  # a new replica's next listing may be due before the timer's
        self._run(commands)

    def _run(self, commands: Sequence[Command]) -> None:
        """Carry out the machine's commands: wake requests, start calls in the background."""
        for command in commands:
            if isinstance(command, Grant | Fail):
                waiter = self._waiters.pop(command.ticket, None)
                if waiter is None:
                    continue  # closed meanwhile
                if isinstance(command, Grant):
                    waiter.how = command.how
                    if self._metrics is not None:
                        self._metrics.grant(command.how)
                else:
                    waiter.failed = command
                waiter.event.set()
            elif isinstance(command, MarkMet):
                met = self._unmet.pop(command.replica, None)
                if met is not None:
                    met.set()
            elif self._tasks is not None and self._open:
                self._tasks.start_soon(self._call, command, self._replicas[command.replica])

    async def _call(self, command: _Call, replica: Replica) -> None:
        """Make one call to a replica and feed its answer to the machine."""
        timeout = self._listing_timeout if isinstance(command, ReadListing) else self._load_timeout
        request = vllm.http_request(command, replica.api_key)
        if isinstance(command, IssueLoad):
            log.debug("loading adapter %r on %s from %s", command.adapter, replica.id, command.path)
        assert self._client is not None
        started = anyio.current_time()
        try:
            with anyio.fail_after(timeout):
                status, body, truncated = await fetch(self._client, replica.url, request, timeout)
            event = vllm.answer_event(command, status, body, truncated=truncated)
        except TimeoutError:
            event = vllm.failure_event(command, f"no answer within {timeout:g} s")
        except httpx.HTTPError as exc:
            event = vllm.failure_event(command, f"{type(exc).__name__}: {exc}")
        if not self._open:
            return
        self._report(replica, command, event, anyio.current_time() - started)
        self._run(self._machine.handle(event))

    def _report(self, replica: Replica, command: _Call, event: Any, seconds: float) -> None:
        """Log and count one answer; the machine's own view is not touched here."""
        metrics = self._metrics
        if isinstance(event, LoadFinished):
            assert isinstance(command, IssueLoad)
            if event.outcome.succeeded:
                log.info("loaded adapter %r on %s in %.0f ms", command.adapter, replica.id, seconds * 1000)
            else:
                log.warning("could not load adapter %r on %s: %s", command.adapter, replica.id, event.message)
            if metrics is not None:
                metrics.load(replica.model, event.outcome.value, seconds)
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
            if metrics is not None:
                metrics.eviction(replica.model, event.outcome.value)
        elif isinstance(event, ListingFailed):
            log.warning("could not read the adapters of %s: %s", replica.id, event.message)

    async def _keep_time(self) -> None:
        """Call the machine's ``advance`` when it said it wants to hear the time."""
        while True:
            self._run(self._machine.advance(anyio.current_time()))
            due = self._machine.next_due()
            wait = math.inf if due is None else max(0.0, due - anyio.current_time())
            with anyio.move_on_after(wait):
                await self._wake.wait()
            self._wake = anyio.Event()

    _checkpoint: Callable[[], Awaitable[None]] | None = None
    """What every acquire awaits first, even a hit: nothing here; trio's shell keeps one checkpoint."""


class Lease:
    """An adapter held on a replica for one request, for the ``async with`` block of ``Fleet.acquire``.

    The object ``acquire`` returns is the lease itself (one object a request, not two: this is the
    path every request takes); ``how`` and ``ticket`` are set once the block is entered.
    """

    __slots__ = ("_fleet", "_path", "adapter", "how", "replica", "ticket")

    def __init__(self, fleet: Fleet, replica: Replica, adapter: str, path: str) -> None:
        self._fleet = fleet
        self.replica = replica
        self.adapter = adapter
        self._path = path
        self.how: How | None = None
        """"hit" (it was there), "joined" (another request's load), "loaded" (this request's load)."""
        self.ticket = 0

    def __repr__(self) -> str:
        how = self.how.value if self.how is not None else None
        return f"Lease(replica={self.replica.id!r}, adapter={self.adapter!r}, how={how!r})"

    async def __aenter__(self) -> Lease:
        if self.how is not None:
            raise RuntimeError("a lease is entered once: call fleet.acquire() for each request")
        fleet = self._fleet
        checkpoint = fleet._checkpoint
        if checkpoint is not None:
            await checkpoint()
        if not fleet._open:
            raise FleetClosedError("the fleet is not open: use it inside 'async with'")
        replica = self.replica
        current = fleet._replicas.get(replica.id)
        if current is not replica and current != replica:
            fleet._declare(replica)
        machine = fleet._machine
        ticket = machine.next_ticket
        self.ticket = ticket
        if machine.hit(ticket, replica=replica.id, adapter=self.adapter):  # granted at once: no waiting
            if fleet._metrics is not None:
                fleet._metrics.grant(How.HIT)
            self.how = How.HIT
            return self
        commands = machine.request(ticket, replica=replica.id, adapter=self.adapter, path=self._path)
        waiter = _Waiter()
        fleet._waiters[ticket] = waiter
        fleet._run(commands)
        try:
            await waiter.event.wait()
        except BaseException:
            # Cancelled while waiting: the load goes on for the others, and a grant that arrived
            # meanwhile is released by the cancel.
            fleet._waiters.pop(ticket, None)
            if fleet._open:
                fleet._run(machine.cancel(ticket))
            raise
        if waiter.closed is not None:
            raise waiter.closed
        if waiter.failed is not None:
            kind = AdapterError if waiter.failed.fault is Fault.ADAPTER else ReplicaError
            raise kind(replica, self.adapter, waiter.failed.message)
        self.how = waiter.how
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        fleet = self._fleet
        if fleet._open:
            fleet._machine.release(self.ticket)

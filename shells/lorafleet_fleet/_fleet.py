"""The shell: runs the machine's commands over HTTP and turns the answers back into events.

Every decision is the machine's. This module only makes calls, waits, keeps time and logs. Every input
reaches the machine through ``Fleet._send``, which also carries out what the machine answers; the one
shortcut is ``AdapterStateMachine.hit``, a warm request's path, which has no command to carry out.

It is written on anyio, which runs natively on trio and on asyncio: one ``Fleet`` serves both, and
keeps trio's rule for a hit (a checkpoint) when it finds itself under trio.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Awaitable, Callable, Iterable
from types import TracebackType
from typing import Self

import anyio
import anyio.abc
import httpx

from lorafleet import (
    AdapterMissing,
    AdapterStateMachine,
    Cancelled,
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
    ReadListing,
    Released,
    ReplicaAdded,
    ReplicasRemoved,
    Requested,
    Statistics,
    TimeAdvanced,
    UnloadFinished,
    View,
    vllm,
)

from ._http import CutShortError, fetch
from ._metrics import FleetMetrics
from ._types import (
    AdapterError,
    EnteredTwiceError,
    FleetClosedError,
    OutsideBlockError,
    Replica,
    ReplicaError,
    _invalid,
)

log = logging.getLogger("lorafleet")

LOAD_TIMEOUT = 120.0
"""An adapter is tens to hundreds of MB read from local disk: one taking minutes is a replica in trouble."""
LISTING_TIMEOUT = 5.0
LISTING_INTERVAL = 30.0

_HIT = How.HIT


class _Waiter:
    """One request that was not a hit: the event it waits on, and what it gets."""

    __slots__ = ("closed", "event", "failed", "how", "timeout")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.how: How | None = None
        self.failed: Fail | None = None
        self.timeout: float | None = None
        self.closed = False


class _Call:
    """One call out to a replica's server, until its answer is fed to the machine."""

    __slots__ = ("abandoned", "command", "replica", "scope")

    def __init__(self, command: IssueLoad | IssueUnload | ReadListing, replica: Replica) -> None:
        self.command = command
        self.replica = replica
        self.scope = anyio.CancelScope()
        self.abandoned = False
        """Its answer was given up on (the replica moved to another server) and reported already."""


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

    Raises:
        InvalidValueError: a timeout or the interval is not a positive number of seconds.
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
            if type(value) not in (int, float) or not 0 < value < math.inf:
                raise _invalid(name, value, f"{name} must be a positive number of seconds")
        self._machine = AdapterStateMachine(listing_interval=listing_interval)
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
            metrics.watch(self.statistics)

    # -- lifetime ------------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._entered:
            raise EnteredTwiceError("a Fleet is entered once: make a new Fleet for another 'async with'")
        self._entered = True
        self._checkpoint = _trio_checkpoint()
        if self._client is None:
            self._client = httpx.AsyncClient()
        try:
            tasks = anyio.create_task_group()
            await tasks.__aenter__()
        except BaseException:
            await self._close_client()
            raise
        self._tasks = tasks
        self._wake = anyio.Event()
        self._open = True
        tasks.start_soon(self._keep_time)
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

    def _check_open(self) -> None:
        if not self._open:
            raise self._not_open()

    def _not_open(self) -> Exception:
        if self._entered:
            return FleetClosedError("the fleet is closed: it takes no more requests")
        return OutsideBlockError("the fleet is not open yet: use it inside 'async with Fleet() as fleet'")

    # -- what a router calls -------------------------------------------------------------------

    def acquire(self, replica: Replica, adapter: str, path: str) -> Lease:
        """Hold ``adapter`` (stored at ``path``) on ``replica`` for an ``async with`` block.

        The block gets the ``Lease`` once the adapter is there, loading it first if need be; the
        adapter is never unloaded while the block runs. Cancelling the request while it waits gets it
        no lease, and the load goes on for the others.

        Raises (when the block is entered):
            AdapterError: the adapter is wrong; do not retry it on another replica.
            ReplicaError: this replica failed; another may serve the request.
            FleetClosedError: the fleet is closed, or closed while the request waited.
            ReplicaConflictError: ``replica``'s id is known here with another model and the same URL.
            InvalidValueError: ``adapter`` or ``path`` is not a non-empty str.
            OutsideBlockError: the fleet was never entered.
            EnteredTwiceError: the lease was entered before.
        """
        return Lease(self, replica, adapter, path)

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

    def set_limit(self, model: str, limit: int) -> None:
        """Every replica of ``model`` may hold ``limit`` adapters (a lower one applies at the next load).

        Raises:
            InvalidValueError: ``limit`` is not an int of at least 1.
        """
        self._send(LimitSet(model=model, limit=limit))

    def statistics(self) -> Statistics:
        """The machine's frozen snapshot: counts, and what every replica holds with its in-use counts."""
        return self._machine.statistics()

    # -- acquiring, for Lease ------------------------------------------------------------------

    def _hit(self, lease: Lease) -> bool:
        """Start ``lease``'s request: True when it is a hit, granted at once (every warm request's path)."""
        if not self._open:
            raise self._not_open()
        if lease.ticket:
            raise EnteredTwiceError("a lease is entered once: call fleet.acquire() for each request")
        replica = lease.replica
        known = self._replicas.get(replica.id)
        if known is not replica and known != replica:
            self._declare(replica)
        machine = self._machine
        ticket = lease.ticket = machine.next_ticket
        if machine.hit(ticket, replica=replica.id, adapter=lease.adapter):
            lease._how = _HIT
            return True
        return False

    async def _wait(self, lease: Lease) -> None:
        """The rest of a request that was not a hit: wait for the load, or the unload in its way."""
        ticket = lease.ticket
        replica = lease.replica
        waiter = self._waiters[ticket] = _Waiter()
        try:
            self._send(Requested(ticket=ticket, replica=replica.id, adapter=lease.adapter, path=lease._path))
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
        failed = waiter.failed
        if failed is not None:
            kind = AdapterError if failed.fault is Fault.ADAPTER else ReplicaError
            raise kind(replica, lease.adapter, failed.message, timeout=waiter.timeout)
        lease._how = waiter.how

    # -- the loop: event in, commands out ------------------------------------------------------

    def _send(self, event: Event, *, timed_out: float | None = None) -> None:
        """Feed ``event`` to the machine and carry out the commands it gives: every input's one way in.

        Args:
            timed_out: the event answers a call that took longer than this many seconds.
        """
        for command in self._machine.handle(event):
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
                self._send(vllm.failure_event(call.command, f"abandoned: replica {rid} moved to {url}"))

    def _drop_replica(self, rid: str) -> None:
        # Calls still out hold their own Replica; their answers go to the machine, which ignores them.
        self._replicas.pop(rid, None)
        met = self._unmet.pop(rid, None)
        if met is not None:
            met.set()

    async def _make(self, call: _Call) -> None:
        """Make one call to a replica and feed its answer to the machine."""
        command, replica = call.command, call.replica
        timeout = self._listing_timeout if isinstance(command, ReadListing) else self._load_timeout
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

    def _report(
        self, replica: Replica, command: IssueLoad | IssueUnload | ReadListing, event: Event, seconds: float
    ) -> None:
        """Log one answer, and time a load; the machine counts the rest itself."""
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
            log.warning("could not read the adapters of %s: %s", replica.id, event.message)
        else:
            assert isinstance(event, ListingReceived)

    async def _keep_time(self) -> None:
        """Tell the machine the time when it said it wants to hear it."""
        while True:
            self._send(TimeAdvanced(now=anyio.current_time()))
            due = self._machine.next_due()
            wait = math.inf if due is None else max(0.0, due - anyio.current_time())
            assert self._wake is not None
            with anyio.move_on_after(wait):
                await self._wake.wait()
            self._wake = anyio.Event()


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
    """

    __slots__ = ("_fleet", "_how", "_left", "_path", "adapter", "replica", "ticket")

    def __init__(self, fleet: Fleet, replica: Replica, adapter: str, path: str) -> None:
        self._fleet = fleet
        self.replica = replica
        self.adapter = adapter
        self._path = path
        self._how: How | None = None
        self._left = False
        self.ticket = 0
        """The machine's name for the request (0 until entered)."""

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
        """The replica answered this request "The model ... does not exist.": report it inside the block.

        The fleet stops holding the adapter on the replica, so the next request loads it again, unless
        the copy held now is not this lease's (the adapter was forgotten and loaded again meanwhile):
        then nothing changes. Requests still running on the old copy keep their leases.

        Raises:
            OutsideBlockError: the block was not entered, or was left (``Fleet.forget`` is for then).
        """
        if self._how is None or self._left:
            raise OutsideBlockError(
                "adapter_missing() reports while the lease is held: call it inside its 'async with' block"
            )
        self._fleet._send(AdapterMissing(replica=self.replica.id, adapter=self.adapter, ticket=self.ticket))

    def __repr__(self) -> str:
        how = self._how.value if self._how is not None else None
        return f"Lease(replica={self.replica.id!r}, adapter={self.adapter!r}, how={how!r})"

    async def __aenter__(self) -> Lease:
        fleet = self._fleet
        checkpoint = fleet._checkpoint
        if checkpoint is not None:
            await checkpoint()
        if not fleet._hit(self):
            await fleet._wait(self)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._left = True
        self._fleet._send(Released(ticket=self.ticket))

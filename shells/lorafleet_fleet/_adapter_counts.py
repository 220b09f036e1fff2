"""Per-adapter counts: what each adapter asked of the fleet and what it cost, for operators.

The machine counts per model and per replica; which adapter a request, a load or an unload was for is
the shell's knowledge. So the shell tallies here what the machine decided, per adapter: a hit on the
fast path (no command), and for every other request the ``Grant`` or ``Fail`` that ended it (as the
lease's ``how`` or the ``AdapterError`` it raised), and the answer to each ``IssueLoad`` and
``IssueUnload``. Nothing here decides anything.

A fleet may see 100,000 adapters; Prometheus must not. ``AdapterExport`` gives the most requested
``top`` their own label value and sums the rest under ``OTHER_ADAPTERS``, keeping every exported
series a counter that never goes down while adapters move in and out of the top.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Protocol

import anyio
import attrs

from lorafleet import (
    Event,
    How,
    IssueLoad,
    IssueUnload,
    LoadFinished,
    LoadOutcome,
    ReadEngine,
    ReadListing,
    UnloadFinished,
    UnloadOutcome,
)

from ._types import AdapterError, _invalid


class Granted(Protocol):
    """What the counts read of a request's lease (``Fleet``'s ``Lease``): its adapter, and once its
    block was entered, how it was granted."""

    @property
    def adapter(self) -> str: ...

    @property
    def how(self) -> How: ...


TOP_ADAPTERS = 20
"""Adapters with a label value of their own in the exported metrics (``PrometheusMetrics``)."""
OTHER_ADAPTERS = "_other"
"""The label value (and ``AdapterStatistics``' name) of every adapter outside the top, summed.

An adapter really named so is always counted there: it could not be told from the sum."""
WAIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
"""Upper bounds, in seconds, of the wait histogram's buckets: those of ``lorafleet_load_seconds``,
so a wait reads against the load it waited for."""

LOAD_OUTCOMES = tuple(outcome.value for outcome in LoadOutcome)
UNLOAD_OUTCOMES = tuple(outcome.value for outcome in UnloadOutcome)
_LOAD_AT = {outcome: i for i, outcome in enumerate(LoadOutcome)}
_UNLOAD_AT = {outcome: i for i, outcome in enumerate(UnloadOutcome)}

# A tally as a flat vector of integers (waits in microseconds, so that sums stay exact and a counter
# computed as a difference never dips by a rounding): these are the offsets.
_REQUESTS, _HITS, _JOINED, _LOADED, _REFUSED = range(5)
_LOADS = 5
_EVICTIONS = _LOADS + len(LOAD_OUTCOMES)
_BUCKETS = _EVICTIONS + len(UNLOAD_OUTCOMES)
_WAIT_MICROS = _BUCKETS + len(WAIT_BUCKETS) + 1
_WIDTH = _WAIT_MICROS + 1
_ZERO = (0,) * _WIDTH


class _Tally:
    """One adapter's counts in one fleet, as the request paths bump them."""

    __slots__ = (
        "buckets",
        "cold",
        "cold_hits",
        "evictions",
        "fast",
        "joined",
        "loaded",
        "loads",
        "refused",
        "seq",
        "wait_micros",
    )

    def __init__(self, seq: int) -> None:
        self.seq = seq
        """Its place among the fleet's tallies, in the order made (``AdapterExport`` reads it)."""
        self.fast = 0
        """Hits granted on the fast path, with no command."""
        self.cold = 0
        """Requests that were not granted on the fast path."""
        self.cold_hits = 0
        self.joined = 0
        self.loaded = 0
        self.refused = 0
        self.loads = [0] * len(LOAD_OUTCOMES)
        self.evictions = [0] * len(UNLOAD_OUTCOMES)
        self.buckets: list[int] | None = None
        """Waits per bucket (not cumulative), made at the first wait."""
        self.wait_micros = 0

    @property
    def requests(self) -> int:
        return self.fast + self.cold

    def vector(self) -> list[int]:
        buckets = self.buckets if self.buckets is not None else [0] * (len(WAIT_BUCKETS) + 1)
        return [
            self.fast + self.cold,
            self.fast + self.cold_hits,
            self.joined,
            self.loaded,
            self.refused,
            *self.loads,
            *self.evictions,
            *buckets,
            self.wait_micros,
        ]


@attrs.frozen(kw_only=True)
class AdapterCounts:
    """What one adapter (or a sum of adapters) asked of the fleet and what it cost, since the fleet began."""

    requests: int
    """Requests for it, ``route`` and ``acquire`` alike (prewarming counts)."""
    hits: int
    """Requests granted where it was held."""
    joined: int
    """Requests granted by a load another request started."""
    loaded: int
    """Requests granted by the load they started."""
    refused: int
    """Requests failed as the adapter's fault (the engine refused it)."""
    loads: Mapping[str, int]
    """Loads of it, by outcome (loaded, already_loaded, adapter_fault, replica_fault); pins' too."""
    evictions: Mapping[str, int]
    """Unloads of it to make room, by outcome (unloaded, not_found, failed)."""
    waits: int
    """Requests that were granted after a load (joined or loaded)."""
    wait_seconds: float
    """Their waits summed: from the request to its grant."""
    wait_buckets: tuple[int, ...]
    """Those waits, cumulative per bound of ``WAIT_BUCKETS`` and last for +Inf (which is ``waits``)."""


def _counts(vector: list[int] | tuple[int, ...]) -> AdapterCounts:
    buckets = tuple(itertools.accumulate(vector[_BUCKETS:_WAIT_MICROS]))
    return AdapterCounts(
        requests=vector[_REQUESTS],
        hits=vector[_HITS],
        joined=vector[_JOINED],
        loaded=vector[_LOADED],
        refused=vector[_REFUSED],
        loads=dict(zip(LOAD_OUTCOMES, vector[_LOADS:_EVICTIONS], strict=True)),
        evictions=dict(zip(UNLOAD_OUTCOMES, vector[_EVICTIONS:_BUCKETS], strict=True)),
        waits=buckets[-1],
        wait_seconds=vector[_WAIT_MICROS] / 1e6,
        wait_buckets=buckets,
    )


@attrs.frozen(kw_only=True)
class AdapterStatistics:
    """``Fleet.adapter_statistics``: the most requested adapters' counts, and the rest's sum."""

    adapters: Mapping[str, AdapterCounts]
    """Adapter name to its counts, the most requested first (ties by name)."""
    rest: AdapterCounts
    """Every other adapter's counts, summed."""
    rest_adapters: int
    """How many adapters ``rest`` sums."""


class Tallies:
    """One fleet's per-adapter counts: bumped on the request paths, read by snapshots and exporters.

    An adapter gets a tally at its first request or load, and keeps it for the fleet's life: names
    come from the fleet's adapters only (a name they do not have fails before it is counted).
    """

    __slots__ = ("by_adapter", "total")

    def __init__(self) -> None:
        self.by_adapter: dict[str, _Tally] = {}
        self.total = _Tally(0)
        """Every adapter's counts summed as they are bumped, but for ``fast``: the hit path bumps only
        its adapter's, and ``total_vector`` adds them up."""

    def _of(self, adapter: str) -> _Tally:
        tally = self.by_adapter.get(adapter)
        if tally is None:
            tally = self.by_adapter[adapter] = _Tally(len(self.by_adapter))
        return tally

    def hit(self, adapter: str) -> None:
        """A request granted on the fast path: the hit path's one cost here."""
        tally = self.by_adapter.get(adapter)
        if tally is None:
            tally = self._of(adapter)
        tally.fast += 1

    def total_vector(self) -> list[int]:
        """Every adapter's counts summed."""
        self.total.fast = sum(tally.fast for tally in self.by_adapter.values())
        return self.total.vector()

    def waiting(self, lease: Granted) -> _Waiting:
        """Count ``lease``'s request, which was not a hit at once, for the block that waits for it."""
        tally = self._of(lease.adapter)
        tally.cold += 1
        self.total.cold += 1
        return _Waiting(self, tally, lease)

    def answered(self, command: IssueLoad | IssueUnload | ReadListing | ReadEngine, event: Event) -> None:
        """The answer to a call the machine asked for: counted when it is a load's or an unload's."""
        if isinstance(event, LoadFinished):
            assert isinstance(command, IssueLoad)
            at = _LOAD_AT[event.outcome]
            self._of(command.adapter).loads[at] += 1
            self.total.loads[at] += 1
        elif isinstance(event, UnloadFinished):
            assert isinstance(command, IssueUnload)
            at = _UNLOAD_AT[event.outcome]
            self._of(command.adapter).evictions[at] += 1
            self.total.evictions[at] += 1

    def statistics(self, top: int | None) -> AdapterStatistics:
        """The ``top`` most requested adapters' counts (all when None), and the rest summed.

        Raises:
            InvalidValueError: ``top`` is neither None nor an int of at least 0.
        """
        if top is not None and (type(top) is not int or top < 0):
            raise _invalid("top", top, "top must be None or an int of at least 0")
        items = self.by_adapter.items()
        if top is None:
            chosen = sorted(items, key=_most_requested)
        else:
            named = (item for item in items if item[0] != OTHER_ADAPTERS)
            chosen = heapq.nsmallest(top, named, key=_most_requested)
        adapters = {name: _counts(tally.vector()) for name, tally in chosen}
        rest = list(_ZERO) if top is None else _minus(self.total_vector(), *(t.vector() for _, t in chosen))
        return AdapterStatistics(
            adapters=adapters, rest=_counts(rest), rest_adapters=len(self.by_adapter) - len(chosen)
        )


def _most_requested(item: tuple[str, _Tally]) -> tuple[int, str]:
    return -item[1].requests, item[0]


class _Waiting:
    """The block a request that was not a hit at once waits in: it counts how the request ended."""

    __slots__ = ("_lease", "_started", "_tallies", "_tally")

    def __init__(self, tallies: Tallies, tally: _Tally, lease: Granted) -> None:
        self._tallies = tallies
        self._tally = tally
        self._lease = lease
        self._started = anyio.current_time()

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        tally, total = self._tally, self._tallies.total
        if exc is not None:
            # Only a Fail with the adapter's fault raises AdapterError here: an unknown name fails
            # before the request is counted. A replica's fault, a cancel or a closed fleet is no
            # refusal, and no grant either.
            if isinstance(exc, AdapterError):
                tally.refused += 1
                total.refused += 1
            return
        how = self._lease.how
        if how is How.HIT:  # granted where it was held after all: a busy holder, a replica met late
            tally.cold_hits += 1
            total.cold_hits += 1
            return
        if how is How.JOINED:
            tally.joined += 1
            total.joined += 1
        else:
            tally.loaded += 1
            total.loaded += 1
        waited = anyio.current_time() - self._started
        micros = round(waited * 1e6)
        at = _bucket(waited)
        for counted in (tally, total):
            if counted.buckets is None:
                counted.buckets = [0] * (len(WAIT_BUCKETS) + 1)
            counted.buckets[at] += 1
            counted.wait_micros += micros


def _bucket(seconds: float) -> int:
    for at, bound in enumerate(WAIT_BUCKETS):
        if seconds <= bound:
            return at
    return len(WAIT_BUCKETS)


def _plus(*vectors: Iterable[int]) -> list[int]:
    return [sum(column) for column in zip(*vectors, strict=True)] if vectors else list(_ZERO)


def _minus(first: list[int], *others: list[int]) -> list[int]:
    taken = _plus(*others) if others else list(_ZERO)
    return [a - b for a, b in zip(first, taken, strict=True)]


@attrs.define
class _Member:
    """An adapter with a label value of its own: what it had when it got it, and what was last exported."""

    base: list[int]
    exported: list[int]


class AdapterExport:
    """The per-adapter families of one exporter: which adapters have a label value, and their counts.

    At each scrape the ``top`` most requested adapters (of every watched fleet together, since each
    fleet began; a tie keeps the adapter that had the label) get a label value each, and every other
    adapter is summed under ``OTHER_ADAPTERS``: at most ``top + 1`` label values per family. Each
    exported value is a counter and never goes down: an adapter that enters the top counts from that
    scrape on, and what it did before stays in the sum (but an adapter first counted since the last
    scrape, which no series showed yet, brings it all); one that leaves stops being exported, and what
    it adds from then on goes to the sum. So a rate over the label values adds up to the fleet's; the
    values themselves add up to every adapter's count until the first adapter leaves the top.
    """

    def __init__(self, top: int) -> None:
        self._top = top
        self._members: dict[str, _Member] = {}
        self._retired = list(_ZERO)
        """What adapters that left the top had been exported with: no label value shows it any more."""
        self._seen: dict[int, int] = {}
        """Per fleet's tallies (by id): how many adapters they had at the last scrape."""

    def collect(self, fleets: list[Tallies]) -> tuple[dict[str, AdapterCounts], AdapterCounts]:
        """The counts to export now: per adapter in the top (sorted by name), and the rest's."""
        members = self._members
        if len(fleets) == 1:
            requests: Iterable[tuple[str, int]] = (
                (name, tally.fast + tally.cold) for name, tally in fleets[0].by_adapter.items()
            )
        else:
            merged: dict[str, int] = {}
            for tallies in fleets:
                for name, tally in tallies.by_adapter.items():
                    merged[name] = merged.get(name, 0) + tally.fast + tally.cold
            requests = merged.items()
        chosen = heapq.nlargest(
            self._top,
            ((count, name in members, name) for name, count in requests if name != OTHER_ADAPTERS),
        )
        top = {name for _, _, name in chosen}
        for name in [name for name in members if name not in top]:
            self._retired = _plus(self._retired, members.pop(name).exported)
        now: dict[str, list[int]] = {}
        for name in sorted(top):
            vector = _plus(*(t.by_adapter[name].vector() for t in fleets if name in t.by_adapter))
            now[name] = vector
            if name not in members:
                # New to the top: what it had at the last scrape was exported in the sum, and stays
                # there. Its tally made since then was in no series yet, and comes with it.
                known = [
                    t.by_adapter[name].vector()
                    for t in fleets
                    if name in t.by_adapter and t.by_adapter[name].seq < self._seen.get(id(t), 0)
                ]
                members[name] = _Member(base=_plus(*known), exported=list(_ZERO))
        shown = {}
        for name, vector in now.items():
            member = members[name]
            member.exported = _minus(vector, member.base)
            shown[name] = _counts(member.exported)
        total = _plus(*(t.total_vector() for t in fleets))
        rest = _minus(total, self._retired, *(member.exported for member in members.values()))
        for tallies in fleets:
            self._seen[id(tallies)] = len(tallies.by_adapter)
        return shown, _counts(rest)

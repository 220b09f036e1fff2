"""The machine's queries ([view], [statistics] and the readings behind them, SPEC §3.11), for
``AdapterStateMachine``: pure, they read its state and change none of it."""

from __future__ import annotations

from collections.abc import Iterable

from ._events import AdapterPinned
from ._snapshots import Reading, Refusal, ReplicaStatistics, Statistics, View
from ._state import Counts, Held, Replica, Settings, Wait
from ._values import How


class Queries:
    """The queries of ``AdapterStateMachine``: the state they read is the machine's."""

    _clock: float
    _settings: Settings
    _counts: Counts
    _replicas: dict[str, Replica]
    _demand: dict[str, int]
    _refused: dict[str, tuple[float, str]]
    _leases: dict[int, Held]
    _waiting: dict[int, Wait]
    _pins: dict[str, AdapterPinned]

    def _line(self, rep: Replica) -> int:
        raise NotImplementedError  # the machine's ([share])

    def _load(self, rep: Replica) -> int:
        raise NotImplementedError  # the machine's ([load])

    def _seqs(self, rep: Replica) -> int | None:
        raise NotImplementedError  # the machine's ([load])

    def view(self, replicas: Iterable[str], adapter: str) -> View:
        """Which of ``replicas`` hold ``adapter`` (held or loading) and which have room ([view])."""
        holders: list[str] = []
        with_room: list[str] = []
        known = self._replicas
        clock = self._clock
        # With one router _line is the limit: read in place, since a view asks per candidate.
        alone = self._settings.routers == 1
        for replica in replicas:
            rep = known.get(replica)
            if rep is None or rep.removed:
                with_room.append(replica)
                continue
            held = rep.held
            loading = rep.loading
            if (adapter in held or adapter in loading) and adapter not in rep.unloading:
                holders.append(replica)  # [renew]: an old copy is no holder
            line = rep.limit if alone else self._line(rep)
            if len(held) + len(loading) < line and rep.avoid_until <= clock:
                with_room.append(replica)
        return View(holders=frozenset(holders), with_room=frozenset(with_room))

    def demand(self, adapter: str) -> int:
        """The decayed count of requests for ``adapter`` that [place] and [evict] weigh (§1.3); 0 when
        it has none."""
        return self._demand.get(adapter, 0)

    def refusal(self, adapter: str) -> Refusal | None:
        """The refusal of ``adapter`` in force ([refuse]): until when, and the engine's words; None when
        a request for it would ask an engine."""
        refused = self._refused.get(adapter)
        if refused is None or refused[0] <= self._clock:
            return None
        return Refusal(until=refused[0], message=refused[1])

    def is_met(self, replica: str) -> bool:
        """Whether ``replica`` is in use and its first listing since it was added was answered.

        False for a replica never added or removed.
        """
        rep = self._replicas.get(replica)
        return rep is not None and not rep.removed and rep.met

    def named(self, replica: str) -> frozenset[str]:
        """The adapters the last reading of ``replica``'s engine names ([reading], [read-failed]).

        Empty for a replica not in use, and once a failed read has ended the reading.
        """
        rep = self._replicas.get(replica)
        return frozenset() if rep is None or rep.removed else rep.named

    def reading(self, replica: str) -> Reading | None:
        """What the readings of ``replica``'s engine say ([reading], [load]); None when it is not in use."""
        rep = self._replicas.get(replica)
        if rep is None or rep.removed:
            return None
        running, waiting = rep.sampled if rep.sampled is not None else (None, None)
        return Reading(
            adapters=rep.named,
            foreign=rep.foreign,
            running=running,
            waiting=waiting,
            others=rep.others,
            load=self._load(rep),
            capacity=self._seqs(rep),
            max_loras=rep.max_loras,
        )

    def statistics(self) -> Statistics:
        """A frozen snapshot of the counts and of what every replica in use holds ([statistics])."""
        replicas = {
            rep.id: self._replica_statistics(rep)
            for rep in sorted(self._replicas.values(), key=lambda r: r.id)
            if not rep.removed
        }
        return Statistics(
            loads=dict(sorted(self._counts.loads.items())),
            evictions=dict(sorted(self._counts.evictions.items())),
            grants={
                How.HIT.value: self._counts.hits,
                How.JOINED.value: self._counts.joined,
                How.LOADED.value: self._counts.loaded,
            },
            failures=dict(sorted(self._counts.failures.items())),
            replicas=replicas,
            waiting=len(self._waiting),
            leases=len(self._leases),
            pins={name: self._pins[name].copies for name in sorted(self._pins)},
            warming=frozenset(name for name, pin in self._pins.items() if pin.until_held),
        )

    def replica_statistics(self, replica: str) -> ReplicaStatistics | None:
        """One replica's part of ``statistics()``, without building the rest; None if not in use."""
        rep = self._replicas.get(replica)
        return None if rep is None or rep.removed else self._replica_statistics(rep)

    def _replica_statistics(self, rep: Replica) -> ReplicaStatistics:
        return ReplicaStatistics(
            model=rep.model,
            limit=rep.limit,
            met=rep.met,
            held={name: rep.held[name].in_use for name in sorted(rep.held)},
            loading=tuple(sorted(rep.loading)),
            unloading=tuple(sorted(rep.unloading)),
            queued=len(rep.queue.waiters) if rep.queue is not None else 0,
            in_flight=rep.in_flight,
            failing_until=rep.avoid_until if rep.avoid_until > self._clock else None,
        )

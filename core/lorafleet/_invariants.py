"""The machine's state checked against itself: ``AdapterStateMachine.check_invariants``, for tests
and fuzzing. It reads the machine's private state, as a rule would, and changes none of it but the
index's cold keys, which it first brings up to date (as a placement would)."""

from __future__ import annotations

from ._events import AdapterPinned
from ._index import ColdIndex, Key
from ._state import Held, Load, Operation, Parked, Read, Replica, Unload, Wait


class Invariants:
    """``check_invariants``, for ``AdapterStateMachine``: the state it reads is the machine's."""

    _last_ticket: int
    _next_op: int
    _leases: dict[int, Held]
    _waiting: dict[int, Wait]
    _ops: dict[int, Operation]
    _replicas: dict[str, Replica]
    _where: dict[str, dict[str, Replica]]
    _parked: dict[str, Parked]
    _pins: dict[str, AdapterPinned]
    _due: list[tuple[float, str]]
    _index: ColdIndex[Replica]

    def _reindex(self) -> None:
        raise NotImplementedError  # the machine's

    def _indexed_key(self, rep: Replica) -> Key | None:
        raise NotImplementedError  # the machine's

    def check_invariants(self) -> None:
        """Raise AssertionError if the machine's state contradicts itself (for tests and fuzzing).

        It checks what ``statistics`` cannot show: every operation, lease and waiter is accounted
        for exactly once, and a removed replica is kept exactly as long as it must be.
        """
        uses: dict[int, int] = {}
        for ticket, held in self._leases.items():
            assert 0 < ticket <= self._last_ticket, ticket
            assert ticket not in self._waiting, ticket
            uses[id(held)] = uses.get(id(held), 0) + 1
        for ticket, waited in self._waiting.items():
            assert 0 < ticket <= self._last_ticket, ticket
            if isinstance(waited, Load):
                assert ticket in waited.waiters, ticket
                assert waited.replica.loading.get(waited.adapter) is waited, ticket
            elif isinstance(waited, Unload):
                assert ticket in [t for t, _ in waited.waiters], ticket
                assert waited.replica.unloading.get(waited.adapter) is waited, ticket
            elif isinstance(waited, Read):
                assert [w[0] for w in waited.waiters].count(ticket) == 1, ticket
                assert waited.replica.read is waited, ticket
            elif isinstance(waited, Parked):
                assert [r.ticket for r in waited.routes].count(ticket) == 1, ticket
                assert self._parked.get(waited.adapter) is waited, ticket
            else:
                assert ticket in [w[0] for w in waited.waiters], ticket
                assert waited.replica.queue is waited, ticket
        outstanding: dict[str, int] = {}
        for op, operation in self._ops.items():
            assert 0 < op < self._next_op, op
            assert operation.op == op, op
            rep = operation.replica
            assert self._replicas.get(rep.id) is rep, f"operation {op} of a forgotten replica"
            outstanding[rep.id] = outstanding.get(rep.id, 0) + 1
        in_flight: dict[int, int] = {}  # by the replica object: a forgotten one's id can come back
        granted: dict[int, int] = {}
        for held in self._leases.values():
            in_flight[id(held.replica)] = in_flight.get(id(held.replica), 0) + 1
            granted[id(held.replica)] = granted.get(id(held.replica), 0) + 1
        for ticket, waited in self._waiting.items():
            if isinstance(waited, Parked):
                continue  # [renew]: a parked routed request is counted on no replica
            if isinstance(waited, Read) and next(w for w in waited.waiters if w[0] == ticket)[3] is not None:
                continue  # a routed request not yet assigned is counted on no replica
            in_flight[id(waited.replica)] = in_flight.get(id(waited.replica), 0) + 1
        where = {
            (name, rep.id)
            for rep in self._replicas.values()
            if not rep.removed
            for name in rep.held.keys() | rep.loading.keys()
            if name not in rep.unloading  # [renew]: an old copy is no holder
        }
        assert where == {(name, rid) for name, reps in self._where.items() for rid in reps}, "index"
        assert all(self._where.values()), "empty index entry"
        # [place]'s index of cold keys: up to date once the replicas touched are read again, so that a
        # change that touched no replica shows here.
        self._reindex()
        self._index.check(self._replicas.values(), self._indexed_key)
        for rid, rep in self._replicas.items():
            assert rep.id == rid
            assert rep.in_flight == in_flight.get(id(rep), 0), (rid, rep.in_flight)
            assert rep.granted == granted.get(id(rep), 0), (rid, rep.granted)
            assert rep.outstanding == outstanding.get(rid, 0), (rid, rep.outstanding)
            # An adapter is held, loading or unloading, except an old copy of a changed one ([renew]):
            # held or loading, and its unload waiting for it.
            assert not rep.held.keys() & rep.loading.keys(), rid
            old = rep.unloading.keys() & (rep.held.keys() | rep.loading.keys())
            assert all(rep.unloading[n].renew and rep.unloading[n].op is None for n in old), rid
            idle = {
                n
                for n, h in rep.held.items()
                if not h.in_use and n not in self._pins and n not in rep.named and n not in old
            }
            assert set(rep.idle) == (set() if rep.removed else idle), rid
            for name, held in rep.held.items():
                assert held.current, (rid, name)
                assert held.replica is rep, (rid, name)
                assert held.adapter == name, (rid, name)
                assert held.in_use == uses.get(id(held), 0), (rid, name, held.in_use)
            doomed = [u for load in rep.loading.values() for u in load.victims]
            for name, load in rep.loading.items():
                assert self._ops.get(load.op) is load, (rid, name)
                assert load.adapter == name, (rid, name)
                assert all(self._waiting.get(t) is load for t in load.waiters), (rid, name)
                assert all(rep.unloading.get(u.adapter) is u for u in load.victims), (rid, name)
            for name, unload in rep.unloading.items():
                if name in old:
                    assert all(u is not unload for u in doomed), (rid, name)
                    if name in rep.held and not rep.removed:  # it goes once nothing runs on it
                        assert rep.held[name].in_use or name in rep.named, (rid, name)
                elif unload.op is None:  # a victim: its load still out ([evict])
                    assert sum(u is unload for u in doomed) == 1, (rid, name)
                else:
                    assert self._ops.get(unload.op) is unload, (rid, name)
                assert unload.adapter == name, (rid, name)
                assert all(self._waiting.get(t) is unload for t, _ in unload.waiters), (rid, name)
            assert len(doomed) == sum(u.op is None and n not in old for n, u in rep.unloading.items()), rid
            stamps = list(rep.idle.values())
            assert stamps == sorted(set(stamps)), rid  # they rise along idle: a victim goes back by it
            if rep.listing is None:
                assert not rep.dropped_while_listing, rid
            else:
                assert self._ops.get(rep.listing.op) is rep.listing, rid
            if rep.read is not None:
                assert self._ops.get(rep.read.op) is rep.read, rid
                assert all(self._waiting.get(w[0]) is rep.read for w in rep.read.waiters), rid
            if rep.removed:
                assert rep.outstanding or rep.held, f"removed replica {rid} kept for nothing"
                assert not rep.idle, rid
                assert all(not load.waiters and not load.victims for load in rep.loading.values()), rid
                assert all(u.op is not None or n in old for n, u in rep.unloading.items()), rid
                assert rep.listing is None, rid
                assert rep.read is None, rid
            else:
                assert (rep.due, rid) in self._due, rid

"""RESEARCH ONLY: a machine with another eviction rule, to measure it before the core adopts it.

``FrequencyEvictingMachine`` reaches into ``AdapterStateMachine``'s private state to change one thing,
the choice of victims in [evict]: instead of the least recently used idle adapter, the idle adapter
with the fewest decayed requests on that replica (``ReplicaState.counts``), the least recently used
among equals. Everything else is the real machine's. It is tied to the core's internals on purpose and
is not part of the simulator's public API: when the core adopts the rule this goes away.
"""

from __future__ import annotations

from collections.abc import Callable

from lorafleet import AdapterStateMachine, Command, IssueUnload
from lorafleet._machine import _Load, _Replica, _Unload


class FrequencyEvictingMachine(AdapterStateMachine):
    """The real machine, evicting the idle adapter with the fewest decayed requests first.

    ``attach`` hands it the policy's count of (replica, adapter) before the first request.
    """

    def __init__(self, *, listing_interval: float) -> None:
        super().__init__(listing_interval=listing_interval)
        self._score: Callable[[str, str], int] = lambda replica, adapter: 0

    def attach(self, score: Callable[[str, str], int]) -> None:
        self._score = score

    def _start_load(self, ticket: int, rep: _Replica, adapter: str, path: str) -> list[Command]:
        commands: list[Command] = []
        victims: list[_Unload] = []
        excess = len(rep.held) + len(rep.loading) + 1 - rep.limit
        score = self._score
        replica = rep.id
        while excess > 0 and rep.idle:
            # The fewest decayed requests; the least recently used (first in ``idle``) among equals.
            victim = min(rep.idle, key=lambda name: score(replica, name))
            del rep.idle[victim]
            self._drop(rep, victim)
            unload = _Unload(rep, victim, self._new_op())
            rep.unloading[victim] = unload
            rep.outstanding += 1
            self._ops[unload.op] = unload
            victims.append(unload)
            commands.append(IssueUnload(unload.op, rep.id, victim))
            excess -= 1
        load = _Load(rep, adapter, path, self._new_op(), [ticket], ticket, {u.op for u in victims})
        for unload in victims:
            unload.blocks = load
        rep.loading[adapter] = load
        self._ops[load.op] = load
        self._waiting[ticket] = load
        if not victims:
            commands.append(self._issue(load))
        return commands

"""What ``/health`` says of each replica, in words an operator acts on.

A replica whose listing cannot be read stays ``failing``, with its URL and the last error, from the first
failed read until a read succeeds: not only while the machine's backoff avoids it ([health]), which
runs out between two listings and made the state flap. Placement is the machine's; these are words.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

import anyio

from lorafleet_fleet import Fleet, Replica

from ._readiness import Readiness


def replica_states(
    fleet: Fleet,
    readiness: Readiness,
    replicas: Iterable[Replica],
    retired: Iterable[Replica] = (),
    drained: Collection[str] = (),
) -> dict[str, str]:
    """Each replica's state by id, for ``/health``.

    ``ok``; ``starting`` (its first listing is not in); ``failing: URL: why (...)``: reads of its
    listing fail, or placement avoids it for now after a failure; ``not ready: <why and the fix>`` (it
    answered as a replica that cannot take adapters does); ``draining`` (no longer among the replicas,
    or drained by the operator, with requests still running there); ``drained`` (the operator took it
    out, ``RouterServer.drain``, and nothing runs there now).

    Args:
        replicas: those requests go to; retired: those no longer among them with requests still
            running there; drained: the ids the operator drained.
    """
    now = anyio.current_time()
    states: dict[str, str] = {}
    for replica in replicas:
        states[replica.id] = _state(fleet, readiness, replica, now)
    for replica in retired:
        states.setdefault(replica.id, "draining")
    for rid in sorted(drained):
        states.setdefault(rid, "drained")
    return states


def _state(fleet: Fleet, readiness: Readiness, replica: Replica, now: float) -> str:
    rid = replica.id
    stats = fleet.replica_statistics(rid)
    fix = readiness.fix(rid)
    if stats is None:
        return "removed"
    if fix is not None:
        return f"not ready: {fix}"
    failure = fleet.failure(rid)
    if failure is not None and failure.failed_reads:
        ago = now - (failure.since if failure.since is not None else failure.at)
        if failure.failed_reads == 1:
            note = f"a read of its adapters failed {ago:.0f} s ago"
        else:
            note = f"{failure.failed_reads} reads of its adapters in a row failed, the first {ago:.0f} s ago"
        return f"failing: {failure.url}: {failure.message} ({note})"
    if stats.failing_until is not None:
        why = failure.message if failure is not None else "it failed a call"
        return f"failing: {replica.url}: {why} (avoided for {max(0.0, stats.failing_until - now):.0f} s more)"
    if not stats.met:
        return "starting"
    return "ok"

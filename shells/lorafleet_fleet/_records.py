"""What the fleet's calls answered, kept for operators: each replica's last failure, each adapter's last
failed load.

The machine keeps no words: it counts a replica's failures and avoids it for a while ([health]), and
refuses an adapter for a while ([refuse]). What went wrong, at which URL and when, is the shell's
knowledge, and an operator's first question. Nothing here decides anything: placement never reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import attrs

from lorafleet import Event, IssueLoad, ListingFailed, ListingReceived, LoadFinished, LoadOutcome

from ._types import Replica


@attrs.frozen
class ReplicaFailure:
    """The last failure the fleet saw of one replica in use: a read of its listing that failed, a load
    it gave no answer to, a forwarded request it gave none to (``replica_failed``).

    ``failed_reads`` reads of its listing in a row failed (0: none did, another call failed): from the
    first of them the replica counts as failing, however long the machine's backoff, until a read of
    its listing succeeds, which forgets the record.
    """

    url: str
    message: str
    """What went wrong last, in the fleet's words (the same as its log line)."""
    at: float
    """When, on the fleet's clock (``anyio.current_time()``)."""
    failed_reads: int = 0
    since: float | None = None
    """When the first of ``failed_reads`` failed; None when none did."""


@attrs.frozen
class LoadFailure:
    """The last load of one adapter that failed, on any replica: the engine refused it
    (``adapter_fault``: its words say why), or the replica gave no good answer (``replica_fault``)."""

    replica: str
    outcome: LoadOutcome
    message: str
    at: float
    """When, on the fleet's clock (``anyio.current_time()``)."""


class Records:
    """Each replica's last failure and each adapter's last failed load, as the fleet's calls answered.

    One record per replica in use that failed, forgotten when it is read again or leaves the fleet;
    one per adapter whose load failed, which only the fleet's adapters can be (``route`` asks no
    replica for a name they do not have).
    """

    def __init__(self) -> None:
        self._replicas: dict[str, ReplicaFailure] = {}
        self._loads: dict[str, LoadFailure] = {}

    def replica(self, rid: str) -> ReplicaFailure | None:
        return self._replicas.get(rid)

    def loads(self) -> Mapping[str, LoadFailure]:
        return MappingProxyType(self._loads)

    def answered(self, replica: Replica, current: bool, command: object, event: Event, now: float) -> None:
        """A call to ``replica`` was answered with ``event``.

        Args:
            current: ``replica`` is the server the fleet uses under its id now (not one removed, or
                moved from since the call went out): only then is its own record changed.
        """
        if isinstance(event, LoadFinished) and not event.outcome.succeeded:
            assert isinstance(command, IssueLoad)
            self._loads[command.adapter] = LoadFailure(replica.id, event.outcome, event.message, now)
        if not current:
            return
        if isinstance(event, ListingFailed):
            last = self._replicas.get(replica.id)
            reads = last.failed_reads if last is not None else 0
            since = last.since if last is not None and last.since is not None else now
            self._replicas[replica.id] = ReplicaFailure(replica.url, event.message, now, reads + 1, since)
        elif isinstance(event, ListingReceived):
            self._replicas.pop(replica.id, None)
        elif isinstance(event, LoadFinished) and event.outcome is LoadOutcome.REPLICA_FAULT:
            self.failed(replica, event.message, now)

    def failed(self, replica: Replica, message: str, now: float) -> None:
        """``replica`` failed a call that is no read of its listing: the last error changes, and
        whether its reads fail does not."""
        last = self._replicas.get(replica.id)
        if last is None:
            self._replicas[replica.id] = ReplicaFailure(replica.url, message, now)
        else:
            self._replicas[replica.id] = attrs.evolve(last, message=message, at=now)

    def forget(self, rid: str) -> None:
        """``rid`` left the fleet (or moved to another server): what it failed is no longer news."""
        self._replicas.pop(rid, None)

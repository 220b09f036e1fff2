"""Usage errors: the caller broke the machine's contract.

An engine's failure is never one of these; it arrives as an event. A call that raises one of these
has changed nothing.
"""

from __future__ import annotations


class UsageError(Exception):
    """The caller broke the machine's contract; the machine is as it was before the call."""


class UnknownTicketError(UsageError):
    """A ticket the machine never saw, or one that is in the wrong state for the call."""


class TicketOrderError(UsageError):
    """A new request's ticket is not above every ticket seen before."""


class UnknownOperationError(UsageError):
    """A finish event for an operation that was never issued, already finished, or of another kind."""


class UnknownReplicaError(UsageError):
    """A request names a replica that was never added, or was removed."""


class ReplicaConflictError(UsageError):
    """A replica is added again with another model while it is still known."""


class InvalidValueError(UsageError):
    """An empty name or path, a limit below 1, or a value of the wrong type."""


class ClockWentBackwardsError(UsageError):
    """The time given is earlier than the time given before."""

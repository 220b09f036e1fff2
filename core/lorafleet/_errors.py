"""Usage errors: the caller broke the machine's contract.

An engine's failure is never one of these; it arrives as an event. A call that raises one of these
has changed nothing. Each keeps the facts it names as attributes, so a caller need not parse the text.
"""

from __future__ import annotations

from typing import Any


class UsageError(Exception):
    """The caller broke the machine's contract; the machine is as it was before the call."""


class UnknownTicketError(UsageError):
    """A ticket the machine never saw, or one that is in the wrong state for the call."""

    def __init__(self, message: str, *, ticket: Any) -> None:
        super().__init__(message)
        self.ticket = ticket


class TicketOrderError(UsageError):
    """A new request's ticket is not an integer above every ticket seen before."""

    def __init__(self, message: str, *, ticket: Any, highest: int) -> None:
        super().__init__(message)
        self.ticket = ticket
        self.highest = highest
        """The highest ticket seen so far: the next one must be above it."""


class UnknownOperationError(UsageError):
    """A finish event for an operation that was never issued, already finished, or of another kind."""

    def __init__(self, message: str, *, operation: Any, kind: str) -> None:
        super().__init__(message)
        self.operation = operation
        self.kind = kind
        """What the event said it answers: ``load``, ``unload`` or ``listing``."""


class UnknownReplicaError(UsageError):
    """A request names a replica that was never added, or was removed."""

    def __init__(self, message: str, *, replica: Any) -> None:
        super().__init__(message)
        self.replica = replica


class NotIdleError(UsageError):
    """An adapter an operator would dismiss is not idle on the replica ([dismiss]): ``reason`` says why."""

    def __init__(self, message: str, *, replica: str, adapter: str, reason: str) -> None:
        super().__init__(message)
        self.replica = replica
        self.adapter = adapter
        self.reason = reason


class ReplicaConflictError(UsageError):
    """A replica is added again with another model while it is still known."""

    def __init__(self, message: str, *, replica: str, known_model: str, model: str) -> None:
        super().__init__(message)
        self.replica = replica
        self.known_model = known_model
        self.model = model


class InvalidValueError(UsageError):
    """An empty name or path, a limit below 1, or a value of the wrong type."""

    def __init__(self, message: str, *, field: str, value: Any) -> None:
        super().__init__(message)
        self.field = field
        """The name of the event's field (or argument) that is wrong."""
        self.value = value


class ClockWentBackwardsError(UsageError):
    """The time given is earlier than the time given before."""

    def __init__(self, message: str, *, now: float, last: float) -> None:
        super().__init__(message)
        self.now = now
        self.last = last

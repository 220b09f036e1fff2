"""Events: facts the shell reports to the machine, each a frozen value.

``AdapterStateMachine.handle`` takes any of these; each also has a plain method on the machine that
does the same without building the event.
"""

from __future__ import annotations

import attrs

from ._values import LoadOutcome, UnloadOutcome


@attrs.frozen
class ReplicaAdded:
    """The router will use a replica of ``model`` that holds at most ``limit`` adapters.

    Adding a known replica again with the same model sets its limit.
    """

    replica: str
    model: str
    limit: int


@attrs.frozen
class ReplicasRemoved:
    """The router no longer uses these replicas."""

    replicas: tuple[str, ...]


@attrs.frozen
class LimitSet:
    """The most adapters a replica of ``model`` may hold changed."""

    model: str
    limit: int


@attrs.frozen
class TimeAdvanced:
    """The shell's monotonic clock reads ``now`` (seconds)."""

    now: float


@attrs.frozen
class Requested:
    """A request wants ``adapter`` (stored at ``path``) on ``replica``.

    ``ticket`` names the request for the rest of its life; each new ticket is above every earlier one.
    """

    ticket: int
    replica: str
    adapter: str
    path: str


@attrs.frozen
class Released:
    """The request holding ticket ``ticket`` is done with its adapter."""

    ticket: int


@attrs.frozen
class Cancelled:
    """The request behind ``ticket`` went away; if it was granted, this releases it."""

    ticket: int


@attrs.frozen
class LoadFinished:
    """The engine answered the load ``load``."""

    load: int
    outcome: LoadOutcome
    message: str = ""


@attrs.frozen
class UnloadFinished:
    """The engine answered the unload ``unload``."""

    unload: int
    outcome: UnloadOutcome
    message: str = ""


@attrs.frozen
class ListingReceived:
    """The replica's listing ``listing`` named these adapters."""

    listing: int
    adapters: tuple[str, ...]


@attrs.frozen
class ListingFailed:
    """The replica's listing ``listing`` could not be read."""

    listing: int
    message: str = ""


@attrs.frozen
class AdapterMissing:
    """The replica answered a request for ``adapter`` with "no such model"."""

    replica: str
    adapter: str


Event = (
    ReplicaAdded
    | ReplicasRemoved
    | LimitSet
    | TimeAdvanced
    | Requested
    | Released
    | Cancelled
    | LoadFinished
    | UnloadFinished
    | ListingReceived
    | ListingFailed
    | AdapterMissing
)
"""Every event the machine takes."""

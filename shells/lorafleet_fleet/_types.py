"""What a router hands the fleet and gets back: replicas, leases and errors."""

from __future__ import annotations

import attrs


def _base_url(url: str) -> str:
    return str(url).rstrip("/")


@attrs.frozen
class Replica:
    """One vLLM server: its id, base URL, model, how many adapters it may hold, and its API key.

    The limit belongs to the model: give every replica of a model the same one. The key never
    appears in a repr or a log line.
    """

    id: str
    url: str = attrs.field(converter=_base_url)
    model: str
    limit: int
    api_key: str | None = attrs.field(default=None, repr=False)


class FleetError(Exception):
    """Base of the errors a fleet raises to the router."""


class FleetClosedError(FleetError):
    """The fleet was closed (or not yet entered) while the request wanted an adapter."""


class LoadError(FleetError):
    """An adapter could not be made ready on a replica; see the two kinds below."""

    def __init__(self, replica: Replica, adapter: str, message: str) -> None:
        super().__init__(f"{adapter!r} on replica {replica.id!r}: {message}")
        self.replica = replica
        self.adapter = adapter
        self.message = message
        """The engine's words, or what went wrong on the way to it."""


class AdapterError(LoadError):
    """The adapter itself is wrong (missing, rank too high, not a LoRA for this model...).

    Every replica would refuse it: do not retry it elsewhere.
    """


class ReplicaError(LoadError):
    """This replica failed (an error, a timeout, no answer, a misconfiguration, removed).

    Another replica may well serve the request.
    """

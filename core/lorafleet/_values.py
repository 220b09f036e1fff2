"""The small closed vocabularies the events and commands share.

Each is a ``StrEnum`` so that a trace writes them as plain strings.
"""

from __future__ import annotations

import enum


class _Vocabulary(enum.StrEnum):
    def __repr__(self) -> str:
        # Short, so that traces of events and commands read as the code that makes them.
        return f"{type(self).__name__}.{self.name}"


class How(_Vocabulary):
    """How a request was granted its adapter."""

    HIT = "hit"
    """The replica held the adapter."""
    JOINED = "joined"
    """The replica was already loading it for another request."""
    LOADED = "loaded"
    """This request started the load."""


class Fault(_Vocabulary):
    """Whose fault a failure is, which tells the router whether to try another replica."""

    ADAPTER = "adapter"
    """The adapter itself is wrong; every replica would refuse it, so do not retry elsewhere."""
    REPLICA = "replica"
    """This replica is in trouble; another replica may well serve the request."""
    REQUEST = "request"
    """The request itself makes engines fail: a second replica answered it with a server error too
    ([blame]). Answer it with the engine's error; trying further replicas would only fail them."""


class LoadOutcome(_Vocabulary):
    """What the engine answered to a load."""

    LOADED = "loaded"
    ALREADY_LOADED = "already_loaded"
    """The engine had the name already, which is what the load was for."""
    ADAPTER_FAULT = "adapter_fault"
    REPLICA_FAULT = "replica_fault"

    @property
    def succeeded(self) -> bool:
        return self is LoadOutcome.LOADED or self is LoadOutcome.ALREADY_LOADED


class UnloadOutcome(_Vocabulary):
    """What the engine answered to an unload."""

    UNLOADED = "unloaded"
    NOT_FOUND = "not_found"
    """The engine did not have the name, which is what the unload was for."""
    FAILED = "failed"


class Placed(_Vocabulary):
    """Why placement chose a replica: what a request sent there will find."""

    HELD = "held"
    """The replica holds the adapter: a hit."""
    LOADING = "loading"
    """The replica is loading it: the request joins that load."""
    FREE = "free"
    """A cold load into a free slot."""
    EVICT = "evict"
    """A cold load that unloads the replica's least recently used idle adapter first."""
    OVER = "over"
    """Every candidate is full of adapters in use: a cold load takes the replica over its limit."""
    WAIT = "wait"
    """Every candidate is at its cap: the request waits there for room ([cap])."""

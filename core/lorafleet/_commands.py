"""Commands: what the machine tells the shell to do, each a frozen value.

Operation numbers (``load``, ``unload``, ``listing``) come from one counter, so every operation in a
trace has its own number; the shell reports each one's answer with the matching finish event.
"""

from __future__ import annotations

import attrs

from ._values import Fault, How


@attrs.frozen
class IssueLoad:
    """Ask ``replica`` to load ``adapter`` from ``path``; report it with ``LoadFinished(load)``."""

    load: int
    replica: str
    adapter: str
    path: str


@attrs.frozen
class IssueUnload:
    """Ask ``replica`` to unload ``adapter``; report it with ``UnloadFinished(unload)``."""

    unload: int
    replica: str
    adapter: str


@attrs.frozen
class ReadListing:
    """Read ``replica``'s adapters; report them with ``ListingReceived`` or ``ListingFailed``."""

    listing: int
    replica: str


@attrs.frozen
class Grant:
    """Wake request ``ticket``: its adapter is there and counted as in use until it is released."""

    ticket: int
    how: How


@attrs.frozen
class Fail:
    """Wake request ``ticket`` with an error; ``fault`` says whether another replica may serve it."""

    ticket: int
    fault: Fault
    message: str


Command = IssueLoad | IssueUnload | ReadListing | Grant | Fail
"""Every command the machine gives."""

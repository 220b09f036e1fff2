"""Commands: what the machine tells the shell to do, each a frozen value with keyword-only fields.

Operation numbers (``load``, ``unload``, ``listing``, ``read``) come from one counter, so every operation in a
trace has its own number; the shell reports each one's answer with the matching finish event.
"""

from __future__ import annotations

import attrs

from ._values import Fault, How, Placed


@attrs.frozen(kw_only=True)
class IssueLoad:
    """Ask ``replica`` to load ``adapter`` from ``path``; report it with ``LoadFinished(load)``."""

    load: int
    replica: str
    adapter: str
    path: str


@attrs.frozen(kw_only=True)
class IssueUnload:
    """Ask ``replica`` to unload ``adapter``; report it with ``UnloadFinished(unload)``."""

    unload: int
    replica: str
    adapter: str


@attrs.frozen(kw_only=True)
class ReadListing:
    """Read ``replica``'s adapters; report them with ``ListingReceived`` or ``ListingFailed``."""

    listing: int
    replica: str


@attrs.frozen(kw_only=True)
class ReadEngine:
    """Read what runs and waits on ``replica``'s engine (vLLM's ``/metrics``); report it with
    ``ReadingReceived(read)`` or ``ReadingFailed(read)``."""

    read: int
    replica: str


@attrs.frozen(kw_only=True)
class Assign:
    """Routed request ``ticket`` goes to ``replica``, where it finds its adapter as ``placed`` says.

    Its ``Grant`` or ``Fail`` follows, now or later.
    """

    ticket: int
    replica: str
    placed: Placed


@attrs.frozen(kw_only=True)
class Grant:
    """Wake request ``ticket``: its adapter is there and counted as in use until it is released."""

    ticket: int
    how: How


@attrs.frozen(kw_only=True)
class Fail:
    """Wake request ``ticket`` with an error; ``fault`` says whether another replica may serve it."""

    ticket: int
    fault: Fault
    message: str


@attrs.frozen(kw_only=True)
class MarkMet:
    """``replica``'s first listing since it was added has been answered (well or not).

    Whoever waits for the replica to be met (a shell's ``sync_unknown``) may go on.
    """

    replica: str


Command = IssueLoad | IssueUnload | ReadListing | ReadEngine | Assign | Grant | Fail | MarkMet
"""Every command the machine gives."""

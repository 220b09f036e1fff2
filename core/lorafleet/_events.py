"""Events: facts the shell reports to the machine, each a frozen value with keyword-only fields.

``AdapterStateMachine.handle`` takes any of these, and it is the one way in: the machine's methods
(``request``, ``load_finished``...) are spellings of ``handle`` that build the event for you.
"""

from __future__ import annotations

import attrs

from ._values import LoadOutcome, UnloadOutcome


@attrs.frozen(kw_only=True)
class ReplicaAdded:
    """The router will use a replica of ``model`` that holds at most ``limit`` adapters.

    Adding a known replica again with the same model sets its limit.
    """

    replica: str
    model: str
    limit: int


@attrs.frozen(kw_only=True)
class ReplicasRemoved:
    """The router no longer uses these replicas."""

    replicas: tuple[str, ...]


@attrs.frozen(kw_only=True)
class LimitSet:
    """The most adapters a replica of ``model`` may hold changed."""

    model: str
    limit: int


@attrs.frozen(kw_only=True)
class TimeAdvanced:
    """The shell's monotonic clock reads ``now`` (seconds)."""

    now: float


@attrs.frozen(kw_only=True)
class StandingBy:
    """This router relays its requests to another that decides for the fleet (``on``), or decides
    again (``on`` false): its picture of the engines is wanted only once it decides ([standby])."""

    on: bool


@attrs.frozen(kw_only=True)
class Requested:
    """A request wants ``adapter`` (stored at ``path``) on ``replica``.

    ``ticket`` names the request for the rest of its life; each new ticket is above every earlier one.
    """

    ticket: int
    replica: str
    adapter: str
    path: str


@attrs.frozen(kw_only=True)
class Released:
    """The request holding ticket ``ticket`` is done with its adapter."""

    ticket: int


@attrs.frozen(kw_only=True)
class Cancelled:
    """The request behind ``ticket`` went away; if it was granted, this releases it."""

    ticket: int


@attrs.frozen(kw_only=True)
class LoadFinished:
    """The engine answered the load ``load``."""

    load: int
    outcome: LoadOutcome
    message: str = ""


@attrs.frozen(kw_only=True)
class UnloadFinished:
    """The engine answered the unload ``unload``."""

    unload: int
    outcome: UnloadOutcome
    message: str = ""


@attrs.frozen(kw_only=True)
class ListingReceived:
    """The replica's listing ``listing`` named these adapters."""

    listing: int
    adapters: tuple[str, ...]


@attrs.frozen(kw_only=True)
class ListingFailed:
    """The replica's listing ``listing`` could not be read."""

    listing: int
    message: str = ""


@attrs.frozen(kw_only=True)
class AdapterMissing:
    """The replica answered a request for ``adapter`` with "no such model".

    ``ticket`` is the request that got that answer, reported while its lease is still held: then a
    report about an older copy of the adapter than the one held now is told apart and ignored.
    """

    replica: str
    adapter: str
    ticket: int | None = None


@attrs.frozen(kw_only=True)
class ReplicaFailed:
    """The router saw ``replica`` fail on its own: a forwarded request got no answer (refused, reset,
    timed out). A server error it answered is judged by [blame] instead."""

    replica: str
    message: str = ""


@attrs.frozen(kw_only=True)
class ServedElsewhere:
    """``replica`` served a request that the replicas ``failed`` had answered with a server error (a
    5xx): those failed a request another one served ([blame])."""

    replica: str
    failed: tuple[str, ...]


@attrs.frozen(kw_only=True)
class AdapterPinned:
    """Keep ``adapter`` (stored at ``path``) loaded on ``copies`` replicas (of ``model``, if given).

    Placement chooses the replicas; a pinned adapter is never evicted. Pinning it again changes
    the path, the number of copies or the model.
    """

    adapter: str
    path: str
    copies: int = 1
    model: str | None = None
    # Left out of a vector while false: vectors from before it replay as they were written.
    until_held: bool = attrs.field(default=False, metadata={"omit_default": True})
    """A warming ([warm]): the pin lifts itself once a copy is held, and where the adapter is held
    or pinned already it changes nothing."""


@attrs.frozen(kw_only=True)
class AdapterUnpinned:
    """``adapter`` is no longer pinned: its idle copies may be evicted again."""

    adapter: str


@attrs.frozen(kw_only=True)
class RefusalForgotten:
    """The engine may take ``adapter`` now (its files were fixed, or an operator says so): forget
    its refusal ([forgive]). None: every adapter's."""

    adapter: str | None = None


@attrs.frozen(kw_only=True)
class AdapterChanged:
    """The files behind ``adapter`` changed (new weights, a new config): no request is granted a copy
    loaded before, and the next load reads the new files ([renew]). Its refusal is forgotten."""

    adapter: str


@attrs.frozen(kw_only=True)
class AdapterDismissed:
    """An operator asks that ``replica`` unload ``adapter``, which must be idle there ([dismiss]):
    held, no request of this router on it, not pinned, not named by the last reading, not an old copy."""

    replica: str
    adapter: str


@attrs.frozen(kw_only=True)
class Routed:
    """A request wants ``adapter`` (stored at ``path``) wherever placement puts it ([route]).

    Of ``model``'s replicas when it is given, never one of ``exclude`` (the replicas this request
    tried before). ``ticket`` names the request, as in ``Requested``. ``now``, when given, is the
    shell's clock: the event is then ``TimeAdvanced(now)`` and the request in one, so that placement
    reads a clock as fresh as the request (a replica's backoff may be over).
    """

    ticket: int
    adapter: str
    path: str
    model: str | None = None
    exclude: tuple[str, ...] = ()
    # Left out of a vector while null: vectors from before it replay as they were written.
    now: float | None = attrs.field(default=None, metadata={"omit_default": True})


@attrs.frozen(kw_only=True)
class ReadingReceived:
    """The engine answered the read ``read`` (vLLM's ``/metrics``) with these figures.

    ``adapters``: the adapters with requests running or waiting on it, from any router
    (``vllm:lora_requests_info``), or None when it has no such gauge (older vLLM, the Rust
    frontend). ``running`` and ``waiting``: its requests in the batch and in its queue
    (``vllm:num_requests_running``, ``vllm:num_requests_waiting``), None when it does not say.
    ``max_loras``: how many distinct adapters one batch may use (the gauge's ``max_lora`` label,
    vLLM's ``--max-loras``), None when it does not say.
    """

    read: int
    adapters: tuple[str, ...] | None
    running: int | None = None
    waiting: int | None = None
    max_loras: int | None = None


@attrs.frozen(kw_only=True)
class ReadingFailed:
    """The read ``read`` got no usable answer (none in time, an error, a 5xx, a cut body)."""

    read: int
    message: str = ""


Event = (
    ReplicaAdded
    | ReplicasRemoved
    | LimitSet
    | TimeAdvanced
    | StandingBy
    | Requested
    | Released
    | Cancelled
    | LoadFinished
    | UnloadFinished
    | ListingReceived
    | ListingFailed
    | AdapterMissing
    | ReplicaFailed
    | ServedElsewhere
    | AdapterPinned
    | AdapterUnpinned
    | RefusalForgotten
    | AdapterChanged
    | AdapterDismissed
    | Routed
    | ReadingReceived
    | ReadingFailed
)
"""Every event the machine takes."""

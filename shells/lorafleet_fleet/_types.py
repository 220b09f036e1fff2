"""What a router hands the fleet and gets back: replicas and errors.

Two families, as in the core: a ``FleetError`` is something that went wrong at run time (a replica, an
adapter, a closed fleet); a ``lorafleet.UsageError`` is the router breaking the contract (a bad value,
a fleet used outside ``async with``), raised before anything changed.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import attrs

from lorafleet import InvalidValueError, UsageError


def _invalid(field: str, value: Any, why: str) -> InvalidValueError:
    return InvalidValueError(f"{why}, not {value!r}", field=field, value=value)


def _base_url(url: object) -> object:
    return url.rstrip("/") if isinstance(url, str) else url


def _check_url(url: object) -> None:
    if not isinstance(url, str):
        raise _invalid("url", url, "a replica's url must be a str")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- parsing the port is what checks it
    except ValueError as exc:
        raise _invalid("url", url, f"a replica's url must be an http(s) URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _invalid("url", url, "a replica's url must be an http(s) URL with a host")
    if parts.query or parts.fragment:
        raise _invalid("url", url, "a replica's url must have no query or fragment")
    if parts.path.endswith("/v1"):
        # The form OpenAI clients take; the fleet adds /v1/... itself.
        raise _invalid("url", url, "give the server's root URL, without /v1")


def _check_name(field: str, value: object) -> None:
    if type(value) is not str or not value:
        raise _invalid(field, value, f"a replica's {field} must be a non-empty str")


@attrs.frozen
class Replica:
    """One vLLM server: its id, root URL, model, how many adapters it may hold, and its API key.

    Checked when made. The limit belongs to the model: give every replica of a model the same one.
    The key never appears in a repr or a log line.

    A fleet tells replicas apart by ``id``. A ``Replica`` with a known id and the same URL updates what
    the fleet knows (its key, and its limit, which applies from the next load); one with another URL
    is another server: the old one is removed (requests waiting on it fail with ``ReplicaError``) and
    the new one's listing is read afresh.

    Raises:
        InvalidValueError: an empty id or model, a limit that is not an int of at least 1, or a URL
            that is not an http(s) server root (``http://host:8000``, not ``http://host:8000/v1``).
    """

    id: str
    url: str = attrs.field(converter=_base_url)
    model: str
    limit: int
    api_key: str | None = attrs.field(default=None, repr=False)

    def __attrs_post_init__(self) -> None:
        _check_name("id", self.id)
        _check_url(self.url)
        _check_name("model", self.model)
        if type(self.limit) is not int or self.limit < 1:
            raise _invalid("limit", self.limit, "a replica's limit must be an int of at least 1")
        if self.api_key is not None and type(self.api_key) is not str:
            raise _invalid("api_key", "<redacted>", "a replica's api_key must be a str or None")


# -- run-time errors ----------------------------------------------------------------------------


class FleetError(Exception):
    """Base of the run-time errors a fleet raises to the router."""


class FleetClosedError(FleetError):
    """The fleet was closed: the request waited while it closed, or came after."""


class LoadError(FleetError):
    """An adapter could not be made ready on a replica; see the two kinds below."""

    def __init__(
        self, replica: Replica | None, adapter: str, message: str, *, timeout: float | None = None
    ) -> None:
        where = f" on replica {replica.id!r}" if replica is not None else ""
        super().__init__(f"{adapter!r}{where}: {message}")
        self.replica = replica
        """The replica that failed; None when no replica was asked (``Fleet.route``)."""
        self.adapter = adapter
        self.message = message
        """The engine's words, or what went wrong on the way to it."""
        self.timeout = timeout
        """The seconds the load was given, when it failed for taking longer; None otherwise."""


class AdapterError(LoadError):
    """The adapter itself is wrong (missing, rank too high, not a LoRA for this model...).

    Every replica would refuse it: do not retry it elsewhere. ``replica`` is None for a name the
    fleet's adapter source does not know (no replica was asked).
    """


class ReplicaError(LoadError):
    """This replica failed (an error, a timeout, no answer, a misconfiguration, removed).

    Another replica may well serve the request. From ``Fleet.route``, which tries other replicas
    itself, it means that no healthy replica was left to try: ``replica`` is None and ``tried`` holds
    the error of each replica tried, in order.
    """

    def __init__(
        self,
        replica: Replica | None,
        adapter: str,
        message: str,
        *,
        timeout: float | None = None,
        tried: tuple[ReplicaError, ...] = (),
    ) -> None:
        super().__init__(replica, adapter, message, timeout=timeout)
        self.tried = tried


# -- the router's own misuse --------------------------------------------------------------------


class OutsideBlockError(UsageError):
    """A ``Fleet`` or a ``Lease`` was used outside its ``async with`` block.

    A fleet before it was entered; a lease's ``how`` before its block was entered, its
    ``adapter_missing()`` after its block was left.
    """


class EnteredTwiceError(UsageError):
    """A ``Fleet`` or a ``Lease`` was entered a second time: each is entered once."""


@attrs.frozen
class ReplicaChanges:
    """What ``Fleet.set_replicas`` changed, by replica id: each tuple in name order."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    """Known with another URL, key or limit."""

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)

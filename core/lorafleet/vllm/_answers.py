"""What comes back: a replica's HTTP answer (or its absence) as the event the machine takes.

- Success is a 200 whose body is plain text (never decoded as JSON).
- A name the engine already has is a successful load; a name it has not, a successful unload.
- A failure is the adapter's fault only when vLLM's words say so (``_wording.ADAPTER_AT_FAULT``);
  everything else is the replica's, with a message that names the fix for the misconfigurations
  routers hit (a wrong key, the runtime routes off, LoRA off, a URL that is not the server's root).
"""

from __future__ import annotations

import json
from typing import Any, overload

from lorafleet._commands import IssueLoad, IssueUnload, ReadEngine, ReadListing
from lorafleet._events import (
    ListingFailed,
    ListingReceived,
    LoadFinished,
    ReadingFailed,
    ReadingReceived,
    UnloadFinished,
)
from lorafleet._values import LoadOutcome, UnloadOutcome

from ._metrics import reading_answer
from ._requests import MAX_LISTING_BYTES
from ._wording import (
    ADAPTER_AT_FAULT,
    ALREADY_LOADED,
    LORA_DISABLED,
    MODEL_DOES_NOT_EXIST,
    NOT_FOUND_ON_UNLOAD,
    error_message,
    model_not_found,
    no_such_route,
)

ROUTES_ABSENT = (
    "the runtime LoRA routes are absent on this replica: start vLLM with "
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True in its environment"
)
WRONG_URL = (
    "the replica has no /v1/models (HTTP 404), which every vLLM server has: the URL is wrong; "
    "give the server's root URL, without /v1"
)
UNAUTHORIZED = (
    "the replica refused the API key (401 Unauthorized): give the Replica the key vLLM was started "
    "with (--api-key)"
)
LORA_DISABLED_HINT = "start vLLM with --enable-lora"


def _explain(status: int, body: bytes) -> str:
    """The message for a failed load or unload, naming the fix for the misconfigurations users hit."""
    if status == 401:
        return UNAUTHORIZED
    if no_such_route(status, body):
        return ROUTES_ABSENT
    message = error_message(body)
    if LORA_DISABLED in message:
        return f"LoRA is not enabled on this replica ({LORA_DISABLED_HINT}): {message}"
    return f"HTTP {status}: {message}" if message else f"HTTP {status} with an empty body"


def load_answer(load: int, status: int, body: bytes) -> LoadFinished:
    """The event for a load's answer (its first 4 KiB say all there is: a line of text or an error)."""
    if status == 200:
        return LoadFinished(load=load, outcome=LoadOutcome.LOADED)
    message = error_message(body)
    if status == 400 and any(words in message for words in ALREADY_LOADED):
        return LoadFinished(load=load, outcome=LoadOutcome.ALREADY_LOADED, message=message)
    if status != 401 and not no_such_route(status, body) and any(w in message for w in ADAPTER_AT_FAULT):
        return LoadFinished(load=load, outcome=LoadOutcome.ADAPTER_FAULT, message=message)
    return LoadFinished(load=load, outcome=LoadOutcome.REPLICA_FAULT, message=_explain(status, body))


def unload_answer(unload: int, status: int, body: bytes) -> UnloadFinished:
    """The event for an unload's answer."""
    if status == 200:
        return UnloadFinished(unload=unload, outcome=UnloadOutcome.UNLOADED)
    if status in (400, 404) and not no_such_route(status, body):
        message = error_message(body)
        if NOT_FOUND_ON_UNLOAD in message or model_not_found(body):
            return UnloadFinished(unload=unload, outcome=UnloadOutcome.NOT_FOUND, message=message)
    return UnloadFinished(unload=unload, outcome=UnloadOutcome.FAILED, message=_explain(status, body))


def listing_answer(
    listing: int, status: int, body: bytes, truncated: bool
) -> ListingReceived | ListingFailed:
    """The event for a listing's answer: the adapters are the models whose ``parent`` is set."""
    if status == 404:
        # /v1/models is never behind VLLM_ALLOW_RUNTIME_LORA_UPDATING: without it, this is no vLLM root.
        return ListingFailed(listing=listing, message=WRONG_URL)
    if status != 200:
        return ListingFailed(listing=listing, message=_explain(status, body))
    if truncated or len(body) > MAX_LISTING_BYTES:
        return ListingFailed(listing=listing, message=f"the listing is larger than {MAX_LISTING_BYTES} bytes")
    try:
        data: Any = json.loads(body)
    except ValueError as exc:
        return ListingFailed(listing=listing, message=f"the listing is not JSON: {exc}")
    models = data.get("data") if isinstance(data, dict) else None
    if not isinstance(models, list):
        return ListingFailed(listing=listing, message="the listing has no 'data' list")
    adapters: list[str] = []
    for card in models:
        if not isinstance(card, dict) or not isinstance(card.get("id"), str) or not card["id"]:
            message = f"the listing has a model card without an id: {card!r:.200}"
            return ListingFailed(listing=listing, message=message)
        parent = card.get("parent")
        if parent is not None and not isinstance(parent, str):
            message = f"the listing has a model card with a bad parent: {card!r:.200}"
            return ListingFailed(listing=listing, message=message)
        if parent:
            adapters.append(card["id"])
    return ListingReceived(listing=listing, adapters=tuple(adapters))


def adapter_missing(status: int, body: bytes, adapter: str) -> bool:
    """Whether a forwarded request's answer says the replica does not have ``adapter``.

    vLLM answers a request that names a model it does not serve with 404 "The model `x` does not
    exist." (flat or nested, with "Valid aliases: ..." from 0.32, a string ``model_not_found`` code
    from the Rust frontend), before any stream starts. Then report ``AdapterMissing``.

    Args:
        status: the answer's HTTP status.
        body: the start of its body (the first 4 KiB are plenty).
        adapter: the adapter the request named.
    """
    if status != 404 or no_such_route(status, body):
        return False
    message = error_message(body)
    if MODEL_DOES_NOT_EXIST.format(adapter) in message:
        return True
    return model_not_found(body) and f"`{adapter}`" in message


@overload
def answer_event(
    command: IssueLoad, status: int, body: bytes, *, truncated: bool = False
) -> LoadFinished: ...
@overload
def answer_event(
    command: IssueUnload, status: int, body: bytes, *, truncated: bool = False
) -> UnloadFinished: ...
@overload
def answer_event(
    command: ReadListing, status: int, body: bytes, *, truncated: bool = False
) -> ListingReceived | ListingFailed: ...
@overload
def answer_event(
    command: ReadEngine, status: int, body: bytes, *, truncated: bool = False
) -> ReadingReceived | ReadingFailed: ...
@overload
def answer_event(
    command: IssueLoad | IssueUnload | ReadListing | ReadEngine,
    status: int,
    body: bytes,
    *,
    truncated: bool = False,
) -> LoadFinished | UnloadFinished | ListingReceived | ListingFailed | ReadingReceived | ReadingFailed: ...
def answer_event(
    command: IssueLoad | IssueUnload | ReadListing | ReadEngine,
    status: int,
    body: bytes,
    *,
    truncated: bool = False,
) -> LoadFinished | UnloadFinished | ListingReceived | ListingFailed | ReadingReceived | ReadingFailed:
    """The event for the HTTP answer to ``command``'s request.

    Args:
        command: the call the answer is to.
        status: the HTTP status.
        body: the body, or as much of it as ``HttpRequest.max_answer_bytes`` allowed.
        truncated: the body was longer than that, and was cut.
    """
    match command:
        case IssueLoad():
            return load_answer(command.load, status, body)
        case IssueUnload():
            return unload_answer(command.unload, status, body)
        case ReadListing():
            return listing_answer(command.listing, status, body, truncated)
        case ReadEngine():
            return reading_answer(command.read, status, body, truncated)


@overload
def failure_event(command: IssueLoad, reason: str) -> LoadFinished: ...
@overload
def failure_event(command: IssueUnload, reason: str) -> UnloadFinished: ...
@overload
def failure_event(command: ReadListing, reason: str) -> ListingFailed: ...
@overload
def failure_event(command: ReadEngine, reason: str) -> ReadingFailed: ...
@overload
def failure_event(
    command: IssueLoad | IssueUnload | ReadListing | ReadEngine, reason: str
) -> LoadFinished | UnloadFinished | ListingFailed | ReadingFailed: ...
def failure_event(
    command: IssueLoad | IssueUnload | ReadListing | ReadEngine, reason: str
) -> LoadFinished | UnloadFinished | ListingFailed | ReadingFailed:
    """The event for a call that got no whole answer (timed out, refused, cut off): the replica's fault.

    Args:
        command: the call.
        reason: what happened, in words for the router's logs and errors; it is the event's message.
    """
    match command:
        case IssueLoad():
            return LoadFinished(load=command.load, outcome=LoadOutcome.REPLICA_FAULT, message=reason)
        case IssueUnload():
            return UnloadFinished(unload=command.unload, outcome=UnloadOutcome.FAILED, message=reason)
        case ReadListing():
            return ListingFailed(listing=command.listing, message=reason)
        case ReadEngine():
            return ReadingFailed(read=command.read, message=reason)

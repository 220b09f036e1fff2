"""vLLM's runtime LoRA routes, sans-IO: commands become HTTP requests, HTTP answers become events.

What vLLM answers, version by version (0.6 to 0.34), is in the project's notes from vLLM's source and
from a real server; the rules here follow them:

- Success is a 200 whose body is plain text (never decoded as JSON).
- Error bodies come flat (``{"object":"error","message":...}``, up to 0.10.0), nested
  (``{"error":{"message":...}}``, 0.10.1 on), with ``code`` an integer or (Rust frontend) a string, or
  as FastAPI's ``{"detail": ...}`` and the auth middleware's ``{"error": "Unauthorized"}``.
- "already been loaded" (any of its wordings) is a successful load; "cannot be found" (404 from 0.7.0,
  400 before) is a successful unload.
- Who is at fault is read from the message, not the status: vLLM 0.18+ answers a rank above
  ``--max-lora-rank`` with 500, and 0.7.x a missing path with 400.
"""

from __future__ import annotations

import json
from typing import Any, overload

import attrs

from ._commands import IssueLoad, IssueUnload, ReadListing
from ._events import ListingFailed, ListingReceived, LoadFinished, UnloadFinished
from ._values import LoadOutcome, UnloadOutcome

LOAD_PATH = "/v1/load_lora_adapter"
UNLOAD_PATH = "/v1/unload_lora_adapter"
LISTING_PATH = "/v1/models"

MAX_LISTING_BYTES = 4 << 20
"""A listing larger than this is a failed listing, never a partial one."""
MAX_ANSWER_BYTES = 4 << 10
"""How much of a load's or an unload's answer is read; the rest of an error body is not needed."""

ALREADY_LOADED = ("has already been loaded", "has already beenloaded", "is already loaded")
NOT_FOUND_ON_UNLOAD = "cannot be found"

ADAPTER_AT_FAULT = (
    "No adapter found",  # missing path, no adapter_config.json, unknown hub id
    "greater than max_lora_rank",
    "expected target modules",
    "doesn't contain tensors",
    "does not yet support DoRA",
    "Adapter bias",
    "Missing required configuration fields",
    "unsupported LoRA weight",
    "conflicts with a served base model",
    "must be provided",  # an empty name or path
)
"""Messages that mean every replica would refuse this adapter: the router should not retry it elsewhere."""

ROUTES_ABSENT = (
    "the runtime LoRA routes are absent on this replica: start vLLM with "
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True in its environment"
)
UNAUTHORIZED = (
    "the replica refused the API key (401 Unauthorized): give the Replica the key vLLM was started "
    "with (--api-key)"
)
LORA_DISABLED_HINT = "start vLLM with --enable-lora"


@attrs.frozen
class HttpRequest:
    """One HTTP call to make to a replica, relative to its base URL."""

    method: str
    path: str
    headers: tuple[tuple[str, str], ...]
    body: bytes | None
    max_answer_bytes: int
    """Read at most this many bytes of the answer's body, and one more to tell that it was longer."""

    def __repr__(self) -> str:
        # Never show the key: requests end up in logs and test output.
        headers = tuple((k, "<redacted>" if k.lower() == "authorization" else v) for k, v in self.headers)
        return f"HttpRequest({self.method} {self.path}, headers={headers}, body={self.body!r})"


def http_request(command: IssueLoad | IssueUnload | ReadListing, api_key: str | None = None) -> HttpRequest:
    """The HTTP call that carries out ``command``, with ``Authorization: Bearer`` when there is a key."""
    headers: list[tuple[str, str]] = []
    if api_key:
        headers.append(("Authorization", f"Bearer {api_key}"))
    match command:
        case IssueLoad():
            body = {"lora_name": command.adapter, "lora_path": command.path}
            path = LOAD_PATH
        case IssueUnload():
            body = {"lora_name": command.adapter}
            path = UNLOAD_PATH
        case ReadListing():
            headers.append(("Accept", "application/json"))
            return HttpRequest("GET", LISTING_PATH, tuple(headers), None, MAX_LISTING_BYTES)
    headers.append(("Content-Type", "application/json"))
    return HttpRequest("POST", path, tuple(headers), json.dumps(body).encode(), MAX_ANSWER_BYTES)


def error_message(status: int, body: bytes) -> str:
    """The engine's words from an error answer, whatever shape it came in."""
    text = body[:MAX_ANSWER_BYTES].decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text or f"HTTP {status} with an empty body"
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])  # nested, 0.10.1 on
        if isinstance(data.get("message"), str):
            return str(data["message"])  # flat, up to 0.10.0
        if isinstance(error, str):
            return error  # {"error": "Unauthorized"}
        if "detail" in data:
            detail = data["detail"]
            return detail if isinstance(detail, str) else json.dumps(detail)
    return text


def _routes_absent(status: int, body: bytes) -> bool:
    if status not in (404, 405):
        return False
    try:
        data = json.loads(body[:MAX_ANSWER_BYTES])
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("detail") in ("Not Found", "Method Not Allowed")


def _explain(status: int, body: bytes) -> str:
    """The message for a failed call, naming the fix for the misconfigurations users hit."""
    if status == 401:
        return UNAUTHORIZED
    if _routes_absent(status, body):
        return ROUTES_ABSENT
    message = error_message(status, body)
    if "LoRA is not enabled" in message:
        return f"LoRA is not enabled on this replica ({LORA_DISABLED_HINT}): {message}"
    return f"HTTP {status}: {message}"


def load_answer(load: int, status: int, body: bytes, *, truncated: bool = False) -> LoadFinished:
    """The event for a load's HTTP answer."""
    del truncated  # a load's answer is a line of text or an error; its first 4 KiB say all there is
    if status == 200:
        return LoadFinished(load=load, outcome=LoadOutcome.LOADED)
    message = error_message(status, body)
    if status == 400 and any(words in message for words in ALREADY_LOADED):
        return LoadFinished(load=load, outcome=LoadOutcome.ALREADY_LOADED, message=message)
    if status != 401 and not _routes_absent(status, body) and any(w in message for w in ADAPTER_AT_FAULT):
        return LoadFinished(load=load, outcome=LoadOutcome.ADAPTER_FAULT, message=message)
    return LoadFinished(load=load, outcome=LoadOutcome.REPLICA_FAULT, message=_explain(status, body))


def unload_answer(unload: int, status: int, body: bytes, *, truncated: bool = False) -> UnloadFinished:
    """The event for an unload's HTTP answer."""
    del truncated
    if status == 200:
        return UnloadFinished(unload=unload, outcome=UnloadOutcome.UNLOADED)
    if status in (400, 404) and not _routes_absent(status, body):
        message = error_message(status, body)
        if NOT_FOUND_ON_UNLOAD in message or _model_not_found(body):
            return UnloadFinished(unload=unload, outcome=UnloadOutcome.NOT_FOUND, message=message)
    return UnloadFinished(unload=unload, outcome=UnloadOutcome.FAILED, message=_explain(status, body))


def _model_not_found(body: bytes) -> bool:
    # The Rust frontend answers an unload of an unknown name as model-not-found, with a string code.
    try:
        data = json.loads(body[:MAX_ANSWER_BYTES])
    except ValueError:
        return False
    error = data.get("error") if isinstance(data, dict) else None
    return isinstance(error, dict) and error.get("code") == "model_not_found"


def listing_answer(
    listing: int, status: int, body: bytes, *, truncated: bool = False
) -> ListingReceived | ListingFailed:
    """The event for a listing's HTTP answer: the adapters are the models whose ``parent`` is set."""
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
            return ListingFailed(
                listing=listing, message=f"the listing has a model card without an id: {card!r:.200}"
            )
        parent = card.get("parent")
        if parent is not None and not isinstance(parent, str):
            return ListingFailed(
                listing=listing, message=f"the listing has a model card with a bad parent: {card!r:.200}"
            )
        if parent:
            adapters.append(card["id"])
    return ListingReceived(listing=listing, adapters=tuple(adapters))


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
    command: IssueLoad | IssueUnload | ReadListing, status: int, body: bytes, *, truncated: bool = False
) -> LoadFinished | UnloadFinished | ListingReceived | ListingFailed: ...
def answer_event(
    command: IssueLoad | IssueUnload | ReadListing, status: int, body: bytes, *, truncated: bool = False
) -> LoadFinished | UnloadFinished | ListingReceived | ListingFailed:
    """The event for ``command``'s HTTP answer."""
    match command:
        case IssueLoad():
            return load_answer(command.load, status, body, truncated=truncated)
        case IssueUnload():
            return unload_answer(command.unload, status, body, truncated=truncated)
        case ReadListing():
            return listing_answer(command.listing, status, body, truncated=truncated)


@overload
def failure_event(command: IssueLoad, reason: str) -> LoadFinished: ...
@overload
def failure_event(command: IssueUnload, reason: str) -> UnloadFinished: ...
@overload
def failure_event(command: ReadListing, reason: str) -> ListingFailed: ...
@overload
def failure_event(
    command: IssueLoad | IssueUnload | ReadListing, reason: str
) -> LoadFinished | UnloadFinished | ListingFailed: ...
def failure_event(
    command: IssueLoad | IssueUnload | ReadListing, reason: str
) -> LoadFinished | UnloadFinished | ListingFailed:
    """The event for a call that got no answer: a timeout, a refused or dropped connection."""
    message = f"no answer from the replica: {reason}"
    match command:
        case IssueLoad():
            return LoadFinished(load=command.load, outcome=LoadOutcome.REPLICA_FAULT, message=message)
        case IssueUnload():
            return UnloadFinished(unload=command.unload, outcome=UnloadOutcome.FAILED, message=message)
        case ReadListing():
            return ListingFailed(listing=command.listing, message=message)

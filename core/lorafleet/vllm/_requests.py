"""What goes out: the HTTP call that carries out each of the machine's calls to a replica."""

from __future__ import annotations

import json

import attrs

from lorafleet._commands import IssueLoad, IssueUnload, ReadEngine, ReadListing

LOAD_PATH = "/v1/load_lora_adapter"
METRICS_PATH = "/metrics"
UNLOAD_PATH = "/v1/unload_lora_adapter"
LISTING_PATH = "/v1/models"

MAX_LISTING_BYTES = 4 << 20
"""A listing larger than this is a failed listing, never a partial one."""
MAX_METRICS_BYTES = 4 << 20
"""A ``/metrics`` body larger than this is not read: the read fails."""
MAX_ANSWER_BYTES = 4 << 10
"""How much of a load's or an unload's answer is read; the rest of an error body is not needed."""


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


def http_request(
    command: IssueLoad | IssueUnload | ReadListing | ReadEngine, api_key: str | None = None
) -> HttpRequest:
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
        case ReadEngine():
            # vLLM's key guards /v1 only; it is sent anyway, for a proxy that guards everything.
            headers.append(("Accept", "text/plain"))
            return HttpRequest("GET", METRICS_PATH, tuple(headers), None, MAX_METRICS_BYTES)
    headers.append(("Content-Type", "application/json"))
    return HttpRequest("POST", path, tuple(headers), json.dumps(body).encode(), MAX_ANSWER_BYTES)

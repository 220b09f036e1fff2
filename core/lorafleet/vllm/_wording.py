"""What vLLM says, release line by release line (0.6 to 0.34): the part of the wire a new release changes.

From the project's notes on vLLM's source and a real server:

- Error bodies come flat (``{"object":"error","message":...}``, up to 0.10.0), nested
  (``{"error":{"message":...}}``, 0.10.1 on), with ``code`` an integer or (Rust frontend) a string, or
  as FastAPI's ``{"detail": ...}`` and the auth middleware's ``{"error": "Unauthorized"}``.
- "already been loaded" (any of its wordings) answers a load of a name the engine has; "cannot be
  found" (404 from 0.7.0, 400 before) an unload of a name it has not.
- Who is at fault is in the message, not the status: vLLM 0.18+ answers a rank above
  ``--max-lora-rank`` with 500, and 0.7.x a missing path with 400.
"""

from __future__ import annotations

import json
from typing import Any

from ._requests import MAX_ANSWER_BYTES

ALREADY_LOADED = ("has already been loaded", "has already beenloaded", "is already loaded")
NOT_FOUND_ON_UNLOAD = "cannot be found"
LORA_DISABLED = "LoRA is not enabled"
MODEL_DOES_NOT_EXIST = "The model `{}` does not exist"
"""A request naming a model the server does not serve (every version; 0.32+ adds "Valid aliases")."""

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


def error_message(body: bytes) -> str:
    """The engine's words from an error answer, whatever shape it came in ("" when there are none)."""
    text = body[:MAX_ANSWER_BYTES].decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text
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


def no_such_route(status: int, body: bytes) -> bool:
    """FastAPI's own 404 or 405: the server has no such route (not an answer from a LoRA route)."""
    if status not in (404, 405):
        return False
    data = _json(body)
    return isinstance(data, dict) and data.get("detail") in ("Not Found", "Method Not Allowed")


def model_not_found(body: bytes) -> bool:
    """The Rust frontend's answer to an unload of an unknown name: model-not-found, with a string code."""
    data = _json(body)
    error = data.get("error") if isinstance(data, dict) else None
    return isinstance(error, dict) and error.get("code") == "model_not_found"


def _json(body: bytes) -> Any:
    try:
        return json.loads(body[:MAX_ANSWER_BYTES])
    except ValueError:
        return None

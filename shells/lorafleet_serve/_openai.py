"""The router's own answers, shaped as OpenAI's API shapes them, and the little ASGI it needs."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

JSON = (b"content-type", b"application/json")


class RefusedError(Exception):
    """A request the router answers itself with an OpenAI-shaped error, never forwarded.

    Args:
        status: the HTTP status.
        message: what the client reads: never a key or a path on the server, nor an engine's words
            but those answering the client's own request (a server error the request caused).
        code: OpenAI's ``code`` (``model_not_found``, ``invalid_api_key``...), also the log's ``error``.
        kind: OpenAI's ``type``.
        param: the request field at fault, if one is.
    """

    def __init__(
        self,
        status: int,
        message: str,
        code: str,
        *,
        kind: str = "invalid_request_error",
        param: str | None = None,
        headers: tuple[tuple[bytes, bytes], ...] = (),
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.kind = kind
        self.param = param
        self.headers = headers

    def body(self) -> bytes:
        error = {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}
        return json.dumps({"error": error}, ensure_ascii=False).encode()


def model_not_found(model: str) -> RefusedError:
    return RefusedError(
        404,
        f"The model `{model}` does not exist or you do not have access to it.",
        "model_not_found",
        param="model",
    )


async def respond(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def respond_json(send: Send, status: int, data: Any) -> None:
    await respond(send, status, json.dumps(data, ensure_ascii=False).encode(), [JSON])


async def refuse(send: Send, refusal: RefusedError, *extra: tuple[bytes, bytes]) -> None:
    """Answer ``refusal``, with ``extra`` headers (the request's id)."""
    await respond(send, refusal.status, refusal.body(), [JSON, *refusal.headers, *extra])


async def lifespan(receive: Receive, send: Send) -> None:
    """Answer an ASGI server's lifespan messages: the apps here start and stop with nothing to do."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def want_method(method: str, wanted: str, path: str) -> None:
    """Refuse a request whose method is not ``wanted`` with a 405 naming the one that is."""
    if method != wanted:
        raise RefusedError(
            405,
            f"Method not allowed ({method} {path}): use {wanted}",
            "method_not_allowed",
            headers=((b"allow", wanted.encode()),),
        )

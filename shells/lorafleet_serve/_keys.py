"""The keys a request to the router's own routes shows: ``Authorization: Bearer <key>``."""

from __future__ import annotations

import hmac

from ._openai import RefusedError, Scope

NO_KEY = "missing_api_key"
WRONG_KEY = "invalid_api_key"


def bearer(scope: Scope) -> bytes | None:
    """The token of the request's ``Authorization: Bearer`` header; None without one."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = value.partition(b" ")
            return token.strip() if scheme.lower() == b"bearer" else None
    return None


def require(scope: Scope, key: bytes, what: str) -> None:
    """Refuse the request (401) unless it shows ``key``; ``what`` names what wants it, in the message.

    Raises:
        RefusedError: no key, or another one.
    """
    token = bearer(scope)
    if token is None:
        raise RefusedError(
            401,
            f"{what} wants a key: send Authorization: Bearer <key>",
            NO_KEY,
            headers=((b"www-authenticate", b"Bearer"),),
        )
    if not hmac.compare_digest(token, key):
        raise RefusedError(
            401,
            f"Incorrect key provided for {what}",
            WRONG_KEY,
            headers=((b"www-authenticate", b"Bearer"),),
        )

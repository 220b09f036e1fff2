"""Headers across the router: the client's go to the replica, the replica's come back, less what is
the hop's own; and every request has an id.

Upstream, the router keeps for itself the hop-by-hop headers (RFC 9110 7.6.1, and any the client's
``Connection`` names), ``Host`` and ``Content-Length`` (its client sets them for the replica),
``Authorization`` (the router's own key, replaced by the replica's), and ``Accept-Encoding``
(``identity``: the router reads the answers it judges, a "does not exist" or a stream's usage).
Everything else goes as sent, ``x-request-id``, ``traceparent`` and custom headers included.

Each request's id is the client's ``x-request-id``, or one made here; it goes upstream, comes back as
``x-request-id`` and is on every log line about the request. A request is sorted in one pass over its
headers: a set look-up per header, the hot path's only cost here.
"""

from __future__ import annotations

import contextvars
import json
import logging
import random
import re

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
VIA = b"x-lorafleet-via"
"""The header a request one router relays to another carries (``_peers``): the relaying router's id."""
KEPT = HOP_BY_HOP | {b"host", b"content-length", b"authorization", b"accept-encoding", b"expect", VIA}
"""Client headers the router does not forward (names as ASGI gives them: lower case)."""
_SORTED = KEPT | {b"x-request-id", b"content-type"}
"""Names the pass over a request's headers looks at: the kept ones and those it takes note of."""
RELAYED_NOT = HOP_BY_HOP | {b"date", b"server", b"x-request-id"}
"""A replica's headers the router does not relay: its own server sets ``date`` (and ``server``: none),
and the request's id is the router's to say."""
REQUEST_ID = b"x-request-id"
JSON = (b"content-type", b"application/json")
_PLAIN = re.compile(r"[A-Za-z0-9_.:/@+\-]+")

request_id: contextvars.ContextVar[bytes | None] = contextvars.ContextVar("request_id", default=None)
"""The id of the request the running task serves: the log lines about it carry it."""


def new_id() -> str:
    """A request id: 32 hex digits, as vLLM's own. Not a secret: the process's own random numbers,
    without a system call a request."""
    return f"{random.getrandbits(128):032x}"


def upstream_headers(headers: list[tuple[bytes, bytes]]) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """What of a request's ``headers`` goes to the replica (the request's id last), and the id.

    The client's id is kept as sent; a request without one (or with an empty one) gets one.
    ``application/json`` is the content type of a request that names none.
    """
    out: list[tuple[bytes, bytes]] = []
    rid = b""
    typed = False
    named: bytes | None = None
    for header in headers:
        name = header[0]
        if name in _SORTED:
            if name == b"content-type":
                typed = True
            else:
                if name == REQUEST_ID:
                    rid = header[1]
                elif name == b"connection":
                    named = header[1]
                continue
        out.append(header)
    if named is not None:
        # "Connection: close, X-Hop" makes X-Hop the hop's own too (RFC 9110 7.6.1).
        hop = {token.strip().lower() for token in named.split(b",")} - {b"close", b"keep-alive"}
        if hop:
            out = [h for h in out if h[0] not in hop]
    if not typed:
        out.append(JSON)
    if not rid:
        rid = new_id().encode()
    out.append((REQUEST_ID, rid))
    return out, rid


def relayed(headers: list[tuple[bytes, bytes]], rid: bytes) -> list[tuple[bytes, bytes]]:
    """What of a replica's answer ``headers`` goes back to the client, with the request's id."""
    out = [(k, v) for k, v in headers if k.lower() not in RELAYED_NOT]
    out.append((REQUEST_ID, rid))
    return out


class RequestIds(logging.Filter):
    """On the router's and the fleet's loggers: a line logged while a request is served (a load it
    started, a replica that failed it) ends with that request's id, unless the line says it already."""

    def filter(self, record: logging.LogRecord) -> bool:
        rid = request_id.get()
        if rid is not None:
            message = record.getMessage()
            if "request_id=" not in message:
                record.msg = f"{message} request_id={logfmt(rid.decode('latin-1'))}"
                record.args = None
        return True


def logfmt(value: object) -> str:
    """A value for a logfmt line: as it is when plain, else quoted (newlines escaped) so that a value a
    client chose cannot forge a line."""
    text = str(value)
    return text if _PLAIN.fullmatch(text) else json.dumps(text)

"""The relay's HTTP client, one per replica: httpx (under trio, or when given one) or aiohttp (asyncio).

Profiled under load (bench/NOTES.md, issue 38), httpx cost the router about 1 ms of CPU per forwarded
request, and more as connections grew: its pool looks over every connection, asking the socket of
each idle one whether it is readable, for every request. aiohttp keeps idle connections in a queue
per host and parses in C; it runs on asyncio alone, so trio keeps httpx.

Both are wrapped alike: ``post()`` opens an answer (its status, raw headers, then its body as it
comes), and three exceptions say what went wrong, so the router's relay is written once.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol

import anyio
import httpx

from lorafleet_fleet import KEEPALIVE_EXPIRY

if TYPE_CHECKING:
    import aiohttp


class BusyError(Exception):
    """No connection to the replica came free in time: the router has too many requests open."""


class NoAnswerError(Exception):
    """The replica gave no answer (no connection, a timeout): the message says which."""


class CutError(Exception):
    """The replica's answer stopped before its end."""


class Answer(Protocol):
    """An answer being received."""

    status: int
    headers: list[tuple[bytes, bytes]]

    def chunks(self) -> AsyncIterator[bytes]:
        """The body, as it comes, undone of its transfer encoding. Raises ``CutError``."""
        ...

    async def aclose(self) -> None:
        """Let the answer go (its connection back to the pool, or dropped when the body was not read
        to its end); it finishes even when the caller is being cancelled."""
        ...


class Forwarder(Protocol):
    """A replica's connection pool."""

    async def post(self, url: str, body: bytes, headers: list[tuple[bytes, bytes]]) -> Answer:
        """Send the request and read the answer's head. Raises ``BusyError``, ``NoAnswerError``."""
        ...

    async def aclose(self) -> None: ...


def _text(value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value.decode("latin-1")


def _said(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class _HttpxAnswer:
    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status = response.status_code
        self.headers = response.headers.raw

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.aiter_raw():
                yield chunk
        except httpx.HTTPError as exc:
            raise CutError(_said(exc)) from None

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            await self._response.aclose()


class HttpxForwarder:
    """Forwards with an ``httpx.AsyncClient`` (give it ``cookies=NoCookies()``); closes it in ``aclose``."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def post(self, url: str, body: bytes, headers: list[tuple[bytes, bytes]]) -> Answer:
        client = self.client
        request = client.build_request("POST", url, content=body, headers=headers)
        try:
            response = await client.send(request, stream=True)
        except httpx.PoolTimeout:
            raise BusyError from None
        except httpx.HTTPError as exc:
            raise NoAnswerError(_said(exc)) from None
        return _HttpxAnswer(response)

    async def aclose(self) -> None:
        await self.client.aclose()


class _AiohttpAnswer:
    def __init__(self, response: aiohttp.ClientResponse, forwarder: AiohttpForwarder) -> None:
        self._response = response
        self._forwarder: AiohttpForwarder | None = forwarder
        self.status = response.status
        self.headers = list(response.raw_headers)

    async def chunks(self) -> AsyncIterator[bytes]:
        import aiohttp

        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise CutError(_said(exc)) from None

    async def aclose(self) -> None:
        if self._forwarder is not None:
            self._forwarder.running -= 1
            self._forwarder = None
        # Closing an answer not read to its end drops its connection, as httpx does; one read to its
        # end has gone back to the pool already.
        self._response.close()


class AiohttpForwarder:
    """Forwards with an ``aiohttp.ClientSession`` made here, on the running asyncio loop.

    Args:
        connect: seconds to wait for a connection, a free one from the pool included (httpx's
            ``connect`` and ``pool``).
        read: seconds without a byte from the replica before it is given up.
        max_connections: connections to the replica at most; more requests wait for one.
        tls: the TLS context for ``https`` replicas.
    """

    def __init__(self, *, connect: float, read: float, max_connections: int, tls: ssl.SSLContext) -> None:
        import aiohttp

        self._max = max_connections
        self.running = 0
        """Requests sent and not closed: each holds a connection."""
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
                limit=max_connections,
                limit_per_host=0,
                ssl=tls,
                # The replicas are few and named in the configuration: no DNS cache to go stale.
                use_dns_cache=False,
                # Below the replica's own keep-alive (vLLM's 5 s): a request sent on a connection the
                # server is closing fails with no answer. aiohttp's default is 15 s.
                keepalive_timeout=KEEPALIVE_EXPIRY,
            ),
            timeout=aiohttp.ClientTimeout(total=None, connect=connect, sock_read=read),
            cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=False,
            skip_auto_headers=("accept-encoding", "content-type"),
        )

    async def post(self, url: str, body: bytes, headers: list[tuple[bytes, bytes]]) -> Answer:
        import aiohttp

        # Every request in flight holds a connection: past the limit, a timeout was a wait for one.
        full = self.running >= self._max
        # aiohttp takes str and writes them as UTF-8: a value that is not UTF-8 (obs-text) goes as
        # Latin-1 read, which changes its bytes, but never its ASCII.
        try:
            text = [(k.decode(), v.decode()) for k, v in headers]
        except UnicodeDecodeError:
            text = [(k.decode("latin-1"), _text(v)) for k, v in headers]
        self.running += 1
        try:
            response = await self.session.post(url, data=body, headers=text, allow_redirects=False)
        except aiohttp.ConnectionTimeoutError as exc:
            self.running -= 1
            if full:
                raise BusyError from None
            raise NoAnswerError(_said(exc)) from None
        except (TimeoutError, aiohttp.ClientError) as exc:
            self.running -= 1
            raise NoAnswerError(_said(exc)) from None
        except BaseException:
            self.running -= 1
            raise
        return _AiohttpAnswer(response, self)

    async def aclose(self) -> None:
        await self.session.close()

"""``lorafleet serve`` and request bodies over ``max_body_bytes``: every client gets its 413, and the
connection takes the next request (or is closed with ``connection: close``, past what the router reads).

Over real HTTP on 127.0.0.1, under asyncio and trio, with httpx's async and sync clients, bodies sent
with a Content-Length and chunked. A client that sends its whole body before reading (httpx does) got
a reset instead of the 413 when the router answered early and closed the connection.
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from lorafleet_serve import Config, ReplicaConfig, RouterServer
from lorafleet_standin import StandInServer

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_task_left_running")]

BOUND = 1 << 20
HELLO = {"model": "a0", "prompt": "hello", "max_tokens": 4}
PIECE = 64 << 10


def body_of(size: int) -> bytes:
    """A completion's body of ``size`` bytes or a little more."""
    return json.dumps({"model": "a0", "prompt": "x" * size}).encode()


def local_port(answer: httpx.Response) -> int:
    """The client's port of the connection ``answer`` came on: the same port, the same connection."""
    return int(answer.extensions["network_stream"].get_extra_info("client_addr")[1])


def router_config(standin: StandInServer, adapter_dir: Path) -> Config:
    replica = ReplicaConfig(id="r0", url=standin.url, model="tiny", limit=2)
    return Config(
        replicas=(replica,), adapter_root=adapter_dir, port=0, max_body_bytes=BOUND, shutdown_timeout=1.0
    )


def assert_too_large(answer: httpx.Response) -> None:
    assert answer.status_code == 413, answer.text
    assert answer.json()["error"]["code"] == "request_too_large"
    assert "connection" not in answer.headers  # the body was read: the connection stays open


@pytest.mark.parametrize("size", [BOUND + 1024, 8 << 20], ids=["just-over", "8MiB"])
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_an_async_client_gets_413_and_its_connection_goes_on(
    serve: Callable[..., StandInServer], adapter_dir: Path, size: int, chunked: bool
) -> None:
    standin = serve()
    body = body_of(size)

    async def pieces() -> AsyncIterator[bytes]:
        for i in range(0, len(body), PIECE):
            yield body[i : i + PIECE]

    async with (
        RouterServer(router_config(standin, adapter_dir), environ={}) as server,
        httpx.AsyncClient(base_url=server.url, timeout=30) as client,
    ):
        big = await client.post("/v1/completions", content=pieces() if chunked else body)
        assert_too_large(big)
        after = await client.post("/v1/completions", json=HELLO)
        assert after.status_code == 200, after.text
        assert local_port(after) == local_port(big)
    assert len(standin.app.calls_to("completions")) == 1


@pytest.mark.parametrize("size", [BOUND + 1024, 8 << 20], ids=["just-over", "8MiB"])
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_a_sync_client_gets_413_and_its_connection_goes_on(
    serve: Callable[..., StandInServer], adapter_dir: Path, size: int, chunked: bool
) -> None:
    standin = serve()
    body = body_of(size)

    def pieces() -> Iterator[bytes]:
        for i in range(0, len(body), PIECE):
            yield body[i : i + PIECE]

    def send_two(url: str) -> tuple[httpx.Response, httpx.Response, set[int]]:
        with httpx.Client(base_url=url, timeout=30) as client:
            big = client.post("/v1/completions", content=pieces() if chunked else body)
            port = local_port(big)
            after = client.post("/v1/completions", json=HELLO)
            return big, after, {port, local_port(after)}

    async with RouterServer(router_config(standin, adapter_dir), environ={}) as server:
        big, after, ports = await anyio.to_thread.run_sync(send_two, server.url)
    assert_too_large(big)
    assert after.status_code == 200, after.text
    assert len(ports) == 1


def exchange(url: str, request: bytes) -> tuple[bytes, bytes]:
    """Send ``request`` on a new connection, and read what comes back until the router closes it:
    the answer's head and the rest."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request)
        received = b""
        while chunk := sock.recv(1 << 16):
            received += chunk
    head, _, rest = received.partition(b"\r\n\r\n")
    return head, rest


async def test_a_body_declared_past_what_the_router_reads_is_answered_at_once_and_closed(
    serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    """Past four times the bound (16 MiB at least), nothing is read: 413 and connection: close."""
    standin = serve()
    headers = (
        b"POST /v1/completions HTTP/1.1\r\nHost: router\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % (64 << 20)
    )
    async with RouterServer(router_config(standin, adapter_dir), environ={}) as server:
        head, rest = await anyio.to_thread.run_sync(exchange, server.url, headers)
    lines = head.decode().lower().split("\r\n")
    assert lines[0].split()[:2] == ["http/1.1", "413"]  # the reason phrase is the server's (none, or one)
    assert "connection: close" in lines
    assert json.loads(rest)["error"]["code"] == "request_too_large"


async def test_a_body_sent_to_a_route_that_takes_none_is_read_and_dropped(
    serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    """A refusal before the body is read (a 404, a 401) reads it first too: the connection goes on."""
    standin = serve()
    config = router_config(standin, adapter_dir)
    async with (
        RouterServer(Config(**{**_fields(config), "api_key_env": "KEY"}), environ={"KEY": "k"}) as server,
        httpx.AsyncClient(base_url=server.url, timeout=30) as client,
    ):
        answers = [
            await client.post("/v1/audio/transcriptions", content=body_of(BOUND // 2)),
            await client.post("/v1/completions", content=body_of(4 << 20)),  # no key: 401
            await client.get("/health"),
        ]
        assert [a.status_code for a in answers] == [404, 401, 200]
        assert len({local_port(a) for a in answers}) == 1


def _fields(config: Config) -> dict[str, Any]:
    import attrs

    return attrs.asdict(config, recurse=False)

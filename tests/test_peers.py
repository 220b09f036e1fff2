"""Routers told their peers: the ready one up the longest decides, the others relay to it, and when it
goes the next one decides (issue 33; ``lorafleet_serve._peers``). Over real HTTP, against stand-ins.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import random
import re
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import anyio
import attrs
import httpx
import pytest

from lorafleet_serve import Config, ConfigError, ReplicaConfig, RouterServer
from lorafleet_serve._config import build, check, settings_of
from lorafleet_serve._main import config_of, parser, summary
from lorafleet_serve._peers import Peer, leader_of
from lorafleet_standin import StandInServer

from conftest import counted

ADAPTERS = [f"lora-{i}" for i in range(6)]
"""Six adapters on two engines of limit 2: four fit at once."""


def test_the_leader_is_the_router_up_the_longest() -> None:
    a, b, c = Peer("http://a", "ff", 10.0), Peer("http://b", "00", 20.0), Peer("http://c", "11", 10.0)
    assert leader_of([a, b, c]) == c  # up as long as a: the smaller id
    assert leader_of([b]) == b
    assert leader_of([]) is None


def _config(engines: list[StandInServer], root: Path) -> Config:
    replicas = tuple(
        ReplicaConfig(id=f"r{i}", url=engine.url, model="tiny", limit=2) for i, engine in enumerate(engines)
    )
    return Config(replicas=replicas, adapter_root=root, port=0, shutdown_timeout=5.0)


@contextlib.asynccontextmanager
async def _pair(config: Config) -> AsyncIterator[tuple[RouterServer, RouterServer]]:
    """Two routers told of each other, looked at when the test says: a decides, b relays to it."""
    async with RouterServer(config) as a, RouterServer(config) as b:
        everyone = attrs.evolve(config, peers=(a.url, b.url), peers_interval=3600.0)
        for server in (a, b):
            assert await server.reload(everyone)
        await b.peers.look()
        assert b.peers.leader == a.url
        yield a, b


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_followers_relay_to_the_leader_and_take_over_when_it_goes(
    serve: Callable[..., StandInServer], built_adapters: Path
) -> None:
    config = _config([serve(), serve()], built_adapters)
    draw = random.Random(33)
    weights = [1 / (rank + 1) for rank in range(len(ADAPTERS))]
    answers: list[tuple[str, str, int, str]] = []

    async def send(client: httpx.AsyncClient, urls: dict[str, str], n: int) -> None:
        limiter = anyio.Semaphore(4)

        async def one(router: str, adapter: str) -> None:
            async with limiter:
                body = {"model": adapter, "prompt": "hello", "max_tokens": 2}
                answer = await client.post(f"{urls[router]}/v1/completions", json=body)
            named = answer.json().get("model", "") if answer.status_code == 200 else answer.text[:300]
            answers.append((router, adapter, answer.status_code, named))

        async with anyio.create_task_group() as tasks:
            for _ in range(n):
                tasks.start_soon(one, draw.choice(sorted(urls)), draw.choices(ADAPTERS, weights)[0])

    async with (
        httpx.AsyncClient(timeout=60) as client,
        RouterServer(config) as a,
        RouterServer(config) as c,
    ):
        async with RouterServer(config) as b:
            # b, though the last to start here, has been up the longest: it leads.
            b.peers.up_since = a.peers.up_since - 60
            # Looked at when the test says (an hour is never, here), so that what each sees is known.
            everyone = attrs.evolve(config, peers=(a.url, b.url, c.url), peers_interval=3600.0)
            for server in (a, b, c):
                assert await server.reload(everyone)
            for server in (a, b, c):
                await server.peers.look()  # each sees the others' ids now
            assert [s.peers.leader for s in (a, b, c)] == [b.url, None, b.url]
            await send(client, {"a": a.url, "b": b.url, "c": c.url}, 48)
            pages = {
                n: (await client.get(f"{s.url}/metrics")).text for n, s in (("a", a), ("b", b), ("c", c))
            }
        loads = {n: counted(page, "lorafleet_loads_total") for n, page in pages.items()}
        missing = {
            n: counted(p, "lorafleet_serve_retries_total", reason="adapter_missing") for n, p in pages.items()
        }
        said = f"{Counter(s for _, _, s, _ in answers)}; loads {loads}; placed again {missing}"
        assert all(status == 200 and named == adapter for _, adapter, status, named in answers), said
        # The premise: adapters were loaded and evicted. Only the leader decided, so none of its
        # unloads met another router's request.
        assert loads["b"] > 4, said
        assert loads["a"] == loads["c"] == 0, said
        assert sum(missing.values()) == 0, said
        for name, page in pages.items():
            assert counted(page, "lorafleet_serve_peers_ready") == 3
            assert counted(page, "lorafleet_serve_relaying") == (0 if name == "b" else 1)

        # The leader is gone: each follower's next request finds it so and is decided where it came,
        # until a look names the next leader (a, up longer than c).
        answers.clear()
        await send(client, {"c": c.url}, 4)
        page = (await client.get(f"{c.url}/metrics")).text
        assert counted(page, "lorafleet_serve_retries_total", reason="leader_gone") >= 1
        for server in (a, c):
            await server.peers.look()
        assert [a.peers.leader, c.peers.leader] == [None, a.url]
        await send(client, {"a": a.url, "c": c.url}, 16)
        assert [(s, n == adapter) for _, adapter, s, n in answers] == [(200, True)] * 20
        before = counted(page, "lorafleet_loads_total")
        after = counted((await client.get(f"{c.url}/metrics")).text, "lorafleet_loads_total")
        assert after == before  # c relays again


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_a_relayed_request_is_decided_where_it_lands(
    serve: Callable[..., StandInServer], built_adapters: Path
) -> None:
    async with _pair(_config([serve()], built_adapters)) as (a, b), httpx.AsyncClient() as client:
        body = {"model": "lora-0", "prompt": "hello", "max_tokens": 2}
        # As another router would relay it: b does not relay it again, its fleet places it.
        answer = await client.post(f"{b.url}/v1/completions", json=body, headers={"x-lorafleet-via": "x"})
        assert answer.status_code == 200
        assert answer.headers["x-lorafleet-how"] == "loaded"
        health = (await client.get(f"{b.url}/health")).json()
        assert health["router"] == b.peers.own
        assert health["up_since"] == b.peers.up_since
        # A stream relayed: a decides (another adapter, so a loads it), its events come through b
        # as they come, and the request's id is the client's on both hops.
        streamed = {"model": "lora-1", "prompt": "hello", "max_tokens": 3, "stream": True}
        headers = {"x-request-id": "relayed-1"}
        async with client.stream("POST", f"{b.url}/v1/completions", json=streamed, headers=headers) as answer:
            events = [line async for line in answer.aiter_lines() if line.startswith("data: ")]
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        assert (answer.headers["x-lorafleet-how"], answer.headers["x-request-id"]) == ("loaded", "relayed-1")
        assert len(events) > 2
        assert events[-1] == "data: [DONE]"
        page = (await client.get(f"{a.url}/metrics")).text
        assert counted(page, "lorafleet_loads_total") == 1


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_a_follower_stands_by_and_lists_every_engine_at_once_when_it_decides_again(
    serve: Callable[..., StandInServer], built_adapters: Path
) -> None:
    engines = [serve(), serve()]
    # Listings an hour apart: any listing in this test is the one the stand-by's end asks for.
    config = attrs.evolve(_config(engines, built_adapters), listing_interval=3600.0)
    async with _pair(config) as (a, b):
        assert (a.fleet.standing_by, b.fleet.standing_by) == (False, True)
        listed = [len(engine.app.calls_to("models")) for engine in engines]
        assert await b.reload(config)  # told of no peers, b decides again
        assert not b.fleet.standing_by
        for engine, before in zip(engines, listed, strict=True):
            await anyio.to_thread.run_sync(engine.app.wait_for_calls, "models", before + 1)


def test_peers_in_the_file_and_on_the_command_line(tmp_path: Path) -> None:
    base = {"replicas": [{"id": "r", "url": "http://h:8000", "model": "m", "limit": 2}]}
    out = settings_of(
        {**base, "peers": {"urls": ["http://r1:8000", "http://r2:8000"], "interval": 2}}, "f.toml"
    )
    assert out["peers"] == ("http://r1:8000", "http://r2:8000")
    assert out["peers_interval"] == 2.0
    args = parser().parse_args(
        [
            "--replica",
            "id=r,url=http://h:8000,model=m,limit=2",
            "--adapters-root",
            str(tmp_path),
            "--peer",
            "http://r1:8000",
            "--peer",
            "http://r2:8000",
            "--peers-dns",
            "routers.ns.svc:9000",
        ]
    )
    config = config_of(args)
    assert config.peers == ("http://r1:8000", "http://r2:8000")
    assert (config.peers_dns, config.peers_port) == ("routers.ns.svc", 9000)
    assert summary(config).endswith(
        "; peers: 2 listed and those 'routers.ns.svc' resolves to, port 9000, the one up the longest deciding"
    )


@pytest.mark.parametrize(
    ("peers", "message"),
    [
        ({"urls": "http://r1:8000"}, "peers.urls must be a list of URLs"),
        ({"urls": ["r1:8000"]}, "peers.urls[0]: 'r1:8000' is not a router's root URL"),
        ({"urls": ["http://r1:8000/v1"]}, "is not a router's root URL"),
        ({"interval": 0}, "peers.interval must be a positive number of seconds"),
        ({"port": 0}, "peers.port must be between 1 and 65535"),
        ({"dns": ""}, "peers.dns is empty"),
        ({"hosts": []}, "peers.hosts"),
    ],
)
def test_peers_that_make_no_sense_are_refused(tmp_path: Path, peers: dict[str, object], message: str) -> None:
    data = {
        "replicas": [{"id": "r", "url": "http://h:8000", "model": "m", "limit": 2}],
        "adapters": {"root": str(tmp_path)},
        "peers": peers,
    }
    with pytest.raises(ConfigError, match=re.escape(message)):
        check(build(settings_of(data, "f.toml")))


class _Leaving(http.server.BaseHTTPRequestHandler):
    """A router up for an hour that is shutting down: a 503 to every request, and from the first on,
    to /health too (before it, a look at its peers took it for ready)."""

    stopping = False

    def do_GET(self) -> None:
        since = time.time() - 3600
        status = "shutting down" if _Leaving.stopping else "ok"
        body = {"status": status, "replicas": {}, "router": "0" * 16, "up_since": since}
        self._json(503 if _Leaving.stopping else 200, body)

    def do_POST(self) -> None:
        _Leaving.stopping = True
        self.rfile.read(int(self.headers["content-length"]))
        error = {"message": "The router is shutting down", "type": "server_error", "code": "shutting_down"}
        self._json(503, {"error": error})

    def _json(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def leaving() -> Iterator[str]:
    """The URL of a ``_Leaving`` router."""
    _Leaving.stopping = False
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Leaving)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_a_leader_shutting_down_is_left_and_the_request_decided_here(
    serve: Callable[..., StandInServer], built_adapters: Path, leaving: str, tmp_path: Path
) -> None:
    log = tmp_path / "requests.jsonl"
    config = attrs.evolve(_config([serve()], built_adapters), request_log=log, peers_interval=3600.0)
    async with RouterServer(config) as a, httpx.AsyncClient() as client:
        assert await a.reload(attrs.evolve(config, peers=(leaving, a.url)))
        assert a.peers.leader == leaving  # up the longest
        body = {"model": "lora-0", "prompt": "hello", "max_tokens": 2}
        answer = await client.post(f"{a.url}/v1/completions", json=body)
        assert (answer.status_code, answer.headers["x-lorafleet-how"]) == (200, "loaded")
        assert a.peers.leader is None
        page = (await client.get(f"{a.url}/metrics")).text
        assert counted(page, "lorafleet_serve_retries_total", reason="leader_gone") == 1
    # Decided here, so logged here.
    (line,) = log.read_text().splitlines()
    assert json.loads(line)["how"] == "loaded"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_peers_found_by_a_name(serve: Callable[..., StandInServer], built_adapters: Path) -> None:
    config = _config([serve()], built_adapters)
    async with RouterServer(config) as a, RouterServer(config) as b, httpx.AsyncClient() as client:
        port = int(b.url.rsplit(":", 1)[1])
        # "localhost" resolves to b's address (and, where it has one, ::1, where nothing listens).
        named = attrs.evolve(config, peers_dns="localhost", peers_port=port, peers_interval=3600.0)
        for server in (a, b):
            assert await server.reload(named)
        await a.peers.look()  # b shows its id now
        assert (a.peers.leader, b.peers.leader) == (f"http://127.0.0.1:{port}", None)
        assert [p.router for p in b.peers.live] == [b.peers.own]
        body = {"model": "lora-1", "prompt": "hello", "max_tokens": 2}
        answer = await client.post(f"{a.url}/v1/completions", json=body)
        assert answer.status_code == 200
        assert counted((await client.get(f"{b.url}/metrics")).text, "lorafleet_loads_total") == 1
        assert counted((await client.get(f"{a.url}/metrics")).text, "lorafleet_loads_total") == 0


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_a_router_shutting_down_is_not_ready_and_its_peers_leave_it(
    serve: Callable[..., StandInServer], built_adapters: Path
) -> None:
    async with _pair(_config([serve()], built_adapters)) as (a, b), httpx.AsyncClient() as client:
        a.router.stopping = True  # as leaving its block does, before it stops taking connections
        health = await client.get(f"{a.url}/health")
        assert (health.status_code, health.json()["status"]) == (503, "shutting down")
        await b.peers.look()
        assert b.peers.leader is None


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_a_leader_given_another_clients_key_is_left_and_said_once(
    serve: Callable[..., StandInServer], built_adapters: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = attrs.evolve(_config([serve()], built_adapters), api_key_env="ROUTER_KEY")
    async with (
        RouterServer(config, environ={"ROUTER_KEY": "a-key"}) as a,
        RouterServer(config, environ={"ROUTER_KEY": "b-key"}) as b,
        httpx.AsyncClient(headers={"Authorization": "Bearer b-key"}) as client,
    ):
        for server in (a, b):
            assert await server.reload(attrs.evolve(config, peers=(a.url, b.url), peers_interval=3600.0))
        await b.peers.look()
        assert b.peers.leader == a.url
        body = {"model": "lora-0", "prompt": "hello", "max_tokens": 2}
        for _ in range(2):
            answer = await client.post(f"{b.url}/v1/completions", json=body)
            assert answer.status_code == 200  # decided by b, not a's 401
        await b.peers.look()
        assert b.peers.leader is None  # a is up longer, and ready, but leads b no more
        said = [m for r in caplog.records if "refused a request this router" in (m := r.getMessage())]
        assert len(said) == 1
        assert "give every router the same server.api_key_env key" in said[0]

"""Two `lorafleet serve` routers over the same two engines, coordinated only through them (issue 33):
a client spreads requests for more adapters than the engines' slots over both routers, so that each
router evicts adapters the other loaded, and no request fails. Against stand-ins, and once against
two real vLLM servers.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import anyio
import attrs
import httpx
import pytest

from lorafleet_serve import Config, ReplicaConfig, RouterServer
from lorafleet_standin import StandInServer

from conftest import KEY, counted, idle_and_bare

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_task_left_running")]

ADAPTERS = [f"lora-{i}" for i in range(6)]
"""Six adapters on two engines of limit 2: four fit at once."""
REQUESTS = 48
CONCURRENT = 4


@attrs.frozen
class Engines:
    """The two engines: each as ``(id, url, key)``, and the folder of their adapters."""

    replicas: tuple[tuple[str, str, str | None], ...]
    adapters: Path


@pytest.fixture(params=["standin", "vllm"])
def engines(
    request: pytest.FixtureRequest, serve: Callable[..., StandInServer], built_adapters: Path
) -> Engines:
    if request.param == "standin":
        narrow, wide = serve(max_num_seqs=2), serve(api_key=KEY)
        return Engines((("narrow", narrow.url, None), ("wide", wide.url, KEY)), built_adapters)
    servers = request.getfixturevalue("vllm_servers")
    build = request.getfixturevalue("real_engine").build
    open_, keyed = servers["open"], servers["keyed"]
    idle_and_bare(open_, keyed)
    return Engines((("narrow", open_.url, None), ("wide", keyed.url, KEY)), build / "adapters")


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the router's default; test_serve.py runs both
@pytest.mark.parametrize("peers", [False, True], ids=["each-decides", "peers"])
async def test_two_routers_over_two_engines_fail_no_request(engines: Engines, peers: bool) -> None:
    replicas = tuple(
        ReplicaConfig(id=rid, url=url, model="tiny", limit=2, api_key_env="ENGINE_KEY" if key else None)
        for rid, url, key in engines.replicas
    )
    config = Config(replicas=replicas, adapter_root=engines.adapters, port=0, shutdown_timeout=5.0)
    # Zipf(1) over the six, the same draw every run; each request to either router at random.
    draw = random.Random(33)
    weights = [1 / (rank + 1) for rank in range(len(ADAPTERS))]
    plan = [(draw.choice("ab"), draw.choices(ADAPTERS, weights)[0]) for _ in range(REQUESTS)]
    answers: list[tuple[str, str, int, str, str]] = []
    async with (
        RouterServer(config, environ={"ENGINE_KEY": KEY}) as a,
        RouterServer(config, environ={"ENGINE_KEY": KEY}) as b,
        httpx.AsyncClient(timeout=300) as client,
    ):
        urls = {"a": a.url, "b": b.url}
        if peers:
            # Told each other ([peers]): a, up the longest, decides; b relays to it.
            told = attrs.evolve(config, peers=(a.url, b.url), peers_interval=3600.0)
            for server in (a, b):
                assert await server.reload(told)
            await b.peers.look()
            assert (a.peers.leader, b.peers.leader) == (None, a.url)
        limiter = anyio.Semaphore(CONCURRENT)

        async def one(router: str, adapter: str) -> None:
            async with limiter:
                body = {"model": adapter, "prompt": "hello world", "max_tokens": 4, "temperature": 0}
                answer = await client.post(f"{urls[router]}/v1/completions", json=body)
            named = answer.json().get("model", "") if answer.status_code == 200 else answer.text[:300]
            how = answer.headers.get("x-lorafleet-how", "")
            answers.append((router, adapter, answer.status_code, named, how))

        async with anyio.create_task_group() as tasks:
            for router, adapter in plan:
                tasks.start_soon(one, router, adapter)
        pages = {name: (await client.get(f"{url}/metrics")).text for name, url in urls.items()}
    evicted = {
        name: counted(page, "lorafleet_evictions_total", outcome="unloaded") for name, page in pages.items()
    }
    missing = {
        name: counted(page, "lorafleet_serve_retries_total", reason="adapter_missing")
        for name, page in pages.items()
    }
    said = f"{len(answers)} answers: {Counter((r, s, h) for r, _, s, _, h in answers)}; evicted {evicted}"
    said += f", placed again after the other's unload {missing}"
    failed = [answer for answer in answers if answer[2] != 200 or answer[3] != answer[1]]
    assert not failed, f"{failed[:5]}; {said}"
    assert len(answers) == REQUESTS, said
    loaded = Counter(router for router, _, _, _, how in answers if how == "loaded")
    if peers:
        # The premise: requests came to both and adapters were evicted; a alone decided (b's
        # answers are a's, relayed), so no unload met the other router's request.
        assert min(Counter(router for router, *_ in answers).values()) > 0, said
        assert loaded["a"] > 0, said
        assert loaded["b"] > 0, said  # relayed: a loaded them
        assert evicted["a"] > 0, said
        assert evicted["b"] == 0, said
        assert sum(missing.values()) == 0, said
        return
    # The premise: each router loaded adapters and evicted some, so that each could unload what the
    # other was about to use (a 404 then, placed again: ``missing``).
    assert min(loaded["a"], loaded["b"]) > 0, said
    assert min(evicted.values()) > 0, said

"""``lorafleet serve`` tells a request's fault from a replica's ([blame]): a request that makes every
engine answer 500 gets a 502 after two replicas and costs the good traffic nothing; a replica that fails
what another serves is avoided; one that gives no answer is passed over at once.

Over real HTTP on 127.0.0.1: a plain httpx client, the router (``RouterServer``, in the test's event
loop) and stand-in vLLM replicas, under asyncio and under trio.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from lorafleet import Command, Event
from lorafleet_serve import Config, ReplicaConfig, RouterServer
from lorafleet_standin import StandInServer

from conftest import ADAPTERS, eventually

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_task_left_running")]

Serve = Callable[..., StandInServer]
POISON = "a prompt that makes the engine fail"
ENGINE_SAID = "EngineCore encountered an issue."
DEAD = '{"error": {"message": "CUDA error: an illegal memory access was encountered"}}'


@asynccontextmanager
async def routing(
    servers: list[StandInServer], adapter_dir: Path, **options: Any
) -> AsyncIterator[tuple[RouterServer, httpx.AsyncClient]]:
    """A router in front of ``servers`` (replicas r0, r1...), and a client for it; both closed after."""
    replicas = tuple(
        ReplicaConfig(id=f"r{i}", url=s.url, model="tiny", limit=2) for i, s in enumerate(servers)
    )
    config = Config(replicas=replicas, adapter_root=adapter_dir, port=0, shutdown_timeout=1.0, **options)
    async with (
        RouterServer(config, environ={}) as server,
        httpx.AsyncClient(base_url=server.url, timeout=30) as client,
    ):
        yield server, client


def watch_failing(server: RouterServer) -> list[str]:
    """Every moment a replica is avoided, as the fleet's machine takes each event (it wraps ``handle``,
    every event's one way in, and changes nothing)."""
    seen: list[str] = []
    machine = server.fleet._machine
    handle = machine.handle

    def watched(event: Event) -> list[Command]:
        commands = handle(event)
        for rid, replica in machine.statistics().replicas.items():
            if replica.failing_until is not None:
                seen.append(f"{rid} after {event!r}")
        return commands

    machine.handle = watched  # type: ignore[method-assign]
    return seen


def failing(server: RouterServer) -> set[str]:
    return {rid for rid, r in server.fleet.statistics().replicas.items() if r.failing_until is not None}


def leases(server: RouterServer) -> int:
    stats = server.fleet.statistics()
    return stats.leases + stats.waiting


def retries(metrics: str) -> dict[str, float]:
    found = {}
    for line in metrics.splitlines():
        if line.startswith("lorafleet_serve_retries_total{"):
            labels, _, value = line.partition("} ")
            found[labels.split('"')[1]] = float(value)
    return found


def calls_with(servers: list[StandInServer], prompt: str) -> list[int]:
    """Which servers (by index) a completion of ``prompt`` reached, one entry per call."""
    return [
        i
        for i, s in enumerate(servers)
        for c in s.app.calls_to("completions")
        if isinstance(c.body, dict) and c.body.get("prompt") == prompt
    ]


def assert_blamed_on_the_request(answer: httpx.Response) -> None:
    assert answer.status_code == 502, answer.text
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["code"], error["type"]) == ("engine_error", "server_error")
    assert "server error on two replicas (the last: HTTP 500)" in error["message"]
    assert f"The engine said: {ENGINE_SAID}" in error["message"]
    assert answer.headers["x-lorafleet-engine-status"] == "500"


# -- a request that makes every engine fail --------------------------------------------------------


@pytest.mark.parametrize("model", ["adapters", "base"])
async def test_a_poison_request_among_good_traffic_costs_the_good_traffic_nothing(
    serve: Serve, adapter_dir: Path, model: str
) -> None:
    servers = [serve(), serve(), serve()]
    for standin in servers:
        standin.app.fail_prompts(POISON)
    good: list[httpx.Response] = []
    poison: dict[int, httpx.Response] = {}
    health: list[int] = []

    def named(i: int) -> str:
        return ADAPTERS[i % 4] if model == "adapters" else "tiny"

    async with routing(servers, adapter_dir) as (server, client):
        seen = watch_failing(server)

        async def ask_good(i: int) -> None:
            body = {"model": named(i), "prompt": f"hello {i}", "max_tokens": 4}
            good.append(await client.post("/v1/completions", json=body))

        async def ask_poison(i: int, stream: bool = False) -> None:
            if i % 3 == 2:  # chat too
                messages = [{"role": "user", "content": f"{POISON} #{i}"}]
                body = {"model": named(i), "messages": messages, "max_tokens": 4, "stream": stream}
                poison[i] = await client.post("/v1/chat/completions", json=body)
            else:
                body = {"model": named(i), "prompt": f"{POISON} #{i}", "max_tokens": 4, "stream": stream}
                poison[i] = await client.post("/v1/completions", json=body)

        async def probe_health(done: anyio.Event) -> None:
            while not done.is_set():
                health.append((await client.get("/health")).status_code)
                await anyio.sleep(0.005)

        done = anyio.Event()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(probe_health, done)
            for i in range(10):  # one at a time, each among good requests
                await ask_good(i)
                await ask_poison(i, stream=i % 2 == 1)
                await ask_good(100 + i)
            async with anyio.create_task_group() as burst:  # and all at once
                for i in range(10, 20):
                    burst.start_soon(ask_poison, i)
                for i in range(20, 40):
                    burst.start_soon(ask_good, i)
            done.set()
        await eventually(lambda: leases(server) == 0)  # the handler ends just after the last byte
        metrics = (await client.get("/metrics")).text
        final = await client.get("/health")

    assert [a.status_code for a in good] == [200] * 40, [a.text for a in good if a.status_code != 200]
    assert sorted(poison) == list(range(20))
    for i, answer in poison.items():
        assert_blamed_on_the_request(answer)
        if i % 3 != 2:
            reached = calls_with(servers, f"{POISON} #{i}")
            assert len(reached) == len(set(reached)) == 2, (i, reached)  # two replicas, then no more
    assert seen == []  # no replica was ever avoided
    assert len(health) > 1
    assert set(health) == {200}
    assert final.json() == {"status": "ok", "replicas": {"r0": "ok", "r1": "ok", "r2": "ok"}}
    assert retries(metrics) == {"adapter_missing": 0.0, "replica_failed": 0.0, "server_error": 20.0}


async def test_with_one_replica_a_poison_request_gets_the_engines_error_and_blames_nothing(
    serve: Serve, adapter_dir: Path
) -> None:
    standin = serve()
    standin.app.fail_prompts(POISON)
    async with routing([standin], adapter_dir) as (server, client):
        for name in ("a0", "tiny"):
            answer = await client.post(
                "/v1/completions", json={"model": name, "prompt": POISON, "max_tokens": 4}
            )
            assert answer.status_code == 502
            error = answer.json()["error"]
            assert error["code"] == "replica_failed"
            assert error["message"] == (
                "The request failed on 1 replica; one answered it with a server error (HTTP 500): "
                "EngineCore encountered an issue. See stack trace (above) for the root cause."
            )
            good = await client.post(
                "/v1/completions", json={"model": name, "prompt": "hello", "max_tokens": 4}
            )
            assert good.status_code == 200
        await eventually(lambda: leases(server) == 0)
        assert failing(server) == set()
        assert len(calls_with([standin], POISON)) == 2  # once each: no other replica to try


# -- a replica that fails, or is gone --------------------------------------------------------------


async def test_a_replica_failing_everything_is_avoided_once_another_serves_its_request(
    serve: Serve, adapter_dir: Path
) -> None:
    servers = [serve(), serve(), serve()]
    async with routing(servers, adapter_dir) as (server, client):
        first = await client.post("/v1/completions", json={"model": "a0", "prompt": "hello", "max_tokens": 4})
        sick = first.headers["x-lorafleet-replica"]
        sick_app = servers[int(sick[1])].app
        sick_app.answer("completions", 500, DEAD, times=None)
        answer = await client.post(
            "/v1/completions", json={"model": "a0", "prompt": "hello", "max_tokens": 4}
        )
        assert answer.status_code == 200
        served = answer.headers["x-lorafleet-replica"]
        assert (served != sick, answer.headers["x-lorafleet-how"]) == (True, "loaded")
        await eventually(lambda: leases(server) == 0)
        assert failing(server) == {sick}  # another replica served what it failed
        assert len(sick_app.calls_to("completions")) == 2
        # From now on requests go elsewhere at once, its adapter's and others'.
        for i in range(12):
            again = await client.post(
                "/v1/completions", json={"model": ADAPTERS[i % 4], "prompt": f"hi {i}", "max_tokens": 4}
            )
            assert again.status_code == 200
            assert again.headers["x-lorafleet-replica"] != sick
        assert len(sick_app.calls_to("completions")) == 2
        await eventually(lambda: leases(server) == 0)
        health = (await client.get("/health")).json()
        assert health["status"] == "ok"
        url = servers[int(sick[1])].url
        said = f"failing: {url}: it answered a request with a server error that {served} then served"
        assert health["replicas"][sick].startswith(said), health
        metrics = (await client.get("/metrics")).text
        assert retries(metrics) == {"adapter_missing": 0.0, "replica_failed": 0.0, "server_error": 1.0}
        sick_app.clear_faults()


async def test_a_base_model_replica_failing_everything_is_avoided_once_another_serves_it(
    serve: Serve, adapter_dir: Path
) -> None:
    servers = [serve(), serve(), serve()]
    servers[0].app.answer("completions", 500, DEAD, times=None)
    async with routing(servers, adapter_dir) as (server, client):
        body = {"model": "tiny", "prompt": "hello", "max_tokens": 4}
        # Equal replicas take turns: among three requests one tries r0 first, and is served elsewhere.
        answers = [await client.post("/v1/completions", json=body) for _ in range(3)]
        assert [a.status_code for a in answers] == [200] * 3
        assert "r0" not in {a.headers["x-lorafleet-replica"] for a in answers}
        assert len(servers[0].app.calls_to("completions")) == 1
        # Reported once the answer is relayed, just after the client has it.
        await eventually(lambda: failing(server) == {"r0"})
        for _ in range(6):
            answer = await client.post("/v1/completions", json=body)
            assert (answer.status_code, answer.headers["x-lorafleet-replica"] != "r0") == (200, True)
        assert len(servers[0].app.calls_to("completions")) == 1  # passed over at once
        metrics = (await client.get("/metrics")).text
        assert retries(metrics)["server_error"] == 1.0
        servers[0].app.clear_faults()


@pytest.mark.parametrize("model", ["a0", "tiny"])
async def test_a_replica_killed_mid_run_is_passed_over_at_once(
    serve: Serve, adapter_dir: Path, model: str
) -> None:
    servers = [serve(), serve(), serve()]
    async with routing(servers, adapter_dir) as (server, client):
        body = {"model": model, "prompt": "hello", "max_tokens": 4}
        first = await client.post("/v1/completions", json=body)
        dead = first.headers["x-lorafleet-replica"]
        await anyio.to_thread.run_sync(servers[int(dead[1])].stop)
        answers = [await client.post("/v1/completions", json=body) for _ in range(8)]
        assert [a.status_code for a in answers] == [200] * 8
        assert dead not in {a.headers["x-lorafleet-replica"] for a in answers}
        assert dead in failing(server)  # no answer is a failure at once, with no other replica's word
        metrics = (await client.get("/metrics")).text
        # One request tried it (the adapter's holder; the base model's turn), and no other did.
        assert retries(metrics) == {"adapter_missing": 0.0, "replica_failed": 1.0, "server_error": 0.0}
        await eventually(lambda: leases(server) == 0)


async def test_a_retry_the_client_left_blames_no_replica(serve: Serve, adapter_dir: Path) -> None:
    """The first replica answers 500; the client goes away while the second works on the request: the
    second served nothing, so the first is not blamed."""
    servers = [serve(), serve()]
    async with routing(servers, adapter_dir) as (server, client):
        first = await client.post("/v1/completions", json={"model": "a0", "prompt": "hello", "max_tokens": 4})
        sick = int(first.headers["x-lorafleet-replica"][1])
        servers[sick].app.answer("completions", 500, DEAD)
        servers[1 - sick].app.hang("completions")
        try:
            with pytest.raises(httpx.ReadTimeout):
                await client.post(
                    "/v1/completions", json={"model": "a0", "prompt": "hello", "max_tokens": 4}, timeout=1.0
                )
            await anyio.to_thread.run_sync(servers[1 - sick].app.wait_for_calls, "completions", 1)
            await eventually(lambda: leases(server) == 0)  # the router saw the client go
            assert failing(server) == set()
        finally:
            servers[1 - sick].app.release()


async def test_an_engine_error_without_a_json_message_is_carried_as_its_text(
    serve: Serve, adapter_dir: Path
) -> None:
    servers = [serve(), serve()]
    for standin in servers:
        standin.app.fail_prompts(POISON, status=503, body="upstream\nconnect error " + "x" * 500)
    async with routing(servers, adapter_dir) as (server, client):
        answer = await client.post("/v1/completions", json={"model": "a0", "prompt": POISON, "max_tokens": 4})
        assert answer.status_code == 502
        message = answer.json()["error"]["message"]
        assert "(the last: HTTP 503)" in message
        assert "The engine said: upstream connect error xxx" in message
        assert message.endswith("...")
        assert len(message) < 500
        assert answer.headers["x-lorafleet-engine-status"] == "503"
        await eventually(lambda: leases(server) == 0)
        assert failing(server) == set()
    assert json.loads(answer.text)  # a JSON body, as every error the router answers

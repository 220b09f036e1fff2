"""``lorafleet serve``, the reference router, end to end: a plain httpx client, the router and stand-in
vLLM replicas, each on an ephemeral port of 127.0.0.1, under asyncio and under trio.

The router runs in the test's own event loop (``RouterServer``); the stand-ins in threads of their own.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator, MutableMapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from lorafleet._cli import main as lorafleet
from lorafleet_serve import Config, ConfigError, ReplicaConfig, RouterServer
from lorafleet_serve._app import MISSING_RETRIES
from lorafleet_serve._main import GC_YOUNG
from lorafleet_standin import StandInServer, generated, weights_digest

from conftest import ADAPTERS, broken_folder_warning, error_of, eventually, make_adapter, settled

Serve = Callable[..., StandInServer]
HELLO = {"prompt": "hello", "max_tokens": 4}
CONNECT_ERROR = "(ConnectError|ClientConnectorError)"
"""A refused connection, as httpx (trio) and aiohttp (asyncio) name it."""
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def config_of(servers: list[StandInServer], adapter_dir: Path, limit: int = 2, **options: Any) -> Config:
    """A router's config for ``servers`` (replicas r0, r1...: ``model<i>``, ``key<i>`` in ``options`` give
    one's model and key variable), serving the adapters under ``adapter_dir``, on a free port."""
    replicas = tuple(
        ReplicaConfig(
            id=f"r{i}",
            url=s.url,
            model=options.pop(f"model{i}", "tiny"),
            limit=limit,
            api_key_env=options.pop(f"key{i}", None),
        )
        for i, s in enumerate(servers)
    )
    options.setdefault("adapter_root", adapter_dir)
    return Config(replicas=replicas, port=0, shutdown_timeout=1.0, **options)


@asynccontextmanager
async def routing(
    servers: list[StandInServer], adapter_dir: Path, environ: dict[str, str] | None = None, **options: Any
) -> AsyncIterator[tuple[RouterServer, httpx.AsyncClient]]:
    """A router in front of ``servers``, and a client for it; both closed after."""
    config = config_of(servers, adapter_dir, **options)
    async with (
        RouterServer(config, environ=environ or {}) as server,
        httpx.AsyncClient(base_url=server.url, timeout=30) as client,
    ):
        yield server, client


def leases(server: RouterServer) -> int:
    stats = server.fleet.statistics()
    return stats.leases + stats.waiting


def served_by(answer: httpx.Response) -> tuple[str, str]:
    return answer.headers["x-lorafleet-replica"], answer.headers["x-lorafleet-how"]


async def sse(answer: httpx.Response) -> list[dict[str, Any]]:
    """The events of a server-sent stream, up to ``[DONE]`` (which must come)."""
    events: list[dict[str, Any]] = []
    async for line in answer.aiter_lines():
        if not line.startswith("data: "):
            assert line == "", line
            continue
        data = line.removeprefix("data: ")
        if data == "[DONE]":
            return events
        events.append(json.loads(data))
    raise AssertionError("the stream ended without [DONE]")


# -- completions, through the router --------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
@pytest.mark.parametrize("route", ["completions", "chat"])
async def test_a_completion_goes_to_the_replica_holding_its_adapter(
    serve: Serve, adapter_dir: Path, route: str
) -> None:
    standin = serve()
    body = {"model": "a0", **(HELLO if route == "completions" else CHAT)}
    path = "/v1/completions" if route == "completions" else "/v1/chat/completions"
    async with routing([standin], adapter_dir) as (server, client):
        first = await client.post(path, json=body)
        again = await client.post(path, json=body)
        await eventually(lambda: leases(server) == 0)  # the handler ends just after the last byte
    for answer, how in ((first, "loaded"), (again, "hit")):
        assert answer.status_code == 200, answer.text
        assert served_by(answer) == ("r0", how)
        assert answer.json()["model"] == "a0"
    prompt = "hello" if route == "completions" else json.dumps(CHAT["messages"])
    text = "".join(generated("a0", prompt, 4, weights_digest(adapter_dir / "a0")))
    choice = first.json()["choices"][0]
    assert (choice["text"] if route == "completions" else choice["message"]["content"]) == text
    assert [c.body["lora_name"] for c in standin.app.calls_to("load")] == ["a0"]
    assert [c.body for c in standin.app.calls_to(route)] == [body, body]  # forwarded as sent


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
@pytest.mark.parametrize(("routers", "unloaded"), [(1, []), (2, ["a0"])])
async def test_share_routers_is_passed_to_the_fleet(
    serve: Serve, adapter_dir: Path, routers: int, unloaded: list[str]
) -> None:
    standin = serve()
    async with routing([standin], adapter_dir, routers=routers) as (server, client):
        for adapter in ("a0", "a1"):
            answer = await client.post("/v1/completions", json={"model": adapter, **HELLO})
            assert answer.status_code == 200, answer.text
            # The victim's unload goes out once a1's load has landed, beside a1's grant ([evict]).
            await eventually(lambda: leases(server) == 0 and settled(server.fleet))
    # Limit 2, an empty replica: one of two routers fills one slot of two, then evicts ([share]).
    assert [c.body["lora_name"] for c in standin.app.calls_to("unload")] == unloaded


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
@pytest.mark.parametrize("route", ["completions", "chat"])
async def test_a_stream_is_relayed_event_by_event(serve: Serve, adapter_dir: Path, route: str) -> None:
    standin = serve()
    body = {"model": "a1", "stream": True, **(HELLO if route == "completions" else CHAT)}
    path = "/v1/completions" if route == "completions" else "/v1/chat/completions"
    async with routing([standin], adapter_dir) as (server, client):
        async with client.stream("POST", path, json=body) as answer:
            assert answer.status_code == 200
            assert answer.headers["content-type"].startswith("text/event-stream")
            assert served_by(answer) == ("r0", "loaded")
            events = await sse(answer)
        await eventually(lambda: leases(server) == 0)  # the handler ends just after the last byte
    prompt = "hello" if route == "completions" else json.dumps(CHAT["messages"])
    if route == "completions":
        words = [e["choices"][0]["text"] for e in events]
    else:
        assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}  # as vLLM's first
        words = [e["choices"][0]["delta"]["content"] for e in events[1:]]
    assert words == generated("a1", prompt, 4, weights_digest(adapter_dir / "a1"))


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_the_base_model_goes_to_the_least_busy_replica(serve: Serve, adapter_dir: Path) -> None:
    servers = [serve(), serve()]
    for standin in servers:
        standin.app.hold_streams()
    body = {"model": "tiny", "stream": True, **HELLO}
    async with (
        routing(servers, adapter_dir) as (_, client),
        client.stream("POST", "/v1/completions", json=body) as held,
    ):
        assert held.status_code == 200
        first = held.headers["x-lorafleet-replica"]
        # The first is still streaming on its replica: the next goes to the other one.
        answer = await client.post("/v1/completions", json={"model": "tiny", **HELLO})
        assert answer.status_code == 200
        assert served_by(answer) == (({"r0", "r1"} - {first}).pop(), "base")
        for standin in servers:
            standin.app.release()
        assert len(await sse(held)) == 4
    assert all(s.app.calls_to("load") == [] for s in servers)


# -- the lease, held as long as the replica's answer --------------------------------------------------


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_the_lease_is_released_when_the_client_goes_away_mid_stream(
    serve: Serve, adapter_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "lorafleet.serve")
    standin = serve()
    standin.app.hold_streams()
    body = {"model": "a0", "stream": True, **HELLO}
    async with routing([standin], adapter_dir) as (server, client):
        async with client.stream("POST", "/v1/completions", json=body) as answer:
            async for line in answer.aiter_lines():
                assert line.startswith("data: ")
                break
            assert server.fleet.statistics().leases == 1  # held while the stream runs
        # The client closed its connection mid-stream: the router notices and lets the lease go.
        await eventually(lambda: leases(server) == 0)
        await eventually(lambda: any("end=client_gone" in r.message for r in caplog.records))
        standin.app.release()
        assert server.fleet.statistics().replicas["r0"].held == {"a0": 0}


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_the_lease_goes_as_the_replicas_answer_comes_in_before_the_client_has_it(
    serve: Serve, adapter_dir: Path
) -> None:
    """An answer with a Content-Length: the engine is done with the adapter once its last byte is in,
    so the lease goes then, before the router sends it on; the time the client takes to be sent it
    is not the adapter's. The router is called as the ASGI app it is, so that its ``send`` can look
    at the fleet while the answer is on its way; the replica is a stand-in over HTTP."""
    standin = serve()
    body = json.dumps({"model": "a0", **HELLO}).encode()
    async with routing([standin], adapter_dir) as (server, client):
        assert (await client.post("/v1/completions", json={"model": "a0", **HELLO})).status_code == 200
        requests = iter([{"type": "http.request", "body": body, "more_body": False}])
        answered = anyio.Event()
        leases_seen: list[tuple[str, int]] = []

        async def receive() -> dict[str, Any]:
            message = next(requests, None)
            if message is not None:
                return message
            await answered.wait()  # the client stays until it has its answer
            return {"type": "http.disconnect"}

        async def send(message: MutableMapping[str, Any]) -> None:
            leases_seen.append((message["type"], leases(server)))
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                answered.set()

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/v1/completions",
            "raw_path": b"/v1/completions",
            "query_string": b"",
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 2),
        }
        await server.router(scope, receive, send)
        # Its head goes on before its body has come; its body, after.
        assert leases_seen[0] == ("http.response.start", 1)
        assert leases_seen[1:] == [("http.response.body", 0)] * (len(leases_seen) - 1)
        assert len(leases_seen) >= 2
        assert server.fleet.statistics().replicas["r0"].held["a0"] == 0


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_a_client_gone_while_its_adapter_loads_leaves_the_load_to_finish(
    serve: Serve, adapter_dir: Path
) -> None:
    standin = serve()
    standin.app.hang("load")
    async with routing([standin], adapter_dir) as (server, client):
        with pytest.raises(httpx.ReadTimeout):
            await client.post("/v1/completions", json={"model": "a2", **HELLO}, timeout=0.5)
        await eventually(lambda: leases(server) == 0)
        standin.app.release()
        await eventually(lambda: server.fleet.statistics().replicas["r0"].held == {"a2": 0})
        answer = await client.post("/v1/completions", json={"model": "a2", **HELLO})
        assert served_by(answer) == ("r0", "hit")
    assert len(standin.app.calls_to("load")) == 1


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_prewarmed_adapters_are_loaded_before_the_first_request(
    serve: Serve, adapter_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    standin = serve()
    async with routing([standin], adapter_dir, prewarm=("a1", "rank64")) as (_, client):
        assert sorted(c.body["lora_name"] for c in standin.app.calls_to("load")) == ["a1", "rank64"]
        answer = await client.post("/v1/completions", json={"model": "a1", **HELLO})
        assert served_by(answer) == ("r0", "hit")
    assert any("could not prewarm adapter 'rank64'" in r.message for r in caplog.records)


# -- replicas in trouble -------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_a_replica_killed_mid_run_sends_its_requests_elsewhere(serve: Serve, adapter_dir: Path) -> None:
    servers = [serve(), serve()]
    async with routing(servers, adapter_dir) as (server, client):
        first = await client.post("/v1/completions", json={"model": "a0", **HELLO})
        dead, how = served_by(first)
        assert how == "loaded"
        alive = ({"r0", "r1"} - {dead}).pop()
        await anyio.to_thread.run_sync(servers[int(dead[1])].stop)
        answers = [await client.post("/v1/completions", json={"model": "a0", **HELLO}) for _ in range(5)]
        assert [a.status_code for a in answers] == [200] * 5
        assert [served_by(a) for a in answers] == [(alive, "loaded")] + [(alive, "hit")] * 4
        assert server.fleet.replica_statistics(dead).failing_until is not None  # type: ignore[union-attr]
        health = await client.get("/health")
        assert health.status_code == 200
        said = health.json()["replicas"]
        # Failing, with where and why: the requests that found it dead said so.
        assert said[alive] == "ok"
        assert re.match(f"failing: {servers[int(dead[1])].url}: no answer: {CONNECT_ERROR}", said[dead]), said
        await eventually(lambda: leases(server) == 0)  # the handler ends just after the last byte


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_a_replica_failing_a_base_model_request_is_avoided(serve: Serve, adapter_dir: Path) -> None:
    """Base-model requests hold no lease, yet a replica that fails them is reported and avoided."""
    servers = [serve(), serve()]
    async with routing(servers, adapter_dir) as (server, client):
        await anyio.to_thread.run_sync(servers[0].stop)
        # Equal replicas take turns, so one of two requests tries r0 first and is retried on r1.
        answers = [await client.post("/v1/completions", json={"model": "tiny", **HELLO}) for _ in range(2)]
        assert [(a.status_code, served_by(a)) for a in answers] == [(200, ("r1", "base"))] * 2
        assert server.fleet.replica_statistics("r0").failing_until is not None  # type: ignore[union-attr]
        health = await client.get("/health")
        said = health.json()["replicas"]
        assert said["r1"] == "ok"
        assert re.match(f"failing: {servers[0].url}: no answer: {CONNECT_ERROR}", said["r0"]), said
        answer = await client.post("/v1/completions", json={"model": "tiny", **HELLO})
        assert answer.headers["x-lorafleet-replica"] == "r1"
        assert len(servers[1].app.calls_to("completions")) == 3


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_a_5xx_before_the_answer_begins_is_retried_on_another_replica(
    serve: Serve, adapter_dir: Path
) -> None:
    servers = [serve(), serve()]
    async with routing(servers, adapter_dir) as (server, client):
        first = await client.post("/v1/completions", json={"model": "a3", **HELLO})
        sick, _ = served_by(first)
        servers[int(sick[1])].app.answer("completions", 500, '{"error": {"message": "engine dead"}}')
        answer = await client.post("/v1/completions", json={"model": "a3", **HELLO})
        assert answer.status_code == 200
        assert served_by(answer) == (({"r0", "r1"} - {sick}).pop(), "loaded")
        metrics = (await client.get("/metrics")).text
        assert 'lorafleet_serve_retries_total{reason="server_error"} 1.0' in metrics
        # Another replica served what it failed: it is avoided now ([blame]).
        await eventually(lambda: leases(server) == 0)
        assert server.fleet.replica_statistics(sick).failing_until is not None  # type: ignore[union-attr]


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_retries_are_bounded_and_never_revisit_a_replica(serve: Serve, adapter_dir: Path) -> None:
    servers = [serve(), serve(), serve()]
    for standin in servers:
        standin.app.hang("completions", times=None)  # no answer within the read timeout
    try:
        async with routing(servers, adapter_dir, attempts=2, read_timeout=0.5) as (server, client):
            answer = await client.post("/v1/completions", json={"model": "tiny", **HELLO})
            assert answer.status_code == 502
            assert error_of(answer)["code"] == "replica_failed"
            assert sorted(len(s.app.calls_to("completions")) for s in servers) == [0, 1, 1]
            # Both replicas that failed it are avoided now (base-model failures count for placement
            # too): an adapter's request tries the third, and with none left says how many it tried.
            answer = await client.post("/v1/completions", json={"model": "a0", **HELLO})
            assert answer.status_code == 502
            assert error_of(answer)["message"].startswith("The request failed on 1 replica;")
            assert sorted(len(s.app.calls_to("completions")) for s in servers) == [1, 1, 1]
            await eventually(lambda: leases(server) == 0)  # the handler ends just after the last byte
    finally:
        for standin in servers:
            standin.app.release()


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_an_answer_cut_mid_body_is_cut_for_the_client_too(serve: Serve, adapter_dir: Path) -> None:
    standin = serve()
    async with routing([standin], adapter_dir) as (server, client):
        await client.post("/v1/completions", json={"model": "a0", **HELLO})
        standin.app.drop("completions")
        with pytest.raises(httpx.RemoteProtocolError):
            await client.post("/v1/completions", json={"model": "a0", **HELLO})
        await eventually(lambda: leases(server) == 0)
        assert server.fleet.replica_statistics("r0").failing_until is not None  # type: ignore[union-attr]


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_a_restarted_replica_lost_its_adapters_and_the_request_still_succeeds(
    serve: Serve, adapter_dir: Path
) -> None:
    standin = serve()
    async with routing([standin], adapter_dir) as (_, client):
        first = await client.post("/v1/completions", json={"model": "a4", **HELLO})
        assert served_by(first) == ("r0", "loaded")
        standin.app.restart()  # vLLM restarted: it answers "The model `a4` does not exist."
        answer = await client.post("/v1/completions", json={"model": "a4", **HELLO})
        assert answer.status_code == 200, answer.text
        assert served_by(answer) == ("r0", "loaded")  # loaded again, and served
        metrics = (await client.get("/metrics")).text
        assert 'lorafleet_serve_retries_total{reason="adapter_missing"} 1.0' in metrics
    assert [c.body["lora_name"] for c in standin.app.calls_to("load")] == ["a4", "a4"]
    assert standin.app.adapters == {"a4": str(adapter_dir / "a4")}


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_another_routers_unloads_are_met_by_loading_again_up_to_a_bound(
    serve: Serve, adapter_dir: Path
) -> None:
    """Each time the engine answers "no such model" (another router unloaded the adapter between this
    router's load and its forward), the request is placed again and the adapter loaded back, up to
    MISSING_RETRIES times, each counted; past that the client gets the engine's 404."""
    standin = serve()
    gone = json.dumps(
        {
            "error": {
                "message": "The model `a4` does not exist.",
                "type": "NotFoundError",
                "param": None,
                "code": 404,
            }
        }
    )
    async with routing([standin], adapter_dir) as (_, client):
        standin.app.answer("completions", 404, gone, times=MISSING_RETRIES)
        answer = await client.post("/v1/completions", json={"model": "a4", **HELLO})
        assert answer.status_code == 200, answer.text
        standin.app.answer("completions", 404, gone, times=MISSING_RETRIES + 1)
        answer = await client.post("/v1/completions", json={"model": "a4", **HELLO})
        assert (answer.status_code, answer.json()) == (404, json.loads(gone))
        metrics = (await client.get("/metrics")).text
    assert f'lorafleet_serve_retries_total{{reason="adapter_missing"}} {2 * MISSING_RETRIES}.0' in metrics
    # One load at first, then one per retry: the engine still had it each time, and said so.
    assert len(standin.app.calls_to("load")) == 1 + 2 * MISSING_RETRIES


# -- adapters the router will not serve ------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
@pytest.mark.parametrize("name", ["nope", "../a0", "broken", ".hidden"])
async def test_an_unknown_adapter_is_a_404_without_a_load(serve: Serve, adapter_dir: Path, name: str) -> None:
    standin = serve()
    async with routing([standin], adapter_dir) as (_, client):
        answer = await client.post("/v1/chat/completions", json={"model": name, **CHAT})
    assert answer.status_code == 404
    assert error_of(answer) == {
        "message": f"The model `{name}` does not exist or you do not have access to it.",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }
    assert standin.app.calls_to("load") == []
    assert standin.app.calls_to("chat") == []


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_an_adapter_the_engine_refuses_is_a_400_and_is_not_tried_again(
    serve: Serve, adapter_dir: Path
) -> None:
    standin = serve()
    async with routing([standin], adapter_dir) as (_, client):
        answers = [await client.post("/v1/completions", json={"model": "rank64", **HELLO}) for _ in range(2)]
    for answer in answers:
        assert answer.status_code == 400
        error = error_of(answer)
        assert (error["code"], error["param"]) == ("adapter_refused", "model")
        assert str(adapter_dir) not in error["message"]  # the server's folders are not the client's business
        assert "LoRA rank 64 is greater than max_lora_rank 16." in error["message"]  # what to fix
    assert len(standin.app.calls_to("load")) == 1  # the refusal is remembered: no second load call


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_a_refused_adapter_fixed_in_its_folder_is_served_at_once(serve: Serve, tmp_path: Path) -> None:
    """[forgive] A rank too high, then the folder fixed: the next request loads the fixed adapter,
    rather than get the refusal for 15 minutes; a missing folder that appears is served too."""
    standin = serve()
    make_adapter(tmp_path / "sql", rank=64)
    async with routing([standin], tmp_path, adapter_paths={"typo": str(tmp_path / "typ0")}) as (_, client):
        for name in ("sql", "typo"):
            answer = await client.post("/v1/completions", json={"model": name, **HELLO})
            assert (answer.status_code, error_of(answer)["code"]) == (400, "adapter_refused")
        assert "<path>" in error_of(answer)["message"]  # the engine's words, the folder left out
        make_adapter(tmp_path / "sql", rank=8)
        make_adapter(tmp_path / "typ0")
        for name in ("sql", "typo"):
            answer = await client.post("/v1/completions", json={"model": name, **HELLO})
            assert answer.status_code == 200, answer.text
    assert [c.body["lora_name"] for c in standin.app.calls_to("load")] == ["sql", "typo", "sql", "typo"]


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_a_reload_forgets_every_refusal(serve: Serve, tmp_path: Path) -> None:
    """A fix no fingerprint sees (same sizes, times put back) is still refused, until the settings
    are read again (SIGHUP, or the file watched changed): then every refused adapter is asked again."""
    standin = serve()
    folder = make_adapter(tmp_path / "sql", rank=64)
    config = folder / "adapter_config.json"
    async with routing([standin], tmp_path) as (server, client):
        answer = await client.post("/v1/completions", json={"model": "sql", **HELLO})
        assert answer.status_code == 400
        before = config.stat()
        config.write_text(config.read_text().replace('"r": 64', '"r": 16'))  # the same size
        os.utime(config, ns=(before.st_atime_ns, before.st_mtime_ns))
        answer = await client.post("/v1/completions", json={"model": "sql", **HELLO})
        assert answer.status_code == 400
        assert await server.reload()
        answer = await client.post("/v1/completions", json={"model": "sql", **HELLO})
        assert answer.status_code == 200, answer.text
    assert len(standin.app.calls_to("load")) == 2


# -- what the router checks itself ---------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_the_clients_key_and_the_replicas_key(
    serve: Serve, adapter_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    standin = serve(api_key="replica-secret")
    environ = {"ROUTER_KEY": "router-secret", "VLLM_KEY": "replica-secret"}
    options = {"api_key_env": "ROUTER_KEY", "key0": "VLLM_KEY"}
    async with routing([standin], adapter_dir, environ, **options) as (_, client):
        body = {"model": "a0", **HELLO}
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic router-secret"}):
            answer = await client.post("/v1/completions", json=body, headers=headers)
            assert answer.status_code == 401
            assert error_of(answer)["code"] == "invalid_api_key"
        assert (await client.get("/v1/models")).status_code == 401
        good = {"Authorization": "Bearer router-secret"}
        assert (await client.post("/v1/completions", json=body, headers=good)).status_code == 200
        assert (await client.get("/v1/models", headers=good)).status_code == 200
        # Probes and scrapes need no key.
        assert (await client.get("/health")).status_code == 200
        assert (await client.get("/metrics")).status_code == 200
    assert {c.authorization for c in standin.app.calls} == {"Bearer replica-secret"}
    assert len(standin.app.calls_to("completions")) == 1  # refused requests never reached it
    logged = caplog.text
    assert "router-secret" not in logged
    assert "replica-secret" not in logged


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_a_body_too_large_is_a_413_unread(serve: Serve, adapter_dir: Path) -> None:
    standin = serve()
    body = json.dumps({"model": "a0", "prompt": "x" * 2000}).encode()

    async def chunked() -> AsyncIterator[bytes]:
        for i in range(0, len(body), 500):
            yield body[i : i + 500]

    async with routing([standin], adapter_dir, max_body_bytes=1000) as (_, client):
        declared = await client.post("/v1/completions", content=body)
        streamed = await client.post("/v1/completions", content=chunked())
        small = await client.post("/v1/completions", json={"model": "a0", **HELLO})
    for answer in (declared, streamed):
        assert answer.status_code == 413
        assert error_of(answer)["code"] == "request_too_large"
    assert small.status_code == 200
    assert len(standin.app.calls_to("completions")) == 1


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
@pytest.mark.parametrize(
    ("method", "path", "content", "status", "code"),
    [
        ("POST", "/v1/completions", b"{not json", 400, "invalid_json"),
        ("POST", "/v1/completions", b"[1, 2]", 400, "invalid_request"),
        ("POST", "/v1/completions", b'{"prompt": "hi"}', 400, "missing_model"),
        ("POST", "/v1/completions", b'{"model": 7}', 400, "invalid_model"),
        ("GET", "/v1/completions", None, 405, "method_not_allowed"),
        ("POST", "/v1/models", None, 405, "method_not_allowed"),
        ("POST", "/v1/embeddings", b"{}", 400, "missing_model"),
        ("POST", "/v1/audio/transcriptions", b"{}", 404, "not_found"),
        ("GET", "/v1/responses/resp_1", None, 404, "not_found"),
        ("GET", "/tokenize", None, 405, "method_not_allowed"),
    ],
)
async def test_requests_the_router_answers_itself(
    serve: Serve, adapter_dir: Path, method: str, path: str, content: bytes | None, status: int, code: str
) -> None:
    standin = serve()
    async with routing([standin], adapter_dir) as (_, client):
        answer = await client.request(method, path, content=content)
    assert answer.status_code == status
    assert error_of(answer)["code"] == code
    # The fleet's listing and its reading of the running gauge ([reading]): nothing was forwarded.
    assert {c.path for c in standin.app.calls} <= {"/v1/models", "/metrics"}


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_models_lists_the_base_models_and_the_adapters(serve: Serve, adapter_dir: Path) -> None:
    servers = [serve(), serve(model="other")]
    extra = {"sql": str(adapter_dir / "a0"), "chat": str(adapter_dir / "a1")}
    options = {
        "adapter_paths": extra,
        "adapter_models": {"chat": "other"},
        "adapter_model": "tiny",
        "model1": "other",
    }
    async with routing(servers, adapter_dir, None, **options) as (_, client):
        answer = await client.get("/v1/models")
    assert answer.status_code == 200
    listing = answer.json()
    assert listing["object"] == "list"
    cards = {card["id"]: card for card in listing["data"]}
    # broken has no adapter_config.json: not an adapter.
    assert list(cards) == ["other", "tiny", *sorted([*ADAPTERS, "chat", "rank64", "sql"])]
    assert cards["tiny"]["parent"] is None
    assert cards["chat"]["parent"] == "other"
    assert cards["sql"]["parent"] == cards["a0"]["parent"] == "tiny"
    assert all(card["object"] == "model" and card["owned_by"] == "lorafleet" for card in cards.values())


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_metrics_and_health(serve: Serve, adapter_dir: Path) -> None:
    standin = serve()
    async with routing([standin], adapter_dir) as (_, client):
        health = await client.get("/health")
        assert (health.status_code, health.json()) == (200, {"status": "ok", "replicas": {"r0": "ok"}})
        await client.post("/v1/completions", json={"model": "a0", **HELLO})
        await client.post("/v1/completions", json={"model": "nope", **HELLO})
        answer = await client.get("/metrics")
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/plain")
        metrics = answer.text
        for line in (
            'lorafleet_serve_requests_total{route="completions",status="200"} 1.0',
            'lorafleet_serve_requests_total{route="completions",status="404"} 1.0',
            'lorafleet_serve_request_seconds_count{route="completions"} 2.0',
            "lorafleet_serve_requests_in_flight 0.0",
            'lorafleet_loads_total{model="tiny",outcome="loaded"} 1.0',
            'lorafleet_grants_total{how="loaded"} 1.0',
        ):
            assert line in metrics, line
        await anyio.to_thread.run_sync(standin.stop)
        answer = await client.post("/v1/completions", json={"model": "a0", **HELLO})
        assert answer.status_code in (502, 503)
        health = await client.get("/health")
        said = health.json()
        assert (health.status_code, said["status"], list(said["replicas"])) == (503, "unavailable", ["r0"])
        assert re.match(f"failing: {standin.url}: no answer: {CONNECT_ERROR}", said["replicas"]["r0"]), said


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_one_log_line_per_request_with_what_happened(
    serve: Serve, adapter_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "lorafleet.serve")
    standin = serve()
    async with routing([standin], adapter_dir) as (_, client):
        await client.post("/v1/completions", json={"model": "a0", **HELLO})
        await client.post("/v1/completions", json={"model": "a0", "stream": True, **HELLO})
        await client.post("/v1/completions", json={"model": 'x" status=200\nforged', **HELLO})
    lines = [
        r.message for r in caplog.records if r.name == "lorafleet.serve" and r.message.startswith("method=")
    ]
    assert len(lines) == 3
    fields = [dict(f.split("=", 1) for f in line.split(" ") if "=" in f) for line in lines[:2]]
    for got, how, stream in zip(fields, ("loaded", "hit"), ("false", "true"), strict=True):
        assert {k: got[k] for k in ("path", "model", "replica", "how", "status", "stream", "end")} == {
            "path": "/v1/completions",
            "model": "a0",
            "replica": "r0",
            "how": how,
            "status": "200",
            "stream": stream,
            "end": "done",
        }
        assert float(got["ms"]) >= float(got["adapter_ms"]) >= 0
    assert "\n" not in lines[2]
    assert 'model="x\\" status=200\\nforged"' in lines[2]
    assert "status=404" in lines[2]


# -- configuration ---------------------------------------------------------------------------------


@pytest.fixture
def standin_url(serve: Serve) -> str:
    return serve().url


def run_serve(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = lorafleet(["serve", *args])
    except SystemExit as exited:
        code = int(exited.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        ([], "no replicas: give at least one"),
        (["--replica", "id=r0,url=http://h:1,model=m"], "needs limit or max_cpu_loras"),
        (["--replica", "id=r0,url=http://h:1,model=m,limit=two"], "limit must be a whole number, not 'two'"),
        (
            ["--replica", "id=r0,url=http://h:1,model=m,limit=0"],
            "a replica's limit must be an int of at least 1",
        ),
        (["--replica", "id=r0,url=http://h:1/v1,model=m,limit=2"], "give the server's root URL, without /v1"),
        (["--replica", "id=r0,url=ftp://h,model=m,limit=2"], "must be an http(s) URL"),
        (["--replica", "id=r0,url=http://h:1,model=m,limit=2,colour=red"], "unknown field 'colour'"),
        (
            [
                "--replica",
                "id=r0,url=http://h:1,model=m,limit=2",
                "--replica",
                "id=r0,url=http://h:2,model=m,limit=2",
            ],
            "the id 'r0' is used twice",
        ),
        (
            [
                "--replica",
                "id=r0,url=http://h:1,model=m,limit=2",
                "--replica",
                "id=r1,url=http://h:2,model=m,limit=3",
            ],
            "a limit belongs to the model",
        ),
        (
            ["--replica", "id=r0,url=http://h:1,model=m,limit=2,api_key_env=NOT_SET_ANYWHERE"],
            "NOT_SET_ANYWHERE, which is not set",
        ),
        (
            ["--replica", "id=r0,url=http://h:1,model=m,limit=2,api_key_env=has-dash"],
            "must name an environment variable",
        ),
        (
            ["--replica", "id=r0,url=http://h:1,model=m,limit=2", "--adapters-root", "/no/such/dir"],
            "is not a directory",
        ),
        (["--pin", "nope=2"], "pins.nope: no adapter of that name"),
        (["--pin", "a0=zero"], "--pin 'a0=zero': COPIES must be a whole number"),
        (["--pin", "a0=0"], "pins.a0: copies must be a whole number of at least 1"),
        (["--prewarm", "nope"], "fleet.prewarm 'nope': no adapter of that name"),
        (["--adapter", "tiny=/x"], "'tiny' is a base model's name"),
        (["--adapter", "sql"], "--adapter 'sql': expected NAME=VALUE"),
        (["--adapter-model", "llama"], "adapters.model: no replica serves 'llama'"),
        (["--api-key-env", "ROUTER_KEY_NOT_SET"], "ROUTER_KEY_NOT_SET, which is not set"),
    ],
)
def test_bad_flags_are_named_without_a_traceback(
    args: list[str], complaint: str, capsys: pytest.CaptureFixture[str], adapter_dir: Path
) -> None:
    base = ["--adapters-root", str(adapter_dir)]
    if not any(a == "--replica" for a in args) and args:
        base += ["--replica", "id=r0,url=http://127.0.0.1:1,model=tiny,limit=2"]
    code, out, err = run_serve([*base, *args], capsys)
    assert code == 2, err
    assert out == ""
    assert err.startswith("lorafleet serve: error: "), err
    assert complaint in err
    assert "Traceback" not in err


@pytest.mark.parametrize("flag", [["--api-key", "sk-live-123"], ["--api-key=sk-live-123"]])
def test_a_key_on_the_command_line_is_refused_and_not_repeated(
    flag: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_serve(flag, capsys)
    assert code == 2
    assert "a key is never given on the command line" in err
    assert "sk-live-123" not in err


def test_a_key_in_a_replica_flag_is_refused_and_not_repeated(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_serve(
        ["--replica", "id=r0,url=http://h:1,model=m,limit=2,api_key=sk-live-123"], capsys
    )
    assert code == 2
    assert "a key is never written in the configuration" in err
    assert "sk-live-123" not in err


TOML = """\
[server]
port = 0
api_key_env = "ROUTER_KEY"

[[replicas]]
id = "r0"
url = "{url}"
model = "tiny"
limit = 2

[adapters]
root = "adapters"

[adapters.paths]
sql = "adapters/a0"
"""


@pytest.mark.parametrize(
    ("edit", "complaint"),
    [
        (lambda t: t + "[oops\n", "not valid TOML"),
        (
            lambda t: t.replace("limit = 2", 'limit = 2\napi_key = "sk-live-123"'),
            "replicas[0]: api_key: a key is never",
        ),
        (lambda t: t.replace("port = 0", "prot = 0"), "unknown setting server.prot"),
        (
            lambda t: t.replace("port = 0", 'port = "eighty"'),
            "server.port must be a whole number, not 'eighty'",
        ),
        (lambda t: t.replace("port = 0", "port = 70000"), "server.port must be between 0 and 65535"),
        (
            lambda t: t.replace("limit = 2", "limit = 2.5"),
            "replicas[0].limit must be a whole number, not 2.5",
        ),
        (lambda t: t.replace('model = "tiny"\n', ""), "replicas[0] needs model"),
        (lambda t: t + "[timeouts]\nload = -1\n", "timeouts.load must be a positive number of seconds"),
        (lambda t: t + "[timeouts]\nnap = 1\n", "unknown setting timeouts.nap"),
        (lambda t: t + '[fleet]\nprewarm = "sql"\n', "fleet.prewarm must be a list of adapter names"),
        (lambda t: t + "[fleet]\nrouters = 0\n", "fleet.routers must be at least 1, not 0"),
        (lambda t: t + '[fleet]\nrouters = "2"\n', "fleet.routers must be a whole number"),
        (lambda t: t + "[pins]\nsql = true\n", "pins.sql must be a whole number, not True"),
        (
            lambda t: t.replace('sql = "adapters/a0"', 'sql = { model = "tiny" }'),
            "adapters.paths.sql needs a path",
        ),
        (lambda t: t.replace("[[replicas]]", "replicas = 3\n[x]"), "unknown setting x"),
    ],
)
def test_bad_files_are_named_without_a_traceback(
    edit: Callable[[str], str],
    complaint: str,
    tmp_path: Path,
    standin_url: str,
    adapter_dir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ROUTER_KEY", "k")
    (tmp_path / "adapters").symlink_to(adapter_dir)
    path = tmp_path / "router.toml"
    path.write_text(edit(TOML.format(url=standin_url)))
    code, _, err = run_serve(["--config", str(path)], capsys)
    assert code == 2, err
    assert err.startswith("lorafleet serve: error: "), err
    assert complaint in err
    assert "sk-live-123" not in err
    assert "Traceback" not in err


def test_a_missing_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_serve(["--config", str(tmp_path / "none.toml")], capsys)
    assert code == 2
    assert "cannot read the configuration file" in err
    assert "No such file or directory" in err


def test_check_names_each_adapter_folder_an_engine_would_refuse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One line per folder, naming it and the fix: missing, no config, a config that is not JSON or
    gives no rank; a good folder, and a name the root does not serve, say nothing."""
    make_adapter(tmp_path / "root" / "good")
    make_adapter(tmp_path / "root" / "noconfig", config=False)
    (tmp_path / "root" / ".hidden").mkdir()
    make_adapter(tmp_path / "root" / "norank")
    (tmp_path / "root" / "norank" / "adapter_config.json").write_text('{"r": 0}')
    make_adapter(tmp_path / "notjson")
    (tmp_path / "notjson" / "adapter_config.json").write_text("{r: 8")
    code, _, err = run_serve(
        [
            *("--replica", "id=r0,url=http://127.0.0.1:1,model=tiny,limit=2"),
            *("--adapters-root", str(tmp_path / "root")),
            *("--adapter", f"typo={tmp_path / 'typ0'}", "--adapter", f"bad={tmp_path / 'notjson'}"),
            "--check",
        ],
        capsys,
    )
    assert code == 0
    config = "adapter_config.json"
    assert err.splitlines() == [
        f"lorafleet serve: warning: adapter 'bad': '{tmp_path / 'notjson' / config}' is not JSON (Expecting "
        "property name enclosed in double quotes, line 1): write it again",
        f"lorafleet serve: warning: adapter 'typo': '{tmp_path / 'typ0'}' is not a folder here: fix the path "
        "(or mount it where the router runs)",
        f"lorafleet serve: warning: adapters.root: '{tmp_path / 'root' / 'noconfig'}' has no {config}: it is "
        "no adapter; save it with PEFT's save_pretrained",
        f"lorafleet serve: warning: adapters.root: '{tmp_path / 'root' / 'norank' / config}' gives no rank "
        '("r": a whole number of at least 1): write it again',
    ]


def test_check_reads_the_file_then_the_flags_over_it(
    tmp_path: Path,
    standin_url: str,
    adapter_dir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ROUTER_KEY", "k")
    (tmp_path / "adapters").symlink_to(adapter_dir)
    path = tmp_path / "router.toml"
    path.write_text(TOML.format(url=standin_url) + "[pins]\nsql = 1\n")
    code, out, err = run_serve(["--config", str(path), "--port", "9123", "--check"], capsys)
    assert (code, err) == (0, broken_folder_warning(tmp_path / "adapters"))
    assert out == (
        "replicas: 1 of 'tiny'; adapters: 1 named and those under "
        f"'{tmp_path / 'adapters'}' (1 pinned); listening on 127.0.0.1:9123, clients' key from $ROUTER_KEY\n"
        # The shipped headroom is 0: the limit is the engine's whole memory (SPEC.md §3.16).
        "model 'tiny': up to 2 adapters on one engine (limit + headroom, with limit 2, headroom 0, "
        "routers 1); no engine of it declares max_cpu_loras or max_loras (vLLM does not say its "
        "--max-cpu-loras), so that is not checked\n"
    )


def test_a_bad_flag_value_gets_the_usage(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_serve(["--port", "-1"], capsys)
    assert code == 2
    assert err.startswith("usage: lorafleet serve ")
    assert "argument --port: must be at least 0, not -1" in err


def test_the_shared_interval_comes_from_the_file_or_the_flag_and_must_be_seconds(
    tmp_path: Path, standin_url: str, adapter_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lorafleet_serve import read_toml

    (tmp_path / "adapters").symlink_to(adapter_dir)
    path = tmp_path / "router.toml"
    path.write_text(TOML.format(url=standin_url) + "[timeouts]\nshared_interval = 0.25\n")
    assert Config(**read_toml(path)).shared_interval == 0.25
    assert Config().shared_interval == 0.5  # the fleet's default (lorafleet.FLEET_DEFAULTS)
    code, _, err = run_serve(["--shared-interval", "0"], capsys)
    assert code == 2
    assert "argument --shared-interval" in err


def test_relative_folders_in_a_file_are_the_files(
    tmp_path: Path, standin_url: str, adapter_dir: Path
) -> None:
    from lorafleet_serve import Catalog, read_toml

    (tmp_path / "adapters").symlink_to(adapter_dir)
    path = tmp_path / "router.toml"
    path.write_text(TOML.format(url=standin_url))
    settings = read_toml(path)
    catalog = Catalog(Config(**settings))
    assert catalog.path("sql") == str(tmp_path / "adapters" / "a0")
    assert catalog.path("a1") == str(tmp_path / "adapters" / "a1")


@pytest.mark.anyio
async def test_the_server_checks_its_config_when_entered(adapter_dir: Path) -> None:
    config = Config(
        replicas=(
            ReplicaConfig(id="r0", url="http://127.0.0.1:1", model="tiny", limit=2, api_key_env="UNSET_KEY"),
        ),
        adapter_root=adapter_dir,
        port=0,
    )
    with pytest.raises(ConfigError, match="UNSET_KEY, which is not set"):
        async with RouterServer(config, environ={}):
            pass
    with pytest.raises(ConfigError, match=r"fleet\.attempts must be at least 1"):
        async with RouterServer(
            Config(replicas=config.replicas, adapter_root=adapter_dir, attempts=0), environ={}
        ):
            pass


# -- the command, as a process ---------------------------------------------------------------------


def lines_of(stream: Any) -> queue.Queue[str]:
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in stream:
            lines.put(line)
        lines.put("")

    threading.Thread(target=read, daemon=True).start()
    return lines


@pytest.fixture
def process() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)


def test_lorafleet_serve_keeps_what_start_up_made_out_of_garbage_collection(
    adapter_dir: Path, process: list[subprocess.Popen[str]]
) -> None:
    # A full pass of the collector over start-up's objects stalled every open stream, and at 700
    # new objects it cost seven times as much a request at 128 connections as at 8 (issue 38).
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "lorafleet_serve", "--adapters-root", str(adapter_dir)),
            *("--replica", "id=r0,url=http://127.0.0.1:9,model=tiny,limit=2", "--port", "0"),
            *("--log-level", "DEBUG"),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    process.append(proc)
    lines = lines_of(proc.stderr)
    frozen = None
    while frozen is None:
        line = lines.get(timeout=60)
        assert line, "lorafleet serve ended before it was ready"
        assert "ready on " not in line, "ready before start-up's objects were set aside"
        if found := re.search(
            r"(\d+) objects of start-up kept out of garbage collection; it runs every (\d+)", line
        ):
            frozen, young = int(found[1]), int(found[2])
    # The router's own modules and their imports: tens of thousands of objects.
    assert frozen > 10_000
    assert young == GC_YOUNG
    while "ready on " not in (line := lines.get(timeout=60)):
        assert line, "lorafleet serve ended before it was ready"
    proc.send_signal(signal.SIGINT)
    assert proc.wait(30) == 0


@pytest.mark.parametrize("runtime", ["asyncio", "trio"])
def test_lorafleet_serve_runs_until_interrupted(
    runtime: str, serve: Serve, adapter_dir: Path, process: list[subprocess.Popen[str]]
) -> None:
    standin = serve(api_key="replica-secret")
    replica = f"id=r0,url={standin.url},model=tiny,limit=2,api_key_env=VLLM_KEY"
    proc = subprocess.Popen(
        [
            *(
                sys.executable,
                "-m",
                "lorafleet_serve",
                "--replica",
                replica,
                "--adapters-root",
                str(adapter_dir),
            ),
            *("--port", "0", "--runtime", runtime, "--shutdown-timeout", "2"),
        ],
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, VLLM_KEY="replica-secret"),
    )
    process.append(proc)
    lines = lines_of(proc.stderr)
    url = None
    logged: list[str] = []
    while url is None:
        line = lines.get(timeout=60)
        assert line, f"lorafleet serve ended before it was ready: {''.join(logged)}"
        logged.append(line)
        if "ready on " in line:
            url = line.split("ready on ")[1].split()[0]
    with httpx.Client(base_url=url, timeout=30) as client:
        answer = client.post("/v1/completions", json={"model": "a5", **HELLO})
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-lorafleet-how"] == "loaded"
    proc.send_signal(signal.SIGINT)
    assert proc.wait(30) == 0
    while line := lines.get(timeout=10):
        logged.append(line)
    text = "".join(logged)
    assert "model=a5 replica=r0 how=loaded status=200" in text
    assert "SIGINT: stopping" in text
    # adapter_dir's folder that is no adapter, named once at start-up, as --check names it
    assert text.count(broken_folder_warning(adapter_dir).split("warning: ")[1]) == 1
    assert "CTRL + C" not in text  # hypercorn's start-up line: the router's "ready on" says it
    assert "replica-secret" not in text
    assert "Traceback" not in text


def test_share_routers_is_read_from_the_file(tmp_path: Path, standin_url: str) -> None:
    from lorafleet_serve import read_toml

    path = tmp_path / "router.toml"
    path.write_text(TOML.format(url=standin_url) + "[fleet]\nrouters = 3\n")
    assert read_toml(path)["routers"] == 3


def test_share_a_bad_routers_flag_gets_the_usage(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_serve(["--routers", "0"], capsys)
    assert code == 2
    assert "argument --routers: must be at least 1, not 0" in err

"""``lorafleet serve``'s operator side: new files under an adapter's name served ([renew]), the admin
interface on its own port and key, health that does not flap, a key for ``/metrics``, and pins and
prewarming that land once their replica comes up.

Over real HTTP against stand-ins, under asyncio and trio; the router runs in the test's event loop.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import attrs
import httpx
import pytest

from lorafleet_serve import Config, ConfigError, ReplicaConfig, RouterServer
from lorafleet_serve._config import build
from lorafleet_standin import StandInServer, generated, weights_digest

from conftest import error_of, eventually, make_adapter

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_task_left_running")]

Serve = Callable[..., StandInServer]
PROMPT = "hello"
HELLO = {"prompt": PROMPT, "max_tokens": 4}
ENVIRON = {"ADMIN_KEY": "admin-secret", "ROUTER_KEY": "client-secret", "METRICS_KEY": "metrics-secret"}
ADMIN = {"Authorization": "Bearer admin-secret"}
CLIENT = {"Authorization": "Bearer client-secret"}


def config_of(urls: list[str], adapters: Path, **options: Any) -> Config:
    replicas = tuple(ReplicaConfig(id=f"r{i}", url=url, model="tiny", limit=2) for i, url in enumerate(urls))
    settings: dict[str, Any] = {
        "replicas": replicas,
        "adapter_root": adapters,
        "port": 0,
        "admin_port": 0,
        "admin_api_key_env": "ADMIN_KEY",
        "shutdown_timeout": 1.0,
        **options,
    }
    return build(settings)


@asynccontextmanager
async def operated(
    urls: list[str], adapters: Path, **options: Any
) -> AsyncIterator[tuple[RouterServer, httpx.AsyncClient, httpx.AsyncClient]]:
    """A router with an admin interface, a client for its clients' port and one for the admin port."""
    async with (
        RouterServer(config_of(urls, adapters, **options), environ=ENVIRON) as server,
        httpx.AsyncClient(base_url=server.url, timeout=30) as client,
        httpx.AsyncClient(base_url=server.admin_url, timeout=30, headers=ADMIN) as admin,
    ):
        yield server, client, admin


@asynccontextmanager
async def two_copies(
    serve: Serve, folder: Path
) -> AsyncIterator[tuple[RouterServer, httpx.AsyncClient, dict[str, StandInServer]]]:
    """``sql``, whose files are in ``folder``, pinned to two copies on two stand-ins that hold their
    streams, and held on both; the router looks at the folders every 50 ms."""
    standins = {"r0": serve(), "r1": serve()}
    options = {"pins": {"sql": 2}, "adapter_refresh": 0.05}
    async with operated([s.url for s in standins.values()], folder.parent, **options) as (server, client, _):
        fleet = server.fleet
        await eventually(lambda: all("sql" in r.held for r in fleet.statistics().replicas.values()))
        for standin in standins.values():
            standin.app.hold_streams()
        yield server, client, standins


async def health(client: httpx.AsyncClient) -> dict[str, str]:
    states: dict[str, str] = (await client.get("/health")).json()["replicas"]
    return states


def free_port() -> int:
    """A port nothing listens on (yet): connections to it are refused, as to a replica not up."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def completion(client: httpx.AsyncClient, model: str) -> httpx.Response:
    return await client.post("/v1/completions", json={"model": model, **HELLO})


# -- new files under an old name ([renew]) ---------------------------------------------------------------


@attrs.frozen
class Answered:
    started: float
    ended: float
    text: str


async def answers_while(
    client: httpx.AsyncClient, model: str, done: Callable[[list[Answered]], bool]
) -> list[Answered]:
    """Completions for ``model`` from three clients at once until ``done`` holds of what they got:
    each one good, with when it was asked and answered."""
    got: list[Answered] = []

    async def one_client() -> None:
        while not done(got):
            started = time.monotonic()
            answer = await completion(client, model)
            assert answer.status_code == 200, answer.text  # no good request fails
            got.append(Answered(started, time.monotonic(), answer.json()["choices"][0]["text"]))

    with anyio.fail_after(30):
        async with anyio.create_task_group() as clients:
            for _ in range(3):
                clients.start_soon(one_client)
    return got


def never_old_after_new(got: list[Answered], new: str) -> None:
    """No request asked after one was answered by the new files is answered by the old ones."""
    first_new = min((a.ended for a in got if a.text == new), default=None)
    assert first_new is not None
    late = [a for a in got if a.started > first_new]
    assert late
    assert all(a.text == new for a in late), [(a.started - first_new, a.text) for a in late]


async def test_new_weights_are_served_on_the_next_look_and_no_old_copy_answers_after(
    serve: Serve, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two replicas hold ``sql`` (pinned to two copies), a stream runs on one; new weights are written
    into its folder. The idle copy is unloaded at once, the one in use only when its stream has
    ended, on the old weights; no request asked after one the new weights answered gets the old."""
    caplog.set_level(logging.INFO, "lorafleet")
    folder = make_adapter(tmp_path / "sql")
    old = "".join(generated("sql", PROMPT, 4, weights_digest(folder)))
    async with two_copies(serve, folder) as (server, client, standins):
        fleet = server.fleet
        body = {"model": "sql", "stream": True, **HELLO}
        async with client.stream("POST", "/v1/completions", json=body) as stream:
            home = stream.headers["x-lorafleet-replica"]
            away = "r1" if home == "r0" else "r0"
            (folder / "adapter_model.safetensors").write_bytes(b"\1" * 64)
            new = "".join(generated("sql", PROMPT, 4, weights_digest(folder)))
            assert new != old
            # The look sees the change while the away copy is idle, so it goes at once: the unload
            # and load counts below are this test's. (Were clients' requests running on both copies
            # then, the next request would be parked until the first of them went, [renew].)
            await eventually(lambda: len(standins[away].app.calls_to("unload")) == 1)
            got = await answers_while(client, "sql", lambda got: sum(a.text == new for a in got) >= 12)
            never_old_after_new(got, new)
            # The idle copy went and the new files were loaded in its place; the one in use stays.
            assert len(standins[away].app.calls_to("unload")) == 1
            assert len(standins[away].app.calls_to("load")) == 2
            assert standins[home].app.calls_to("unload") == []
            for standin in standins.values():
                standin.app.release()
            streamed = [json.loads(line[6:]) async for line in stream.aiter_lines() if line[6:7] == "{"]
        assert "".join(e["choices"][0]["text"] for e in streamed) == old  # it finished on its copy
        # Its copy unloaded after its stream, the pin then loads the new files there too.
        await eventually(lambda: len(standins[home].app.calls_to("load")) == 2)
        assert len(standins[home].app.calls_to("unload")) == 1
        await eventually(lambda: all("sql" in r.held for r in fleet.statistics().replicas.values()))
        got = await answers_while(client, "sql", lambda got: len(got) >= 12)
        assert {a.text for a in got} == {new}
    assert f"adapter 'sql': new files in {folder}: copies loaded before are unloaded" in caplog.text


async def test_new_weights_while_every_copy_runs_are_served_by_the_first_copy_to_go(
    serve: Serve, tmp_path: Path
) -> None:
    """A stream runs on each of the two copies when new weights come: the next request waits for a
    replica, parked ([renew]), and is served by the first copy to go, loading the new files there,
    while the other stream runs on: not held behind that stream, whichever replica it is."""
    async with two_copies(serve, make_adapter(tmp_path / "sql")) as (server, client, standins):
        fleet = server.fleet
        folder = tmp_path / "sql"
        body = {"model": "sql", "stream": True, **HELLO}
        async with contextlib.AsyncExitStack() as streams:
            first = await streams.enter_async_context(client.stream("POST", "/v1/completions", json=body))
            second = await streams.enter_async_context(client.stream("POST", "/v1/completions", json=body))
            homes = {first.headers["x-lorafleet-replica"], second.headers["x-lorafleet-replica"]}
            assert homes == {"r0", "r1"}  # one stream on each copy
            (folder / "adapter_model.safetensors").write_bytes(b"\4" * 64)
            new = "".join(generated("sql", PROMPT, 4, weights_digest(folder)))
            await eventually(lambda: all("sql" in r.unloading for r in fleet.statistics().replicas.values()))
            async with anyio.create_task_group() as tasks:
                answers: list[httpx.Response] = []

                async def ask() -> None:
                    answers.append(await completion(client, "sql"))

                tasks.start_soon(ask)
                await eventually(lambda: fleet.statistics().waiting == 1)  # parked, on no replica
                standins["r1"].app.release()  # r1's stream ends: its copy goes first
            (answer,) = answers
            assert answer.status_code == 200, answer.text
            assert answer.headers["x-lorafleet-replica"] == "r1"
            assert answer.json()["choices"][0]["text"] == new
            assert standins["r0"].app.calls_to("unload") == []  # r0's stream still runs on its copy
            standins["r0"].app.release()


async def test_settings_read_again_look_at_the_folders(serve: Serve, tmp_path: Path) -> None:
    """SIGHUP's ``reload()`` looks at the folders too, whatever ``adapters.refresh`` says."""
    folder = make_adapter(tmp_path / "sql")
    standin = serve()
    async with operated([standin.url], tmp_path, adapter_refresh=3600.0) as (server, client, _):
        assert (await completion(client, "sql")).headers["x-lorafleet-how"] == "loaded"
        (folder / "adapter_model.safetensors").write_bytes(b"\2" * 80)
        assert (await completion(client, "sql")).headers["x-lorafleet-how"] == "hit"  # not looked at yet
        assert await server.reload()
        answer = await completion(client, "sql")
        assert answer.headers["x-lorafleet-how"] == "loaded"
        assert answer.json()["choices"][0]["text"] == "".join(
            generated("sql", PROMPT, 4, weights_digest(folder))
        )
        assert len(standin.app.calls_to("unload")) == 1


async def test_the_operator_reloads_what_no_look_sees(serve: Serve, tmp_path: Path) -> None:
    """New weights of the same size, with the old time put back: only the operator's word tells.
    (No timed look here: one between the write and the time put back would see the change.)"""
    folder = make_adapter(tmp_path / "sql")
    weights = folder / "adapter_model.safetensors"
    standin = serve()
    async with operated([standin.url], tmp_path, adapter_refresh=3600.0) as (server, client, admin):
        assert (await completion(client, "sql")).status_code == 200
        times = os.stat(weights)
        weights.write_bytes(b"\3" * 64)
        os.utime(weights, ns=(times.st_atime_ns, times.st_mtime_ns))
        assert await server.router.look_at_folders() == []
        assert (await completion(client, "sql")).headers["x-lorafleet-how"] == "hit"
        reloaded = await admin.post("/adapters/sql/reload")
        assert reloaded.status_code == 200, reloaded.text
        assert reloaded.json()["adapter"] == "sql"
        answer = await completion(client, "sql")
        assert answer.headers["x-lorafleet-how"] == "loaded"
        assert answer.json()["choices"][0]["text"] == "".join(
            generated("sql", PROMPT, 4, weights_digest(folder))
        )
        assert len(standin.app.calls_to("unload")) == 1


# -- what the admin interface shows ----------------------------------------------------------------------


async def test_each_adapter_where_it_is_held_in_use_and_why_it_failed(
    serve: Serve, adapter_dir: Path
) -> None:
    standin = serve()
    standin.app.hold_streams()
    async with operated([standin.url], adapter_dir) as (server, client, admin):
        assert (await completion(client, "a0")).status_code == 200
        refused = await completion(client, "rank64")
        assert refused.status_code == 400
        body = {"model": "a1", "stream": True, **HELLO}
        async with client.stream("POST", "/v1/completions", json=body) as held:
            assert held.status_code == 200
            await eventually(lambda: server.fleet.statistics().replicas["r0"].held.get("a1") == 1)
            answer = await admin.get("/adapters")
            assert answer.status_code == 200
            assert answer.headers["content-type"] == "application/json"
            adapters = answer.json()["adapters"]
            standin.app.release()
            await held.aread()
    assert set(adapters) == {"a0", "a1", "rank64"}
    a0, a1, rank64 = adapters["a0"], adapters["a1"], adapters["rank64"]
    assert (a0["held"], a0["in_use"], a0["loading"], a0["requests"]) == ({"r0": 0}, 0, [], 1)
    assert (a1["held"], a1["in_use"]) == ({"r0": 1}, 1)
    assert a0["folder"] == str(adapter_dir / "a0")
    assert a0["fingerprint"]["files"] == 2
    assert a0["fingerprint"]["bytes"] == os.path.getsize(adapter_dir / "a0" / "adapter_config.json") + 64
    assert len(a0["fingerprint"]["digest"]) == 16
    assert a0["last_load_error"] is None
    assert (a0["pinned"], a0["warming"]) == (None, False)
    assert rank64["held"] == {}
    error = rank64["last_load_error"]
    assert (error["replica"], error["outcome"]) == ("r0", "adapter_fault")
    assert "LoRA rank 64 is greater than max_lora_rank 16." in error["message"]


async def test_one_adapter_and_the_replicas(serve: Serve, adapter_dir: Path) -> None:
    standin = serve()
    async with operated([standin.url], adapter_dir) as (_, client, admin):
        assert (await completion(client, "a2")).status_code == 200
        one = (await admin.get("/adapters/a3")).json()  # served, never asked for
        replicas = (await admin.get("/replicas")).json()["replicas"]
        r0 = (await admin.get("/replicas/r0")).json()
    assert one["adapter"] == "a3"
    assert (one["held"], one["requests"], one["fingerprint"]["files"]) == ({}, 0, 2)
    assert set(replicas) == {"r0"}
    assert replicas["r0"]["url"] == standin.url
    r0_listed = replicas["r0"]
    assert (r0_listed["state"], r0_listed["drained"], r0_listed["held"]) == ("ok", False, {"a2": 0})
    assert r0 == {"replica": "r0", **replicas["r0"]}


async def test_the_admin_interface_is_off_the_clients_path(serve: Serve, adapter_dir: Path) -> None:
    standin = serve()
    async with operated([standin.url], adapter_dir, api_key_env="ROUTER_KEY") as (server, client, _):
        # Not on the clients' port, with the clients' key or without.
        for headers in ({}, CLIENT, ADMIN):
            assert (await client.get("/adapters", headers=headers)).status_code == 404
        # Not with the clients' key on its own port; nor does its key open a completion.
        async with httpx.AsyncClient(base_url=server.admin_url) as other:
            assert error_of(await other.get("/adapters", headers=CLIENT))["code"] == "invalid_api_key"
            assert (await other.get("/live")).json() == {"status": "alive"}  # a liveness probe: no key
        answer = await client.post("/v1/completions", json={"model": "a0", **HELLO}, headers=ADMIN)
        assert error_of(answer)["code"] == "invalid_api_key"


# -- what it does -------------------------------------------------------------------------------------------


async def test_forgetting_a_refusal_the_folder_does_not_show(serve: Serve, tmp_path: Path) -> None:
    """The folder is fixed keeping its files' sizes and times (a copy that keeps both): nothing the
    router sees changed, so the refusal stands until the operator forgets it."""
    folder = make_adapter(tmp_path / "sql", rank=64)
    config = folder / "adapter_config.json"
    standin = serve()
    async with operated([standin.url], tmp_path) as (_, client, admin):
        refused = await completion(client, "sql")
        assert refused.status_code == 400
        assert "LoRA rank 64 is greater than max_lora_rank 16." in error_of(refused)["message"]
        times = os.stat(config)
        config.write_text(config.read_text().replace('"r": 64', '"r": 16'))
        os.utime(config, ns=(times.st_atime_ns, times.st_mtime_ns))
        assert (await completion(client, "sql")).status_code == 400  # refused at once, from memory
        assert len(standin.app.calls_to("load")) == 1
        answer = await admin.post("/adapters/sql/forget-refusal")
        assert answer.status_code == 200, answer.text
        assert answer.json()["adapter"] == "sql"
        served = await completion(client, "sql")
        assert served.status_code == 200, served.text
        assert served.headers["x-lorafleet-how"] == "loaded"


async def test_the_operator_unloads_an_idle_adapter_and_never_one_a_request_runs_on(
    serve: Serve, adapter_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """[dismiss] through the admin interface: a0 idle goes at once (its next request loads it again);
    a1, a stream running on it, is refused with the machine's reason and nothing changes."""
    caplog.set_level(logging.INFO, "lorafleet")
    standin = serve()
    async with operated([standin.url], adapter_dir) as (server, client, admin):
        assert (await completion(client, "a0")).status_code == 200
        await eventually(lambda: server.fleet.statistics().leases == 0)
        standin.app.hold_streams()
        body = {"model": "a1", "stream": True, **HELLO}
        async with client.stream("POST", "/v1/completions", json=body) as held:
            await eventually(lambda: server.fleet.statistics().replicas["r0"].held.get("a1") == 1)
            before = server.fleet.statistics()
            refused = await admin.post("/replicas/r0/adapters/a1/unload")
            assert refused.status_code == 409
            assert error_of(refused) == {
                "message": "Adapter `a1` is not unloaded from `r0`: 1 of this router's requests run on it; "
                "nothing changed",
                "type": "invalid_request_error",
                "param": None,
                "code": "adapter_not_idle",
            }
            assert server.fleet.statistics() == before
            unloaded = await admin.post("/replicas/r0/adapters/a0/unload")
            assert unloaded.status_code == 200, unloaded.text
            assert unloaded.json()["replica"] == "r0"
            await eventually(lambda: "a0" not in server.fleet.statistics().replicas["r0"].unloading)
            assert [c.body["lora_name"] for c in standin.app.calls_to("unload")] == ["a0"]
            standin.app.release()
            await held.aread()
        again = await completion(client, "a0")
        assert again.headers["x-lorafleet-how"] == "loaded"
    assert "adapter 'a0': unloaded from r0 at the operator's word" in caplog.text


async def test_an_adapters_view_shows_its_demand_and_the_refusal_in_force(
    serve: Serve, adapter_dir: Path
) -> None:
    standin = serve()
    async with operated([standin.url], adapter_dir) as (_, client, admin):
        for _ in range(3):
            assert (await completion(client, "a0")).status_code == 200
        assert (await completion(client, "rank64")).status_code == 400
        a0 = (await admin.get("/adapters/a0")).json()
        rank64 = (await admin.get("/adapters/rank64")).json()
        assert (a0["demand"], a0["refusal"]) == (3, None)
        assert rank64["demand"] == 1
        assert "LoRA rank 64 is greater than max_lora_rank 16." in rank64["refusal"]["message"]
        assert 0 < rank64["refusal"]["seconds_left"] <= 900
        assert (await admin.post("/adapters/rank64/forget-refusal")).json()["refusal"] is None


async def test_a_drained_replica_finishes_its_streams_and_takes_none_until_undrained(
    serve: Serve, adapter_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "lorafleet")
    first, second = serve(), serve()
    async with operated([first.url, second.url], adapter_dir) as (server, client, admin):
        answer = await completion(client, "a0")
        home = answer.headers["x-lorafleet-replica"]
        other = "r1" if home == "r0" else "r0"
        held_on = first if home == "r0" else second
        held_on.app.hold_streams()
        body = {"model": "a0", "stream": True, **HELLO}
        async with client.stream("POST", "/v1/completions", json=body) as stream:
            assert stream.headers["x-lorafleet-replica"] == home
            drained = await admin.post(f"/replicas/{home}/drain")
            assert drained.status_code == 200, drained.text
            assert (drained.json()["changed"], drained.json()["drained"]) == (True, True)
            assert (await health(client))[home] == "draining"  # its stream runs on
            # New requests go elsewhere, loading the adapter there; nothing was unloaded on it.
            moved = await completion(client, "a0")
            assert moved.status_code == 200
            assert moved.headers["x-lorafleet-replica"] == other
            assert moved.headers["x-lorafleet-how"] == "loaded"
            held_on.app.release()
            events = [line async for line in stream.aiter_lines() if line.startswith("data: ")]
        assert events[-1] == "data: [DONE]"
        await eventually(lambda: server.router.health()[1].get(home) == "drained")
        assert held_on.app.calls_to("unload") == []
        assert (await admin.post(f"/replicas/{home}/drain")).json()["changed"] is False
        # Put back: its listing read afresh (it still holds a0), it serves again.
        undrained = await admin.post(f"/replicas/{home}/undrain")
        assert (undrained.json()["changed"], undrained.json()["drained"]) == (True, False)
        await eventually(lambda: server.router.health()[1].get(home) == "ok")
        assert "a0" in server.fleet.statistics().replicas[home].held
        assert (await admin.post(f"/replicas/{home}/undrain")).json()["changed"] is False
    said = caplog.text
    assert f"replica {home} drained by the operator" in said
    assert f"replica {home} undrained by the operator" in said


async def test_bad_input_gets_a_clear_error_and_changes_nothing(serve: Serve, adapter_dir: Path) -> None:
    standin = serve()
    async with operated([standin.url], adapter_dir) as (server, client, admin):
        assert (await completion(client, "a0")).status_code == 200
        await eventually(lambda: server.fleet.statistics().leases == 0)  # its handler ends just after

        def state() -> Any:
            return server.fleet.statistics(), server.drained, server.router.health()

        before = state()
        cases: list[tuple[str, str, dict[str, str] | None, int, str]] = [
            ("GET", "/adapters/nope", None, 404, "unknown_adapter"),
            ("POST", "/adapters/nope/forget-refusal", None, 404, "unknown_adapter"),
            ("POST", "/adapters/nope/reload", None, 404, "unknown_adapter"),
            ("GET", "/adapters/..%2Fetc", None, 404, "not_found"),  # the path is decoded: /adapters/../etc
            ("GET", "/adapters/.hidden", None, 404, "unknown_adapter"),
            ("GET", "/adapters/broken", None, 404, "unknown_adapter"),  # a folder with no adapter_config.json
            ("POST", "/replicas/r9/drain", None, 404, "unknown_replica"),
            ("POST", "/replicas/r9/undrain", None, 404, "unknown_replica"),
            ("GET", "/replicas/r9", None, 404, "unknown_replica"),
            ("POST", "/replicas/r0/drain", {"Authorization": ""}, 401, "missing_api_key"),
            ("POST", "/replicas/r0/drain", {"Authorization": "Bearer wrong"}, 401, "invalid_api_key"),
            ("POST", "/replicas/r0/drain", {"Authorization": "Basic admin-secret"}, 401, "missing_api_key"),
            ("GET", "/replicas/r0/drain", None, 405, "method_not_allowed"),
            ("POST", "/replicas/r0/reboot", None, 404, "not_found"),
            ("POST", "/adapters/a0/unload", None, 404, "not_found"),  # a replica's: /replicas/ID/adapters/...
            ("POST", "/replicas/r9/adapters/a0/unload", None, 404, "unknown_replica"),
            ("POST", "/replicas/r0/adapters/nope/unload", None, 404, "unknown_adapter"),
            ("POST", "/replicas/r0/adapters/a1/unload", None, 409, "adapter_not_idle"),  # not held there
            ("GET", "/replicas/r0/adapters/a0/unload", None, 405, "method_not_allowed"),
            ("DELETE", "/adapters/a0", None, 405, "method_not_allowed"),
        ]
        for method, path, headers, status, code in cases:
            answer = await admin.request(method, path, headers=headers)
            assert answer.status_code == status, (method, path, answer.text)
            assert error_of(answer)["code"] == code, (method, path)
            assert error_of(answer)["message"], (method, path)
            assert state() == before, (method, path)
        message = error_of(await admin.post("/replicas/r9/drain"))["message"]
        assert message == "No replica `r9` (this router's: 'r0')"


# -- health that does not flap, and pins and prewarming that land late --------------------------------


async def test_a_replica_down_at_start_stays_failing_then_takes_its_pins_and_prewarming(
    serve: Serve, adapter_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Kubernetes starts the router before its replicas: the replica's reads fail, and it reads
    ``failing`` with its URL and why at every look until one succeeds; then the pinned and the
    prewarmed adapters load there, and the prewarmed one is an ordinary adapter again."""
    caplog.set_level(logging.INFO, "lorafleet")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    options = {"pins": {"a0": 1}, "prewarm": ("a1",), "listing_interval": 0.05}
    async with operated([url], adapter_dir, **options) as (server, client, admin):
        fleet = server.fleet
        assert fleet.warming == {"a1"}
        seen: list[str] = []
        while (failure := fleet.failure("r0")) is None or failure.failed_reads < 4:
            seen.append((await health(client))["r0"])
            await anyio.sleep(0.005)
        seen.append((await health(client))["r0"])
        assert seen
        assert all(s.startswith(f"failing: {url}: no answer from the replica: Connect") for s in seen), seen
        assert (await client.get("/health")).status_code == 503
        replica = (await admin.get("/replicas/r0")).json()
        assert replica["last_failure"]["failed_reads"] >= 4
        serve(port=port)  # the replica comes up
        await eventually(lambda: fleet.warming == frozenset())
        await eventually(lambda: (server.router.health()[1]["r0"]) == "ok")
        # The pin's load and the prewarm's go out together; either may land first.
        await eventually(lambda: set(fleet.statistics().replicas["r0"].held) == {"a0", "a1"})
        assert fleet.statistics().pins == {"a0": 1}  # the prewarm's pin lifted, the configured one kept
        assert fleet.failure("r0") is None
    said = caplog.text
    assert f"could not read the adapters of r0 ({url}): no answer from the replica" in said
    assert "reads in a row" in said
    assert "could not prewarm adapter 'a1' yet" in said
    assert f"replica r0 ({url}) answered again, after" in said


# -- /metrics' own key ---------------------------------------------------------------------------------------


async def test_metrics_can_want_a_key_of_their_own(serve: Serve, adapter_dir: Path) -> None:
    standin = serve()
    options = {"api_key_env": "ROUTER_KEY", "metrics_api_key_env": "METRICS_KEY"}
    async with operated([standin.url], adapter_dir, **options) as (_, client, _admin):
        assert error_of(await client.get("/metrics"))["code"] == "missing_api_key"
        assert error_of(await client.get("/metrics", headers=CLIENT))["code"] == "invalid_api_key"
        scraped = await client.get("/metrics", headers={"Authorization": "Bearer metrics-secret"})
        assert scraped.status_code == 200
        assert "lorafleet_grants_total" in scraped.text
        assert (await client.get("/health")).status_code == 200  # probes need no key
    async with operated([standin.url], adapter_dir) as (_, client, _admin):
        assert (await client.get("/metrics")).status_code == 200  # no key by default


# -- the settings ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"admin_api_key_env": None}, "admin.port needs admin.api_key_env"),
        ({"admin_api_key_env": "ROUTER_KEY", "api_key_env": "ROUTER_KEY"}, "the clients' key"),
        ({"admin_port": 8000, "port": 8000}, "needs a port of its own"),
        ({"admin_port": None}, "admin.api_key_env is set, but admin.port is not"),
        ({"admin_api_key_env": "has-dash"}, "admin.api_key_env must name an environment variable"),
        ({"metrics_api_key_env": "has-dash"}, "server.metrics_api_key_env must name an environment variable"),
    ],
)
async def test_admin_settings_that_make_no_sense_are_refused(
    adapter_dir: Path, options: dict[str, Any], said: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(said)):
        config_of(["http://127.0.0.1:1"], adapter_dir, **options)


async def test_an_unset_admin_key_variable_stops_the_start(adapter_dir: Path) -> None:
    config = config_of(["http://127.0.0.1:1"], adapter_dir)
    with pytest.raises(ConfigError, match=r"admin\.api_key_env names the environment variable ADMIN_KEY"):
        async with RouterServer(config, environ={}):
            pass


async def test_the_router_file_takes_an_admin_table(tmp_path: Path, adapter_dir: Path) -> None:
    from lorafleet_serve import read_toml

    path = tmp_path / "router.toml"
    path.write_text(
        '[server]\nmetrics_api_key_env = "METRICS_KEY"\n'
        '[admin]\nport = 8001\nhost = "0.0.0.0"\napi_key_env = "ADMIN_KEY"\n'
        f"[adapters]\nroot = {json.dumps(str(adapter_dir))}\n"
        '[[replicas]]\nid = "r0"\nurl = "http://127.0.0.1:1"\nmodel = "tiny"\nlimit = 2\n'
    )
    config = build(read_toml(path))
    assert (config.admin_host, config.admin_port, config.admin_api_key_env) == ("0.0.0.0", 8001, "ADMIN_KEY")
    assert config.metrics_api_key_env == "METRICS_KEY"
    path.write_text(path.read_text().replace("[admin]\n", '[admin]\nkey = "x"\n'))
    with pytest.raises(ConfigError, match=r"admin\.key: a key is never written"):
        read_toml(path)

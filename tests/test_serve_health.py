"""``lorafleet serve``'s ``/health`` tells a replica that cannot take adapters: not ready, with the fix in
serve's words (which setting, which vLLM flag or variable), and one log line in the same words.

Over real HTTP against stand-ins that answer as a misconfigured vLLM does, under asyncio and trio:
the runtime LoRA routes absent, LoRA not enabled, a key refused or missing, a URL that is not a vLLM
root. (tests/test_serve_engines.py does the same against a real vLLM.)
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from lorafleet_serve import Config, ReplicaConfig, RouterServer
from lorafleet_standin import StandInServer

from conftest import eventually

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_task_left_running")]

HELLO = {"prompt": "hello", "max_tokens": 4}
ROUTES = (
    "not ready: vLLM's runtime LoRA routes are absent: start it with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True "
    "in its environment"
)
LORA = "not ready: LoRA is not enabled on this vLLM: start it with --enable-lora"


@asynccontextmanager
async def routing(
    replicas: list[ReplicaConfig], adapter_dir: Path, environ: dict[str, str] | None = None, **options: Any
) -> AsyncIterator[tuple[RouterServer, httpx.AsyncClient]]:
    config = Config(
        replicas=tuple(replicas), adapter_root=adapter_dir, port=0, shutdown_timeout=1.0, **options
    )
    async with (
        RouterServer(config, environ=environ or {}) as server,
        httpx.AsyncClient(base_url=server.url, timeout=30) as client,
    ):
        yield server, client


def replica(standin: StandInServer, rid: str = "r0", key_env: str | None = None) -> ReplicaConfig:
    return ReplicaConfig(id=rid, url=standin.url, model="tiny", limit=2, api_key_env=key_env)


async def health(client: httpx.AsyncClient) -> tuple[int, dict[str, Any]]:
    answer = await client.get("/health")
    return answer.status_code, answer.json()


def lines_of(caplog: pytest.LogCaptureFixture, start: str) -> list[str]:
    """The lines that start so, without the id of the request they came in (``request_id=``)."""
    lines = (r.getMessage() for r in caplog.records)
    return [re.sub(r" request_id=\S+$", "", line) for line in lines if line.startswith(start)]


async def test_a_replica_without_the_runtime_lora_routes_is_not_ready_until_it_has_them(
    serve: Callable[..., StandInServer], adapter_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "lorafleet")
    standin = serve(runtime_lora=False)
    async with routing([replica(standin)], adapter_dir, listing_interval=0.2) as (_, client):
        assert await health(client) == (200, {"status": "ok", "replicas": {"r0": "ok"}})
        answer = await client.post("/v1/completions", json={"model": "a0", **HELLO})
        assert answer.status_code == 503
        assert await health(client) == (503, {"status": "unavailable", "replicas": {"r0": ROUTES}})
        assert lines_of(caplog, "replica r0 is not ready") == [f"replica r0 is {ROUTES}"]
        # vLLM restarted with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True: the router asks again by itself
        # (a GET of the load route, answered 405 where it exists), with no request needed.
        standin.app.runtime_lora = True
        await eventually(lambda: lines_of(caplog, "replica r0 is ready") != [])
        _, said = await health(client)
        state = said["replicas"]["r0"]
        # The failed load's backoff may still run.
        assert state == "ok" or state.startswith(f"failing: {standin.url}: "), state
    assert [c.method for c in standin.app.calls_to("load")][-1] == "GET"


async def test_a_replica_without_lora_enabled_is_not_ready(
    serve: Callable[..., StandInServer], adapter_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "lorafleet")
    standin = serve(enable_lora=False)
    async with routing([replica(standin)], adapter_dir) as (_, client):
        answer = await client.post("/v1/completions", json={"model": "a0", **HELLO})
        assert answer.status_code == 503
        assert answer.json()["error"]["message"] == (
            "No replica can load `a0`: each is not ready; see the router's /health"
        )
        assert await health(client) == (503, {"status": "unavailable", "replicas": {"r0": LORA}})
        # A base-model request needs no adapter: the replica serves it.
        assert (await client.post("/v1/completions", json={"model": "tiny", **HELLO})).status_code == 200
    assert lines_of(caplog, "replica r0 is not ready") == [f"replica r0 is {LORA}"]


@pytest.mark.parametrize("key_env", ["VLLM_KEY", None])
async def test_a_refused_or_missing_key_is_named_by_its_setting(
    serve: Callable[..., StandInServer],
    adapter_dir: Path,
    caplog: pytest.LogCaptureFixture,
    key_env: str | None,
) -> None:
    caplog.set_level(logging.INFO, "lorafleet")
    standin = serve(api_key="the-right-key")
    environ = {"VLLM_KEY": "a-wrong-key"}
    async with routing([replica(standin, key_env=key_env)], adapter_dir, environ) as (_, client):
        # The fleet's first listing was refused: nothing else is needed to know.
        status, said = await health(client)
        answer = await client.post("/v1/completions", json={"model": "a0", **HELLO})
    if key_env is None:
        fix = (
            "not ready: vLLM wants a key (401): put its --api-key in an environment variable and name the "
            "variable with api_key_env in replicas[0] ('r0')"
        )
    else:
        fix = (
            "not ready: vLLM refused the key (401): set $VLLM_KEY (api_key_env of replicas[0] ('r0')) to "
            "the key vLLM was started with (--api-key)"
        )
    assert (status, said) == (503, {"status": "unavailable", "replicas": {"r0": fix}})
    assert answer.status_code == 503
    logged = caplog.text
    assert f"replica r0 is {fix}" in logged
    # The fleet's own line says it in serve's words too, and no key is shown.
    assert (
        f"could not read the adapters of r0 ({standin.url}): the replica refused the API key (401 "
        "Unauthorized): set the " in logged
    )
    assert "api_key_env of that replica in lorafleet serve's configuration" in logged
    assert "give the Replica the key" not in logged
    assert "the-right-key" not in logged
    assert "a-wrong-key" not in logged


async def test_a_url_that_is_not_a_servers_root_is_named(
    serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    standin = serve()
    moved = ReplicaConfig(id="r0", url=standin.url + "/vllm", model="tiny", limit=2)
    async with routing([moved], adapter_dir) as (_, client):
        assert await health(client) == (
            503,
            {
                "status": "unavailable",
                "replicas": {
                    "r0": "not ready: it has no /v1/models, which every vLLM server has: give its root URL "
                    "(http://host:port, without /v1) in replicas[0] ('r0')"
                },
            },
        )


async def test_a_good_replica_serves_while_the_other_is_not_ready(
    serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    good, static = serve(), serve(runtime_lora=False)
    async with routing([replica(good, "r0"), replica(static, "r1")], adapter_dir) as (_, client):
        answers = [await client.post("/v1/completions", json={"model": f"a{i}", **HELLO}) for i in range(6)]
        assert [a.status_code for a in answers] == [200] * 6
        assert {a.headers["x-lorafleet-replica"] for a in answers} == {"r0"}
        assert static.app.calls_to("load") != []  # placement tried it, and it said why it could not
        assert await health(client) == (200, {"status": "ok", "replicas": {"r0": "ok", "r1": ROUTES}})

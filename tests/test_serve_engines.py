"""``lorafleet serve``'s ``/health`` in front of a real vLLM 0.32 that cannot take adapters, and the
stand-in answering as it does: the same test bodies, under asyncio and trio.

The real servers are the session's (conftest's ``vllm_servers``): "static" runs without
``VLLM_ALLOW_RUNTIME_LORA_UPDATING``, "keyed" with ``--api-key``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import attrs
import httpx
import pytest

from lorafleet_serve import Config, ReplicaConfig, RouterServer
from lorafleet_standin import StandInServer

from conftest import KEY

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_task_left_running")]


@attrs.frozen
class Engines:
    """A server without the runtime LoRA routes and one with a key, and the adapters they can read."""

    static: str
    keyed: str
    adapters: Path


@pytest.fixture(params=["standin", "vllm"])
def engines(
    request: pytest.FixtureRequest, serve: Callable[..., StandInServer], built_adapters: Path
) -> Engines:
    if request.param == "standin":
        return Engines(serve(runtime_lora=False).url, serve(api_key=KEY).url, built_adapters)
    servers = request.getfixturevalue("vllm_servers")
    engine = request.getfixturevalue("real_engine")
    return Engines(servers["static"].url, servers["keyed"].url, engine.build / "adapters")


def config_of(url: str, adapters: Path, key_env: str | None = None) -> Config:
    replica = ReplicaConfig(id="r0", url=url, model="tiny", limit=2, api_key_env=key_env)
    return Config(replicas=(replica,), adapter_root=adapters, port=0, shutdown_timeout=1.0)


async def test_a_vllm_without_runtime_lora_updating_is_not_ready_with_the_fix(
    engines: Engines, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "lorafleet")
    fix = (
        "vLLM's runtime LoRA routes are absent: start it with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True in its "
        "environment"
    )
    async with (
        RouterServer(config_of(engines.static, engines.adapters), environ={}) as server,
        httpx.AsyncClient(base_url=server.url, timeout=60) as client,
    ):
        body = {"model": "lora-0", "prompt": "hello", "max_tokens": 4}
        answer = await client.post("/v1/completions", json=body)
        health = await client.get("/health")
    assert answer.status_code == 503
    assert answer.json()["error"]["message"].endswith("each is not ready; see the router's /health")
    assert (health.status_code, health.json()) == (
        503,
        {"status": "unavailable", "replicas": {"r0": f"not ready: {fix}"}},
    )
    assert f"replica r0 is not ready: {fix}" in caplog.text


@pytest.mark.parametrize("key_env", ["WRONG_KEY", None])
async def test_a_vllm_that_refuses_the_key_is_not_ready_naming_the_setting(
    engines: Engines, key_env: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "lorafleet")
    config = config_of(engines.keyed, engines.adapters, key_env)
    async with (
        RouterServer(config, environ={"WRONG_KEY": "not-" + KEY}) as server,
        httpx.AsyncClient(base_url=server.url, timeout=60) as client,
    ):
        health = await client.get("/health")
    state = health.json()["replicas"]["r0"]
    assert health.status_code == 503
    if key_env is None:
        assert state == (
            "not ready: vLLM wants a key (401): put its --api-key in an environment variable and name the "
            "variable with api_key_env in replicas[0] ('r0')"
        )
    else:
        assert state == (
            "not ready: vLLM refused the key (401): set $WRONG_KEY (api_key_env of replicas[0] ('r0')) to "
            "the key vLLM was started with (--api-key)"
        )
    assert "give the Replica the key" not in caplog.text
    assert KEY not in caplog.text

"""``lorafleet serve``'s ``/health`` in front of a real vLLM 0.32 that cannot take adapters, and the
stand-in answering as it does: the same test bodies, under asyncio and trio.

The real servers are the session's (conftest's ``vllm_servers``): "static" runs without
``VLLM_ALLOW_RUNTIME_LORA_UPDATING``, "keyed" with ``--api-key``.
"""

from __future__ import annotations

import logging
import shutil
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


async def test_new_weights_in_a_held_adapters_folder_change_its_greedy_output(
    engines: Engines, tmp_path: Path
) -> None:
    """[renew] through serve: ``sql`` is lora-0, held; lora-1's weights written into its folder change
    its next greedy answer, and lora-0's written back bring the first answer back."""
    folder = tmp_path / "sql"
    shutil.copytree(engines.adapters / "lora-0", folder)
    weights = "adapter_model.safetensors"
    config = attrs.evolve(config_of(engines.keyed, tmp_path, "KEY_VAR"), adapter_refresh=3600.0)
    async with (
        RouterServer(config, environ={"KEY_VAR": KEY}) as server,
        httpx.AsyncClient(base_url=server.url, timeout=120) as client,
    ):

        async def greedy_after(weights_of: str) -> str:
            """Write ``weights_of``'s weights into sql's folder; sql's greedy answer once they are seen."""
            shutil.copyfile(engines.adapters / weights_of / weights, folder / weights)
            assert await server.router.look_at_folders() == ["sql"]
            body = {"model": "sql", "prompt": "hello world", "max_tokens": 8, "temperature": 0}
            answer = await client.post("/v1/completions", json=body)
            assert answer.status_code == 200, answer.text
            assert answer.headers["x-lorafleet-how"] == "loaded"  # the old copy went; the files read anew
            text: str = answer.json()["choices"][0]["text"]
            return text

        body = {"model": "sql", "prompt": "hello world", "max_tokens": 8, "temperature": 0}
        first = (await client.post("/v1/completions", json=body)).json()["choices"][0]["text"]
        retrained = await greedy_after("lora-1")
        back = await greedy_after("lora-0")
    assert retrained != first
    assert back == first

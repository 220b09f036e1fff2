"""Every route ``lorafleet serve`` routes, through the router to a real vLLM 0.32 on the CPU and to the
stand-in answering as it does: a generating engine for the generating routes, the tiny model run as an
embedding model (``--runner pooling --convert embed``) for the pooling ones, an adapter loaded by the
router for each. A route the engine does not serve in this configuration (the scale-out routes without
``--enable-scale-out``, ``/classify`` on an embedding model) is skipped with what the engine answered.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest

from lorafleet_serve import Config, ReplicaConfig, RouterServer
from lorafleet_serve._routes import ROUTED, STREAMED
from lorafleet_standin import StandInServer

MESSAGES = [{"role": "user", "content": "tell me"}]
POOLED = {
    "embeddings",
    "embed_v2",
    "pooling",
    "classify",
    "score",
    "score_v1",
    "rerank",
    "rerank_v1",
    "rerank_v2",
}
BODIES: dict[str, dict[str, Any]] = {
    "completions": {"prompt": "hello", "max_tokens": 3},
    "chat": {"messages": MESSAGES, "max_tokens": 3},
    "responses": {"input": "tell me", "max_output_tokens": 3},
    "messages": {"messages": MESSAGES, "max_tokens": 3},
    "count_tokens": {"messages": MESSAGES},
    "chat_batch": {"messages": [MESSAGES], "max_tokens": 2},
    "tokenize": {"prompt": "hello world"},
    "detokenize": {"tokens": [335, 391]},
    "embeddings": {"input": ["hello", "world"]},
    "embed_v2": {"texts": ["hello"]},
    "pooling": {"input": "hello"},
    "classify": {"input": "hello"},
    "score": {"text_1": "hello", "text_2": "world"},
    "score_v1": {"text_1": "hello", "text_2": ["world"]},
    "rerank": {"query": "hello", "documents": ["world", "hello"]},
    "rerank_v1": {"query": "hello", "documents": ["world"]},
    "rerank_v2": {"query": "hello", "documents": ["world"]},
    "completions_render": {"prompt": "hello"},
    "chat_render": {"messages": MESSAGES},
    "responses_render": {"input": "hello"},
    "messages_render": {"messages": MESSAGES, "max_tokens": 3},
    "completions_derender": {"token_ids": [335, 391]},
    "chat_derender": {"token_ids": [335, 391]},
    "generate": {"token_ids": [335, 391], "sampling_params": {"max_tokens": 2}},
}
"""A body for each routed route (its ``model`` is added), as vLLM 0.32 takes it."""
CASES = [(path, False) for path in ROUTED] + [(p, True) for p, name in ROUTED.items() if name in STREAMED]


@attrs.frozen
class Engines:
    generating: str
    pooling: str
    adapters: Path


@pytest.fixture(params=["standin", "vllm"])
def engines(
    request: pytest.FixtureRequest, serve: Callable[..., StandInServer], built_adapters: Path
) -> Engines:
    if request.param == "standin":
        return Engines(serve().url, serve(runner="pooling").url, built_adapters)
    return Engines(
        request.getfixturevalue("vllm_servers")["open"].url,
        request.getfixturevalue("vllm_pooling").url,
        request.getfixturevalue("real_engine").build / "adapters",
    )


def test_every_route_is_routed_with_a_body() -> None:
    assert set(BODIES) == set(ROUTED.values())


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
@pytest.mark.parametrize(("path", "stream"), CASES, ids=[f"{p}{' stream' if s else ''}" for p, s in CASES])
async def test_the_route_is_routed_to_the_adapter(engines: Engines, path: str, stream: bool) -> None:
    route = ROUTED[path]
    url = engines.pooling if route in POOLED else engines.generating
    config = Config(
        replicas=(ReplicaConfig(id="r0", url=url, model="tiny", limit=2),),
        adapter_root=engines.adapters,
        port=0,
        shutdown_timeout=1.0,
    )
    body = {"model": "lora-1", **BODIES[route], **({"stream": True} if stream else {})}
    async with (
        RouterServer(config, environ={}) as server,
        httpx.AsyncClient(base_url=server.url, timeout=120) as client,
    ):
        # The replica may hold lora-1 from an earlier test (the real engine's are shared): loaded or hit.
        answer = await client.post(path, json=body)
        held = {a for r in server.fleet.statistics().replicas.values() for a in r.held}
    assert answer.headers["x-lorafleet-replica"] == "r0"
    assert answer.headers["x-lorafleet-how"] in ("loaded", "hit")
    if answer.status_code in (403, 404):
        pytest.skip(f"the engine does not serve {path} here: it answered {answer.status_code} {answer.text}")
    assert answer.status_code == 200, answer.text
    assert "lora-1" in held
    if stream:
        assert answer.headers["content-type"].startswith("text/event-stream")
        assert answer.text.count("data: ") >= 2
    else:
        data = answer.json()
        if "model" in data:
            assert data["model"] == "lora-1"  # the engine ran the adapter, by its name
        assert json.dumps(data)

"""``lorafleet serve`` driven by the official ``openai`` client, as a user's program drives vLLM: every
route it routes, sync and async, streamed where the route streams; the client's headers at the
replica; and what it refuses, as the SDK's errors.

Two stand-ins: ``tiny`` generates (completions, chat, responses, messages, tokenize...), ``embedder``
pools (embeddings, score, rerank...), as vLLM's two runners do; adapters a0 and a1 are ``tiny``'s, e0
``embedder``'s.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import openai
import pytest

from lorafleet_serve import Config, ReplicaConfig, RouterServer
from lorafleet_serve._routes import ROUTED
from lorafleet_standin import StandInServer

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_task_left_running")]

Serve = Callable[..., StandInServer]
MESSAGES = [{"role": "user", "content": "hi"}]
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@asynccontextmanager
async def routing(
    serve: Serve, adapter_dir: Path, **options: Any
) -> AsyncIterator[tuple[RouterServer, StandInServer, StandInServer]]:
    generating, pooling = serve(), serve(model="embedder", runner="pooling")
    replicas = (
        ReplicaConfig(id="gen", url=generating.url, model="tiny", limit=2),
        ReplicaConfig(id="pool", url=pooling.url, model="embedder", limit=2),
    )
    folders = {name: str(adapter_dir / folder) for name, folder in (("a0", "a0"), ("a1", "a1"), ("e0", "a2"))}
    config = Config(
        replicas=replicas,
        adapter_paths=folders,
        adapter_models={"a0": "tiny", "a1": "tiny", "e0": "embedder"},
        port=0,
        shutdown_timeout=1.0,
        **options,
    )
    async with RouterServer(config, environ={}) as server:
        yield server, generating, pooling


class Client:
    """The SDK's sync client (run in a worker thread, the router being on this loop) or its async one,
    behind the same awaitable calls."""

    def __init__(self, url: str, sync: bool) -> None:
        self.sync = sync
        options = {"base_url": f"{url}/v1", "api_key": "unused", "max_retries": 0, "timeout": 30}
        self.client: openai.OpenAI | openai.AsyncOpenAI = (
            openai.OpenAI(**options) if sync else openai.AsyncOpenAI(**options)  # type: ignore[arg-type]
        )

    async def call(self, method: Callable[..., Any], **kwargs: Any) -> Any:
        """``method`` (of the client, as ``client.completions.create``) called; a stream read whole."""
        if self.sync:
            return await anyio.to_thread.run_sync(lambda: _read_sync(method(**kwargs)))
        result = await method(**kwargs)
        if isinstance(result, openai.AsyncStream):
            return [event async for event in result]
        return result

    async def post(self, path: str, body: dict[str, Any], stream: bool = False) -> Any:
        """A route the SDK has no method for: its generic ``post``, to the router's root."""
        url = f"{str(self.client.base_url).removesuffix('/v1/')}{path}"
        cls = openai.Stream[object] if self.sync else openai.AsyncStream[object]
        return await self.call(
            self.client.post, path=url, body=body, cast_to=object, stream=stream, stream_cls=cls
        )

    async def aclose(self) -> None:
        if isinstance(self.client, openai.OpenAI):
            self.client.close()
        else:
            await self.client.close()


def _read_sync(result: Any) -> Any:
    return list(result) if isinstance(result, openai.Stream) else result


@pytest.fixture(params=["sync", "async"])
def sync(request: pytest.FixtureRequest) -> bool:
    return bool(request.param == "sync")


def calls(standin: StandInServer, route: str) -> list[Any]:
    return standin.app.calls_to(route)


async def test_the_sdk_drives_every_routed_route(serve: Serve, adapter_dir: Path, sync: bool) -> None:
    async with routing(serve, adapter_dir) as (server, generating, pooling):
        client = Client(server.url, sync)
        c = client.client
        try:
            done = await client.call(c.completions.create, model="a0", prompt="hello", max_tokens=4)
            assert done.choices[0].text
            assert done.model == "a0"
            chunks = await client.call(
                c.completions.create,
                model="a0",
                prompt="hello",
                max_tokens=4,
                stream=True,
                stream_options={"include_usage": True},
            )
            assert [len(ch.choices) for ch in chunks] == [1, 1, 1, 1, 0]
            assert chunks[-1].usage.completion_tokens == 4
            chat = await client.call(c.chat.completions.create, model="a1", messages=MESSAGES, max_tokens=3)
            assert chat.choices[0].message.content
            chunks = await client.call(
                c.chat.completions.create,
                model="a1",
                messages=MESSAGES,
                max_tokens=3,
                stream=True,
                stream_options={"include_usage": True},
            )
            assert chunks[0].choices[0].delta.role == "assistant"
            assert chunks[-1].usage.total_tokens == chunks[-1].usage.prompt_tokens + 3
            response = await client.call(c.responses.create, model="a0", input="hello", max_output_tokens=3)
            assert response.output_text
            assert response.model == "a0"
            events = await client.call(
                c.responses.create, model="a0", input="hello", max_output_tokens=3, stream=True
            )
            assert events[0].type == "response.created"
            assert events[-1].type == "response.completed"
            assert events[-1].response.usage.output_tokens == 3
            embedded = await client.call(c.embeddings.create, model="e0", input=["hello", "world"])
            assert [len(d.embedding) for d in embedded.data] == [256, 256]  # the SDK decoded base64
            floats = await client.call(c.embeddings.create, model="e0", input="x", encoding_format="float")
            assert len(floats.data[0].embedding) == 256

            tokens = await client.post("/tokenize", {"model": "a0", "prompt": "hello world"})
            assert tokens["count"] == 2
            text = await client.post("/detokenize", {"model": "a0", "tokens": tokens["tokens"]})
            assert "prompt" in text
            message = await client.post(
                "/v1/messages", {"model": "a1", "max_tokens": 3, "messages": MESSAGES}
            )
            assert message["type"] == "message"
            streamed = await client.post(
                "/v1/messages",
                {"model": "a1", "max_tokens": 3, "messages": MESSAGES, "stream": True},
                stream=True,
            )
            assert [e["type"] for e in streamed][:2] == ["message_start", "content_block_start"]
            assert streamed[-1] == {"type": "message_stop"}
            counted = await client.post("/v1/messages/count_tokens", {"model": "a1", "messages": MESSAGES})
            assert counted["input_tokens"] > 0
            batch = await client.post(
                "/v1/chat/completions/batch",
                {"model": "a0", "messages": [MESSAGES, MESSAGES], "max_tokens": 2},
            )
            assert len(batch["choices"]) == 2
            pooled = await client.post("/pooling", {"model": "e0", "input": "hello"})
            assert pooled["data"][0]["object"] == "pooling"
            cohere = await client.post("/v2/embed", {"model": "e0", "texts": ["hello"]})
            assert len(cohere["embeddings"]["float"]) == 1
            for path in ("/score", "/v1/score"):
                scored = await client.post(path, {"model": "e0", "text_1": "a", "text_2": ["a", "b"]})
                assert [s["index"] for s in scored["data"]] == [0, 1]
            for path in ("/rerank", "/v1/rerank", "/v2/rerank"):
                ranked = await client.post(path, {"model": "e0", "query": "a", "documents": ["b", "a"]})
                assert ranked["results"][0]["document"]["text"] == "a"
            # An embedding model has no /classify (vLLM's --convert classify has): the engine's 404.
            with pytest.raises(openai.NotFoundError) as absent:
                await client.post("/classify", {"model": "e0", "input": "hello"})
            assert absent.value.response.headers["x-lorafleet-replica"] == "pool"
            # vLLM started without --enable-scale-out refuses these: placed, loaded, forwarded, relayed.
            for path in [p for p, name in ROUTED.items() if "render" in name or name == "generate"]:
                with pytest.raises(openai.PermissionDeniedError) as refused:
                    await client.post(path, {"model": "a0", "prompt": "hi"})
                assert refused.value.response.headers["x-lorafleet-replica"] == "gen"
        finally:
            await client.aclose()
    assert {c.body["lora_name"] for c in calls(generating, "load")} == {"a0", "a1"}
    assert [c.body["lora_name"] for c in calls(pooling, "load")] == ["e0"]
    forwarded = {call.path for s in (generating, pooling) for call in s.app.calls if call.path in ROUTED}
    assert forwarded == set(ROUTED)  # every routed route reached a replica


async def test_the_clients_headers_reach_the_replica_and_the_request_id_comes_back(
    serve: Serve, adapter_dir: Path, sync: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "lorafleet.serve")
    headers = {"x-request-id": "req-42", "traceparent": TRACEPARENT, "x-team": "search"}
    async with routing(serve, adapter_dir) as (server, generating, _):
        client = Client(server.url, sync)
        c = client.client
        try:
            chunks = await client.call(
                c.completions.create,
                model="a0",
                prompt="hi",
                max_tokens=2,
                stream=True,
                extra_headers=headers,
            )
            assert len(chunks) == 2
            raw = await client.call(
                c.completions.with_raw_response.create, model="a0", prompt="hi", max_tokens=2
            )
            made = raw.headers["x-request-id"]
        finally:
            await client.aclose()
    first, second = calls(generating, "completions")
    for name, value in headers.items():
        assert first.headers[name] == value
    assert (
        "authorization" not in first.headers
    )  # the client's credential is the router's; this replica has none
    assert "user-agent" in first.headers
    assert first.headers["x-stainless-lang"] == "python"
    assert len(made) == 32
    assert second.headers["x-request-id"] == made
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("method=")]
    assert [line for line in lines if "request_id=req-42" in line]
    assert [line for line in lines if f"request_id={made}" in line]


async def test_bad_input_is_refused_in_openais_shape_and_blames_no_replica(
    serve: Serve, adapter_dir: Path, sync: bool
) -> None:
    wrong: list[tuple[str, dict[str, Any], str]] = [
        ("/v1/responses", {"model": "a0", "input": 5}, "body.input"),
        ("/v1/messages", {"model": "a0", "max_tokens": "x", "messages": MESSAGES}, "body.max_tokens"),
        ("/v1/messages/count_tokens", {"model": "a0", "messages": "x"}, "body.messages"),
        ("/v1/chat/completions/batch", {"model": "a0", "messages": "x"}, "body.messages"),
        ("/tokenize", {"model": "a0", "prompt": 5}, "body.prompt"),
        ("/detokenize", {"model": "a0", "tokens": "x"}, "body.tokens"),
        ("/v1/embeddings", {"model": "e0", "input": 5}, "body.input"),
        ("/pooling", {"model": "e0", "input": 5}, "body.input"),
        ("/v2/embed", {"model": "e0", "texts": "x"}, "body.texts"),
        ("/score", {"model": "e0", "text_1": 5, "text_2": "x"}, "body.queries"),
        ("/rerank", {"model": "e0", "query": 5, "documents": ["x"]}, "body.query"),
    ]
    async with routing(serve, adapter_dir) as (server, _, _):
        client = Client(server.url, sync)
        try:
            with pytest.raises(openai.NotFoundError) as unknown_route:
                await client.post("/v1/nope", {"model": "a0"})
            assert "POST /v1/embeddings" in unknown_route.value.message  # the 404 lists the routes
            for path in ("/v1/completions", "/v1/embeddings", "/tokenize"):
                with pytest.raises(openai.BadRequestError) as no_model:
                    await client.post(path, {"prompt": "hi", "input": "hi"})
                assert no_model.value.code == "missing_model"
                with pytest.raises(openai.NotFoundError) as no_adapter:
                    await client.post(path, {"model": "nope", "prompt": "hi", "input": "hi"})
                assert no_adapter.value.code == "model_not_found"
            for path, body, param in wrong:
                with pytest.raises(openai.BadRequestError) as refused:
                    await client.post(path, body)
                assert refused.value.param == param, (path, refused.value.body)
                assert set(refused.value.response.json()["error"]) == {"message", "type", "param", "code"}
        finally:
            await client.aclose()
        ok, states = server.router.health()
        assert ok
        assert states == {"gen": "ok", "pool": "ok"}
        stats = server.fleet.statistics()
        assert all(r.failing_until is None for r in stats.replicas.values())


async def test_a_refusal_carries_the_request_id(serve: Serve, adapter_dir: Path) -> None:
    async with (
        routing(serve, adapter_dir) as (server, _, _),
        httpx.AsyncClient(base_url=server.url) as client,
    ):
        answer = await client.post("/v1/embeddings", json={"model": "nope", "input": "x"})
        mine = await client.post("/tokenize", json={"prompt": "x"}, headers={"x-request-id": "mine"})
    assert answer.status_code == 404
    assert len(answer.headers["x-request-id"]) == 32
    assert (mine.status_code, mine.headers["x-request-id"]) == (400, "mine")

"""An ASGI app that answers vLLM's model, LoRA and inference routes as vLLM does, by release line.

The routes are in ``_lora``, ``_completions``, ``_generate`` and ``_pooling``, what differs between
release lines in ``_family``, and what a test injects in ``_misbehaviour``. This module routes a call,
logs it, checks the key, and is the test's handle on all of it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from . import _completions, _generate, _lora, _metrics, _pooling, _validation
from ._asgi import Message, Receive, Scope, Send, json_or_none, lifespan, read_body, respond, respond_json
from ._engine import Engine, Memory
from ._family import Family
from ._misbehaviour import Misbehaviour, Misbehaviours

ROUTES = {
    "/v1/models": "models",
    "/v1/load_lora_adapter": "load",
    "/v1/unload_lora_adapter": "unload",
    "/v1/completions": "completions",
    "/v1/chat/completions": "chat",
    "/metrics": "metrics",
    "/v1/responses": "responses",
    "/v1/messages": "messages",
    "/v1/messages/count_tokens": "count_tokens",
    "/v1/chat/completions/batch": "chat_batch",
    "/tokenize": "tokenize",
    "/detokenize": "detokenize",
    "/v1/embeddings": "embeddings",
    "/pooling": "pooling",
    "/v2/embed": "embed_v2",
    "/score": "score",
    "/v1/score": "score_v1",
    "/rerank": "rerank",
    "/v1/rerank": "rerank_v1",
    "/v2/rerank": "rerank_v2",
    "/v1/completions/render": "completions_render",
    "/v1/chat/completions/render": "chat_render",
    "/v1/responses/render": "responses_render",
    "/v1/messages/render": "messages_render",
    "/v1/completions/derender": "completions_derender",
    "/v1/chat/completions/derender": "chat_derender",
    "/inference/v1/generate": "generate",
}
LORA_ROUTES = ("load", "unload")
COMPLETIONS = ("completions", "chat")
GENERATING = frozenset(
    {
        "completions",
        "chat",
        "responses",
        "messages",
        "count_tokens",
        "chat_batch",
        "completions_render",
        "chat_render",
        "responses_render",
        "messages_render",
        "completions_derender",
        "chat_derender",
        "generate",
    }
)
"""Routes a generating model serves (vLLM's default runner)."""
POOLING = frozenset(
    {"embeddings", "pooling", "embed_v2", "score", "score_v1", "rerank", "rerank_v1", "rerank_v2"}
)
"""Routes an embedding model serves (``--runner pooling --convert embed``)."""
SCALE_OUT = frozenset(
    {
        "completions_render",
        "chat_render",
        "responses_render",
        "messages_render",
        "completions_derender",
        "chat_derender",
        "generate",
    }
)
"""Routes vLLM refuses (403) unless started with ``--enable-scale-out``, which the stand-in is not."""
INFERENCE = GENERATING | POOLING | {"tokenize", "detokenize"}
"""Routes that name a model."""
OFF_ENGINE = frozenset({"tokenize", "detokenize", "count_tokens"})
"""Of those, the routes answered without the engine: nothing runs, nothing is in its batch."""
ANTHROPIC = frozenset({"messages", "count_tokens"})
SCALE_OUT_OFF = "Scale-out endpoints are disabled. Restart vllm serve with --enable-scale-out to enable them."
ENGINE_FAILED = "EngineCore encountered an issue. See stack trace (above) for the root cause."
"""vLLM's answer (a 500) to a request its engine failed on."""


@attrs.frozen
class Call:
    """One request the stand-in received."""

    method: str
    path: str
    body: Any
    """The JSON body, or None."""
    authorization: str | None
    running: tuple[str, ...] = ()
    """The adapters with completions in flight when the call came, in the order they started."""
    registered: tuple[str, ...] = ()
    """The adapters registered when the call came, in registration order."""
    misbehaviour: Misbehaviour | None = None
    """The injected misbehaviour the call met, if any (``answer``, ``hang``, ``drop``...)."""
    headers: dict[str, str] = attrs.field(factory=dict, eq=False)
    """Every header of the request, names in lower case (the last, when one came twice)."""
    at: float = attrs.field(default=0.0, eq=False)
    """``time.perf_counter()`` when its body had been read: a bench in the same process times the way
    to the engine with it."""


class VllmStandIn:
    """vLLM's HTTP API for tests: the runtime LoRA routes, /v1/models, and the inference routes that
    name a model (completions, chat, responses, embeddings, tokenize...) with minimal answers.

    Args:
        model: the served base model name.
        version: the vLLM release line to answer as ("0.6", "0.7.0", "0.10.0", "0.10.1", "0.18", "0.32"...).
        api_key: like ``--api-key``: every /v1 route then wants ``Authorization: Bearer <key>``.
        runtime_lora: like ``VLLM_ALLOW_RUNTIME_LORA_UPDATING``: without it the LoRA routes are absent.
        enable_lora: like ``--enable-lora``: without it every load fails in the engine.
        max_lora_rank: like ``--max-lora-rank``.
        model_root: the base model's ``root`` in /v1/models (vLLM shows the folder it was started with).
        max_loras: like ``--max-loras``: the ``max_lora`` label of ``vllm:lora_requests_info``.
        max_model_len: like ``--max-model-len``: the most tokens a completion may ask for.
        max_num_seqs: like ``--max-num-seqs``: completions run at once; the rest wait their turn
            (``vllm:num_requests_running`` and ``vllm:num_requests_waiting``). 128 is vLLM's default
            on a CPU.
        lora_metrics: False to serve no ``/metrics`` (404), as a server without the LoRA gauge.
        max_cpu_loras: like ``--max-cpu-loras``: the adapters kept in memory, least recently used
            dropped first when a load finds it full, read back when a completion needs one dropped
            (``memory()`` counts both). None: memory without bound, as before this was modelled.
        load_seconds: seconds each read of an adapter from disk takes (a load, a re-read), one at a
            time inside the engine's loop: every completion's steps wait meanwhile, as vLLM's do
            (0: at once).
        token_seconds: seconds each generated token takes, paused by reads from disk (0: at once).
        stream_interval: seconds between a stream's chunks, kept to a steady schedule from its first
            (a decoding step per token); 0 sends them all at once. For benchmarks of what a router
            adds between chunks.
        runner: "generate" (completions, chat, responses, messages...) or "pooling" (embeddings,
            score, rerank...: vLLM's ``--runner pooling --convert embed``); the other's routes are
            absent (404), as in vLLM. Both tokenize.
    """

    def __init__(
        self,
        *,
        model: str = "tiny",
        version: str = "0.32",
        api_key: str | None = None,
        runtime_lora: bool = True,
        enable_lora: bool = True,
        max_lora_rank: int = 16,
        model_root: str | None = None,
        max_loras: int = 1,
        lora_metrics: bool = True,
        max_model_len: int = 2048,
        max_num_seqs: int = 128,
        max_cpu_loras: int | None = None,
        load_seconds: float = 0.0,
        token_seconds: float = 0.0,
        stream_interval: float = 0.0,
        runner: str = "generate",
    ) -> None:
        if runner not in ("generate", "pooling"):
            raise ValueError(f"runner must be 'generate' or 'pooling', not {runner!r}")
        self.runner = runner
        self.model = model
        self.family = Family.of(version)
        self.api_key = api_key
        self.runtime_lora = runtime_lora
        self.lora_metrics = lora_metrics
        self._engine = Engine(
            model=model,
            model_root=model_root if model_root is not None else f"/models/{model}",
            family=self.family,
            enable_lora=enable_lora,
            max_lora_rank=max_lora_rank,
            max_loras=max_loras,
            max_model_len=max_model_len,
            max_num_seqs=max_num_seqs,
            max_cpu_loras=max_cpu_loras,
            load_seconds=load_seconds,
            token_seconds=token_seconds,
        )
        self._misbehaviours = Misbehaviours()
        self.stream_interval = stream_interval
        self._calls_lock = threading.Condition()
        self._calls: list[Call] = []

    # -- the test's side: what happened --------------------------------------------------------

    @property
    def adapters(self) -> dict[str, str]:
        """Registered adapters, name to path, in registration order."""
        return self._engine.adapters

    def memory(self) -> Memory:
        """What its adapter memory did (``max_cpu_loras``): the most held, drops and re-reads."""
        return self._engine.memory()

    @property
    def calls(self) -> list[Call]:
        with self._calls_lock:
            return list(self._calls)

    def calls_to(self, route: str) -> list[Call]:
        """Calls to one route: "models", "load", "unload", "completions", "chat", "metrics", or another
        of ``ROUTES`` ("responses", "embeddings", "tokenize"...)."""
        path = _path_of(route)
        return [c for c in self.calls if c.path == path]

    def wait_for_calls(self, route: str, count: int, timeout: float = 10.0) -> list[Call]:
        """Block until ``route`` has had ``count`` calls; for tests, from a thread of their own."""
        path = _path_of(route)
        with self._calls_lock:
            if not self._calls_lock.wait_for(
                lambda: sum(c.path == path for c in self._calls) >= count, timeout
            ):
                raise TimeoutError(f"{route} had fewer than {count} calls after {timeout} s")
            return [c for c in self._calls if c.path == path]

    def requests(self) -> tuple[int, int]:
        """(running, waiting): the completions in the batch and those waiting for a place in it."""
        return self._engine.requests()

    def running(self) -> tuple[str, ...]:
        """The adapters with completions running, as vLLM's ``vllm:lora_requests_info`` names them."""
        return self._engine.running()

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> None:
        """Block until ``count`` completions are in the batch or its queue; from a test's own thread."""
        if not self._engine.wait_for_requests(count, timeout):
            raise TimeoutError(f"fewer than {count} completions running or waiting after {timeout} s")

    # -- the test's side: the engine behind the router's back ----------------------------------

    def register(self, name: str, path: str) -> None:
        """Register an adapter behind the router's back, as another router would."""
        self._engine.put(name, path)

    def unregister(self, name: str) -> None:
        self._engine.unregister(name)

    def restart(self) -> None:
        """Forget every runtime-loaded adapter, as a restarted vLLM does."""
        self._engine.restart()

    # -- the test's side: misbehaviour ---------------------------------------------------------

    def inject(self, route: str, misbehaviour: Misbehaviour) -> None:
        """Make ``route`` misbehave; misbehaviours on one route are used in the order they were added."""
        _path_of(route)
        self._misbehaviours.add(route, misbehaviour)

    def delay(self, route: str, seconds: float, times: int | None = 1) -> None:
        self.inject(route, Misbehaviour("delay", times, seconds=seconds))

    def hang(self, route: str, times: int | None = 1) -> None:
        """Calls to ``route`` wait, unanswered, until ``release()`` or the server stops."""
        self.inject(route, Misbehaviour("hang", times))

    def answer(self, route: str, status: int, body: bytes | str, times: int | None = 1) -> None:
        raw = body.encode() if isinstance(body, str) else body
        self.inject(route, Misbehaviour("answer", times, status=status, body=raw))

    def drop(self, route: str, times: int | None = 1) -> None:
        """Close the connection in the middle of the answer."""
        self.inject(route, Misbehaviour("drop", times))

    def garble_listing(self, times: int | None = 1) -> None:
        self.answer("models", 200, b'{"object":"list","data":[{"id"', times)

    def oversize_listing(self, size: int = (4 << 20) + 1024, times: int | None = 1) -> None:
        cards = ",".join(
            json.dumps({"id": f"pad-{i}", "object": "model", "parent": self.model}) for i in range(size // 40)
        )
        self.answer("models", 200, f'{{"object":"list","data":[{cards}]}}', times)

    def fail_prompts(self, text: str, status: int = 500, body: bytes | str | None = None) -> None:
        """Completions and chat completions whose prompt (or a message) holds ``text`` are answered
        ``status`` and ``body``, every time, as a request that makes the engine fail is; until
        ``clear_prompts()`` or ``clear_faults()``. A request vLLM would turn away first (a bad field,
        an unknown model) still is; a misbehaviour queued on the route comes first.

        Args:
            body: the answer's body; None for vLLM's own answer to a request its engine failed on.
        """
        if not isinstance(text, str) or not text:
            raise ValueError(f"text must be a non-empty str, not {text!r}")
        if body is None:
            error = self.family.error(status, ENGINE_FAILED, "InternalServerError")
            body = json.dumps(error, separators=(",", ":"))
        raw = body.encode() if isinstance(body, str) else body
        self._misbehaviours.fail_prompts(text, Misbehaviour("answer", None, status=status, body=raw))

    def clear_prompts(self) -> None:
        """Forget every ``fail_prompts``: those prompts are served again."""
        self._misbehaviours.clear_prompts()

    def clear_faults(self, route: str | None = None) -> None:
        """Forget the misbehaviours waiting on ``route``, or on every route and the prompts'
        (``fail_prompts``); hung calls stay hung."""
        if route is not None:
            _path_of(route)
        self._misbehaviours.clear(route)

    def hold_streams(self) -> None:
        """Streams send their first chunk, then wait for ``release()``."""
        self._misbehaviours.hold_streams()

    def release(self) -> None:
        """Let every hung call and held stream go on."""
        self._misbehaviours.release()

    # -- ASGI ----------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path = scope["path"]
        method = scope["method"]
        raw = await read_body(receive)
        at = time.perf_counter()
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        body = json_or_none(raw)
        route = ROUTES.get(path)
        engine = self._engine
        # What the engine has when the call comes: what an unload lands on, what a load adds to.
        running, registered = engine.running(), tuple(engine.adapters)
        with self._calls_lock:
            misbehaviour = self._misbehaviours.take(route) if route else None
            # A prompt that makes the engine fail does so once the request reaches the engine.
            failing = (
                self._misbehaviours.for_prompt(_prompt_of(route, body)) if route in COMPLETIONS else None
            )
            authorization = headers.get("authorization")
            met = misbehaviour if misbehaviour is not None else failing
            self._calls.append(Call(method, path, body, authorization, running, registered, met, headers, at))
            self._calls_lock.notify_all()
        if path in ("/health", "/ping"):
            await respond(send, 200, b"", None)
            return
        if path == "/version":
            await respond_json(send, 200, {"version": "{}.{}.{}".format(*self.family.version)})
            return
        if route == "metrics" and self.lora_metrics:
            # vLLM's key guards /v1 only.
            if misbehaviour is None or not await self._misbehaviours.act(misbehaviour, send):
                await _metrics.serve(self._engine, send)
            return
        # vLLM's key guards every /v1 path, routes it lacks included, before anything else.
        if (
            path.startswith("/v1")
            and self.api_key is not None
            and not self._authorised(headers.get("authorization"))
        ):
            await respond_json(send, 401, {"error": "Unauthorized"})
            return
        if (
            route is None
            or route == "metrics"
            or (route in LORA_ROUTES and not self.runtime_lora)
            or route in (POOLING if self.runner == "generate" else GENERATING)
        ):
            await respond_json(send, 404, {"detail": "Not Found"})
            return
        if route in INFERENCE:
            await self._inference(route, method, body, misbehaviour, failing, send)
            return
        if misbehaviour is not None and await self._misbehaviours.act(misbehaviour, send):
            return
        expected = "GET" if route == "models" else "POST"
        if method != expected:
            await respond_json(send, 405, {"detail": "Method Not Allowed"})
            return
        if route == "models":
            await respond_json(send, 200, _lora.listing(engine))
        elif route == "load":
            await _lora.load(engine, send, body, headers)
        elif route == "unload":
            await _lora.unload(engine, send, body, headers)

    async def _inference(
        self,
        route: str,
        method: str,
        body: Any,
        misbehaviour: Misbehaviour | None,
        failing: Misbehaviour | None,
        send: Send,
    ) -> None:
        """A request that names a model; one the engine runs is in flight (``vllm:lora_requests_info``)
        from its start to its end, held or not.

        ``failing``: what its prompt makes the engine answer (``fail_prompts``), once it gets there.
        """
        engine = self._engine
        family = self.family
        # What vLLM turns away (a bad body, an unknown model) never reaches its engine.
        turned_away: tuple[int, Any] | None = None
        if method != "POST":
            turned_away = 405, {"detail": "Method Not Allowed"}
        elif route in SCALE_OUT:
            turned_away = 403, family.error(403, SCALE_OUT_OFF, "PermissionDeniedError")
        elif (refused := _validation.refusal_of(route, body, family)) is not None:
            turned_away = 400, refused
        elif not engine.serves(model := body.get("model") or engine.model):
            turned_away = 404, self._unknown(route, model)
        elif (
            route in COMPLETIONS
            and (refused := _validation.out_of_range(body, family, engine.max_model_len)) is not None
        ):
            turned_away = 400, refused
        if turned_away is not None:
            if misbehaviour is None or not await self._misbehaviours.act(misbehaviour, send):
                await respond_json(send, *turned_away)
            return
        if route in OFF_ENGINE:
            if misbehaviour is None or not await self._misbehaviours.act(misbehaviour, send):
                await _answer(route, engine, send, body, self._misbehaviours.pause_stream, 0.0)
            return
        adapter = None if model == engine.model else model
        await engine.join_batch()
        done = False

        def finish() -> None:
            nonlocal done
            if not done:
                done = True
                engine.ended(adapter)
                engine.leave_batch()

        async def ending(message: Message) -> None:
            # vLLM's engine ends a request at its last step, before its API server sends the answer's
            # end: a router that has the last byte finds the request and its adapter no longer running.
            if message["type"] == "http.response.body" and not message.get("more_body"):
                finish()
            await send(message)

        try:
            reread = engine.started(adapter)  # vLLM names a request's adapter from its first step
        except BaseException:
            engine.leave_batch()
            raise
        try:
            if reread and adapter is not None:
                await engine.read_from_disk()
                engine.read_again(adapter)
            if misbehaviour is not None and await self._misbehaviours.act(misbehaviour, ending):
                return
            if failing is not None and await self._misbehaviours.act(failing, ending):
                return
            await _answer(route, engine, ending, body, self._misbehaviours.pause_stream, self.stream_interval)
        finally:
            finish()

    def _unknown(self, route: str, model: str) -> dict[str, Any]:
        """vLLM's 404 for a model it does not serve: its pooling routes word it as older lines did, and
        Anthropic's routes shape it as Anthropic does."""
        family = self.family
        if route in POOLING:
            return family.error(404, f"The model `{model}` does not exist.", "NotFoundError")
        message = family.unknown_model(model, self._engine.model)
        if route in ANTHROPIC:
            return {"type": "error", "error": {"type": "NotFoundError", "message": message}}
        param = "model" if family.names_the_model_param else None
        return family.error(404, message, "NotFoundError", param)

    def _authorised(self, header: str | None) -> bool:
        if not header:
            return False
        scheme, _, token = header.partition(" ")
        return scheme.lower() == "bearer" and token == self.api_key


async def _answer(
    route: str, engine: Engine, send: Send, body: Any, pause: Callable[[], Awaitable[None]], interval: float
) -> None:
    """The answer of a request ``_validation`` took, for a model the engine serves."""
    if route in COMPLETIONS:
        await _completions.complete(engine, send, route, body, pause, interval)
    elif route == "responses":
        await _generate.responses(engine, send, body, pause, interval)
    elif route == "messages":
        await _generate.messages(engine, send, body, pause, interval)
    else:
        answer = ANSWERS[route]
        await answer(engine, send, body)


ANSWERS: dict[str, Callable[[Engine, Send, Any], Awaitable[None]]] = {
    "count_tokens": _generate.count_tokens,
    "chat_batch": _generate.chat_batch,
    "tokenize": _generate.tokenize,
    "detokenize": _generate.detokenize,
    "embeddings": _pooling.embeddings,
    "pooling": _pooling.pooling,
    "embed_v2": _pooling.embed_v2,
    "score": _pooling.score,
    "score_v1": _pooling.score,
    "rerank": _pooling.rerank,
    "rerank_v1": _pooling.rerank,
    "rerank_v2": _pooling.rerank,
}


def _prompt_of(route: str | None, body: Any) -> str:
    """The text of a completion's prompt, or of a chat completion's messages (as JSON)."""
    if not isinstance(body, dict):
        return ""
    return (
        str(body.get("prompt"))
        if route == "completions"
        else json.dumps(body.get("messages"), ensure_ascii=False)
    )


def _path_of(route: str) -> str:
    for path, name in ROUTES.items():
        if name == route:
            return path
    raise ValueError(f"unknown route {route!r}; one of {sorted(ROUTES.values())}")

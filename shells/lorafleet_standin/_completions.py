"""Minimal ``/v1/completions`` and ``/v1/chat/completions``, field for field as vLLM 0.32 answers them.

There is no model: the output is a fixed function of the model (or adapter) name, the prompt and, for an
adapter, a hash of its weights files as they were read (``weights_digest``), so a test can tell which
adapter served a request, and which version of it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ._asgi import Send, respond_json
from ._engine import Engine
from ._validation import max_tokens, wants_stream

WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november".split()


def generated(model: str, prompt: str, tokens: int, weights: str = "") -> list[str]:
    """The stand-in's greedy output: fixed for a (model, prompt, weights), different from model to model
    and from one version of an adapter's weights to another.

    Args:
        weights: the adapter's ``weights_digest`` as the engine read it ("" for a base model, or an
            adapter without weights files).
    """
    key = f"{model}\0{prompt}" if not weights else f"{model}\0{prompt}\0{weights}"
    seed = hashlib.sha256(key.encode()).digest()
    return [f" {WORDS[seed[i % len(seed)] % len(WORDS)]}" for i in range(tokens)]


def token_id(word: str) -> int:
    """The token id the stand-in reports for one of its generated words."""
    return 100 + WORDS.index(word.strip())


async def complete(
    engine: Engine,
    send: Send,
    route: str,
    body: Any,
    pause: Callable[[], Awaitable[None]],
    interval: float = 0.0,
) -> None:
    """Answer a completion (``route`` "completions") or a chat completion ("chat") the engine serves,
    whose body ``_validation`` took.

    Args:
        pause: awaited after a stream's first chunk (the test may hold streams there).
        interval: seconds between a stream's chunks, on a schedule from its first.
    """
    family = engine.family
    model = body.get("model") or engine.model
    prompt = body.get("prompt") if route == "completions" else json.dumps(body.get("messages"))
    tokens = min(max_tokens(body), 512)
    words = generated(model, str(prompt), tokens, engine.weights(model))
    ident = f"{'cmpl' if route == 'completions' else 'chatcmpl'}-{engine.next_id():016x}"
    prompt_tokens = len(str(prompt).split())
    if wants_stream(body):
        wanted = _usage_wanted(body)
        await _stream(engine, send, route, ident, model, words, pause, interval, prompt_tokens, wanted)
        return
    await engine.steps(tokens)
    text = "".join(words)
    token_ids = [token_id(w) for w in words] if body.get("return_token_ids") else None
    usage = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + tokens,
        "completion_tokens": tokens,
        "prompt_tokens_details": None,
        "completion_tokens_details": None,
    }
    # Field for field, in vLLM 0.32's order.
    if route == "completions":
        answer: dict[str, Any] = {
            "id": ident,
            "object": "text_completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "text": text,
                    "logprobs": None,
                    "finish_reason": "length",
                    "stop_reason": None,
                    "token_ids": token_ids,
                    "prompt_logprobs": None,
                    "prompt_token_ids": None,
                    "routed_experts": None,
                }
            ],
            "service_tier": None,
            "system_fingerprint": family.fingerprint,
            "usage": usage,
            "kv_transfer_params": None,
            "ec_transfer_params": None,
            "metrics": None,
        }
    else:
        reply: dict[str, Any] = {
            "role": "assistant",
            "content": text,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
            "reasoning": None,
        }
        answer = {
            "id": ident,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": reply,
                    "logprobs": None,
                    "finish_reason": "length",
                    "stop_reason": None,
                    "token_ids": token_ids,
                    "routed_experts": None,
                }
            ],
            "service_tier": None,
            "system_fingerprint": family.fingerprint,
            "usage": usage,
            "prompt_logprobs": None,
            "prompt_token_ids": None,
            "prompt_text": None,
            "kv_transfer_params": None,
            "ec_transfer_params": None,
            "metrics": None,
        }
    await respond_json(send, 200, answer)


def _usage_wanted(body: dict[str, Any]) -> tuple[bool, bool]:
    """What a stream's ``stream_options`` ask: a last chunk with the usage (``include_usage``), and
    the usage so far on every chunk (``continuous_usage_stats``, which vLLM honours only with it)."""
    options = body.get("stream_options")
    if not isinstance(options, dict) or options.get("include_usage") is not True:
        return False, False
    return True, options.get("continuous_usage_stats") is True


async def _stream(
    engine: Engine,
    send: Send,
    route: str,
    ident: str,
    model: str,
    words: list[str],
    pause: Callable[[], Awaitable[None]],
    interval: float,
    prompt_tokens: int,
    usage: tuple[bool, bool],
) -> None:
    """A stream as vLLM 0.32 sends it: a chunk per token (after, for chat, one naming the role), the
    fingerprint on the last, or with ``include_usage`` on a last chunk of no choices and the usage."""
    headers = [(b"content-type", b"text/event-stream; charset=utf-8")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    created = int(time.time())
    include, continuous = usage
    head: dict[str, Any] = {"id": ident, "object": "", "created": created, "model": model}

    async def chunk(data: dict[str, Any], more: bool = True) -> None:
        text = f"data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()
        await send({"type": "http.response.body", "body": text, "more_body": more})

    def counted(generated: int) -> dict[str, int]:
        total = prompt_tokens + generated
        return {"prompt_tokens": prompt_tokens, "total_tokens": total, "completion_tokens": generated}

    if route == "completions":
        head["object"] = "text_completion"
    else:
        head["object"] = "chat.completion.chunk"
        role = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None}
        first = {**head, "choices": [{**role, "finish_reason": None}], "prompt_token_ids": None}
        first["prompt_text"] = None
        if continuous:
            first["usage"] = counted(0)
        await chunk(first)
    loop = asyncio.get_running_loop()
    began = loop.time()
    for i, word in enumerate(words):
        await engine.steps(1)
        last = i == len(words) - 1
        finish = "length" if last else None
        choice: dict[str, Any]
        if route == "completions":
            choice = {
                "index": 0,
                "text": word,
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
                "prompt_token_ids": None,
                "token_ids": None,
            }
        else:
            choice = {"index": 0, "delta": {"content": word}, "logprobs": None, "finish_reason": finish}
            if last:
                choice["stop_reason"] = None
            choice["token_ids"] = None
        data: dict[str, Any] = {**head, "choices": [choice]}
        if continuous:
            data["usage"] = counted(i + 1)
        if last and not include:
            data["system_fingerprint"] = engine.family.fingerprint
        await chunk(data)
        if i == 0:
            await pause()
            began = loop.time()  # the schedule starts once a held stream goes on
        if interval and not last:
            # To a schedule, not a sleep per chunk: one late chunk does not make every later one late.
            await asyncio.sleep(max(0.0, began + (i + 1) * interval - loop.time()))
    if include:
        final = {**head, "choices": [], "usage": counted(len(words))}
        final["system_fingerprint"] = engine.family.fingerprint
        await chunk(final)
    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})

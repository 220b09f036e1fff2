"""Minimal ``/v1/completions`` and ``/v1/chat/completions``, field for field as vLLM 0.32 answers them.

There is no model: the output is a fixed function of the model (or adapter) name and the prompt, so a
test can tell which adapter served a request.
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


def generated(model: str, prompt: str, tokens: int) -> list[str]:
    """The stand-in's greedy output: fixed for a (model, prompt), different from model to model."""
    seed = hashlib.sha256(f"{model}\0{prompt}".encode()).digest()
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
    words = generated(model, str(prompt), tokens)
    ident = f"{'cmpl' if route == 'completions' else 'chatcmpl'}-{engine.next_id():016x}"
    if wants_stream(body):
        await _stream(engine, send, route, ident, model, words, pause, interval)
        return
    await engine.steps(tokens)
    text = "".join(words)
    token_ids = [token_id(w) for w in words] if body.get("return_token_ids") else None
    prompt_tokens = len(str(prompt).split())
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


async def _stream(
    engine: Engine,
    send: Send,
    route: str,
    ident: str,
    model: str,
    words: list[str],
    pause: Callable[[], Awaitable[None]],
    interval: float,
) -> None:
    headers = [(b"content-type", b"text/event-stream; charset=utf-8")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    created = int(time.time())
    loop = asyncio.get_running_loop()
    began = loop.time()
    for i, word in enumerate(words):
        await engine.steps(1)
        last = i == len(words) - 1
        finish = "length" if last else None
        if route == "completions":
            choice: dict[str, Any] = {
                "index": 0,
                "text": word,
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
                "prompt_token_ids": None,
                "token_ids": None,
            }
            kind = "text_completion"
        else:
            choice = {"index": 0, "delta": {"content": word}, "logprobs": None, "finish_reason": finish}
            kind = "chat.completion.chunk"
        chunk: dict[str, Any] = {"id": ident, "object": kind, "created": created, "model": model}
        chunk["choices"] = [choice]
        if last:
            chunk["system_fingerprint"] = engine.family.fingerprint
        data = f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n".encode()
        await send({"type": "http.response.body", "body": data, "more_body": True})
        if i == 0:
            await pause()
            began = loop.time()  # the schedule starts once a held stream goes on
        if interval and not last:
            # To a schedule, not a sleep per chunk: one late chunk does not make every later one late.
            await asyncio.sleep(max(0.0, began + (i + 1) * interval - loop.time()))
    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})

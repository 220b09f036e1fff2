"""vLLM 0.32's other generating routes, field for field: ``/v1/responses`` (streamed or not),
Anthropic's ``/v1/messages`` (streamed or not) and ``/v1/messages/count_tokens``,
``/v1/chat/completions/batch``, ``/tokenize`` and ``/detokenize``.

As for completions, there is no model: the output is ``generated(model, prompt)``, and tokens are the
prompt's words (vLLM's counts come from its tokenizer; tests blank them).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ._asgi import Send, respond_json
from ._completions import WORDS, generated, token_id
from ._engine import Engine
from ._validation import wants_stream

DEFAULT_TOKENS = 16
"""What the stand-in generates when a body names no limit (vLLM would go on to the end of the text)."""


def words_of(text: str) -> list[str]:
    return text.split()


def token_of(word: str) -> int:
    """A word's token id: the stand-in's generated words have theirs (``token_id``), others a hash."""
    bare = word.strip()
    if bare in WORDS:
        return token_id(bare)
    return 200 + int.from_bytes(hashlib.sha256(bare.encode()).digest()[:2], "big") % 600


def _text_of(value: Any) -> str:
    """The text a prompt, an input or messages carry, for the stand-in's output and counts."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _count(value: Any) -> int:
    return len(words_of(_text_of(value)))


async def _events(send: Send) -> Callable[[str | None, dict[str, Any]], Awaitable[None]]:
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/event-stream; charset=utf-8")],
        }
    )

    async def event(name: str | None, data: dict[str, Any]) -> None:
        text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
        head = f"event: {name}\n" if name else ""
        await send(
            {"type": "http.response.body", "body": f"{head}data: {text}\n\n".encode(), "more_body": True}
        )

    return event


async def _end(send: Send, body: bytes = b"") -> None:
    await send({"type": "http.response.body", "body": body, "more_body": False})


# -- /v1/responses ---------------------------------------------------------------------------------


async def responses(
    engine: Engine, send: Send, body: dict[str, Any], pause: Callable[[], Awaitable[None]], interval: float
) -> None:
    model = body.get("model") or engine.model
    limit = body.get("max_output_tokens")
    tokens = min(int(limit) if limit is not None else DEFAULT_TOKENS, 512)
    prompt = _text_of(body.get("input"))
    words = generated(model, prompt, tokens)
    ident = f"resp_{engine.next_id():016x}"
    item = f"msg_{engine.next_id():016x}"
    input_tokens = len(words_of(prompt))

    def response(status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None) -> dict[str, Any]:
        done = status != "in_progress"
        stopped = done and limit is not None
        return {
            "id": ident,
            "created_at": created,
            "incomplete_details": {"reason": "max_output_tokens"} if stopped else None,
            "instructions": body.get("instructions"),
            "metadata": body.get("metadata"),
            "model": model,
            "object": "response",
            "output": output,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "temperature": float(body.get("temperature", 1.0)),
            "tool_choice": body.get("tool_choice", "none"),
            "tools": body.get("tools", []),
            "top_p": float(body.get("top_p", 1.0)),
            "background": body.get("background", False),
            "max_output_tokens": limit,
            "max_tool_calls": body.get("max_tool_calls"),
            "previous_response_id": body.get("previous_response_id"),
            "prompt": None,
            "reasoning": None,
            "service_tier": body.get("service_tier", "auto"),
            "status": ("incomplete" if stopped else "completed") if done else status,
            "text": None,
            "top_logprobs": body.get("top_logprobs"),
            "truncation": body.get("truncation", "disabled"),
            "usage": usage,
            "user": body.get("user"),
            "presence_penalty": float(body.get("presence_penalty", 0.0)),
            "frequency_penalty": float(body.get("frequency_penalty", 0.0)),
            "kv_transfer_params": None,
            "ec_transfer_params": None,
            "input_messages": None,
            "output_messages": None,
        }

    def message(text: str, status: str, logprobs: list[Any] | None) -> dict[str, Any]:
        content = [{"annotations": [], "text": text, "type": "output_text", "logprobs": logprobs}]
        return {
            "id": item,
            "content": content if status == "completed" else [],
            "role": "assistant",
            "status": status,
            "type": "message",
            "phase": None,
        }

    usage = {
        "input_tokens": input_tokens,
        "input_tokens_details": {
            "cached_tokens": 0,
            "cache_write_tokens": 0,
            "input_tokens_per_turn": [],
            "cached_tokens_per_turn": [],
        },
        "output_tokens": tokens,
        "output_tokens_details": {
            "reasoning_tokens": 0,
            "tool_output_tokens": 0,
            "output_tokens_per_turn": [],
            "tool_output_tokens_per_turn": [],
        },
        "total_tokens": input_tokens + tokens,
    }
    created = int(time.time())
    text = "".join(words)
    if not wants_stream(body):
        await engine.steps(tokens)
        await respond_json(send, 200, response("completed", [message(text, "completed", None)], usage))
        return
    event = await _events(send)
    sequence = 0

    async def emit(kind: str, data: dict[str, Any]) -> None:
        nonlocal sequence
        await event(kind, {**data, "sequence_number": sequence, "type": kind})
        sequence += 1

    place = {"content_index": 0, "item_id": item, "output_index": 0}
    await emit("response.created", {"response": response("in_progress", [], None)})
    await emit("response.in_progress", {"response": response("in_progress", [], None)})
    await emit("response.output_item.added", {"item": message("", "in_progress", None), "output_index": 0})
    part: dict[str, Any] = {"annotations": [], "text": "", "type": "output_text", "logprobs": []}
    await emit("response.content_part.added", {**place, "part": part})
    await _each(
        engine, words, pause, interval, lambda w: emit("response.output_text.delta", _delta(place, w))
    )
    await emit("response.output_text.done", {**place, "logprobs": [], "text": text})
    part = {"annotations": [], "text": text, "type": "output_text", "logprobs": None}
    await emit("response.content_part.done", {**place, "part": part})
    done = message(text, "completed", None)
    await emit("response.output_item.done", {"item": done, "output_index": 0})
    await emit("response.completed", {"response": response("completed", [done], usage)})
    await _end(send)


def _delta(place: dict[str, Any], word: str) -> dict[str, Any]:
    return {"content_index": 0, "delta": word, "item_id": place["item_id"], "logprobs": [], "output_index": 0}


async def _each(
    engine: Engine,
    words: list[str],
    pause: Callable[[], Awaitable[None]],
    interval: float,
    emit: Callable[[str], Awaitable[None]],
) -> None:
    """Each generated word, a step of the engine apart (``stream_interval`` apart, on a schedule)."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    for i, word in enumerate(words):
        await engine.steps(1)
        await emit(word)
        if i == 0:
            await pause()
            began = loop.time()
        if interval and i < len(words) - 1:
            await asyncio.sleep(max(0.0, began + (i + 1) * interval - loop.time()))


# -- Anthropic's /v1/messages ----------------------------------------------------------------------


async def messages(
    engine: Engine, send: Send, body: dict[str, Any], pause: Callable[[], Awaitable[None]], interval: float
) -> None:
    model = body.get("model") or engine.model
    tokens = min(int(body["max_tokens"]), 512)
    prompt = _text_of(body.get("messages"))
    words = generated(model, prompt, tokens)
    ident = f"chatcmpl-{engine.next_id():016x}"
    input_tokens = _count(body.get("messages"))
    if not wants_stream(body):
        await engine.steps(tokens)
        answer = {
            "id": ident,
            "type": "message",
            "role": "assistant",
            "content": [{"type": "text", "text": "".join(words)}],
            "model": model,
            "stop_reason": "max_tokens",
            "usage": {"input_tokens": input_tokens, "output_tokens": tokens},
        }
        await respond_json(send, 200, answer)
        return
    event = await _events(send)
    start: dict[str, Any] = {
        "id": ident,
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": model,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 0},
    }
    await event("message_start", {"type": "message_start", "message": start})
    block = {"type": "content_block_start", "content_block": {"type": "text", "text": ""}, "index": 0}
    await event("content_block_start", block)

    async def delta(word: str) -> None:
        data = {"type": "content_block_delta", "delta": {"type": "text_delta", "text": word}, "index": 0}
        await event("content_block_delta", data)

    await _each(engine, words, pause, interval, delta)
    await event("content_block_stop", {"type": "content_block_stop", "index": 0})
    stop = {
        "type": "message_delta",
        "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
        "usage": {"input_tokens": input_tokens, "output_tokens": tokens},
    }
    await event("message_delta", stop)
    await event("message_stop", {"type": "message_stop"})
    await _end(send)


async def count_tokens(engine: Engine, send: Send, body: dict[str, Any]) -> None:
    count = _count(body.get("messages"))
    await respond_json(
        send, 200, {"input_tokens": count, "context_management": {"original_input_tokens": count}}
    )


# -- /v1/chat/completions/batch --------------------------------------------------------------------


async def chat_batch(engine: Engine, send: Send, body: dict[str, Any]) -> None:
    model = body.get("model") or engine.model
    limit = body.get("max_tokens")
    tokens = min(int(limit) if limit is not None else DEFAULT_TOKENS, 512)
    conversations = body["messages"]
    await engine.steps(tokens)
    choices = []
    prompt_tokens = 0
    for index, conversation in enumerate(conversations):
        text = "".join(generated(model, json.dumps(conversation), tokens))
        prompt_tokens += _count(conversation)
        reply = {
            "role": "assistant",
            "content": text,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
            "reasoning": None,
        }
        choices.append(
            {
                "index": index,
                "message": reply,
                "logprobs": None,
                "finish_reason": "length",
                "stop_reason": None,
                "token_ids": None,
                "routed_experts": None,
            }
        )
    generated_tokens = tokens * len(conversations)
    answer = {
        "id": f"chatcmpl-{engine.next_id():016x}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "service_tier": None,
        "system_fingerprint": engine.family.fingerprint,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + generated_tokens,
            "completion_tokens": generated_tokens,
            "prompt_tokens_details": None,
            "completion_tokens_details": None,
        },
        "prompt_logprobs": None,
        "prompt_token_ids": None,
        "prompt_text": None,
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "metrics": None,
    }
    await respond_json(send, 200, answer)


# -- /tokenize, /detokenize ------------------------------------------------------------------------


async def tokenize(engine: Engine, send: Send, body: dict[str, Any]) -> None:
    words = words_of(_text_of(body["messages"] if "messages" in body else body.get("prompt", "")))
    tokens = [token_of(w) for w in words]
    strings = words if body.get("return_token_strs") else None
    answer = {
        "count": len(tokens),
        "max_model_len": engine.max_model_len,
        "tokens": tokens,
        "token_strs": strings,
    }
    await respond_json(send, 200, answer)


async def detokenize(engine: Engine, send: Send, body: dict[str, Any]) -> None:
    text = "".join(
        f" {WORDS[t - 100]}" if 100 <= t < 100 + len(WORDS) else f"<|{t}|>" for t in body["tokens"]
    )
    await respond_json(send, 200, {"prompt": text})

"""The stand-in held to the real engine: the same calls to both, the same statuses and bodies.

Bodies are compared after blanking what changes on every run or comes from the model itself:
timestamps, ids, the build fingerprint, generated text and token counts (the stand-in has no tokenizer).
When the two differ, the stand-in is what changes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from lorafleet_standin import StandInServer

VOLATILE = {
    "created": 0,
    "system_fingerprint": "<fingerprint>",
    "text": "<text>",
    "content": "<text>",
    "prompt_tokens": 0,
    "total_tokens": 0,
    "completion_tokens": 0,
}


def normal(value: Any) -> Any:
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key in VOLATILE and item is not None:
                out[key] = VOLATILE[key]
            elif (
                key == "id"
                and isinstance(item, str)
                and item.split("-")[0] in ("cmpl", "chatcmpl", "modelperm")
            ):
                out[key] = item.split("-")[0] + "-<id>"
            else:
                out[key] = normal(item)
        return out
    if isinstance(value, list):
        return [normal(v) for v in value]
    return value


def answer(response: httpx.Response) -> tuple[int, str | None, Any]:
    content_type = response.headers.get("content-type")
    text = response.text
    if content_type and content_type.startswith("text/event-stream"):
        chunks = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
        return (
            response.status_code,
            content_type,
            [c if c == "[DONE]" else normal(json.loads(c)) for c in chunks],
        )
    try:
        return response.status_code, content_type, normal(json.loads(text))
    except ValueError:
        return response.status_code, content_type, text


def script(adapters: str) -> list[tuple[str, str, dict[str, Any] | None, dict[str, str]]]:
    """(method, path, JSON body, extra headers): every LoRA case the router meets, and completions."""
    load, unload = "/v1/load_lora_adapter", "/v1/unload_lora_adapter"
    plain = {"Content-Type": "text/plain"}
    return [
        ("GET", "/v1/models", None, {}),
        ("POST", load, {"lora_name": "c0", "lora_path": f"{adapters}/lora-0"}, {}),
        ("POST", load, {"lora_name": "c0", "lora_path": f"{adapters}/lora-0"}, {}),
        ("POST", load, {"lora_name": "tiny", "lora_path": f"{adapters}/lora-1"}, {}),
        ("POST", load, {"lora_name": "missing", "lora_path": f"{adapters}/does-not-exist"}, {}),
        ("POST", load, {"lora_name": "broken", "lora_path": f"{adapters}/broken"}, {}),
        ("POST", load, {"lora_name": "big", "lora_path": f"{adapters}/rank64"}, {}),
        ("POST", load, {"lora_name": "half"}, {}),
        ("POST", load, {"lora_name": "", "lora_path": ""}, {}),
        ("POST", load, {"lora_name": "x", "lora_path": f"{adapters}/lora-2"}, plain),
        ("POST", load, {"lora_name": "c1", "lora_path": f"{adapters}/lora-1"}, {}),
        ("GET", "/v1/models", None, {}),
        (
            "POST",
            "/v1/completions",
            {"model": "c0", "prompt": "hello world", "max_tokens": 4, "temperature": 0},
            {},
        ),
        (
            "POST",
            "/v1/chat/completions",
            {
                "model": "c0",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 4,
                "temperature": 0,
            },
            {},
        ),
        (
            "POST",
            "/v1/completions",
            {"model": "c1", "prompt": "hello", "max_tokens": 3, "temperature": 0, "stream": True},
            {},
        ),
        ("POST", "/v1/completions", {"model": "nope", "prompt": "hello", "max_tokens": 4}, {}),
        ("POST", unload, {"lora_name": "c0"}, {}),
        ("POST", unload, {"lora_name": "c0"}, {}),
        ("POST", unload, {"lora_name": ""}, {}),
        ("POST", "/v1/completions", {"model": "c0", "prompt": "hello", "max_tokens": 4}, {}),
        ("GET", load, None, {}),
        ("GET", "/nope", None, {}),
        ("GET", "/v1/models", None, {}),
        ("POST", unload, {"lora_name": "c1"}, {}),
    ]


def play(url: str, adapters: str) -> list[tuple[int, str | None, Any]]:
    out = []
    with httpx.Client(base_url=url, timeout=60) as client:
        for method, path, body, headers in script(adapters):
            content = json.dumps(body).encode() if body is not None else None
            headers = {"Content-Type": "application/json", **headers} if body is not None else headers
            out.append(answer(client.request(method, path, content=content, headers=headers)))
    return out


def test_the_stand_in_answers_as_vllm_does(
    serve: Callable[..., StandInServer], request: pytest.FixtureRequest
) -> None:
    server = request.getfixturevalue("vllm_servers")["open"]
    engine = request.getfixturevalue("real_engine")
    server.unload_everything()
    adapters = str(engine.build / "adapters")
    standin = serve(version="0.32", model_root=str(engine.build / "model"))
    real = play(server.url, adapters)
    ours = play(standin.url, adapters)
    steps = script(adapters)
    for (method, path, body, _), theirs, mine in zip(steps, real, ours, strict=True):
        assert mine == theirs, f"{method} {path} {body}:\n  vLLM      {theirs}\n  stand-in  {mine}"

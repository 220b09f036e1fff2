"""vLLM 0.32's pooling routes, as a model run with ``--runner pooling --convert embed`` answers them,
field for field: ``/v1/embeddings``, ``/pooling``, Cohere's ``/v2/embed``, ``/score`` and
``/v1/score``, ``/rerank``, ``/v1/rerank`` and ``/v2/rerank``.

There is no model: a text's vector is a fixed function of the model (or adapter) name and the text,
of the tiny model's width, and a score is the cosine of two vectors.
"""

from __future__ import annotations

import base64
import hashlib
import math
import struct
import time
from typing import Any

from ._asgi import Send, respond_json
from ._engine import Engine

WIDTH = 256
"""The tiny model's hidden size: the length of its vectors."""


def vector(model: str, text: str) -> list[float]:
    """A unit vector, fixed for a (model, text), different from model to model."""
    seed = hashlib.sha256(f"{model}\0{text}".encode()).digest()
    raw = [((seed[i % 32] ^ (i * 37)) % 255 - 127) / 127 for i in range(WIDTH)]
    norm = math.sqrt(sum(x * x for x in raw)) or 1.0
    return [x / norm for x in raw]


def _texts(value: Any) -> list[str]:
    """The texts an ``input`` holds: a text, texts, a list of token ids, or lists of them."""
    if isinstance(value, str):
        return [value]
    if value and all(isinstance(v, int) for v in value):
        return [" ".join(map(str, value))]
    return [v if isinstance(v, str) else " ".join(map(str, v)) for v in value]


def _tokens(texts: list[str]) -> int:
    return sum(max(1, len(text.split())) for text in texts)


def _usage(tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": tokens,
        "total_tokens": tokens,
        "completion_tokens": 0,
        "prompt_tokens_details": None,
        "completion_tokens_details": None,
    }


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


async def embeddings(engine: Engine, send: Send, body: dict[str, Any]) -> None:
    model = body.get("model") or engine.model
    texts = _texts(body["input"])
    encoded = body.get("encoding_format") == "base64"
    data = []
    for index, text in enumerate(texts):
        values = vector(model, text)
        embedding: Any = values
        if encoded:
            embedding = base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode()
        data.append({"index": index, "object": "embedding", "embedding": embedding})
    answer = {
        "id": f"embd-{engine.next_id():016x}",
        "object": "list",
        "created": int(time.time()),
        "model": model,
        "data": data,
        "usage": _usage(_tokens(texts)),
    }
    await respond_json(send, 200, answer)


async def pooling(engine: Engine, send: Send, body: dict[str, Any]) -> None:
    model = body.get("model") or engine.model
    texts = _texts(body["input"])
    data = [{"index": i, "object": "pooling", "data": vector(model, t)} for i, t in enumerate(texts)]
    answer = {
        "id": f"pooling-{engine.next_id():016x}",
        "object": "list",
        "created": int(time.time()),
        "model": model,
        "data": data,
        "usage": _usage(_tokens(texts)),
    }
    await respond_json(send, 200, answer)


async def embed_v2(engine: Engine, send: Send, body: dict[str, Any]) -> None:
    model = body.get("model") or engine.model
    texts = list(body.get("texts") or [])
    answer = {
        "id": f"embd-{engine.next_id():016x}",
        "embeddings": {"float": [vector(model, t) for t in texts]},
        "texts": texts,
        "meta": {
            "api_version": {"version": "2"},
            "billed_units": {"input_tokens": _tokens(texts), "image_tokens": 0},
        },
        "response_type": "embeddings_by_type",
    }
    await respond_json(send, 200, answer)


async def score(engine: Engine, send: Send, body: dict[str, Any]) -> None:
    model = body.get("model") or engine.model
    first = vector(model, body["text_1"])
    seconds = _texts(body["text_2"])
    data = [
        {"index": i, "object": "score", "score": _cosine(first, vector(model, t))}
        for i, t in enumerate(seconds)
    ]
    answer = {
        "id": f"score-{engine.next_id():016x}",
        "object": "list",
        "created": int(time.time()),
        "model": model,
        "data": data,
        "usage": _usage(_tokens([body["text_1"]]) + _tokens(seconds) - 1),
    }
    await respond_json(send, 200, answer)


async def rerank(engine: Engine, send: Send, body: dict[str, Any]) -> None:
    model = body.get("model") or engine.model
    query = vector(model, body["query"])
    documents = list(body["documents"])
    results: list[dict[str, Any]] = [
        {
            "index": i,
            "document": {"text": text, "multi_modal": None},
            "relevance_score": _cosine(query, vector(model, text)),
        }
        for i, text in enumerate(documents)
    ]
    results.sort(key=lambda r: -r["relevance_score"])
    top = body.get("top_n")
    if isinstance(top, int) and top > 0:
        results = results[:top]
    tokens = _tokens([body["query"]]) + _tokens(documents) - 1
    answer = {
        "id": f"score-{engine.next_id():016x}",
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        "results": results,
    }
    await respond_json(send, 200, answer)

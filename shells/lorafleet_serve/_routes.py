"""The routes the router serves: every route of vLLM's OpenAI server whose JSON body names a model,
routed by that name; and its own few.

vLLM 0.32 serves these for an adapter by its name (``vllm/entrypoints/launchers/api_server/routers.py``
and the ``api_router.py`` of each route, read in the engine the real-vLLM tests run): a generating
model the first group, a pooling model (``--runner pooling``) the second, and the scale-out routes
only when started with ``--enable-scale-out`` (vLLM answers 403 otherwise). A route a replica does not
serve answers as the replica does (vLLM's 404 ``{"detail": "Not Found"}``), relayed as it came.

Not routed, and answered 404 with the list below: routes with no ``model`` (``GET /v1/responses/{id}``
and its ``cancel``, which only the replica that holds the response can answer), multipart bodies
(``/v1/audio/transcriptions`` and ``translations``, whose model is a form field), SageMaker's
``/invocations`` (which takes its route from a header), vLLM's experimental ``/generative_scoring``
and ``/v1/systemone`` (which name a model, but which the stand-in does not model, so nothing here
could test them), and the server's own (``/tokenizer_info``, ``/version``, the LoRA and dev routes).
"""

from __future__ import annotations

ROUTED: dict[str, str] = {
    # Generation.
    "/v1/completions": "completions",
    "/v1/chat/completions": "chat",
    "/v1/responses": "responses",
    "/v1/messages": "messages",
    "/v1/messages/count_tokens": "count_tokens",
    "/v1/chat/completions/batch": "chat_batch",
    "/tokenize": "tokenize",
    "/detokenize": "detokenize",
    # Pooling.
    "/v1/embeddings": "embeddings",
    "/v2/embed": "embed_v2",
    "/pooling": "pooling",
    "/classify": "classify",
    "/score": "score",
    "/v1/score": "score_v1",
    "/rerank": "rerank",
    "/v1/rerank": "rerank_v1",
    "/v2/rerank": "rerank_v2",
    # Scale-out (vLLM's --enable-scale-out).
    "/v1/completions/render": "completions_render",
    "/v1/chat/completions/render": "chat_render",
    "/v1/responses/render": "responses_render",
    "/v1/messages/render": "messages_render",
    "/v1/completions/derender": "completions_derender",
    "/v1/chat/completions/derender": "chat_derender",
    "/inference/v1/generate": "generate",
}
"""``POST`` routes forwarded to a replica chosen by the body's ``model``, path to the name of the route
(the ``route`` label of the router's metrics)."""

STREAMED = frozenset({"completions", "chat", "responses", "messages"})
"""Routes whose answer is a stream when the body says ``"stream": true``."""

OWN: dict[str, str] = {"/v1/models": "GET", "/health": "GET", "/metrics": "GET"}
"""The router's own routes, with their method."""


def listing() -> str:
    """Every route, for a 404's message."""
    return ", ".join([*(f"POST {path}" for path in ROUTED), *(f"{m} {path}" for path, m in OWN.items())])

"""The one HTTP call both shells make: a request to a replica, with a bounded read of the answer."""

from __future__ import annotations

import httpx

from lorafleet.vllm import HttpRequest


async def fetch(
    client: httpx.AsyncClient, base_url: str, request: HttpRequest, timeout: float
) -> tuple[int, bytes, bool]:
    """Make ``request``; return the status, at most ``max_answer_bytes`` of the body, and whether it was cut.

    Raises:
        httpx.HTTPError: no answer (refused, reset, timed out, protocol error).
    """
    limit = request.max_answer_bytes
    async with client.stream(
        request.method,
        base_url + request.path,
        headers=list(request.headers),
        content=request.body,
        timeout=timeout,
    ) as response:
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():  # decoded, so the bound is on what is parsed
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                # Stop reading: the rest may be huge, and a cut answer is judged whole or not at all.
                return response.status_code, b"".join(chunks)[:limit], True
        return response.status_code, b"".join(chunks), False

"""The one HTTP call the fleet makes: a request to a replica, with a bounded read of the answer."""

from __future__ import annotations

import httpx

from lorafleet.vllm import HttpRequest


class CutShortError(Exception):
    """The replica began its answer, then the connection ended before the body did."""

    def __init__(self, status: int, received: int, cause: httpx.HTTPError) -> None:
        super().__init__(f"HTTP {status}, {received} bytes of the body received: {cause}")
        self.status = status
        self.received = received


async def fetch(
    client: httpx.AsyncClient, base_url: str, request: HttpRequest, timeout: float
) -> tuple[int, bytes, bool]:
    """Make ``request``; return the status, at most ``max_answer_bytes`` of the body, and whether it was cut.

    Raises:
        CutShortError: the answer began, then the connection was closed or reset mid-body.
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
        try:
            async for chunk in response.aiter_bytes():  # decoded, so the bound is on what is parsed
                chunks.append(chunk)
                size += len(chunk)
                if size > limit:
                    # Stop reading: the rest may be huge, and a cut answer is judged whole or not at all.
                    return response.status_code, b"".join(chunks)[:limit], True
        except httpx.TimeoutException:
            raise
        except httpx.HTTPError as exc:
            raise CutShortError(response.status_code, size, exc) from exc
        return response.status_code, b"".join(chunks), False

"""The stand-in's streams at a steady rate (``stream_interval``), for benchmarks of what a router adds
between chunks: the same chunks as without it, spread out to the schedule."""

from __future__ import annotations

import time

import httpx

from lorafleet_standin import StandInServer, VllmStandIn

BODY = {"model": "tiny", "prompt": "hello", "max_tokens": 4, "temperature": 0, "stream": True}


def stream(url: str) -> tuple[list[str], list[float]]:
    """The stream's data lines but the id and created, and when each came, in seconds from the request."""
    began = time.monotonic()
    lines, times = [], []
    with httpx.stream("POST", f"{url}/v1/completions", json=BODY) as answer:
        for line in answer.iter_lines():
            if line.startswith("data: "):
                times.append(time.monotonic() - began)
                lines.append(line.split('"object"')[-1].split('"model"')[-1])
    return lines, times


def test_a_stream_at_an_interval_has_the_same_chunks_spread_to_its_schedule() -> None:
    with StandInServer(VllmStandIn()) as plain, StandInServer(VllmStandIn(stream_interval=0.05)) as paced:
        at_once, _ = stream(plain.url)
        lines, times = stream(paced.url)
    assert lines == at_once
    assert len(lines) == 5  # 4 tokens, then [DONE]
    # No chunk comes before its step on the schedule (a lower bound: never late on a busy machine).
    for i, seconds in enumerate(times[:4]):
        assert seconds >= i * 0.05

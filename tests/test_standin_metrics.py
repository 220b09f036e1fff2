"""The stand-in's ``/metrics``: the engine's queue and ``vllm:lora_requests_info`` as vLLM 0.32 exports
them (REAL.md §4.8)."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Callable, Iterator, MutableMapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from lorafleet_standin import StandInServer, VllmStandIn
from lorafleet_standin._metrics import go_float

SERIES = re.compile(
    r'^vllm:lora_requests_info\{max_lora="(\d+)",running_lora_adapters="([^"]*)",'
    r'waiting_lora_adapters="([^"]*)"\} (\S+)$'
)


QUEUE = re.compile(r'^vllm:num_requests_(running|waiting)\{engine="0",model_name="tiny"\} (\d+)\.0$')


def exposition(server: StandInServer) -> list[str]:
    answer = httpx.get(f"{server.url}/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    return answer.text.splitlines()


def queue(server: StandInServer) -> tuple[int, int]:
    """(running, waiting): the two gauges, first in the body, each with its help and type as vLLM's."""
    lines = exposition(server)[:6]
    assert lines[0] == "# HELP vllm:num_requests_running Number of requests in model execution batches."
    assert lines[1] == "# TYPE vllm:num_requests_running gauge"
    assert lines[3] == "# HELP vllm:num_requests_waiting Number of requests waiting to be processed."
    assert lines[4] == "# TYPE vllm:num_requests_waiting gauge"
    running, waiting = QUEUE.match(lines[2]), QUEUE.match(lines[5])
    assert running, lines
    assert waiting, lines
    assert (running[1], waiting[1]) == ("running", "waiting"), lines
    return int(running[2]), int(waiting[2])


def series(server: StandInServer) -> list[tuple[str, str, str, float]]:
    """Every series of the gauge, in the order served: (max_lora, running, waiting, value)."""
    lines = exposition(server)[6:]
    assert lines[:2] == [
        "# HELP vllm:lora_requests_info Running stats on lora requests.",
        "# TYPE vllm:lora_requests_info gauge",
    ]
    out = []
    for line in lines[2:]:
        match = SERIES.match(line)
        assert match, line
        out.append((match[1], match[2], match[3], float(match[4])))
    return out


def current(server: StandInServer) -> str:
    """The running set of the newest series."""
    return max(series(server), key=lambda s: s[3])[1]


@contextmanager
def in_flight(server: StandInServer, models: list[str], queued: int = 0) -> Iterator[None]:
    """Completions for ``models`` held in flight (the route hangs) until the block ends; the last
    ``queued`` of them wait for a place in the batch instead."""
    server.app.hang("completions", times=len(models) - queued)
    before = len(server.app.calls_to("completions"))
    threads = [
        threading.Thread(
            target=httpx.post,
            args=(f"{server.url}/v1/completions",),
            kwargs={"json": {"model": m, "prompt": "hi", "max_tokens": 2}, "timeout": 30},
        )
        for m in models
    ]
    for thread in threads:
        thread.start()
    server.app.wait_for_calls("completions", before + len(models))
    # The calls are recorded as they come; wait until each is in the batch or its queue.
    server.app.wait_for_requests(len(models))
    try:
        yield
    finally:
        server.app.release()
        for thread in threads:
            thread.join()


def test_no_series_before_any_request(serve: Callable[..., StandInServer]) -> None:
    assert series(serve(max_loras=2)) == []


def test_running_sets_and_their_series(serve: Callable[..., StandInServer]) -> None:
    server = serve(max_loras=2)
    server.app.register("a1", "/p/a1")
    server.app.register("a2", "/p/a2")
    with in_flight(server, ["a1"]):
        assert current(server) == "a1"
    assert current(server) == ""
    with in_flight(server, ["a1", "a2", "a2"]):
        # The order is the order requests came in; the threads race, so compare as a set.
        assert set(current(server).split(",")) == {"a1", "a2"}
    with in_flight(server, ["tiny"]):
        assert current(server) == ""  # the base model is no adapter
    seen = series(server)
    assert all(s[0] == "2" and s[1] == s[2] for s in seen)
    # One series per label set ever seen, in the order first seen; "" came when a1's request ended.
    # (The sets passed through as the three requests end depend on which thread answers first.)
    labels = [s[1] for s in seen]
    assert labels[:2] == ["a1", ""]
    assert len(set(labels)) == len(labels)
    assert {frozenset(x.split(",")) for x in labels[2:]} >= {frozenset({"a1", "a2"})}
    assert max(seen, key=lambda s: s[3])[1] == ""


def test_a_running_request_keeps_its_set_current_and_unknown_models_never_run(
    serve: Callable[..., StandInServer],
) -> None:
    server = serve()
    server.app.register("a1", "/p/a1")
    assert (
        httpx.post(f"{server.url}/v1/completions", json={"model": "nope", "prompt": "x"}).status_code == 404
    )
    assert series(server) == []
    with in_flight(server, ["a1"]):
        first = series(server)
        server.app.unregister("a1")  # an unload under a running request: it runs on (REAL.md)
        second = series(server)
        assert [s[1] for s in second] == ["a1"]
        assert second[0][3] >= first[0][3]  # each step stamps the current set again
    assert [s[:3] for s in series(server)] == [("1", "a1", "a1"), ("1", "", "")]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_request_has_ended_on_the_engine_when_its_answer_ends(stream: bool) -> None:
    """vLLM ends a request at its last step, before its API server sends the answer's end: a router
    holding the answer's last byte finds it neither in the batch nor among the running adapters, so
    that what it does next (release the adapter, evict) meets the engine as it is. The app is called
    as ASGI, so that its ``send`` can look at the engine as each message goes."""
    app = VllmStandIn(model="tiny", max_loras=2)
    app.register("a1", "/p/a1")
    raw = json.dumps({"model": "a1", "prompt": "x", "max_tokens": 3, "stream": stream}).encode()
    seen: list[tuple[bool, tuple[int, int], tuple[str, ...]]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": raw, "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.body":
            seen.append((bool(message.get("more_body")), app.requests(), app.running()))

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/completions",
        "headers": [(b"content-type", b"application/json")],
    }
    asyncio.run(app(scope, receive, send))
    *middle, last = seen
    assert last == (False, (0, 0), ())
    assert all(running == (1, 0) and names == ("a1",) for _, running, names in middle)
    assert bool(middle) == stream  # a stream's chunks go while it runs


def test_without_lora_metrics_there_is_no_route(serve: Callable[..., StandInServer]) -> None:
    assert httpx.get(f"{serve(lora_metrics=False).url}/metrics").status_code == 404
    without_lora = serve(enable_lora=False)
    assert queue(without_lora) == (0, 0)
    assert len(exposition(without_lora)) == 6  # the queue, and no LoRA gauge


def test_the_queue_past_max_num_seqs(serve: Callable[..., StandInServer]) -> None:
    """Past ``max_num_seqs`` a completion waits for a place, unnamed by the LoRA gauge until it runs."""
    server = serve(max_num_seqs=2)
    for name in ("a1", "a2", "a3"):
        server.app.register(name, f"/p/{name}")
    assert queue(server) == (0, 0)
    server.app.hang("completions", times=2)
    threads = []
    for count, name in enumerate(("a1", "a2", "a3"), 1):
        body = {"model": name, "prompt": "hi", "max_tokens": 2}
        thread = threading.Thread(
            target=httpx.post, args=(f"{server.url}/v1/completions",), kwargs={"json": body, "timeout": 30}
        )
        thread.start()
        threads.append(thread)
        server.app.wait_for_requests(count)  # in order: a3 comes last, and waits
    try:
        assert queue(server) == (2, 1)
        assert set(current(server).split(",")) == {"a1", "a2"}
    finally:
        server.app.release()
        for thread in threads:
            thread.join()
    assert queue(server) == (0, 0)
    assert current(server) == ""
    assert {c.body["model"] for c in server.app.calls_to("completions")} == {"a1", "a2", "a3"}


def test_the_value_is_written_as_prometheus_client_writes_it() -> None:
    assert go_float(1796222331.2258186) == "1.7962223312258186e+09"
    assert go_float(1796222317.443089) == "1.796222317443089e+09"
    assert go_float(2.5) == "2.5"


def test_reads_from_disk_take_their_time_one_at_a_time_and_tokens_theirs(
    serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    """``load_seconds``: loads read one at a time; ``token_seconds``: each token takes its time. Only
    lower bounds: a sleep never ends early."""
    server = serve(load_seconds=0.05, token_seconds=0.01)
    started = time.monotonic()
    threads = [
        threading.Thread(
            target=httpx.post,
            args=(f"{server.url}/v1/load_lora_adapter",),
            kwargs={"json": {"lora_name": name, "lora_path": str(adapter_dir / name)}, "timeout": 30},
        )
        for name in ("a0", "a1")
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert time.monotonic() - started >= 0.1  # two reads, one after the other
    assert set(server.app.adapters) == {"a0", "a1"}
    started = time.monotonic()
    answer = httpx.post(
        f"{server.url}/v1/completions", json={"model": "a0", "prompt": "hi", "max_tokens": 5}, timeout=30
    )
    assert answer.status_code == 200
    assert time.monotonic() - started >= 0.05  # 5 tokens of 10 ms

"""What the engine says runs and waits: ``GET /metrics``, read for ``ReadEngine``.

``vllm:lora_requests_info``: vLLM keeps one series of this gauge per set of adapters it has ever had
requests for, valued at the time that set was last current; the newest series is the current set.
Its ``running_lora_adapters`` and ``waiting_lora_adapters`` labels carry the same names in 0.32 (one
map fills both), so the two are read together: an adapter named in either has requests on the
engine, from any router. vLLM names a request there from its first step (when the engine's first
output for it reaches the API server) until the API server has processed its last: not while it
waits for its first step, and not while its answer is still on its way to the client.

``vllm:num_requests_running`` and ``vllm:num_requests_waiting``: the requests in the engine's batch
and in its queue, from any router, one series per engine (summed).
"""

from __future__ import annotations

import math

from lorafleet._commands import ReadEngine
from lorafleet._events import ReadingFailed, ReadingReceived

from ._requests import MAX_METRICS_BYTES, HttpRequest, http_request


def metrics_request(api_key: str | None = None) -> HttpRequest:
    """The ``GET /metrics`` whose answer ``running_adapters`` and ``engine_queue`` read."""
    return http_request(ReadEngine(read=0, replica="-"), api_key)


def reading_answer(read: int, status: int, body: bytes, truncated: bool) -> ReadingReceived | ReadingFailed:
    """The event for a read's answer: the engine's figures, or why there are none.

    A 5xx or a body cut short is a failed read; any other answer without the figures (a 404 from a
    server with no ``/metrics``, an engine without the gauge) reads as an engine that cannot tell.
    """
    if status >= 500:
        return ReadingFailed(read=read, message=f"HTTP {status}")
    if truncated or len(body) > MAX_METRICS_BYTES:
        return ReadingFailed(read=read, message=f"an answer longer than {MAX_METRICS_BYTES} bytes")
    if status != 200:
        return ReadingReceived(read=read, adapters=None)
    running, waiting = engine_queue(body)
    names, max_loras = lora_gauge(body)
    return ReadingReceived(
        read=read, adapters=_sorted(names), running=running, waiting=waiting, max_loras=max_loras
    )


def _sorted(names: frozenset[str] | None) -> tuple[str, ...] | None:
    return None if names is None else tuple(sorted(names))


_RUNNING = b"vllm:num_requests_running"
_WAITING = b"vllm:num_requests_waiting"


def engine_queue(body: bytes) -> tuple[int | None, int | None]:
    """(running, waiting): ``vllm:num_requests_running`` and ``vllm:num_requests_waiting``, each summed
    over its series, or None when it is absent or cannot be read."""
    return _gauge_sum(body, _RUNNING), _gauge_sum(body, _WAITING)


def _gauge_sum(body: bytes, name: bytes) -> int | None:
    if name not in body:
        return None
    total = 0.0
    seen = False
    for raw in body.split(b"\n"):
        if not raw.startswith(name):
            continue
        rest = raw[len(name) :]
        if rest[:1] == b"{":
            end = rest.rfind(b"}")
            if end < 0:
                return None
            rest = rest[end + 1 :]
        elif rest[:1] not in (b" ", b"\t"):
            continue  # another metric whose name starts with this one's
        fields = rest.split()
        try:
            value = float(fields[0]) if fields else math.nan
        except ValueError:
            return None
        if not math.isfinite(value) or value < 0:
            return None
        total += value
        seen = True
    return round(total) if seen else None


_NAME = b"vllm:lora_requests_info"
_SETS = ("running_lora_adapters", "waiting_lora_adapters")


def running_adapters(body: bytes) -> frozenset[str] | None:
    """The adapters with requests running or waiting on the engine, by its newest series.

    Args:
        body: the ``/metrics`` answer (Prometheus text format), at most ``MAX_METRICS_BYTES``.

    Returns:
        The names of the newest series (series tied for newest count together); an empty set when
        the gauge is there with no series yet. None when the gauge is absent (an engine without it:
        older vLLM, the Rust frontend, LoRA off), the body is too long, or a series of it cannot be
        read: then the engine says nothing, rather than something wrong.
    """
    return lora_gauge(body)[0]


def lora_gauge(body: bytes) -> tuple[frozenset[str] | None, int | None]:
    """``running_adapters``, and the ``max_lora`` label of the gauge (vLLM's ``--max-loras``: the
    distinct adapters one batch may use), None when no series carries a whole number of at least 1."""
    if len(body) > MAX_METRICS_BYTES or _NAME not in body:
        return None, None
    newest = -math.inf
    names: set[str] = set()
    max_loras: int | None = None
    seen = False
    for raw in body.split(b"\n"):
        if not raw.startswith(_NAME):
            continue
        rest = raw[len(_NAME) :]
        if rest[:1] in (b" ", b"\t", b""):  # a series with no labels at all: not vLLM's
            return None, None
        if rest[:1] != b"{":
            continue  # another metric whose name starts with this one's
        parsed = _series(rest.decode("utf-8", "replace"))
        if parsed is None:
            return None, None
        labels, value = parsed
        here = {name for key in _SETS for name in labels.get(key, "").split(",") if name}
        if value > newest:
            newest, names = value, here
        elif value == newest:
            names |= here
        seen = True
        declared = labels.get("max_lora", "")
        if declared.isdigit() and int(declared) >= 1:
            max_loras = int(declared)  # every series carries the engine's one setting
    if not seen and b"# TYPE " + _NAME not in body:
        return None, None
    return frozenset(names), max_loras


def _series(text: str) -> tuple[dict[str, str], float] | None:
    """``{labels} value [timestamp]`` as (labels, value); None when it is not that."""
    labels: dict[str, str] = {}
    i = 1
    end = len(text)
    while i < end and text[i] != "}":
        eq = text.find("=", i)
        if eq < 0 or eq + 1 >= end or text[eq + 1] != '"':
            return None
        key = text[i:eq].strip()
        j = eq + 2
        value: list[str] = []
        while j < end and text[j] != '"':
            if text[j] == "\\" and j + 1 < end:
                value.append({"n": "\n", "\\": "\\", '"': '"'}.get(text[j + 1], "\\" + text[j + 1]))
                j += 2
            else:
                value.append(text[j])
                j += 1
        if j >= end:
            return None
        labels[key] = "".join(value)
        i = j + 1
        if i < end and text[i] == ",":
            i += 1
    if i >= end:
        return None
    fields = text[i + 1 :].split()
    if not fields:
        return None
    try:
        number = float(fields[0])
    except ValueError:
        return None
    if math.isnan(number):
        return None
    return labels, number

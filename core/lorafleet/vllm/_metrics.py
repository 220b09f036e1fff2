"""What the engine says runs: ``vllm:lora_requests_info`` from ``GET /metrics``.

vLLM keeps one series of this gauge per set of adapters it has ever had requests for, valued at the
time that set was last current; the newest series is the current set. Its ``running_lora_adapters``
and ``waiting_lora_adapters`` labels carry the same names in 0.32 (one map fills both), so the two
are read together: an adapter named in either has requests on the engine, from any router.
"""

from __future__ import annotations

import math

from ._requests import HttpRequest

METRICS_PATH = "/metrics"
MAX_METRICS_BYTES = 4 << 20
"""A ``/metrics`` body larger than this is not read: the gauge is taken as absent."""


def metrics_request(api_key: str | None = None) -> HttpRequest:
    """The ``GET /metrics`` whose answer ``running_adapters`` reads (vLLM's key guards /v1 only; it is
    sent anyway, for a proxy that guards everything)."""
    headers = (("Authorization", f"Bearer {api_key}"),) if api_key else ()
    return HttpRequest("GET", METRICS_PATH, (*headers, ("Accept", "text/plain")), None, MAX_METRICS_BYTES)


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
    if len(body) > MAX_METRICS_BYTES or _NAME not in body:
        return None
    newest = -math.inf
    names: set[str] = set()
    seen = False
    for raw in body.split(b"\n"):
        if not raw.startswith(_NAME):
            continue
        rest = raw[len(_NAME) :]
        if rest[:1] in (b" ", b"\t", b""):  # a series with no labels at all: not vLLM's
            return None
        if rest[:1] != b"{":
            continue  # another metric whose name starts with this one's
        parsed = _series(rest.decode("utf-8", "replace"))
        if parsed is None:
            return None
        labels, value = parsed
        here = {name for key in _SETS for name in labels.get(key, "").split(",") if name}
        if value > newest:
            newest, names = value, here
        elif value == newest:
            names |= here
        seen = True
    if not seen and b"# TYPE " + _NAME not in body:
        return None
    return frozenset(names)


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

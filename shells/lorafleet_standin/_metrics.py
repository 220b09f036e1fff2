"""``GET /metrics``: the engine's queue (``vllm:num_requests_running`` and ``vllm:num_requests_waiting``)
and the one series vLLM 0.32 exports about LoRA, ``vllm:lora_requests_info``, in that order.

vLLM keeps one series per set of adapters it has ever seen in flight, valued at the time that set was
last current (a gauge set to the current time); the newest series is the current set, and its
``running_lora_adapters`` and ``waiting_lora_adapters`` labels carry the same names. The text is
prometheus_client's exposition format, which vLLM serves.
"""

from __future__ import annotations

import math

from ._asgi import Send, respond
from ._engine import Engine

NAME = "vllm:lora_requests_info"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def go_float(value: float) -> str:
    """A float as prometheus_client writes it: Python's repr, with Go's exponent for large values."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    text = repr(float(value))
    dot = text.find(".")
    if value > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return text


def exposition(engine: Engine) -> bytes:
    """The ``/metrics`` body: the two queue gauges, then the LoRA gauge's help, type and every series
    it has. Without ``--enable-lora`` vLLM makes no LoRA gauge: the body has none of it.
    """
    running, waiting = engine.requests()
    labels = f'engine="0",model_name="{_escape(engine.model)}"'
    lines = [
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{{{labels}}} {float(running)!r}",
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
        "# TYPE vllm:num_requests_waiting gauge",
        f"vllm:num_requests_waiting{{{labels}}} {float(waiting)!r}",
    ]
    if not engine.enable_lora:
        return ("\n".join(lines) + "\n").encode()
    lines += [f"# HELP {NAME} Running stats on lora requests.", f"# TYPE {NAME} gauge"]
    for adapters, when in engine.running_series():
        names = _escape(",".join(adapters))
        labels = (
            f'max_lora="{engine.max_loras}",running_lora_adapters="{names}",waiting_lora_adapters="{names}"'
        )
        lines.append(f"{NAME}{{{labels}}} {go_float(when)}")
    return ("\n".join(lines) + "\n").encode()


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


async def serve(engine: Engine, send: Send) -> None:
    await respond(send, 200, exposition(engine), CONTENT_TYPE)

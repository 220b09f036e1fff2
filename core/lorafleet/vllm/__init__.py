"""vLLM's runtime LoRA routes, sans-IO: the wire between the machine's commands and a vLLM server.

The machine decides; this package only translates. A command to carry out becomes an ``HttpRequest``
(``http_request``), and the server's answer, or its absence, becomes the event to feed back
(``answer_event``, ``failure_event``). It changes with vLLM's releases, not with the machine's rules:
what each release line says is in ``_wording``.

    request = vllm.http_request(command, api_key)          # make it, read at most request.max_answer_bytes
    event = vllm.answer_event(command, status, body, truncated=cut)
    event = vllm.failure_event(command, "no answer within 5 s")   # timed out, refused, dropped
    vllm.adapter_missing(status, body, "sql")              # a forwarded request's "does not exist"
    running = vllm.running_adapters(body)                  # of vllm.metrics_request(key): who runs there
    running, waiting = vllm.engine_queue(body)             # the engine's batch and queue
    running, max_loras = vllm.lora_gauge(body)             # and --max-loras, from the gauge's label
"""

from ._answers import adapter_missing as adapter_missing
from ._answers import answer_event as answer_event
from ._answers import failure_event as failure_event
from ._metrics import engine_queue as engine_queue
from ._metrics import lora_gauge as lora_gauge
from ._metrics import metrics_request as metrics_request
from ._metrics import running_adapters as running_adapters
from ._requests import MAX_LISTING_BYTES as MAX_LISTING_BYTES
from ._requests import MAX_METRICS_BYTES as MAX_METRICS_BYTES
from ._requests import METRICS_PATH as METRICS_PATH
from ._requests import HttpRequest as HttpRequest
from ._requests import http_request as http_request

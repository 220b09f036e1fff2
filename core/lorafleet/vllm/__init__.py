"""vLLM's runtime LoRA routes, sans-IO: the wire between the machine's commands and a vLLM server.

The machine decides; this package only translates. A command to carry out becomes an ``HttpRequest``
(``http_request``), and the server's answer, or its absence, becomes the event to feed back
(``answer_event``, ``failure_event``). It changes with vLLM's releases, not with the machine's rules:
what each release line says is in ``_wording``.

    request = vllm.http_request(command, api_key)          # make it, read at most request.max_answer_bytes
    event = vllm.answer_event(command, status, body, truncated=cut)
    event = vllm.failure_event(command, "no answer within 5 s")   # timed out, refused, dropped
    vllm.adapter_missing(status, body, "sql")              # a forwarded request's "does not exist"
"""

from ._answers import adapter_missing as adapter_missing
from ._answers import answer_event as answer_event
from ._answers import failure_event as failure_event
from ._requests import MAX_LISTING_BYTES as MAX_LISTING_BYTES
from ._requests import HttpRequest as HttpRequest
from ._requests import http_request as http_request

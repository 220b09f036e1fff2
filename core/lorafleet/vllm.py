"""vLLM's runtime LoRA routes as pure functions: commands to HTTP requests, HTTP answers to events."""

from ._vllm import ADAPTER_AT_FAULT as ADAPTER_AT_FAULT
from ._vllm import LISTING_PATH as LISTING_PATH
from ._vllm import LOAD_PATH as LOAD_PATH
from ._vllm import MAX_ANSWER_BYTES as MAX_ANSWER_BYTES
from ._vllm import MAX_LISTING_BYTES as MAX_LISTING_BYTES
from ._vllm import ROUTES_ABSENT as ROUTES_ABSENT
from ._vllm import UNAUTHORIZED as UNAUTHORIZED
from ._vllm import UNLOAD_PATH as UNLOAD_PATH
from ._vllm import HttpRequest as HttpRequest
from ._vllm import answer_event as answer_event
from ._vllm import error_message as error_message
from ._vllm import failure_event as failure_event
from ._vllm import http_request as http_request
from ._vllm import listing_answer as listing_answer
from ._vllm import load_answer as load_answer
from ._vllm import unload_answer as unload_answer

"""An ASGI app that answers vLLM's model, LoRA and completion routes as vLLM does, by version family.

State (the registered adapters, injected faults, the call log) is guarded by a lock: the app runs in a
server thread while tests read and change it from theirs.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import attrs

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

ROUTES = {
    "/v1/models": "models",
    "/v1/load_lora_adapter": "load",
    "/v1/unload_lora_adapter": "unload",
    "/v1/completions": "completions",
    "/v1/chat/completions": "chat",
}
LORA_ROUTES = ("load", "unload")
SANITISED_ROOTS = ("/home", "/usr", "/opt", "/var", "/tmp", "/root", "/lib", "/mnt", "/srv")
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november".split()


def parse_version(text: str) -> tuple[int, int, int]:
    parts = [int(p) for p in text.split(".")]
    if not 2 <= len(parts) <= 3:
        raise ValueError(f"a vLLM version looks like 0.32 or 0.10.1, not {text!r}")
    return (parts[0], parts[1], parts[2] if len(parts) == 3 else 0)


@attrs.frozen
class Family:
    """How one vLLM release line answers (the differences lorafleet has to read through)."""

    version: tuple[int, int, int]

    @classmethod
    def of(cls, version: str) -> Family:
        return cls(parse_version(version))

    @property
    def nested_errors(self) -> bool:
        return self.version >= (0, 10, 1)

    @property
    def unload_not_found_status(self) -> int:
        return 400 if self.version < (0, 7, 0) else 404

    @property
    def rejection_status(self) -> int:
        """An adapter the engine found but refused (rank too high, ...)."""
        return 400 if self.version < (0, 18, 0) else 500

    @property
    def checks_at_load(self) -> bool:
        """0.6.x registers the name and reads the files at the first request."""
        return self.version >= (0, 7, 0)

    @property
    def missing_status(self) -> int:
        return 400 if self.version < (0, 8, 0) else 404

    def already_loaded(self, name: str) -> str:
        if self.version < (0, 7, 3):
            return f"The lora adapter '{name}' has already beenloaded."
        if self.version < (0, 15, 0):
            return f"The lora adapter '{name}' has already been loaded."
        return (
            f"The lora adapter '{name}' has already been loaded. If you want to load the adapter in place, "
            "set 'load_inplace' to True."
        )

    def missing(self, name: str, path: str) -> str:
        shown = self.sanitise(path)
        if self.version >= (0, 18, 0):
            return f"Loading lora {name} failed: No adapter found for {shown}"
        return f"Call to add_lora method failed: Loading lora {name} failed: No adapter found for {shown}"

    def rejected(self, reason: str) -> str:
        if self.version >= (0, 18, 0):
            # The CPU build always runs a separate worker process, which wraps the engine's words once more.
            return (
                f"Call to add_lora method failed: Worker failed with error '{reason}', please check the "
                "stack trace above for the root cause"
            )
        return f"Call to add_lora method failed: {reason}"

    def sanitise(self, path: str) -> str:
        if self.version < (0, 27, 0):
            return path
        if path.startswith(SANITISED_ROOTS) or "." in Path(path).name:
            return "<path>"
        return path

    def unknown_model(self, name: str, base: str) -> str:
        text = f"The model `{name}` does not exist."
        return f"{text} Valid aliases: {base}." if self.version >= (0, 32, 0) else text

    @property
    def fingerprint(self) -> str:
        return "vllm-{}.{}.{}".format(*self.version)


@attrs.define
class Fault:
    """One injected misbehaviour of a route, used ``times`` times (None: until cleared)."""

    kind: str
    times: int | None = 1
    seconds: float = 0.0
    status: int = 500
    body: bytes = b""


@attrs.frozen
class Call:
    """One request the stand-in received."""

    method: str
    path: str
    body: Any
    """The JSON body, or None."""
    authorization: str | None


@attrs.define(eq=False)
class _Gate:
    event: asyncio.Event
    loop: asyncio.AbstractEventLoop


class VllmStandIn:
    """vLLM's HTTP API for tests: the runtime LoRA routes, /v1/models and minimal completions.

    Args:
        model: the served base model name.
        version: the vLLM release line to answer as ("0.6", "0.7.0", "0.10.0", "0.10.1", "0.18", "0.32"...).
        api_key: like ``--api-key``: every /v1 route then wants ``Authorization: Bearer <key>``.
        runtime_lora: like ``VLLM_ALLOW_RUNTIME_LORA_UPDATING``: without it the LoRA routes are absent.
        enable_lora: like ``--enable-lora``: without it every load fails in the engine.
        max_lora_rank: like ``--max-lora-rank``.
        model_root: the base model's ``root`` in /v1/models (vLLM shows the folder it was started with).
    """

    def __init__(
        self,
        *,
        model: str = "tiny",
        version: str = "0.32",
        api_key: str | None = None,
        runtime_lora: bool = True,
        enable_lora: bool = True,
        max_lora_rank: int = 16,
        model_root: str | None = None,
    ) -> None:
        self.model = model
        self.model_root = model_root if model_root is not None else f"/models/{model}"
        self.family = Family.of(version)
        self.api_key = api_key
        self.runtime_lora = runtime_lora
        self.enable_lora = enable_lora
        self.max_lora_rank = max_lora_rank
        self._lock = threading.Condition()
        self._adapters: dict[str, str] = {}
        self._faults: dict[str, list[Fault]] = {}
        self._calls: list[Call] = []
        self._gates: list[_Gate] = []
        self._stream_gate_closed = False
        self._ids = itertools.count(1)
        self._created = int(time.time())

    # -- the test's side -----------------------------------------------------------------------

    @property
    def adapters(self) -> dict[str, str]:
        """Registered adapters, name to path, in registration order."""
        with self._lock:
            return dict(self._adapters)

    @property
    def calls(self) -> list[Call]:
        with self._lock:
            return list(self._calls)

    def calls_to(self, route: str) -> list[Call]:
        """Calls to one route: "models", "load", "unload", "completions" or "chat"."""
        path = _path_of(route)
        return [c for c in self.calls if c.path == path]

    def wait_for_calls(self, route: str, count: int, timeout: float = 10.0) -> list[Call]:
        """Block until ``route`` has had ``count`` calls; for tests, from a thread of their own."""
        path = _path_of(route)
        with self._lock:
            if not self._lock.wait_for(lambda: sum(c.path == path for c in self._calls) >= count, timeout):
                raise TimeoutError(f"{route} had fewer than {count} calls after {timeout} s")
            return [c for c in self._calls if c.path == path]

    def register(self, name: str, path: str) -> None:
        """Register an adapter behind the router's back, as another router would."""
        with self._lock:
            self._adapters[name] = path

    def unregister(self, name: str) -> None:
        with self._lock:
            self._adapters.pop(name, None)

    def restart(self) -> None:
        """Forget every runtime-loaded adapter, as a restarted vLLM does."""
        with self._lock:
            self._adapters.clear()

    def inject(self, route: str, fault: Fault) -> None:
        """Make ``route`` misbehave; faults on one route are used in the order they were added."""
        _path_of(route)
        with self._lock:
            self._faults.setdefault(route, []).append(fault)

    def delay(self, route: str, seconds: float, times: int | None = 1) -> None:
        self.inject(route, Fault("delay", times, seconds=seconds))

    def hang(self, route: str, times: int | None = 1) -> None:
        """Calls to ``route`` wait, unanswered, until ``release()`` or the server stops."""
        self.inject(route, Fault("hang", times))

    def answer(self, route: str, status: int, body: bytes | str, times: int | None = 1) -> None:
        raw = body.encode() if isinstance(body, str) else body
        self.inject(route, Fault("answer", times, status=status, body=raw))

    def drop(self, route: str, times: int | None = 1) -> None:
        """Close the connection in the middle of the answer."""
        self.inject(route, Fault("drop", times))

    def garble_listing(self, times: int | None = 1) -> None:
        self.inject("models", Fault("answer", times, status=200, body=b'{"object":"list","data":[{"id"'))

    def oversize_listing(self, size: int = (4 << 20) + 1024, times: int | None = 1) -> None:
        cards = ",".join(
            json.dumps({"id": f"pad-{i}", "object": "model", "parent": self.model}) for i in range(size // 40)
        )
        body = f'{{"object":"list","data":[{cards}]}}'.encode()
        self.inject("models", Fault("answer", times, status=200, body=body))

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def hold_streams(self) -> None:
        """Streams send their first chunk, then wait for ``release()``."""
        with self._lock:
            self._stream_gate_closed = True

    def release(self) -> None:
        """Let every hung call and held stream go on."""
        with self._lock:
            self._stream_gate_closed = False
            gates, self._gates = self._gates, []
        for gate in gates:
            gate.loop.call_soon_threadsafe(gate.event.set)

    # -- ASGI ----------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path = scope["path"]
        method = scope["method"]
        raw = await _read_body(receive)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        body = _json_or_none(raw)
        route = ROUTES.get(path)
        with self._lock:
            self._calls.append(Call(method, path, body, headers.get("authorization")))
            self._lock.notify_all()
            fault = self._take_fault(route) if route else None
        if path in ("/health", "/ping"):
            await _respond(send, 200, b"", None)
            return
        if path == "/version":
            await _respond_json(send, 200, {"version": "{}.{}.{}".format(*self.family.version)})
            return
        if route is None or (route in LORA_ROUTES and not self.runtime_lora):
            await _respond_json(send, 404, {"detail": "Not Found"})
            return
        if self.api_key is not None and not self._authorised(headers.get("authorization")):
            await _respond_json(send, 401, {"error": "Unauthorized"})
            return
        if fault is not None and await self._misbehave(fault, send):
            return
        expected = "GET" if route == "models" else "POST"
        if method != expected:
            await _respond_json(send, 405, {"detail": "Method Not Allowed"})
            return
        if route == "models":
            await _respond_json(send, 200, self._listing())
        elif route == "load":
            await self._load(send, body, headers)
        elif route == "unload":
            await self._unload(send, body, headers)
        else:
            await self._complete(send, route, body)

    def _take_fault(self, route: str) -> Fault | None:
        queue = self._faults.get(route)
        if not queue:
            return None
        fault = queue[0]
        if fault.times is not None:
            fault.times -= 1
            if fault.times <= 0:
                queue.pop(0)
        return fault

    async def _misbehave(self, fault: Fault, send: Send) -> bool:
        """Act out ``fault``; True when it answered, False when the call goes on as usual."""
        if fault.kind == "delay":
            await asyncio.sleep(fault.seconds)
            return False
        if fault.kind == "hang":
            await self._wait_released()
            return False
        if fault.kind == "answer":
            content_type = "application/json" if fault.body[:1] in (b"{", b"[") else None
            await _respond(send, fault.status, fault.body, content_type)
            return True
        if fault.kind == "drop":
            # Promise a body, send part of it, then fail: the server closes the connection mid-answer.
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"100")]}
            )
            await send({"type": "http.response.body", "body": b"Success", "more_body": True})
            raise ConnectionAbortedError("the stand-in dropped the connection on purpose")
        raise ValueError(f"unknown fault kind {fault.kind!r}")

    async def _wait_released(self) -> None:
        gate = _Gate(asyncio.Event(), asyncio.get_running_loop())
        with self._lock:
            self._gates.append(gate)
        await gate.event.wait()

    def _authorised(self, header: str | None) -> bool:
        if not header:
            return False
        scheme, _, token = header.partition(" ")
        return scheme.lower() == "bearer" and token == self.api_key

    def _error(self, status: int, message: str, type_: str, param: str | None = None) -> dict[str, Any]:
        error = {"message": message, "type": type_, "param": param, "code": status}
        return {"error": error} if self.family.nested_errors else {"object": "error", **error}

    def _card(self, name: str, root: str, parent: str | None) -> dict[str, Any]:
        return {
            "id": name,
            "object": "model",
            "created": self._created,
            "owned_by": "vllm",
            "root": root,
            "parent": parent,
            "max_model_len": 2048 if parent is None else None,
            "permission": [
                {
                    "id": f"modelperm-{next(self._ids):016x}",
                    "object": "model_permission",
                    "created": self._created,
                    "allow_create_engine": False,
                    "allow_sampling": True,
                    "allow_logprobs": True,
                    "allow_search_indices": False,
                    "allow_view": True,
                    "allow_fine_tuning": False,
                    "organization": "*",
                    "group": None,
                    "is_blocking": False,
                }
            ],
        }

    def _listing(self) -> dict[str, Any]:
        with self._lock:
            adapters = list(self._adapters.items())
        cards = [self._card(self.model, self.model_root, None)]
        cards += [self._card(name, path, self.model) for name, path in adapters]
        return {"object": "list", "data": cards}

    async def _load(self, send: Send, body: Any, headers: dict[str, str]) -> None:
        family = self.family
        bad = self._bad_request(body, headers, ("lora_name", "lora_path"))
        if bad is not None:
            await _respond_json(send, 400, bad)
            return
        name, path = body["lora_name"], body["lora_path"]
        if not name or not path:
            message = "Both 'lora_name' and 'lora_path' must be provided."
            await _respond_json(send, 400, self._error(400, message, "InvalidUserInput"))
            return
        if family.version >= (0, 32, 0) and name == self.model:
            message = f"The lora adapter '{name}' conflicts with a served base model."
            await _respond_json(send, 400, self._error(400, message, "InvalidUserInput"))
            return
        with self._lock:
            known = name in self._adapters
        if known:
            await _respond_json(send, 400, self._error(400, family.already_loaded(name), "InvalidUserInput"))
            return
        if family.checks_at_load:
            refusal = self._refusal(name, path)
            if refusal is not None:
                await _respond_json(send, *refusal)
                return
        with self._lock:
            if name in self._adapters:  # another call won the race while the files were read
                refused = True
            else:
                self._adapters[name] = path
                refused = False
        if refused:
            await _respond_json(send, 400, self._error(400, family.already_loaded(name), "InvalidUserInput"))
            return
        await _respond(send, 200, f"Success: LoRA adapter '{name}' added successfully.".encode(), None)

    def _refusal(self, name: str, path: str) -> tuple[int, dict[str, Any]] | None:
        """What the engine says of an adapter directory, as vLLM validates it; None if it loads."""
        family = self.family
        if not self.enable_lora:
            disabled = "LoRA is not enabled. Use --enable-lora to enable LoRA."
            status = family.rejection_status
            return status, self._error(status, family.rejected(disabled), _rejection_type(status))
        folder = Path(path).expanduser()
        config_file = folder / "adapter_config.json"
        if not config_file.is_file():
            status = family.missing_status
            type_ = "NotFoundError" if status == 404 else "BadRequestError"
            return status, self._error(status, family.missing(name, path), type_)
        try:
            config = json.loads(config_file.read_text())
        except (OSError, ValueError):
            config = {}
        reason: str | None = None
        rank = max([int(config.get("r", 0))] + [int(v) for v in (config.get("rank_pattern") or {}).values()])
        if "r" not in config:
            reason = "Missing required configuration fields: {'r'}"
        elif rank > self.max_lora_rank:
            reason = f"LoRA rank {rank} is greater than max_lora_rank {self.max_lora_rank}."
        elif config.get("use_dora"):
            reason = "vLLM does not yet support DoRA."
        elif config.get("bias", "none") != "none":
            reason = "Adapter bias is not supported."
        elif not any(folder.glob("adapter_model.*")):
            reason = f"{family.sanitise(str(folder))} doesn't contain tensors"
        if reason is None:
            return None
        status = family.rejection_status
        return status, self._error(status, family.rejected(reason), _rejection_type(status))

    def _bad_request(
        self, body: Any, headers: dict[str, str], fields: tuple[str, ...]
    ) -> dict[str, Any] | None:
        """FastAPI's answer to a body that is not the JSON the route wants, or None when it is."""
        content_type = headers.get("content-type", "").split(";")[0].strip().lower()
        if self.family.version >= (0, 7, 3) and content_type != "application/json":
            message = "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed"
            return self._error(400, message, "Bad Request")
        for field in fields:
            if not isinstance(body, dict) or not isinstance(body.get(field), str):
                message = (
                    "1 validation error:\n  {'type': 'missing', 'loc': 'body."
                    f"{field}', 'msg': 'Field required', 'input': '<dict of {len(body or {})} items>'}}"
                )
                return self._error(400, message, "Bad Request", f"body.{field}")
        return None

    async def _unload(self, send: Send, body: Any, headers: dict[str, str]) -> None:
        family = self.family
        bad = self._bad_request(body, headers, ("lora_name",))
        if bad is not None:
            await _respond_json(send, 400, bad)
            return
        name = body["lora_name"]
        if not name:
            message = (
                "'lora_name' needs to be provided to unload a LoRA adapter."
                if family.version >= (0, 10, 0)
                else "either 'lora_name' and 'lora_int_id' needs to be provided."
            )
            await _respond_json(send, 400, self._error(400, message, "InvalidUserInput"))
            return
        with self._lock:
            known = self._adapters.pop(name, None) is not None
        if not known:
            status = family.unload_not_found_status
            type_ = "NotFoundError" if status == 404 else "InvalidUserInput"
            message = f"The lora adapter '{name}' cannot be found."
            await _respond_json(send, status, self._error(status, message, type_))
            return
        await _respond(send, 200, f"Success: LoRA adapter '{name}' removed successfully.".encode(), None)

    async def _complete(self, send: Send, route: str, body: Any) -> None:
        if not isinstance(body, dict):
            await _respond_json(send, 400, self._error(400, "the body must be a JSON object", "Bad Request"))
            return
        model = body.get("model") or self.model
        with self._lock:
            known = model == self.model or model in self._adapters
        if not known:
            param = "model" if self.family.version >= (0, 14, 0) else None
            message = self.family.unknown_model(model, self.model)
            await _respond_json(send, 404, self._error(404, message, "NotFoundError", param))
            return
        prompt = body.get("prompt") if route == "completions" else json.dumps(body.get("messages"))
        tokens = max(1, min(int(body.get("max_tokens") or 16), 512))
        words = generated(model, str(prompt), tokens)
        ident = f"{'cmpl' if route == 'completions' else 'chatcmpl'}-{next(self._ids):016x}"
        if body.get("stream"):
            await self._stream(send, route, ident, model, words)
            return
        text = "".join(words)
        token_ids = [token_id(w) for w in words] if body.get("return_token_ids") else None
        prompt_tokens = len(str(prompt).split())
        usage = {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + tokens,
            "completion_tokens": tokens,
            "prompt_tokens_details": None,
            "completion_tokens_details": None,
        }
        # Field for field, in vLLM 0.32's order.
        if route == "completions":
            answer: dict[str, Any] = {
                "id": ident,
                "object": "text_completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "text": text,
                        "logprobs": None,
                        "finish_reason": "length",
                        "stop_reason": None,
                        "token_ids": token_ids,
                        "prompt_logprobs": None,
                        "prompt_token_ids": None,
                        "routed_experts": None,
                    }
                ],
                "service_tier": None,
                "system_fingerprint": self.family.fingerprint,
                "usage": usage,
                "kv_transfer_params": None,
                "ec_transfer_params": None,
                "metrics": None,
            }
        else:
            reply: dict[str, Any] = {
                "role": "assistant",
                "content": text,
                "refusal": None,
                "annotations": None,
                "audio": None,
                "function_call": None,
                "reasoning": None,
            }
            answer = {
                "id": ident,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": reply,
                        "logprobs": None,
                        "finish_reason": "length",
                        "stop_reason": None,
                        "token_ids": token_ids,
                        "routed_experts": None,
                    }
                ],
                "service_tier": None,
                "system_fingerprint": self.family.fingerprint,
                "usage": usage,
                "prompt_logprobs": None,
                "prompt_token_ids": None,
                "prompt_text": None,
                "kv_transfer_params": None,
                "ec_transfer_params": None,
                "metrics": None,
            }
        await _respond_json(send, 200, answer)

    async def _stream(self, send: Send, route: str, ident: str, model: str, words: list[str]) -> None:
        headers = [(b"content-type", b"text/event-stream; charset=utf-8")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        created = int(time.time())
        for i, word in enumerate(words):
            last = i == len(words) - 1
            finish = "length" if last else None
            if route == "completions":
                choice: dict[str, Any] = {
                    "index": 0,
                    "text": word,
                    "logprobs": None,
                    "finish_reason": finish,
                    "stop_reason": None,
                    "prompt_token_ids": None,
                    "token_ids": None,
                }
                kind = "text_completion"
            else:
                choice = {"index": 0, "delta": {"content": word}, "logprobs": None, "finish_reason": finish}
                kind = "chat.completion.chunk"
            chunk: dict[str, Any] = {"id": ident, "object": kind, "created": created, "model": model}
            chunk["choices"] = [choice]
            if last:
                chunk["system_fingerprint"] = self.family.fingerprint
            data = f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n".encode()
            await send({"type": "http.response.body", "body": data, "more_body": True})
            if i == 0:
                with self._lock:
                    held = self._stream_gate_closed
                if held:
                    await self._wait_released()
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})


def generated(model: str, prompt: str, tokens: int) -> list[str]:
    """The stand-in's greedy output: fixed for a (model, prompt), different from model to model."""
    seed = hashlib.sha256(f"{model}\0{prompt}".encode()).digest()
    return [f" {WORDS[seed[i % len(seed)] % len(WORDS)]}" for i in range(tokens)]


def token_id(word: str) -> int:
    """The token id the stand-in reports for one of its generated words."""
    return 100 + WORDS.index(word.strip())


def _rejection_type(status: int) -> str:
    return "InternalServerError" if status >= 500 else "BadRequestError"


def _path_of(route: str) -> str:
    for path, name in ROUTES.items():
        if name == route:
            return path
    raise ValueError(f"unknown route {route!r}; one of {sorted(ROUTES.values())}")


def _json_or_none(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(chunks)


async def _respond(send: Send, status: int, body: bytes, content_type: str | None) -> None:
    # Like Starlette's Response with no media type: vLLM's success answers carry no content-type.
    headers = [(b"content-length", str(len(body)).encode())]
    if content_type:
        headers.append((b"content-type", content_type.encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _respond_json(send: Send, status: int, data: Any) -> None:
    body = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
    await _respond(send, status, body, "application/json")


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return

"""What a vLLM server really loads and drops, written down: bench/peer_bench.py's instrument.

Put on a vLLM server's ``PYTHONPATH`` with ``LORAFLEET_PEER_LOG=FILE`` set, and every process of the
server (API server, EngineCore, worker) appends one JSON line to FILE for each of these, with the wall
clock (``t``) and its pid:

- ``read``: the worker read an adapter from disk (``WorkerLoRAManager._load_adapter``: id, name, path,
  the seconds the read took, and whether it happened inside a generation step,
  ``LRUCacheWorkerLoRAManager._apply_adapters``, or in a runtime load between steps). vLLM 0.32
  logs only a name's first load; a registered adapter its CPU cache dropped is read again inside a
  step with no log line and no metric.
- ``read_failed``: the same read raised.
- ``drop``: an adapter left the engine's CPU cache (``LRUCacheLoRAModelManager.remove_oldest_adapter``,
  the least recently used one; ``remove_adapter``; ``remove_all_adapters``; or an insert past capacity):
  its id, how, and whether inside a step.
- ``register`` / ``unregister``: the API server's frontend (``OpenAIServingModels``) took a name on
  (``via`` ``load``: ``/v1/load_lora_adapter``; ``resolve``: a LoRA resolver on a request's first use)
  or forgot it (``/v1/unload_lora_adapter``), with its id.

It changes nothing the server does: each wrapper calls the original with the same arguments and gives
back what it gave back (or raises what it raised). Without ``LORAFLEET_PEER_LOG`` it does nothing.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import json
import os
import sys
import threading
import time
import types
from collections.abc import Callable, Sequence
from typing import Any

_PATH = os.environ.get("LORAFLEET_PEER_LOG")
_fd: int | None = None
_in_step = threading.local()


def _write(event: str, **fields: object) -> None:
    """One JSON line, in one write on an O_APPEND descriptor, so that processes do not interleave."""
    global _fd
    if _PATH is None:
        return
    if _fd is None:
        _fd = os.open(_PATH, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    line = json.dumps({"t": time.time(), "pid": os.getpid(), "ev": event, **fields}) + "\n"
    os.write(_fd, line.encode())


def _stepping() -> bool:
    return bool(getattr(_in_step, "on", False))


def _ids(manager: Any) -> list[int]:
    return list(manager._registered_adapters.cache)


def _dropped(manager: Any, before: list[int], how: str) -> None:
    after = set(_ids(manager))
    for lora_id in before:
        if lora_id not in after:
            _write("drop", id=lora_id, how=how, step=_stepping())


def _patch_worker_manager(module: types.ModuleType) -> None:
    base, lru = module.WorkerLoRAManager, module.LRUCacheWorkerLoRAManager
    load, apply = base._load_adapter, lru._apply_adapters

    @functools.wraps(load)
    def _load_adapter(self: Any, lora_request: Any) -> Any:
        fields = {
            "id": lora_request.lora_int_id,
            "name": lora_request.lora_name,
            "path": lora_request.lora_path,
            "step": _stepping(),
            "inplace": bool(getattr(lora_request, "load_inplace", False)),
        }
        started = time.perf_counter()
        try:
            loaded = load(self, lora_request)
        except BaseException as e:
            _write("read_failed", error=type(e).__name__, **fields)
            raise
        _write("read", seconds=time.perf_counter() - started, **fields)
        return loaded

    @functools.wraps(apply)
    def _apply_adapters(self: Any, lora_requests: Any) -> Any:
        was, _in_step.on = _stepping(), True
        try:
            return apply(self, lora_requests)
        finally:
            _in_step.on = was

    base._load_adapter = _load_adapter
    lru._apply_adapters = _apply_adapters


def _patch_model_manager(module: types.ModuleType) -> None:
    plain, lru = module.LoRAModelManager, module.LRUCacheLoRAModelManager

    def dropping(original: Callable[..., Any], how: str) -> Callable[..., Any]:
        @functools.wraps(original)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            before = _ids(self)
            try:
                return original(self, *args, **kwargs)
            finally:
                _dropped(self, before, how)

        return wrapper

    lru.remove_oldest_adapter = dropping(lru.remove_oldest_adapter, "lru")
    plain.remove_adapter = dropping(plain.remove_adapter, "remove")
    plain.remove_all_adapters = dropping(plain.remove_all_adapters, "all")
    plain._add_adapter = dropping(plain._add_adapter, "overflow")


def _patch_frontend(module: types.ModuleType) -> None:
    models = module.OpenAIServingModels
    load, unload, resolve = models.load_lora_adapter, models.unload_lora_adapter, models.resolve_lora

    def registered(self: Any, name: str, via: str) -> None:
        request = self.lora_requests.get(name)
        if request is not None:
            _write("register", name=name, id=request.lora_int_id, path=request.lora_path, via=via)

    @functools.wraps(load)
    async def load_lora_adapter(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        answer = await load(self, request, *args, **kwargs)
        if isinstance(answer, str):  # "Success: ..."; an ErrorResponse otherwise
            registered(self, request.lora_name, "load")
        return answer

    @functools.wraps(unload)
    async def unload_lora_adapter(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        held = self.lora_requests.get(request.lora_name)
        answer = await unload(self, request, *args, **kwargs)
        if isinstance(answer, str) and held is not None:
            _write("unregister", name=request.lora_name, id=held.lora_int_id)
        return answer

    @functools.wraps(resolve)
    async def resolve_lora(self: Any, lora_name: str, *args: Any, **kwargs: Any) -> Any:
        known = lora_name in self.lora_requests
        answer = await resolve(self, lora_name, *args, **kwargs)
        if not known and hasattr(answer, "lora_int_id"):
            registered(self, lora_name, "resolve")
        return answer

    models.load_lora_adapter = load_lora_adapter
    models.unload_lora_adapter = unload_lora_adapter
    models.resolve_lora = resolve_lora


_PATCHES: dict[str, Callable[[types.ModuleType], None]] = {
    "vllm.lora.worker_manager": _patch_worker_manager,
    "vllm.lora.model_manager": _patch_model_manager,
    "vllm.entrypoints.openai.models.serving": _patch_frontend,
}


class _Patched(importlib.abc.Loader):
    """A module's own loader, and the patch applied once the module has run."""

    def __init__(self, loader: importlib.abc.Loader, patch: Callable[[types.ModuleType], None]) -> None:
        self.loader = loader
        self.patch = patch

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self.loader.exec_module(module)
        self.patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds the modules to patch through the other finders, and wraps their loaders."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        patch = _PATCHES.get(fullname)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _Patched(spec.loader, patch)
                return spec
        return None


if _PATH is not None:
    sys.meta_path.insert(0, _Finder())

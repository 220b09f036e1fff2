"""The stand-in's engine: the served base model and the adapters registered at run time."""

from __future__ import annotations

import itertools
import threading
import time

from ._family import Family


class Engine:
    """What a vLLM server serves, as its routes see it.

    Guarded by a lock: the server thread answers while tests read and change it from theirs.
    """

    def __init__(
        self, *, model: str, model_root: str, family: Family, enable_lora: bool, max_lora_rank: int
    ) -> None:
        self.model = model
        self.model_root = model_root
        self.family = family
        self.enable_lora = enable_lora
        self.max_lora_rank = max_lora_rank
        self.created = int(time.time())
        self._lock = threading.Lock()
        self._adapters: dict[str, str] = {}
        self._ids = itertools.count(1)

    @property
    def adapters(self) -> dict[str, str]:
        """Registered adapters, name to path, in registration order."""
        with self._lock:
            return dict(self._adapters)

    def serves(self, name: str) -> bool:
        """Whether ``name`` is the base model or a registered adapter."""
        with self._lock:
            return name == self.model or name in self._adapters

    def has(self, name: str) -> bool:
        with self._lock:
            return name in self._adapters

    def register(self, name: str, path: str) -> bool:
        """Register ``name``; False, changing nothing, when it is registered already."""
        with self._lock:
            if name in self._adapters:
                return False
            self._adapters[name] = path
            return True

    def put(self, name: str, path: str) -> None:
        """Register ``name`` whether or not it was (as another router's load would)."""
        with self._lock:
            self._adapters[name] = path

    def unregister(self, name: str) -> bool:
        """Forget ``name``; False when it was not registered."""
        with self._lock:
            return self._adapters.pop(name, None) is not None

    def restart(self) -> None:
        """Forget every runtime-loaded adapter, as a restarted vLLM does."""
        with self._lock:
            self._adapters.clear()

    def next_id(self) -> int:
        """A fresh number for ids the answers carry (permissions, completions)."""
        with self._lock:
            return next(self._ids)

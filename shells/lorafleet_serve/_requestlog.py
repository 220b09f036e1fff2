"""The request log: one JSON line per completion, for an operator to keep and to size a fleet from.

``lorafleet simulate --trace`` reads it as it is. Off unless ``server.request_log`` names a file. The
file is bounded: once a line takes it past ``server.request_log_max_bytes`` it becomes ``FILE.1``
(replacing the one before) and a new ``FILE`` begins, so the two hold at most twice that.

Each line (docs/serve.md, "The request log", is the schema's reference)::

    {"time": 1767000000.123, "adapter": "sql", "model": "llama", "replica": "gpu-0", "how": "loaded",
     "wait": 0.412, "ttft": 0.530, "duration": 1.203, "prompt_tokens": 12, "completion_tokens": 64,
     "status": 200, "stream": true, "attempts": 1, "end": "done", "error": null,
     "request_id": "9f3c..."}

The line is written when the request ends, so lines come in order of their ends, not of ``time``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from pathlib import Path
from typing import Any

import attrs

from ._openai import Message, Send

log = logging.getLogger("lorafleet.serve")
TAIL_BYTES = 16 << 10
"""How much of an answer's end is kept to find the engine's ``usage`` in (the last chunk of a stream)."""
_USAGE = re.compile(rb'"usage"\s*:\s*\{')


@attrs.define(eq=False)
class Watch:
    """What a request's answer showed on its way to the client: when its body began, and its end.

    ``send`` stands in for the ASGI ``send`` it wraps, and passes every message on unchanged.
    """

    inner: Send
    started: float
    """``time.perf_counter()`` at the request's arrival."""
    first: float | None = None
    """``time.perf_counter()`` when the first byte of the answer's body went out."""
    tail: bytes = b""

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.body":
            body = message.get("body", b"")
            if body:
                if self.first is None:
                    self.first = time.perf_counter()
                self.tail = (self.tail + body)[-TAIL_BYTES:]
        await self.inner(message)

    def usage(self) -> dict[str, Any]:
        """The engine's token counts: the last ``usage`` object of the answer (a stream carries one in
        its last chunk only when asked, ``stream_options.include_usage``); empty when there is none."""
        for found in reversed(list(_USAGE.finditer(self.tail))):
            try:
                value, _ = json.JSONDecoder().raw_decode(
                    self.tail[found.end() - 1 :].decode("utf-8", "replace")
                )
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
        return {}


class RequestLog:
    """The request log's file, appended to a line at a time, rotated at ``max_bytes``.

    Raises:
        OSError: the file cannot be opened (at start-up, so that ``lorafleet serve`` says so at once).
    """

    def __init__(self, path: Path, max_bytes: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        # Wall-clock time of a perf_counter() reading: the log's times are Unix seconds, the
        # router measures with the monotonic clock.
        self._epoch = time.time() - time.perf_counter()
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - held open until close()
        self._size = self._file.tell()
        self._failing = False

    def watch(self, send: Send) -> Watch:
        """A watch on the answer of a request arriving now."""
        return Watch(send, time.perf_counter())

    def write(
        self,
        watch: Watch,
        *,
        adapter: str | None,
        model: str | None,
        replica: str | None,
        how: str | None,
        wait_ms: float | None,
        stream: bool,
        status: int,
        attempts: int,
        end: str,
        error: str | None,
        request_id: str | None = None,
    ) -> None:
        """The request's line: ``wait_ms`` is the time it waited for its adapter (a lease)."""
        now = time.perf_counter()
        usage = watch.usage()
        entry = {
            "time": round(self._epoch + watch.started, 6),
            "adapter": adapter,
            "model": model,
            "replica": replica,
            "how": how,
            "wait": None if wait_ms is None else round(wait_ms / 1000, 6),
            "ttft": round(watch.first - watch.started, 6) if stream and watch.first is not None else None,
            "duration": round(now - watch.started, 6),
            "prompt_tokens": _count(usage.get("prompt_tokens")),
            "completion_tokens": _count(usage.get("completion_tokens")),
            "status": status,
            "stream": stream,
            "attempts": attempts,
            "end": end,
            "error": error,
            "request_id": request_id,
        }
        line = json.dumps(entry, separators=(", ", ": ")) + "\n"
        if self._file.closed:
            return  # a request that outlived the router's shutdown
        try:
            self._file.write(line)
            self._file.flush()
            self._size += len(line.encode("utf-8"))
            if self._size >= self.max_bytes:
                self._rotate()
        except OSError as exc:
            # The log is the operator's record, not the request's business: a full disk costs lines,
            # never an answer. Said once, until a line goes through again.
            if not self._failing:
                log.warning("the request log %s: %s; lines are lost until it can be written", self.path, exc)
            self._failing = True
        else:
            self._failing = False

    def _rotate(self) -> None:
        self._file.close()
        try:
            os.replace(self.path, self.path.with_name(self.path.name + ".1"))
        finally:
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
            self._size = self._file.tell()

    def close(self) -> None:
        self._file.close()


def _count(value: object) -> int | None:
    return value if type(value) is int else None

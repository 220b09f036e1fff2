"""Fault injection: what a test makes a route do instead of (or before) answering as vLLM would."""

from __future__ import annotations

import asyncio
import threading

import attrs

from ._asgi import Send, respond


@attrs.define
class Misbehaviour:
    """One injected misbehaviour of a route, used ``times`` times (None: until cleared).

    ``kind`` is "delay" (wait ``seconds``, then answer), "hang" (wait for ``release()``, then answer),
    "answer" (answer ``status`` and ``body`` instead) or "drop" (close the connection mid-answer).
    """

    kind: str
    times: int | None = 1
    seconds: float = 0.0
    status: int = 500
    body: bytes = b""


@attrs.define(eq=False)
class _Gate:
    event: asyncio.Event
    loop: asyncio.AbstractEventLoop


class Misbehaviours:
    """The misbehaviours waiting on each route, and the gate hung calls and held streams wait at.

    Thread-safe: tests inject and release from their thread while the server's loop acts them out.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queues: dict[str, list[Misbehaviour]] = {}
        self._prompts: dict[str, Misbehaviour] = {}
        """Completions whose prompt holds the text are answered so, every time."""
        self._gates: list[_Gate] = []
        self._streams_held = False

    def add(self, route: str, misbehaviour: Misbehaviour) -> None:
        """Queue ``misbehaviour`` on ``route``, after those already there."""
        with self._lock:
            self._queues.setdefault(route, []).append(misbehaviour)

    def take(self, route: str) -> Misbehaviour | None:
        """The misbehaviour the next call to ``route`` acts out, counted as used; None to behave."""
        with self._lock:
            queue = self._queues.get(route)
            if not queue:
                return None
            misbehaviour = queue[0]
            if misbehaviour.times is not None:
                misbehaviour.times -= 1
                if misbehaviour.times <= 0:
                    queue.pop(0)
            return misbehaviour

    def fail_prompts(self, text: str, misbehaviour: Misbehaviour) -> None:
        """Completions whose prompt holds ``text`` act out ``misbehaviour``, every time."""
        with self._lock:
            self._prompts[text] = misbehaviour

    def for_prompt(self, prompt: str) -> Misbehaviour | None:
        """What a completion of ``prompt`` acts out for the text it holds (the first added), or None."""
        with self._lock:
            return next((m for text, m in self._prompts.items() if text in prompt), None)

    def clear(self, route: str | None = None) -> None:
        """Forget the misbehaviours queued on ``route``; on every route, and the prompts', when None."""
        with self._lock:
            if route is None:
                self._queues.clear()
                self._prompts.clear()
            else:
                self._queues.pop(route, None)

    def clear_prompts(self) -> None:
        with self._lock:
            self._prompts.clear()

    def hold_streams(self) -> None:
        with self._lock:
            self._streams_held = True

    def release(self) -> None:
        """Let every hung call and held stream go on (from any thread)."""
        with self._lock:
            self._streams_held = False
            gates, self._gates = self._gates, []
        for gate in gates:
            gate.loop.call_soon_threadsafe(gate.event.set)

    async def pause_stream(self) -> None:
        """Where a stream waits after its first chunk while streams are held."""
        with self._lock:
            held = self._streams_held
        if held:
            await self._wait_released()

    async def act(self, misbehaviour: Misbehaviour, send: Send) -> bool:
        """Act out ``misbehaviour``; True when it answered, False when the call goes on as usual."""
        if misbehaviour.kind == "delay":
            await asyncio.sleep(misbehaviour.seconds)
            return False
        if misbehaviour.kind == "hang":
            await self._wait_released()
            return False
        if misbehaviour.kind == "answer":
            content_type = "application/json" if misbehaviour.body[:1] in (b"{", b"[") else None
            await respond(send, misbehaviour.status, misbehaviour.body, content_type)
            return True
        if misbehaviour.kind == "drop":
            # Promise a body, send part of it, then fail: the server closes the connection mid-answer.
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"100")]}
            )
            await send({"type": "http.response.body", "body": b"Success", "more_body": True})
            raise ConnectionAbortedError("the stand-in dropped the connection on purpose")
        raise ValueError(f"unknown misbehaviour {misbehaviour.kind!r}")

    async def _wait_released(self) -> None:
        gate = _Gate(asyncio.Event(), asyncio.get_running_loop())
        with self._lock:
            self._gates.append(gate)
        await gate.event.wait()

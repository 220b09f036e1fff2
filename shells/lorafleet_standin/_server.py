"""Serve a stand-in on 127.0.0.1 on an ephemeral port, under hypercorn, in a thread of its own.

A thread with its own asyncio loop serves trio and asyncio tests alike, and tests keep their own loop.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from types import TracebackType

from hypercorn.asyncio import serve
from hypercorn.config import Config

from ._app import VllmStandIn


class StandInServer:
    """Runs ``app`` on 127.0.0.1 (or ``host``) until ``stop()``; use it as a context manager.

    Args:
        app: the stand-in to serve (a fresh default one when None).
        port: 0 picks a free port.
        host: the address to listen on: Linux routes all of 127.0.0.0/8 to the loopback, so tests can
            have replicas at several addresses on one port; ``::1`` for IPv6.
    """

    def __init__(self, app: VllmStandIn | None = None, *, port: int = 0, host: str = "127.0.0.1") -> None:
        self.app = app if app is not None else VllmStandIn()
        self.host = host
        self._sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self._sock.listen(128)
        self._sock.set_inheritable(True)
        self.port: int = self._sock.getsockname()[1]
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> StandInServer:
        self._thread = threading.Thread(target=self._run, name=f"vllm-stand-in:{self.port}", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the stand-in server did not start within 10 s")
        if self._error is not None:
            raise RuntimeError("the stand-in server failed to start") from self._error
        return self

    def stop(self) -> None:
        """Stop serving: hung calls are released, open connections closed, the thread joined."""
        if self._thread is None:
            return
        self.app.release()
        if self._loop is not None and self._stopping is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(15)
        if self._thread.is_alive():
            raise RuntimeError("the stand-in server did not stop within 15 s")
        self._thread = None

    def _run(self) -> None:
        config = Config()
        # hypercorn owns the socket from here on and closes it when it stops.
        config.bind = [f"fd://{self._sock.detach()}"]
        config.graceful_timeout = 1.0
        config.accesslog = None
        config.errorlog = None
        config.loglevel = "WARNING"
        self._loop = asyncio.new_event_loop()
        self._stopping = asyncio.Event()
        self._loop.call_soon(self._ready.set)
        try:
            self._loop.run_until_complete(serve(self.app, config, shutdown_trigger=self._stopping.wait))  # type: ignore[arg-type]
        except BaseException as exc:  # reported to start(), or left for stop()
            self._error = exc
            self._ready.set()
        finally:
            self._loop.close()

    def __enter__(self) -> StandInServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

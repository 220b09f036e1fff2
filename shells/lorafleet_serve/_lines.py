"""The router's line per request, written in batches, as nginx's ``access_log ... buffer= flush=``.

Through ``logging``, one line cost the router 50 to 70 µs of CPU a request when requests come one at a
time (the logging code runs cold between them: a seventh to a fifth of the router's CPU on a hit, and a
tenth of a hit's latency, in bench/NOTES.md); written a batch at a time it runs warm, for a few µs a
line. Lines are made when written, for the same reason (0.96x the CPU of making each as its request
ends). A line keeps the time its request ended, and goes out at most ``FLUSH_SECONDS`` later; where no
writer runs (a router used on its own, or stopping), at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import anyio

FLUSH_SECONDS = 0.1
"""How long a request's line may wait for its batch."""


class Lines:
    """Request lines for ``log`` at INFO, written by ``write()`` while it runs."""

    def __init__(self, log: logging.Logger, every: float = FLUSH_SECONDS) -> None:
        self._log = log
        self._every = every
        self._pending: list[tuple[float, Callable[[], str]]] = []
        self._wake: anyio.Event | None = None
        """Set when a batch's first line comes, while ``write()`` runs (None: it does not)."""

    def add(self, line: Callable[[], str]) -> None:
        """A request ended: its line (made by ``line()``, which must not change meanwhile), in the next
        batch (at once where no writer runs)."""
        wake = self._wake
        if wake is None:
            self._log.info(line())
            return
        self._pending.append((time.time(), line))
        if len(self._pending) == 1:
            wake.set()

    async def write(self) -> None:
        """Write the lines a batch at a time until cancelled, then those left."""
        try:
            while True:
                self._wake = anyio.Event()
                if not self._pending:
                    await self._wake.wait()
                await anyio.sleep(self._every)
                self.flush()
        finally:
            self._wake = None
            self.flush()

    def flush(self) -> None:
        """Write the lines waiting, each with the time its request ended."""
        pending, self._pending = self._pending, []
        log = self._log
        for ended, line in pending:
            record = log.makeRecord(log.name, logging.INFO, __file__, 0, line(), (), None)
            record.relativeCreated -= (record.created - ended) * 1000
            record.created = ended
            record.msecs = (ended - int(ended)) * 1000
            log.handle(record)


__all__ = ["FLUSH_SECONDS", "Lines"]

"""The trio face of the shared fleet: trio's rules for a hit, and a clear error outside trio."""

from __future__ import annotations

from typing import Self

import sniffio
import trio

import lorafleet_fleet


class Fleet(lorafleet_fleet.Fleet):
    __doc__ = lorafleet_fleet.Fleet.__doc__

    async def __aenter__(self) -> Self:
        if sniffio.current_async_library() != "trio":
            raise RuntimeError(
                "lorafleet_trio.Fleet runs under trio; use lorafleet_asyncio.Fleet with asyncio"
            )
        await super().__aenter__()
        return self

    # trio's rule: every async function that can block checkpoints, even when it does not block, so
    # a hit can still be cancelled and lets other tasks run.
    _checkpoint = staticmethod(trio.lowlevel.checkpoint)

"""The asyncio face of the shared fleet: a hit returns without yielding, and a clear error outside asyncio."""

from __future__ import annotations

from typing import Self

import sniffio

import lorafleet_fleet


class Fleet(lorafleet_fleet.Fleet):
    __doc__ = lorafleet_fleet.Fleet.__doc__

    async def __aenter__(self) -> Self:
        if sniffio.current_async_library() != "asyncio":
            raise RuntimeError(
                "lorafleet_asyncio.Fleet runs under asyncio; use lorafleet_trio.Fleet with trio"
            )
        await super().__aenter__()
        return self

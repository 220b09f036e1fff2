"""Both shells make the same engine calls for the same script (one runs under trio, one under asyncio)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from lorafleet_fleet import AdapterError, Fleet, Replica
from lorafleet_standin import StandInServer

from conftest import eventually, settled


def replica(server: StandInServer, limit: int = 2, rid: str = "r0") -> Replica:
    return Replica(rid, server.url, "tiny", limit)


def test_both_shells_make_the_same_engine_calls_for_the_same_script(
    serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    """The same script, the same calls, in the same order: each request waits for the fleet to settle
    (the excess a landed load leaves goes after its grant, [settle]), so that the order is the
    machine's and not the two shells' timing."""
    import asyncio

    import trio

    import lorafleet_asyncio
    import lorafleet_trio

    def calls(
        run: Callable[[Callable[[], Coroutine[Any, Any, None]]], object], fleet_type: type[Fleet]
    ) -> list[tuple[str, object]]:
        server = serve()
        r = replica(server, limit=2)

        async def script() -> None:
            async with fleet_type() as fleet:
                await fleet.sync_unknown([r])
                for name in ("a0", "a1", "a0", "a2", "a3", "a1", "big", "a4"):
                    if name == "big":
                        with pytest.raises(AdapterError):
                            async with fleet.acquire(r, name, str(adapter_dir / "rank64")):
                                pass
                    else:
                        async with fleet.acquire(r, name, str(adapter_dir / name)):
                            pass
                    await eventually(lambda: settled(fleet))

        run(script)
        return [
            (c.path.rsplit("/", 1)[-1], c.body and c.body["lora_name"])
            for c in server.app.calls
            if c.path != "/metrics"
        ]

    trio_calls = calls(lambda script: trio.run(script), lorafleet_trio.Fleet)
    asyncio_calls = calls(lambda script: asyncio.run(script()), lorafleet_asyncio.Fleet)
    assert trio_calls == asyncio_calls
    load, unload = "load_lora_adapter", "unload_lora_adapter"
    # Each cold load past the limit goes out first; once it lands, the excess goes ([settle]).
    assert trio_calls == [
        ("models", None),
        (load, "a0"),
        (load, "a1"),
        (load, "a2"),
        (unload, "a1"),  # a0 was used after a1
        (load, "a3"),
        (unload, "a0"),  # the least recently used, though asked for twice
        (load, "a1"),
        (unload, "a2"),  # a3 was used after a2
        (load, "big"),  # refused: it evicts nothing
        (load, "a4"),
        (unload, "a3"),  # a1 was used after a3
    ]

"""Smoke test of ``pip install 'lorafleet[trio,standin]'`` (or ``asyncio``): a fleet of that shell
acquires an adapter over real HTTP from a stand-in started in this script, then hits it.

Usage: ``python smoke_shell.py trio|asyncio``. Run by packaging/check.py in a fresh venv.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from types import ModuleType

from lorafleet import How
from lorafleet_standin import StandInServer, VllmStandIn


async def acquire(lf: ModuleType, url: str, adapter: Path) -> list[How]:
    """Acquire ``adapter`` twice through the shell ``lf`` on the stand-in at ``url``; returns how each
    lease was granted."""
    replica = lf.Replica(id="r0", url=url, model="tiny", limit=2)
    hows: list[How] = []
    async with lf.Fleet() as fleet:
        await fleet.sync_unknown([replica])
        for _ in range(2):
            async with fleet.acquire(replica, "sql", str(adapter)) as lease:
                hows.append(lease.how)
    return hows


def main(runtime: str) -> None:
    with tempfile.TemporaryDirectory() as tmp, StandInServer(VllmStandIn(model="tiny")) as server:
        adapter = Path(tmp) / "sql"
        adapter.mkdir()
        (adapter / "adapter_config.json").write_text('{"r": 8}')
        (adapter / "adapter_model.safetensors").write_bytes(b"\0" * 64)
        if runtime == "trio":
            import trio

            import lorafleet_trio

            hows = trio.run(acquire, lorafleet_trio, server.url, adapter)
        else:
            import asyncio

            import lorafleet_asyncio

            hows = asyncio.run(acquire(lorafleet_asyncio, server.url, adapter))
        loads = [call.body["lora_name"] for call in server.app.calls_to("load")]
    assert hows == [How.LOADED, How.HIT], hows
    assert loads == ["sql"], loads
    print(f"{runtime}: acquired 'sql' from a stand-in over HTTP: {[h.value for h in hows]}")


if __name__ == "__main__":
    main(sys.argv[1])

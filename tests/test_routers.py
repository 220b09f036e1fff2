"""Several fleets on the same stand-ins, coordinated only through the engine ([elsewhere])."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import httpx
import pytest

from lorafleet_fleet import Fleet, Replica
from lorafleet_standin import StandInServer

from conftest import calls_reach, eventually

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_task_left_running")]


@pytest.mark.parametrize("read_running", [True, False])
async def test_another_routers_running_adapter_is_not_evicted(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path, read_running: bool
) -> None:
    """Router B streams on a0 on a replica of limit 1; router A, which knows of a0 only from its
    listing, needs a1 there: with the engine's report it goes over the limit rather than unload a0."""
    r = Replica("r0", standin.url, "tiny", 1)
    async with fleet_type() as b:
        await b.sync_unknown([r])
        async with b.acquire(r, "a0", str(adapter_dir / "a0")):
            standin.app.hang("completions")
            async with anyio.create_task_group() as tasks:
                # B's request runs on the engine: its completion is in flight until released.
                tasks.start_soon(_complete, standin, "a0")
                await calls_reach(standin, "completions", 1)
                metrics_before = len(standin.app.calls_to("metrics"))
                async with fleet_type(read_running=read_running) as a:
                    await a.sync_unknown([r])
                    if read_running:
                        await calls_reach(standin, "metrics", metrics_before + 1)
                        await eventually(lambda: a._reported.get("r0", False))
                    assert a.statistics().replicas["r0"].held == {"a0": 0}
                    async with a.acquire(r, "a1", str(adapter_dir / "a1")):
                        pass
                    unloaded = [c.body["lora_name"] for c in standin.app.calls_to("unload")]
                    assert unloaded == ([] if read_running else ["a0"])
                standin.app.release()
    if read_running:
        assert set(standin.app.adapters) == {"a0", "a1"}  # over the limit, as the README says


async def _complete(server: StandInServer, model: str) -> None:
    async with httpx.AsyncClient() as client:
        await client.post(f"{server.url}/v1/completions", json={"model": model, "prompt": "x"}, timeout=30)


async def test_a_replica_without_the_gauge_falls_back(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    server = serve(lora_metrics=False)
    r = Replica("r0", server.url, "tiny", 1)
    async with fleet_type() as fleet:
        await fleet.sync_unknown([r])
        await calls_reach(server, "metrics", 1)
        async with fleet.acquire(r, "a0", str(adapter_dir / "a0")):
            pass
        async with fleet.acquire(r, "a1", str(adapter_dir / "a1")):
            pass
        assert [c.body["lora_name"] for c in server.app.calls_to("unload")] == ["a0"]
        assert "r0" not in fleet._reported

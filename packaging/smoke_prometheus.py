"""Smoke test of ``pip install 'lorafleet[asyncio,standin,prometheus]'``: PrometheusMetrics registers
with a registry, counts what a fleet does over real HTTP, and exports it.

Run by packaging/check.py in a fresh venv.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

import lorafleet_asyncio as lf
from lorafleet_standin import StandInServer, VllmStandIn


async def acquire(metrics: lf.PrometheusMetrics, url: str, adapter: Path) -> None:
    replica = lf.Replica(id="r0", url=url, model="tiny", limit=2)
    async with lf.Fleet(metrics=metrics) as fleet:
        await fleet.sync_unknown([replica])
        async with fleet.acquire(replica, "sql", str(adapter)):
            pass


def main() -> None:
    registry = CollectorRegistry()
    metrics = lf.PrometheusMetrics(registry=registry)
    with tempfile.TemporaryDirectory() as tmp, StandInServer(VllmStandIn(model="tiny")) as server:
        adapter = Path(tmp) / "sql"
        adapter.mkdir()
        (adapter / "adapter_config.json").write_text('{"r": 8}')
        (adapter / "adapter_model.safetensors").write_bytes(b"\0" * 64)
        asyncio.run(acquire(metrics, server.url, adapter))
    exported = generate_latest(registry).decode()
    wanted = (
        'lorafleet_grants_total{how="loaded"} 1.0',
        'lorafleet_loads_total{model="tiny",outcome="loaded"} 1.0',
    )
    missing = [line for line in wanted if line not in exported]
    assert not missing, f"not exported: {missing}\n{exported}"
    print(f"prometheus: exported {', '.join(wanted)}")


if __name__ == "__main__":
    main()

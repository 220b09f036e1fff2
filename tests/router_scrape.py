"""A ``/metrics`` scrape of a running ``lorafleet serve`` in which every family of the fleet has samples."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx

from lorafleet_serve import Config, ReplicaConfig, RouterServer
from lorafleet_standin import StandInServer

from conftest import eventually


async def router_scrape(serve: Callable[..., StandInServer], adapter_dir: Path) -> str:
    """The scrape after loads, hits, evictions, a refusal, a base-model request and a failed replica,
    all streamed."""
    good, failing = serve(), serve()
    failing.app.answer("load", 500, '{"error": {"message": "boom"}}', times=None)
    config = Config(
        replicas=(
            ReplicaConfig(id="r0", url=good.url, model="tiny", limit=2),
            ReplicaConfig(id="r1", url=failing.url, model="tiny", limit=2),
        ),
        adapter_root=adapter_dir,
        port=0,
        shutdown_timeout=1.0,
    )
    async with RouterServer(config, environ={}) as server, httpx.AsyncClient(base_url=server.url) as client:
        for model in ("a0", "a0", "a1", "a2", "a3", "rank64", "tiny"):
            # Streamed: the router's time to first token is measured of streams.
            body = {"model": model, "prompt": "hi", "max_tokens": 2, "stream": True}
            answer = await client.post("/v1/completions", json=body, timeout=30)
            assert answer.status_code in (200, 400), answer.text
        await eventually(lambda: server.fleet.statistics().leases == 0)
        text = (await client.get("/metrics")).text
    assert 'lorafleet_evictions_total{model="tiny",outcome="unloaded"}' in text
    assert 'lorafleet_replica_healthy{replica="r1"} 0.0' in text
    return text

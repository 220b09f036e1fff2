"""Fixtures for the shells' tests: adapter folders, stand-in servers, and the runtime under test.

Shell tests are ``@pytest.mark.anyio`` coroutines: anyio's plugin runs each once under asyncio and once
under trio, and ``fleet_type`` gives the matching shell.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest

import lorafleet_asyncio
import lorafleet_trio
from lorafleet_fleet import Fleet
from lorafleet_standin import StandInServer, VllmStandIn

ADAPTERS = ("a0", "a1", "a2", "a3", "a4", "a5")


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def fleet_type(anyio_backend: str) -> type[Fleet]:
    return lorafleet_trio.Fleet if anyio_backend == "trio" else lorafleet_asyncio.Fleet


def make_adapter(folder: Path, rank: int = 8, config: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if config:
        (folder / "adapter_config.json").write_text(json.dumps({"r": rank, "target_modules": ["q_proj"]}))
    (folder / "adapter_model.safetensors").write_bytes(b"\0" * 64)
    return folder


@pytest.fixture(scope="session")
def adapter_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Adapter folders as vLLM validates them: a0..a5, rank64 (too high for 16), broken (no config)."""
    root = tmp_path_factory.mktemp("adapters")
    for name in ADAPTERS:
        make_adapter(root / name)
    make_adapter(root / "rank64", rank=64)
    make_adapter(root / "broken", config=False)
    return root


@pytest.fixture
def serve() -> Iterator[Callable[..., StandInServer]]:
    """Start stand-in servers (keyword arguments go to VllmStandIn); all are stopped after the test."""
    servers: list[StandInServer] = []

    def start(**options: object) -> StandInServer:
        server = StandInServer(VllmStandIn(**options)).start()  # type: ignore[arg-type]
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def standin(serve: Callable[..., StandInServer]) -> StandInServer:
    return serve()


async def eventually(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait until ``condition()`` holds, checking each time other tasks have had a turn."""
    with anyio.fail_after(timeout):
        while not condition():
            await anyio.sleep(0.001)


async def calls_reach(server: StandInServer, route: str, count: int) -> None:
    """Wait, without blocking the event loop, until the stand-in has had ``count`` calls to ``route``."""
    await anyio.to_thread.run_sync(server.app.wait_for_calls, route, count)


def quiet(fleet: Fleet) -> None:
    """After a test: no request waits and no lease is outstanding."""
    stats = fleet.statistics()
    assert (stats.waiting, stats.leases) == (0, 0), stats

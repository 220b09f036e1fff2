"""Fixtures for the shells' tests: adapter folders, stand-in servers, and the runtime under test.

Shell tests are ``@pytest.mark.anyio`` coroutines: anyio's plugin runs each once under asyncio and once
under trio, and ``fleet_type`` gives the matching shell.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import attrs
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

import lorafleet_asyncio
import lorafleet_trio
from lorafleet import vllm
from lorafleet_fleet import Fleet
from lorafleet_standin import StandInServer, VllmStandIn

ADAPTERS = ("a0", "a1", "a2", "a3", "a4", "a5")


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def fleet_type(anyio_backend: str) -> type[Fleet]:
    return lorafleet_trio.Fleet if anyio_backend == "trio" else lorafleet_asyncio.Fleet


def make_adapter(folder: Path, rank: int = 8, config: bool = True, weights: bytes = b"\0" * 64) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if config:
        (folder / "adapter_config.json").write_text(json.dumps({"r": rank, "target_modules": ["q_proj"]}))
    (folder / "adapter_model.safetensors").write_bytes(weights)
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


def broken_folder_warning(root: Path) -> str:
    """What ``--check`` says of adapter_dir's ``broken``, a folder with no adapter_config.json."""
    return (
        f"lorafleet serve: warning: adapters.root: '{root / 'broken'}' has no adapter_config.json: it is "
        "no adapter; save it with PEFT's save_pretrained\n"
    )


@pytest.fixture
def serve() -> Iterator[Callable[..., StandInServer]]:
    """Start stand-in servers (``host`` and ``port`` go to StandInServer, other keyword arguments to
    VllmStandIn); all are stopped after the test."""
    servers: list[StandInServer] = []

    def start(*, host: str = "127.0.0.1", port: int = 0, **options: object) -> StandInServer:
        server = StandInServer(VllmStandIn(**options), host=host, port=port).start()  # type: ignore[arg-type]
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def standin(serve: Callable[..., StandInServer]) -> StandInServer:
    return serve()


def error_of(answer: httpx.Response) -> dict[str, Any]:
    """An OpenAI-shaped error answer's ``error``, its four fields checked."""
    body = answer.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    error: dict[str, Any] = body["error"]
    return error


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


def settled(fleet: Fleet) -> bool:
    """No load or unload is out: what a replica holds is what the fleet last asked of it."""
    return not any(r.loading or r.unloading for r in fleet.statistics().replicas.values())


# -- real vLLM, and the targets engine tests run against -------------------------------------------

KEY = "secret"
_timings: dict[str, float] = {}
_slowest: list[tuple[float, str]] = []
engine_notes: list[str] = []
"""Lines for the real vLLM summary: what a real-engine test wants seen in CI's output."""


@pytest.fixture(scope="session")
def real_engine() -> Any:
    """The engine venv and model; skipped (failed when CI=true) on a machine that cannot run vLLM."""
    from real_vllm import EngineUnavailableError, set_up

    try:
        engine = set_up()
    except EngineUnavailableError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the real vLLM tests, but: {exc}")
        pytest.skip(f"real vLLM is not available here: {exc}")
    _timings["engine setup"] = engine.setup_seconds
    return engine


@pytest.fixture(scope="session")
def vllm_servers(real_engine: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Three servers started together: with --api-key, without, and without the runtime LoRA routes.

    The keyed and open ones can be paused (``Target.pause``); the keyed one takes requests of up to
    4,096 tokens, so that a test can hold a request unfinished on the engine for as long as it needs.
    The open one runs two requests at once (``--max-num-seqs 2``): a third waits in its queue, as a
    busy engine's do.
    """
    from real_vllm import VllmServer

    logs = tmp_path_factory.mktemp("vllm-logs")
    servers = {
        "keyed": VllmServer(real_engine, logs, api_key=KEY, dev_mode=True, max_model_len=4096),
        "open": VllmServer(real_engine, logs, dev_mode=True, max_num_seqs=2),
        "static": VllmServer(real_engine, logs, runtime_lora=False),
    }
    started = time.monotonic()
    try:
        for server in servers.values():
            server.start()
        for server in servers.values():
            server.wait_ready()
        _timings["vllm servers start (3 at once)"] = time.monotonic() - started
        yield servers
    finally:
        for server in servers.values():
            server.stop()


POOLING = ("--runner", "pooling", "--convert", "embed")
"""The flags that make the tiny model an embedding model: vLLM's pooling routes, with LoRA."""


@pytest.fixture(scope="module")
def vllm_pooling(real_engine: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real vLLM serving the tiny model as an embedding model, for one module's tests (stopped after
    them: with the session's three, a fourth engine is 2.5 GB more)."""
    from real_vllm import VllmServer

    server = VllmServer(real_engine, tmp_path_factory.mktemp("vllm-pooling-logs"), extra=POOLING)
    started = time.monotonic()
    try:
        server.start()
        server.wait_ready()
        _timings["vllm pooling server start"] = time.monotonic() - started
        yield server
    finally:
        server.stop()


@attrs.define
class Target:
    """An engine a test runs against: the stand-in or a real vLLM, behind the same few operations."""

    kind: str
    url: str
    api_key: str | None
    adapters: Path
    restart: Callable[[], None]
    standin: StandInServer | None = None
    pause: Callable[[], None] | None = None
    """A real engine's ``VllmServer.pause``: requests in flight stay unfinished until ``resume``."""
    resume: Callable[[], None] | None = None

    def adapter(self, name: str) -> str:
        return str(self.adapters / name)

    def client(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def load_as_another_router(self, name: str, folder: str) -> None:
        with self.client() as client:
            client.post("/v1/load_lora_adapter", json={"lora_name": name, "lora_path": self.adapter(folder)})

    def listed(self) -> set[str]:
        with self.client() as client:
            return {c["id"] for c in client.get("/v1/models").json()["data"] if c.get("parent")}

    def unload_all(self) -> None:
        """Unload every adapter the engine holds, as an operator would, behind every router's back."""
        with self.client() as client:
            for name in self.listed():
                client.post("/v1/unload_lora_adapter", json={"lora_name": name})


def idle_and_bare(*servers: Any) -> None:
    """Bring real vLLM servers (``vllm_servers``' values) back to no adapter and no request."""
    for server in servers:
        server.resume()  # a test that failed while the engine was paused leaves it so
        server.unload_everything()
    for server in servers:  # requests dropped before may still be aborting
        with server.client() as client:
            deadline = time.monotonic() + 300
            while (now := vllm.engine_queue(client.get("/metrics").content)) != (0, 0):
                assert time.monotonic() < deadline, f"{server.url} never idle: {now}"
                time.sleep(0.05)


def counted(page: str, family: str, **labels: str) -> float:
    """The sum of ``family``'s samples on a /metrics page whose labels include ``labels``."""
    return sum(
        sample.value
        for metric in text_string_to_metric_families(page)
        for sample in metric.samples
        if sample.name == family and labels.items() <= sample.labels.items()
    )


@pytest.fixture(scope="session")
def built_adapters(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Adapter folders named as the engine build names them, for stand-in targets."""
    root = tmp_path_factory.mktemp("built-adapters")
    for i in range(6):
        make_adapter(root / f"lora-{i}", weights=bytes([i]) * 64)  # each its own, as the build's are
    make_adapter(root / "rank64", rank=64)
    make_adapter(root / "broken", config=False)
    return root


@pytest.fixture(params=["standin", "vllm"])
def target(
    request: pytest.FixtureRequest, serve: Callable[..., StandInServer], built_adapters: Path
) -> Target:
    """Where an engine test runs: the stand-in (as vLLM 0.32) or a real vLLM 0.32 on the CPU."""
    if request.param == "standin":
        server = serve(version="0.32", api_key=KEY, max_model_len=4096)  # as the keyed vLLM
        return Target("standin", server.url, KEY, built_adapters, server.app.restart, server)
    servers = request.getfixturevalue("vllm_servers")
    engine = request.getfixturevalue("real_engine")
    keyed = servers["keyed"]
    keyed.resume()  # a test that failed while the engine was paused leaves it so
    keyed.unload_everything()
    return Target(
        "vllm",
        keyed.url,
        KEY,
        engine.build / "adapters",
        keyed.restart,
        pause=keyed.pause,
        resume=keyed.resume,
    )


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and "vllm" in report.nodeid:
        _timings["real vLLM tests"] = _timings.get("real vLLM tests", 0.0) + report.duration
        _slowest.append((report.duration, report.nodeid.rpartition("::")[2]))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _timings:
        terminalreporter.section("real vLLM timings")
        for what, seconds in _timings.items():
            terminalreporter.write_line(f"{what}: {seconds:.1f} s")
        for seconds, test in sorted(_slowest, reverse=True)[:3]:
            terminalreporter.write_line(f"  {test}: {seconds:.1f} s")
        for line in engine_notes:
            terminalreporter.write_line(line)


def _tasks_now() -> set[object]:
    """Every task alive in the running event loop, under asyncio or trio."""
    import sniffio

    if sniffio.current_async_library() == "asyncio":
        import asyncio

        # anyio's pytest runner makes a task of its own for each test and fixture call.
        return {t for t in asyncio.all_tasks() if "TestRunner" not in t.get_coro().__qualname__}  # type: ignore[union-attr]
    import trio

    found: set[object] = set()
    root = trio.lowlevel.current_root_task()
    assert root is not None
    nurseries = list(root.child_nurseries)
    while nurseries:
        for task in nurseries.pop().child_tasks:
            if "TestRunner" not in task.name:
                found.add(task)
            nurseries.extend(task.child_nurseries)
    return found


@pytest.fixture
async def no_task_left_running() -> Any:
    """After the test, the tasks alive are those alive before it: nothing left running.

    The shell modules use it for every test (``pytestmark``).
    """
    before = _tasks_now()
    yield
    left = _tasks_now() - before
    assert not left, f"tasks still running after the test: {left}"

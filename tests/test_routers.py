"""Several fleets on the same stand-ins, coordinated only through the engine ([elsewhere])."""

from __future__ import annotations

import gc
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest

from lorafleet import How, Placed
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
                        await eventually(lambda: bool(a._machine.reported("r0")))
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
        assert len(server.app.calls_to("metrics")) == 1  # not read again before the cold request
        assert fleet.gauge_reads() == {"read": 0, "absent": 1, "failed": 0}


def _unloaded(server: StandInServer) -> list[str]:
    return [c.body["lora_name"] for c in server.app.calls_to("unload")]


@pytest.mark.parametrize("routed", [False, True])
async def test_a_request_started_after_the_reading_is_not_unloaded_under(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path, routed: bool
) -> None:
    """Router A listed r0 (limit 1) while a0 sat idle there, and read nothing running; then router B
    started a request on a0. No listing comes between (an hour's interval): A's cold request for a1,
    which would evict a0, reads the gauge first and goes over the limit instead."""
    r = Replica("r0", standin.url, "tiny", 1)
    paths = {name: str(adapter_dir / name) for name in ("a0", "a1")}
    async with fleet_type(listing_interval=3600) as b:
        await b.sync_unknown([r])
        async with b.acquire(r, "a0", paths["a0"]):
            pass
        async with fleet_type(listing_interval=3600, adapters=paths) as a:
            await a.sync_unknown([r])
            await eventually(lambda: a.gauge_reads()["read"] == 1)  # its listing's reading: nothing runs
            assert a.statistics().replicas["r0"].held == {"a0": 0}
            readings = len(standin.app.calls_to("metrics"))
            async with b.acquire(r, "a0", paths["a0"]) as held:
                assert held.how is How.HIT
                standin.app.hang("completions")
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(_complete, standin, "a0")
                    await calls_reach(standin, "completions", 1)
                    if routed:
                        async with a.route("a1") as lease:
                            assert (lease.placed, lease.how) == (Placed.OVER, How.LOADED)
                    else:
                        async with a.acquire(r, "a1", paths["a1"]) as lease:
                            assert lease.how is How.LOADED
                    standin.app.release()
            assert _unloaded(standin) == []
            assert len(standin.app.calls_to("metrics")) == readings + 1
    assert set(standin.app.adapters) == {"a0", "a1"}


@pytest.mark.parametrize(("queued", "own"), [(True, "block"), (False, "block"), (True, "collected")])
async def test_adapters_a_reading_named_do_not_keep_a_cold_request_at_the_cap(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path, queued: bool, own: str
) -> None:
    """One router, r0 of limit 1, no headroom, no listing for an hour. Its listing's reading named a0
    (a request ran on it then), and its own request holds a0 as well. Once both have ended, a cold
    request for a1 gets a0's slot without waiting for the next listing: queued at the cap before they
    end (the release reads again), or arriving after (it reads before it would wait). The router's
    own request ends with its block, or (collected) is a routed lease its holder dropped unreleased,
    which the fleet releases when it is garbage collected."""
    r = Replica("r0", standin.url, "tiny", 1)
    path = str(adapter_dir / "a0")
    standin.app.register("a0", path)
    standin.app.hang("completions")
    engine_done = anyio.Event()
    cold_done = anyio.Event()
    how: list[How] = []

    async def engine_request() -> None:
        await _complete(standin, "a0")
        engine_done.set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(engine_request)
        await calls_reach(standin, "completions", 1)
        async with fleet_type(listing_interval=3600, headroom=0, adapters={"a0": path}) as fleet:

            async def cold() -> None:
                async with fleet.acquire(r, "a1", str(adapter_dir / "a1")) as lease:
                    how.append(lease.how)
                cold_done.set()

            await fleet.sync_unknown([r])
            await eventually(lambda: bool(fleet._machine.reported("r0")))  # it names a0
            if own == "block":
                async with fleet.acquire(r, "a0", path) as lease:
                    assert lease.how is How.HIT
                    await _end_both(fleet, tasks, cold, standin, engine_done, queued)
            else:
                routed = await fleet.route("a0")
                assert routed.how is How.HIT
                await _end_both(fleet, tasks, cold, standin, engine_done, queued)
                del routed  # its holder went away without releasing it
                gc.collect()
            if not queued:
                tasks.start_soon(cold)
            with anyio.fail_after(10):
                await cold_done.wait()
            assert how == [How.LOADED]
            assert _unloaded(standin) == ["a0"]
            # The listing's reading, the cold request's, and (queued) the release's.
            assert len(standin.app.calls_to("metrics")) == (3 if queued else 2)


async def _end_both(
    fleet: Fleet,
    tasks: anyio.abc.TaskGroup,
    cold: Callable[[], Coroutine[Any, Any, None]],
    standin: StandInServer,
    engine_done: anyio.Event,
    queued: bool,
) -> None:
    """With this router's request on a0: queue the cold request (if ``queued``), then end the engine's."""
    if queued:
        tasks.start_soon(cold)
        await eventually(lambda: _queued(fleet, "r0") == 1)
    standin.app.release()
    await engine_done.wait()


def _queued(fleet: Fleet, replica: str) -> int:
    stats = fleet.replica_statistics(replica)
    assert stats is not None
    return stats.queued


async def test_cold_requests_on_a_full_replica_share_one_reading(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path
) -> None:
    """Five cold requests at once on r0 (limit 1, a0 idle there): one read of the gauge between them."""
    r = Replica("r0", standin.url, "tiny", 1)
    names = ("a1", "a2", "a3", "a4", "a5")
    granted: list[str] = []
    async with fleet_type(listing_interval=3600) as fleet:
        await fleet.sync_unknown([r])
        async with fleet.acquire(r, "a0", str(adapter_dir / "a0")):
            pass
        await eventually(lambda: fleet.gauge_reads()["read"] == 1)
        readings = len(standin.app.calls_to("metrics"))
        standin.app.hang("metrics")

        async def one(name: str) -> None:
            async with fleet.acquire(r, name, str(adapter_dir / name)):
                granted.append(name)

        async with anyio.create_task_group() as tasks:
            for name in names:
                tasks.start_soon(one, name)
            await calls_reach(standin, "metrics", readings + 1)
            await anyio.wait_all_tasks_blocked()  # every request waits for that one reading
            standin.app.release()
        assert sorted(granted) == list(names)
        assert len(standin.app.calls_to("metrics")) == readings + 1
        assert "a0" in _unloaded(standin)


@pytest.mark.parametrize("fault", ["error", "timeout", "cut short", "no gauge"])
async def test_a_cold_request_goes_on_when_the_reading_fails(
    fleet_type: type[Fleet],
    standin: StandInServer,
    adapter_dir: Path,
    fault: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """r0 (limit 1) answered its listing's reading (nothing runs); the cold read before evicting a0
    fails: the request evicts a0 as that reading allows (no error reaches it)."""
    r = Replica("r0", standin.url, "tiny", 1)
    async with fleet_type(listing_interval=3600, listing_timeout=1.0) as fleet:
        await fleet.sync_unknown([r])
        async with fleet.acquire(r, "a0", str(adapter_dir / "a0")):
            pass
        await eventually(lambda: fleet.gauge_reads()["read"] == 1)
        readings = len(standin.app.calls_to("metrics"))
        if fault == "error":
            standin.app.answer("metrics", 500, "Internal Server Error")
        elif fault == "timeout":
            standin.app.hang("metrics")
        elif fault == "cut short":
            standin.app.drop("metrics")
        else:
            standin.app.answer("metrics", 200, "# HELP process_cpu_seconds_total CPU time\n")
        async with fleet.acquire(r, "a1", str(adapter_dir / "a1")) as lease:
            assert lease.how is How.LOADED
        standin.app.release()
        assert _unloaded(standin) == ["a0"]
        assert len(standin.app.calls_to("metrics")) == readings + 1  # it was read, and failed
        ended = "absent" if fault == "no gauge" else "failed"
        assert fleet.gauge_reads() == {"read": 1, "absent": 0, "failed": 0} | {ended: 1}
        warned = [m for r in caplog.records if (m := r.getMessage()).startswith("could not read which")]
        assert len(warned) == (ended == "failed"), warned
        # An engine that answers without the gauge is not read before requests again.
        async with fleet.acquire(r, "a2", str(adapter_dir / "a2")):
            pass
        assert len(standin.app.calls_to("metrics")) == readings + 1 + (fault != "no gauge")


@pytest.mark.parametrize("fault", ["error", "timeout", "cut short"])
async def test_a_failed_read_keeps_the_last_reading_until_the_next_listing(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path, fault: str
) -> None:
    """[read-failed] r0 (limit 1) holds a0, which another router's request runs on, and the listing's
    reading says so. The read before a cold request for a1 gets no usable answer: the engine's silence
    is no news, so a0 is still no victim and r0 goes over its limit. Then a listing is answered and the
    read after it fails too: the reading goes, and a0 is a victim again."""
    r = Replica("r0", standin.url, "tiny", 1)
    standin.app.register("a0", str(adapter_dir / "a0"))
    standin.app.hang("completions")
    standin.app.delay("models", 0)  # the first listing is answered; the next ones fail until told
    standin.app.answer("models", 500, "Internal Server Error", times=None)
    standin.app.delay("metrics", 0)  # the read after the first listing names a0; every later one fails
    if fault == "error":
        standin.app.answer("metrics", 500, "Internal Server Error", times=None)
    elif fault == "timeout":
        standin.app.hang("metrics", times=None)
    else:
        standin.app.drop("metrics", times=None)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(_complete, standin, "a0")
        await calls_reach(standin, "completions", 1)
        async with fleet_type(listing_interval=0.2, listing_timeout=1.0) as fleet:
            await fleet.sync_unknown([r])
            await eventually(lambda: fleet.gauge_reads()["read"] == 1)
            async with fleet.acquire(r, "a1", str(adapter_dir / "a1")) as lease:
                assert lease.how is How.LOADED
            assert fleet.gauge_reads() == {"read": 1, "absent": 0, "failed": 1}
            assert _unloaded(standin) == []
            assert set(standin.app.adapters) == {"a0", "a1"}
            standin.app.clear_faults("models")
            await eventually(lambda: fleet.gauge_reads()["failed"] >= 2)
            async with fleet.acquire(r, "a2", str(adapter_dir / "a2")):
                pass
            assert "a0" in _unloaded(standin)
            standin.app.release()

"""Several fleets on the same stand-ins, coordinated only through the engine ([reading])."""

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
from lorafleet_fleet import HEADROOM, Fleet, Replica
from lorafleet_standin import Call, StandInServer

from conftest import calls_reach, eventually, settled

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_task_left_running")]


@pytest.mark.parametrize("read_engine", [True, False])
async def test_another_routers_running_adapter_is_not_evicted(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path, read_engine: bool
) -> None:
    """Router B streams on a0 on a replica of limit 1; router A (headroom 1), which knows of a0 only
    from its listing, needs a1 there: with the engine's reading a0 is no victim, and a1 goes over the
    limit into the headroom; without it, a0 is a1's victim."""
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
                async with fleet_type(read_engine=read_engine, headroom=1) as a:
                    await a.sync_unknown([r])
                    if read_engine:
                        await calls_reach(standin, "metrics", metrics_before + 1)
                        await eventually(lambda: bool(a._machine.named("r0")))
                    assert a.statistics().replicas["r0"].held == {"a0": 0}
                    async with a.acquire(r, "a1", str(adapter_dir / "a1")):
                        pass
                    await eventually(lambda: settled(a))  # a1 landed; its victim went, if any
                    unloaded = [c.body["lora_name"] for c in standin.app.calls_to("unload")]
                    assert unloaded == ([] if read_engine else ["a0"])
                standin.app.release()
    if read_engine:
        assert set(standin.app.adapters) == {"a0", "a1"}  # over the limit, as docs/routers.md says


async def _complete(server: StandInServer, model: str) -> None:
    async with httpx.AsyncClient() as client:
        await client.post(f"{server.url}/v1/completions", json={"model": model, "prompt": "x"}, timeout=30)


@pytest.mark.parametrize("headroom", [2, HEADROOM])
async def test_a_replica_without_the_gauge_falls_back(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path, headroom: int
) -> None:
    """An engine with no gauge cannot say what runs there: its first read says so, it is never read
    again before a request, and the fleet evicts as with listings alone, even an adapter another
    router's request runs on: with any headroom the cold load goes out first, taking a0 as its
    victim, and a0's name goes once it lands ([evict])."""
    server = serve(lora_metrics=False)
    r = Replica("r0", server.url, "tiny", 1)
    server.app.register("a0", str(adapter_dir / "a0"))  # another router's, and its request runs on it
    server.app.hang("completions")
    async with anyio.create_task_group() as tasks, fleet_type(headroom=headroom) as fleet:
        tasks.start_soon(_complete, server, "a0")
        await calls_reach(server, "completions", 1)
        await fleet.sync_unknown([r])
        await calls_reach(server, "metrics", 1)
        await eventually(lambda: fleet.engine_reads()["absent"] == 1)
        async with fleet.acquire(r, "a1", str(adapter_dir / "a1")) as lease:
            assert lease.how is How.LOADED
        await eventually(lambda: settled(fleet))
        assert _lora_calls(server) == [("load", "a1"), ("unload", "a0")]
        assert "a0" in server.app.calls_to("unload")[0].running  # it could not know
        assert len(server.app.calls_to("metrics")) == 1  # not read again before the cold request
        assert fleet.engine_reads() == {"read": 0, "absent": 1, "failed": 0}
        server.app.release()


def _lora_calls(server: StandInServer, router: str | None = None) -> list[tuple[str, str]]:
    """The loads and unloads the stand-in received (from ``router``'s key, if given), in order."""
    routes = {"/v1/load_lora_adapter": "load", "/v1/unload_lora_adapter": "unload"}
    return [
        (routes[c.path], c.body["lora_name"])
        for c in server.app.calls
        if c.path in routes and (router is None or c.authorization == f"Bearer {router}")
    ]


def _unloaded(server: StandInServer) -> list[str]:
    return [c.body["lora_name"] for c in server.app.calls_to("unload")]


@pytest.mark.parametrize("routed", [False, True])
async def test_a_request_started_after_the_reading_is_not_unloaded_under(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path, routed: bool
) -> None:
    """Another router loaded a0 and ax on r0 (limit 1) and runs a request on ax. Router A lists r0 and
    reads its gauge: a0 sits idle, and the reading names another router's adapter (the replica is
    foreign, [reading]). Then the other router starts a request on a0. No listing comes between (an
    hour's interval): A's cold request for a1 would take a0 as its victim, so A reads the gauge again
    first ([read]): it sees the request on a0, takes no victim, and goes over its limit (headroom 2).
    The engine's batch runs both (--max-loras 2), so none of them waits in its queue ([cap]). A routed
    request is counted only once assigned, after that reading: the engine then carries three requests,
    more than the reading found it carry with no queue, so a read follows the assignment too (stale,
    [read]), and nothing waits for it."""
    standin = serve(max_loras=2)
    r = Replica("r0", standin.url, "tiny", 1)
    for name in ("a0", "ax"):
        standin.app.register(name, str(adapter_dir / name.replace("x", "5")))
    standin.app.hang("completions", times=2)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(_complete, standin, "ax")
        await calls_reach(standin, "completions", 1)
        async with fleet_type(
            listing_interval=3600, adapters={"a1": str(adapter_dir / "a1")}, headroom=2
        ) as a:
            await a.sync_unknown([r])
            await eventually(lambda: a.engine_reads()["read"] == 1)  # its listing's reading: ax runs
            reading = a.reading("r0")
            assert reading is not None
            assert (reading.foreign, reading.adapters) == (True, frozenset({"ax"}))
            assert a.statistics().replicas["r0"].held == {"a0": 0, "ax": 0}
            readings = len(standin.app.calls_to("metrics"))
            tasks.start_soon(_complete, standin, "a0")  # started after A's reading
            await calls_reach(standin, "completions", 2)
            async with a.route("a1") if routed else a.acquire(r, "a1", str(adapter_dir / "a1")) as lease:
                assert lease.how is How.LOADED
                if routed:
                    # Placed again after the reading: nothing idle there now, so over the limit.
                    assert lease.placed is Placed.OVER  # type: ignore[attr-defined]
                # One more reading, before the load, and no victim judged on it (routed: and the
                # stale one after the assignment).
                await eventually(lambda: a.engine_reads()["read"] == 2 + routed)
                await eventually(lambda: settled(a))
                assert a._machine.named("r0") == frozenset({"a0", "ax"})
            assert _unloaded(standin) == []
            assert len(standin.app.calls_to("metrics")) == readings + 1 + routed
            assert a.statistics().replicas["r0"].held == {"a0": 0, "a1": 0, "ax": 0}  # over its limit
        standin.app.release()
    assert set(standin.app.adapters) == {"a0", "a1", "ax"}


@pytest.mark.parametrize(("queued", "own"), [(True, "block"), (False, "block"), (True, "collected")])
async def test_adapters_a_reading_named_do_not_keep_a_cold_request_at_the_cap(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path, queued: bool, own: str
) -> None:
    """One router, r0 of limit 1, no headroom, no listing for an hour. Another router's requests run on
    a0 and ax, and the listing's reading names both (another router's: the replica is foreign); the
    router's own request holds a0 as well. Once all have ended, a cold request for a1 gets their
    slots without waiting for the next listing: queued at the cap before they end (its reading
    still names both, so the release reads again), or arriving after (it reads before it would
    evict). The router's own request ends with its block, or (collected) is a routed lease its holder
    dropped unreleased, which the fleet releases when it is garbage collected."""
    r = Replica("r0", standin.url, "tiny", 1)
    path = str(adapter_dir / "a0")
    standin.app.register("a0", path)
    standin.app.register("ax", str(adapter_dir / "a5"))
    standin.app.hang("completions", times=2)
    engine_done = anyio.Event()
    cold_done = anyio.Event()
    how: list[How] = []

    async def engine_requests() -> None:
        async with anyio.create_task_group() as both:
            both.start_soon(_complete, standin, "a0")
            both.start_soon(_complete, standin, "ax")
        engine_done.set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(engine_requests)
        await calls_reach(standin, "completions", 2)
        async with fleet_type(listing_interval=3600, headroom=0, adapters={"a0": path}) as fleet:

            async def cold() -> None:
                async with fleet.acquire(r, "a1", str(adapter_dir / "a1")) as lease:
                    how.append(lease.how)
                cold_done.set()

            await fleet.sync_unknown([r])
            await eventually(lambda: fleet._machine.named("r0") == {"a0", "ax"})
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
            await eventually(lambda: settled(fleet))  # the victims' unloads follow a1's landing
            assert sorted(_unloaded(standin)) == ["a0", "ax"]
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
        # It read before it would evict: a0 (this router's and the other's) and ax (the other's) run.
        assert fleet._machine.named("r0") == {"a0", "ax"}
    standin.app.release()
    await engine_done.wait()


def _queued(fleet: Fleet, replica: str) -> int:
    stats = fleet.replica_statistics(replica)
    assert stats is not None
    return stats.queued


@pytest.mark.parametrize("another", [True, False])
async def test_cold_requests_on_a_full_replica_share_one_reading(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path, another: bool
) -> None:
    """Five cold requests at once on r0 (limit 2, no headroom, a0 idle there): with another router's
    adapter named by the last reading, each would evict first ([read]), and one read of the gauge
    serves them all. A router alone (its readings named nothing) reads none: it never waits. The
    engine never holds more than the router's 2 and the other router's ax. Which copy it drops for a
    load is not asked here: these leases run nothing on the engine and end in any order, so its
    least recently used copy need not be the machine's ([evict]'s agreement with the engine is
    test_shells' test_a_cold_load_at_the_limit_lands_before_the_excess_goes)."""
    standin = serve(max_cpu_loras=2 + another)
    r = Replica("r0", standin.url, "tiny", 2)
    names = ("a1", "a2", "a3", "a4", "a5")
    granted: list[str] = []
    if another:
        standin.app.register("ax", str(adapter_dir / "a0"))
        standin.app.hang("completions")
    async with anyio.create_task_group() as tasks, fleet_type(listing_interval=3600, headroom=0) as fleet:
        if another:
            tasks.start_soon(_complete, standin, "ax")  # the other router's request, over the listing
            await calls_reach(standin, "completions", 1)
        await fleet.sync_unknown([r])
        await eventually(lambda: fleet.engine_reads()["read"] == 1)
        standin.app.release()  # the other router's request ends; the reading stays what it said
        async with fleet.acquire(r, "a0", str(adapter_dir / "a0")):
            pass
        reading = fleet.reading("r0")
        assert reading is not None
        assert reading.foreign is another
        readings = len(standin.app.calls_to("metrics"))
        standin.app.hang("metrics")

        async def one(name: str) -> None:
            async with fleet.acquire(r, name, str(adapter_dir / name)):
                granted.append(name)

        async with anyio.create_task_group() as cold:
            for name in names:
                cold.start_soon(one, name)
            if another:
                await calls_reach(standin, "metrics", readings + 1)
                await anyio.wait_all_tasks_blocked()  # every request waits for that one reading
                assert granted == []
                assert fleet.statistics().waiting == 5
                standin.app.release()
        assert sorted(granted) == list(names)
        assert len(standin.app.calls_to("metrics")) == readings + another
        await eventually(lambda: settled(fleet))
        assert len(fleet.statistics().replicas["r0"].held) == 2
        assert "a0" in _unloaded(standin)
        memory = standin.app.memory()
        assert (memory.most, memory.over) == (2 + another, 0)  # never over the limit
        standin.app.release()


@pytest.mark.parametrize("fault", ["error", "timeout", "cut short", "no gauge"])
async def test_a_cold_request_goes_on_when_the_reading_fails(
    fleet_type: type[Fleet],
    standin: StandInServer,
    adapter_dir: Path,
    fault: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """r0 (limit 2, no headroom) holds ax, another router's, and a0; the listing's reading named ax
    (a request of the other router ran on it then), so a cold request that would take a victim reads
    the engine first ([read]). That read fails: the request goes on (no error reaches it) and evicts
    as the last reading allows, a0 (ax is no victim while it is named). An answer without the gauge is
    an engine that cannot tell: an empty reading, which frees ax as the most recently used ([reading]),
    so a0 goes all the same; but ax is idle from then on, and the next cold request, a2, takes it
    without a read, where after a failed read a2 reads again (now answered, naming nothing: ax is
    freed after a1 went idle) and takes a1."""
    r = Replica("r0", standin.url, "tiny", 2)
    standin.app.register("ax", str(adapter_dir / "a5"))
    standin.app.hang("completions")
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(_complete, standin, "ax")
        await calls_reach(standin, "completions", 1)
        async with fleet_type(listing_interval=3600, listing_timeout=1.0, headroom=0) as fleet:
            await fleet.sync_unknown([r])
            await eventually(lambda: fleet.engine_reads()["read"] == 1)
            standin.app.release()  # ax's request ends; the listing's reading stands
            async with fleet.acquire(r, "a0", str(adapter_dir / "a0")):
                pass
            readings = len(standin.app.calls_to("metrics"))
            assert readings == 1  # a0's load had a free slot: no read
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
            await eventually(lambda: settled(fleet))  # a0's unload follows a1's landing
            assert _lora_calls(standin)[-2:] == [("load", "a1"), ("unload", "a0")]
            assert len(standin.app.calls_to("metrics")) == readings + 1  # it was read, and failed
            ended = "absent" if fault == "no gauge" else "failed"
            assert fleet.engine_reads() == {"read": 1, "absent": 0, "failed": 0} | {ended: 1}
            warned = [m for r in caplog.records if (m := r.getMessage()).startswith("could not read which")]
            assert len(warned) == (ended == "failed"), warned
            # A failed read leaves the replica foreign, so the next eviction reads again; an engine
            # that answers without the gauge is not read before requests again.
            async with fleet.acquire(r, "a2", str(adapter_dir / "a2")):
                pass
            assert len(standin.app.calls_to("metrics")) == readings + 1 + (fault != "no gauge")
            assert fleet.engine_reads()["read"] == 1 + (fault != "no gauge")
            await eventually(lambda: settled(fleet))
            victim = "ax" if fault == "no gauge" else "a1"
            assert _lora_calls(standin)[-2:] == [("load", "a2"), ("unload", victim)]


@pytest.mark.parametrize("fault", ["error", "timeout", "cut short"])
async def test_a_failed_read_keeps_the_last_reading_until_the_next_listing(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path, fault: str
) -> None:
    """[read-failed] r0 (limit 1, headroom 2) holds a0, which another router's request runs on, and the
    listing's reading says so. a1 and then a2 would take a victim: each reads the engine first ([read]),
    and each read gets no usable answer: the engine's silence is no news, so a0 is still no victim.
    a1 goes over the limit; a2 takes a1 (idle by then) as its victim, and r0 stays over its limit.
    Then a listing is answered and the read after it fails too: the reading goes, and a0 is a victim
    again, of a3."""
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
        async with fleet_type(listing_interval=0.2, listing_timeout=1.0, headroom=2) as fleet:
            await fleet.sync_unknown([r])
            await eventually(lambda: fleet.engine_reads()["read"] == 1)
            async with fleet.acquire(r, "a1", str(adapter_dir / "a1")) as lease:
                assert lease.how is How.LOADED  # after a failed read: a0 still named, so no victim
            async with fleet.acquire(r, "a2", str(adapter_dir / "a2")) as lease:
                assert lease.how is How.LOADED
                await eventually(lambda: settled(fleet))  # a1, its victim, unloaded once it landed
            assert fleet.engine_reads() == {"read": 1, "absent": 0, "failed": 2}
            assert _unloaded(standin) == ["a1"]
            assert set(standin.app.adapters) == {"a0", "a2"}
            standin.app.clear_faults("models")
            await eventually(lambda: fleet.engine_reads()["failed"] >= 3)
            async with fleet.acquire(r, "a3", str(adapter_dir / "a3")):
                pass
            await eventually(lambda: "a0" in _unloaded(standin) and settled(fleet))
            assert set(_unloaded(standin)) == {"a0", "a1", "a2"}
            standin.app.release()


# -- two fleets on one stand-in, and a router alone ---------------------------------------------


def _from(server: StandInServer, router: str, route: str) -> list[Call]:
    """Calls to ``route`` carrying ``router``'s key (each fleet's replicas carry one of their own)."""
    return [c for c in server.app.calls_to(route) if c.authorization == f"Bearer {router}"]


@pytest.mark.parametrize("read_engine", [True, False])
async def test_a_cold_request_on_a_full_replica_waits_for_a_reading_of_anothers_requests(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path, read_engine: bool
) -> None:
    """Fleets A and B on one stand-in. A loaded a0 and ax and runs a request on ax when B lists the
    replica: B's reading names another router's adapter. Then A starts a request on a0. B (limit 3,
    no headroom: a load at its bound takes a victim) holds a0, ax and its own idle b0, and is asked
    for b1: it reads the gauge before it takes one, sees A's request on a0, and takes its own b0,
    unloaded once b1 has landed ([evict]). Without reads, B takes the least recently used of what
    it holds, a0 (its listing put a0 and ax first, in name order), under A's request. The engine's
    batch runs A's two adapters together (--max-loras 2): with one, two in use would close B's cap
    to a load that takes a victim ([cap]), which is right but not this test's subject."""
    standin = serve(max_loras=2)
    key_a, key_b = "router-A", "router-B"
    ra = Replica("r0", standin.url, "tiny", 3, api_key=key_a)
    rb = Replica("r0", standin.url, "tiny", 3, api_key=key_b)
    standin.app.hang("completions", times=2)
    async with (
        anyio.create_task_group() as tasks,
        fleet_type(listing_interval=3600) as a,
        fleet_type(listing_interval=3600, headroom=0, read_engine=read_engine) as b,
    ):
        await a.sync_unknown([ra])
        for name in ("a0", "ax"):
            async with a.acquire(ra, name, str(adapter_dir / name.replace("x", "5"))):
                pass
        async with a.acquire(ra, "ax", str(adapter_dir / "a5")) as on_ax:
            assert on_ax.how is How.HIT
            tasks.start_soon(_complete, standin, "ax")
            await calls_reach(standin, "completions", 1)
            await b.sync_unknown([rb])
            if read_engine:
                await eventually(lambda: b.engine_reads()["read"] == 1)
                reading = b.reading("r0")
                assert reading is not None
                assert (reading.foreign, reading.adapters) == (True, frozenset({"ax"}))
            async with b.acquire(rb, "b0", str(adapter_dir / "a1")):
                pass  # into a free slot: no read
            async with a.acquire(ra, "a0", str(adapter_dir / "a0")) as on_a0:
                assert on_a0.how is How.HIT
                tasks.start_soon(_complete, standin, "a0")
                await calls_reach(standin, "completions", 2)
                before = len(standin.app.calls)
                async with b.acquire(rb, "b1", str(adapter_dir / "a2")) as lease:
                    assert lease.how is How.LOADED
                await eventually(lambda: settled(b))
                after = [c for c in standin.app.calls[before:] if c.authorization == f"Bearer {key_b}"]
                seen = [(c.path.rsplit("/", 1)[-1], c.body and c.body["lora_name"], c.running) for c in after]
                if read_engine:
                    # The read first, naming A's requests; then b1 loads, and its victim, B's own
                    # idle b0, goes once it has landed.
                    assert [(p, n) for p, n, _ in seen] == [
                        ("metrics", None),
                        ("load_lora_adapter", "b1"),
                        ("unload_lora_adapter", "b0"),
                    ], seen
                    assert set(seen[0][2]) == {"a0", "ax"}
                else:
                    assert [(p, n) for p, n, _ in seen] == [
                        ("load_lora_adapter", "b1"),
                        ("unload_lora_adapter", "a0"),
                    ], seen
                    assert "a0" in seen[1][2]  # under A's request
                standin.app.release()
        # Whatever B unloaded, nothing of it ran when B's unload came, with reads.
        if read_engine:
            assert all(c.body["lora_name"] not in c.running for c in _from(standin, key_b, "unload"))
            assert {"a0", "ax"} <= set(standin.app.adapters)
        assert _from(standin, key_a, "unload") == []


async def test_a_router_alone_never_waits_for_a_reading(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path
) -> None:
    """[read], [reading]: a router whose readings name only adapters its own requests run on is
    alone there. With r0 full (limit 2, no headroom, a1 idle), its cold request goes out at once,
    taking a1 as its victim, while the gauge does not answer: it never waits for a reading, and a1's
    name goes once a2 has landed ([evict])."""
    r = Replica("r0", standin.url, "tiny", 2)
    standin.app.hang("completions")
    async with anyio.create_task_group() as tasks, fleet_type(listing_interval=0.2, headroom=0) as fleet:
        await fleet.sync_unknown([r])
        async with fleet.acquire(r, "a1", str(adapter_dir / "a1")):
            pass
        async with fleet.acquire(r, "a0", str(adapter_dir / "a0")) as own:
            assert own.how is How.LOADED
            tasks.start_soon(_complete, standin, "a0")
            await calls_reach(standin, "completions", 1)

            def named_a0() -> bool:
                """A read that came while a0's request ran has been answered (reads go one at a time)."""
                reads = standin.app.calls_to("metrics")
                first = next((i for i, c in enumerate(reads) if "a0" in c.running), None)
                return first is not None and sum(fleet.engine_reads().values()) > first

            await eventually(named_a0)  # a reading naming a0, this router's own
            reading = fleet.reading("r0")
            assert reading is not None
            assert (reading.foreign, reading.adapters) == (False, frozenset())
            standin.app.hang("metrics", times=None)  # from now on no read is answered
            async with fleet.acquire(r, "a2", str(adapter_dir / "a2")) as lease:
                assert lease.how is How.LOADED
            await eventually(lambda: settled(fleet))
            assert _lora_calls(standin)[-2:] == [("load", "a2"), ("unload", "a1")]
            standin.app.clear_faults("metrics")
            standin.app.release()

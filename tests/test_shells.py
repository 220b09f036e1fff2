"""The shells over real HTTP on 127.0.0.1 against the vLLM stand-in, under asyncio and trio."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from lorafleet import How
from lorafleet_fleet import (
    HEADROOM,
    AdapterError,
    Fleet,
    FleetClosedError,
    Lease,
    PrometheusMetrics,
    Replica,
    ReplicaError,
)
from lorafleet_standin import Memory, StandInServer

from conftest import calls_reach, eventually, quiet, settled

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_task_left_running")]

LOAD, UNLOAD = "load", "unload"


def replica(server: StandInServer, limit: int = 2, rid: str = "r0", key: str | None = None) -> Replica:
    return Replica(rid, server.url, "tiny", limit, api_key=key)


def lora_calls(server: StandInServer) -> list[tuple[str, str]]:
    """The loads and unloads the stand-in received, in the order they came: ("load", name)..."""
    routes = {"/v1/load_lora_adapter": LOAD, "/v1/unload_lora_adapter": UNLOAD}
    return [(routes[c.path], c.body["lora_name"]) for c in server.app.calls if c.path in routes]


async def test_cold_load_then_hit(fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path) -> None:
    r = replica(standin)
    async with fleet_type() as fleet:
        await fleet.sync_unknown([r])
        async with fleet.acquire(r, "a0", str(adapter_dir / "a0")) as lease:
            assert lease.how is How.LOADED
            assert fleet.statistics().replicas["r0"].held == {"a0": 1}
        async with fleet.acquire(r, "a0", str(adapter_dir / "a0")) as lease:
            assert lease.how is How.HIT
        quiet(fleet)
    assert [c.body["lora_name"] for c in standin.app.calls_to("load")] == ["a0"]
    assert standin.app.adapters == {"a0": str(adapter_dir / "a0")}


async def test_many_requests_for_one_cold_adapter_make_one_load(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path
) -> None:
    r = replica(standin)
    standin.app.hang("load")
    hows: list[How] = []

    async def one() -> None:
        async with fleet.acquire(r, "a1", str(adapter_dir / "a1")) as lease:
            hows.append(lease.how)

    async with fleet_type() as fleet, anyio.create_task_group() as tasks:
        for _ in range(20):
            tasks.start_soon(one)
        await calls_reach(standin, "load", 1)
        await eventually(lambda: fleet.statistics().waiting == 20)
        standin.app.release()
    assert sorted(hows) == [How.JOINED] * 19 + [How.LOADED]
    assert len(standin.app.calls_to("load")) == 1
    quiet(fleet)


async def test_least_recently_used_is_evicted_at_the_limit(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path
) -> None:
    """[evict]: a cold load at the limit goes out at once, taking the least recently used idle adapter
    as its victim (whatever its demand); the victim's name is unloaded once the load has landed, and
    the replica is back at its limit."""
    r = replica(standin, limit=2)
    async with fleet_type() as fleet:
        await fleet.sync_unknown([r])
        # a0 and a1 are asked for twice each (equal demand); a1 is least recently used when a2 comes.
        for name in ("a0", "a1", "a1", "a0", "a2"):
            async with fleet.acquire(r, name, str(adapter_dir / name)):
                pass
        quiet(fleet)
        await eventually(lambda: settled(fleet))
        assert fleet.statistics().replicas["r0"].held == {"a0": 0, "a2": 0}
    assert lora_calls(standin) == [(LOAD, "a0"), (LOAD, "a1"), (LOAD, "a2"), (UNLOAD, "a1")]
    assert sorted(standin.app.adapters) == ["a0", "a2"]


async def test_an_adapter_in_use_is_never_evicted(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path
) -> None:
    """[evict], [settle]: a load with every adapter in use takes no victim and unloads nothing when it
    lands: the replica goes over its limit, into its headroom (2: the shipped 0 would queue a1, [cap]);
    a later load, once they are idle, takes both as victims and brings it back to its limit."""
    r = replica(standin, limit=1)
    async with fleet_type(headroom=2) as fleet:
        await fleet.sync_unknown([r])
        async with (
            fleet.acquire(r, "a0", str(adapter_dir / "a0")),
            fleet.acquire(r, "a1", str(adapter_dir / "a1")) as lease,
        ):
            assert lease.how is How.LOADED
            # A victim leaves held as its load goes out, and is unloaded with its grant: none was.
            assert fleet.statistics().replicas["r0"].unloading == ()
            assert fleet.statistics().replicas["r0"].held == {"a0": 1, "a1": 1}  # over the limit instead
        async with fleet.acquire(r, "a2", str(adapter_dir / "a2")):
            pass  # a later load brings the replica back to its limit
        quiet(fleet)
        await eventually(lambda: settled(fleet))
        assert fleet.statistics().replicas["r0"].held == {"a2": 0}
    calls = lora_calls(standin)
    assert calls[:3] == [(LOAD, "a0"), (LOAD, "a1"), (LOAD, "a2")]
    assert sorted(calls[3:]) == [(UNLOAD, "a0"), (UNLOAD, "a1")]  # out together, in either order


async def test_a_changed_adapter_is_loaded_again_once_its_old_copy_is_free(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path
) -> None:
    """[renew] over HTTP: the copy a request runs on stays until it ends; the next request loads again."""
    r = replica(standin)
    path = str(adapter_dir / "a0")
    async with fleet_type() as fleet:
        await fleet.sync_unknown([r])
        async with fleet.acquire(r, "a0", path):
            fleet.adapter_changed("a0")
            assert lora_calls(standin) == [(LOAD, "a0")]  # never an unload under a running request
        async with fleet.acquire(r, "a0", path) as lease:
            assert lease.how is How.LOADED
        quiet(fleet)
    assert lora_calls(standin) == [(LOAD, "a0"), (UNLOAD, "a0"), (LOAD, "a0")]


@pytest.mark.parametrize("headroom", [2, HEADROOM])
async def test_a_cold_load_at_the_limit_lands_before_the_excess_goes(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path, headroom: int
) -> None:
    """[evict]: a cold load at the limit goes out at once, headroom or not, and takes the least
    recently used idle adapter as its victim as it goes: a0 leaves held then (no request may use it),
    and its name is unloaded only once the load has landed. The engine, whose memory is the limit
    (--max-cpu-loras 2), drops a0 itself to make room for a2, so it never holds more than the limit
    and drops nothing the router still holds (SPEC.md §3.16)."""
    standin = serve(max_cpu_loras=2)
    r = replica(standin, limit=2)
    granted: list[How] = []

    async def cold() -> None:
        async with fleet.acquire(r, "a2", str(adapter_dir / "a2")) as lease:
            granted.append(lease.how)

    async with fleet_type(headroom=headroom) as fleet:
        await fleet.sync_unknown([r])
        for name in ("a0", "a1"):
            async with fleet.acquire(r, name, str(adapter_dir / name)):
                pass
        standin.app.hang(LOAD)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(cold)
            await calls_reach(standin, LOAD, 3)
            stats = fleet.statistics().replicas
            # The load runs; its victim a0 is chosen, but its name is not unloaded while it does.
            assert (stats["r0"].held, stats["r0"].loading, stats["r0"].unloading) == (
                {"a1": 0},
                ("a2",),
                ("a0",),
            )
            assert standin.app.calls_to(UNLOAD) == []
            standin.app.release()
        assert granted == [How.LOADED]
        quiet(fleet)
        await eventually(lambda: settled(fleet))
        assert fleet.statistics().replicas["r0"].held == {"a1": 0, "a2": 0}
    assert lora_calls(standin) == [(LOAD, "a0"), (LOAD, "a1"), (LOAD, "a2"), (UNLOAD, "a0")]
    assert standin.app.memory() == Memory(most=2, drops=0, rereads=0)
    assert sorted(standin.app.adapters) == ["a1", "a2"]


@pytest.mark.parametrize("fault", ["adapter", "replica"])
async def test_a_load_that_fails_evicts_nothing(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path, fault: str
) -> None:
    """[load-outcome]: a load the engine refuses, as the adapter's fault or the replica's, spares the
    victim it took as it went out (a0, held again and idle where it was), so the replica is left as it
    was, at its limit; the next load that lands takes a0 again and unloads it as usual."""
    r = replica(standin, limit=2)
    async with fleet_type() as fleet:
        await fleet.sync_unknown([r])
        for name in ("a0", "a1"):
            async with fleet.acquire(r, name, str(adapter_dir / name)):
                pass
        if fault == "replica":
            standin.app.answer(
                LOAD, 500, '{"error":{"message":"EngineCore encountered an issue.","code":500}}'
            )
        refused, path = ("big", adapter_dir / "rank64") if fault == "adapter" else ("a2", adapter_dir / "a2")
        with pytest.raises(AdapterError if fault == "adapter" else ReplicaError):
            async with fleet.acquire(r, refused, str(path)):
                pass
        await eventually(lambda: settled(fleet))
        assert fleet.statistics().replicas["r0"].held == {"a0": 0, "a1": 0}
        assert fleet.statistics().evictions == {}
        async with fleet.acquire(r, "a3", str(adapter_dir / "a3")):
            pass
        quiet(fleet)
        await eventually(lambda: settled(fleet))
        assert fleet.statistics().replicas["r0"].held == {"a1": 0, "a3": 0}
    assert lora_calls(standin) == [(LOAD, "a0"), (LOAD, "a1"), (LOAD, refused), (LOAD, "a3"), (UNLOAD, "a0")]
    # What the engine held when a3's load came: the refused load took nothing away.
    assert standin.app.calls_to(LOAD)[3].registered == ("a0", "a1")


async def test_a_requester_cancelled_mid_load_does_not_stop_the_load(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path
) -> None:
    r = replica(standin)
    standin.app.hang("load")
    async with fleet_type() as fleet:
        await fleet.sync_unknown([r])
        scope = anyio.CancelScope()

        async def cancel_when_waiting() -> None:
            await calls_reach(standin, "load", 1)
            scope.cancel()

        with scope:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(cancel_when_waiting)
                async with fleet.acquire(r, "a0", str(adapter_dir / "a0")):
                    pytest.fail("the cancelled requester got a lease")
        assert scope.cancelled_caught
        standin.app.release()
        await eventually(lambda: fleet.statistics().replicas["r0"].held == {"a0": 0})
        quiet(fleet)  # the grant that came for no one was released
        async with fleet.acquire(r, "a0", str(adapter_dir / "a0")) as lease:
            assert lease.how is How.HIT
    assert len(standin.app.calls_to("load")) == 1


@pytest.mark.parametrize("failure", ["timeout", "500", "drop", "refused"])
async def test_replica_failures_wake_every_waiter_with_a_replica_error(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path, failure: str
) -> None:
    server = serve()
    r = replica(server)
    if failure == "timeout":
        server.app.hang("load")
    elif failure == "500":
        server.app.answer("load", 500, '{"error":{"message":"EngineCore encountered an issue.","code":500}}')
    elif failure == "drop":
        server.app.drop("load")
    errors: list[BaseException] = []

    async def one() -> None:
        with pytest.raises(ReplicaError) as caught:
            async with fleet.acquire(r, "a0", str(adapter_dir / "a0")):
                pass
        errors.append(caught.value)

    async with fleet_type(load_timeout=0.5) as fleet:
        await fleet.sync_unknown([r])
        if failure == "refused":
            server.stop()
        async with anyio.create_task_group() as tasks:
            for _ in range(3):
                tasks.start_soon(one)
        quiet(fleet)
        assert fleet.statistics().replicas["r0"].held == {}
    assert len(errors) == 3
    error = errors[0]
    assert isinstance(error, ReplicaError)
    assert (error.replica, error.adapter) == (r, "a0")
    expected = {
        "timeout": "no answer from the replica within 0.5 s",
        "500": "EngineCore",
        "drop": "the replica closed the connection mid-answer (HTTP 200, 7 bytes of the body received",
        "refused": "no answer from the replica: ConnectError",
    }
    assert expected[failure] in error.message
    assert error.timeout == (0.5 if failure == "timeout" else None)


async def test_an_adapter_error_is_not_retried(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path
) -> None:
    r = replica(standin)
    async with fleet_type() as fleet:
        await fleet.sync_unknown([r])
        with pytest.raises(AdapterError, match="greater than max_lora_rank") as caught:
            async with fleet.acquire(r, "big", str(adapter_dir / "rank64")):
                pass
        assert caught.value.adapter == "big"
        with pytest.raises(AdapterError, match="No adapter found"):
            async with fleet.acquire(r, "gone", str(adapter_dir / "broken")):
                pass
        quiet(fleet)
    assert [c.body["lora_name"] for c in standin.app.calls_to("load")] == ["big", "gone"]


async def test_the_listing_after_a_restart_corrects_the_view(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path
) -> None:
    r = replica(standin)
    async with fleet_type(listing_interval=0.2) as fleet:
        await fleet.sync_unknown([r])
        async with fleet.acquire(r, "a0", str(adapter_dir / "a0")):
            pass
        standin.app.restart()
        listings = len(standin.app.calls_to("models"))
        await calls_reach(standin, "models", listings + 1)
        await eventually(lambda: fleet.statistics().replicas["r0"].held == {})
        async with fleet.acquire(r, "a0", str(adapter_dir / "a0")) as lease:
            assert lease.how is How.LOADED
        quiet(fleet)


async def test_forget_after_no_such_model(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path
) -> None:
    r = replica(standin)
    async with fleet_type() as fleet:
        await fleet.sync_unknown([r])
        async with fleet.acquire(r, "a0", str(adapter_dir / "a0")):
            pass
        standin.app.restart()
        async with fleet.acquire(r, "a0", str(adapter_dir / "a0")) as lease:
            assert lease.how is How.HIT  # stale: the router forwards and hears "no such model"
        fleet.forget(r, "a0")
        async with fleet.acquire(r, "a0", str(adapter_dir / "a0")) as lease:
            assert lease.how is How.LOADED
        quiet(fleet)


async def test_two_routers_converge_through_listings(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    servers = [serve(), serve()]
    reps = [replica(s, limit=2, rid=f"r{i}") for i, s in enumerate(servers)]
    async with fleet_type(listing_interval=0.2) as one, fleet_type(listing_interval=0.2) as two:
        await one.sync_unknown(reps)
        await two.sync_unknown(reps)
        async with one.acquire(reps[0], "a0", str(adapter_dir / "a0")):
            pass
        async with two.acquire(reps[1], "a1", str(adapter_dir / "a1")):
            pass
        await eventually(lambda: one.view(reps, "a1").holders == {"r1"})
        await eventually(lambda: two.view(reps, "a0").holders == {"r0"})
        # What another router loaded is least recently used here, so it goes first.
        async with one.acquire(reps[1], "a2", str(adapter_dir / "a2")):
            pass
        async with one.acquire(reps[1], "a3", str(adapter_dir / "a3")):
            pass
        await eventually(lambda: settled(one))  # a3's load landed, then its victim's name went
        assert lora_calls(servers[1]) == [(LOAD, "a1"), (LOAD, "a2"), (LOAD, "a3"), (UNLOAD, "a1")]
        quiet(one)
        quiet(two)


async def test_the_key_is_sent_and_a_wrong_key_gives_a_clear_error(
    fleet_type: type[Fleet],
    serve: Callable[..., StandInServer],
    adapter_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    server = serve(api_key="s3cret")
    good = replica(server, key="s3cret")
    bad = Replica("r1", server.url, "tiny", 2, api_key="wrong")
    async with fleet_type() as fleet:
        await fleet.sync_unknown([good, bad])
        async with fleet.acquire(good, "a0", str(adapter_dir / "a0")):
            pass
        with pytest.raises(ReplicaError, match="--api-key"):
            async with fleet.acquire(bad, "a1", str(adapter_dir / "a1")):
                pass
        quiet(fleet)
    assert {c.authorization for c in server.app.calls} == {"Bearer s3cret", "Bearer wrong"}
    assert "s3cret" not in caplog.text
    assert "s3cret" not in repr(good)


async def test_routes_absent_give_the_configuration_error(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    server = serve(runtime_lora=False)
    r = replica(server)
    async with fleet_type() as fleet:
        await fleet.sync_unknown([r])
        with pytest.raises(ReplicaError, match="VLLM_ALLOW_RUNTIME_LORA_UPDATING"):
            async with fleet.acquire(r, "a0", str(adapter_dir / "a0")):
                pass
        quiet(fleet)


async def test_lora_disabled_gives_the_configuration_error(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    server = serve(enable_lora=False)
    r = replica(server)
    async with fleet_type() as fleet:
        with pytest.raises(ReplicaError, match="--enable-lora"):
            async with fleet.acquire(r, "a0", str(adapter_dir / "a0")):
                pass


@pytest.mark.parametrize("bad", ["garbled", "oversized"])
async def test_a_garbled_or_oversized_listing_changes_nothing(
    fleet_type: type[Fleet],
    standin: StandInServer,
    adapter_dir: Path,
    bad: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    r = replica(standin)
    async with fleet_type(listing_interval=0.2) as fleet:
        await fleet.sync_unknown([r])
        async with fleet.acquire(r, "a0", str(adapter_dir / "a0")):
            pass
        standin.app.restart()  # a good listing would now drop a0
        if bad == "garbled":
            standin.app.garble_listing(times=None)
        else:
            standin.app.oversize_listing(times=None)
        listings = len(standin.app.calls_to("models"))
        await calls_reach(standin, "models", listings + 2)
        assert fleet.statistics().replicas["r0"].held == {"a0": 0}
        assert "could not read the adapters of r0" in caplog.text
        quiet(fleet)


async def test_closing_fails_waiting_requests_and_ends_background_work(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path
) -> None:
    r = replica(standin)
    standin.app.hang("load")
    errors: list[BaseException] = []

    async def wait_for_a0(fleet: Fleet) -> None:
        try:
            async with fleet.acquire(r, "a0", str(adapter_dir / "a0")):
                pass
        except FleetClosedError as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tasks, fleet_type() as fleet:
        tasks.start_soon(wait_for_a0, fleet)
        await calls_reach(standin, "load", 1)
    assert len(errors) == 1
    with pytest.raises(FleetClosedError):
        async with fleet.acquire(r, "a0", str(adapter_dir / "a0")):
            pass


async def test_prometheus_metrics(fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path) -> None:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    r = replica(standin, limit=1)
    async with fleet_type(metrics=PrometheusMetrics(registry)) as fleet:
        await fleet.sync_unknown([r])
        for name in ("a0", "a0", "a1"):
            async with fleet.acquire(r, name, str(adapter_dir / name)):
                pass
        await eventually(lambda: settled(fleet))  # a1's load landed, then its victim a0 was unloaded

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("lorafleet_grants_total", how="hit") == 1
    assert value("lorafleet_grants_total", how="loaded") == 2
    assert value("lorafleet_loads_total", model="tiny", outcome="loaded") == 2
    assert value("lorafleet_evictions_total", model="tiny", outcome="unloaded") == 1
    assert value("lorafleet_load_seconds_count", model="tiny") == 2


@pytest.mark.parametrize("version", ["0.6", "0.7.0", "0.8.5", "0.10.0", "0.10.1", "0.15", "0.18", "0.32"])
async def test_every_version_family(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path, version: str
) -> None:
    server = serve(version=version)
    r = replica(server, limit=1)
    async with fleet_type() as fleet:
        await fleet.sync_unknown([r])
        async with fleet.acquire(r, "a0", str(adapter_dir / "a0")):
            pass
        server.app.unregister("a0")  # the unload will hear "cannot be found": a success
        server.app.register("a1", str(adapter_dir / "a1"))  # the load will hear "already loaded"
        async with fleet.acquire(r, "a1", str(adapter_dir / "a1")) as lease:
            assert lease.how is How.LOADED
        await eventually(lambda: settled(fleet))  # a1 landed, then its victim a0 was unloaded ([evict])
        assert fleet.statistics().evictions == {("tiny", "not_found"): 1}
        assert fleet.statistics().loads[("tiny", "already_loaded")] == 1
        if version != "0.6":  # 0.6 reads adapter files only at the first request
            with pytest.raises(AdapterError):
                async with fleet.acquire(r, "big", str(adapter_dir / "rank64")):
                    pass
            await eventually(lambda: settled(fleet))
            # A failed load evicts nothing: its victim, a1, is spared ([load-outcome]).
            assert fleet.statistics().evictions == {("tiny", "not_found"): 1}
            assert fleet.statistics().replicas["r0"].held == {"a1": 0}
        quiet(fleet)


async def test_a_lease_says_where_and_how(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path
) -> None:
    r = replica(standin)
    async with fleet_type() as fleet, fleet.acquire(r, "a0", str(adapter_dir / "a0")) as lease:
        assert isinstance(lease, Lease)
        assert (lease.replica, lease.adapter, lease.how) == (r, "a0", How.LOADED)
        assert "api_key" not in repr(lease)


async def test_one_fleet_serves_both_runtimes_with_trios_checkpoint_on_a_hit(
    anyio_backend: str, standin: StandInServer, adapter_dir: Path
) -> None:
    import lorafleet_asyncio
    import lorafleet_trio

    assert lorafleet_trio.Fleet is lorafleet_asyncio.Fleet is Fleet
    r = replica(standin)
    async with Fleet() as fleet:
        async with fleet.acquire(r, "a0", str(adapter_dir / "a0")):
            pass
        granted = False
        with anyio.CancelScope() as scope:
            scope.cancel()
            async with fleet.acquire(r, "a0", str(adapter_dir / "a0")) as lease:
                granted = lease.how is How.HIT
        # trio's rule: an async call that could block is a checkpoint even when it does not; asyncio
        # has none, and a hit there returns without yielding.
        assert (granted, scope.cancelled_caught) == (
            (False, True) if anyio_backend == "trio" else (True, False)
        )
        quiet(fleet)


async def test_a_listing_that_will_not_come_does_not_hold_requests_up(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path
) -> None:
    r = replica(standin)
    standin.app.hang("models")
    async with fleet_type(listing_timeout=0.3) as fleet:
        await fleet.sync_unknown([r])  # returns once the listing has failed: the replica is met
        assert fleet.statistics().replicas["r0"].met
        async with fleet.acquire(r, "a0", str(adapter_dir / "a0")) as lease:
            assert lease.how is How.LOADED
        quiet(fleet)


async def test_removing_a_replica_fails_the_requests_waiting_on_it(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    gone, staying = serve(), serve()
    r0, r1 = replica(gone, rid="r0"), replica(staying, rid="r1")
    gone.app.hang("load")
    errors: list[ReplicaError] = []

    async def waits_on_r0() -> None:
        with pytest.raises(ReplicaError, match="removed") as caught:
            async with fleet.acquire(r0, "a0", str(adapter_dir / "a0")):
                pass
        errors.append(caught.value)

    async with fleet_type() as fleet:
        await fleet.sync_unknown([r0, r1])
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(waits_on_r0)
            await calls_reach(gone, "load", 1)
            fleet.keep([r1])
        assert list(fleet.statistics().replicas) == ["r1"]
        gone.app.release()
        quiet(fleet)
    assert len(errors) == 1


async def test_a_removed_replica_can_be_used_again(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path
) -> None:
    r = replica(standin)
    async with fleet_type() as fleet:
        await fleet.sync_unknown([r])
        async with fleet.acquire(r, "a0", str(adapter_dir / "a0")):
            pass
        fleet.remove([r])
        assert "r0" not in fleet.statistics().replicas
        await fleet.sync_unknown([r])  # met again: its listing says it still holds a0
        async with fleet.acquire(r, "a0", str(adapter_dir / "a0")) as lease:
            assert lease.how is How.HIT
        quiet(fleet)

"""``Fleet.route`` over real HTTP against the stand-in, under asyncio and trio.

Placement, retries that never revisit a replica, replicas avoided after a failure, refused adapters
remembered, the cap, pins, leases held across a stream, adapters by name, prewarming and the metrics.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from lorafleet import How, Placed
from lorafleet_fleet import (
    AdapterError,
    EnteredTwiceError,
    Fleet,
    FleetClosedError,
    InvalidValueError,
    OutsideBlockError,
    PrometheusMetrics,
    Replica,
    ReplicaError,
    Route,
    UsageError,
)
from lorafleet_standin import Memory, StandInServer

from conftest import calls_reach, eventually, make_adapter, quiet, settled

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_task_left_running")]

FIVE_HUNDRED = '{"error":{"message":"EngineCore encountered an issue.","code":500}}'


def replicas(servers: list[StandInServer], limit: int = 2, model: str = "tiny") -> list[Replica]:
    return [Replica(f"r{i}", s.url, model, limit) for i, s in enumerate(servers)]


def loads_on(server: StandInServer) -> list[str]:
    return [c.body["lora_name"] for c in server.app.calls_to("load")]


def most_held(server: StandInServer) -> int:
    """The most adapters the stand-in held at once, replaying its calls in the order they came."""
    held: set[str] = set()
    most = 0
    for call in server.app.calls:
        if call.path.endswith("/load_lora_adapter"):
            held.add(call.body["lora_name"])
        elif call.path.endswith("/unload_lora_adapter"):
            held.discard(call.body["lora_name"])
        most = max(most, len(held))
    return most


# -- placement and the lease -------------------------------------------------------------------


async def test_route_loads_where_placement_says_then_hits_there(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    servers = [serve(), serve()]
    reps = replicas(servers)
    async with fleet_type(replicas=reps, adapters=adapter_dir) as fleet:
        assert all(fleet.statistics().replicas[r.id].met for r in reps)  # listings read on entering
        lease = await fleet.route("a0")
        assert isinstance(lease, Route)
        assert (lease.adapter, lease.how, lease.placed) == ("a0", How.LOADED, Placed.FREE)
        assert lease.replica in reps
        assert fleet.replica_statistics(lease.replica.id).held == {"a0": 1}  # type: ignore[union-attr]
        lease.release()
        lease.release()  # again: nothing
        async with fleet.route("a0") as again:
            assert (again.replica, again.how, again.placed) == (lease.replica, How.HIT, Placed.HELD)
            assert again.ticket > lease.ticket
        quiet(fleet)
        assert fleet.placements() == {"held": 1, "loading": 0, "free": 1, "evict": 0, "over": 0, "wait": 0}
    assert sorted(loads_on(servers[0]) + loads_on(servers[1])) == ["a0"]
    assert str(adapter_dir / "a0") in {c.body["lora_path"] for s in servers for c in s.app.calls_to("load")}


async def test_requests_for_one_cold_adapter_share_its_load(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path
) -> None:
    standin.app.hang("load")
    hows: list[How] = []

    async def one() -> None:
        async with fleet.route("a1") as lease:
            hows.append(lease.how)

    async with fleet_type(replicas=replicas([standin]), adapters=adapter_dir, load_timeout=10) as fleet:
        async with anyio.create_task_group() as tasks:
            for _ in range(10):
                tasks.start_soon(one)
            await calls_reach(standin, "load", 1)
            await eventually(lambda: fleet.statistics().waiting == 10)
            standin.app.release()
        quiet(fleet)
        assert fleet.placements()["loading"] == 9
    assert sorted(hows) == [How.JOINED] * 9 + [How.LOADED]
    assert loads_on(standin) == ["a1"]


async def test_route_keeps_to_the_model(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    tiny, other = serve(), serve(model="other")
    reps = [Replica("tiny-0", tiny.url, "tiny", 2), Replica("other-0", other.url, "other", 2)]
    async with fleet_type(replicas=reps, adapters=adapter_dir) as fleet:
        for name in ("a0", "a1", "a2"):
            async with fleet.route(name, model="other") as lease:
                assert lease.replica.id == "other-0"
        with pytest.raises(ReplicaError, match="no healthy replica of model 'third'") as caught:
            await fleet.route("a0", model="third")
        assert (caught.value.replica, caught.value.tried) == (None, ())
        quiet(fleet)
    assert loads_on(tiny) == []


async def test_a_routed_hit_keeps_trios_checkpoint_and_asyncios_none(
    anyio_backend: str, standin: StandInServer, adapter_dir: Path
) -> None:
    # The engine's capacity told: a hit then wants no fresh reading ([read], [load]), and takes the
    # fast path (``place_hit``), where the runtimes differ.
    async with Fleet(replicas=replicas([standin]), adapters=adapter_dir, concurrency=8) as fleet:
        async with fleet.route("a0"):
            pass
        granted = False
        with anyio.CancelScope() as scope:
            scope.cancel()
            async with fleet.route("a0") as lease:
                granted = lease.how is How.HIT
        assert (granted, scope.cancelled_caught) == (
            (False, True) if anyio_backend == "trio" else (True, False)
        )
        quiet(fleet)


# -- retries, replica health, failure memory ---------------------------------------------------


@pytest.mark.parametrize("attempts", [3, 2])
async def test_retries_never_revisit_a_replica(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path, attempts: int
) -> None:
    servers = [serve(), serve(), serve()]
    for server in servers:
        server.app.answer("load", 500, FIVE_HUNDRED, times=None)
    async with fleet_type(replicas=replicas(servers), adapters=adapter_dir, attempts=attempts) as fleet:
        with pytest.raises(ReplicaError, match="no healthy replica") as caught:
            await fleet.route("a0")
        error = caught.value
        assert error.replica is None
        tried = [e.replica.id for e in error.tried if e.replica is not None]
        assert len(tried) == len(set(tried)) == attempts
        assert all("EngineCore" in e.message for e in error.tried)
        assert sorted(len(loads_on(s)) for s in servers) == [0] * (3 - attempts) + [1] * attempts
        # Each replica tried is avoided now: the next request tries only those left, then none.
        with pytest.raises(ReplicaError, match="no healthy replica") as caught:
            await fleet.route("a1")
        assert len(caught.value.tried) == 3 - attempts
        with pytest.raises(ReplicaError, match="each is failing") as caught:
            await fleet.route("a2")
        assert caught.value.tried == ()
        quiet(fleet)
    assert [len(loads_on(s)) for s in servers] == [1, 1, 1]


async def test_a_retry_passes_over_every_replica_that_failed_it_not_only_the_last(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    """A replica that failed the request is passed over by every later attempt of it, not by the next
    only: here no avoidance hides it ([health]'s backoff is over before the next attempt), and the
    replicas that failed have served fewer requests than the healthy one, so placement prefers them."""
    failing, healthy = [serve(), serve()], serve()
    for server in failing:
        server.app.answer("load", 500, FIVE_HUNDRED, times=None)
    reps = replicas([*failing, healthy], limit=4)
    async with fleet_type(replicas=reps, adapters=adapter_dir, backoff=1e-6, max_backoff=1e-6) as fleet:
        for name in ("a1", "a2", "a3"):  # the healthy replica has served three requests; the others none
            async with fleet.acquire(reps[2], name, str(adapter_dir / name)):
                pass
        async with fleet.route("a0") as lease:
            assert (lease.replica.id, lease.how) == ("r2", How.LOADED)
        quiet(fleet)
    assert [loads_on(server) for server in failing] == [["a0"], ["a0"]]


async def test_an_adapter_fault_ends_the_route_at_once(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    servers = [serve(), serve(), serve()]
    adapters = {"big": str(adapter_dir / "rank64")}
    async with fleet_type(replicas=replicas(servers), adapters=adapters) as fleet:
        with pytest.raises(AdapterError, match="greater than max_lora_rank") as caught:
            await fleet.route("big")
        assert caught.value.replica in replicas(servers)
        quiet(fleet)
    assert sum(len(loads_on(s)) for s in servers) == 1


@pytest.mark.parametrize("when", ["before entering", "after its listing"])
async def test_a_replica_with_nothing_listening_is_avoided_after_its_first_failure(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path, when: str
) -> None:
    dead, alive = serve(), serve()
    reps = replicas([dead, alive], limit=4)
    if when == "before entering":
        dead.stop()  # its port is closed: the listing read on entering fails
    async with fleet_type(replicas=reps, adapters=adapter_dir) as fleet:
        if when == "after its listing":
            dead.stop()
        for name in ("a0", "a1", "a2", "a3", "a4", "a5"):
            async with fleet.route(name) as lease:
                assert lease.replica.id == "r1"
        statistics = fleet.statistics()
        failing = statistics.replicas["r0"].failing_until
        assert failing is not None
        quiet(fleet)
    # One load went to the closed port (its first failure) when its listing had answered; none when not.
    refused = statistics.loads.get(("tiny", "replica_fault"), 0)
    assert refused == (1 if when == "after its listing" else 0)
    assert sorted(loads_on(alive)) == ["a0", "a1", "a2", "a3", "a4", "a5"]


class _LoadsTimeOutOn(httpx.AsyncBaseTransport):
    """Real HTTP, but a load sent to ``server`` times out as soon as the server holds it.

    The client's read timeout without its clock: a short ``load_timeout`` would time out the healthy
    replica's loads too on a busy machine (0.3 s did, at a load average of 4 to 13).
    """

    def __init__(self, server: StandInServer) -> None:
        self._real = httpx.AsyncHTTPTransport()
        self._server = server
        self._loads = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if not (
            str(request.url).startswith(self._server.url) and request.url.path.endswith("load_lora_adapter")
        ):
            return await self._real.handle_async_request(request)
        self._loads += 1
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._real.handle_async_request, request)
            await calls_reach(self._server, "load", self._loads)  # it holds the call, unanswered
            tasks.cancel_scope.cancel()
        raise httpx.ReadTimeout("the hung replica did not answer", request=request)

    async def aclose(self) -> None:
        await self._real.aclose()


async def test_a_hung_replica_is_avoided_after_its_first_timeout(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    hung, alive = serve(), serve()
    hung.app.hang("load", times=None)
    try:
        # The hung replica's load times out once it is held (the transport); the healthy replica's
        # loads have the default timeout, and the avoidance outlasts any run of the test.
        async with (
            httpx.AsyncClient(transport=_LoadsTimeOutOn(hung)) as client,
            fleet_type(
                client=client,
                replicas=replicas([hung, alive], limit=4),
                adapters=adapter_dir,
                backoff=3600,
                max_backoff=3600,
            ) as fleet,
        ):
            for name in ("a0", "a1", "a2", "a3", "a4", "a5"):
                async with fleet.route(name) as lease:
                    assert lease.replica.id == "r1"
            assert fleet.statistics().loads[("tiny", "replica_fault")] == 1
            assert fleet.statistics().replicas["r0"].failing_until is not None
            quiet(fleet)
    finally:
        hung.app.release()
    assert len(loads_on(hung)) == 1
    assert sorted(loads_on(alive)) == ["a0", "a1", "a2", "a3", "a4", "a5"]


async def test_a_refused_adapter_makes_one_load_call_until_its_record_expires(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    server = serve()
    adapters = {"big": str(adapter_dir / "rank64")}
    # The refusal lasts long enough for five refused routes on a loaded machine (0.3 s did not, beside
    # CPU burners: the record expired between them), and short enough to wait out.
    async with fleet_type(replicas=replicas([server]), adapters=adapters, refusal=2.0) as fleet:
        for _ in range(5):
            with pytest.raises(AdapterError, match="greater than max_lora_rank"):
                await fleet.route("big")
        assert len(loads_on(server)) == 1  # the engine's words again, without a call
        with anyio.fail_after(10):
            while len(loads_on(server)) == 1:
                with pytest.raises(AdapterError, match="greater than max_lora_rank"):
                    await fleet.route("big")
                await anyio.sleep(0.01)
        for _ in range(5):  # refused again, and remembered again
            with pytest.raises(AdapterError):
                await fleet.route("big")
        quiet(fleet)
    assert loads_on(server) == ["big", "big"]


async def test_a_forwarded_request_without_an_answer_makes_placement_avoid_the_replica(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    servers = [serve(), serve()]
    async with fleet_type(replicas=replicas(servers), adapters=adapter_dir) as fleet:
        async with fleet.route("a0") as lease:
            first = lease.replica
            lease.replica_failed("ReadTimeout: no answer within 30 s")
        assert fleet.replica_statistics(first.id).failing_until is not None  # type: ignore[union-attr]
        async with fleet.route("a0") as lease:
            assert lease.replica != first
            assert lease.how is How.LOADED
        quiet(fleet)


async def test_a_replica_failing_traffic_without_a_lease_is_avoided_too(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    """A base model's request holds no lease: ``fleet.replica_failed`` reports for it."""
    servers = [serve(), serve()]
    async with fleet_type(replicas=replicas(servers), adapters=adapter_dir) as fleet:
        async with fleet.route("a0") as lease:
            first = lease.replica
        fleet.replica_failed(first, "ConnectError: refused")
        fleet.replica_failed("nowhere", "a replica the fleet does not use changes nothing")
        assert fleet.replica_statistics(first.id).failing_until is not None  # type: ignore[union-attr]
        async with fleet.route("a0") as lease:
            assert lease.replica != first
            assert lease.how is How.LOADED
        quiet(fleet)


async def test_check_answer_forgets_an_adapter_the_replica_lost(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path
) -> None:
    async with (
        fleet_type(replicas=replicas([standin]), adapters=adapter_dir) as fleet,
        httpx.AsyncClient() as client,
    ):
        async with fleet.route("a0") as lease:
            answer = await client.post(
                f"{lease.replica.url}/v1/completions", json={"model": "a0", "prompt": "hi"}
            )
            assert not lease.check_answer(answer.status_code, answer.content)
        standin.app.restart()
        async with fleet.route("a0") as lease:
            assert lease.how is How.HIT  # stale: the replica no longer has it
            answer = await client.post(
                f"{lease.replica.url}/v1/completions", json={"model": "a0", "prompt": "hi"}
            )
            assert answer.status_code == 404
            assert lease.check_answer(answer.status_code, answer.content[:4096])
        async with fleet.route("a0") as lease:
            assert lease.how is How.LOADED
        with pytest.raises(OutsideBlockError):
            lease.check_answer(answer.status_code, answer.content)  # released: Fleet.forget is for that
        quiet(fleet)


# -- the cap and pins ---------------------------------------------------------------------------


def queued(fleet: Fleet) -> int:
    """Requests waiting at the replicas' caps."""
    return sum(replica.queued for replica in fleet.statistics().replicas.values())


@pytest.mark.parametrize("headroom", [0, 2])
async def test_the_cap_is_never_exceeded(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], tmp_path: Path, headroom: int
) -> None:
    """Engines that keep ``limit + headroom`` adapters in memory: every one holds that many at the cap,
    never more, and drops none a router holds (SPEC.md §3.16).

    These leases run nothing on the engine, so its least recently used adapter is the one it read
    first, while the machine's victim is the one released first: each replica's leases are released
    in the order its engine read their adapters, as a completion on each would have left it. (In any
    other order, as trio may wake holders, the engine drops a held adapter ahead of one unloaded that
    it still keeps: issue 31.)"""
    servers = [serve(max_cpu_loras=2 + headroom) for _ in range(3)]
    names = [f"x{i:02d}" for i in range(24)]
    for name in names:
        make_adapter(tmp_path / name)
    cap = 2 + headroom
    granted: list[Route] = []

    async def hold(name: str) -> None:
        granted.append(await fleet.route(name))

    def engine_order(lease: Route) -> int:
        """Where the lease's adapter stands in its engine's reads: registration order."""
        assert lease.replica is not None
        return list(servers[int(lease.replica.id[1:])].app.adapters).index(lease.adapter)

    async with fleet_type(replicas=replicas(servers, limit=2), adapters=tmp_path, headroom=headroom) as fleet:
        async with anyio.create_task_group() as tasks:
            for name in names:
                tasks.start_soon(hold, name)
            # Every replica at its cap with adapters in use; the rest wait for room.
            await eventually(lambda: len(granted) == 3 * cap and queued(fleet) == 24 - 3 * cap)
            assert all(len(s.app.adapters) == cap for s in servers)
            assert fleet.placements()["wait"] == 24 - 3 * cap
            released: set[int] = set()
            while len(released) < len(names):
                await eventually(lambda: len(granted) > len(released))
                held = [i for i in range(len(granted)) if i not in released]
                first = min(held, key=lambda i: engine_order(granted[i]))
                granted[first].release()
                released.add(first)
        assert sorted(lease.adapter for lease in granted) == names  # each was served in the end
        quiet(fleet)
        await eventually(lambda: settled(fleet))  # the last victims unloaded, not cut off by the close
    assert [s.app.memory() for s in servers] == [Memory(most=cap, drops=0, rereads=0)] * 3


async def test_pinned_adapters_are_never_evicted(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path
) -> None:
    """[pin]: a pinned adapter is never a victim, neither before a load nor when the excess goes
    after one lands ([settle]); unpinned, it is idle like any other and may go."""
    r = replicas([standin], limit=2)
    async with fleet_type(replicas=r, adapters=adapter_dir, pins={"a0": 1}) as fleet:
        await eventually(lambda: "a0" in fleet.statistics().replicas["r0"].held)
        for name in ("a1", "a2", "a3", "a4", "a1"):
            async with fleet.route(name) as lease:
                assert lease.how is How.LOADED
            await eventually(lambda: settled(fleet))  # each load's excess is unloaded once it lands
        assert [c.body["lora_name"] for c in standin.app.calls_to("unload")] == ["a1", "a2", "a3", "a4"]
        assert sorted(standin.app.adapters) == ["a0", "a1"]
        assert fleet.statistics().pins == {"a0": 1}
        fleet.unpin("a0")  # now it may go: idle, the most recently so (it went idle as it was unpinned)
        for name in ("a2", "a3"):
            async with fleet.route(name):
                pass
            await eventually(lambda: settled(fleet))
        unloaded = [c.body["lora_name"] for c in standin.app.calls_to("unload")]
        assert unloaded[4:] == ["a1", "a0"]  # least recently used first: a1, idle before the unpin
        fleet.pin("a5")
        await eventually(lambda: "a5" in standin.app.adapters)
        with pytest.raises(AdapterError, match="no adapter folder"):
            fleet.pin("nope")
        quiet(fleet)


async def test_prewarm_loads_a_list_before_traffic_and_says_what_failed(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    servers = [serve(), serve()]
    adapters = {name: str(adapter_dir / name) for name in ("a0", "a1", "a2")}
    adapters["big"] = str(adapter_dir / "rank64")
    async with fleet_type(replicas=replicas(servers), adapters=adapters) as fleet:
        failed = await fleet.prewarm(["a0", "a1", "a2", "big", "nope", "a0"])
        assert sorted(failed) == ["big", "nope"]
        assert isinstance(failed["big"], AdapterError)
        assert failed["nope"].replica is None
        held = {name for r in fleet.statistics().replicas.values() for name in r.held}
        assert held == {"a0", "a1", "a2"}
        for name in ("a0", "a1", "a2"):
            async with fleet.route(name) as lease:
                assert lease.how is How.HIT
        quiet(fleet)
    assert sorted(loads_on(servers[0]) + loads_on(servers[1])) == ["a0", "a1", "a2", "big"]


# -- a lease held across a stream ----------------------------------------------------------------


async def stream_through(lease: Route, standin: StandInServer, fleet: Fleet) -> list[str]:
    """Stream a completion from the lease's replica, checking the adapter is in use meanwhile."""
    standin.app.hold_streams()
    lines = []
    async with (
        httpx.AsyncClient() as client,
        client.stream(
            "POST",
            f"{lease.replica.url}/v1/completions",
            json={"model": lease.adapter, "prompt": "hi", "max_tokens": 3, "stream": True},
        ) as answer,
    ):
        assert not lease.check_answer(answer.status_code, b"")
        chunks = answer.aiter_lines()
        lines.append(await chunks.__anext__())
        assert fleet.statistics().replicas["r0"].held == {"a0": 1}  # held while the stream runs
        standin.app.release()
        lines.extend([line async for line in chunks])
    return [line for line in lines if line]


async def test_a_lease_held_across_a_stream_is_released_explicitly(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path
) -> None:
    async with fleet_type(replicas=replicas([standin]), adapters=adapter_dir) as fleet:
        lease = await fleet.route("a0")
        lines = await stream_through(lease, standin, fleet)
        assert lines[-1] == "data: [DONE]"
        assert fleet.statistics().replicas["r0"].held == {"a0": 1}  # the stream ended, not the lease
        lease.release()
        assert fleet.statistics().replicas["r0"].held == {"a0": 0}
        lease.release()
        quiet(fleet)


async def test_a_lease_garbage_collected_unreleased_is_released_by_the_fleet(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path
) -> None:
    async with fleet_type(replicas=replicas([standin]), adapters=adapter_dir) as fleet:
        lease: Route | None = await fleet.route("a0")
        assert lease is not None
        await stream_through(lease, standin, fleet)
        del lease  # the router's handler went away without releasing
        gc.collect()
        await eventually(lambda: fleet.statistics().leases == 0)
        assert fleet.statistics().replicas["r0"].held == {"a0": 0}
        async with fleet.route("a0") as again:
            assert again.how is How.HIT
        quiet(fleet)


async def test_closing_the_fleet_releases_the_leases_it_gave(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path
) -> None:
    async with fleet_type(replicas=replicas([standin]), adapters=adapter_dir) as fleet:
        lease = await fleet.route("a0")
        await stream_through(lease, standin, fleet)
        assert fleet.statistics().leases == 1
    assert fleet.statistics().leases == 0
    lease.release()  # after the close: nothing to do
    assert fleet.statistics().leases == 0
    with pytest.raises(FleetClosedError):
        await fleet.route("a0")


# -- adapters by name ---------------------------------------------------------------------------


def sources(adapter_dir: Path) -> dict[str, Any]:
    path = str(adapter_dir / "a0")
    return {
        "mapping": {"a0": path},
        "folder": adapter_dir,
        "folder as str": str(adapter_dir),
        "callable": lambda name: path if name == "a0" else None,
    }


@pytest.mark.parametrize("kind", ["mapping", "folder", "folder as str", "callable"])
async def test_names_outside_the_adapters_fail_without_a_load_call(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path, kind: str
) -> None:
    source = sources(adapter_dir)[kind]
    async with fleet_type(replicas=replicas([standin]), adapters=source) as fleet:
        for name in ("nope", "../a0", "a0/", "a0/../a0", ".", "..", "A0", "a0\0"):
            with pytest.raises(AdapterError) as caught:
                await fleet.route(name)
            assert (caught.value.replica, caught.value.adapter) == (None, name)
        with pytest.raises(InvalidValueError):
            await fleet.route("")
        assert standin.app.calls_to("load") == []
        async with fleet.route("a0") as lease:
            assert lease.how is How.LOADED
        assert fleet.placements()["free"] == 1  # a name refused here is no placement
        quiet(fleet)
    assert [c.body["lora_path"] for c in standin.app.calls_to("load")] == [str(adapter_dir / "a0")]


async def test_a_path_the_caller_gives_is_the_one_loaded_and_no_source_is_asked(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path
) -> None:
    asked: list[str] = []

    def source(name: str) -> str | None:
        asked.append(name)
        return str(adapter_dir / "a0")

    async with fleet_type(replicas=replicas([standin])) as fleet:  # no adapters: the caller knows
        async with fleet.route("a1", path=str(adapter_dir / "a1")) as lease:
            assert lease.how is How.LOADED
        for path in ("", 7):
            with pytest.raises(InvalidValueError, match="adapter path"):
                await fleet.route("a1", path=path)  # type: ignore[arg-type]
        with pytest.raises(InvalidValueError, match="adapter name"):
            await fleet.route("", path=str(adapter_dir / "a1"))
        quiet(fleet)
    async with fleet_type(replicas=replicas([standin]), adapters=source) as fleet:
        async with fleet.route("a2", path=str(adapter_dir / "a2")) as lease:
            assert lease.how is How.LOADED
        async with fleet.route("a2", path=str(adapter_dir / "a2")) as lease:
            assert lease.how is How.HIT
        quiet(fleet)
    assert asked == []
    assert [c.body["lora_path"] for c in standin.app.calls_to("load")] == [
        str(adapter_dir / "a1"),
        str(adapter_dir / "a2"),
    ]


async def test_place_base_is_the_machines_answer_for_the_base_model(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    servers = [serve(), serve()]
    reps = replicas(servers)
    async with fleet_type(replicas=reps, adapters=adapter_dir) as fleet:
        assert [fleet.place_base("tiny", turn=t) for t in range(3)] == [reps[0], reps[1], reps[0]]
        async with fleet.route("a0") as lease:  # an adapter request in flight counts too
            other = reps[1] if lease.replica is reps[0] else reps[0]
            assert fleet.place_base("tiny", turn=0) is other
            assert fleet.place_base("tiny", turn=0, load={other.id: 2}) is lease.replica
        assert fleet.place_base("tiny", exclude=[r.id for r in reps]) is None
        assert fleet.place_base("nope") is None
        quiet(fleet)


async def test_a_folder_source_sees_adapters_added_later(
    fleet_type: type[Fleet], standin: StandInServer, tmp_path: Path
) -> None:
    async with fleet_type(replicas=replicas([standin]), adapters=tmp_path) as fleet:
        with pytest.raises(AdapterError, match="no adapter folder of that name in"):
            await fleet.route("late")
        make_adapter(tmp_path / "late")
        async with fleet.route("late") as lease:
            assert lease.how is How.LOADED
        quiet(fleet)


async def test_the_fleets_arguments_are_checked(adapter_dir: Path) -> None:
    bad: list[dict[str, Any]] = [
        {"adapters": 42},
        {"adapters": {"a0": ""}},
        {"adapters": adapter_dir / "no-such-folder"},
        {"attempts": 0},
        {"headroom": -1},
        {"routers": 0},
        {"refusal": 0},
        {"replicas": ["http://x"]},
        {"pins": {"a0": 1}},  # no adapters to find it in
        {"adapters": adapter_dir, "pins": {"nope": 1}},
        {"adapters": adapter_dir, "pins": {"a0": 0}},
    ]
    for arguments in bad:
        with pytest.raises(InvalidValueError):
            Fleet(**arguments)


async def test_route_misuse_is_a_usage_error(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path
) -> None:
    bare = fleet_type()
    with pytest.raises(OutsideBlockError):
        await bare.route("a0")
    async with fleet_type(replicas=replicas([standin])) as fleet:
        with pytest.raises(UsageError, match="adapters="):
            await fleet.route("a0")
        with pytest.raises(UsageError, match="adapters="):
            await fleet.prewarm(["a0"])
        with pytest.raises(UsageError, match="adapters="):
            fleet.pin("a0")
    async with fleet_type(replicas=replicas([standin]), adapters=adapter_dir) as fleet:
        route = fleet.route("a0")
        async with route:
            with pytest.raises(EnteredTwiceError):
                await route
        with pytest.raises(InvalidValueError):
            await fleet.route("a0", model="")
        with pytest.raises(InvalidValueError):
            await fleet.route(3)  # type: ignore[arg-type]
        with pytest.raises(InvalidValueError):
            await fleet.prewarm(["a0", ""])
        assert loads_on(standin) == ["a0"]  # the route's; the refused prewarm started nothing
        quiet(fleet)


async def test_a_callable_source_that_answers_nonsense_is_a_usage_error(
    fleet_type: type[Fleet], standin: StandInServer
) -> None:
    async with fleet_type(replicas=replicas([standin]), adapters=lambda name: 3) as fleet:  # type: ignore[arg-type]
        with pytest.raises(InvalidValueError):
            await fleet.route("a0")
        assert standin.app.calls_to("load") == []


# -- what a router sees ------------------------------------------------------------------------


async def test_prometheus_gauges_and_counters(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    good, failing = serve(), serve()
    failing.app.answer("load", 500, FIVE_HUNDRED, times=None)
    adapters: Mapping[str, str] = {
        **{n: str(adapter_dir / n) for n in ("a0", "a1")},
        "big": str(adapter_dir / "rank64"),
    }

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    reps = replicas([good, failing], limit=4)
    async with fleet_type(replicas=reps, adapters=adapters, metrics=PrometheusMetrics(registry)) as fleet:
        for name in ("a0", "a1"):
            async with fleet.route(name):
                pass
        with pytest.raises(AdapterError):
            await fleet.route("big")
        held = await fleet.route("a0")
        assert held.replica.id == "r0"
        assert value("lorafleet_adapters_held", replica="r0") == len(good.app.adapters)
        assert value("lorafleet_adapters_in_use", replica="r0") == 1
        assert value("lorafleet_adapters_limit", replica="r0") == 4
        assert value("lorafleet_requests_in_flight", replica="r0") == 1
        assert value("lorafleet_replica_healthy", replica="r0") == 1
        assert value("lorafleet_replica_healthy", replica="r1") == 0  # its 500 made it avoided
        assert value("lorafleet_placements_total", placed="held") == 1
        assert value("lorafleet_placements_total", placed="free") == sum(fleet.placements().values()) - 1
        assert value("lorafleet_failures_total", fault="adapter") == 1
        assert value("lorafleet_failures_total", fault="replica") == len(loads_on(failing))
        assert value("lorafleet_grants_total", how="hit") == 1
        assert value("lorafleet_load_seconds_count", model="tiny") == len(loads_on(good) + loads_on(failing))
        for outcome, count in fleet.engine_reads().items():
            assert value("lorafleet_engine_reads_total", outcome=outcome) == count
        assert fleet.engine_reads()["read"] >= 2  # each replica's listing is followed by a read
        held.release()
        assert value("lorafleet_adapters_in_use", replica="r0") == 0
        assert value("lorafleet_requests_in_flight", replica="r0") == 0
        quiet(fleet)


async def test_a_listing_that_hangs_does_not_hold_the_fleet_up_on_entering(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    slow, fine = serve(), serve()
    slow.app.hang("models")
    try:
        async with fleet_type(
            replicas=replicas([slow, fine]), adapters=adapter_dir, listing_timeout=0.3
        ) as fleet:
            assert fleet.statistics().replicas["r0"].met  # failed, so met; and avoided for now
            async with fleet.route("a0") as lease:
                assert lease.replica.id == "r1"
            quiet(fleet)
    finally:
        slow.app.release()
    await calls_reach(slow, "models", 1)
    assert json.dumps(loads_on(slow)) == "[]"

"""``Fleet.set_replicas`` over real HTTP against stand-ins, under asyncio and trio: the replicas a fleet
uses, changed while it runs ([replicas]; a replica is placed on once its first listing is answered,
[place])."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from lorafleet import How
from lorafleet_fleet import Fleet, InvalidValueError, Replica, ReplicaChanges
from lorafleet_standin import StandInServer

from conftest import calls_reach, eventually, quiet

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_task_left_running")]


def replica(server: StandInServer, rid: str, limit: int = 2, key: str | None = None) -> Replica:
    return Replica(rid, server.url, "tiny", limit, api_key=key)


async def test_the_same_set_again_changes_nothing(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    a, b = serve(), serve()
    async with fleet_type(adapters=adapter_dir) as fleet:
        assert fleet.set_replicas([replica(a, "r0"), replica(b, "r1")]) == ReplicaChanges(added=("r0", "r1"))
        await eventually(lambda: all(fleet.replica_statistics(r).met for r in ("r0", "r1")))  # type: ignore[union-attr]
        async with fleet.route("a0") as lease:
            assert lease.how is How.LOADED
        listings = len(a.app.calls_to("models")) + len(b.app.calls_to("models"))
        changes = fleet.set_replicas([replica(b, "r1"), replica(a, "r0")])
        assert not changes
        assert changes == ReplicaChanges()
        assert len(a.app.calls_to("models")) + len(b.app.calls_to("models")) == listings
        async with fleet.route("a0") as lease:
            assert lease.how is How.HIT  # what the fleet knew stays
        with pytest.raises(InvalidValueError, match="same id"):
            fleet.set_replicas([replica(a, "r0"), replica(b, "r0")])
        with pytest.raises(InvalidValueError, match="Replica values"):
            fleet.set_replicas(["r0"])  # type: ignore[list-item]
        quiet(fleet)


async def test_a_new_replica_takes_no_request_before_its_listing_is_answered(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    a, b = serve(), serve()
    b.app.register("a1", str(adapter_dir / "a1"))  # another router loaded it there
    async with fleet_type(replicas=[replica(a, "r0")], adapters=adapter_dir) as fleet:
        b.app.hang("models")
        assert fleet.set_replicas([replica(a, "r0"), replica(b, "r1")]) == ReplicaChanges(added=("r1",))
        await calls_reach(b, "models", 1)
        # r1 says nothing yet: a cold adapter goes to r0, even where r1 would have won the tie.
        for name in ("a1", "a2", "a3"):
            async with fleet.route(name) as lease:
                assert lease.replica.id == "r0"
        b.app.release()
        await eventually(lambda: fleet.replica_statistics("r1").met)  # type: ignore[union-attr]
        async with fleet.route("a1") as lease:
            assert (lease.replica.id, lease.how) == ("r1", How.HIT)  # its listing named it
        quiet(fleet)


async def test_a_replica_no_longer_named_drains(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    a, b = serve(), serve()
    async with fleet_type(replicas=[replica(a, "r0"), replica(b, "r1")], adapters=adapter_dir) as fleet:
        running = await fleet.route("a0")
        gone = running.replica
        kept = a if gone.id == "r1" else b
        assert fleet.set_replicas([replica(kept, "r0" if kept is a else "r1")]) == ReplicaChanges(
            removed=(gone.id,)
        )
        # The request running there goes on, and ends as ever; nothing new goes there.
        assert running.how is How.LOADED
        for name in ("a0", "a1", "a2"):
            async with fleet.route(name) as lease:
                assert lease.replica.id != gone.id
        running.release()
        assert fleet.replica_statistics(gone.id) is None
        server = b if gone.id == "r1" else a
        assert server.app.calls_to("unload") == []  # the drain unloads nothing
        assert fleet.statistics().leases == 0
        quiet(fleet)


@pytest.mark.parametrize("what", ["url", "key"])
async def test_another_url_or_key_is_another_replica(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path, what: str
) -> None:
    a, b = serve(), serve()
    async with fleet_type(replicas=[replica(a, "r0")], adapters=adapter_dir) as fleet:
        async with fleet.route("a0") as lease:
            assert lease.how is How.LOADED
        moved = replica(b, "r0") if what == "url" else replica(a, "r0", key="rotated")
        assert fleet.set_replicas([moved]) == ReplicaChanges(changed=("r0",))
        await eventually(lambda: fleet.replica_statistics("r0").met)  # type: ignore[union-attr]
        async with fleet.route("a0") as lease:
            # Read afresh: the new server holds nothing; the old one, under a new key, still a0.
            assert lease.how is (How.LOADED if what == "url" else How.HIT)
        quiet(fleet)

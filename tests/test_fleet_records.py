"""What the fleet keeps for operators (``failure``, ``load_failures``) and ``warm``, over real HTTP
against stand-ins, under asyncio and trio.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from lorafleet import LoadOutcome
from lorafleet_fleet import AdapterError, Fleet, Replica
from lorafleet_standin import StandInServer

from conftest import eventually, settled

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_task_left_running")]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_a_replica_whose_reads_fail_stays_failing_past_the_machines_backoff(
    fleet_type: type[Fleet],
) -> None:
    """The machine avoids a replica for ``backoff`` seconds after a failure, less than the listing
    interval here: between two reads it is not avoided, yet what failed is still news."""
    url = f"http://127.0.0.1:{free_port()}"
    async with fleet_type(
        replicas=[Replica("r0", url, "tiny", 2)], backoff=0.01, max_backoff=0.01, listing_interval=0.2
    ) as fleet:
        await eventually(lambda: (f := fleet.failure("r0")) is not None and f.failed_reads >= 2)
        await eventually(lambda: fleet.replica_statistics("r0").failing_until is None)  # type: ignore[union-attr]
        failure = fleet.failure("r0")
        assert failure is not None
        assert failure.url == url
        assert failure.failed_reads >= 2
        assert failure.message.startswith("no answer from the replica: ConnectError")
        assert failure.since is not None
        assert failure.since <= failure.at


async def test_a_good_read_forgets_the_failure_and_leaving_the_fleet_too(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer]
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    async with fleet_type(replicas=[Replica("r0", url, "tiny", 2)], listing_interval=0.05) as fleet:
        await eventually(lambda: fleet.failure("r0") is not None)
        serve(port=port)
        await eventually(lambda: fleet.failure("r0") is None)
        fleet.replica_failed("r0", "a forwarded request got no answer")
        failure = fleet.failure("r0")
        assert failure is not None
        assert (failure.message, failure.failed_reads, failure.since) == (
            "a forwarded request got no answer",
            0,
            None,
        )
        fleet.remove(["r0"])
        assert fleet.failure("r0") is None


async def test_the_last_failed_load_of_each_adapter(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path
) -> None:
    async with fleet_type(replicas=[Replica("r0", standin.url, "tiny", 2)], adapters=adapter_dir) as fleet:
        with pytest.raises(AdapterError):
            await fleet.route("rank64")
        async with fleet.route("a0"):
            pass
        failures = fleet.load_failures()
    assert set(failures) == {"rank64"}
    failure = failures["rank64"]
    assert (failure.replica, failure.outcome) == ("r0", LoadOutcome.ADAPTER_FAULT)
    assert "LoRA rank 64 is greater than max_lora_rank 16." in failure.message


async def test_warm_loads_once_a_replica_takes_it_then_lifts_its_pin(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    async with fleet_type(
        replicas=[Replica("r0", url, "tiny", 2)], adapters=adapter_dir, listing_interval=0.05
    ) as fleet:
        fleet.warm("a0")
        fleet.warm("a0")  # once is enough
        assert fleet.warming == {"a0"}
        assert fleet.statistics().pins == {"a0": 1}
        standin = serve(port=port)
        await eventually(lambda: not fleet.warming)
        await eventually(lambda: settled(fleet))
        stats = fleet.statistics()
        assert (stats.pins, stats.replicas["r0"].held) == ({}, {"a0": 0})
        fleet.warm("a0")  # held already: nothing to do
        assert fleet.warming == frozenset()
        # Pinned by its caller meanwhile: the pin is the caller's, and stays.
        fleet.warm("a1")
        fleet.pin("a1")
        await eventually(lambda: "a1" in fleet.statistics().replicas["r0"].held)
        assert fleet.warming == frozenset()
        assert fleet.statistics().pins == {"a1": 1}
        with pytest.raises(AdapterError):
            fleet.warm("nope")
    assert [c.body["lora_name"] for c in standin.app.calls_to("load")] == ["a0", "a1"]

"""[route] (SPEC.md §3.15): a request the machine places, read first where [read] asks."""

from __future__ import annotations

import pytest

from lorafleet import (
    Assign,
    Fail,
    Fault,
    Grant,
    How,
    InvalidValueError,
    IssueLoad,
    LoadFinished,
    LoadOutcome,
    Placed,
    Placement,
    ReadEngine,
    ReadListing,
    Released,
    ReplicaFailed,
    ReplicasRemoved,
    Routed,
    TimeAdvanced,
)
from lorafleet._machine import no_replica_message

from .helpers import another_routers, routed
from scenario import Scenario, loads


def test_route_places_assigns_and_admits() -> None:
    s = Scenario.with_replicas(("r0", 1), ("r1", 1))
    ticket, commands = routed(s, "a")
    placement = commands[0]
    assert isinstance(placement, Assign)
    assert placement.placed is Placed.FREE
    (load,) = commands[1:]
    assert isinstance(load, IssueLoad)
    assert load.replica == placement.replica
    s.expect(LoadFinished(load=load.load, outcome=LoadOutcome.LOADED), Grant(ticket=ticket, how=How.LOADED))
    again, commands = routed(s, "a")
    assert commands == [
        Assign(ticket=again, replica=placement.replica, placed=Placed.HELD),
        Grant(ticket=again, how=How.HIT),
    ]


def test_route_with_now_is_the_time_then_the_request() -> None:
    """[route] A routed request may carry the shell's clock: the event is [time] first, its commands
    first, so that placement sees a replica whose backoff that time ended."""
    s = Scenario.with_replicas(("r0", 2), ("r1", 2))
    s.expect(ReplicaFailed(replica="r1"))  # avoided until 5 s
    ticket, commands = routed(s, "a", now=4.0)
    assert commands[0] == Assign(ticket=ticket, replica="r0", placed=Placed.FREE)
    ticket, commands = routed(s, "b", exclude=("r0",), now=5.0)  # r1 is back
    assert commands[0] == Assign(ticket=ticket, replica="r1", placed=Placed.FREE)
    ticket, commands = routed(s, "c", exclude=("r0",), now=30.0)  # listings fall due: they go first
    assert commands[:3] == [
        ReadListing(listing=5, replica="r0"),  # loads of a and b took 3 and 4
        ReadListing(listing=6, replica="r1"),
        Assign(ticket=ticket, replica="r1", placed=Placed.FREE),
    ]
    assert s.machine.next_due() == 60.0


def test_route_with_now_is_time_advanced_and_routed_in_one() -> None:
    """[route] The same events with the time on its own give the same commands, in the same order."""
    one = Scenario.with_replicas(("r0", 1), ("r1", 1))
    two = Scenario.with_replicas(("r0", 1), ("r1", 1))
    for s in (one, two):
        s.expect(ReplicaFailed(replica="r0"))
    for adapter, now in (("a", 1.0), ("b", 5.0), ("c", 30.0), ("d", 30.0)):
        _, together = routed(one, adapter, now=now)
        apart = two(TimeAdvanced(now=now))
        _, routed_apart = routed(two, adapter)
        assert together == apart + routed_apart
    assert one.machine.statistics() == two.machine.statistics()


def test_route_excluded_replicas_and_none_left() -> None:
    s = Scenario.with_replicas(("r0", 1), ("r1", 1))
    ticket, commands = routed(s, "a", exclude=("r0",))
    assert commands[0] == Assign(ticket=ticket, replica="r1", placed=Placed.FREE)
    ticket, commands = routed(s, "b", exclude=("r0", "r1"))
    assert commands == [Fail(ticket=ticket, fault=Fault.REPLICA, message=no_replica_message("b", None))]
    assert s.machine.statistics().failures == {"replica": 1}


def test_route_reads_a_full_replica_then_places_again() -> None:
    s = Scenario.reading(("r0", 1), ("r1", 1), headroom=0)
    s.expect(Released(ticket=s.load("r0", "a")))
    s.expect(Released(ticket=s.load("r1", "b")))
    another_routers(s)
    assert s.machine.place("c") == Placement(replica="r0", placed=Placed.EVICT)
    ticket, commands = routed(s, "c")
    assert commands == [ReadEngine(read=s.reads["r0"], replica="r0")]
    # a runs on r0 for another router: placed again, c would wait at r0's cap, so it goes to r1,
    # which is read in its turn before its b is evicted.
    assert s.answer_read("r0", ["a"]) == [ReadEngine(read=s.reads["r1"], replica="r1")]
    commands = s.answer_read("r1", [])
    assert commands[0] == Assign(ticket=ticket, replica="r1", placed=Placed.EVICT)
    assert [c.adapter for c in loads(commands)] == ["c"]
    assert s.machine.statistics().replicas["r1"].unloading == ("b",)


def test_route_a_removal_places_the_waiting_request_again() -> None:
    s = Scenario.reading(("r0", 1), ("r1", 1), headroom=0)
    s.expect(Released(ticket=s.load("r0", "a")))
    s.expect(Released(ticket=s.load("r1", "b")))
    another_routers(s)
    ticket, commands = routed(s, "c")
    assert commands == [ReadEngine(read=s.reads["r0"], replica="r0")]
    # Removed while the request waits for its read: placed anew, on r1, read first as well.
    assert s(ReplicasRemoved(replicas=("r0",))) == [ReadEngine(read=s.reads["r1"], replica="r1")]
    commands = s.answer_read("r1", [])
    assert commands[0] == Assign(ticket=ticket, replica="r1", placed=Placed.EVICT)


def test_route_a_refused_adapter_fails_at_once_without_a_replica() -> None:
    s = Scenario.with_replicas(("r", 1))
    ticket, commands = routed(s, "bad")
    (load,) = commands[1:]
    assert isinstance(load, IssueLoad)
    s.expect(
        LoadFinished(load=load.load, outcome=LoadOutcome.ADAPTER_FAULT, message="rank 64"),
        Fail(ticket=ticket, fault=Fault.ADAPTER, message="rank 64"),
    )
    again, commands = routed(s, "bad")
    assert commands == [Fail(ticket=again, fault=Fault.ADAPTER, message="rank 64")]


def test_route_a_routed_request_of_the_wrong_kind_is_refused() -> None:
    s = Scenario.with_replicas(("r", 1))
    for event in (
        Routed(ticket=1, adapter="", path="/a"),
        Routed(ticket=1, adapter="a", path=""),
        Routed(ticket=1, adapter="a", path="/a", model=""),
        Routed(ticket=1, adapter="a", path="/a", exclude="r"),  # type: ignore[arg-type]
        Routed(ticket=1, adapter="a", path="/a", exclude=("",)),
    ):
        with pytest.raises(InvalidValueError):
            s(event)
    assert s.machine.next_ticket == 1

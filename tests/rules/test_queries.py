"""[view], [statistics] and [order] (SPEC.md §3.11): the queries, and the same events giving the same
commands."""

from __future__ import annotations

from lorafleet import (
    Fail,
    Fault,
    LoadFinished,
    LoadOutcome,
    ReadListing,
    Released,
    ReplicaAdded,
    ReplicasRemoved,
    ReplicaStatistics,
    Requested,
    TimeAdvanced,
    View,
)

from scenario import Scenario, loads

# -- [view] ----------------------------------------------------------------------------------------


def test_view_says_who_holds_and_who_has_room() -> None:
    s = Scenario.with_replicas(("full", 1), ("loading", 2), ("empty", 2))
    s.load("full", "a")
    s.request("loading", "a")
    assert s.machine.view(["full", "loading", "empty", "unmet"], "a") == View(
        holders=frozenset({"full", "loading"}), with_room=frozenset({"loading", "empty", "unmet"})
    )


# -- [statistics] ----------------------------------------------------------------------------------


def test_statistics_count_loads_evictions_grants_and_what_each_replica_holds() -> None:
    """b's load takes a's room and fails: a is held again, and nothing was evicted."""
    s = Scenario.with_replicas(("r", 1), headroom=0)
    a = s.load("r", "a")
    s.expect(Released(ticket=s.hit("r", "a")))
    s.expect(Released(ticket=a))
    _t, commands = s.request("r", "b")
    _joined, _ = s.request("r", "b")
    assert s.machine.statistics().replicas["r"].unloading == ("a",)
    s(LoadFinished(load=loads(commands)[0].load, outcome=LoadOutcome.REPLICA_FAULT, message="500"))
    stats = s.machine.statistics()
    assert stats.loads == {("base", "loaded"): 1, ("base", "replica_fault"): 1}
    assert stats.evictions == {}
    assert stats.grants == {"hit": 1, "joined": 0, "loaded": 1}
    assert stats.failures == {"replica": 2}
    assert stats.replicas == {
        "r": ReplicaStatistics(
            model="base", limit=1, met=True, held={"a": 0}, loading=(), unloading=(), failing_until=5.0
        )
    }
    assert (stats.waiting, stats.leases) == (0, 0)


def test_statistics_always_show_every_grant_kind_and_other_counts_once_counted() -> None:
    """``grants`` always has its three kinds, zeros included; ``loads``, ``evictions`` and
    ``failures`` have a key only once something was counted under it; removed replicas are not listed."""
    s = Scenario()
    empty = s.machine.statistics()
    assert (empty.loads, empty.evictions, empty.failures, empty.replicas) == ({}, {}, {}, {})
    assert empty.grants == {"hit": 0, "joined": 0, "loaded": 0}
    s.expect(ReplicaAdded(replica="r", model="base", limit=2), ReadListing(listing=1, replica="r"))
    s.expect(ReplicaAdded(replica="q", model="base", limit=2), ReadListing(listing=2, replica="q"))
    t, _ = s.request("r", "a")
    s.expect(
        LoadFinished(load=3, outcome=LoadOutcome.ADAPTER_FAULT, message="bad rank"),
        Fail(ticket=t, fault=Fault.ADAPTER, message="bad rank"),
    )
    s.expect(ReplicasRemoved(replicas=("q",)))
    stats = s.machine.statistics()
    assert stats.loads == {("base", "adapter_fault"): 1}
    assert (stats.evictions, stats.failures) == ({}, {"adapter": 1})
    assert list(stats.replicas) == ["r"]


# -- [order] ---------------------------------------------------------------------------------------


def test_the_same_events_give_the_same_commands() -> None:
    def play() -> list[object]:
        s = Scenario.with_replicas(("r", 2), ("q", 1))
        for i in range(6):
            s.request("rq"[i % 2], f"a{i % 3}")
        s(TimeAdvanced(now=31.0))
        s(Requested(ticket=100, replica="q", adapter="zz", path="/p"))
        return [step.commands for step in s.steps]

    assert play() == play()

"""[elsewhere]: what the engine says runs on a replica, from any router, is never a victim."""

from __future__ import annotations

import pytest

from lorafleet import (
    InvalidValueError,
    IssueLoad,
    IssueUnload,
    ListingReceived,
    LoadFinished,
    LoadOutcome,
    Placed,
    Placement,
    ReadListing,
    Released,
    ReplicaAdded,
    ReplicasRemoved,
    RunningReported,
    TimeAdvanced,
    UnloadFinished,
    UnloadOutcome,
)

from scenario import Scenario, loads, unloads


def idle_pair(s: Scenario, replica: str = "r") -> None:
    """``replica`` holds a then b, both idle, a the least recently used."""
    s.expect(Released(ticket=s.load(replica, "a")))
    s.expect(Released(ticket=s.load(replica, "b")))


def test_elsewhere_an_adapter_the_engine_reports_running_is_no_victim() -> None:
    s = Scenario.with_replicas(("r", 2))
    idle_pair(s)
    s.expect(RunningReported(replica="r", adapters=("a",)))
    # a is the least recently used here, but another router runs requests on it: b goes.
    _ticket, commands = s.request("r", "c")
    assert [u.adapter for u in unloads(commands)] == ["b"]


def test_elsewhere_when_every_idle_adapter_is_reported_the_load_goes_over_the_limit() -> None:
    s = Scenario.with_replicas(("r", 2))
    idle_pair(s)
    s.expect(RunningReported(replica="r", adapters=("b", "a", "zz")))  # zz: not held here
    _ticket, commands = s.request("r", "c")
    assert [c.adapter for c in loads(commands)] == ["c"]
    assert len(commands) == 1


def test_elsewhere_the_next_report_replaces_it_and_frees_the_rest_most_recently_used() -> None:
    s = Scenario.with_replicas(("r", 2))
    idle_pair(s)
    s.expect(RunningReported(replica="r", adapters=("a",)))
    s.expect(RunningReported(replica="r", adapters=()))
    # a ran last (on the engine, for someone): b is now the least recently used.
    _ticket, commands = s.request("r", "c")
    assert [u.adapter for u in unloads(commands)] == ["b"]


def test_elsewhere_an_adapter_in_use_here_stays_in_use_when_the_report_drops_it() -> None:
    s = Scenario.with_replicas(("r", 1))
    t = s.load("r", "a")
    s.expect(RunningReported(replica="r", adapters=("a",)))
    s.expect(RunningReported(replica="r", adapters=()))
    _ticket, commands = s.request("r", "b")
    assert unloads(commands) == []  # a's request has not ended
    s.expect(Released(ticket=t))


def test_elsewhere_a_release_or_a_load_leaves_a_reported_adapter_out_of_idle() -> None:
    s = Scenario.with_replicas(("r", 2))
    s.expect(RunningReported(replica="r", adapters=("a", "b")))
    t = s.load("r", "a")
    s.expect(Released(ticket=t))
    _t, commands = s.request("r", "b")
    (load,) = loads(commands)
    s(LoadFinished(load=load.load, outcome=LoadOutcome.LOADED))
    _t, commands = s.request("r", "c")
    assert unloads(commands) == []


def test_elsewhere_a_listing_brings_in_reported_adapters_not_idle() -> None:
    s = Scenario.with_replicas(("r", 1), listed=False)
    s.expect(RunningReported(replica="r", adapters=("x",)))
    s(ListingReceived(listing=1, adapters=("x", "y")))
    # y is the only victim: x runs on the engine.
    _ticket, commands = s.request("r", "c")
    assert [u.adapter for u in unloads(commands)] == ["y"]


def test_elsewhere_placement_does_not_count_reported_adapters_as_idle() -> None:
    s = Scenario.with_replicas(("r0", 1), ("r1", 1))
    s.expect(Released(ticket=s.load("r0", "a")))
    s.expect(Released(ticket=s.load("r1", "b")))
    assert s.machine.place("c") == Placement(replica="r0", placed=Placed.EVICT)
    s.expect(RunningReported(replica="r0", adapters=("a",)))
    # a runs on r0 for another router: nothing there is idle, so a load evicts nothing (over the limit,
    # within the overflow), which placement prefers to evicting b on r1.
    assert s.machine.place("c") == Placement(replica="r0", placed=Placed.OVER)
    assert s.machine.place("c", exclude={"r0"}) == Placement(replica="r1", placed=Placed.EVICT)
    s.expect(RunningReported(replica="r1", adapters=("b",)))
    assert s.machine.place("c", exclude={"r0"}).placed is Placed.OVER


def test_elsewhere_at_the_cap_a_report_that_frees_an_adapter_admits_the_queue() -> None:
    s = Scenario.configured(headroom=0)
    (listing,) = s(ReplicaAdded(replica="r", model="base", limit=1))
    assert isinstance(listing, ReadListing)
    s(ListingReceived(listing=listing.listing, adapters=()))
    s.expect(Released(ticket=s.load("r", "a")))
    s.expect(RunningReported(replica="r", adapters=("a",)))
    _ticket, commands = s.request("r", "b")
    assert commands == []  # a runs elsewhere: no room under the cap
    (unload,) = s(RunningReported(replica="r", adapters=()))
    assert isinstance(unload, IssueUnload)
    assert unload.adapter == "a"
    (load,) = s(UnloadFinished(unload=unload.unload, outcome=UnloadOutcome.UNLOADED))
    assert isinstance(load, IssueLoad)
    assert load.adapter == "b"


def test_elsewhere_reports_for_a_replica_not_in_use_change_nothing() -> None:
    s = Scenario.with_replicas(("r", 1))
    s.expect(Released(ticket=s.load("r", "a")))
    s.expect(RunningReported(replica="gone", adapters=("a",)))
    s.expect(RunningReported(replica="r", adapters=("a",)))
    s.expect(ReplicasRemoved(replicas=("r",)))
    s.expect(TimeAdvanced(now=1.0))
    (listing,) = s(ReplicaAdded(replica="r", model="base", limit=1))
    assert isinstance(listing, ReadListing)
    s(ListingReceived(listing=listing.listing, adapters=("a",)))
    # The report was about the engine before the removal: a is a victim again.
    _ticket, commands = s.request("r", "b")
    assert [u.adapter for u in unloads(commands)] == ["a"]


def test_elsewhere_a_report_of_the_wrong_kind_is_refused() -> None:
    s = Scenario.with_replicas(("r", 1))
    for event in (
        RunningReported(replica="", adapters=()),
        RunningReported(replica="r", adapters="a"),  # type: ignore[arg-type]
        RunningReported(replica="r", adapters=("a", "")),
        RunningReported(replica=3, adapters=(4,)),  # type: ignore[arg-type]
    ):
        with pytest.raises(InvalidValueError):
            s(event)

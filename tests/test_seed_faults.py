"""The Go seed's known faults (../shared/seed/NOTES.md, 1 to 7): each scenario fails on its behaviour.

Fault 8 (classifying engine errors by status alone) is the wire protocol's, tested with it.
"""

from __future__ import annotations

from lorafleet import (
    AdapterMissing,
    Cancelled,
    Grant,
    How,
    IssueLoad,
    ListingReceived,
    LoadFinished,
    LoadOutcome,
    ReadListing,
    Released,
    ReplicaAdded,
    ReplicasRemoved,
    TimeAdvanced,
)

from scenario import Scenario, landed, loads, unloaded, unloads


def test_fault_1_a_listing_does_not_re_add_an_adapter_whose_unload_is_in_flight() -> None:
    s = Scenario.with_replicas(("r", 1))
    s.expect(Released(ticket=s.load("r", "a")))
    _, commands = s.request("r", "b")
    (unload,) = unloads(s(landed(loads(commands)[0])))  # b landed: a goes
    (listing,) = s(TimeAdvanced(now=30.0))
    assert isinstance(listing, ReadListing)
    s.expect(ListingReceived(listing=listing.listing, adapters=("a", "b")))
    # The seed would now grant "hit" on a, which the engine is about to drop.
    _t, commands = s.request("r", "a")
    assert commands == []
    assert s.machine.statistics().replicas["r"].held == {"b": 1}
    (load,) = s(unloaded(unload))  # the request for a loads it afresh
    assert isinstance(load, IssueLoad)
    assert load.adapter == "a"
    assert s.machine.statistics().waiting == 1


def test_fault_2_an_adapter_being_unloaded_is_never_chosen_as_a_victim_again() -> None:
    s = Scenario.with_replicas(("r", 1))
    s.expect(Released(ticket=s.load("r", "a")))
    b, commands = s.request("r", "b")
    (unload,) = unloads(s(landed(loads(commands)[0])))  # b landed: a goes
    (listing,) = s(TimeAdvanced(now=30.0))
    assert isinstance(listing, ReadListing)
    s(ListingReceived(listing=listing.listing, adapters=("a", "b")))
    waiter, _ = s.request("r", "a")
    s.expect(Released(ticket=b))
    # In the seed the next load would pick a again: a second unload, a waiter never woken, and a
    # crash when the second unload closes a closed channel. Here b, idle, is the one to go.
    c, commands = s.request("r", "c")
    commands = s(landed(loads(commands)[0]))
    assert commands[0] == Grant(ticket=c, how=How.LOADED)
    assert [u.adapter for u in unloads(commands)] == ["b"]
    # The one unload of a finishes once, and the a waiter starts a's load afresh.
    (load_a,) = loads(s(unloaded(unload)))
    assert load_a.adapter == "a"
    s.expect(landed(load_a), Grant(ticket=waiter, how=How.LOADED))


def test_fault_3_a_listing_naming_an_adapter_being_loaded_does_not_count_it_twice() -> None:
    s = Scenario.with_replicas(("r", 2))
    first, commands = s.request("r", "a")
    (load,) = loads(commands)
    (listing,) = s(TimeAdvanced(now=30.0))
    assert isinstance(listing, ReadListing)
    s.expect(ListingReceived(listing=listing.listing, adapters=("a",)))
    assert s.machine.view(["r"], "x").with_room == frozenset({"r"})  # counted once
    # The seed would grant "hit" before the load is confirmed, then lose this request's use.
    second, commands = s.request("r", "a")
    assert commands == []
    s.expect(
        LoadFinished(load=load.load, outcome=LoadOutcome.LOADED),
        Grant(ticket=first, how=How.LOADED),
        Grant(ticket=second, how=How.JOINED),
    )
    assert s.machine.statistics().replicas["r"].held == {"a": 2}


def test_fault_4_an_adapter_being_loaded_is_never_unloaded() -> None:
    s = Scenario.with_replicas(("r", 1))
    _, commands = s.request("r", "a")
    (listing,) = s(TimeAdvanced(now=30.0))
    assert isinstance(listing, ReadListing)
    s(ListingReceived(listing=listing.listing, adapters=("a",)))
    # In the seed the listed-while-loading entry is the first victim: an unload that crosses the load.
    _, commands = s.request("r", "b")
    assert unloads(commands) == []


def test_fault_5_removing_a_replica_during_a_load_never_allows_a_second_load() -> None:
    s = Scenario.with_replicas(("r", 2))
    _, commands = s.request("r", "a")
    (load,) = loads(commands)
    s(ReplicasRemoved(replicas=("r",)))
    s(ReplicaAdded(replica="r", model="base", limit=2))
    t, commands = s.request("r", "a")
    assert loads(commands) == []  # the seed would start a second load of a on r
    s.expect(LoadFinished(load=load.load, outcome=LoadOutcome.LOADED), Grant(ticket=t, how=How.JOINED))


def test_fault_6_forget_respects_requests_running_on_the_adapter() -> None:
    s = Scenario.with_replicas(("r", 1))
    # A late "no such model" from a request that ran on an older copy of a, reported while a new
    # request runs on a: the seed drops a, and it could then be unloaded under that request. The
    # report names its request's ticket, whose lease is on the older copy: it changes nothing.
    first = s.load("r", "a")
    s(AdapterMissing(replica="r", adapter="a", ticket=first))  # the engine lost the first copy
    s.load("r", "a")
    s(AdapterMissing(replica="r", adapter="a", ticket=first))  # late, about the first copy
    assert s.machine.statistics().replicas["r"].held == {"a": 1}
    _, commands = s.request("r", "b")
    assert unloads(commands) == []


def test_fault_7_a_request_cancelled_before_its_load_is_issued_does_not_load() -> None:
    """Headroom 0: b's load waits for a's unload before it goes out."""
    s = Scenario.with_replicas(("r", 1), headroom=0)
    s.expect(Released(ticket=s.load("r", "a")))
    t, commands = s.request("r", "b")
    (unload,) = unloads(commands)
    s(Cancelled(ticket=t))
    s.expect(unloaded(unload))  # no IssueLoad: no one wants b any more
    assert s.machine.statistics().replicas["r"].loading == ()
    _t2, commands = s.request("r", "b")
    assert commands == [IssueLoad(load=5, replica="r", adapter="b", path="/adapters/b")]

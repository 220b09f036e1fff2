"""[renew] (SPEC.md §3.17): an adapter whose files changed is never granted from a copy loaded before."""

from __future__ import annotations

import pytest

from lorafleet import (
    AdapterChanged,
    AdapterMissing,
    AdapterPinned,
    Assign,
    Cancelled,
    Fail,
    Fault,
    Grant,
    How,
    InvalidValueError,
    IssueLoad,
    IssueUnload,
    ListingReceived,
    LoadFinished,
    LoadOutcome,
    MarkMet,
    Placed,
    Placement,
    ReadEngine,
    ReadListing,
    Released,
    ReplicaAdded,
    ReplicasRemoved,
    Routed,
    TimeAdvanced,
    UnloadFinished,
    UnloadOutcome,
)

from scenario import Scenario, loads


def test_renew_unloads_an_idle_copy_at_once_and_the_next_request_loads_the_new_files() -> None:
    s = Scenario.with_replicas(("r", 2))
    t1 = s.load("r", "a")  # load 2
    s.expect(Released(ticket=t1))
    s.expect(AdapterChanged(adapter="a"), IssueUnload(unload=3, replica="r", adapter="a"))
    t2, commands = s.request("r", "a")
    assert commands == []  # [wait-unload]: the old copy goes first
    s.expect(
        UnloadFinished(unload=3, outcome=UnloadOutcome.UNLOADED),
        IssueLoad(load=4, replica="r", adapter="a", path="/adapters/a"),
    )
    s.expect(LoadFinished(load=4, outcome=LoadOutcome.LOADED), Grant(ticket=t2, how=How.LOADED))


def test_renew_unloads_a_copy_in_use_when_its_last_request_ends_and_grants_none_from_it() -> None:
    s = Scenario.with_replicas(("r", 2))
    t1 = s.load("r", "a")
    s.expect(AdapterChanged(adapter="a"))  # a request runs on it: never an unload under it
    assert not s.machine.hit(s.ticket + 1, replica="r", adapter="a")  # the fast path says no too
    t2, commands = s.request("r", "a")
    assert commands == []
    stats = s.machine.statistics().replicas["r"]
    assert (stats.held, stats.unloading) == ({"a": 1}, ("a",))  # held, and being replaced
    s.expect(Released(ticket=t1), IssueUnload(unload=3, replica="r", adapter="a"))
    s.expect(
        UnloadFinished(unload=3, outcome=UnloadOutcome.UNLOADED),
        IssueLoad(load=4, replica="r", adapter="a", path="/adapters/a"),
    )
    s.expect(LoadFinished(load=4, outcome=LoadOutcome.LOADED), Grant(ticket=t2, how=How.LOADED))


def test_renew_places_a_routed_request_away_from_the_old_copy_while_it_drains() -> None:
    """The old copy is no holder: placement loads the new files where it would load a cold adapter."""
    s = Scenario.with_replicas(("r0", 2), ("r1", 2))
    t1 = s.load("r0", "a")
    s.expect(AdapterChanged(adapter="a"))
    assert s.machine.place("a") == Placement(replica="r1", placed=Placed.FREE)
    assert s.machine.view(["r0", "r1"], "a").holders == frozenset()
    s.ticket += 1
    s.expect(
        Routed(ticket=s.ticket, adapter="a", path="/adapters/a"),
        Assign(ticket=s.ticket, replica="r1", placed=Placed.FREE),
        IssueLoad(load=4, replica="r1", adapter="a", path="/adapters/a"),
    )
    s.expect(Released(ticket=t1), IssueUnload(unload=5, replica="r0", adapter="a"))


def test_renew_with_only_the_old_copys_replica_a_routed_request_is_parked_until_it_goes() -> None:
    """[place]'s last resort: rather than fail, the request waits, unassigned, for the old copy to
    go; placed once it is dropped, it loads the new files there."""
    s = Scenario.with_replicas(("r", 2))
    t1 = s.load("r", "a")
    s.expect(AdapterChanged(adapter="a"))
    assert s.machine.place("a") == Placement(replica="r", placed=Placed.WAIT)
    t2 = s.ticket = s.ticket + 1
    s.expect(Routed(ticket=t2, adapter="a", path="/adapters/a"))  # parked: no assign yet
    stats = s.machine.statistics()
    assert (stats.waiting, stats.replicas["r"].in_flight) == (1, 1)  # counted on no replica
    # Its last request ends: the old copy is dropped, so r is a cold candidate, where the request
    # waits for the unload ([wait-unload]).
    s.expect(
        Released(ticket=t1),
        IssueUnload(unload=3, replica="r", adapter="a"),
        Assign(ticket=t2, replica="r", placed=Placed.FREE),
    )
    s.expect(
        UnloadFinished(unload=3, outcome=UnloadOutcome.UNLOADED),
        IssueLoad(load=4, replica="r", adapter="a", path="/adapters/a"),
    )
    s.expect(LoadFinished(load=4, outcome=LoadOutcome.LOADED), Grant(ticket=t2, how=How.LOADED))


def test_renew_a_parked_request_goes_where_the_first_old_copy_goes_not_behind_a_long_one() -> None:
    """Both copies are old and in use (r0's by a long stream): the request is parked, and placed on
    r1 as soon as r1's copy is dropped, loading the new files there, while r0's stream runs on."""
    s = Scenario.with_replicas(("r0", 2), ("r1", 2))
    stream = s.load("r0", "a")  # load 3
    short = s.load("r1", "a")  # load 4
    s.expect(AdapterChanged(adapter="a"))
    t3 = s.ticket = s.ticket + 1
    s.expect(Routed(ticket=t3, adapter="a", path="/adapters/a"))
    t4 = s.ticket = s.ticket + 1
    s.expect(Routed(ticket=t4, adapter="a", path="/adapters/a"))
    s.expect(
        Released(ticket=short),
        IssueUnload(unload=5, replica="r1", adapter="a"),
        Assign(ticket=t3, replica="r1", placed=Placed.FREE),  # parked ones in ticket order
        Assign(ticket=t4, replica="r1", placed=Placed.FREE),
    )
    s.expect(
        UnloadFinished(unload=5, outcome=UnloadOutcome.UNLOADED),
        IssueLoad(load=6, replica="r1", adapter="a", path="/adapters/a"),
    )
    s.expect(
        LoadFinished(load=6, outcome=LoadOutcome.LOADED),
        Grant(ticket=t3, how=How.LOADED),
        Grant(ticket=t4, how=How.JOINED),
    )
    s.expect(Released(ticket=stream), IssueUnload(unload=7, replica="r0", adapter="a"))


def test_renew_a_parked_request_cancelled_ends_and_one_with_nowhere_left_fails() -> None:
    s = Scenario.with_replicas(("r", 2))
    t1 = s.load("r", "a")
    s.expect(AdapterChanged(adapter="a"))
    t2 = s.ticket = s.ticket + 1
    s.expect(Routed(ticket=t2, adapter="a", path="/adapters/a"))
    s.expect(Cancelled(ticket=t2))
    assert s.machine.statistics().waiting == 0
    t3 = s.ticket = s.ticket + 1
    s.expect(Routed(ticket=t3, adapter="a", path="/adapters/a"))
    s.expect(
        ReplicasRemoved(replicas=("r",)),
        Fail(
            ticket=t3,
            fault=Fault.REPLICA,
            message="no replica to place 'a' on: each is failing, excluded, or not in use",
        ),
    )
    s.expect(Released(ticket=t1))


def test_renew_a_load_out_grants_its_waiters_then_goes_and_later_requests_wait_for_that() -> None:
    """Requests that joined before the change are served by the copy they asked for; no request
    after the change joins it."""
    s = Scenario.with_replicas(("r", 2))
    t1, _ = s.request("r", "a")  # load 2
    s.expect(AdapterChanged(adapter="a"))
    t2, commands = s.request("r", "a")
    assert commands == []  # not joined: it waits for the old copy to go
    s.expect(LoadFinished(load=2, outcome=LoadOutcome.LOADED), Grant(ticket=t1, how=How.LOADED))
    s.expect(Released(ticket=t1), IssueUnload(unload=3, replica="r", adapter="a"))
    s.expect(
        UnloadFinished(unload=3, outcome=UnloadOutcome.UNLOADED),
        IssueLoad(load=4, replica="r", adapter="a", path="/adapters/a"),
    )
    s.expect(LoadFinished(load=4, outcome=LoadOutcome.LOADED), Grant(ticket=t2, how=How.LOADED))


def test_renew_a_load_out_with_no_waiter_left_is_unloaded_as_it_lands() -> None:
    s = Scenario.with_replicas(("r", 2))
    t1, _ = s.request("r", "a")
    s.expect(AdapterChanged(adapter="a"))
    s.expect(Cancelled(ticket=t1))
    s.expect(
        LoadFinished(load=2, outcome=LoadOutcome.LOADED), IssueUnload(unload=3, replica="r", adapter="a")
    )


def test_renew_a_load_out_that_fails_refuses_nothing_and_the_waiting_request_loads_the_new_files() -> None:
    s = Scenario.with_replicas(("r0", 2), ("r1", 2))
    t1, _ = s.request("r0", "a")  # load 3
    s.expect(AdapterChanged(adapter="a"))
    t2, _ = s.request("r0", "a")
    s.expect(
        LoadFinished(load=3, outcome=LoadOutcome.ADAPTER_FAULT, message="bad old files"),
        Fail(ticket=t1, fault=Fault.ADAPTER, message="bad old files"),
        IssueLoad(load=4, replica="r0", adapter="a", path="/adapters/a"),
    )
    _, commands = s.request("r1", "a")  # the old files' refusal was never recorded
    assert commands == [IssueLoad(load=5, replica="r1", adapter="a", path="/adapters/a")]
    s.expect(LoadFinished(load=4, outcome=LoadOutcome.LOADED), Grant(ticket=t2, how=How.LOADED))


def test_renew_a_victim_whose_load_fails_is_unloaded_not_held_again() -> None:
    """[evict] holds a spared victim again where it was, unless it changed meanwhile."""
    s = Scenario.with_replicas(("r", 1))
    s.expect(Released(ticket=s.load("r", "a")))
    t2, commands = s.request("r", "b")  # takes a's room: a's unload waits for b's load
    assert commands == [IssueLoad(load=3, replica="r", adapter="b", path="/adapters/b")]
    s.expect(AdapterChanged(adapter="a"))
    s.expect(
        LoadFinished(load=3, outcome=LoadOutcome.REPLICA_FAULT, message="engine down"),
        Fail(ticket=t2, fault=Fault.REPLICA, message="engine down"),
        IssueUnload(unload=4, replica="r", adapter="a"),
    )
    assert s.machine.statistics().replicas["r"].held == {}


def test_renew_an_old_copy_another_routers_requests_run_on_goes_once_no_reading_names_it() -> None:
    s = Scenario.reading(("r", 2))
    s.expect(Released(ticket=s.load("r", "a")))
    assert s.list_and_read(30.0, "r", ["a"], ["a"]) == []  # another router's requests run on it
    # Never an unload under a running request. [read]: what runs there now?
    (read,) = s(AdapterChanged(adapter="a"))
    assert isinstance(read, ReadEngine)
    _, commands = s.request("r", "a")
    assert commands == []
    assert s.answer_read("r", ()) == [IssueUnload(unload=read.read + 1, replica="r", adapter="a")]


def test_renew_a_listing_without_the_old_copy_lets_the_waiting_request_load_at_once() -> None:
    s = Scenario.with_replicas(("r", 2))
    s.load("r", "a")
    s.expect(AdapterChanged(adapter="a"))
    t2, _ = s.request("r", "a")
    (listing,) = s(TimeAdvanced(now=30.0))
    assert isinstance(listing, ReadListing)
    s.expect(
        ListingReceived(listing=listing.listing, adapters=()),
        IssueLoad(load=4, replica="r", adapter="a", path="/adapters/a"),
    )
    s.expect(LoadFinished(load=4, outcome=LoadOutcome.LOADED), Grant(ticket=t2, how=How.LOADED))


def test_renew_forgets_the_refusal() -> None:
    s = Scenario.with_replicas(("r", 2))
    t1, _ = s.request("r", "a")
    s.expect(
        LoadFinished(load=2, outcome=LoadOutcome.ADAPTER_FAULT, message="rank too high"),
        Fail(ticket=t1, fault=Fault.ADAPTER, message="rank too high"),
    )
    s.expect(AdapterChanged(adapter="a"))
    _, commands = s.request("r", "a")
    assert loads(commands) == [IssueLoad(load=3, replica="r", adapter="a", path="/adapters/a")]


def test_renew_a_pinned_copy_is_replaced_by_one_of_the_new_files() -> None:
    s = Scenario.with_replicas(("r", 2))
    s.expect(
        AdapterPinned(adapter="p", path="/adapters/p"),
        IssueLoad(load=2, replica="r", adapter="p", path="/adapters/p"),
    )
    s.expect(LoadFinished(load=2, outcome=LoadOutcome.LOADED))
    s.expect(AdapterChanged(adapter="p"), IssueUnload(unload=3, replica="r", adapter="p"))
    s.expect(
        UnloadFinished(unload=3, outcome=UnloadOutcome.UNLOADED),
        IssueLoad(load=4, replica="r", adapter="p", path="/adapters/p"),
    )


def test_renew_a_removed_replicas_old_copy_is_no_holder_when_it_is_added_back() -> None:
    s = Scenario.with_replicas(("r", 2))
    t1 = s.load("r", "a")
    s.expect(AdapterChanged(adapter="a"))
    s.expect(ReplicasRemoved(replicas=("r",)))
    (listing,) = s(ReplicaAdded(replica="r", model="base", limit=2))
    assert isinstance(listing, ReadListing)
    s.expect(ListingReceived(listing=listing.listing, adapters=("a",)), MarkMet(replica="r"))
    assert s.machine.view(["r"], "a").holders == frozenset()
    _, commands = s.request("r", "a")
    assert commands == []
    s.expect(Released(ticket=t1), IssueUnload(unload=4, replica="r", adapter="a"))


def test_renew_of_an_adapter_nowhere_changes_nothing_and_a_bad_name_is_an_error() -> None:
    s = Scenario.with_replicas(("r", 2))
    before = s.machine.statistics()
    s.expect(AdapterChanged(adapter="nowhere"))
    assert s.machine.statistics() == before
    with pytest.raises(InvalidValueError, match="adapter name must be a non-empty str"):
        s(AdapterChanged(adapter=""))


def test_renew_the_engine_saying_it_lacks_the_old_copy_lets_the_waiting_request_load_at_once() -> None:
    s = Scenario.with_replicas(("r", 2))
    t1 = s.load("r", "a")
    s.expect(AdapterChanged(adapter="a"))
    t2, _ = s.request("r", "a")
    s.expect(
        AdapterMissing(replica="r", adapter="a", ticket=t1),
        IssueLoad(load=3, replica="r", adapter="a", path="/adapters/a"),
    )
    s.expect(LoadFinished(load=3, outcome=LoadOutcome.LOADED), Grant(ticket=t2, how=How.LOADED))


def test_renew_an_old_copys_unload_answered_not_found_is_not_another_routers_adapter() -> None:
    """[share]: every router unloads the old copy; the one answered second lost no slot to another."""
    s = Scenario.with_replicas(("r", 4), routers=2)  # line 2: half the free slots
    s.expect(Released(ticket=s.load("r", "a")))
    s.expect(AdapterChanged(adapter="a"), IssueUnload(unload=3, replica="r", adapter="a"))
    s.expect(UnloadFinished(unload=3, outcome=UnloadOutcome.NOT_FOUND))
    s.load("r", "b")
    assert s.machine.view(["r"], "x").with_room == frozenset({"r"})  # one of its two slots left

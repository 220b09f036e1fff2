"""[listing] and [time] (SPEC.md §3.4): a replica is listed when first met and then every interval;
what a listing adds, drops, and leaves to the outcomes still out."""

from __future__ import annotations

from lorafleet import (
    AdapterMissing,
    Fail,
    Fault,
    Grant,
    How,
    IssueLoad,
    IssueUnload,
    LimitSet,
    ListingFailed,
    ListingReceived,
    LoadFinished,
    LoadOutcome,
    MarkMet,
    ReadEngine,
    ReadListing,
    Released,
    ReplicaAdded,
    ReplicasRemoved,
    StandingBy,
    TimeAdvanced,
    UnloadFinished,
    UnloadOutcome,
    View,
)
from lorafleet._machine import REPLICA_REMOVED

from .helpers import another_routers, held, read_each, read_now
from scenario import Scenario, landed, loads, unloaded, unloads


def listing_due(s: Scenario, now: float) -> ReadListing:
    (listing,) = s(TimeAdvanced(now=now))
    assert isinstance(listing, ReadListing)
    return listing


def test_listing_is_read_when_a_replica_is_first_met_and_then_every_interval() -> None:
    s = Scenario()
    s.expect(TimeAdvanced(now=100.0))
    s.expect(ReplicaAdded(replica="r", model="base", limit=2), ReadListing(listing=1, replica="r"))
    assert s.machine.next_due() == 130.0
    assert not s.machine.is_met("r")
    s.expect(ListingReceived(listing=1, adapters=()), MarkMet(replica="r"))
    assert s.machine.is_met("r")
    s.expect(TimeAdvanced(now=129.9))
    s.expect(TimeAdvanced(now=130.0), ReadListing(listing=2, replica="r"))
    assert s.machine.next_due() == 160.0
    # Still out when due again: no second listing, the next one waits an interval more.
    s.expect(TimeAdvanced(now=161.0))
    assert s.machine.next_due() == 191.0


def test_listing_adds_unknown_adapters_as_least_recently_used_of_all() -> None:
    s = Scenario.with_replicas(("r", 3), listed=False)
    s.expect(ListingReceived(listing=1, adapters=()), MarkMet(replica="r"))
    t = s.load("r", "mine")
    s.expect(Released(ticket=t))
    s.expect(TimeAdvanced(now=30.0), ReadListing(listing=3, replica="r"))
    s.expect(ListingReceived(listing=3, adapters=("mine", "theirs")))
    assert held(s, "r") == {"mine": 0, "theirs": 0}
    s.load("r", "x")
    y, commands = s.request("r", "y")
    commands = s(landed(loads(commands)[0]))
    assert commands[0] == Grant(ticket=y, how=How.LOADED)
    assert [u.adapter for u in unloads(commands)] == ["theirs"]


def test_listing_puts_what_it_adds_before_what_an_earlier_listing_added() -> None:
    """Both are in no demand; the newly listed one goes to the very front of ``idle``, so it goes first."""
    s = Scenario.with_replicas(("r", 2), listed=False, headroom=0)
    s.expect(ListingReceived(listing=1, adapters=("old",)), MarkMet(replica="r"))
    (cmd,) = s(TimeAdvanced(now=30.0))
    assert isinstance(cmd, ReadListing)
    s.expect(ListingReceived(listing=cmd.listing, adapters=("new", "old")))
    _ticket, commands = s.request("r", "x")
    assert loads(commands) == commands
    assert s.machine.statistics().replicas["r"].unloading == ("new",)


def test_listing_drops_unlisted_adapters_held_before_it_started_in_use_or_not() -> None:
    s = Scenario.with_replicas(("r", 4))
    old, busy = s.load("r", "old"), s.load("r", "busy")
    s.expect(Released(ticket=old))
    s.expect(TimeAdvanced(now=30.0), ReadListing(listing=4, replica="r"))
    # Loaded after the listing started: the listing is older than the load, so it stays.
    s.load("r", "new")
    s.expect(ListingReceived(listing=4, adapters=()))
    # busy has a request running on it, but the engine said it does not have it: no unload (there
    # is nothing to unload), its lease goes dead, and the next request for it loads it.
    assert held(s, "r") == {"new": 1}
    s.expect(Released(ticket=busy))
    assert held(s, "r") == {"new": 1}
    _, commands = s.request("r", "busy")
    assert loads(commands) == [IssueLoad(load=6, replica="r", adapter="busy", path="/adapters/busy")]


def test_listing_of_an_adapter_lost_under_overlapping_requests_loads_it_again() -> None:
    # Issue 8, bug 1: requests for x overlap without pause when the engine loses x. The old rule
    # kept x held while any request ran on it, so every request was a hit and got a 404, forever.
    s = Scenario.with_replicas(("r", 2))
    running = s.load("r", "x")
    s.expect(TimeAdvanced(now=30.0), ReadListing(listing=3, replica="r"))
    also = s.hit("r", "x")
    s.expect(ListingReceived(listing=3, adapters=()))  # the engine restarted meanwhile
    s.expect(Released(ticket=running))
    ticket, commands = s.request("r", "x")  # still overlapping with also
    assert commands == [IssueLoad(load=4, replica="r", adapter="x", path="/adapters/x")]
    s.expect(LoadFinished(load=4, outcome=LoadOutcome.ALREADY_LOADED), Grant(ticket=ticket, how=How.LOADED))
    s.expect(Released(ticket=also))  # a lease on the lost copy: releasing it changes nothing
    assert held(s, "r") == {"x": 1}


def test_listing_leaves_loading_and_unloading_adapters_to_their_outcome() -> None:
    """b's load takes a's room: the listings see a on its way out (a victim, then its unload out) and
    b loading, and hold neither."""
    s = Scenario.with_replicas(("r", 1), headroom=0)
    s.expect(Released(ticket=s.load("r", "a")))
    t, commands = s.request("r", "b")
    (load,) = loads(commands)
    s.expect(TimeAdvanced(now=30.0), ReadListing(listing=4, replica="r"))
    s.expect(ListingReceived(listing=4, adapters=("a", "b")))  # a a victim, b loading
    assert held(s, "r") == {}
    s.expect(landed(load), Grant(ticket=t, how=How.LOADED), IssueUnload(unload=5, replica="r", adapter="a"))
    s.expect(TimeAdvanced(now=60.0), ReadListing(listing=6, replica="r"))
    s.expect(ListingReceived(listing=6, adapters=("a", "b")))  # a's unload in flight: not held again
    assert held(s, "r") == {"b": 1}
    s.expect(UnloadFinished(unload=5, outcome=UnloadOutcome.UNLOADED))
    assert held(s, "r") == {"b": 1}


def test_listing_does_not_bring_back_what_was_dropped_after_it_started() -> None:
    s = Scenario.with_replicas(("r", 1))
    s.expect(Released(ticket=s.load("r", "a")))
    s.expect(TimeAdvanced(now=30.0), ReadListing(listing=3, replica="r"))
    _t, commands = s.request("r", "b")
    (unload,) = unloads(s(landed(loads(commands)[0])))  # [settle]: a goes once b has landed
    s(unloaded(unload))
    s.expect(ListingReceived(listing=3, adapters=("a",)))  # a was there when the listing started, gone since
    assert "a" not in held(s, "r")


def test_listing_failed_changes_nothing_but_the_replica_counts_as_met() -> None:
    s = Scenario.with_replicas(("r", 2), listed=False)
    s.load("r", "a")
    s.expect(ListingFailed(listing=1, message="timed out"), MarkMet(replica="r"))
    assert s.machine.is_met("r")
    assert held(s, "r") == {"a": 1}
    assert s.machine.next_due() == 30.0


def test_listing_when_time_advances_starts_in_due_then_id_order() -> None:
    """Listings due together start in order of (due, replica id), not of replica id alone; a whole
    number of seconds is a time like any other."""
    s = Scenario()
    assert s.machine.next_due() is None
    s.expect(ReplicaAdded(replica="b", model="base", limit=1), ReadListing(listing=1, replica="b"))
    s.expect(TimeAdvanced(now=10))
    s.expect(ReplicaAdded(replica="c", model="base", limit=1), ReadListing(listing=2, replica="c"))
    s.expect(ReplicaAdded(replica="a", model="base", limit=1), ReadListing(listing=3, replica="a"))
    for listing in (1, 2, 3):
        s(ListingReceived(listing=listing, adapters=()))
    assert s.machine.next_due() == 30
    s.expect(
        TimeAdvanced(now=50),
        ReadListing(listing=4, replica="b"),  # due at 30
        ReadListing(listing=5, replica="a"),  # due at 40, and a < c
        ReadListing(listing=6, replica="c"),
    )
    assert s.machine.next_due() == 80


def test_listing_is_never_started_for_a_removed_replica_when_time_advances() -> None:
    """Only replicas in use are due: a removed replica kept for its calls starts no listing and has
    no due time; it is not met, and neither is a replica never added."""
    s = Scenario.with_replicas(("r", 2), ("q", 2))
    t, _ = s.request("r", "a")
    s.expect(ReplicasRemoved(replicas=("r",)), Fail(ticket=t, fault=Fault.REPLICA, message=REPLICA_REMOVED))
    assert not s.machine.is_met("r")
    assert not s.machine.is_met("nowhere")
    assert s.machine.is_met("q")
    s.expect(TimeAdvanced(now=30.0), ReadListing(listing=4, replica="q"))
    s.expect(ReplicasRemoved(replicas=("q",)))
    assert s.machine.next_due() is None
    s.expect(TimeAdvanced(now=90.0))
    assert s.machine.view(["r", "q"], "a") == View(holders=frozenset(), with_room=frozenset({"r", "q"}))


def test_listing_adds_names_in_code_point_order_and_once_each() -> None:
    """Name order is the order of Unicode code points (of UTF-8 bytes), not of UTF-16 code units;
    a name listed twice is held once."""
    s = Scenario.with_replicas(("r", 1), listed=False)
    smiley, halfwidth = "\U0001f600", "\uff61"  # in UTF-16, the smiley's first unit sorts first
    s.expect(ListingReceived(listing=1, adapters=(smiley, halfwidth, smiley)), MarkMet(replica="r"))
    assert held(s, "r") == {halfwidth: 0, smiley: 0}
    t, commands = s.request("r", "new")
    assert commands == [IssueLoad(load=2, replica="r", adapter="new", path="/adapters/new")]
    s.expect(
        LoadFinished(load=2, outcome=LoadOutcome.LOADED),
        Grant(ticket=t, how=How.LOADED),
        IssueUnload(unload=3, replica="r", adapter=halfwidth),
        IssueUnload(unload=4, replica="r", adapter=smiley),
    )


def test_listing_drops_an_adapter_held_before_it_started_that_went_idle_while_it_was_out() -> None:
    s = Scenario.with_replicas(("r", 2))
    t = s.load("r", "a")
    listing = listing_due(s, 30.0)  # served while a request runs on a
    s.expect(Released(ticket=t))  # a goes idle before the answer comes
    s.expect(ListingReceived(listing=listing.listing, adapters=()))
    assert held(s, "r") == {}
    _t, commands = s.request("r", "a")
    assert loads(commands) == [IssueLoad(load=4, replica="r", adapter="a", path="/adapters/a")]


def test_listing_keeps_an_adapter_that_became_held_after_it_started_even_once_idle() -> None:
    s = Scenario.with_replicas(("r", 2))
    listing = listing_due(s, 30.0)  # served before a was loaded
    s.expect(Released(ticket=s.load("r", "a")))
    s.expect(ListingReceived(listing=listing.listing, adapters=()))
    assert held(s, "r") == {"a": 0}


def test_listing_does_not_bring_back_an_adapter_whose_unload_ended_while_it_was_out() -> None:
    s = Scenario.with_replicas(("r", 1))
    s.expect(Released(ticket=s.load("r", "a")))
    t, commands = s.request("r", "b")
    (load,) = loads(commands)
    commands = s(LoadFinished(load=load.load, outcome=LoadOutcome.LOADED))
    assert commands[0] == Grant(ticket=t, how=How.LOADED)
    (unload,) = unloads(commands)  # [settle]: a goes once b has landed
    listing = listing_due(s, 30.0)  # the engine still lists a: its unload has not gone through
    s.expect(unloaded(unload))
    s.expect(ListingReceived(listing=listing.listing, adapters=("a", "b")))
    assert held(s, "r") == {"b": 1}


def test_listing_does_not_bring_back_an_adapter_the_engine_said_it_lacks_while_it_was_out() -> None:
    s = Scenario.with_replicas(("r", 2))
    s.expect(Released(ticket=s.load("r", "a")))
    listing = listing_due(s, 30.0)
    s.expect(AdapterMissing(replica="r", adapter="a"))
    s.expect(ListingReceived(listing=listing.listing, adapters=("a",)))
    assert held(s, "r") == {}


def test_listing_additions_go_first_in_name_order_whatever_order_the_engine_lists_them() -> None:
    s = Scenario.with_replicas(("r", 4))
    s.expect(Released(ticket=s.load("r", "mine")))
    listing = listing_due(s, 30.0)
    s.expect(ListingReceived(listing=listing.listing, adapters=("zeta", "mine", "alpha")))
    s.expect(LimitSet(model="base", limit=1))
    t, commands = s.request("r", "new")
    commands = s(LoadFinished(load=loads(commands)[0].load, outcome=LoadOutcome.LOADED))
    assert commands[0] == Grant(ticket=t, how=How.LOADED)
    assert [u.adapter for u in unloads(commands)] == ["alpha", "zeta", "mine"]
    assert [u.unload for u in unloads(commands)] == [5, 6, 7]


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


# -- [time]: shared replicas ---------------------------------------------------------------------


def list_and_read_nothing(s: Scenario, now: float) -> None:
    """Advance to ``now``, when r's listing is due; it lists what r holds and its engine runs nothing."""
    (listing,) = s(TimeAdvanced(now=now))
    assert isinstance(listing, ReadListing), listing
    assert listing.replica == "r"
    held = tuple(s.machine.statistics().replicas["r"].held)
    assert s(ListingReceived(listing=listing.listing, adapters=held)) == [
        ReadEngine(read=s.reads["r"], replica="r")
    ]
    assert s.answer_read("r", ()) == []


def test_time_a_replica_another_router_works_on_is_listed_every_shared_interval_for_a_listing_interval() -> (
    None
):
    """[time] A reading that shows another router's work on the replica brings its next listing to
    ``shared_interval`` from then, and keeps that pace until a listing interval after that reading,
    whatever the readings in between say."""
    s = Scenario.reading(("r", 2), shared_interval=0.5)
    assert s.machine.next_due() == 30.0
    another_routers(s, now=30.0)  # listed at 30, due at 60; then the reading names x, not ours
    assert s.machine.next_due() == 30.5
    list_and_read_nothing(s, 30.5)  # a reading of nothing: still shared, until 60
    assert s.machine.next_due() == 31.0
    list_and_read_nothing(s, 59.9)
    assert s.machine.next_due() == 60.4
    list_and_read_nothing(s, 60.4)  # past 60: the listing interval again
    assert s.machine.next_due() == 90.4


def test_time_a_router_alone_and_a_machine_without_shared_interval_keep_the_listing_interval() -> None:
    """[time] A reading that names only this router's requests, or any reading when ``shared_interval``
    is null, leaves the listing interval as it is."""
    alone = Scenario.reading(("r", 2), shared_interval=0.5)
    alone.expect(Released(ticket=alone.load("r", "a")))
    read_now(alone, "r", "a")  # a ran there on this router's request, which has just ended: foreign,
    reading = alone.machine.reading("r")  # but a is held here, so no other router's load
    assert reading is not None
    assert reading.foreign
    assert alone.machine.next_due() == 60.0
    unset = Scenario.reading(("r", 2))
    another_routers(unset, now=30.0)
    assert unset.machine.next_due() == 60.0


def test_time_an_adapter_this_router_is_loading_there_is_no_other_routers() -> None:
    """[time] The engine names an adapter while a request waits for its load: a reading that names
    one this router is loading there shows no other router."""
    s = Scenario.reading(("r", 2), shared_interval=0.5)
    _ticket, commands = s.request("r", "a")
    assert [type(c) for c in commands] == [IssueLoad]
    read_each(s, 30.0, r={"adapters": ["a"]})
    assert s.machine.next_due() == 60.0


def test_time_an_adapter_this_router_is_unloading_there_is_no_other_routers() -> None:
    """[time] The engine names an adapter while a request runs on it after its unload: a reading that
    names one this router is unloading there shows no other router."""
    s = Scenario.reading(("r", 1), shared_interval=0.5)
    s.expect(Released(ticket=s.load("r", "a")))
    _ticket, commands = s.request("r", "b")  # a is b's victim, unloaded once b lands
    assert [type(c) for c in commands] == [IssueLoad]
    assert s.machine.statistics().replicas["r"].unloading == ("a",)
    read_each(s, 30.0, r={"adapters": ["a"]})
    assert s.machine.next_due() == 60.0


# -- [standby] ------------------------------------------------------------------------------------


def test_standby_a_router_standing_by_lists_a_shared_replica_at_the_listing_interval() -> None:
    """[standby] While another router decides for this one, a reading that shows other routers'
    work leaves the next listing a listing interval on; deciding again, the shared pace comes back
    for what is left of the mark."""
    s = Scenario.reading(("r", 2), shared_interval=0.5)
    s.expect(StandingBy(on=True))
    another_routers(s, now=30.0)  # shared until 60, but standing by
    assert s.machine.next_due() == 60.0
    another_routers(s, now=60.0)  # shared until 90
    assert s.machine.next_due() == 90.0
    assert s(TimeAdvanced(now=75.0)) == []
    (listing,) = s(StandingBy(on=False))  # still shared, until 90: listed now, and again at 75.5
    assert isinstance(listing, ReadListing)
    assert listing.replica == "r"
    assert s.machine.next_due() == 75.5
    s.expect(
        ListingReceived(listing=listing.listing, adapters=()),
        ReadEngine(read=listing.listing + 1, replica="r"),
    )
    assert s.answer_read("r", ()) == []
    s.expect(TimeAdvanced(now=75.5), ReadListing(listing=listing.listing + 2, replica="r"))


def test_standby_deciding_again_lists_every_replica_at_once() -> None:
    """[standby] When the router decides again, every replica in use with no listing out is listed
    at once, in id order, and is next due an interval later; standing by changes nothing by itself,
    and neither does a stand-by that repeats or a router that already decides."""
    s = Scenario.reading(("r", 2), ("q", 2), ("p", 1))
    s.expect(StandingBy(on=False))
    s.expect(StandingBy(on=True))
    s.expect(StandingBy(on=True))
    s.expect(ReplicasRemoved(replicas=("p",)))
    s.expect(TimeAdvanced(now=12.5))
    listings = s(StandingBy(on=False))
    first = min(c.listing for c in listings if isinstance(c, ReadListing))
    assert listings == [ReadListing(listing=first, replica="q"), ReadListing(listing=first + 1, replica="r")]
    assert s.machine.next_due() == 42.5
    s.expect(StandingBy(on=False))
    assert s(TimeAdvanced(now=30.0)) == []  # the listings at 12.5 moved the dues of 30


def test_standby_requests_are_handled_as_ever() -> None:
    """[standby] A router standing by still decides a request given to it (its leader gone before
    it knew): loads, hits and evictions as without it."""
    s = Scenario.with_replicas(("r", 1))
    s.expect(StandingBy(on=True))
    ticket = s.load("r", "a")
    s.expect(Released(ticket=ticket))
    _ticket, commands = s.request("r", "b")
    assert [type(c) for c in commands] == [IssueLoad]

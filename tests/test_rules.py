"""One scenario per rule of the machine, named as in lorafleet/_machine.py and SPEC.md."""

from __future__ import annotations

import pytest

from lorafleet import (
    AdapterMissing,
    AdapterPinned,
    AdapterUnpinned,
    Cancelled,
    Fail,
    Fault,
    Grant,
    How,
    InvalidValueError,
    IssueLoad,
    IssueUnload,
    LimitSet,
    ListingFailed,
    ListingReceived,
    LoadFinished,
    LoadOutcome,
    MarkMet,
    Placed,
    Placement,
    ReadListing,
    Released,
    ReplicaAdded,
    ReplicaFailed,
    ReplicasRemoved,
    ReplicaStatistics,
    Requested,
    ServedElsewhere,
    TicketOrderError,
    TimeAdvanced,
    UnloadFinished,
    UnloadOutcome,
    View,
)
from lorafleet._machine import REPLICA_REMOVED

from scenario import Scenario, landed, loads, unloaded, unloads


def held(s: Scenario, replica: str) -> dict[str, int]:
    return dict(s.machine.statistics().replicas[replica].held)


def test_hit_grants_at_once_and_makes_the_adapter_most_recently_used() -> None:
    s = Scenario.with_replicas(("r", 2))
    a, b = s.load("r", "a"), s.load("r", "b")
    s.expect(Released(ticket=a))
    s.expect(Released(ticket=b))
    t = s.hit("r", "a")
    assert held(s, "r") == {"a": 1, "b": 0}
    s.expect(Released(ticket=t))
    # a was used last, so b is the one to go once c has landed ([settle]).
    c, commands = s.request("r", "c")
    assert commands == [IssueLoad(load=4, replica="r", adapter="c", path="/adapters/c")]
    s.expect(
        LoadFinished(load=4, outcome=LoadOutcome.LOADED),
        Grant(ticket=c, how=How.LOADED),
        IssueUnload(unload=5, replica="r", adapter="b"),
    )


def test_join_waits_for_the_one_load_and_is_granted_joined() -> None:
    s = Scenario.with_replicas(("r", 2))
    first, commands = s.request("r", "a")
    (load,) = loads(commands)
    second, commands = s.request("r", "a")
    assert commands == []
    third, commands = s.request("r", "a")
    assert commands == []
    s.expect(
        LoadFinished(load=load.load, outcome=LoadOutcome.LOADED),
        Grant(ticket=first, how=How.LOADED),
        Grant(ticket=second, how=How.JOINED),
        Grant(ticket=third, how=How.JOINED),
    )
    assert held(s, "r") == {"a": 3}


def test_wait_unload_then_the_request_is_handled_afresh() -> None:
    s = Scenario.with_replicas(("r", 1))
    a = s.load("r", "a")
    s.expect(Released(ticket=a))
    b, commands = s.request("r", "b")
    (load_b,) = loads(commands)
    (unload,) = unloads(s(landed(load_b)))  # [settle]: a goes once b has landed
    assert unload.adapter == "a"
    # a is being unloaded: a request for it waits rather than loading it across the unload.
    again, commands = s.request("r", "a")
    assert commands == []
    joined, commands = s.request("r", "a")
    assert commands == []
    # The waiters are handled afresh: the first starts a load of a (b is in use, so nothing is
    # idle to settle to the limit with), the second joins it.
    (load_a,) = s(unloaded(unload))
    assert isinstance(load_a, IssueLoad)
    assert load_a.adapter == "a"
    s.expect(
        landed(load_a),
        Grant(ticket=again, how=How.LOADED),
        Grant(ticket=joined, how=How.JOINED),
    )
    assert held(s, "r") == {"a": 2, "b": 1}
    s.expect(Released(ticket=b))


def test_cold_load_without_victims_is_issued_at_once() -> None:
    s = Scenario.with_replicas(("r", 2))
    _ticket, commands = s.request("r", "a", "/lora/a")
    assert commands == [IssueLoad(load=2, replica="r", adapter="a", path="/lora/a")]


def test_evict_least_recently_used_idle_adapters_until_the_load_fits() -> None:
    """[evict] With headroom 0 the bound is the limit: a load past it unloads its victims first."""
    s = Scenario.with_replicas(("r", 3), headroom=0)
    x, y, z = s.load("r", "x"), s.load("r", "y"), s.load("r", "z")
    for t in (y, x, z):
        s.expect(Released(ticket=t))
    s.expect(LimitSet(model="base", limit=2))
    # Lowering the limit takes effect at the next load: two go, y first (least recently used),
    # before the load, which has no headroom to go into.
    _ticket, commands = s.request("r", "w")
    assert unloads(commands) == [
        IssueUnload(unload=5, replica="r", adapter="y"),
        IssueUnload(unload=6, replica="r", adapter="x"),
    ]
    assert loads(commands) == []  # the load waits for every victim's unload
    # Victims stop counting as held at once.
    assert held(s, "r") == {"z": 0}
    assert s.machine.view(["r"], "y") == View(holders=frozenset(), with_room=frozenset())
    s.expect(UnloadFinished(unload=5, outcome=UnloadOutcome.UNLOADED))
    # Whatever the outcome of the last victim's unload, the load goes out.
    s.expect(
        UnloadFinished(unload=6, outcome=UnloadOutcome.FAILED, message="boom"),
        IssueLoad(load=7, replica="r", adapter="w", path="/adapters/w"),
    )


def test_evict_ties_are_broken_by_name() -> None:
    s = Scenario.with_replicas(("r", 2), listed=False)
    # Adapters another router loaded come in one listing: equally old, so by name.
    s.expect(ListingReceived(listing=1, adapters=("zeta", "alpha")), MarkMet(replica="r"))
    ticket, commands = s.request("r", "new")
    assert unloads(commands) == []
    s.expect(
        LoadFinished(load=2, outcome=LoadOutcome.LOADED),
        Grant(ticket=ticket, how=How.LOADED),
        IssueUnload(unload=3, replica="r", adapter="alpha"),
    )


def test_evict_never_takes_an_adapter_in_use_and_goes_over_the_limit_instead() -> None:
    s = Scenario.with_replicas(("r", 1))
    s.load("r", "a")
    ticket, commands = s.request("r", "b")
    assert commands == [IssueLoad(load=3, replica="r", adapter="b", path="/adapters/b")]
    s.expect(LoadFinished(load=3, outcome=LoadOutcome.LOADED), Grant(ticket=ticket, how=How.LOADED))
    assert held(s, "r") == {"a": 1, "b": 1}
    # A later load brings the replica back under its limit once adapters are idle ([settle]).
    s.expect(Released(ticket=1))
    s.expect(Released(ticket=ticket))
    c, commands = s.request("r", "c")
    assert unloads(commands) == []
    commands = s(LoadFinished(load=loads(commands)[0].load, outcome=LoadOutcome.LOADED))
    assert commands[0] == Grant(ticket=c, how=How.LOADED)
    assert [u.adapter for u in unloads(commands)] == ["a", "b"]


def test_evict_first_only_at_the_bound_of_the_limit_plus_the_headroom() -> None:
    """[evict] Cold loads go into the headroom at once; only a load that would pass the bound (limit +
    headroom) unloads first, as many victims as it needs, and waits for them. Headroom 0: the limit."""
    s = Scenario.with_replicas(("r", 1), headroom=2)
    s.expect(Released(ticket=s.load("r", "a")))
    _, commands = s.request("r", "b")
    assert commands == [IssueLoad(load=3, replica="r", adapter="b", path="/adapters/b")]
    _, commands = s.request("r", "c")  # a, b and c: at the bound, not past it
    assert commands == [IssueLoad(load=4, replica="r", adapter="c", path="/adapters/c")]
    _, commands = s.request("r", "d")
    (unload,) = commands
    assert unload == IssueUnload(unload=5, replica="r", adapter="a")
    s.expect(unloaded(unload), IssueLoad(load=6, replica="r", adapter="d", path="/adapters/d"))
    s = Scenario.with_replicas(("r", 1), headroom=0)
    s.expect(Released(ticket=s.load("r", "a")))
    _, commands = s.request("r", "b")
    assert commands == [IssueUnload(unload=3, replica="r", adapter="a")]


def test_settle_a_load_lands_first_then_the_replica_unloads_its_excess() -> None:
    """[settle] A cold load on a full replica goes out at once, evicting nothing; once it has landed,
    the replica unloads the idle adapters it holds past its limit, chosen as [evict] chooses."""
    s = Scenario.with_replicas(("r", 2))
    s.expect(Released(ticket=s.load("r", "a")))
    s.expect(Released(ticket=s.load("r", "b")))
    c, commands = s.request("r", "c")
    assert commands == [IssueLoad(load=4, replica="r", adapter="c", path="/adapters/c")]
    assert held(s, "r") == {"a": 0, "b": 0}  # nothing goes while c loads
    s.expect(
        LoadFinished(load=4, outcome=LoadOutcome.LOADED),
        Grant(ticket=c, how=How.LOADED),
        IssueUnload(unload=5, replica="r", adapter="a"),
    )
    assert held(s, "r") == {"b": 0, "c": 1}


def test_settle_a_failed_load_evicts_nothing() -> None:
    """[settle] Only a load that landed makes room: one that failed leaves what the replica held, even
    over its limit."""
    s = Scenario.with_replicas(("r", 1))
    a = s.load("r", "a")
    s.load("r", "b")  # a is in use: over the limit
    s.expect(Released(ticket=a))
    for outcome, fault in (
        (LoadOutcome.ADAPTER_FAULT, Fault.ADAPTER),
        (LoadOutcome.REPLICA_FAULT, Fault.REPLICA),
    ):
        t, commands = s.request("r", outcome.value)
        s.expect(
            LoadFinished(load=loads(commands)[0].load, outcome=outcome, message="no"),
            Fail(ticket=t, fault=fault, message="no"),
        )
        assert held(s, "r") == {"a": 0, "b": 1}


def test_settle_with_every_adapter_in_use_at_landing_waits_for_the_next_landing() -> None:
    """[settle] A replica over its limit with nothing idle keeps its adapters; releases unload nothing,
    and the next load to land unloads every adapter past the limit that is idle then."""
    s = Scenario.with_replicas(("r", 1))
    a = s.load("r", "a")
    b = s.load("r", "b")  # a is in use: nothing to unload
    s.expect(Released(ticket=a))
    s.expect(Released(ticket=b))
    assert held(s, "r") == {"a": 0, "b": 0}
    c, _ = s.request("r", "c")
    s.expect(
        LoadFinished(load=4, outcome=LoadOutcome.LOADED),
        Grant(ticket=c, how=How.LOADED),
        IssueUnload(unload=5, replica="r", adapter="a"),
        IssueUnload(unload=6, replica="r", adapter="b"),
    )


def test_settle_counts_the_adapters_held_not_the_loads_still_out() -> None:
    """[settle] A load that has not landed does not count: it may fail, and then nothing went for it."""
    s = Scenario.with_replicas(("r", 2))
    s.expect(Released(ticket=s.load("r", "a")))
    b, _ = s.request("r", "b")
    c, _ = s.request("r", "c")
    d, _ = s.request("r", "d")  # a held, three loads out
    s.expect(LoadFinished(load=3, outcome=LoadOutcome.LOADED), Grant(ticket=b, how=How.LOADED))
    s.expect(Released(ticket=b))
    s.expect(
        LoadFinished(load=4, outcome=LoadOutcome.LOADED),
        Grant(ticket=c, how=How.LOADED),
        IssueUnload(unload=6, replica="r", adapter="a"),  # one past the limit: b stays while d is out
    )
    s.expect(
        LoadFinished(load=5, outcome=LoadOutcome.LOADED),
        Grant(ticket=d, how=How.LOADED),
        IssueUnload(unload=7, replica="r", adapter="b"),
    )


def test_load_outcome_already_loaded_is_a_success() -> None:
    s = Scenario.with_replicas(("r", 2))
    t, _commands = s.request("r", "a")
    s.expect(
        LoadFinished(load=2, outcome=LoadOutcome.ALREADY_LOADED, message="already"),
        Grant(ticket=t, how=How.LOADED),
    )


def test_load_outcome_failure_wakes_every_waiter_with_its_fault_and_holds_nothing() -> None:
    s = Scenario.with_replicas(("r", 2))
    t1, _ = s.request("r", "a")
    t2, _ = s.request("r", "a")
    s.expect(
        LoadFinished(load=2, outcome=LoadOutcome.ADAPTER_FAULT, message="rank 64 > 16"),
        Fail(ticket=t1, fault=Fault.ADAPTER, message="rank 64 > 16"),
        Fail(ticket=t2, fault=Fault.ADAPTER, message="rank 64 > 16"),
    )
    assert held(s, "r") == {}
    # A request after a replica's fault starts a new load.
    t3, commands = s.request("r", "b")
    assert commands == [IssueLoad(load=3, replica="r", adapter="b", path="/adapters/b")]
    s.expect(
        LoadFinished(load=3, outcome=LoadOutcome.REPLICA_FAULT, message="timed out"),
        Fail(ticket=t3, fault=Fault.REPLICA, message="timed out"),
    )
    _, commands = s.request("r", "b")
    assert loads(commands) == [IssueLoad(load=4, replica="r", adapter="b", path="/adapters/b")]


def test_refuse_an_adapter_the_engine_refused_at_once_until_its_record_expires() -> None:
    s = Scenario.with_replicas(("r", 2), ("q", 2))
    t1, _ = s.request("r", "typo")
    s.expect(
        LoadFinished(load=3, outcome=LoadOutcome.ADAPTER_FAULT, message="No adapter found at /typo"),
        Fail(ticket=t1, fault=Fault.ADAPTER, message="No adapter found at /typo"),
    )
    # Every replica would refuse it: no call, the engine's words again, on any replica.
    t2, _ = s.request("q", "typo")
    assert s.steps[-1].commands == [Fail(ticket=t2, fault=Fault.ADAPTER, message="No adapter found at /typo")]
    s.expect(
        TimeAdvanced(now=899.0), ReadListing(listing=4, replica="q"), ReadListing(listing=5, replica="r")
    )
    s.request("r", "typo")
    assert isinstance(s.steps[-1].commands[0], Fail)
    s.expect(TimeAdvanced(now=900.0))
    _, commands = s.request("r", "typo")  # the record expired: it is tried again
    assert loads(commands) == [IssueLoad(load=6, replica="r", adapter="typo", path="/adapters/typo")]


def test_unload_outcome_not_found_and_failed_both_leave_the_adapter_gone() -> None:
    s = Scenario.with_replicas(("r", 1))
    s.expect(Released(ticket=s.load("r", "a")))
    for outcome, adapter in ((UnloadOutcome.NOT_FOUND, "b"), (UnloadOutcome.FAILED, "c")):
        t, commands = s.request("r", adapter)
        (load,) = loads(commands)
        (unload,) = unloads(s(landed(load)))
        s.expect(UnloadFinished(unload=unload.unload, outcome=outcome, message="x"))
        assert held(s, "r") == {adapter: 1}
        s.expect(Released(ticket=t))
        assert held(s, "r") == {adapter: 0}
    stats = s.machine.statistics()
    assert stats.evictions == {("base", "failed"): 1, ("base", "not_found"): 1}


def test_release_twice_does_nothing_and_release_after_forgetting_does_nothing() -> None:
    s = Scenario.with_replicas(("r", 2))
    t = s.load("r", "a")
    s.expect(Released(ticket=t))
    s.expect(Released(ticket=t))
    assert held(s, "r") == {"a": 0}
    t2 = s.hit("r", "a")
    s.expect(ReplicasRemoved(replicas=("r",)))
    s.expect(Released(ticket=t2))


def test_release_makes_an_in_use_adapter_no_victim_until_released() -> None:
    s = Scenario.with_replicas(("r", 1))
    t = s.load("r", "a")
    b, commands = s.request("r", "b")
    s.expect(landed(loads(commands)[0]), Grant(ticket=b, how=How.LOADED))  # a is in use: no victim
    s.expect(Released(ticket=t))
    c, commands = s.request("r", "c")
    commands = s(landed(loads(commands)[0]))
    assert commands[0] == Grant(ticket=c, how=How.LOADED)
    assert [u.adapter for u in unloads(commands)] == ["a"]


def test_cancel_a_waiter_the_load_goes_on_for_the_others() -> None:
    s = Scenario.with_replicas(("r", 2))
    first, _ = s.request("r", "a")
    second, _ = s.request("r", "a")
    s.expect(Cancelled(ticket=first))
    s.expect(LoadFinished(load=2, outcome=LoadOutcome.LOADED), Grant(ticket=second, how=How.JOINED))
    assert held(s, "r") == {"a": 1}


def test_cancel_every_waiter_the_issued_load_still_lands_idle() -> None:
    s = Scenario.with_replicas(("r", 2))
    first, _ = s.request("r", "a")
    s.expect(Cancelled(ticket=first))
    s.expect(LoadFinished(load=2, outcome=LoadOutcome.LOADED))
    assert held(s, "r") == {"a": 0}


def test_cancel_a_granted_request_releases_it() -> None:
    s = Scenario.with_replicas(("r", 2))
    t = s.load("r", "a")
    s.expect(Cancelled(ticket=t))
    assert held(s, "r") == {"a": 0}
    s.expect(Cancelled(ticket=t))  # ended: nothing more


def test_cancel_a_request_waiting_out_an_unload() -> None:
    """With headroom 0 the load of b waits for a's unload, and a request for a waits it out too."""
    s = Scenario.with_replicas(("r", 1), headroom=0)
    s.expect(Released(ticket=s.load("r", "a")))
    _, commands = s.request("r", "b")
    (unload,) = unloads(commands)
    waiter, _ = s.request("r", "a")
    s.expect(Cancelled(ticket=waiter))
    s.expect(unloaded(unload), IssueLoad(load=4, replica="r", adapter="b", path="/adapters/b"))
    assert s.machine.statistics().waiting == 1


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
    """With headroom 0, b's load waits for a's unload: the listing sees one, then the other, out."""
    s = Scenario.with_replicas(("r", 1), headroom=0)
    s.expect(Released(ticket=s.load("r", "a")))
    t, commands = s.request("r", "b")
    (unload,) = unloads(commands)
    s.expect(TimeAdvanced(now=30.0), ReadListing(listing=5, replica="r"))
    s.expect(ListingReceived(listing=5, adapters=("a",)))  # a's unload is in flight: not held again
    assert held(s, "r") == {}
    s.expect(unloaded(unload), IssueLoad(load=4, replica="r", adapter="b", path="/adapters/b"))
    s.expect(TimeAdvanced(now=60.0), ReadListing(listing=6, replica="r"))
    s.expect(ListingReceived(listing=6, adapters=("b",)))  # b is loading: not held, not counted twice
    assert held(s, "r") == {}
    s.expect(LoadFinished(load=4, outcome=LoadOutcome.LOADED), Grant(ticket=t, how=How.LOADED))
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


def test_forget_drops_an_adapter_the_engine_does_not_have_in_use_or_not() -> None:
    s = Scenario.with_replicas(("r", 2))
    t = s.load("r", "a")
    s.expect(AdapterMissing(replica="r", adapter="a"))  # in use, but the engine said it is not there
    assert held(s, "r") == {}
    s.expect(Released(ticket=t))  # a dead lease: nothing to give back
    assert held(s, "r") == {}
    _, commands = s.request("r", "a")
    assert loads(commands) == [IssueLoad(load=3, replica="r", adapter="a", path="/adapters/a")]
    s.expect(AdapterMissing(replica="r", adapter="a"))  # loading: left to its outcome
    s.expect(AdapterMissing(replica="nowhere", adapter="a"))


def test_forget_with_the_ticket_of_a_request_on_an_older_copy_changes_nothing() -> None:
    s = Scenario.with_replicas(("r", 2))
    old = s.load("r", "a")
    s.expect(AdapterMissing(replica="r", adapter="a", ticket=old))  # old's copy is the one held: dropped
    new = s.load("r", "a")
    # A second request on the dropped copy reports late, while new runs on the copy loaded since.
    s.expect(AdapterMissing(replica="r", adapter="a", ticket=old))
    assert held(s, "r") == {"a": 1}
    s.expect(Released(ticket=old))
    s.expect(AdapterMissing(replica="r", adapter="a", ticket=old))  # ended: too late to tell, ignored
    assert held(s, "r") == {"a": 1}
    s.expect(AdapterMissing(replica="r", adapter="a", ticket=new))
    assert held(s, "r") == {}


def test_replicas_removed_fail_their_waiters_and_ignore_later_answers() -> None:
    """With headroom 0, b's load waits for a's unload, and a request for a waits that unload out."""
    s = Scenario.with_replicas(("r", 1), ("q", 1), headroom=0)
    s.expect(Released(ticket=s.load("r", "a")))
    t1, commands = s.request("r", "b")
    (unload,) = unloads(commands)
    t2, _ = s.request("r", "a")  # waits out a's unload
    _t3, commands = s.request("q", "c")
    s.expect(
        ReplicasRemoved(replicas=("r", "unknown")),
        Fail(ticket=t1, fault=Fault.REPLICA, message=REPLICA_REMOVED),
        Fail(ticket=t2, fault=Fault.REPLICA, message=REPLICA_REMOVED),
    )
    s.expect(unloaded(unload))  # ignored, and b's load is never issued
    assert "r" not in s.machine.statistics().replicas
    assert s.machine.statistics().replicas["q"].loading == ("c",)


def test_replicas_removed_and_added_back_keep_calls_still_in_flight() -> None:
    s = Scenario.with_replicas(("r", 2))
    t, commands = s.request("r", "a")
    (load,) = loads(commands)
    s.expect(ReplicasRemoved(replicas=("r",)), Fail(ticket=t, fault=Fault.REPLICA, message=REPLICA_REMOVED))
    s.expect(ReplicaAdded(replica="r", model="base", limit=2), ReadListing(listing=3, replica="r"))
    # The old load is still out: a new request joins it instead of crossing it.
    t2, commands = s.request("r", "a")
    assert commands == []
    s.expect(LoadFinished(load=load.load, outcome=LoadOutcome.LOADED), Grant(ticket=t2, how=How.JOINED))


def test_replicas_removed_and_added_back_never_unload_what_a_request_still_runs_on() -> None:
    # Issue 8, bug 2: x ran on r across its removal; after the re-add, the listing named x, which
    # counted as idle and first to go, and two cold requests unloaded it under the running request.
    s = Scenario.with_replicas(("r", 2))
    running = s.load("r", "x")
    s.expect(ReplicasRemoved(replicas=("r",)))
    assert "r" not in s.machine.statistics().replicas  # unseen, but x is kept while running runs
    s.expect(ReplicaAdded(replica="r", model="base", limit=2), ReadListing(listing=3, replica="r"))
    s.expect(ListingReceived(listing=3, adapters=("x",)), MarkMet(replica="r"))
    assert held(s, "r") == {"x": 1}
    _, commands = s.request("r", "a")
    assert unloads(commands) == []
    s.expect(LoadFinished(load=4, outcome=LoadOutcome.LOADED), Grant(ticket=2, how=How.LOADED))
    _, commands = s.request("r", "b")
    assert unloads(commands) == []  # over the limit, as ever when every held adapter is in use
    s.expect(Released(ticket=running))
    assert held(s, "r") == {"a": 1, "x": 0}


def test_replicas_removed_are_forgotten_once_their_last_running_request_ends() -> None:
    s = Scenario.with_replicas(("r", 2))
    running = s.load("r", "x")
    s.expect(ReplicasRemoved(replicas=("r",)))
    s.expect(Released(ticket=running))
    # Nothing of r is left: adding it again is adding a new replica, with nothing held.
    s.expect(ReplicaAdded(replica="r", model="other", limit=1), ReadListing(listing=3, replica="r"))
    s.expect(ListingReceived(listing=3, adapters=()), MarkMet(replica="r"))
    assert held(s, "r") == {}


def test_replicas_added_back_are_met_again_by_their_next_listing() -> None:
    s = Scenario.with_replicas(("r", 2))
    s.expect(TimeAdvanced(now=30.0), ReadListing(listing=2, replica="r"))
    s.expect(ReplicasRemoved(replicas=("r",)))
    assert not s.machine.is_met("r")
    s.expect(ReplicaAdded(replica="r", model="base", limit=2), ReadListing(listing=3, replica="r"))
    s.expect(ListingReceived(listing=2, adapters=()))  # the abandoned listing: ignored, not met
    assert not s.machine.is_met("r")
    s.expect(ListingFailed(listing=3), MarkMet(replica="r"))
    s.expect(TimeAdvanced(now=60.0), ReadListing(listing=4, replica="r"))
    s.expect(ListingReceived(listing=4, adapters=()))  # met already: said once


def test_view_says_who_holds_and_who_has_room() -> None:
    s = Scenario.with_replicas(("full", 1), ("loading", 2), ("empty", 2))
    s.load("full", "a")
    s.request("loading", "a")
    assert s.machine.view(["full", "loading", "empty", "unmet"], "a") == View(
        holders=frozenset({"full", "loading"}), with_room=frozenset({"loading", "empty", "unmet"})
    )


def test_place_prefers_the_least_busy_holder_then_a_free_slot() -> None:
    s = Scenario.with_replicas(("r0", 2), ("r1", 2), ("r2", 2))
    busy = s.load("r0", "a")
    s.load("r1", "a")
    s.hit("r1", "a")
    assert s.machine.place("a") == Placement(replica="r0", placed=Placed.HELD)
    s.expect(Released(ticket=busy))
    s.request("r2", "a")  # loading there, and nothing else runs on it
    assert s.machine.place("a") == Placement(replica="r0", placed=Placed.HELD)
    assert s.machine.place("a", exclude={"r0"}) == Placement(replica="r2", placed=Placed.LOADING)
    # Nobody holds b: a free slot, the least busy replica first.
    assert s.machine.place("b") == Placement(replica="r0", placed=Placed.FREE)


def test_place_a_cold_load_where_the_least_recently_used_idle_adapter_is_oldest() -> None:
    s = Scenario.with_replicas(("r0", 1), ("r1", 1))
    s.expect(Released(ticket=s.load("r0", "a")))
    s.expect(Released(ticket=s.load("r1", "b")))
    # Both are full; r0's idle adapter became idle first, so it goes.
    assert s.machine.place("c") == Placement(replica="r0", placed=Placed.EVICT)
    s.expect(Released(ticket=s.hit("r0", "a")))
    assert s.machine.place("c") == Placement(replica="r1", placed=Placed.EVICT)


def test_place_over_the_limit_only_where_every_adapter_is_in_use() -> None:
    s = Scenario.with_replicas(("r0", 1), ("r1", 1))
    s.load("r0", "a")
    s.load("r1", "b")
    s.hit("r1", "b")
    assert s.machine.place("c") == Placement(replica="r0", placed=Placed.OVER)
    assert s.machine.place("c", load={"r0": 5.0}) == Placement(replica="r1", placed=Placed.OVER)
    assert s.machine.place("c", exclude={"r0", "r1"}) == Placement(replica=None, placed=None)


def test_place_breaks_ties_by_rendezvous_hash_the_same_way_every_time() -> None:
    s = Scenario.with_replicas(*((f"r{i}", 2) for i in range(8)))
    chosen = {name: s.machine.place(name).replica for name in ("a", "b", "c", "d", "e", "f")}
    assert len(set(chosen.values())) > 1  # different adapters spread over different replicas
    again = Scenario.with_replicas(*((f"r{i}", 2) for i in reversed(range(8))))
    assert {name: again.machine.place(name).replica for name in chosen} == chosen


def test_place_spills_past_a_busy_holder_and_prefers_over_the_limit_to_evicting() -> None:
    s = Scenario.configured(concurrency=4)  # busy at 5 in flight; no cold load past 3 in flight
    for replica in ("r0", "r1", "r2"):
        (listing,) = s(ReplicaAdded(replica=replica, model="base", limit=1))
        assert isinstance(listing, ReadListing)
        s.expect(ListingReceived(listing=listing.listing, adapters=()), MarkMet(replica=replica))
    tickets = [s.load("r0", "hot")] + [s.hit("r0", "hot") for _ in range(4)]
    assert s.machine.place("hot").placed is Placed.FREE  # five in flight on the holder: spill
    for ticket in tickets:
        s.expect(Released(ticket=ticket))
    assert s.machine.place("hot") == Placement(replica="r0", placed=Placed.HELD)
    s.load("r1", "b")
    s.expect(Released(ticket=s.load("r2", "c")))
    # r1's one adapter is in use: a load there evicts nothing; r0 and r2 would have to evict.
    assert s.machine.place("d") == Placement(replica="r1", placed=Placed.OVER)


def test_evict_takes_the_idle_adapter_in_least_demand_then_the_least_recently_used() -> None:
    s = Scenario.with_replicas(("r", 3))
    popular = s.load("r", "popular")
    for _ in range(3):
        s.expect(Released(ticket=s.hit("r", "popular")))
    s.expect(Released(ticket=popular))  # requested 4 times, and now the least recently used
    s.expect(Released(ticket=s.load("r", "once")))
    s.expect(Released(ticket=s.load("r", "twice")))
    s.expect(Released(ticket=s.hit("r", "twice")))
    new, commands = s.request("r", "new")
    commands = s(landed(loads(commands)[0]))
    assert commands[0] == Grant(ticket=new, how=How.LOADED)
    assert [u.adapter for u in unloads(commands)] == ["once"]  # demand 1 is below 2 and 4


def test_place_hit_grants_a_hit_where_place_would_and_changes_nothing_otherwise() -> None:
    s = Scenario.with_replicas(("r0", 2), ("r1", 2), ("r2", 2))
    s.expect(ReplicaAdded(replica="q", model="other", limit=2), ReadListing(listing=4, replica="q"))
    for replica in ("r0", "r1"):
        s.expect(Released(ticket=s.load(replica, "a")))
    tied = s.machine.place("a").replica  # both idle: the rendezvous weight decides
    s.ticket += 1
    assert s.machine.place_hit(s.ticket, adapter="a") == tied
    assert held(s, tied) == {"a": 1}  # type: ignore[arg-type]
    # The least busy holder is now the other one.
    other = s.machine.place("a").replica
    assert other != tied
    s.ticket += 1
    assert s.machine.place_hit(s.ticket, adapter="a") == other
    assert s.machine.statistics().grants["hit"] == 2
    assert s.machine.statistics().replicas[other].in_flight == 1  # type: ignore[index]
    s.expect(Released(ticket=s.ticket))
    s.machine.check_invariants()
    # Loading only, held only by a replica of another model, or nowhere: nothing changes.
    s.request("r2", "b")
    before = s.machine.statistics()
    assert s.machine.place("b") == Placement(replica="r2", placed=Placed.LOADING)
    assert s.machine.place_hit(s.ticket + 1, adapter="b") is None
    assert s.machine.place_hit(s.ticket + 1, adapter="a", model="other") is None
    assert s.machine.place_hit(s.ticket + 1, adapter="z") is None
    assert s.machine.statistics() == before
    assert s.machine.next_ticket == s.ticket + 1
    # A failing holder is avoided, as place avoids it.
    s.expect(ReplicaFailed(replica=other))  # type: ignore[arg-type]
    assert s.machine.place_hit(s.ticket + 1, adapter="a") == tied
    # Misuse, as hit and place would refuse it.
    with pytest.raises(TicketOrderError):
        s.machine.place_hit(s.ticket, adapter="a")
    with pytest.raises(InvalidValueError):
        s.machine.place_hit(s.ticket + 5, adapter="")
    s.machine.check_invariants()


def test_place_only_among_replicas_of_the_model_and_never_a_removed_one() -> None:
    s = Scenario.with_replicas(("r0", 2))
    s.expect(ReplicaAdded(replica="q", model="other", limit=2), ReadListing(listing=2, replica="q"))
    s.load("r0", "a")
    # q is no candidate until its first listing says what it holds.
    assert s.machine.place("a", model="other") == Placement(replica=None, placed=None)
    s.expect(ListingReceived(listing=2, adapters=()), MarkMet(replica="q"))
    assert s.machine.place("a", model="other") == Placement(replica="q", placed=Placed.FREE)
    s(ReplicasRemoved(replicas=("r0",)))
    assert s.machine.place("a", model="base") == Placement(replica=None, placed=None)


def test_health_avoids_a_failing_replica_twice_as_long_each_time_until_it_answers() -> None:
    s = Scenario.with_replicas(("r0", 2), ("r1", 2))
    assert s.machine.place("a") == Placement(replica="r1", placed=Placed.FREE)  # by rendezvous hash
    _, commands = s.request("r1", "a")
    (load,) = loads(commands)
    s.expect(
        LoadFinished(load=load.load, outcome=LoadOutcome.REPLICA_FAULT, message="refused"),
        Fail(ticket=1, fault=Fault.REPLICA, message="refused"),
    )
    assert s.machine.place("a") == Placement(replica="r0", placed=Placed.FREE)
    assert s.machine.view(["r0", "r1"], "a").with_room == {"r0"}  # answering nothing is not room
    assert s.machine.statistics().replicas["r1"].failing_until == 5.0
    s.expect(TimeAdvanced(now=5.0))
    # Back after 5 s: a candidate again (r0 wins now only because it has served fewer requests).
    assert s.machine.place("a", exclude={"r0"}) == Placement(replica="r1", placed=Placed.FREE)
    s.expect(ReplicaFailed(replica="r1", message="no answer to a completion"))
    assert s.machine.statistics().replicas["r1"].failing_until == 15.0  # 10 s this time
    s.expect(ReplicaFailed(replica="r0"))
    assert s.machine.place("a") == Placement(replica=None, placed=None)
    s.expect(
        TimeAdvanced(now=30.0), ReadListing(listing=4, replica="r0"), ReadListing(listing=5, replica="r1")
    )
    s.expect(ListingReceived(listing=5, adapters=()))  # an answer: healthy, the count starts over
    s.expect(ReplicaFailed(replica="r1"))
    assert s.machine.statistics().replicas["r1"].failing_until == 35.0
    s.expect(ListingFailed(listing=4, message="timed out"))  # r0's second failure in a row
    assert s.machine.statistics().replicas["r0"].failing_until == 40.0


def test_cap_a_cold_request_waits_for_room_instead_of_going_past_the_cap() -> None:
    s = Scenario.configured(headroom=1)
    s.expect(ReplicaAdded(replica="r", model="base", limit=1), ReadListing(listing=1, replica="r"))
    s.expect(ListingReceived(listing=1, adapters=()), MarkMet(replica="r"))
    a = s.load("r", "a")
    b = s.load("r", "b")  # one over the limit: every held adapter is in use, and the headroom is 1
    assert s.machine.place("c") == Placement(replica="r", placed=Placed.WAIT)
    c, commands = s.request("r", "c")
    assert commands == []  # at the cap: it waits for room
    d, commands = s.request("r", "c")
    assert commands == []
    assert s.machine.statistics().replicas["r"].queued == 2
    # a ends: it is idle, so room; c's load goes out after a's unload, and d joins it.
    s.expect(Released(ticket=a), IssueUnload(unload=4, replica="r", adapter="a"))
    s.expect(
        UnloadFinished(unload=4, outcome=UnloadOutcome.UNLOADED),
        IssueLoad(load=5, replica="r", adapter="c", path="/adapters/c"),
    )
    s.expect(
        LoadFinished(load=5, outcome=LoadOutcome.LOADED),
        Grant(ticket=c, how=How.LOADED),
        Grant(ticket=d, how=How.JOINED),
    )
    assert held(s, "r") == {"b": 1, "c": 2}
    e, commands = s.request("r", "e")
    assert commands == []
    s.expect(Cancelled(ticket=e))  # a request waiting for room can go away
    assert s.machine.statistics().replicas["r"].queued == 0
    s.expect(Released(ticket=b))  # no one waits for room now: b just goes idle


def test_cap_waiters_fail_when_their_replica_is_removed() -> None:
    s = Scenario.configured(headroom=0)
    s.expect(ReplicaAdded(replica="r", model="base", limit=1), ReadListing(listing=1, replica="r"))
    s.expect(ListingReceived(listing=1, adapters=()), MarkMet(replica="r"))
    s.load("r", "a")
    t, commands = s.request("r", "b")
    assert commands == []
    s.expect(ReplicasRemoved(replicas=("r",)), Fail(ticket=t, fault=Fault.REPLICA, message=REPLICA_REMOVED))


def test_pin_loads_the_adapter_on_its_copies_and_never_evicts_it() -> None:
    s = Scenario.with_replicas(("r0", 1), ("r1", 1), ("r2", 1))
    commands = s(AdapterPinned(adapter="p", path="/adapters/p", copies=2))
    assert sorted(c.replica for c in loads(commands)) == ["r0", "r2"]  # free slots, by rendezvous hash
    for load in loads(commands):
        s.expect(LoadFinished(load=load.load, outcome=LoadOutcome.LOADED))  # no request waits: no grant
    assert s.machine.statistics().pins == {"p": 2}
    # r0 holds only p, pinned: a cold request there goes over the limit rather than evict it.
    t, commands = s.request("r0", "a")
    assert unloads(commands) == []
    s.expect(
        LoadFinished(load=loads(commands)[0].load, outcome=LoadOutcome.LOADED),
        Grant(ticket=t, how=How.LOADED),
    )
    s.expect(Released(ticket=t))
    b, commands = s.request("r0", "b")
    commands = s(landed(loads(commands)[0]))
    assert commands[0] == Grant(ticket=b, how=How.LOADED)
    assert [u.adapter for u in unloads(commands)] == ["a"]  # settling to the limit: a, never p
    # Requests use a pinned adapter like any other; releasing it leaves it pinned, not idle.
    s.expect(Released(ticket=s.hit("r2", "p")))
    assert held(s, "r2") == {"p": 0}


def test_pin_is_restored_where_the_engine_lost_it_and_released_by_unpin() -> None:
    s = Scenario.with_replicas(("r0", 2), ("r1", 2))
    (load,) = loads(s(AdapterPinned(adapter="p", path="/adapters/p")))
    s.expect(LoadFinished(load=load.load, outcome=LoadOutcome.LOADED))
    home = load.replica
    # A restart loses it: the listing drops it, and the pin loads it again at once.
    s(TimeAdvanced(now=30.0))
    listings = {c.replica: c.listing for c in s.steps[-1].commands if isinstance(c, ReadListing)}
    commands = s(ListingReceived(listing=listings[home], adapters=()))
    assert [(c.replica, c.adapter) for c in loads(commands)] == [(home, "p")]
    s(LoadFinished(load=loads(commands)[0].load, outcome=LoadOutcome.LOADED))
    s.expect(AdapterUnpinned(adapter="p"))
    assert s.machine.statistics().pins == {}
    a, commands = s.request(home, "a")
    s.expect(landed(loads(commands)[0]), Grant(ticket=a, how=How.LOADED))
    b, commands = s.request(home, "b")
    commands = s(landed(loads(commands)[0]))
    assert commands[0] == Grant(ticket=b, how=How.LOADED)
    assert [u.adapter for u in unloads(commands)] == ["p"]  # idle again, and least recently used


def test_pin_waits_while_the_adapter_is_refused() -> None:
    s = Scenario.with_replicas(("r0", 2))
    (load,) = loads(s(AdapterPinned(adapter="bad", path="/adapters/bad")))
    s.expect(LoadFinished(load=load.load, outcome=LoadOutcome.ADAPTER_FAULT, message="No adapter found"))
    s.expect(TimeAdvanced(now=30.0), ReadListing(listing=3, replica="r0"))  # refused: no new load yet


def test_statistics_count_loads_evictions_grants_and_what_each_replica_holds() -> None:
    """With headroom 0, b's load goes out after a's unload, and then fails."""
    s = Scenario.with_replicas(("r", 1), headroom=0)
    a = s.load("r", "a")
    s.expect(Released(ticket=s.hit("r", "a")))
    s.expect(Released(ticket=a))
    _t, commands = s.request("r", "b")
    _joined, _ = s.request("r", "b")
    s(unloaded(unloads(commands)[0]))
    s(LoadFinished(load=4, outcome=LoadOutcome.REPLICA_FAULT, message="500"))
    stats = s.machine.statistics()
    assert stats.loads == {("base", "loaded"): 1, ("base", "replica_fault"): 1}
    assert stats.evictions == {("base", "unloaded"): 1}
    assert stats.grants == {"hit": 1, "joined": 0, "loaded": 1}
    assert stats.failures == {"replica": 2}
    assert stats.replicas == {
        "r": ReplicaStatistics(
            model="base", limit=1, met=True, held={}, loading=(), unloading=(), failing_until=5.0
        )
    }
    assert (stats.waiting, stats.leases) == (0, 0)


def test_the_same_events_give_the_same_commands() -> None:
    def play() -> list[object]:
        s = Scenario.with_replicas(("r", 2), ("q", 1))
        for i in range(6):
            s.request("rq"[i % 2], f"a{i % 3}")
        s(TimeAdvanced(now=31.0))
        s(Requested(ticket=100, replica="q", adapter="zz", path="/p"))
        return [step.commands for step in s.steps]

    assert play() == play()


def test_hit_without_a_command_for_a_shells_fast_path() -> None:
    s = Scenario.with_replicas(("r", 2))
    t = s.load("r", "a")
    s.expect(Released(ticket=t))
    m = s.machine
    assert m.hit(m.next_ticket, replica="r", adapter="a")
    assert held(s, "r") == {"a": 1}
    assert m.statistics().grants["hit"] == 1
    ticket = m.next_ticket
    before = m.statistics()
    assert not m.hit(
        ticket, replica="r", adapter="cold"
    )  # not held: nothing changed, the request goes the long way
    assert m.statistics() == before
    assert m.request(ticket, replica="r", adapter="cold", path="/c") == [
        IssueLoad(load=3, replica="r", adapter="cold", path="/c")
    ]


# -- [blame]: a server error is the request's fault when a second replica answers it so too --------


def test_blame_a_second_replicas_server_error_is_the_requests() -> None:
    """[blame] A 5xx from the first replica a request tries is that replica's to answer for (try
    another); one from a second replica is the request's (answer it; try no more)."""
    s = Scenario.with_replicas(("r0", 2), ("r1", 2), ("r2", 2))
    blame = s.machine.blame
    assert blame("r0") is Fault.REPLICA
    assert blame("r1", ["r0"]) is Fault.REQUEST
    assert blame("r0", ["r0"]) is Fault.REPLICA  # the same replica again says nothing of the request
    assert blame("r2", ["r0", "r1"]) is Fault.REQUEST


def test_blame_only_a_replica_that_failed_what_another_served() -> None:
    """[blame] ``served_elsewhere`` is a failure of each replica that answered the request with a 5xx
    (once each, in name order), never of the one that served it nor of a replica not in use; a request
    no replica served blames none."""
    s = Scenario.with_replicas(("r0", 2), ("r1", 2), ("r2", 2))
    s.expect(ServedElsewhere(replica="r2", failed=("r1", "r0", "r1", "r2", "gone")))
    replicas = s.machine.statistics().replicas
    assert (replicas["r0"].failing_until, replicas["r1"].failing_until) == (5.0, 5.0)
    assert replicas["r2"].failing_until is None
    assert s.machine.place("a").replica == "r2"
    s.expect(ServedElsewhere(replica="r2", failed=("r1",)))  # a second failure in a row: 10 s
    assert s.machine.statistics().replicas["r1"].failing_until == 10.0
    s.expect(
        TimeAdvanced(now=30.0),
        *[ReadListing(listing=n, replica=r) for n, r in ((4, "r0"), (5, "r1"), (6, "r2"))],
    )
    s.expect(ListingReceived(listing=5, adapters=()))  # an answer: r1 is healthy again
    assert s.machine.statistics().replicas["r1"].failing_until is None

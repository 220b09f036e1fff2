"""[replicas] (SPEC.md §3.7): replicas added, removed and added back; a removed replica's late answers."""

from __future__ import annotations

import lorafleet as lf
from lorafleet import (
    Fail,
    Fault,
    Grant,
    How,
    IssueLoad,
    LimitSet,
    ListingFailed,
    ListingReceived,
    LoadFinished,
    LoadOutcome,
    MarkMet,
    ReadListing,
    Released,
    ReplicaAdded,
    ReplicasRemoved,
    ReplicaStatistics,
    TimeAdvanced,
)
from lorafleet._machine import REPLICA_REMOVED

from .helpers import held, refused, requested
from scenario import Scenario, landed, loads, unloads


def removed(ticket: int) -> Fail:
    return Fail(ticket=ticket, fault=Fault.REPLICA, message=REPLICA_REMOVED)


def test_replicas_removed_fail_their_waiters_and_ignore_later_answers() -> None:
    """A removal fails the requests waiting on the replica (on a load, on a victim of that load), and
    the load's later answer is ignored: no grant, no unload of its victim."""
    s = Scenario.with_replicas(("r", 1), ("q", 1), headroom=0)
    s.expect(Released(ticket=s.load("r", "a")))
    t1, commands = s.request("r", "b")
    (load,) = loads(commands)  # a is its victim
    t2, _ = s.request("r", "a")  # waits out a's unload
    _t3, commands = s.request("q", "c")
    s.expect(
        ReplicasRemoved(replicas=("r", "unknown")),
        Fail(ticket=t1, fault=Fault.REPLICA, message=REPLICA_REMOVED),
        Fail(ticket=t2, fault=Fault.REPLICA, message=REPLICA_REMOVED),
    )
    s.expect(landed(load))  # ignored: a is not unloaded, b not held
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


def test_replicas_added_again_with_the_same_model_set_the_limit_and_start_no_listing() -> None:
    """Adding a replica in use again with its model changes its limit and nothing else: no listing,
    no change to when it is due or whether it is met."""
    s = Scenario.with_replicas(("r", 2))
    s.expect(ReplicaAdded(replica="r", model="base", limit=1))
    assert s.machine.statistics().replicas["r"] == ReplicaStatistics(
        model="base", limit=1, met=True, held={}, loading=(), unloading=()
    )
    assert s.machine.next_due() == 30.0
    s.expect(TimeAdvanced(now=30.0), ReadListing(listing=2, replica="r"))


def test_replicas_removed_drop_idle_adapters_and_the_victims_of_loads_out() -> None:
    """A removal keeps only the adapters requests run on: idle ones are dropped, and so are the victims
    of loads still out, whose unloads are then never issued. A load out stays out, and lands on the
    replica added back; a listing brings back what the engine has."""
    s = Scenario.with_replicas(("r", 3), headroom=0)
    running = s.load("r", "x")
    s.expect(Released(ticket=s.load("r", "y")))
    s.expect(Released(ticket=s.load("r", "w")))
    t, commands = s.request("r", "z")
    assert commands == [IssueLoad(load=5, replica="r", adapter="z", path="/adapters/z")]  # y its victim
    s.expect(ReplicasRemoved(replicas=("r",)), Fail(ticket=t, fault=Fault.REPLICA, message=REPLICA_REMOVED))
    s.expect(ReplicaAdded(replica="r", model="base", limit=3), ReadListing(listing=6, replica="r"))
    assert s.machine.statistics().replicas["r"] == ReplicaStatistics(
        model="base", limit=3, met=False, held={"x": 1}, loading=("z",), unloading=(), in_flight=1
    )
    s.expect(LoadFinished(load=5, outcome=LoadOutcome.LOADED))  # z lands idle; no victim to unload
    s.expect(ListingReceived(listing=6, adapters=("w", "x", "y", "z")), MarkMet(replica="r"))
    assert held(s, "r") == {"w": 0, "x": 1, "y": 0, "z": 0}  # w and y: back because the engine has them
    s.expect(Released(ticket=running))


def test_replicas_removed_together_fail_their_waiters_in_ticket_order() -> None:
    """One removal of several replicas fails every waiting request, of loads and of victims' unloads,
    in ticket order across all of them (not replica by replica); unknown and repeated ids are passed
    over."""
    s = Scenario.with_replicas(("r", 1), ("q", 1), headroom=0)
    s.expect(Released(ticket=s.load("q", "c")))
    on_q_load, commands = s.request("q", "d")  # c is its victim
    (load_d,) = loads(commands)
    on_r_load, commands = s.request("r", "a")
    (load_a,) = loads(commands)
    on_q_unload, _ = s.request("q", "c")  # waits for c's fate
    on_r_join, _ = s.request("r", "a")
    s.expect(
        ReplicasRemoved(replicas=("r", "nowhere", "q", "r")),
        Fail(ticket=on_q_load, fault=Fault.REPLICA, message=REPLICA_REMOVED),
        Fail(ticket=on_r_load, fault=Fault.REPLICA, message=REPLICA_REMOVED),
        Fail(ticket=on_q_unload, fault=Fault.REPLICA, message=REPLICA_REMOVED),
        Fail(ticket=on_r_join, fault=Fault.REPLICA, message=REPLICA_REMOVED),
    )
    stats = s.machine.statistics()
    assert (stats.replicas, stats.waiting, stats.failures) == ({}, 0, {"replica": 4})
    s.expect(landed(load_d))
    s.expect(landed(load_a))
    s.expect(ReplicasRemoved(replicas=("r", "q")))  # removed already: nothing


def test_replicas_refused_events_change_nothing_a_later_event_can_see() -> None:
    """A refused event leaves the machine as it was: a refused add adds nothing, a refused removal
    removes none of its ids, a refused time does not move the clock, a refused request takes no ticket."""
    s = Scenario.with_replicas(("r", 1))
    refused(s, ReplicaAdded(replica="q", model="base", limit=0), lf.InvalidValueError)
    refused(s, requested(1, "q", "a"), lf.UnknownReplicaError)
    refused(s, ReplicasRemoved(replicas=("r", "")), lf.InvalidValueError)
    refused(s, TimeAdvanced(now=True), lf.InvalidValueError)
    refused(s, LimitSet(model="base", limit=2.0), lf.InvalidValueError)  # type: ignore[arg-type]
    s.expect(requested(1, "r", "a"), IssueLoad(load=2, replica="r", adapter="a", path="/adapters/a"))
    s.expect(requested(2, "r", "b"), IssueLoad(load=3, replica="r", adapter="b", path="/adapters/b"))
    refused(s, TimeAdvanced(now=-1.0), lf.ClockWentBackwardsError)
    s.expect(TimeAdvanced(now=0.0))
    s.expect(TimeAdvanced(now=30.0), ReadListing(listing=4, replica="r"))


def test_replicas_removed_fail_their_waiters_in_ticket_order_whatever_each_waits_on() -> None:
    """Headroom 0: b's load waits for a's unload, so a request can wait on each kind of thing."""
    s = Scenario.with_replicas(("q", 1), ("r", 1), headroom=0)
    q1, _ = s.request("q", "c")  # q's load of c is out
    s.expect(Released(ticket=s.load("r", "a")))
    b1, _ = s.request("r", "b")  # b's load goes out, a its victim
    assert s.machine.statistics().replicas["r"].unloading == ("a",)
    a1, _ = s.request("r", "a")  # waits out a's unload
    b2, _ = s.request("r", "b")  # joins b's load, after a1 arrived
    s.expect(ReplicasRemoved(replicas=("r", "q")), removed(q1), removed(b1), removed(a1), removed(b2))
    assert s.machine.statistics().waiting == 0


def test_a_removed_replicas_late_answers_are_counted_and_do_nothing_else() -> None:
    """b's load, with a its victim, is answered after the removal: counted, and nothing more."""
    s = Scenario.with_replicas(("r", 1), headroom=0)
    s.expect(Released(ticket=s.load("r", "a")))
    t, commands = s.request("r", "b")
    (load,) = loads(commands)
    s.expect(ReplicasRemoved(replicas=("r",)), removed(t))
    s.expect(landed(load))  # no grant, and a is not unloaded
    stats = s.machine.statistics()
    assert stats.loads == {("base", "loaded"): 2}
    assert stats.evictions == {}
    assert stats.replicas == {}
    assert (stats.waiting, stats.leases) == (0, 0)
    # Nothing was left out: the replica is forgotten, and added again it starts afresh.
    s.expect(ReplicaAdded(replica="r", model="base", limit=1), ReadListing(listing=4, replica="r"))


def test_a_removed_replica_is_kept_until_its_last_call_is_answered() -> None:
    s = Scenario.with_replicas(("r", 2))
    t1, commands = s.request("r", "a")
    t2, more = s.request("r", "b")
    (load_a,), (load_b,) = loads(commands), loads(more)
    s.expect(ReplicasRemoved(replicas=("r",)), removed(t1), removed(t2))
    s.expect(LoadFinished(load=load_a.load, outcome=LoadOutcome.LOADED))
    assert s.machine.statistics().loads == {("base", "loaded"): 1}
    # b's load is still out: the replica added back keeps it, and a request joins it.
    s.expect(ReplicaAdded(replica="r", model="base", limit=2), ReadListing(listing=4, replica="r"))
    t3, commands = s.request("r", "b")
    assert commands == []
    s.expect(LoadFinished(load=load_b.load, outcome=LoadOutcome.LOADED), Grant(ticket=t3, how=How.JOINED))
    assert held(s, "r") == {"b": 1}


def test_a_listing_asked_before_a_removal_is_ignored_after_the_replica_is_added_back() -> None:
    s = Scenario.with_replicas(("r", 2), listed=False)
    s.expect(ReplicasRemoved(replicas=("r",)))
    s.expect(ReplicaAdded(replica="r", model="base", limit=2), ReadListing(listing=2, replica="r"))
    s.expect(ListingReceived(listing=1, adapters=("old",)))
    assert not s.machine.is_met("r")
    assert held(s, "r") == {}
    s(ListingReceived(listing=2, adapters=("new",)))
    assert s.machine.is_met("r")
    assert held(s, "r") == {"new": 0}


def test_fault_5_removing_a_replica_during_a_load_never_allows_a_second_load() -> None:
    s = Scenario.with_replicas(("r", 2))
    _, commands = s.request("r", "a")
    (load,) = loads(commands)
    s(ReplicasRemoved(replicas=("r",)))
    s(ReplicaAdded(replica="r", model="base", limit=2))
    t, commands = s.request("r", "a")
    assert loads(commands) == []  # the seed would start a second load of a on r
    s.expect(LoadFinished(load=load.load, outcome=LoadOutcome.LOADED), Grant(ticket=t, how=How.JOINED))

"""Rules SPEC.md states that a port could get wrong and still pass tests/test_rules.py (issue 13).

Each scenario is written to fail on one plausible misreading of the spec, named in its docstring; each
becomes a hand vector (vectors/generate.py). Test names start with the rule they belong to, which the
generator reads.
"""

from __future__ import annotations

import pytest

import lorafleet as lf
from lorafleet import (
    AdapterMissing,
    Cancelled,
    Event,
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
    ReadListing,
    Released,
    ReplicaAdded,
    ReplicasRemoved,
    ReplicaStatistics,
    Requested,
    TimeAdvanced,
    UnloadFinished,
    UnloadOutcome,
    View,
)
from lorafleet._machine import REPLICA_REMOVED

from scenario import Scenario, unloaded


def refused(s: Scenario, event: Event, error: type[lf.UsageError]) -> None:
    """Feed ``event`` and expect it refused with ``error``, before anything changed."""
    before = s.machine.statistics(), s.machine.next_due()
    with pytest.raises(error):
        s(event)
    assert (s.machine.statistics(), s.machine.next_due()) == before


def requested(ticket: int, replica: str, adapter: str) -> Requested:
    return Requested(ticket=ticket, replica=replica, adapter=adapter, path=f"/adapters/{adapter}")


def held(s: Scenario, replica: str) -> dict[str, int]:
    return dict(s.machine.statistics().replicas[replica].held)


# -- tickets and the hit shortcut ---------------------------------------------------------------


def test_hit_and_requested_take_tickets_from_1_each_above_the_highest_seen() -> None:
    """The first ticket allowed is 1; a ticket equal to the highest seen is refused; a hit that
    answers false takes no ticket, one that answers true takes it and counts a hit grant."""
    s = Scenario.with_replicas(("r", 2))
    refused(s, requested(0, "r", "a"), lf.TicketOrderError)
    refused(s, requested(-1, "r", "a"), lf.TicketOrderError)
    assert s.machine.next_ticket == 1
    assert s.machine.hit(1, replica="r", adapter="a") is False  # not held: ticket 1 is still free
    s.expect(requested(1, "r", "a"), IssueLoad(load=2, replica="r", adapter="a", path="/adapters/a"))
    refused(s, requested(1, "r", "b"), lf.TicketOrderError)  # equal to the highest seen
    s.expect(LoadFinished(load=2, outcome=LoadOutcome.LOADED), Grant(ticket=1, how=How.LOADED))
    with pytest.raises(lf.TicketOrderError):
        s.machine.hit(1, replica="r", adapter="a")
    assert s.machine.hit(2, replica="r", adapter="a") is True
    refused(s, requested(2, "r", "b"), lf.TicketOrderError)  # the hit took ticket 2
    assert held(s, "r") == {"a": 2}
    assert s.machine.statistics().grants == {"hit": 1, "joined": 0, "loaded": 1}
    s.expect(Released(ticket=2))  # a hit's ticket is a lease like any other
    assert held(s, "r") == {"a": 1}


def test_hit_checks_ticket_then_replica_then_adapter_and_refused_changes_nothing() -> None:
    """The shortcut checks its arguments as ``requested`` does, in the same order."""
    s = Scenario.with_replicas(("r", 2))
    s.load("r", "a")
    m = s.machine
    before = m.statistics()
    with pytest.raises(lf.TicketOrderError):
        m.hit(1, replica="nowhere", adapter="")
    with pytest.raises(lf.UnknownReplicaError):
        m.hit(2, replica="nowhere", adapter="")
    with pytest.raises(lf.InvalidValueError):
        m.hit(2, replica="r", adapter="")
    with pytest.raises(lf.TicketOrderError):
        m.hit(True, replica="r", adapter="a")  # a boolean is not an integer
    assert m.statistics() == before
    assert m.hit(2, replica="r", adapter="a") is True


def test_release_of_a_ticket_never_requested_below_the_highest_does_nothing() -> None:
    """Tickets from 1 to the highest seen that are neither waiting nor leased count as ended, used
    or skipped: releasing or cancelling one does nothing; 0 and tickets above the highest are refused."""
    s = Scenario.with_replicas(("r", 2))
    s.expect(requested(5, "r", "a"), IssueLoad(load=2, replica="r", adapter="a", path="/adapters/a"))
    s.expect(Released(ticket=3))  # skipped: never requested, below the highest
    s.expect(Cancelled(ticket=4))
    refused(s, Released(ticket=5), lf.UnknownTicketError)  # still waiting: cancel it instead
    refused(s, Released(ticket=6), lf.UnknownTicketError)
    refused(s, Cancelled(ticket=0), lf.UnknownTicketError)
    s.expect(LoadFinished(load=2, outcome=LoadOutcome.LOADED), Grant(ticket=5, how=How.LOADED))
    assert held(s, "r") == {"a": 1}


# -- the engine's answers -----------------------------------------------------------------------


def test_load_outcome_failure_without_a_message_names_the_adapter_and_replica_as_they_are() -> None:
    """An empty failure message becomes ``the load of '<adapter>' on '<replica>' failed``, the names
    written as they are, whatever quotes or backslashes they hold."""
    s = Scenario.with_replicas(("o'brien", 2))
    t1, _ = s.request("o'brien", "it's")
    t2, _ = s.request("o'brien", 'say "hi"\\now')
    s.expect(
        LoadFinished(load=2, outcome=LoadOutcome.ADAPTER_FAULT, message=""),
        Fail(ticket=t1, fault=Fault.ADAPTER, message="the load of 'it's' on 'o'brien' failed"),
    )
    s.expect(
        LoadFinished(load=3, outcome=LoadOutcome.REPLICA_FAULT),
        Fail(ticket=t2, fault=Fault.REPLICA, message="the load of 'say \"hi\"\\now' on 'o'brien' failed"),
    )


def test_load_outcome_for_a_removed_replica_holds_nothing() -> None:
    """A load answered after its replica was removed is counted and nothing more: the adapter does
    not become held, not even while a running request keeps the replica, which a re-add then shows."""
    s = Scenario.with_replicas(("r", 2))
    running = s.load("r", "x")
    t, _ = s.request("r", "a")
    s.expect(ReplicasRemoved(replicas=("r",)), Fail(ticket=t, fault=Fault.REPLICA, message=REPLICA_REMOVED))
    s.expect(LoadFinished(load=3, outcome=LoadOutcome.LOADED))
    assert s.machine.statistics().loads == {("base", "loaded"): 2}
    s.expect(ReplicaAdded(replica="r", model="base", limit=2), ReadListing(listing=4, replica="r"))
    assert held(s, "r") == {"x": 1}
    assert s.machine.hit(3, replica="r", adapter="a") is False
    s.expect(requested(3, "r", "a"), IssueLoad(load=5, replica="r", adapter="a", path="/adapters/a"))
    # Once nothing keeps it, a removed replica is forgotten, and a late answer cannot reach it either.
    s.expect(ReplicasRemoved(replicas=("r",)), Fail(ticket=3, fault=Fault.REPLICA, message=REPLICA_REMOVED))
    s.expect(Released(ticket=running))
    s.expect(ListingFailed(listing=4))
    s.expect(LoadFinished(load=5, outcome=LoadOutcome.LOADED))
    s.expect(ReplicaAdded(replica="r", model="base", limit=2), ReadListing(listing=6, replica="r"))
    assert held(s, "r") == {}


def test_load_outcome_after_a_re_add_with_another_model_counts_under_the_new_model() -> None:
    """An answer is counted under the model its replica has when the answer comes."""
    s = Scenario.with_replicas(("r", 2))
    t, _ = s.request("r", "a")
    s.expect(ReplicasRemoved(replicas=("r",)), Fail(ticket=t, fault=Fault.REPLICA, message=REPLICA_REMOVED))
    s.expect(ReplicaAdded(replica="r", model="other", limit=1), ReadListing(listing=3, replica="r"))
    s.expect(LoadFinished(load=2, outcome=LoadOutcome.LOADED))  # no one waits: it lands idle
    stats = s.machine.statistics()
    assert stats.loads == {("other", "loaded"): 1}
    assert stats.replicas["r"] == ReplicaStatistics(
        model="other", limit=1, met=False, held={"a": 0}, loading=(), unloading=()
    )


def test_load_outcome_and_listing_for_a_removed_replica_are_checked_before_being_ignored() -> None:
    """Answers a removed replica's calls get are checked like any other (a message that is not a
    string, a listed name that is not one) before they are counted and ignored."""
    s = Scenario.with_replicas(("r", 2))
    t, _ = s.request("r", "a")
    s.expect(TimeAdvanced(now=30.0), ReadListing(listing=3, replica="r"))
    s.expect(ReplicasRemoved(replicas=("r",)), Fail(ticket=t, fault=Fault.REPLICA, message=REPLICA_REMOVED))
    refused(s, LoadFinished(load=2, outcome=LoadOutcome.LOADED, message=None), lf.InvalidValueError)  # type: ignore[arg-type]
    refused(s, ListingReceived(listing=3, adapters=("x", "")), lf.InvalidValueError)
    refused(s, ListingReceived(listing=3, adapters="x"), lf.InvalidValueError)  # type: ignore[arg-type]
    s.expect(ListingReceived(listing=3, adapters=("x",)))  # abandoned: accepted, nothing else
    s.expect(LoadFinished(load=2, outcome=LoadOutcome.LOADED))
    refused(s, ListingFailed(listing=3), lf.UnknownOperationError)  # answered already
    s.expect(ReplicaAdded(replica="r", model="base", limit=2), ReadListing(listing=4, replica="r"))
    assert s.machine.statistics().replicas["r"].held == {}


# -- releases ------------------------------------------------------------------------------------


def test_release_of_a_lease_on_a_dropped_adapter_does_not_make_it_idle() -> None:
    """Releasing the last lease on a dropped entry ends the lease and nothing else: the name does not
    go back to ``idle``, so it is never chosen as a victim."""
    s = Scenario.with_replicas(("r", 1))
    lost = s.load("r", "x")
    s.expect(AdapterMissing(replica="r", adapter="x"))
    other = s.load("r", "y")  # x no longer counts: nothing to settle
    s.expect(Released(ticket=lost))
    s.expect(Released(ticket=other))
    assert held(s, "r") == {"y": 0}
    t, _ = s.request("r", "w")
    s.expect(
        LoadFinished(load=4, outcome=LoadOutcome.LOADED),
        Grant(ticket=t, how=How.LOADED),
        IssueUnload(unload=5, replica="r", adapter="y"),
    )


# -- listings and time ---------------------------------------------------------------------------


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


# -- replicas ------------------------------------------------------------------------------------


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


def test_replicas_removed_drop_idle_adapters_and_abandon_loads_not_yet_issued() -> None:
    """A removal keeps only the adapters requests run on: idle ones are dropped, and a load still
    waiting for its victims is abandoned, so answering the victim's unload after a re-add issues
    nothing, and a new request loads afresh. Headroom 0: a load past the limit waits for its victims."""
    s = Scenario.with_replicas(("r", 3), headroom=0)
    running = s.load("r", "x")
    s.expect(Released(ticket=s.load("r", "y")))
    s.expect(Released(ticket=s.load("r", "w")))
    t, commands = s.request("r", "z")
    assert commands == [IssueUnload(unload=5, replica="r", adapter="y")]  # z's load waits for it
    s.expect(ReplicasRemoved(replicas=("r",)), Fail(ticket=t, fault=Fault.REPLICA, message=REPLICA_REMOVED))
    s.expect(ReplicaAdded(replica="r", model="base", limit=3), ReadListing(listing=7, replica="r"))
    assert s.machine.statistics().replicas["r"] == ReplicaStatistics(
        model="base", limit=3, met=False, held={"x": 1}, loading=(), unloading=("y",), in_flight=1
    )
    s.expect(UnloadFinished(unload=5, outcome=UnloadOutcome.UNLOADED))
    s.expect(ListingReceived(listing=7, adapters=("w", "x")), MarkMet(replica="r"))
    assert held(s, "r") == {"w": 0, "x": 1}  # w is back because the engine has it, not because it was kept
    _t, commands = s.request("r", "z")
    assert commands == [IssueLoad(load=8, replica="r", adapter="z", path="/adapters/z")]
    s.expect(Released(ticket=running))


def test_replicas_removed_together_fail_their_waiters_in_ticket_order() -> None:
    """One removal of several replicas fails every waiting request, of loads and of unloads, in
    ticket order across all of them (not replica by replica); unknown and repeated ids are passed over.
    Headroom 0: a load past the limit waits for its victims' unloads."""
    s = Scenario.with_replicas(("r", 1), ("q", 1), headroom=0)
    s.expect(Released(ticket=s.load("q", "c")))
    on_q_load, _ = s.request("q", "d")  # c is unloaded to make room
    on_r_load, _ = s.request("r", "a")
    on_q_unload, _ = s.request("q", "c")  # waits for c's unload
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
    s.expect(unloaded(IssueUnload(unload=4, replica="q", adapter="c")))
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


# -- statistics ----------------------------------------------------------------------------------


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

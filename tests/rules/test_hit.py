"""[hit] (SPEC.md §3.1): a request for an adapter its replica holds is granted at once; ``hit()`` is its
fast path; tickets come in order."""

from __future__ import annotations

import pytest

import lorafleet as lf
from lorafleet import (
    Cancelled,
    Grant,
    How,
    IssueLoad,
    IssueUnload,
    LoadFinished,
    LoadOutcome,
    Released,
    TicketOrderError,
)

from .helpers import held, refused, requested
from scenario import Scenario, loads


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


def test_hit_moves_the_ticket_the_lru_order_and_the_counts_as_a_requested_hit_does() -> None:
    s = Scenario.with_replicas(("r", 2))
    a, b = s.load("r", "a"), s.load("r", "b")
    s.expect(Released(ticket=a))
    s.expect(Released(ticket=b))
    m = s.machine
    t = m.next_ticket
    assert m.hit(t, replica="r", adapter="a")
    assert m.next_ticket == t + 1
    with pytest.raises(TicketOrderError):
        m.request(t, replica="r", adapter="c", path="/adapters/c")
    stats = m.statistics()
    assert (stats.grants["hit"], stats.leases, held(s, "r")) == (1, 1, {"a": 1, "b": 0})
    # a is in use: no victim, even though it was idle longer than b.
    s.ticket = t
    s.expect(Released(ticket=t))
    # Its release makes a the most recently used: b goes first, once c has landed ([settle]).
    c, commands = s.request("r", "c")
    s.expect(
        LoadFinished(load=loads(commands)[0].load, outcome=LoadOutcome.LOADED),
        Grant(ticket=c, how=How.LOADED),
        IssueUnload(unload=5, replica="r", adapter="b"),
    )


def test_hit_is_only_for_a_held_adapter_not_one_being_loaded() -> None:
    s = Scenario.with_replicas(("r", 2))
    first, _ = s.request("r", "a")
    m = s.machine
    ticket = m.next_ticket
    assert not m.hit(ticket, replica="r", adapter="a")
    s.ticket = ticket - 1
    joined, commands = s.request("r", "a")
    assert (joined, commands) == (ticket, [])
    s.expect(
        LoadFinished(load=2, outcome=LoadOutcome.LOADED),
        Grant(ticket=first, how=How.LOADED),
        Grant(ticket=joined, how=How.JOINED),
    )
    assert m.hit(m.next_ticket, replica="r", adapter="a")
    assert held(s, "r") == {"a": 3}


def test_hit_after_a_cancel_counts_once_and_its_release_is_its_own() -> None:
    s = Scenario.with_replicas(("r", 1))
    t = s.load("r", "a")
    m = s.machine
    fast = m.next_ticket
    assert m.hit(fast, replica="r", adapter="a")
    s.ticket = fast
    s.expect(Cancelled(ticket=t))
    assert held(s, "r") == {"a": 1}
    s.expect(Released(ticket=fast))
    assert held(s, "r") == {"a": 0}
    assert m.statistics().grants == {"hit": 1, "joined": 0, "loaded": 1}

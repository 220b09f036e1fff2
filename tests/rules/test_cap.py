"""[cap] (SPEC.md §3.9): a cold request waits for room rather than go past its replica's cap; an engine's
``--max-loras`` counts as room."""

from __future__ import annotations

from lorafleet import (
    Cancelled,
    Fail,
    Fault,
    Grant,
    How,
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
    TimeAdvanced,
    UnloadFinished,
    UnloadOutcome,
)
from lorafleet._machine import REPLICA_REMOVED

from .helpers import held, read_each
from scenario import Scenario


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
    # a ends: it is idle, so room; c's load goes out with a as its victim, and d joins it.
    s.expect(Released(ticket=a), IssueLoad(load=4, replica="r", adapter="c", path="/adapters/c"))
    s.expect(
        LoadFinished(load=4, outcome=LoadOutcome.LOADED),
        Grant(ticket=c, how=How.LOADED),
        Grant(ticket=d, how=How.JOINED),
        IssueUnload(unload=5, replica="r", adapter="a"),
    )
    s.expect(UnloadFinished(unload=5, outcome=UnloadOutcome.UNLOADED))
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


def test_cap_is_never_below_the_engines_max_loras() -> None:
    """[cap] The cap is the line plus the headroom, or the engine's ``--max-loras`` where a reading
    showed more: one batch there can use that many adapters, so a load within it does not wait."""
    s = Scenario.reading(("r", 1), headroom=0)
    s.load("r", "a")
    assert s.machine.place("b") == Placement(replica="r", placed=Placed.WAIT)
    waiting, commands = s.request("r", "b")
    assert commands == []  # at the cap of 1 + 0: it waits for room
    s.expect(Cancelled(ticket=waiting))
    read_each(s, 30.0, r={"adapters": ["a"], "max_loras": 3})
    assert s.machine.place("b") == Placement(replica="r", placed=Placed.OVER)
    for adapter in ("b", "c"):
        _t, commands = s.request("r", adapter)
        assert [type(c) for c in commands] == [IssueLoad]
    _t, commands = s.request("r", "d")
    assert commands == []  # a, b and c: at the cap of 3
    assert s.machine.statistics().replicas["r"].queued == 1


def test_cap_raised_by_a_reading_admits_the_queue_first_come_first_served() -> None:
    """[cap] A reading whose ``max_loras`` raises the cap admits the requests waiting at it then, before
    any that come later."""
    s = Scenario.reading(("r", 1), headroom=0)
    s.load("r", "a")
    _waiting, commands = s.request("r", "b")
    assert commands == []  # at the cap of 1 + 0
    (listing,) = s(TimeAdvanced(now=30.0))
    assert isinstance(listing, ReadListing)
    assert s(ListingReceived(listing=listing.listing, adapters=("a",))) == [
        ReadEngine(read=s.reads["r"], replica="r")
    ]
    commands = s.answer_read("r", ["a"], max_loras=3)
    assert [(type(c), getattr(c, "adapter", None)) for c in commands] == [(IssueLoad, "b")]
    assert s.machine.statistics().replicas["r"].queued == 0
    assert s.machine.reading("r") is not None
    assert s.machine.reading("r").max_loras == 3  # type: ignore[union-attr]


def test_cap_a_load_takes_no_victim_while_more_adapters_are_in_use_than_one_batch_runs() -> None:
    """[cap], SPEC.md §3.16. With more adapters in use than the engine's ``max_loras``, one of them may
    wait in the engine's queue, unused, and the engine would drop it rather than a victim: a load that
    would take a victim waits then. A load into a free slot drops nothing and goes."""
    s = Scenario.configured(read_engine=True, headroom=0)
    s(ReplicaAdded(replica="r", model="base", limit=3))
    s.expect(ListingReceived(listing=1, adapters=()), MarkMet(replica="r"), ReadEngine(read=2, replica="r"))
    assert s.answer_read("r", (), max_loras=1) == []
    a, b = s.load("r", "a"), s.load("r", "b")  # two in use, one batch runs one
    s.expect(Released(ticket=s.load("r", "c")))  # a free slot: it goes; the count is at the line
    assert s.machine.place("d") == Placement(replica="r", placed=Placed.WAIT)
    d, commands = s.request("r", "d")
    assert commands == []  # c would be its victim, with a and b in use: it waits
    # b alone in use now: one batch runs it, so c is the engine's least recently used, d's victim.
    s.expect(Released(ticket=a), IssueLoad(load=6, replica="r", adapter="d", path="/adapters/d"))
    assert s.machine.statistics().replicas["r"].unloading == ("c",)
    assert d == s.ticket
    s.expect(Released(ticket=b))


def test_cap_a_load_that_takes_a_victim_waits_while_the_engine_queues() -> None:
    """[cap] With the engine's capacity known, a load that would take a victim waits while more
    requests are granted there than the engine runs at once: an adapter in use may then wait in the
    engine's queue, unused since before the victim's last request ended, and the engine would drop
    it instead of the victim (issue 31: every drop on the grid's 90 % busy row was one). A release
    that brings the grants down to the capacity admits the queue, its adapter idle or not."""
    s = Scenario.configured(headroom=0, concurrency=2)
    s.expect(ReplicaAdded(replica="r", model="base", limit=2), ReadListing(listing=1, replica="r"))
    s.expect(ListingReceived(listing=1, adapters=()), MarkMet(replica="r"))
    a1 = s.load("r", "a")
    a2 = s.hit("r", "a")
    b = s.load("r", "b")
    s.expect(Released(ticket=b))  # b is idle: the victim a cold load would take
    s.hit("r", "a")  # three granted on an engine that runs two: one waits in its queue
    assert s.machine.place("c") == Placement(replica="r", placed=Placed.WAIT)
    c, commands = s.request("r", "c")
    assert commands == []  # it waits for the engine's queue to empty, though b is idle
    assert s.machine.statistics().replicas["r"].queued == 1
    # a's first request ends: two granted, the engine runs them both; c's load takes b's room.
    s.expect(Released(ticket=a1), IssueLoad(load=4, replica="r", adapter="c", path="/adapters/c"))
    s.expect(
        LoadFinished(load=4, outcome=LoadOutcome.LOADED),
        Grant(ticket=c, how=How.LOADED),
        IssueUnload(unload=5, replica="r", adapter="b"),
    )
    assert held(s, "r") == {"a": 2, "c": 1}
    s.expect(Released(ticket=a2))  # no one waits for room now

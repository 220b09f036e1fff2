"""[read] (SPEC.md §3.15): when the machine reads an engine, and the requests that wait for the reading."""

from __future__ import annotations

import pytest

from lorafleet import (
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
    ReadEngine,
    ReadingFailed,
    ReadingReceived,
    ReadListing,
    Released,
    ReplicaAdded,
    ReplicasRemoved,
    TimeAdvanced,
    UnknownOperationError,
)
from lorafleet._machine import REFRESH, REPLICA_REMOVED

from .helpers import another_routers, idle_pair, read_each, read_now, routed, victims
from scenario import Scenario, landed, loads, unloaded


def test_read_after_each_listing_and_one_at_a_time() -> None:
    s = Scenario.configured(read_engine=True)
    (listing,) = s(ReplicaAdded(replica="r", model="base", limit=2))
    assert isinstance(listing, ReadListing)
    s.expect(ListingReceived(listing=1, adapters=()), MarkMet(replica="r"), ReadEngine(read=2, replica="r"))
    (listing,) = s(TimeAdvanced(now=30.0))
    assert isinstance(listing, ReadListing)
    # The read of the first listing is still out: no second read.
    s.expect(ListingReceived(listing=listing.listing, adapters=()))
    s.expect(ReadingReceived(read=2, adapters=()))
    assert s.machine.named("r") == frozenset()


def test_read_not_without_the_setting() -> None:
    """[read] Without ``read_engine`` no engine is read: not after a listing, not before a load that
    takes a victim, with a cap or without."""
    for headroom in (0, None):
        s = Scenario.with_replicas(("r", 1), headroom=headroom)
        s.expect(Released(ticket=s.load("r", "a")))
        _t, commands = s.request("r", "b")
        assert [type(c) for c in commands] == [IssueLoad]
        assert victims(s, "r") == ("a",)
        assert [type(c) for c in s(landed(loads(commands)[0]))] == [Grant, IssueUnload]


def test_read_before_taking_a_victim_where_another_router_runs_the_request_waits_for_it() -> None:
    """[read] A cold load that would take a victim on a replica whose last reading named another
    router's adapter waits for a fresh reading, which may spare a victim."""
    s = Scenario.reading(("r", 2), headroom=0)
    idle_pair(s)
    another_routers(s)
    ticket, commands = s.request("r", "c")
    assert commands == [ReadEngine(read=s.reads["r"], replica="r")]
    # Another request that needs the same read joins it; a hit does not wait.
    other, joined = s.request("r", "d")
    assert joined == []
    s.expect(Released(ticket=s.hit("r", "b")))
    # The reading names a (another router's requests run on it): b is c's victim though a was idle
    # longer, and d, admitted next, finds nothing idle left: it waits at the cap.
    (load_c,) = s.answer_read("r", ["a"])
    assert isinstance(load_c, IssueLoad)
    assert load_c.adapter == "c"
    assert victims(s, "r") == ("b",)
    assert s.machine.statistics().replicas["r"].queued == 1  # d
    (_, unload) = s.expect(
        LoadFinished(load=load_c.load, outcome=LoadOutcome.LOADED),
        Grant(ticket=ticket, how=How.LOADED),
        IssueUnload(unload=load_c.load + 1, replica="r", adapter="b"),
    )
    assert isinstance(unload, IssueUnload)
    s.expect(unloaded(unload))  # [unload-outcome] admits no queue: d waits on
    assert s.machine.statistics().replicas["r"].queued == 1
    s.expect(Cancelled(ticket=other))


def test_read_not_by_a_lone_router_whose_readings_name_only_its_own_requests() -> None:
    """[read] A reading that names only adapters this router's requests run on says nothing of another
    router: a load that evicts first there does not wait for a fresh one."""
    s = Scenario.reading(("r", 1), headroom=0)
    t = s.load("r", "a")
    read_now(s, "r", "a")
    assert s.machine.named("r") == frozenset()  # it stands as an empty reading ([reading])
    s.expect(Released(ticket=t))
    _t, commands = s.request("r", "b")
    assert [type(c) for c in commands] == [IssueLoad]
    assert victims(s, "r") == ("a",)


def test_read_before_taking_a_victim_without_a_cap_too() -> None:
    """[read] With no cap (headroom None) a cold load past the line takes a victim all the same, so it
    waits for a reading where another router runs."""
    s = Scenario.reading(("r", 1))
    s.expect(Released(ticket=s.load("r", "a")))
    another_routers(s)
    _t, commands = s.request("r", "b")
    assert [type(c) for c in commands] == [ReadEngine]


def test_read_not_before_a_load_into_a_free_slot() -> None:
    s = Scenario.reading(("r", 2))
    s.expect(Released(ticket=s.load("r", "a")))
    _t, commands = s.request("r", "b")
    assert [type(c) for c in commands] == [IssueLoad]


def test_read_not_of_an_engine_without_the_gauge() -> None:
    """[read] An engine that cannot tell what runs there is not read before an eviction, with a cap or
    without."""
    for headroom in (0, None):
        s = Scenario.configured(read_engine=True, headroom=headroom)
        s(ReplicaAdded(replica="r", model="base", limit=1))
        s(ListingReceived(listing=1, adapters=("a",)))
        s.expect(ReadingReceived(read=2, adapters=None))  # it cannot tell what runs there
        _t, commands = s.request("r", "b")
        assert [type(c) for c in commands] == [IssueLoad]  # a is b's victim without a read
        assert victims(s, "r") == ("a",)
        assert [type(c) for c in s(landed(loads(commands)[0]))] == [Grant, IssueUnload]


def test_read_a_request_before_the_first_reading_waits_for_it() -> None:
    """[read] Before its engine's first reading, a load that evicts first (headroom 0) waits for it."""
    s = Scenario.configured(read_engine=True, headroom=0)
    s(ReplicaAdded(replica="r", model="base", limit=1))
    s(ListingReceived(listing=1, adapters=("a",)))  # the read goes out
    _ticket, commands = s.request("r", "b")
    assert commands == []  # a may run for another router: the first reading is awaited
    s.expect(ReadingReceived(read=2, adapters=("a",)))  # it does: a untouched, b waits at the cap
    assert s.machine.statistics().replicas["r"].queued == 1


def test_read_a_failed_read_lets_the_waiting_request_go_on() -> None:
    """[read] Headroom 0, and another router on the engine: b waits for a reading that never comes."""
    s = Scenario.reading(("r", 1), headroom=0)
    s.expect(Released(ticket=s.load("r", "a")))
    another_routers(s)
    _t, commands = s.request("r", "b")
    assert [type(c) for c in commands] == [ReadEngine]
    (load,) = s.fail_read("r", "no answer within 5 s")
    assert isinstance(load, IssueLoad)
    assert victims(s, "r") == ("a",)


def test_read_at_the_cap_a_release_of_a_reported_adapter_reads_again() -> None:
    s = Scenario.reading(("r", 1), headroom=0)
    t = s.load("r", "a")
    read_now(s, "r", "a", "x")  # x: another router's
    _t, commands = s.request("r", "b")
    assert commands == [ReadEngine(read=s.reads["r"], replica="r")]
    s.expect(ReadingReceived(read=s.reads["r"], adapters=("a", "x")))  # at the cap: b waits in the queue
    # This router's request on a ends; the reading still names it, so read again.
    (read,) = s(Released(ticket=t))
    assert read == ReadEngine(read=s.reads["r"], replica="r")
    (load,) = s.answer_read("r", [])
    assert isinstance(load, IssueLoad)
    assert load.adapter == "b"
    assert victims(s, "r") == ("a",)


def test_read_at_the_cap_a_release_reads_not_once_the_queue_was_cancelled() -> None:
    """[read] The read on a release is for requests waiting at the cap: none wait once they cancelled."""
    s = Scenario.reading(("r", 1), headroom=0)
    t = s.load("r", "a")
    read_now(s, "r", "a", "x")
    queued, _ = s.request("r", "b")
    s.expect(ReadingReceived(read=s.reads["r"], adapters=("a", "x")))
    s.expect(Cancelled(ticket=queued))
    s.expect(Released(ticket=t))


def test_read_a_cancelled_request_waits_no_more() -> None:
    s = Scenario.reading(("r", 1), headroom=0)
    s.expect(Released(ticket=s.load("r", "a")))
    another_routers(s)
    ticket, _ = s.request("r", "b")
    s.expect(Cancelled(ticket=ticket))
    assert s.machine.statistics().replicas["r"].in_flight == 0
    s.expect(ReadingReceived(read=s.reads["r"], adapters=()))


def test_read_a_removal_fails_the_waiting_requests_and_its_answer_is_ignored() -> None:
    s = Scenario.reading(("r", 1), headroom=0)
    s.expect(Released(ticket=s.load("r", "a")))
    another_routers(s)
    ticket, _ = s.request("r", "b")
    read = s.reads["r"]
    s.expect(
        ReplicasRemoved(replicas=("r",)), Fail(ticket=ticket, fault=Fault.REPLICA, message=REPLICA_REMOVED)
    )
    s.expect(ReadingReceived(read=read, adapters=("a",)))
    with pytest.raises(UnknownOperationError):
        s(ReadingReceived(read=read, adapters=()))


def test_read_after_assigning_a_routed_request_every_few_requests_to_a_replica_others_use() -> None:
    """[read] Other routers' load on an engine moves: once this router has sent ``REFRESH`` requests to
    a replica they use since its last reading, assigning one there starts a fresh read, which no
    request waits for. Capacity is set here, so only the other routers' load asks for it."""
    s = Scenario.reading(("r", 4), concurrency=8)
    read_each(s, 30.0, r={"adapters": ["x"], "running": 1, "waiting": 0})  # x: another router's
    for _ in range(REFRESH - 1):
        _t, commands = routed(s, "a")
        assert not [c for c in commands if isinstance(c, ReadEngine)], commands
    ticket, commands = routed(s, "a")
    assert commands == [
        Assign(ticket=ticket, replica="r", placed=Placed.LOADING),
        ReadEngine(read=s.reads["r"], replica="r"),
    ]
    ticket, commands = routed(s, "a")  # the read is out: one at a time, and nothing waits for it
    assert commands == [Assign(ticket=ticket, replica="r", placed=Placed.LOADING)]


def test_read_after_assigning_a_routed_request_past_what_an_engine_was_seen_running() -> None:
    """[read] On an engine of unknown capacity, a routed request that leaves more requests there than
    any reading showed running with none waiting starts a fresh read (it may be full now); nothing
    waits for it. Meanwhile ``place_hit`` leaves such a holder to routing, which reads it."""
    s = Scenario.reading(("r", 2))
    tickets = [s.load("r", "a"), s.hit("r", "a")]
    read_each(s, 30.0, r={"adapters": ["a"], "running": 2, "waiting": 0})  # its own two, no queue
    for ticket in tickets:
        s.expect(Released(ticket=ticket))
    for _ in range(2):
        ticket, commands = routed(s, "a")
        assert commands == [
            Assign(ticket=ticket, replica="r", placed=Placed.HELD),
            Grant(ticket=ticket, how=How.HIT),
        ]
    ticket, commands = routed(s, "a")  # a third: more than it was seen running
    assert commands == [
        Assign(ticket=ticket, replica="r", placed=Placed.HELD),
        Grant(ticket=ticket, how=How.HIT),
        ReadEngine(read=s.reads["r"], replica="r"),
    ]
    assert s.fail_read("r") == []  # nothing learned: it may still be full
    assert s.machine.place_hit(s.ticket + 1, adapter="a") is None
    ticket, commands = routed(s, "a")
    assert commands == [
        Assign(ticket=ticket, replica="r", placed=Placed.HELD),
        Grant(ticket=ticket, how=How.HIT),
        ReadEngine(read=s.reads["r"], replica="r"),
    ]
    assert s.answer_read("r", ["a"], running=4, waiting=0) == []  # still no queue: it carries four
    assert s.machine.place_hit(s.ticket + 1, adapter="a") is None  # a fifth is past that: read again
    s.expect(Released(ticket=ticket))
    assert s.machine.place_hit(s.ticket + 1, adapter="a") == "r"  # a fourth is not"


def test_read_not_again_by_a_lone_router_below_the_engines_known_capacity() -> None:
    """[read] A router alone on an engine of known capacity has nothing to refresh: its own requests
    are all the load there is, and they do not fill it."""
    s = Scenario.reading(("r", 2), concurrency=REFRESH)
    for _ in range(REFRESH):
        _t, commands = routed(s, "a")
        assert not [c for c in commands if isinstance(c, ReadEngine)], commands


def test_read_answers_of_the_wrong_kind_are_refused() -> None:
    s = Scenario.configured(read_engine=True)
    s(ReplicaAdded(replica="r", model="base", limit=1))
    s(ListingReceived(listing=1, adapters=()))
    for event in (
        ReadingReceived(read=1, adapters=()),  # a listing's number
        ReadingReceived(read=2, adapters="a"),  # type: ignore[arg-type]
        ReadingReceived(read=2, adapters=("a", "")),
        ReadingReceived(read=2, adapters=(), running=-1),
        ReadingReceived(read=2, adapters=(), waiting=1.5),  # type: ignore[arg-type]
        ReadingFailed(read=2, message=None),  # type: ignore[arg-type]
    ):
        with pytest.raises((InvalidValueError, UnknownOperationError)):
            s(event)
    s.expect(ReadingReceived(read=2, adapters=(), running=0, waiting=0))


def test_read_refresh_needs_an_engine_that_counts_its_requests() -> None:
    """[read] An engine whose readings name adapters but count no requests (no ``running`` or
    ``waiting``) is not read again as requests are placed on it, while it holds no other router's
    adapter; a foreign one is read every ``REFRESH`` requests, not after each."""
    s = Scenario.reading(("r", 4))
    read_each(s, 30.0, r={"adapters": []})
    for _ in range(6):
        _ticket, commands = routed(s, "a")
        assert not any(isinstance(c, ReadEngine) for c in commands), commands
    read_each(s, 60.0, r={"adapters": ["x"]})  # another router's adapter: foreign
    reads = []
    for _ in range(8):
        _ticket, commands = routed(s, "a")
        reads.append(any(isinstance(c, ReadEngine) for c in commands))
        if "r" in s.reads:
            assert s.answer_read("r", ["x"]) == []
    assert reads == [False, False, False, True, False, False, False, True]

"""[read]: the machine reads what runs on an engine when it needs to; [elsewhere]: what the engine says
runs there, from any router, is never a victim; [read-failed]: a read that gets no answer leaves that
reading standing until the next listing; [route]: a request placed by the machine, read first where
[read] asks; [share]: each of R routers fills its share of a replica's free slots."""

from __future__ import annotations

import pytest

from lorafleet import (
    AdapterMissing,
    Assign,
    Cancelled,
    Command,
    Fail,
    Fault,
    Grant,
    How,
    InvalidValueError,
    IssueLoad,
    IssueUnload,
    ListingFailed,
    ListingReceived,
    LoadFinished,
    LoadOutcome,
    MarkMet,
    Placed,
    Placement,
    ReadEngine,
    ReadingFailed,
    ReadingReceived,
    ReadListing,
    Released,
    ReplicaAdded,
    ReplicasRemoved,
    Routed,
    TimeAdvanced,
    UnknownOperationError,
    UnloadFinished,
    UnloadOutcome,
)
from lorafleet._machine import REPLICA_REMOVED, no_replica_message

from scenario import Scenario, loads, unloaded, unloads


def idle_pair(s: Scenario, replica: str = "r") -> None:
    """``replica`` holds a then b, both idle, a the least recently used."""
    s.expect(Released(ticket=s.load(replica, "a")))
    s.expect(Released(ticket=s.load(replica, "b")))


def read_now(s: Scenario, replica: str, *running: str, now: float = 30.0) -> None:
    """List ``replica`` again (nothing changed) and read its engine: ``running`` run there."""
    held = s.machine.statistics().replicas[replica].held
    s.list_and_read(now, replica, held, running)


# -- [read]: when the machine reads an engine ------------------------------------------------------


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
    assert s.machine.reported("r") == frozenset()


def test_read_not_without_the_setting() -> None:
    s = Scenario.with_replicas(("r", 1))  # the default machine reads nothing
    s.expect(Released(ticket=s.load("r", "a")))
    _t, commands = s.request("r", "b")
    assert [type(c) for c in commands] == [IssueUnload]


def test_read_before_a_cold_load_with_no_free_slot_the_request_waits_for_it() -> None:
    s = Scenario.reading(("r", 2))
    idle_pair(s)
    ticket, commands = s.request("r", "c")
    assert commands == [ReadEngine(read=s.reads["r"], replica="r")]
    # Another request that needs the same read joins it; one with a free slot or a hit does not wait.
    other, joined = s.request("r", "d")
    assert joined == []
    assert s.hit("r", "a")
    # The reading names a (another router's requests run on it): b is c's victim, and d, admitted next,
    # finds nothing idle left and goes over the limit.
    unload, load_d = s.answer_read("r", ["a"])
    assert isinstance(unload, IssueUnload)
    assert unload.adapter == "b"
    assert isinstance(load_d, IssueLoad)
    assert load_d.adapter == "d"  # nothing idle left for d: over the limit
    (load_c,) = s(unloaded(unload))
    assert isinstance(load_c, IssueLoad)
    assert load_c.adapter == "c"
    s.expect(LoadFinished(load=load_c.load, outcome=LoadOutcome.LOADED), Grant(ticket=ticket, how=How.LOADED))
    s.expect(LoadFinished(load=load_d.load, outcome=LoadOutcome.LOADED), Grant(ticket=other, how=How.LOADED))


def test_read_not_before_a_load_into_a_free_slot() -> None:
    s = Scenario.reading(("r", 2))
    s.expect(Released(ticket=s.load("r", "a")))
    _t, commands = s.request("r", "b")
    assert [type(c) for c in commands] == [IssueLoad]


def test_read_not_of_an_engine_without_the_gauge() -> None:
    s = Scenario.configured(read_engine=True)
    s(ReplicaAdded(replica="r", model="base", limit=1))
    s(ListingReceived(listing=1, adapters=("a",)))
    s.expect(ReadingReceived(read=2, adapters=None))  # it cannot tell what runs there
    _t, commands = s.request("r", "b")
    assert [type(c) for c in commands] == [IssueUnload]  # a is evicted without a read


def test_read_a_request_before_the_first_reading_waits_for_it() -> None:
    s = Scenario.configured(read_engine=True)
    s(ReplicaAdded(replica="r", model="base", limit=1))
    s(ListingReceived(listing=1, adapters=("a",)))  # the read goes out
    ticket, commands = s.request("r", "b")
    assert commands == []  # a may run for another router: the first reading is awaited
    (load,) = s(ReadingReceived(read=2, adapters=("a",)))
    assert isinstance(load, IssueLoad)  # over the limit, a untouched
    s.expect(LoadFinished(load=load.load, outcome=LoadOutcome.LOADED), Grant(ticket=ticket, how=How.LOADED))


def test_read_a_failed_read_lets_the_waiting_request_go_on() -> None:
    s = Scenario.reading(("r", 1))
    s.expect(Released(ticket=s.load("r", "a")))
    _t, commands = s.request("r", "b")
    assert [type(c) for c in commands] == [ReadEngine]
    (unload,) = s.fail_read("r", "no answer within 5 s")
    assert isinstance(unload, IssueUnload)
    assert unload.adapter == "a"


def test_read_at_the_cap_a_release_of_a_reported_adapter_reads_again() -> None:
    s = Scenario.reading(("r", 1), headroom=0)
    t = s.load("r", "a")
    read_now(s, "r", "a")
    _t, commands = s.request("r", "b")
    assert commands == [ReadEngine(read=s.reads["r"], replica="r")]
    s.expect(ReadingReceived(read=s.reads["r"], adapters=("a",)))  # at the cap: b waits in the queue
    # This router's request on a ends; the reading still names it, so read again.
    (read,) = s(Released(ticket=t))
    assert read == ReadEngine(read=s.reads["r"], replica="r")
    (unload,) = s.answer_read("r", [])
    assert isinstance(unload, IssueUnload)
    assert unload.adapter == "a"


def test_read_a_cancelled_request_waits_no_more() -> None:
    s = Scenario.reading(("r", 1))
    s.expect(Released(ticket=s.load("r", "a")))
    ticket, _ = s.request("r", "b")
    s.expect(Cancelled(ticket=ticket))
    assert s.machine.statistics().replicas["r"].in_flight == 0
    s.expect(ReadingReceived(read=s.reads["r"], adapters=()))


def test_read_a_removal_fails_the_waiting_requests_and_its_answer_is_ignored() -> None:
    s = Scenario.reading(("r", 1))
    s.expect(Released(ticket=s.load("r", "a")))
    ticket, _ = s.request("r", "b")
    read = s.reads["r"]
    s.expect(
        ReplicasRemoved(replicas=("r",)), Fail(ticket=ticket, fault=Fault.REPLICA, message=REPLICA_REMOVED)
    )
    s.expect(ReadingReceived(read=read, adapters=("a",)))
    with pytest.raises(UnknownOperationError):
        s(ReadingReceived(read=read, adapters=()))


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


# -- [route]: a request the machine places --------------------------------------------------------


def routed(s: Scenario, adapter: str, **extra: object) -> tuple[int, list[Command]]:
    s.ticket += 1
    return s.ticket, s(Routed(ticket=s.ticket, adapter=adapter, path=f"/adapters/{adapter}", **extra))  # type: ignore[arg-type]


def test_route_places_assigns_and_admits() -> None:
    s = Scenario.with_replicas(("r0", 1), ("r1", 1))
    ticket, commands = routed(s, "a")
    placement = commands[0]
    assert isinstance(placement, Assign)
    assert placement.placed is Placed.FREE
    (load,) = commands[1:]
    assert isinstance(load, IssueLoad)
    assert load.replica == placement.replica
    s.expect(LoadFinished(load=load.load, outcome=LoadOutcome.LOADED), Grant(ticket=ticket, how=How.LOADED))
    again, commands = routed(s, "a")
    assert commands == [
        Assign(ticket=again, replica=placement.replica, placed=Placed.HELD),
        Grant(ticket=again, how=How.HIT),
    ]


def test_route_excluded_replicas_and_none_left() -> None:
    s = Scenario.with_replicas(("r0", 1), ("r1", 1))
    ticket, commands = routed(s, "a", exclude=("r0",))
    assert commands[0] == Assign(ticket=ticket, replica="r1", placed=Placed.FREE)
    ticket, commands = routed(s, "b", exclude=("r0", "r1"))
    assert commands == [Fail(ticket=ticket, fault=Fault.REPLICA, message=no_replica_message("b", None))]
    assert s.machine.statistics().failures == {"replica": 1}


def test_route_reads_a_full_replica_then_places_again() -> None:
    s = Scenario.reading(("r0", 1), ("r1", 1), overflow=0)
    s.expect(Released(ticket=s.load("r0", "a")))
    s.expect(Released(ticket=s.load("r1", "b")))
    assert s.machine.place("c") == Placement(replica="r0", placed=Placed.EVICT)
    ticket, commands = routed(s, "c")
    assert commands == [ReadEngine(read=s.reads["r0"], replica="r0")]
    # a runs on r0 for another router: placed again, c would go over the limit there (overflow 0), so
    # it goes to r1, which is read in its turn before its b is evicted.
    assert s.answer_read("r0", ["a"]) == [ReadEngine(read=s.reads["r1"], replica="r1")]
    commands = s.answer_read("r1", [])
    assert commands[0] == Assign(ticket=ticket, replica="r1", placed=Placed.EVICT)
    assert [u.adapter for u in unloads(commands)] == ["b"]


def test_route_a_removal_places_the_waiting_request_again() -> None:
    s = Scenario.reading(("r0", 1), ("r1", 1))
    s.expect(Released(ticket=s.load("r0", "a")))
    s.expect(Released(ticket=s.load("r1", "b")))
    ticket, commands = routed(s, "c")
    assert commands == [ReadEngine(read=s.reads["r0"], replica="r0")]
    # Removed while the request waits for its read: placed anew, on r1, read first as well.
    assert s(ReplicasRemoved(replicas=("r0",))) == [ReadEngine(read=s.reads["r1"], replica="r1")]
    commands = s.answer_read("r1", [])
    assert commands[0] == Assign(ticket=ticket, replica="r1", placed=Placed.EVICT)


def test_route_a_refused_adapter_fails_at_once_without_a_replica() -> None:
    s = Scenario.with_replicas(("r", 1))
    ticket, commands = routed(s, "bad")
    (load,) = commands[1:]
    assert isinstance(load, IssueLoad)
    s.expect(
        LoadFinished(load=load.load, outcome=LoadOutcome.ADAPTER_FAULT, message="rank 64"),
        Fail(ticket=ticket, fault=Fault.ADAPTER, message="rank 64"),
    )
    again, commands = routed(s, "bad")
    assert commands == [Fail(ticket=again, fault=Fault.ADAPTER, message="rank 64")]


def test_route_a_routed_request_of_the_wrong_kind_is_refused() -> None:
    s = Scenario.with_replicas(("r", 1))
    for event in (
        Routed(ticket=1, adapter="", path="/a"),
        Routed(ticket=1, adapter="a", path=""),
        Routed(ticket=1, adapter="a", path="/a", model=""),
        Routed(ticket=1, adapter="a", path="/a", exclude="r"),  # type: ignore[arg-type]
        Routed(ticket=1, adapter="a", path="/a", exclude=("",)),
    ):
        with pytest.raises(InvalidValueError):
            s(event)
    assert s.machine.next_ticket == 1


# -- [elsewhere]: what a reading names is never a victim -------------------------------------------


def test_elsewhere_an_adapter_the_engine_reports_running_is_no_victim() -> None:
    s = Scenario.reading(("r", 2))
    idle_pair(s)
    read_now(s, "r", "a")
    # a is the least recently used here, but another router runs requests on it: b goes.
    _ticket, commands = s.request("r", "c")
    assert [type(c) for c in commands] == [ReadEngine]
    commands = s.answer_read("r", ["a"])
    assert [u.adapter for u in unloads(commands)] == ["b"]


def test_elsewhere_when_every_idle_adapter_is_reported_the_load_goes_over_the_limit() -> None:
    s = Scenario.reading(("r", 2))
    idle_pair(s)
    _ticket, commands = s.request("r", "c")
    commands = s.answer_read("r", ["b", "a", "zz"])  # zz: not held here
    assert [c.adapter for c in loads(commands)] == ["c"]
    assert len(commands) == 1


def test_elsewhere_the_next_report_replaces_it_and_frees_the_rest_most_recently_used() -> None:
    s = Scenario.reading(("r", 2))
    idle_pair(s)
    read_now(s, "r", "a")
    _ticket, commands = s.request("r", "c")
    # a ran last (on the engine, for someone): b is now the least recently used.
    commands = s.answer_read("r", [])
    assert [u.adapter for u in unloads(commands)] == ["b"]


def test_elsewhere_an_adapter_in_use_here_stays_in_use_when_the_report_drops_it() -> None:
    s = Scenario.reading(("r", 1))
    t = s.load("r", "a")
    read_now(s, "r", "a")
    _ticket, commands = s.request("r", "b")
    commands = s.answer_read("r", [])
    assert unloads(commands) == []  # a's request has not ended
    s.expect(Released(ticket=t))


def test_elsewhere_a_release_or_a_load_leaves_a_reported_adapter_out_of_idle() -> None:
    s = Scenario.reading(("r", 2))
    read_now(s, "r", "a", "b")
    t = s.load("r", "a")
    s.expect(Released(ticket=t))
    _t, commands = s.request("r", "b")
    (load,) = loads(commands)
    s(LoadFinished(load=load.load, outcome=LoadOutcome.LOADED))
    _t, commands = s.request("r", "c")
    assert commands == [ReadEngine(read=s.reads["r"], replica="r")]
    commands = s.answer_read("r", ["a", "b"])
    assert unloads(commands) == []


def test_elsewhere_a_listing_brings_in_reported_adapters_not_idle() -> None:
    s = Scenario.reading(("r", 1))
    read_now(s, "r", "x")
    s.list_and_read(60.0, "r", ["x", "y"], ["x"])
    # y is the only victim: x runs on the engine.
    _ticket, commands = s.request("r", "c")
    commands = s.answer_read("r", ["x"])
    assert [u.adapter for u in unloads(commands)] == ["y"]


def test_elsewhere_placement_does_not_count_reported_adapters_as_idle() -> None:
    s = Scenario.reading(("r0", 1), ("r1", 1))
    s.expect(Released(ticket=s.load("r0", "a")))
    s.expect(Released(ticket=s.load("r1", "b")))
    assert s.machine.place("c") == Placement(replica="r0", placed=Placed.EVICT)
    read_now(s, "r0", "a")
    # a runs on r0 for another router: nothing there is idle, so a load evicts nothing (over the limit,
    # within the overflow), which placement prefers to evicting b on r1.
    assert s.machine.place("c") == Placement(replica="r0", placed=Placed.OVER)
    assert s.machine.place("c", exclude={"r0"}) == Placement(replica="r1", placed=Placed.EVICT)
    read_now(s, "r1", "b", now=60.0)
    assert s.machine.place("c", exclude={"r0"}).placed is Placed.OVER


def queued_behind_a_report() -> Scenario:
    """r (limit 1, headroom 0) holds a, idle here and reported running; a request for b waits at the cap."""
    s = Scenario.reading(("r", 1), headroom=0)
    s.expect(Released(ticket=s.load("r", "a")))
    read_now(s, "r", "a")
    _ticket, commands = s.request("r", "b")
    assert [type(c) for c in commands] == [ReadEngine]
    assert s.answer_read("r", ["a"]) == []  # at the cap: b waits in the queue
    return s


def test_elsewhere_at_the_cap_a_report_that_frees_an_adapter_admits_the_queue() -> None:
    s = queued_behind_a_report()  # a runs elsewhere: no room under the cap
    (unload,) = s.list_and_read(60.0, "r", ["a"], [])
    assert isinstance(unload, IssueUnload)
    assert unload.adapter == "a"
    (load,) = s(UnloadFinished(unload=unload.unload, outcome=UnloadOutcome.UNLOADED))
    assert isinstance(load, IssueLoad)
    assert load.adapter == "b"


def test_elsewhere_a_removed_replica_forgets_its_reading() -> None:
    s = Scenario.reading(("r", 1))
    s.expect(Released(ticket=s.load("r", "a")))
    read_now(s, "r", "a")
    s.expect(ReplicasRemoved(replicas=("r",)))
    assert s.machine.reported("r") == frozenset()
    s.expect(TimeAdvanced(now=40.0))
    (listing,) = s(ReplicaAdded(replica="r", model="base", limit=1))
    assert isinstance(listing, ReadListing)
    s(ListingReceived(listing=listing.listing, adapters=("a",)))
    s.answer_read("r", None)  # the engine now cannot tell
    # The reading was about the engine before the removal: a is a victim again.
    _ticket, commands = s.request("r", "b")
    assert [u.adapter for u in unloads(commands)] == ["a"]


# -- [read-failed]: a failed read leaves the reading standing until a listing comes in ------------


def test_read_failed_with_no_listing_since_the_report_the_report_stands() -> None:
    s = queued_behind_a_report()
    # A release of nothing... the queue waits; read again through a listing that fails.
    (listing,) = s(TimeAdvanced(now=60.0))
    assert isinstance(listing, ReadListing)
    s.expect(ListingFailed(listing=listing.listing, message="HTTP 500"))  # a failed listing is no listing
    assert s.machine.reported("r") == {"a"}


def test_read_failed_after_a_listing_ends_the_report_as_an_empty_one_would() -> None:
    s = queued_behind_a_report()
    (listing,) = s(TimeAdvanced(now=60.0))
    assert isinstance(listing, ReadListing)
    (read,) = s(ListingReceived(listing=listing.listing, adapters=("a",)))
    assert isinstance(read, ReadEngine)
    assert s.machine.reported("r") == {"a"}  # a still runs elsewhere, as far as anyone knows
    (unload,) = s.fail_read("r", "HTTP 503")
    assert s.machine.reported("r") == frozenset()
    assert isinstance(unload, IssueUnload)
    assert unload.adapter == "a"
    (load,) = s(unloaded(unload))
    assert isinstance(load, IssueLoad)
    assert load.adapter == "b"


def test_read_failed_a_report_after_the_listing_stands_through_a_failed_read() -> None:
    s = Scenario.reading(("r", 1), headroom=0)
    t = s.load("r", "a")
    read_now(s, "r", "a")  # the listing, then a reading after it
    _t, commands = s.request("r", "b")
    assert [type(c) for c in commands] == [ReadEngine]
    s.expect(ReadingReceived(read=s.reads["r"], adapters=("a",)))
    (read,) = s(Released(ticket=t))
    assert isinstance(read, ReadEngine)
    s.expect(ReadingFailed(read=read.read, message="no answer within 5 s"))
    assert s.machine.reported("r") == {"a"}  # no listing since that reading: it stands


# -- [share]: each of R routers fills at most its share of a replica's free slots between listings --


def shared(routers: int, *replicas: tuple[str, int], headroom: int | None = None) -> Scenario:
    """A machine for one of ``routers`` routers, knowing these (replica, limit) pairs, listed empty."""
    s = Scenario.configured(routers=routers, **({} if headroom is None else {"headroom": headroom}))
    for replica, limit in replicas:
        (cmd,) = s(ReplicaAdded(replica=replica, model="base", limit=limit))
        assert isinstance(cmd, ReadListing)
        s.expect(ListingReceived(listing=cmd.listing, adapters=()), MarkMet(replica=replica))
    return s


def test_share_two_routers_on_an_empty_replica_fill_two_of_four_slots_each_then_evict() -> None:
    held: set[str] = set()
    for router, names in (("one", "abc"), ("two", "xyz")):
        s = shared(2, ("r", 4))
        for name in names[:2]:
            s.expect(Released(ticket=s.load("r", name)))  # a free slot: no victim
            held.add(name)
        # Past its share (ceil(4 free / 2 routers) = 2) the replica is full for this router: the
        # next cold load evicts, so the two routers together never take it past its limit of 4.
        _ticket, commands = s.request("r", names[2])
        assert [u.adapter for u in unloads(commands)] == [names[0]], router
        assert loads(commands) == []  # it goes out once its victim's unload is answered
    assert len(held) == 4


def test_share_one_router_fills_every_free_slot() -> None:
    s = shared(1, ("r", 4))
    for name in "abcd":
        s.expect(Released(ticket=s.load("r", name)))
    _ticket, commands = s.request("r", "e")
    assert [u.adapter for u in unloads(commands)] == ["a"]


def test_share_rounds_up_so_three_routers_on_a_limit_of_four_fill_two_each() -> None:
    s = shared(3, ("r", 4))
    for name in "ab":
        s.expect(Released(ticket=s.load("r", name)))
    _ticket, commands = s.request("r", "c")
    assert [u.adapter for u in unloads(commands)] == ["a"]


def test_share_a_new_listing_shares_the_free_slots_it_leaves_afresh() -> None:
    s = shared(2, ("r", 6))
    for name in "abc":
        s.expect(Released(ticket=s.load("r", name)))  # 3 of 6 free slots: the share is used up
    (listing,) = s(TimeAdvanced(now=30.0))
    assert isinstance(listing, ReadListing)
    # The other router loaded x meanwhile: 4 held, 2 free slots, and this router's share is 1.
    s.expect(ListingReceived(listing=listing.listing, adapters=("a", "b", "c", "x")))
    s.expect(Released(ticket=s.load("r", "d")))
    _ticket, commands = s.request("r", "e")
    assert [u.adapter for u in unloads(commands)] == ["x"]  # listed: least recently used of all


def test_share_past_its_share_with_every_adapter_in_use_a_load_goes_over() -> None:
    s = shared(2, ("r", 4))
    s.load("r", "a")
    s.load("r", "b")
    # Nothing idle to evict: as over the limit, refusing the request would serve no one.
    _ticket, commands = s.request("r", "c")
    assert [c.adapter for c in loads(commands)] == ["c"]
    assert unloads(commands) == []


def test_share_the_cap_counts_from_the_share() -> None:
    s = shared(2, ("r", 4), headroom=0)
    a = s.load("r", "a")
    s.load("r", "b")
    # Both in use and the share (2) used up: with headroom 0 the request waits for room, though
    # the replica's limit of 4 is not reached: another router may be filling the other two slots.
    _ticket, commands = s.request("r", "c")
    assert commands == []
    assert s.machine.statistics().replicas["r"].queued == 1
    commands = s(Released(ticket=a))
    assert [u.adapter for u in unloads(commands)] == ["a"]
    after = s.machine.statistics().replicas["r"]
    assert (after.queued, after.loading) == (0, ("c",))


def test_share_placement_counts_a_replica_past_the_share_as_having_no_free_slot() -> None:
    s = shared(2, ("r0", 2), ("r1", 2))
    first = s.machine.place("a")
    assert first.placed is Placed.FREE
    assert first.replica is not None
    s.expect(Released(ticket=s.load(first.replica, "a")))
    second = s.machine.place("b")
    assert second.placed is Placed.FREE
    assert second.replica is not None
    assert second.replica != first.replica
    s.expect(Released(ticket=s.load(second.replica, "b")))
    # Each replica has used this router's share (1 of 2 free): no free slot anywhere.
    assert s.machine.place("c").placed is Placed.EVICT
    assert s.machine.view(["r0", "r1"], "c").with_room == frozenset()


def test_share_a_replica_added_again_shares_what_it_has_left() -> None:
    s = shared(2, ("r", 4))
    t = s.load("r", "a")  # keeps a held, unseen, through the removal
    s(ReplicasRemoved(replicas=("r",)))
    (listing,) = s(ReplicaAdded(replica="r", model="base", limit=4))
    assert isinstance(listing, ReadListing)
    # Before its listing comes: 1 held, 3 free, this router's share ceil(3 / 2) = 2.
    s.load("r", "b")
    s.load("r", "c")
    s.expect(Released(ticket=t))
    _ticket, commands = s.request("r", "d")
    assert [u.adapter for u in unloads(commands)] == ["a"]


def listed(routers: int, limit: int, *names: str) -> Scenario:
    """A machine for one of ``routers`` routers whose replica ``r`` was listed holding ``names``."""
    s = Scenario.configured(routers=routers)
    (cmd,) = s(ReplicaAdded(replica="r", model="base", limit=limit))
    assert isinstance(cmd, ReadListing)
    s.expect(ListingReceived(listing=cmd.listing, adapters=names), MarkMet(replica="r"))
    return s


def test_share_a_victim_another_router_unloaded_first_makes_room_again() -> None:
    s = listed(2, 2, "s1", "s2")
    _ticket, commands = s.request("r", "x")
    (first,) = unloads(commands)
    assert first.adapter == "s1"
    # Not found: another router unloaded s1 first, to load an adapter this router does not see.
    # The replica is one fuller than it looks: x waits for a second victim.
    (second,) = s(UnloadFinished(unload=first.unload, outcome=UnloadOutcome.NOT_FOUND))
    assert isinstance(second, IssueUnload)
    assert second.adapter == "s2"
    (load,) = s(UnloadFinished(unload=second.unload, outcome=UnloadOutcome.UNLOADED))
    assert isinstance(load, IssueLoad)
    assert load.adapter == "x"


def test_share_with_one_router_a_victim_not_found_makes_no_more_room() -> None:
    s = listed(1, 2, "s1", "s2")
    _ticket, commands = s.request("r", "x")
    (first,) = unloads(commands)
    (load,) = s(UnloadFinished(unload=first.unload, outcome=UnloadOutcome.NOT_FOUND))
    assert isinstance(load, IssueLoad)


def test_share_an_adapter_the_engine_lost_counts_until_the_next_listing() -> None:
    s = listed(2, 2, "s1", "s2")
    s.expect(AdapterMissing(replica="r", adapter="s1"))
    # s1's slot is likely another router's now: x evicts s2 rather than take the slot.
    _ticket, commands = s.request("r", "x")
    assert [u.adapter for u in unloads(commands)] == ["s2"]


def test_share_the_line_never_falls_below_one() -> None:
    s = Scenario.configured(routers=2, headroom=0)
    (cmd,) = s(ReplicaAdded(replica="r", model="base", limit=2))
    assert isinstance(cmd, ReadListing)
    s.expect(ListingReceived(listing=cmd.listing, adapters=("s1", "s2")), MarkMet(replica="r"))
    s.expect(AdapterMissing(replica="r", adapter="s1"))
    s.expect(AdapterMissing(replica="r", adapter="s2"))
    # Both lost to other routers: the line would be 2 - 2 = 0, and a cap of 0 would take nothing.
    s.load("r", "a")
    _ticket, commands = s.request("r", "b")
    assert commands == []  # a is in use: b waits at the cap, line 1 + headroom 0

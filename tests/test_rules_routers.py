"""[read]: the machine reads what runs on an engine when it needs to; [elsewhere]: what the engine says
runs there, from any router, is never a victim; [read-failed]: a read that gets no answer leaves that
reading standing until the next listing; [route]: a request placed by the machine, read first where
[read] asks; [load]: how busy an engine is, this router's requests and the others' a reading showed;
[settle]: where another router runs, a landed load's excess goes once a reading has come; [cap]: an
engine's ``--max-loras`` as room; [share]: each of R routers fills its share of a replica's free slots."""

from __future__ import annotations

from typing import Any

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
from lorafleet._machine import REFRESH, REPLICA_REMOVED, no_replica_message

from scenario import Scenario, landed, loads, unloaded, unloads


def held(s: Scenario, replica: str) -> dict[str, int]:
    return dict(s.machine.statistics().replicas[replica].held)


def idle_pair(s: Scenario, replica: str = "r") -> None:
    """``replica`` holds a then b, both idle, a the least recently used."""
    s.expect(Released(ticket=s.load(replica, "a")))
    s.expect(Released(ticket=s.load(replica, "b")))


def read_now(s: Scenario, replica: str, *running: str, now: float = 30.0) -> None:
    """List ``replica`` again (nothing changed) and read its engine: ``running`` run there."""
    held = s.machine.statistics().replicas[replica].held
    s.list_and_read(now, replica, held, running)


def read_each(s: Scenario, now: float, **readings: dict[str, Any]) -> None:
    """Advance to ``now``, when every replica's listing is due, list each as holding what it holds, and
    answer the read that follows with ``readings[replica]`` (``adapters``, ``running``, ``waiting``,
    ``max_loras``), running nothing when not given; each answer gives no command."""
    for listing in s(TimeAdvanced(now=now)):
        assert isinstance(listing, ReadListing), listing
        held = tuple(s.machine.statistics().replicas[listing.replica].held)
        read = s(ListingReceived(listing=listing.listing, adapters=held))
        assert read == [ReadEngine(read=s.reads[listing.replica], replica=listing.replica)], read
        assert s.answer_read(listing.replica, **readings.get(listing.replica, {})) == []


def another_routers(s: Scenario, now: float = 30.0) -> None:
    """Read every replica as running ``x``, an adapter of another router's: each reading is foreign."""
    read_each(s, now, **{replica: {"adapters": ["x"]} for replica in s.machine.statistics().replicas})


def routed(s: Scenario, adapter: str, **extra: object) -> tuple[int, list[Command]]:
    s.ticket += 1
    return s.ticket, s(Routed(ticket=s.ticket, adapter=adapter, path=f"/adapters/{adapter}", **extra))  # type: ignore[arg-type]


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
    """[read] Without ``read_engine`` no engine is read: not after a listing, not before a load that
    evicts first (headroom 0), not before a landed load's excess goes ([settle])."""
    s = Scenario.with_replicas(("r", 1), headroom=0)
    s.expect(Released(ticket=s.load("r", "a")))
    _t, commands = s.request("r", "b")
    assert [type(c) for c in commands] == [IssueUnload]
    s = Scenario.with_replicas(("r", 1))
    s.expect(Released(ticket=s.load("r", "a")))
    _t, commands = s.request("r", "b")
    assert [type(c) for c in s(landed(loads(commands)[0]))] == [Grant, IssueUnload]


def test_read_before_evicting_first_where_another_router_runs_the_request_waits_for_it() -> None:
    """[read] A cold load that must evict first (at the bound: headroom 0 here) on a replica whose last
    reading named another router's adapter waits for a fresh reading, which may spare a victim."""
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
    (unload,) = s.answer_read("r", ["a"])
    assert isinstance(unload, IssueUnload)
    assert unload.adapter == "b"
    (load_c,) = s(unloaded(unload))
    assert isinstance(load_c, IssueLoad)
    assert load_c.adapter == "c"
    s.expect(LoadFinished(load=load_c.load, outcome=LoadOutcome.LOADED), Grant(ticket=ticket, how=How.LOADED))
    assert s.machine.statistics().replicas["r"].queued == 1  # d
    s.expect(Cancelled(ticket=other))


def test_read_not_by_a_lone_router_whose_readings_name_only_its_own_requests() -> None:
    """[read] A reading that names only adapters this router's requests run on says nothing of another
    router: a load that evicts first there does not wait for a fresh one."""
    s = Scenario.reading(("r", 1), headroom=0)
    t = s.load("r", "a")
    read_now(s, "r", "a")
    assert s.machine.reported("r") == frozenset()  # it stands as an empty reading ([elsewhere])
    s.expect(Released(ticket=t))
    _t, commands = s.request("r", "b")
    (unload,) = commands
    assert isinstance(unload, IssueUnload)
    assert unload.adapter == "a"


def test_read_not_before_a_load_into_the_headroom() -> None:
    """[read] Below its bound a cold load evicts nothing first, so nothing waits for a reading, even
    where another router runs: the [settle] after it lands does."""
    s = Scenario.reading(("r", 1))
    s.expect(Released(ticket=s.load("r", "a")))
    another_routers(s)
    _t, commands = s.request("r", "b")
    assert [type(c) for c in commands] == [IssueLoad]


def test_read_not_before_a_load_into_a_free_slot() -> None:
    s = Scenario.reading(("r", 2))
    s.expect(Released(ticket=s.load("r", "a")))
    _t, commands = s.request("r", "b")
    assert [type(c) for c in commands] == [IssueLoad]


def test_read_not_of_an_engine_without_the_gauge() -> None:
    """[read] An engine that cannot tell what runs there is not read before an eviction: not before a
    load that evicts first (headroom 0), not before a landed load's excess goes ([settle])."""
    for headroom, kinds in ((0, [IssueUnload]), (None, [IssueLoad])):
        s = Scenario.configured(read_engine=True, headroom=headroom)
        s(ReplicaAdded(replica="r", model="base", limit=1))
        s(ListingReceived(listing=1, adapters=("a",)))
        s.expect(ReadingReceived(read=2, adapters=None))  # it cannot tell what runs there
        _t, commands = s.request("r", "b")
        assert [type(c) for c in commands] == kinds  # a is evicted without a read
    # Headroom None: b's load went out, and once it lands a goes, without a read.
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
    (unload,) = s.fail_read("r", "no answer within 5 s")
    assert isinstance(unload, IssueUnload)
    assert unload.adapter == "a"


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
    (unload,) = s.answer_read("r", [])
    assert isinstance(unload, IssueUnload)
    assert unload.adapter == "a"


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


# -- [route]: a request the machine places --------------------------------------------------------


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
    s = Scenario.reading(("r0", 1), ("r1", 1), headroom=0)
    s.expect(Released(ticket=s.load("r0", "a")))
    s.expect(Released(ticket=s.load("r1", "b")))
    another_routers(s)
    assert s.machine.place("c") == Placement(replica="r0", placed=Placed.EVICT)
    ticket, commands = routed(s, "c")
    assert commands == [ReadEngine(read=s.reads["r0"], replica="r0")]
    # a runs on r0 for another router: placed again, c would wait at r0's cap, so it goes to r1,
    # which is read in its turn before its b is evicted.
    assert s.answer_read("r0", ["a"]) == [ReadEngine(read=s.reads["r1"], replica="r1")]
    commands = s.answer_read("r1", [])
    assert commands[0] == Assign(ticket=ticket, replica="r1", placed=Placed.EVICT)
    assert [u.adapter for u in unloads(commands)] == ["b"]


def test_route_a_removal_places_the_waiting_request_again() -> None:
    s = Scenario.reading(("r0", 1), ("r1", 1), headroom=0)
    s.expect(Released(ticket=s.load("r0", "a")))
    s.expect(Released(ticket=s.load("r1", "b")))
    another_routers(s)
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


# -- [load]: how busy an engine is, from this router's requests and what a reading showed ----------


def test_load_counts_other_routers_requests_as_the_last_reading_showed_them() -> None:
    """[load] A replica's load is this router's requests on it plus the others' from its last reading:
    the engine's running and waiting, less this router's own when the read went out."""
    s = Scenario.reading(("r0", 2), ("r1", 2))
    for replica in ("r0", "r1"):
        s.load(replica, "a")  # one request running on each
    tied = s.machine.place("a").replica  # equally busy: the rendezvous hash decides
    assert tied is not None
    other = "r1" if tied == "r0" else "r0"
    read_each(s, 30.0, **{tied: {"adapters": ["a"], "running": 3, "waiting": 0}})
    assert s.machine.place("a") == Placement(replica=other, placed=Placed.HELD)  # 1 + 2 against 1
    read_each(s, 60.0, **{tied: {"adapters": ["a"], "running": 1, "waiting": 0}})  # its own only
    assert s.machine.place("a") == Placement(replica=tied, placed=Placed.HELD)


def test_load_learns_what_an_engine_runs_at_once_from_a_reading_with_requests_waiting() -> None:
    """[load] A reading with requests waiting shows the engine full: it runs at once what it ran then.
    A holder loaded past that is saturated: placement spills past it, and ``place_hit`` passes it by."""
    s = Scenario.reading(("r0", 2), ("r1", 2))
    t = s.load("r0", "a")
    read_each(s, 30.0, r0={"adapters": ["a"], "running": 3, "waiting": 0})  # no queue: capacity unknown
    also = s.hit("r0", "a")
    assert s.machine.place("a") == Placement(replica="r0", placed=Placed.HELD)  # 2 + 2 others: not full
    s.expect(Released(ticket=also))
    read_each(s, 60.0, r0={"adapters": ["a"], "running": 3, "waiting": 1})  # full at three
    assert s.machine.place("a") == Placement(replica="r1", placed=Placed.FREE)  # 1 + 3 others: past it
    assert s.machine.place_hit(s.ticket + 1, adapter="a") is None
    s.expect(Released(ticket=t))
    assert s.machine.place("a") == Placement(replica="r0", placed=Placed.HELD)  # 3 others: not past it


def test_load_the_concurrency_setting_overrides_what_readings_show() -> None:
    """[load] With ``concurrency`` set, an engine runs that many at once, whatever a reading showed."""
    s = Scenario.reading(("r0", 2), ("r1", 2), concurrency=4)
    s.load("r0", "a")
    read_each(s, 30.0, r0={"adapters": ["a"], "running": 2, "waiting": 1})  # full at two, it says
    assert s.machine.place("a") == Placement(replica="r0", placed=Placed.HELD)  # 1 + 2 others: 3 of 4
    read_each(s, 60.0, r0={"adapters": ["a"], "running": 4, "waiting": 1})
    assert s.machine.place("a") == Placement(replica="r1", placed=Placed.FREE)  # 1 + 4 others: 5 of 4


# -- [elsewhere]: what a reading names is never a victim -------------------------------------------


def test_elsewhere_a_reading_naming_only_this_routers_requests_stands_as_an_empty_one() -> None:
    """[elsewhere] A reading that names only adapters this router's requests run on there says nothing
    of another router: it stands as an empty one, and they go idle as their requests end."""
    s = Scenario.reading(("r", 1))
    t = s.load("r", "a")
    read_now(s, "r", "a")
    assert s.machine.reported("r") == frozenset()
    s.expect(Released(ticket=t))
    assert s.machine.place("b") == Placement(replica="r", placed=Placed.EVICT)  # a is idle: a victim


def test_elsewhere_a_reading_counting_others_requests_on_our_adapter_is_another_routers() -> None:
    """[elsewhere] A reading that names only this router's adapters but counts more requests than
    this router had there when the read went out: another router's run on one of them too. It is
    foreign, so what it names stays out of idle after this router's requests end."""
    s = Scenario.reading(("r", 1))
    t = s.load("r", "a")
    read_each(s, 30.0, r={"adapters": ["a"], "running": 2, "waiting": 0})  # ours, and one more
    assert s.machine.reported("r") == {"a"}
    reading = s.machine.reading("r")
    assert reading is not None
    assert (reading.foreign, reading.others) == (True, 1)
    s.expect(Released(ticket=t))
    assert s.machine.place("b") == Placement(replica="r", placed=Placed.OVER)  # a still runs: no victim


def test_elsewhere_a_reading_naming_another_adapter_keeps_all_it_names_out_of_idle() -> None:
    """[elsewhere] A reading that names an adapter no request of this router runs on there is another
    router's doing: all it names, this router's own included, stay out of idle until the next."""
    s = Scenario.reading(("r", 1))
    t = s.load("r", "a")
    read_now(s, "r", "a", "x")
    assert s.machine.reported("r") == {"a", "x"}
    s.expect(Released(ticket=t))
    assert s.machine.place("b") == Placement(replica="r", placed=Placed.OVER)  # a runs elsewhere
    read_now(s, "r", now=60.0)
    assert s.machine.place("b") == Placement(replica="r", placed=Placed.EVICT)


def test_elsewhere_an_adapter_the_engine_reports_running_is_no_victim() -> None:
    s = Scenario.reading(("r", 2))
    idle_pair(s)
    read_now(s, "r", "a")  # idle here: another router's requests run on it
    assert s.machine.reported("r") == {"a"}
    # a is the least recently used here, but another router runs requests on it: once c has landed,
    # the replica reads its engine again ([settle]), and b goes.
    ticket, commands = s.request("r", "c")
    assert [type(c) for c in commands] == [IssueLoad]
    commands = s(landed(loads(commands)[0]))
    assert commands == [Grant(ticket=ticket, how=How.LOADED), ReadEngine(read=s.reads["r"], replica="r")]
    commands = s.answer_read("r", ["a"])
    assert [u.adapter for u in unloads(commands)] == ["b"]


def test_elsewhere_when_every_idle_adapter_is_reported_the_load_goes_over_the_limit() -> None:
    s = Scenario.reading(("r", 2))
    idle_pair(s)
    another_routers(s)
    ticket, commands = s.request("r", "c")
    commands = s(landed(loads(commands)[0]))
    assert commands == [Grant(ticket=ticket, how=How.LOADED), ReadEngine(read=s.reads["r"], replica="r")]
    assert s.answer_read("r", ["b", "a", "zz"]) == []  # zz: not held here
    assert held(s, "r") == {"a": 0, "b": 0, "c": 1}


def test_elsewhere_the_next_report_replaces_it_and_frees_the_rest_most_recently_used() -> None:
    s = Scenario.reading(("r", 2))
    idle_pair(s)
    read_now(s, "r", "a")
    ticket, commands = s.request("r", "c")
    commands = s(landed(loads(commands)[0]))
    assert commands == [Grant(ticket=ticket, how=How.LOADED), ReadEngine(read=s.reads["r"], replica="r")]
    # a ran last (on the engine, for someone): b is now the least recently used.
    commands = s.answer_read("r", [])
    assert [u.adapter for u in unloads(commands)] == ["b"]


def test_elsewhere_an_adapter_in_use_here_stays_in_use_when_the_report_drops_it() -> None:
    s = Scenario.reading(("r", 1), headroom=0)
    t = s.load("r", "a")
    read_now(s, "r", "a", "x")  # x: another router's
    _ticket, commands = s.request("r", "b")
    assert [type(c) for c in commands] == [ReadEngine]
    commands = s.answer_read("r", [])
    assert unloads(commands) == []  # a's request has not ended: b waits at the cap
    assert held(s, "r") == {"a": 1}
    (unload,) = s(Released(ticket=t))
    assert isinstance(unload, IssueUnload)
    assert unload.adapter == "a"


def test_elsewhere_a_release_or_a_load_leaves_a_reported_adapter_out_of_idle() -> None:
    s = Scenario.reading(("r", 2), headroom=0)
    read_now(s, "r", "a", "b")
    t = s.load("r", "a")
    s.expect(Released(ticket=t))
    t, commands = s.request("r", "b")
    (load,) = loads(commands)
    s.expect(Cancelled(ticket=t))
    s.expect(LoadFinished(load=load.load, outcome=LoadOutcome.LOADED))  # no one waits, and b is reported
    _t, commands = s.request("r", "c")
    assert commands == [ReadEngine(read=s.reads["r"], replica="r")]
    commands = s.answer_read("r", ["a", "b"])
    assert unloads(commands) == []


def test_elsewhere_a_listing_brings_in_reported_adapters_not_idle() -> None:
    s = Scenario.reading(("r", 1))
    read_now(s, "r", "x")
    s.list_and_read(60.0, "r", ["x", "y"], ["x"])
    # y is the only victim: x runs on the engine.
    ticket, commands = s.request("r", "c")
    commands = s(landed(loads(commands)[0]))
    assert commands == [Grant(ticket=ticket, how=How.LOADED), ReadEngine(read=s.reads["r"], replica="r")]
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
    # The reading was about the engine before the removal: a is a victim again, without a read.
    ticket, commands = s.request("r", "b")
    s.expect(
        landed(loads(commands)[0]),
        Grant(ticket=ticket, how=How.LOADED),
        IssueUnload(unload=9, replica="r", adapter="a"),
    )


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
    read_now(s, "r", "a", "x")  # the listing, then a reading after it; x: another router's
    _t, commands = s.request("r", "b")
    assert [type(c) for c in commands] == [ReadEngine]
    s.expect(ReadingReceived(read=s.reads["r"], adapters=("a", "x")))
    (read,) = s(Released(ticket=t))
    assert isinstance(read, ReadEngine)
    s.expect(ReadingFailed(read=read.read, message="no answer within 5 s"))
    assert s.machine.reported("r") == {"a", "x"}  # no listing since that reading: it stands


# -- [settle]: where another router runs, a landed load's excess goes once a reading has come -------


def test_settle_where_another_router_runs_waits_for_a_fresh_reading_and_unloads_on_its_answer() -> None:
    """[settle] On a replica whose last reading named another router's adapter, the excess a landed
    load leaves goes only once a fresh reading says which adapters run there."""
    s = Scenario.reading(("r", 1))
    s.expect(Released(ticket=s.load("r", "a")))
    another_routers(s)
    ticket, commands = s.request("r", "b")
    (load,) = commands  # nothing waits for a reading before the load: it evicts nothing first
    assert isinstance(load, IssueLoad)
    commands = s(landed(load))
    assert commands == [Grant(ticket=ticket, how=How.LOADED), ReadEngine(read=s.reads["r"], replica="r")]
    assert held(s, "r") == {"a": 0, "b": 1}  # nothing goes before the answer
    (unload,) = s.answer_read("r", ["x"])
    assert isinstance(unload, IssueUnload)
    assert unload.adapter == "a"


def test_settle_where_another_router_runs_unloads_when_the_read_fails_too() -> None:
    """[settle] A read that gets no answer ends the wait: the excess goes as the standing reading says."""
    s = Scenario.reading(("r", 1))
    s.expect(Released(ticket=s.load("r", "a")))
    another_routers(s)
    ticket, commands = s.request("r", "b")
    commands = s(landed(loads(commands)[0]))
    assert commands == [Grant(ticket=ticket, how=How.LOADED), ReadEngine(read=s.reads["r"], replica="r")]
    (unload,) = s.fail_read("r", "no answer within 5 s")
    assert isinstance(unload, IssueUnload)
    assert unload.adapter == "a"


def test_settle_before_an_engines_first_reading_waits_for_the_read_in_flight() -> None:
    """[settle] Before its first reading an engine may run other routers' requests: a landed load's
    excess waits for the read already out, and no second read goes."""
    s = Scenario.configured(read_engine=True)
    s(ReplicaAdded(replica="r", model="base", limit=1))
    s(ListingReceived(listing=1, adapters=("a",)))  # the first read goes out
    ticket, commands = s.request("r", "b")
    (load,) = commands
    assert isinstance(load, IssueLoad)
    s.expect(landed(load), Grant(ticket=ticket, how=How.LOADED))
    s.expect(ReadingReceived(read=2, adapters=()), IssueUnload(unload=4, replica="r", adapter="a"))


def test_settle_a_lone_router_unloads_at_once() -> None:
    """[settle] Where the last reading named only this router's requests, no read is awaited."""
    s = Scenario.reading(("r", 1))
    t = s.load("r", "a")
    read_now(s, "r", "a")
    s.expect(Released(ticket=t))
    ticket, commands = s.request("r", "b")
    commands = s(landed(loads(commands)[0]))
    assert commands[0] == Grant(ticket=ticket, how=How.LOADED)
    assert [u.adapter for u in unloads(commands[1:])] == ["a"]
    assert len(commands) == 2


# -- [cap]: what an engine's batch can use counts as room ----------------------------------------


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


# -- [share]: each of R routers fills at most its share of a replica's free slots between listings --


def shared(routers: int, *replicas: tuple[str, int], headroom: int | None = None) -> Scenario:
    """A machine for one of ``routers`` routers, knowing these (replica, limit) pairs, listed empty."""
    s = Scenario.configured(routers=routers, **({} if headroom is None else {"headroom": headroom}))
    for replica, limit in replicas:
        (cmd,) = s(ReplicaAdded(replica=replica, model="base", limit=limit))
        assert isinstance(cmd, ReadListing)
        s.expect(ListingReceived(listing=cmd.listing, adapters=()), MarkMet(replica=replica))
    return s


def settled_by(s: Scenario, adapter: str) -> list[str]:
    """Load ``adapter`` on ``r`` cold, evicting nothing first: what goes once it has landed ([settle])."""
    ticket, commands = s.request("r", adapter)
    (load,) = commands
    assert isinstance(load, IssueLoad)
    commands = s(landed(load))
    assert commands[0] == Grant(ticket=ticket, how=How.LOADED)
    return [u.adapter for u in unloads(commands[1:])]


def test_share_two_routers_on_an_empty_replica_fill_two_of_four_slots_each_then_evict() -> None:
    """With headroom 0 the bound is the line: past it a load evicts first."""
    loaded: set[str] = set()
    for router, names in (("one", "abc"), ("two", "xyz")):
        s = shared(2, ("r", 4), headroom=0)
        for name in names[:2]:
            s.expect(Released(ticket=s.load("r", name)))  # a free slot: no victim
            loaded.add(name)
        # Past its share (ceil(4 free / 2 routers) = 2) the replica is full for this router: the
        # next cold load evicts, so the two routers together never take it past its limit of 4.
        _ticket, commands = s.request("r", names[2])
        assert [u.adapter for u in unloads(commands)] == [names[0]], router
        assert loads(commands) == []  # it goes out once its victim's unload is answered
    assert len(loaded) == 4


def test_share_one_router_fills_every_free_slot() -> None:
    s = shared(1, ("r", 4))
    for name in "abcd":
        s.expect(Released(ticket=s.load("r", name)))  # each lands within the line: nothing goes
    assert settled_by(s, "e") == ["a"]


def test_share_rounds_up_so_three_routers_on_a_limit_of_four_fill_two_each() -> None:
    s = shared(3, ("r", 4))
    for name in "ab":
        s.expect(Released(ticket=s.load("r", name)))
    assert settled_by(s, "c") == ["a"]


def test_share_a_new_listing_shares_the_free_slots_it_leaves_afresh() -> None:
    s = shared(2, ("r", 6))
    for name in "abc":
        s.expect(Released(ticket=s.load("r", name)))  # 3 of 6 free slots: the share is used up
    (listing,) = s(TimeAdvanced(now=30.0))
    assert isinstance(listing, ReadListing)
    # The other router loaded x meanwhile: 4 held, 2 free slots, and this router's share is 1.
    s.expect(ListingReceived(listing=listing.listing, adapters=("a", "b", "c", "x")))
    s.expect(Released(ticket=s.load("r", "d")))
    assert settled_by(s, "e") == ["x"]  # listed: least recently used of all


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
    assert settled_by(s, "d") == ["a"]


def listed(routers: int, limit: int, *names: str, headroom: int | None = None) -> Scenario:
    """A machine for one of ``routers`` routers whose replica ``r`` was listed holding ``names``."""
    s = Scenario.configured(routers=routers, headroom=headroom)
    (cmd,) = s(ReplicaAdded(replica="r", model="base", limit=limit))
    assert isinstance(cmd, ReadListing)
    s.expect(ListingReceived(listing=cmd.listing, adapters=names), MarkMet(replica="r"))
    return s


def test_share_a_victim_another_router_unloaded_first_makes_room_again() -> None:
    """With headroom 0 the bound is the line: x's load waits for its victims."""
    s = listed(2, 2, "s1", "s2", headroom=0)
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


def test_share_a_victim_not_found_makes_room_again_only_as_far_as_the_bound() -> None:
    """With headroom 2, x's load waits for one victim at the bound (line + headroom); a victim not found
    lowers the line, and the bound with it, by one: one more victim, not all down to the line."""
    s = listed(2, 2, "s1", "s2", "s3", "s4", headroom=2)
    _ticket, commands = s.request("r", "x")
    (first,) = commands
    assert first == IssueUnload(unload=2, replica="r", adapter="s1")
    (second,) = s(UnloadFinished(unload=first.unload, outcome=UnloadOutcome.NOT_FOUND))
    assert second == IssueUnload(unload=4, replica="r", adapter="s2")
    (load,) = s(unloaded(second))
    assert load == IssueLoad(load=3, replica="r", adapter="x", path="/adapters/x")


def test_share_with_one_router_a_victim_not_found_makes_no_more_room() -> None:
    """With headroom 0 the bound is the line: x's load waits for its victim."""
    s = listed(1, 2, "s1", "s2", headroom=0)
    _ticket, commands = s.request("r", "x")
    (first,) = unloads(commands)
    (load,) = s(UnloadFinished(unload=first.unload, outcome=UnloadOutcome.NOT_FOUND))
    assert isinstance(load, IssueLoad)


def test_share_an_adapter_the_engine_lost_counts_until_the_next_listing() -> None:
    s = listed(2, 2, "s1", "s2")
    s.expect(AdapterMissing(replica="r", adapter="s1"))
    # s1's slot is likely another router's now: x settles by evicting s2 rather than take the slot.
    assert settled_by(s, "x") == ["s2"]


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

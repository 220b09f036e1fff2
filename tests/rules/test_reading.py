"""[reading] and [read-failed] (SPEC.md §3.13): what a reading names is never a victim; a failed read
leaves the reading standing until a listing comes in."""

from __future__ import annotations

from lorafleet import (
    Cancelled,
    Grant,
    How,
    IssueLoad,
    IssueUnload,
    ListingFailed,
    ListingReceived,
    LoadFinished,
    LoadOutcome,
    Placed,
    Placement,
    ReadEngine,
    ReadingFailed,
    ReadingReceived,
    ReadListing,
    Released,
    ReplicaAdded,
    ReplicasRemoved,
    TimeAdvanced,
)

from .helpers import another_routers, held, idle_pair, read_each, read_now, victims
from scenario import Scenario, landed, loads, unloads


def queued_behind_a_reading() -> Scenario:
    """r (limit 1, headroom 0) holds a, idle here and reported running; a request for b waits at the cap."""
    s = Scenario.reading(("r", 1), headroom=0)
    s.expect(Released(ticket=s.load("r", "a")))
    read_now(s, "r", "a")
    _ticket, commands = s.request("r", "b")
    assert [type(c) for c in commands] == [ReadEngine]
    assert s.answer_read("r", ["a"]) == []  # at the cap: b waits in the queue
    return s


# -- [reading] -----------------------------------------------------------------------------------


def test_reading_a_reading_naming_only_this_routers_requests_stands_as_an_empty_one() -> None:
    """[reading] A reading that names only adapters this router's requests run on there says nothing
    of another router: it stands as an empty one, and they go idle as their requests end."""
    s = Scenario.reading(("r", 1))
    t = s.load("r", "a")
    read_now(s, "r", "a")
    assert s.machine.named("r") == frozenset()
    s.expect(Released(ticket=t))
    assert s.machine.place("b") == Placement(replica="r", placed=Placed.EVICT)  # a is idle: a victim


def test_reading_a_reading_counting_others_requests_on_our_adapter_is_another_routers() -> None:
    """[reading] A reading that names only this router's adapters but counts more requests than
    this router had there when the read went out: another router's run on one of them too. It is
    foreign, so what it names stays out of idle after this router's requests end."""
    s = Scenario.reading(("r", 1))
    t = s.load("r", "a")
    read_each(s, 30.0, r={"adapters": ["a"], "running": 2, "waiting": 0})  # ours, and one more
    assert s.machine.named("r") == {"a"}
    reading = s.machine.reading("r")
    assert reading is not None
    assert (reading.foreign, reading.others) == (True, 1)
    s.expect(Released(ticket=t))
    assert s.machine.place("b") == Placement(replica="r", placed=Placed.OVER)  # a still runs: no victim


def read_out_while(s: Scenario, replica: str, ticket: int) -> None:
    """List ``replica`` at 30 s, and release ``ticket`` while the read that follows is out."""
    (listing,) = s(TimeAdvanced(now=30.0))
    assert isinstance(listing, ReadListing)
    held = tuple(s.machine.statistics().replicas[replica].held)
    assert s(ListingReceived(listing=listing.listing, adapters=held)) == [
        ReadEngine(read=s.reads[replica], replica=replica)
    ]
    s.expect(Released(ticket=ticket))


def test_reading_an_adapter_whose_request_ended_while_the_read_was_out_is_ours() -> None:
    """[reading] The engine sampled a's request before it ended: the reading names a, and counts no
    other request. It is this router's own, so the reading stands as an empty one and a is idle."""
    s = Scenario.reading(("r", 1))
    t = s.load("r", "a")
    read_out_while(s, "r", t)
    assert s.answer_read("r", ["a"], running=1, waiting=0) == []
    assert s.machine.named("r") == frozenset()
    reading = s.machine.reading("r")
    assert reading is not None
    assert (reading.foreign, reading.others) == (False, 0)
    assert s.machine.place("b") == Placement(replica="r", placed=Placed.EVICT)  # a is the victim


def test_reading_an_ended_adapter_beside_another_routers_is_named_all_the_same() -> None:
    """[reading] Ended while the read was out, a is not another router's; but the same reading names
    x, which is: foreign, so all it names stays out of idle, a included (another router's request
    may run on it too)."""
    s = Scenario.reading(("r", 2))
    t = s.load("r", "a")
    read_out_while(s, "r", t)
    assert s.answer_read("r", ["a", "x"]) == []
    assert s.machine.named("r") == {"a", "x"}
    assert s.machine.place("b") == Placement(replica="r", placed=Placed.FREE)
    assert held(s, "r") == {"a": 0}


def test_reading_an_adapter_ended_before_the_read_went_out_is_another_routers() -> None:
    """[reading] a's request ended before the read went out: a reading naming a says another
    router's request runs on it."""
    s = Scenario.reading(("r", 1))
    s.expect(Released(ticket=s.load("r", "a")))
    read_now(s, "r", "a")
    assert s.machine.named("r") == {"a"}
    assert s.machine.place("b") == Placement(replica="r", placed=Placed.OVER)


def test_reading_a_reading_naming_another_adapter_keeps_all_it_names_out_of_idle() -> None:
    """[reading] A reading that names an adapter no request of this router runs on there is another
    router's doing: all it names, this router's own included, stay out of idle until the next."""
    s = Scenario.reading(("r", 1))
    t = s.load("r", "a")
    read_now(s, "r", "a", "x")
    assert s.machine.named("r") == {"a", "x"}
    s.expect(Released(ticket=t))
    assert s.machine.place("b") == Placement(replica="r", placed=Placed.OVER)  # a runs elsewhere
    read_now(s, "r", now=60.0)
    assert s.machine.place("b") == Placement(replica="r", placed=Placed.EVICT)


def test_reading_an_adapter_the_engine_reports_running_is_no_victim() -> None:
    s = Scenario.reading(("r", 2))
    idle_pair(s)
    read_now(s, "r", "a")  # idle here: another router's requests run on it
    assert s.machine.named("r") == {"a"}
    # a is the least recently used here, but another router runs requests on it: before c takes a
    # victim the replica's engine is read again ([read]), and b is the one.
    _ticket, commands = s.request("r", "c")
    assert commands == [ReadEngine(read=s.reads["r"], replica="r")]
    (load,) = s.answer_read("r", ["a"])
    assert isinstance(load, IssueLoad)
    assert victims(s, "r") == ("b",)


def test_reading_when_every_idle_adapter_is_reported_the_load_goes_over_the_limit() -> None:
    s = Scenario.reading(("r", 2))
    idle_pair(s)
    another_routers(s)
    ticket, commands = s.request("r", "c")
    assert commands == [ReadEngine(read=s.reads["r"], replica="r")]
    (load,) = s.answer_read("r", ["b", "a", "zz"])  # zz: not held here
    assert isinstance(load, IssueLoad)
    assert victims(s, "r") == ()  # nothing idle: c goes over the limit (no cap)
    s.expect(landed(load), Grant(ticket=ticket, how=How.LOADED))
    assert held(s, "r") == {"a": 0, "b": 0, "c": 1}


def test_reading_the_next_report_replaces_it_and_frees_the_rest_most_recently_used() -> None:
    s = Scenario.reading(("r", 2))
    idle_pair(s)
    read_now(s, "r", "a")
    _ticket, commands = s.request("r", "c")
    assert commands == [ReadEngine(read=s.reads["r"], replica="r")]
    # a ran last (on the engine, for someone): b is now the least recently used.
    (load,) = s.answer_read("r", [])
    assert isinstance(load, IssueLoad)
    assert victims(s, "r") == ("b",)


def test_reading_an_adapter_in_use_here_stays_in_use_when_the_report_drops_it() -> None:
    s = Scenario.reading(("r", 1), headroom=0)
    t = s.load("r", "a")
    read_now(s, "r", "a", "x")  # x: another router's
    _ticket, commands = s.request("r", "b")
    assert [type(c) for c in commands] == [ReadEngine]
    commands = s.answer_read("r", [])
    assert commands == []  # a's request has not ended: b waits at the cap
    assert held(s, "r") == {"a": 1}
    (load,) = s(Released(ticket=t))
    assert isinstance(load, IssueLoad)
    assert load.adapter == "b"
    assert victims(s, "r") == ("a",)


def test_reading_a_release_or_a_load_leaves_a_reported_adapter_out_of_idle() -> None:
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


def test_reading_a_listing_brings_in_reported_adapters_not_idle() -> None:
    s = Scenario.reading(("r", 1))
    read_now(s, "r", "x")
    s.list_and_read(60.0, "r", ["x", "y"], ["x"])
    # y is the only victim: x runs on the engine.
    _ticket, commands = s.request("r", "c")
    assert commands == [ReadEngine(read=s.reads["r"], replica="r")]
    (load,) = s.answer_read("r", ["x"])
    assert isinstance(load, IssueLoad)
    assert victims(s, "r") == ("y",)


def test_reading_placement_does_not_count_reported_adapters_as_idle() -> None:
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


def test_reading_at_the_cap_a_report_that_frees_an_adapter_admits_the_queue() -> None:
    s = queued_behind_a_reading()  # a runs elsewhere: no room under the cap
    (load,) = s.list_and_read(60.0, "r", ["a"], [])
    assert isinstance(load, IssueLoad)
    assert load.adapter == "b"
    assert victims(s, "r") == ("a",)


def test_reading_a_removed_replica_forgets_its_reading() -> None:
    s = Scenario.reading(("r", 1))
    s.expect(Released(ticket=s.load("r", "a")))
    read_now(s, "r", "a")
    s.expect(ReplicasRemoved(replicas=("r",)))
    assert s.machine.named("r") == frozenset()
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


# -- [read-failed]: a failed read leaves the reading standing until a listing comes in -------------


def test_read_failed_with_no_listing_since_the_report_the_report_stands() -> None:
    s = queued_behind_a_reading()
    # A release of nothing... the queue waits; read again through a listing that fails.
    (listing,) = s(TimeAdvanced(now=60.0))
    assert isinstance(listing, ReadListing)
    s.expect(ListingFailed(listing=listing.listing, message="HTTP 500"))  # a failed listing is no listing
    assert s.machine.named("r") == {"a"}


def test_read_failed_after_a_listing_ends_the_report_as_an_empty_one_would() -> None:
    s = queued_behind_a_reading()
    (listing,) = s(TimeAdvanced(now=60.0))
    assert isinstance(listing, ReadListing)
    (read,) = s(ListingReceived(listing=listing.listing, adapters=("a",)))
    assert isinstance(read, ReadEngine)
    assert s.machine.named("r") == {"a"}  # a still runs elsewhere, as far as anyone knows
    (load,) = s.fail_read("r", "HTTP 503")
    assert s.machine.named("r") == frozenset()
    assert isinstance(load, IssueLoad)
    assert load.adapter == "b"
    assert victims(s, "r") == ("a",)


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
    assert s.machine.named("r") == {"a", "x"}  # no listing since that reading: it stands

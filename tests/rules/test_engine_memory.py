"""Readings of this round's rules ([evict], [load-outcome], [listing]'s stamps, [cap]'s batch clause,
[place]'s key) that no vector pinned: each test is the run a mutant of the JavaScript port needed to
be caught (vectors/port/mutants.mjs), so that a port that misreads the clause fails a vector."""

from __future__ import annotations

from lorafleet import (
    AdapterPinned,
    AdapterUnpinned,
    Grant,
    How,
    IssueLoad,
    IssueUnload,
    LimitSet,
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
    TimeAdvanced,
)

from .helpers import held, victims
from scenario import Scenario, landed, loads


def test_place_a_halved_demand_leaves_idle_age_to_decide() -> None:
    """half_life 1 halves every demand count to 0 after each request: r's victim x (asked once) and q's
    y (never asked) weigh alike, and x, idle longer, decides for r. Misreading (never halved): x weighs
    more, and q is chosen."""
    s = Scenario.with_replicas(("r", 1), ("q", 1), half_life=1)
    s.expect(Released(ticket=s.load("r", "x")))
    (load,) = loads(s(AdapterPinned(adapter="y", path="/adapters/y", copies=1, model=None)))
    assert load.replica == "q"
    s.expect(landed(load))
    s.expect(AdapterUnpinned(adapter="y"))  # idle on q now, a later stamp than x's
    assert s.machine.place("z") == Placement(replica="r", placed=Placed.EVICT)


def test_settle_after_the_victims_unloads() -> None:
    """A landed load's victims' unloads go out before [settle]'s: c took a's room, and the limit lowered
    meanwhile leaves b over the line too."""
    s = Scenario.with_replicas(("r", 2), listed=False)
    s.expect(ListingReceived(listing=1, adapters=("a", "b")), MarkMet(replica="r"))
    c, commands = s.request("r", "c")
    (load,) = commands
    assert isinstance(load, IssueLoad)
    assert victims(s, "r") == ("a",)
    s.expect(LimitSet(model="base", limit=1))
    s.expect(
        landed(load),
        Grant(ticket=c, how=How.LOADED),
        IssueUnload(unload=3, replica="r", adapter="a"),
        IssueUnload(unload=4, replica="r", adapter="b"),
    )


def test_load_outcome_a_spared_victim_is_held_as_of_when_it_first_was() -> None:
    """A victim spared by a failed load is held again with its old ``since``: a listing that started
    after that, and before the failure, and does not name it, drops it. Misreading: held anew as of
    the failure, after the listing started, so the listing keeps it."""
    s = Scenario.with_replicas(("r", 1), listed=False)
    s.expect(ListingReceived(listing=1, adapters=("a",)), MarkMet(replica="r"))
    s.expect(TimeAdvanced(now=30.0), ReadListing(listing=2, replica="r"))
    b, commands = s.request("r", "b")
    (load,) = commands
    assert isinstance(load, IssueLoad)
    assert victims(s, "r") == ("a",)
    s(LoadFinished(load=load.load, outcome=LoadOutcome.REPLICA_FAULT, message="down"))
    assert held(s, "r") == {"a": 0}
    s.expect(ListingReceived(listing=2, adapters=()))
    assert held(s, "r") == {}
    assert b == s.ticket


def test_listing_stamps_count_down_and_a_spared_victim_goes_back_by_its_stamp() -> None:
    """A listing's adapters take the stamps front - 1, front - 2... in reverse name order (a at -2, b at
    -1); c's victim a, spared when c's load fails, goes back before b, so d's load takes a again.
    Misreadings: every listed stamp 0, or name order counting down (a at -1, b at -2): the spared a
    would go after b, and d's victim would be b."""
    s = Scenario.with_replicas(("r", 2), listed=False)
    s.expect(ListingReceived(listing=1, adapters=("a", "b")), MarkMet(replica="r"))
    _, commands = s.request("r", "c")
    (load,) = commands
    assert isinstance(load, IssueLoad)
    s(LoadFinished(load=load.load, outcome=LoadOutcome.ADAPTER_FAULT, message="bad"))
    _, commands = s.request("r", "d")
    assert victims(s, "r") == ("a",)


def test_listing_stamps_go_on_counting_down_from_one_listing_to_the_next() -> None:
    """Each replica keeps its ``front``: a second listing's b takes -2 (a took -1), the front of idle.
    c's victim b, spared, goes back before a, and d takes b again. Misreading: each listing counts
    from 0 again (b at -1 beside a at -1)."""
    s = Scenario.with_replicas(("r", 2), listed=False)
    s.expect(ListingReceived(listing=1, adapters=("a",)), MarkMet(replica="r"))
    (listing,) = s(TimeAdvanced(now=30.0))
    assert isinstance(listing, ReadListing)
    s.expect(ListingReceived(listing=listing.listing, adapters=("a", "b")))
    _, commands = s.request("r", "c")
    (load,) = commands
    assert isinstance(load, IssueLoad)
    assert victims(s, "r") == ("b",)
    s(LoadFinished(load=load.load, outcome=LoadOutcome.ADAPTER_FAULT, message="bad"))
    _, commands = s.request("r", "d")
    assert victims(s, "r") == ("b",)


def test_cap_the_batch_clause_holds_a_load_with_nothing_idle_too() -> None:
    """[cap] Headroom 1, limit 2, and the engine's batch runs one adapter: a and b both in use leave
    c's load at the line with two in use, more than one batch runs, so it waits, though nothing is idle
    to take and the headroom would let it go over. Misreading: the clause holds a load only while an
    idle adapter is left to take."""
    s = Scenario.configured(read_engine=True, headroom=1)
    s(ReplicaAdded(replica="r", model="base", limit=2))
    s.expect(ListingReceived(listing=1, adapters=()), MarkMet(replica="r"), ReadEngine(read=2, replica="r"))
    assert s.answer_read("r", (), max_loras=1) == []
    s.load("r", "a")
    s.load("r", "b")
    _, commands = s.request("r", "c")
    assert commands == []
    assert s.machine.statistics().replicas["r"].queued == 1


def test_place_compares_how_busy_before_how_many_served() -> None:
    """[place] A holder's key is (busy, served, -weight): r served a twice but runs nothing now, q served
    it once and runs it still; a goes to r. Misreading: served before busy picks q."""
    s = Scenario.with_replicas(("r", 2), ("q", 2), listed=False)
    s.expect(ListingReceived(listing=1, adapters=("a",)), MarkMet(replica="r"))
    s.expect(ListingReceived(listing=2, adapters=("a",)), MarkMet(replica="q"))
    for _ in range(2):
        s.expect(Released(ticket=s.hit("r", "a")))
    s.hit("q", "a")  # still running
    assert s.machine.place("a") == Placement(replica="r", placed=Placed.HELD)


def test_place_reads_a_listed_victims_stamp_below_zero_as_zero() -> None:
    """[place] r's victim a (listed: stamp -1) and q's victim b (listed: stamp -2) both read as stamp 0,
    so w goes where its rendezvous weight does, r (q holds 2 of 2: no free slot there). A misreading
    that compares -2 with -1 sends w to q."""
    s = Scenario.with_replicas(("r", 1), ("q", 2), listed=False)
    s.expect(ListingReceived(listing=1, adapters=("a",)), MarkMet(replica="r"))
    s.expect(ListingReceived(listing=2, adapters=("b", "c")), MarkMet(replica="q"))
    assert s.machine.place("w") == Placement(replica="r", placed=Placed.EVICT)

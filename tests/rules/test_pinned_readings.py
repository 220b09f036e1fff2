"""Readings of SPEC.md §3.8-3.15 that no vector pinned (issue 37): each scenario is the run a mutant of
the JavaScript port (vectors/port/mutants.mjs, named in the docstring) needed to be caught, so that a
port that misreads the clause fails a vector. Demand counting, the queue's admissions, readings, the
load figures, [place]'s steps, pins, [share]'s base and [settle]'s count."""

from __future__ import annotations

from lorafleet import (
    AdapterMissing,
    AdapterPinned,
    AdapterUnpinned,
    Cancelled,
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
    ReadingReceived,
    ReadListing,
    Released,
    ReplicaAdded,
    ReplicaFailed,
    ReplicasRemoved,
    ServedElsewhere,
    TimeAdvanced,
    UnloadFinished,
    UnloadOutcome,
)

from .helpers import held, routed
from .test_spec_points import favouring
from scenario import Scenario, landed, loads

RULES = {
    "test_place_counts_a_refused_request_in_its_adapters_demand": ["refuse"],
    "test_place_counts_the_hit_shortcut_in_demand": ["hit"],
    "test_place_counts_a_routed_request_in_demand_when_it_is_assigned": ["route"],
    "test_cap_an_unpin_admits_the_queue": ["pin"],
    "test_cap_an_unloads_answer_and_a_pinned_release_admit_no_queue": ["pin", "unload-outcome", "cancel"],
    "test_cap_a_reading_of_max_loras_0_keeps_the_known_one": ["reading"],
    "test_pin_made_good_when_its_load_fails": ["load-outcome", "health"],
    "test_pin_made_good_when_the_engine_lost_it": ["forget"],
    "test_reading_frees_what_it_no_longer_names_in_name_order": ["evict"],
    "test_reading_never_frees_a_pinned_adapter_into_idle": ["pin"],
    "test_listing_keeps_an_adapter_the_last_reading_names_out_of_idle": ["reading", "place"],
    "test_read_not_for_a_replica_whose_engine_names_nothing": ["route", "load"],
    "test_load_others_are_as_of_when_the_read_went_out": ["reading"],
    "test_load_a_reading_never_lowers_calm": ["read", "route"],
    "test_load_read_served_is_as_of_when_the_read_went_out": ["read", "route"],
}


def listed(s: Scenario, replica: str, limit: int, *names: str, model: str = "base") -> list[object]:
    """Add ``replica`` and answer its listing with ``names``: the listing's commands."""
    (listing,) = s(ReplicaAdded(replica=replica, model=model, limit=limit))
    assert isinstance(listing, ReadListing)
    return list(s(ListingReceived(listing=listing.listing, adapters=names)))


def shortcut(s: Scenario, replica: str, adapter: str) -> int:
    """A hit through the ``hit`` shortcut, released: its ticket."""
    s.ticket += 1
    assert s.machine.hit(s.ticket, replica=replica, adapter=adapter)
    s.expect(Released(ticket=s.ticket))
    return s.ticket


def read_with(s: Scenario, replica: str, now: float, **reading: object) -> None:
    """List ``replica`` at ``now`` as holding what it holds, and answer the read that follows."""
    (listing,) = s(TimeAdvanced(now=now))
    assert isinstance(listing, ReadListing)
    names = tuple(s.machine.statistics().replicas[replica].held)
    (read,) = s(ListingReceived(listing=listing.listing, adapters=names))
    assert isinstance(read, ReadEngine)
    s(ReadingReceived(read=read.read, **reading))  # type: ignore[arg-type]


# -- demand (§1.3) -----------------------------------------------------------------------------------


def test_place_counts_a_refused_request_in_its_adapters_demand() -> None:
    """Two refused requests for x make its demand 3 (weight 2), above y's 1: z evicts y on q.
    Mutant demand-refused-uncounted: x's weight 1 ties y's, and x, listed (stamp read as 0), goes."""
    s = Scenario.configured()
    listed(s, "r", 1, "x")
    listed(s, "q", 1)
    t, commands = s.request("q", "x")
    (load,) = loads(commands)
    s(LoadFinished(load=load.load, outcome=LoadOutcome.ADAPTER_FAULT, message="rank too high"))
    for _ in range(2):
        _, commands = s.request("q", "x")
        assert [c.fault for c in commands] == [Fault.ADAPTER]  # type: ignore[union-attr]
    s.expect(Released(ticket=s.load("q", "y")))
    assert s.machine.place("z") == Placement(replica="q", placed=Placed.EVICT)
    assert t == 1


def test_place_counts_the_hit_shortcut_in_demand() -> None:
    """x, asked once and hit twice through the shortcut, weighs 2 against y's 1: z evicts y. Mutant
    demand-hit-shortcut-uncounted: both weigh 1, and x, idle longer, goes."""
    s = Scenario.with_replicas(("r", 1), ("q", 1))
    s.expect(Released(ticket=s.load("r", "x")))
    shortcut(s, "r", "x")
    shortcut(s, "r", "x")
    s.expect(Released(ticket=s.load("q", "y")))
    assert s.machine.place("z") == Placement(replica="q", placed=Placed.EVICT)


def test_place_counts_a_routed_request_in_demand_when_it_is_assigned() -> None:
    """As the shortcut, with x routed twice (each a hit on r). Mutant demand-routed-uncounted."""
    s = Scenario.with_replicas(("r", 1), ("q", 1))
    s.expect(Released(ticket=s.load("r", "x")))
    for _ in range(2):
        ticket, commands = routed(s, "x")
        assert commands[-1] == Grant(ticket=ticket, how=How.HIT)
        s.expect(Released(ticket=ticket))
    s.expect(Released(ticket=s.load("q", "y")))
    assert s.machine.place("z") == Placement(replica="q", placed=Placed.EVICT)


def test_place_weighs_a_victim_by_the_bit_length_of_its_demand() -> None:
    """x asked 3 times and y twice weigh alike (2, the bit length of both): x, idle longer, goes.
    Mutant demand-weight-is-count: 2 < 3, and y goes."""
    s = Scenario.with_replicas(("r", 1), ("q", 1))
    s.expect(Released(ticket=s.load("r", "x")))
    s.expect(Released(ticket=s.hit("r", "x")))
    s.expect(Released(ticket=s.hit("r", "x")))
    s.expect(Released(ticket=s.load("q", "y")))
    s.expect(Released(ticket=s.hit("q", "y")))
    assert s.machine.place("z") == Placement(replica="r", placed=Placed.EVICT)


def test_place_halves_demand_every_500_requests_by_default() -> None:
    """x, asked once on p, keeps its weight through 260 requests: z evicts y (never asked) on q rather
    than x on r, though its rendezvous weight prefers r. Mutant half-life-default (250): x's count is
    halved to 0, and r wins the tie."""
    s = Scenario.with_replicas(("p", 2))
    listed(s, "r", 1, "x")
    listed(s, "q", 1, "y")
    z = favouring("r", "q")
    s.expect(Released(ticket=s.load("p", "x")))
    s.expect(Released(ticket=s.load("p", "w")))
    for _ in range(258):
        shortcut(s, "p", "w")
    assert s.machine.place(z, exclude=["p"]) == Placement(replica="q", placed=Placed.EVICT)


# -- [blame] -------------------------------------------------------------------------------------------


def test_blame_served_elsewhere_is_no_answer_from_the_replica_that_served() -> None:
    """The replica that served a request others failed is not thereby healthy: r, failing, stays
    avoided. Mutant blame-served-is-an-answer: r's failures are cleared."""
    s = Scenario.with_replicas(("r", 1), ("q", 1))
    s.expect(ReplicaFailed(replica="r", message="reset"))
    s.expect(ServedElsewhere(replica="r", failed=("q",)))
    replicas = s.machine.statistics().replicas
    assert (replicas["r"].failing_until, replicas["q"].failing_until) == (5.0, 5.0)


# -- [cap]: what admits the queue ----------------------------------------------------------------------


def test_cap_an_unpin_admits_the_queue() -> None:
    """An unpin that leaves the adapter idle admits the queue: a, queued behind pinned x, loads with x
    its victim. Mutant cap-unpin-no-queue: a waits on."""
    s = Scenario.with_replicas(("r", 1), headroom=0)
    (load,) = loads(s(AdapterPinned(adapter="x", path="/adapters/x", copies=1, model=None)))
    s.expect(landed(load))
    a, commands = s.request("r", "a")
    assert commands == []
    s.expect(AdapterUnpinned(adapter="x"), IssueLoad(load=3, replica="r", adapter="a", path="/adapters/a"))
    assert s.machine.statistics().replicas["r"].unloading == ("x",)
    assert a == 1


def test_cap_an_unloads_answer_and_a_pinned_release_admit_no_queue() -> None:
    """d waits in the queue for v, which a listing brought in while c headed the queue; c is cancelled
    (no admission). Neither an unload's answer nor the release of a pinned adapter admits the queue:
    d waits for an event that may bring room. Mutants cap-unload-admits-queue and
    cap-pinned-release-admits-queue: d is granted a hit at once."""
    s = Scenario.with_replicas(("r", 2), headroom=0)
    (load,) = loads(s(AdapterPinned(adapter="p", path="/adapters/p", copies=1, model=None)))
    s.expect(landed(load))
    s.expect(Released(ticket=s.load("r", "x")))
    a, commands = s.request("r", "a")  # x is its victim
    (load,) = loads(commands)
    s.expect(landed(load), Grant(ticket=a, how=How.LOADED), IssueUnload(unload=5, replica="r", adapter="x"))
    pinned = s.hit("r", "p")
    c, commands = s.request("r", "c")
    assert commands == []  # p and a in use: at the cap
    d, commands = s.request("r", "v")
    assert commands == []
    s.expect(TimeAdvanced(now=30.0), ReadListing(listing=6, replica="r"))
    s.expect(ListingReceived(listing=6, adapters=("a", "p", "v")))  # v comes in idle; c still waits
    s.expect(Cancelled(ticket=c))
    s.expect(UnloadFinished(unload=5, outcome=UnloadOutcome.UNLOADED))
    s.expect(Released(ticket=pinned))
    assert s.machine.statistics().replicas["r"].queued == 1
    s.expect(Released(ticket=a), Grant(ticket=d, how=How.HIT))  # a goes idle: room may have come


def test_cap_a_reading_of_max_loras_0_keeps_the_known_one() -> None:
    """A reading whose ``max_loras`` is 0 (an engine that does not say) keeps the one known. Mutant
    cap-zero-max-loras-replaces: 0."""
    s = Scenario.reading(("r", 2))
    read_with(s, "r", 30.0, adapters=(), max_loras=3)
    read_with(s, "r", 60.0, adapters=(), max_loras=0)
    reading = s.machine.reading("r")
    assert reading is not None
    assert reading.max_loras == 3


# -- [pin] ---------------------------------------------------------------------------------------------


def test_pin_made_good_when_its_load_fails() -> None:
    """A pin's load answered ``replica_fault`` makes the pins good at once, on the other replica.
    Mutant pin-not-on-load-fault: the pin waits for the next listing."""
    s = Scenario.with_replicas(("r", 1), ("q", 1))
    (load,) = loads(s(AdapterPinned(adapter="x", path="/adapters/x", copies=1, model=None)))
    other = "q" if load.replica == "r" else "r"
    s.expect(
        LoadFinished(load=load.load, outcome=LoadOutcome.REPLICA_FAULT, message="down"),
        IssueLoad(load=load.load + 1, replica=other, adapter="x", path="/adapters/x"),
    )


def test_pin_made_good_when_the_engine_lost_it() -> None:
    """An ``adapter_missing`` that drops a pinned adapter loads it again at once. Mutant
    pin-not-on-forget."""
    s = Scenario.with_replicas(("r", 1))
    (load,) = loads(s(AdapterPinned(adapter="x", path="/adapters/x", copies=1, model=None)))
    s.expect(landed(load))
    s.expect(
        AdapterMissing(replica="r", adapter="x"),
        IssueLoad(load=load.load + 1, replica="r", adapter="x", path="/adapters/x"),
    )


def test_pin_counts_copies_only_on_replicas_of_its_model() -> None:
    """A copy on a replica of another model is none of the pin's: x, pinned for base, loads on r though
    q (of model other) holds it. Mutant pin-model-ignored: q's copy counts, and nothing loads."""
    s = Scenario.configured()
    listed(s, "r", 1)
    listed(s, "q", 1, "x", model="other")
    (load,) = loads(s(AdapterPinned(adapter="x", path="/adapters/x", copies=1, model="base")))
    assert load.replica == "r"


def test_pin_places_its_copies_only_on_replicas_of_its_model() -> None:
    """x, pinned for model other, loads on q (evicting y) though r, of base, has a free slot. Mutant
    pin-placed-any-model: it loads on r."""
    s = Scenario.configured()
    listed(s, "r", 1)
    listed(s, "q", 1, "y", model="other")
    (load,) = loads(s(AdapterPinned(adapter="x", path="/adapters/x", copies=1, model="other")))
    assert load.replica == "q"
    assert s.machine.statistics().replicas["q"].unloading == ("y",)


def test_pin_takes_a_held_adapter_out_of_idle() -> None:
    """Pinning x, idle on r, takes it out of idle: a load past the limit there takes no victim. Mutant
    pin-stays-idle: x is its victim, unloaded once the load lands."""
    s = Scenario.with_replicas(("r", 1))
    s.expect(Released(ticket=s.load("r", "x")))
    s.expect(AdapterPinned(adapter="x", path="/adapters/x", copies=1, model=None))
    y, commands = s.request("r", "y")
    (load,) = loads(commands)
    s.expect(landed(load), Grant(ticket=y, how=How.LOADED))
    assert held(s, "r") == {"x": 0, "y": 1}


def test_pin_made_good_in_name_order() -> None:
    """Pins short of copies are made good in name order: a's load, then b's. Mutant
    pin-names-reversed."""
    s = Scenario.configured()
    s.expect(AdapterPinned(adapter="b", path="/adapters/b", copies=1, model=None))
    s.expect(AdapterPinned(adapter="a", path="/adapters/a", copies=1, model=None))
    assert listed(s, "r", 2) == [
        MarkMet(replica="r"),
        IssueLoad(load=2, replica="r", adapter="a", path="/adapters/a"),
        IssueLoad(load=3, replica="r", adapter="b", path="/adapters/b"),
    ]


# -- [reading], [listing] ------------------------------------------------------------------------------


def test_reading_frees_what_it_no_longer_names_in_name_order() -> None:
    """A reading that no longer names a and b frees them in name order, each with a tick: a is the
    least recently used, and the next load's victim. Mutant reading-frees-reversed: b is."""
    s = Scenario.reading(("r", 2))
    s.expect(Released(ticket=s.load("r", "a")))
    s.expect(Released(ticket=s.load("r", "b")))
    read_with(s, "r", 30.0, adapters=("b", "a", "o"))
    read_with(s, "r", 60.0, adapters=())
    _, commands = s.request("r", "c")
    (load,) = loads(commands)
    assert s.machine.statistics().replicas["r"].unloading == ("a",)
    assert load.adapter == "c"


def test_reading_never_frees_a_pinned_adapter_into_idle() -> None:
    """A reading that no longer names pinned a leaves it out of idle: c goes past the limit, taking no
    victim. Mutant reading-frees-pinned: a is its victim."""
    s = Scenario.reading(("r", 1))
    (load,) = loads(s(AdapterPinned(adapter="a", path="/adapters/a", copies=1, model=None)))
    s.expect(landed(load))
    read_with(s, "r", 30.0, adapters=("a", "o"))
    read_with(s, "r", 60.0, adapters=())
    _, commands = s.request("r", "c")
    assert len(loads(commands)) == 1
    assert s.machine.statistics().replicas["r"].unloading == ()


def test_listing_keeps_an_adapter_the_last_reading_names_out_of_idle() -> None:
    """A listing that brings in o, which the last reading names, leaves it out of idle: a replica
    full of it places ``over``. Mutant listing-idles-named: ``evict``."""
    s = Scenario.reading(("r", 1))
    read_with(s, "r", 30.0, adapters=("o",))
    (listing,) = s(TimeAdvanced(now=60.0))
    assert isinstance(listing, ReadListing)
    s(ListingReceived(listing=listing.listing, adapters=("o",)))
    assert held(s, "r") == {"o": 0}
    assert s.machine.place("z") == Placement(replica="r", placed=Placed.OVER)


# -- [read], [load] ------------------------------------------------------------------------------------


def test_read_not_for_a_replica_whose_engine_names_nothing() -> None:
    """An engine without the gauge (``adapters`` null) that counts its requests is never stale: a
    routed request above its calm load starts no read. Mutant stale-without-names."""
    s = Scenario.reading(("r", 2))
    read_with(s, "r", 30.0, adapters=None, running=0, waiting=0)
    ticket, commands = routed(s, "a")
    assert commands[0].replica == "r"  # type: ignore[union-attr]
    assert not [c for c in commands if isinstance(c, ReadEngine)]
    assert ticket == 1


def test_load_others_never_go_below_0() -> None:
    """A reading that shows fewer requests than this router has there counts no other router's:
    ``others`` is 0, not -2. Mutant load-others-negative."""
    s = Scenario.reading(("r", 2))
    s.load("r", "a")
    s.load("r", "b")
    read_with(s, "r", 30.0, adapters=("a", "b"), running=0, waiting=0)
    reading = s.machine.reading("r")
    assert reading is not None
    assert (reading.others, reading.load) == (0, 2)


def test_load_others_are_as_of_when_the_read_went_out() -> None:
    """``others`` counts against this router's requests as the read went out (2), not as the answer
    comes (1): 2 running are ours, others 0. Mutant load-others-current: 1."""
    s = Scenario.reading(("r", 2))
    a = s.load("r", "a")
    s.load("r", "b")
    (listing,) = s(TimeAdvanced(now=30.0))
    assert isinstance(listing, ReadListing)
    (read,) = s(ListingReceived(listing=listing.listing, adapters=("a", "b")))
    assert isinstance(read, ReadEngine)
    s.expect(Released(ticket=a))
    s(ReadingReceived(read=read.read, adapters=("b",), running=2, waiting=0))
    reading = s.machine.reading("r")
    assert reading is not None
    assert reading.others == 0


def test_load_a_reading_never_lowers_what_ran() -> None:
    """``ran`` keeps the most a reading showed running (3): a later reading with a queue and 1 running
    gives a capacity of 3. Mutant load-ran-lowered: 1."""
    s = Scenario.reading(("r", 2))
    read_with(s, "r", 30.0, adapters=(), running=3, waiting=0)
    read_with(s, "r", 60.0, adapters=(), running=1, waiting=1)
    reading = s.machine.reading("r")
    assert reading is not None
    assert reading.capacity == 3


def test_load_a_reading_never_lowers_calm() -> None:
    """``calm`` keeps the most load a reading found with none waiting (3): a routed request that makes
    the load 2 starts no read. Mutant load-calm-lowered: calm 1, and the replica is stale."""
    s = Scenario.reading(("r", 2))
    read_with(s, "r", 30.0, adapters=(), running=3, waiting=0)
    read_with(s, "r", 60.0, adapters=(), running=1, waiting=0)
    _, commands = routed(s, "a")
    assert not [c for c in commands if isinstance(c, ReadEngine)]


def test_load_read_served_is_as_of_when_the_read_went_out() -> None:
    """``read_served`` is ``served`` as the read went out: two requests routed while it was out count
    toward the 4 that make a foreign replica stale, and the fourth after it starts a read. Mutant
    load-read-served-now: only the two after the answer count."""
    s = Scenario.reading(("r", 4))
    (listing,) = s(TimeAdvanced(now=30.0))
    assert isinstance(listing, ReadListing)
    (read,) = s(ListingReceived(listing=listing.listing, adapters=()))
    assert isinstance(read, ReadEngine)
    for name in ("a", "b"):
        routed(s, name)
    s(ReadingReceived(read=read.read, adapters=("o",)))  # another router's: foreign
    routed(s, "a")
    _, commands = routed(s, "b")
    assert [c for c in commands if isinstance(c, ReadEngine)] == [ReadEngine(read=read.read + 3, replica="r")]


# -- [place] ------------------------------------------------------------------------------------------


def test_place_spreads_to_an_idle_replica_of_capacity_1() -> None:
    """With a capacity of 1, step 2's bound is 3/4: q, idle (0 < 3/4), takes a second copy of a from
    r, saturated. Mutant place-spread-floor: bound ⌊3/4⌋ = 0, no candidate, and the holder keeps it."""
    s = Scenario.with_replicas(("r", 2), ("q", 2), concurrency=1)
    s.load("r", "a")
    s.hit("r", "a")
    assert s.machine.place("a") == Placement(replica="q", placed=Placed.FREE)


def test_place_spread_bound_is_three_quarters_not_rounded() -> None:
    """With a capacity of 2, step 2's bound is 1.5: q, busy 1, is a candidate and takes a second copy
    of a from r, saturated; busy 2, it is not, and r keeps a (q's queue is not shorter by 2).
    Mutant place-spread-floor-1: bound max(1, ⌊1.5⌋) = 1, and r keeps a at once."""
    s = Scenario.with_replicas(("r", 2), ("q", 2), concurrency=2)
    s.load("r", "a")
    s.hit("r", "a")
    s.hit("r", "a")
    s.load("q", "b")
    assert s.machine.place("a") == Placement(replica="q", placed=Placed.FREE)
    s.hit("q", "b")
    assert s.machine.place("a") == Placement(replica="r", placed=Placed.HELD)


def test_place_step_2_passes_over_a_replica_at_its_cap() -> None:
    """A replica at its cap is no candidate of step 2: step 3 compares it with the saturated holder,
    which keeps a. Mutant place-step2-takes-wait: q, placed ``wait``."""
    s = Scenario.with_replicas(("r", 2), ("q", 1), concurrency=1, headroom=0)
    s.load("r", "a")
    s.hit("r", "a")
    s.load("q", "b")
    assert s.machine.place("a") == Placement(replica="r", placed=Placed.HELD)


def test_place_a_holder_is_busy_with_the_callers_load_too() -> None:
    """The caller's figure for the holder counts in step 1: r, idle but reported busy 5, is saturated,
    and q takes a. Mutant place-caller-load-ignored: r."""
    s = Scenario.with_replicas(("r", 2), ("q", 2), concurrency=2)
    s.expect(Released(ticket=s.load("r", "a")))
    assert s.machine.place("a", load={"r": 5}) == Placement(replica="q", placed=Placed.FREE)


def test_place_a_replica_loading_the_adapter_is_a_holder() -> None:
    """A replica loading the adapter is a holder: a goes there, ``loading``, rather than to q's free
    slot. Mutant place-holder-held-only."""
    s = Scenario.with_replicas(("r", 2), ("q", 2))
    s.request("r", "a")
    s.load("r", "b")
    assert s.machine.place("a") == Placement(replica="r", placed=Placed.LOADING)


# -- [share] ------------------------------------------------------------------------------------------


def test_share_a_replica_added_back_shares_from_what_it_holds_then() -> None:
    """r, added back holding a (in use), has base 1 and a line of 1 + ⌈3 / 2⌉ = 3: with a and b it
    has room. Mutant share-base-kept-on-readd: base 0, line 2, no room."""
    s = Scenario.with_replicas(("r", 4), routers=2)
    s.load("r", "a")
    s.expect(ReplicasRemoved(replicas=("r",)))
    s.expect(ReplicaAdded(replica="r", model="base", limit=4), ReadListing(listing=3, replica="r"))
    s.load("r", "b")
    assert s.machine.view(["r"], "z").with_room == frozenset({"r"})


def test_share_a_listing_counts_the_loads_still_out_in_its_base() -> None:
    """A listing answered while a's load is out has base 1: line 3, room with a and b. Mutant
    share-base-without-loads: base 0, line 2."""
    s = Scenario.with_replicas(("r", 4), routers=2)
    s.expect(TimeAdvanced(now=30.0), ReadListing(listing=2, replica="r"))
    a, commands = s.request("r", "a")
    (load,) = loads(commands)
    s.expect(ListingReceived(listing=2, adapters=()))
    s.expect(landed(load), Grant(ticket=a, how=How.LOADED))
    s.load("r", "b")
    assert s.machine.view(["r"], "z").with_room == frozenset({"r"})


def test_share_a_listing_forgets_the_adapters_lost_before_it() -> None:
    """A listing sets ``unseen`` back to 0: the line lowered by a lost adapter is 2 again. Mutant
    share-unseen-kept-by-listing: 1, no room with b."""
    s = Scenario.with_replicas(("r", 4), routers=2)
    s.expect(Released(ticket=s.load("r", "a")))
    s.expect(AdapterMissing(replica="r", adapter="a"))
    s.expect(TimeAdvanced(now=30.0), ReadListing(listing=3, replica="r"))
    s.expect(ListingReceived(listing=3, adapters=()))
    s.load("r", "b")
    assert s.machine.view(["r"], "z").with_room == frozenset({"r"})


# -- [settle] ------------------------------------------------------------------------------------------


def test_settle_unloads_the_excess_of_the_adapters_held_alone() -> None:
    """c lands with a and b idle and d's load still out: held 3 over a line of 2, one unload (a).
    Mutant settle-counts-loads: d counted, two (a and b)."""
    s = Scenario.with_replicas(("r", 2))
    a, b = s.load("r", "a"), s.load("r", "b")
    c, commands = s.request("r", "c")
    (load_c,) = loads(commands)
    s.request("r", "d")
    s.expect(Released(ticket=a))
    s.expect(Released(ticket=b))
    s.expect(landed(load_c), Grant(ticket=c, how=How.LOADED), IssueUnload(unload=6, replica="r", adapter="a"))


def test_place_step_2_passes_over_an_idle_replica_at_its_cap() -> None:
    """q, at its cap with only pinned p (nothing running, busy 0), is no candidate of step 2: step 3
    compares it with r, the saturated holder, which keeps a. Mutant place-step2-takes-wait: q,
    ``wait``."""
    s = Scenario.with_replicas(("r", 2), ("q", 1), concurrency=1, headroom=0)
    for load in loads(s(AdapterPinned(adapter="p", path="/adapters/p", copies=2, model=None))):
        s.expect(landed(load))
    s.load("r", "a")
    s.hit("r", "a")
    assert s.machine.place("a") == Placement(replica="r", placed=Placed.HELD)


def test_cap_a_release_of_an_adapter_the_reading_names_admits_no_queue() -> None:
    """With a read out, the release of a, which the last reading names, admits no queue: d, queued
    for v (which a listing brought in while c headed the queue), waits on. Mutant
    cap-named-release-admits-queue: d is granted a hit."""
    s = Scenario.reading(("r", 2), headroom=0)
    a = s.load("r", "a")
    s.load("r", "b")
    c, commands = s.request("r", "c")
    assert commands == []
    d, commands = s.request("r", "v")
    assert commands == []
    (listing,) = s(TimeAdvanced(now=30.0))
    assert isinstance(listing, ReadListing)
    (read,) = s(ListingReceived(listing=listing.listing, adapters=("a", "b", "v")))
    assert isinstance(read, ReadEngine)
    s.expect(ReadingReceived(read=read.read, adapters=("a", "o")))  # another router's o: foreign
    s.expect(Cancelled(ticket=c))
    _, commands = s.request("r", "e")  # it would take a victim: it waits for a fresh reading
    assert commands == [ReadEngine(read=read.read + 1, replica="r")]
    s.expect(Released(ticket=a))
    assert s.machine.statistics().replicas["r"].queued == 1
    assert d == 4

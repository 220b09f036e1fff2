"""The readings of SPEC.md that issue 22 found open or unpinned, each settled by a scenario.

An independent port written from SPEC.md passed every vector while it had to guess these. Each
scenario fails on the other reading, named in its docstring, and becomes a hand vector
(vectors/generate.py). Test names start with the rule they belong to, which the generator reads;
``RULES`` adds the other rules a scenario turns on.
"""

from __future__ import annotations

from lorafleet import (
    AdapterMissing,
    AdapterPinned,
    AdapterUnpinned,
    Cancelled,
    Fail,
    Fault,
    Grant,
    How,
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
    ReadListing,
    Released,
    ReplicaAdded,
    ReplicaFailed,
    ReplicasRemoved,
    TimeAdvanced,
)
from lorafleet._rendezvous import weight as _rendezvous

from scenario import Scenario, landed, loads

RULES = {
    "test_reading_a_release_of_an_adapter_the_engine_reports_running_admits_no_queue": ["cap", "release"],
    "test_refuse_spares_a_replica_that_holds_the_adapter_but_not_one_that_loads_it": ["hit", "route"],
    "test_cancel_of_the_last_waiter_keeps_a_pins_load_not_yet_issued": ["pin", "unload-outcome"],
    "test_cancel_keeps_a_pinned_adapters_load_a_request_started": ["pin", "unload-outcome"],
    "test_replicas_a_lease_ends_on_the_replica_record_it_was_counted_on": ["release", "listing", "forget"],
    "test_pin_chooses_as_place_does_step_2_without_its_bound_on_busy_replicas": ["place", "load"],
    "test_pin_stops_where_the_least_cold_choice_is_over_the_limit": ["place"],
    "test_pin_stops_where_the_least_cold_choice_is_at_its_cap": ["place", "cap"],
    "test_load_landing_with_no_waiter_is_stamped_idle_when_it_lands": ["cancel", "place", "evict"],
    "test_pin_made_good_when_time_passes_a_holders_failure": ["health", "time"],
    "test_pin_made_good_when_its_holder_is_removed": ["replicas"],
    "test_pin_made_good_when_a_holders_listing_fails": ["listing", "health"],
    "test_cap_a_replica_added_again_admits_its_queue_whatever_its_limit": ["replicas", "listing"],
    "test_cap_a_queue_is_admitted_when_an_adapter_goes_missing": ["forget"],
    "test_place_breaks_a_tie_in_busy_by_served_before_the_weight": [],
    "test_place_stays_with_a_busy_holder_unless_another_queue_is_shorter_by_two": ["load"],
    "test_refuse_lasts_refusal_seconds": ["time"],
    "test_pin_an_unpin_abandons_a_pins_load_not_yet_issued_and_admits_the_queue": ["cancel", "cap"],
}


def held(s: Scenario, replica: str) -> dict[str, int]:
    return dict(s.machine.statistics().replicas[replica].held)


def in_flight(s: Scenario, replica: str) -> int:
    return s.machine.statistics().replicas[replica].in_flight


def favouring(first: str, second: str) -> str:
    """An adapter name whose rendezvous weight is higher on ``first`` than on ``second``."""
    return next(
        name for name in (f"a{i}" for i in range(100)) if _rendezvous(name, first) > _rendezvous(name, second)
    )


# -- (1) a release of an adapter the last reading names ([reading], [release], [cap]) -----------


def test_reading_a_release_of_an_adapter_the_engine_reports_running_admits_no_queue() -> None:
    """Issue 22 (1). An adapter the last reading names stays out of ``idle`` when its last lease here
    ends, so no room came: the queue is not admitted (a read is started instead, while requests wait
    at the cap). Misreading: the release admits the queue, and the queued request for ``d``, which
    the replica now holds, is granted a hit before the next reading."""
    s = Scenario.reading(("r", 2), headroom=0)
    a = s.load("r", "a")
    s.load("r", "x")
    c, commands = s.request("r", "c")
    assert commands == []  # at the cap (2 in use, 2 + 0): it waits
    d, commands = s.request("r", "d")
    assert commands == []
    # The engine lists d (another router loaded it) and runs a and another router's o.
    s.list_and_read(30.0, "r", ["a", "x", "d"], ["a", "o"])
    assert s.machine.statistics().replicas["r"].queued == 2  # c heads the queue, still at the cap
    s.expect(Cancelled(ticket=c))  # a cancel in a queue admits nothing
    (read,) = s(Released(ticket=a))
    assert isinstance(read, ReadEngine)
    assert held(s, "r") == {"a": 0, "x": 1, "d": 0}
    assert s.machine.statistics().replicas["r"].queued == 1  # d still waits
    # The reading that no longer names a frees it: now the queue is admitted.
    assert s.answer_read("r", []) == [Grant(ticket=d, how=How.HIT)]


# -- (2) a refusal against a replica that holds the adapter ([refuse], [hit]) ---------------------


def test_refuse_spares_a_replica_that_holds_the_adapter_but_not_one_that_loads_it() -> None:
    """Issue 22 (2). A refusal fails at once a request on a replica that does not hold the adapter,
    one loading it included (the request does not join the load); on a replica that holds it the
    request is a hit. Misreadings: a refusal fails every request (§3.1 read alone), or a load in
    flight counts as holding."""
    s = Scenario.with_replicas(("r", 2), ("q", 2), ("p", 2))
    bad, commands = s.request("r", "bad")
    (load_r,) = loads(commands)
    early, commands = s.request("p", "bad")
    (load_p,) = loads(commands)
    s.expect(
        LoadFinished(load=load_r.load, outcome=LoadOutcome.ADAPTER_FAULT, message="rank too high"),
        Fail(ticket=bad, fault=Fault.ADAPTER, message="rank too high"),
    )
    # q's engine has it (another router loaded it there): its listing names it.
    listings = {c.replica: c.listing for c in s(TimeAdvanced(now=30.0)) if isinstance(c, ReadListing)}
    s.expect(ListingReceived(listing=listings["q"], adapters=("bad",)))
    s.expect(ListingReceived(listing=listings["r"], adapters=()))
    s.expect(ListingReceived(listing=listings["p"], adapters=()))
    t, _ = s.request("q", "bad")
    assert s.steps[-1].commands == [Grant(ticket=t, how=How.HIT)]
    t, _ = s.request("p", "bad")  # p is loading it: refused all the same, no join
    assert s.steps[-1].commands == [Fail(ticket=t, fault=Fault.ADAPTER, message="rank too high")]
    t, _ = s.request("r", "bad")
    assert s.steps[-1].commands == [Fail(ticket=t, fault=Fault.ADAPTER, message="rank too high")]
    assert s.machine.hit(s.machine.next_ticket, replica="q", adapter="bad") is True
    # A routed request goes to the holder, and is a hit there.
    ticket = s.machine.next_ticket
    assert s.machine.route(ticket, adapter="bad", path="/adapters/bad", exclude=["p"])[1:] == [
        Grant(ticket=ticket, how=How.HIT)
    ]
    # p's load lands after all: its starter is granted, and p holds it from then on.
    s.expect(landed(load_p), Grant(ticket=early, how=How.LOADED))
    s.ticket = s.machine.next_ticket - 1
    s.hit("p", "bad")


# -- (3) the last waiter of a pin's load leaves before the load goes out ([cancel], [pin]) --------


def test_cancel_of_the_last_waiter_of_a_pins_load_leaves_it_going() -> None:
    """Issue 22 (3), as the engine's memory has it (§3.16). A pin's load goes out at once, taking x's
    room; a request that joins it and is then cancelled leaves it going on, and it lands pinned (not
    idle), x unloaded. Misreading: the cancel abandons the load, or the pin's copy lands idle."""
    s = Scenario.with_replicas(("r", 1), headroom=0)
    s.expect(Released(ticket=s.load("r", "x")))
    s.expect(
        AdapterPinned(adapter="p", path="/adapters/p", copies=1, model=None),
        IssueLoad(load=3, replica="r", adapter="p", path="/adapters/p"),
    )
    assert s.machine.statistics().replicas["r"].unloading == ("x",)
    t, commands = s.request("r", "p")
    assert commands == []  # joins the pin's load
    s.expect(Cancelled(ticket=t))
    assert s.machine.statistics().replicas["r"].loading == ("p",)
    s.expect(
        landed(IssueLoad(load=3, replica="r", adapter="p", path="/adapters/p")),
        IssueUnload(unload=4, replica="r", adapter="x"),
    )
    assert held(s, "r") == {"p": 0}
    assert s.machine.place("z") == Placement(replica="r", placed=Placed.WAIT)  # p is no victim


def test_cancel_leaves_a_pinned_adapters_load_a_request_started_going() -> None:
    """Issue 22 (3). A request for p on r1, beyond the pin's one copy on r0, starts a load there (x its
    victim) and is cancelled: the load goes on, as every issued load does, and lands as the pin's
    copies are held, never idle."""
    s = Scenario.with_replicas(("r0", 1), ("r1", 1), headroom=0)
    s.expect(
        AdapterPinned(adapter="p", path="/adapters/p", copies=1, model=None),
        IssueLoad(load=3, replica="r0", adapter="p", path="/adapters/p"),
    )
    s.expect(LoadFinished(load=3, outcome=LoadOutcome.LOADED))
    s.expect(Released(ticket=s.load("r1", "x")))
    t, commands = s.request("r1", "p")
    assert commands == [IssueLoad(load=5, replica="r1", adapter="p", path="/adapters/p")]
    s.expect(Cancelled(ticket=t))
    assert s.machine.statistics().replicas["r1"].loading == ("p",)
    s.expect(
        LoadFinished(load=5, outcome=LoadOutcome.LOADED), IssueUnload(unload=6, replica="r1", adapter="x")
    )
    assert s.machine.place("z", exclude={"r0"}) == Placement(replica="r1", placed=Placed.WAIT)


# -- (4) in_flight across a forgotten replica ([replicas], [release]) ----------------------------


def test_replicas_a_lease_ends_on_the_replica_record_it_was_counted_on() -> None:
    """Issue 22 (4). A lease on an entry dropped before its replica was removed does not keep the
    replica: it is forgotten, and adding the id again makes a new replica. Releasing the lease then
    ends it on the forgotten one, and the new replica's ``in_flight`` does not move. A replica kept
    for a lease and added back is the same replica: its ``in_flight`` counts the lease until it ends.
    Misreading: ``in_flight`` is kept by replica id, and the new replica goes to -1."""
    s = Scenario.with_replicas(("r", 2), ("k", 2))
    gone = s.load("r", "a")
    s.expect(AdapterMissing(replica="r", adapter="a", ticket=None))
    kept = s.load("k", "b")
    s.expect(ReplicasRemoved(replicas=("r", "k")))
    stats = s.machine.statistics()
    assert (stats.replicas, stats.leases) == ({}, 2)
    s.expect(ReplicaAdded(replica="r", model="base", limit=2), ReadListing(listing=5, replica="r"))
    s.expect(ListingReceived(listing=5, adapters=()), MarkMet(replica="r"))
    s.expect(ReplicaAdded(replica="k", model="base", limit=2), ReadListing(listing=6, replica="k"))
    s.expect(ListingReceived(listing=6, adapters=()), MarkMet(replica="k"))  # drops b, in use or not
    assert (in_flight(s, "r"), in_flight(s, "k")) == (0, 1)
    s.expect(Released(ticket=gone))
    s.expect(Released(ticket=kept))
    assert (in_flight(s, "r"), in_flight(s, "k")) == (0, 0)
    assert s.machine.statistics().leases == 0


# -- (5) where a pin goes: [place]'s step 2, without its bound on busy replicas ------------------


def test_pin_chooses_as_place_does_step_2_without_its_bound_on_busy_replicas() -> None:
    """Issue 22 (5). A pin's copy goes where [place] would put a cold load by its key (kind, victim
    weight, idle stamp, busy, served, weight), among every candidate that neither holds nor loads
    the adapter: step 2's bound on busy replicas does not apply, and no caller's load is added.
    Misreading: the pin asks ``place`` itself, and goes to r1 to evict, past r0's free slot."""
    s = Scenario.with_replicas(("r0", 4), ("r1", 1), concurrency=4)
    s.load("r0", "h")
    s.hit("r0", "h")
    s.hit("r0", "h")  # 3 in flight: at 3/4 of 4, no cold load for place's step 2
    s.expect(Released(ticket=s.load("r1", "x")))
    assert s.machine.place("p") == Placement(replica="r1", placed=Placed.EVICT)
    s.expect(
        AdapterPinned(adapter="p", path="/adapters/p", copies=1, model=None),
        IssueLoad(load=5, replica="r0", adapter="p", path="/adapters/p"),
    )


def test_pin_stops_where_the_least_cold_choice_is_over_the_limit() -> None:
    """Issue 22 (5). The pin takes the least key, and loads only when that one is a free slot or an
    eviction: a replica whose adapters are all in use, within ``overflow``, comes before one that
    would evict, so the pin waits. Misreading: the pin takes the best replica that would load free
    or evict, here r1."""
    s = Scenario.with_replicas(("r0", 1), ("r1", 1))
    s.load("r0", "a")
    s.expect(Released(ticket=s.load("r1", "x")))
    assert s.machine.place("p") == Placement(replica="r0", placed=Placed.OVER)
    s.expect(AdapterPinned(adapter="p", path="/adapters/p", copies=1, model=None))
    assert s.machine.statistics().replicas["r1"].loading == ()


def test_pin_stops_where_the_least_cold_choice_is_at_its_cap() -> None:
    """Issue 22 (5). With a cap, a replica at it has the last kind (``wait``): chosen only when every
    candidate is at its cap, and then the pin waits. While both replicas are at their cap no pin load
    goes out; once r1 has an idle adapter, the next event that makes pins good evicts it there, and
    r0, still at its cap, gets no second copy. Misreading: the pin queues at a replica at its cap."""
    s = Scenario.with_replicas(("r0", 1), ("r1", 1), headroom=0)
    s.load("r0", "a")
    x = s.load("r1", "x")
    s.expect(AdapterPinned(adapter="p", path="/adapters/p", copies=2, model=None))
    s.expect(Released(ticket=x))
    s.expect(
        TimeAdvanced(now=1.0),
        IssueLoad(load=5, replica="r1", adapter="p", path="/adapters/p"),
    )
    assert s.machine.statistics().replicas["r1"].unloading == ("x",)


# -- (6) the idle stamp of a load that lands with no waiter ([load-outcome], [place]) -------------


def test_load_landing_with_no_waiter_is_stamped_idle_when_it_lands() -> None:
    """Issue 22 (6). A load whose requests were all cancelled lands with ``in_use`` 0 and enters
    ``idle`` at its end with the tick taken as it lands (its ``since``). Here it lands after y was
    released, so y has been idle longer: [place] evicts y. Misreading: the stamp of when the load
    started, or 0 (a listing's), and x goes first."""
    s = Scenario.with_replicas(("r0", 1), ("r1", 1))
    t, commands = s.request("r0", "x")
    (load,) = loads(commands)
    s.expect(Cancelled(ticket=t))
    s.expect(Released(ticket=s.load("r1", "y")))
    s.expect(landed(load))  # no waiter: no grant, and x is idle
    assert s.machine.place("z") == Placement(replica="r1", placed=Placed.EVICT)


# -- pins made good after time, a removal, a failed listing ([pin]) -----------------------------


def test_pin_made_good_when_time_passes_a_holders_failure() -> None:
    """[pin] A holder that is avoided does not count as a copy: the next ``time_advanced`` loads one
    elsewhere; the avoided holder keeps its copy. Misreading: pins are made good only on a pin or a
    listing, or an avoided holder still counts."""
    s = Scenario.with_replicas(("r0", 2), ("r1", 2))
    (load,) = loads(s(AdapterPinned(adapter="p", path="/adapters/p", copies=1, model=None)))
    s.expect(landed(load))
    home, other = load.replica, ({"r0", "r1"} - {load.replica}).pop()
    s.expect(ReplicaFailed(replica=home, message="connection refused"))
    s.expect(TimeAdvanced(now=1.0), IssueLoad(load=4, replica=other, adapter="p", path="/adapters/p"))
    assert "p" in held(s, home)


def test_pin_made_good_when_its_holder_is_removed() -> None:
    """[pin] Removing the replica that holds the pin's copy loads one elsewhere, in the same event."""
    s = Scenario.with_replicas(("r0", 2), ("r1", 2))
    (load,) = loads(s(AdapterPinned(adapter="p", path="/adapters/p", copies=1, model=None)))
    s.expect(landed(load))
    other = ({"r0", "r1"} - {load.replica}).pop()
    s.expect(
        ReplicasRemoved(replicas=(load.replica,)),
        IssueLoad(load=4, replica=other, adapter="p", path="/adapters/p"),
    )


def test_pin_made_good_when_a_holders_listing_fails() -> None:
    """[pin] A failed listing makes the holder avoided ([health]): a copy is loaded elsewhere at once."""
    s = Scenario.with_replicas(("r0", 2), ("r1", 2))
    (load,) = loads(s(AdapterPinned(adapter="p", path="/adapters/p", copies=1, model=None)))
    s.expect(landed(load))
    other = ({"r0", "r1"} - {load.replica}).pop()
    listings = {c.replica: c.listing for c in s(TimeAdvanced(now=30.0)) if isinstance(c, ReadListing)}
    s.expect(
        ListingFailed(listing=listings[load.replica], message="timed out"),
        IssueLoad(load=6, replica=other, adapter="p", path="/adapters/p"),
    )


# -- queue admission on a re-add, and after an adapter goes missing ([cap]) ----------------------


def test_cap_a_replica_added_again_admits_its_queue_whatever_its_limit() -> None:
    """[cap], [replicas] ``replica_added`` for a replica in use sets its limit and admits its queue,
    even when the limit is the same. Here the queue's head was cancelled, leaving a request for an
    adapter a listing brought in since: it is granted a hit. Misreading: only a new limit admits."""
    s = Scenario.with_replicas(("r", 1), headroom=0)
    s.load("r", "a")
    c, _ = s.request("r", "c")
    d, _ = s.request("r", "d")
    (listing,) = s(TimeAdvanced(now=30.0))
    assert isinstance(listing, ReadListing)
    s.expect(ListingReceived(listing=listing.listing, adapters=("a", "d")))  # c heads, at the cap
    s.expect(Cancelled(ticket=c))
    s.expect(ReplicaAdded(replica="r", model="base", limit=1), Grant(ticket=d, how=How.HIT))
    e, _ = s.request("r", "e")
    (load,) = loads(s(ReplicaAdded(replica="r", model="base", limit=3)))  # room now: e loads
    assert (load.adapter, s.machine.statistics().replicas["r"].queued) == ("e", 0)
    assert e == s.ticket


def test_cap_a_queue_is_admitted_when_an_adapter_goes_missing() -> None:
    """[cap], [forget] An adapter the engine says it lacks is dropped, in use or not: its slot is room,
    and the queue is admitted at once. Misreading: only a release or a listing admits."""
    s = Scenario.with_replicas(("r", 1), headroom=0)
    a = s.load("r", "a")
    b, commands = s.request("r", "b")
    assert commands == []
    s.expect(
        AdapterMissing(replica="r", adapter="a", ticket=a),
        IssueLoad(load=3, replica="r", adapter="b", path="/adapters/b"),
    )
    assert b == s.ticket


# -- [place]: served breaks a tie in busy; a busy holder keeps its requests ----------------------


def test_place_breaks_a_tie_in_busy_by_served_before_the_weight() -> None:
    """[place] Two replicas equally busy and equally placed: the one that has served fewer requests,
    though the weight favours the other. Misreading: the weight right after busy."""
    s = Scenario.with_replicas(("r0", 4), ("r1", 4))
    s.expect(Released(ticket=s.load("r0", "a")))
    name = favouring("r0", "r1")
    assert s.machine.place(name) == Placement(replica="r1", placed=Placed.FREE)
    # Holders too: both hold ``both``, neither is busy, and r0 has served fewer (2 to 3).
    both = favouring("r1", "r0")
    s.expect(Released(ticket=s.load("r1", "b")))
    s.expect(Released(ticket=s.load("r1", "c")))
    s.expect(Released(ticket=s.load("r0", both)))
    s.expect(Released(ticket=s.load("r1", both)))
    assert s.machine.place(both) == Placement(replica="r0", placed=Placed.HELD)


def test_place_stays_with_a_busy_holder_unless_another_engine_has_no_queue() -> None:
    """[place] step 3: with the holder saturated and no replica under three quarters of its
    capacity, the request stays with the holder unless another engine has no queue while the
    holder's is at least 2 long: a copy on an engine that queues stalls its queue. Misreading:
    spill to any queue shorter by 2, or to any shorter queue, or never."""
    s = Scenario.with_replicas(("r0", 4), ("r1", 4), concurrency=1)
    s.load("r0", "h")
    s.hit("r0", "h")  # busy 2, queue 1
    o = s.load("r1", "o")  # busy 1: not under max(1, 3/4) for step 2; queue 0
    assert s.machine.place("h") == Placement(replica="r0", placed=Placed.HELD)
    s.hit("r0", "h")  # queue 2, and r1's is 0
    assert s.machine.place("h") == Placement(replica="r1", placed=Placed.FREE)
    s.hit("r1", "o")
    s.hit("r0", "h")  # queue 3, and r1's is 1: shorter by 2, but a queue
    assert s.machine.place("h") == Placement(replica="r0", placed=Placed.HELD)
    s.expect(Released(ticket=o))
    assert s.machine.place("h") == Placement(replica="r1", placed=Placed.FREE)


def test_place_step_3_goes_to_the_least_busy_before_the_cheapest_load() -> None:
    """[place] step 3 (no replica under three quarters of its capacity) keys a replica by (at its cap,
    busy, served, -weight): x goes to r1, busy 1, though a load there evicts p, rather than to r0,
    busy 2, which has free slots. Misreading: step 3 keys by the full cold key, kind first (r0)."""
    s = Scenario.with_replicas(("r0", 4), ("r1", 2), concurrency=1)
    s.load("r0", "h")
    s.hit("r0", "h")  # busy 2, 2 of 4 slots free
    s.expect(Released(ticket=s.load("r1", "p")))
    s.load("r1", "o")  # busy 1; p idle, the victim of a load
    assert s.machine.place("x") == Placement(replica="r1", placed=Placed.EVICT)


# -- found open beyond issue 22 ------------------------------------------------------------------


def test_pin_an_unpin_leaves_a_pins_load_going_and_it_lands_idle() -> None:
    """[pin] ``adapter_unpinned`` while a pin's load is out changes nothing then (the load goes on, as
    every issued load does); the load lands idle, most recently used, and the request c queued at the
    cap while it loaded takes it as its victim at once. Misreading: the load lands pinned, and c waits
    for the next listing or release."""
    s = Scenario.with_replicas(("r", 2), headroom=0)
    s.expect(Released(ticket=s.load("r", "x")))
    s.load("r", "a")
    s.expect(
        AdapterPinned(adapter="p", path="/adapters/p", copies=1, model=None),
        IssueLoad(load=4, replica="r", adapter="p", path="/adapters/p"),
    )
    c, commands = s.request("r", "c")
    assert commands == []  # a in use and p loading: at the cap of 2
    s.expect(AdapterUnpinned(adapter="p"))
    s.expect(
        LoadFinished(load=4, outcome=LoadOutcome.LOADED),
        IssueUnload(unload=5, replica="r", adapter="x"),
        IssueLoad(load=6, replica="r", adapter="c", path="/adapters/c"),
    )
    assert c == s.ticket
    assert s.machine.statistics().replicas["r"].unloading == ("p", "x")  # x: its unload is out


# -- settings the search rarely decides with: half_life, refusal ----------------------------------


def test_refuse_lasts_refusal_seconds() -> None:
    """[refuse], ``refusal`` 60: a request 59 s after the refusal fails at once, one at 60 s loads.
    Misreading: ``refusal`` ignored (900)."""
    s = Scenario.with_replicas(("r", 2), refusal=60.0)
    t, commands = s.request("r", "bad")
    s.expect(
        LoadFinished(load=loads(commands)[0].load, outcome=LoadOutcome.ADAPTER_FAULT, message="bad rank"),
        Fail(ticket=t, fault=Fault.ADAPTER, message="bad rank"),
    )
    s(TimeAdvanced(now=59.0))
    t, _ = s.request("r", "bad")
    assert s.steps[-1].commands == [Fail(ticket=t, fault=Fault.ADAPTER, message="bad rank")]
    s(TimeAdvanced(now=60.0))
    _, commands = s.request("r", "bad")
    assert [c.adapter for c in loads(commands)] == ["bad"]


def test_place_over_the_limit_past_overflow_comes_after_an_eviction() -> None:
    """[place], ``overflow`` 0: a replica whose adapters are all in use, already at its line, is of
    kind 3, after one that would evict (kind 2). Misreading: ``overflow`` ignored (2), and r0 is
    taken over its limit."""
    s = Scenario.with_replicas(("r0", 1), ("r1", 1), overflow=0)
    s.load("r0", "a")
    s.expect(Released(ticket=s.load("r1", "x")))
    assert s.machine.place("p") == Placement(replica="r1", placed=Placed.EVICT)

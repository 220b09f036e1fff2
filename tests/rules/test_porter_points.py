"""The seven points SPEC.md left to the porter (issue 37), each answered as the reference does.

An independent port had to guess these; SPEC now says each, and each scenario here is its hand vector
(vectors/generate.py), failing on the other reading, which its docstring names.
"""

from __future__ import annotations

from lorafleet import (
    AdapterPinned,
    Assign,
    Fail,
    Fault,
    Grant,
    How,
    IssueLoad,
    ListingReceived,
    LoadFinished,
    LoadOutcome,
    MarkMet,
    Placed,
    ReadEngine,
    ReadingReceived,
    ReadListing,
    Released,
    ReplicaAdded,
    ReplicasRemoved,
    TimeAdvanced,
)

from .helpers import routed
from .test_spec_points import favouring
from scenario import Scenario, landed, loads

RULES = {
    "test_statistics_waiting_counts_the_requests_waiting_for_a_read": ["read", "route"],
    "test_reading_a_raised_max_loras_admits_the_queue_before_the_settle_and_the_reads_waiters": [
        "cap",
        "settle",
        "read",
    ],
    "test_replicas_removed_clear_a_pending_settle": ["settle"],
    "test_replicas_removed_reset_the_load_figures_and_max_loras": ["load", "cap"],
    "test_replicas_removed_fail_then_place_routed_requests_again_then_make_the_pins_good": ["route", "pin"],
    "test_route_placed_again_after_a_read_looks_at_refusals_again": ["refuse", "read"],
    "test_route_reads_a_replica_id_once_for_a_request_even_once_it_is_a_new_replica": ["read", "replicas"],
}


def listed(s: Scenario, replica: str, limit: int, *names: str) -> list[object]:
    """Add ``replica`` and answer its listing with ``names``: the listing's commands."""
    (listing,) = s(ReplicaAdded(replica=replica, model="base", limit=limit))
    assert isinstance(listing, ReadListing)
    return list(s(ListingReceived(listing=listing.listing, adapters=names)))


def test_statistics_waiting_counts_the_requests_waiting_for_a_read() -> None:
    """Point 1. ``waiting`` counts every waiting ticket, those waiting for a read included (§1.3's
    waiting tickets), a routed one not yet assigned too. Misreading (§3.11 read alone: loads, unloads
    and queues): 0."""
    s = Scenario.configured(read_engine=True)
    assert listed(s, "r", 1, "a") == [MarkMet(replica="r"), ReadEngine(read=2, replica="r")]
    _, commands = s.request("r", "b")  # it would take a victim, and the first read is out: it waits
    assert commands == []
    _, commands = routed(s, "c")
    assert commands == []
    statistics = s.machine.statistics()
    assert (statistics.waiting, statistics.replicas["r"].in_flight) == (2, 1)


def test_reading_a_raised_max_loras_admits_the_queue_before_the_settle_and_the_reads_waiters() -> None:
    """Point 2. A reading that raises ``max_loras`` admits the queue after its own commands and before
    the pending [settle] and the read's waiters: d, queued, loads first and takes a as its victim, so
    the settle finds nothing over the line, and e, waiting for the read, loads past the line.
    Misreadings: the settle first (it unloads a, then d and e load past the line), or the waiters
    first (e takes a, then d)."""
    s = Scenario.reading(("r", 2), headroom=1)
    a = s.load("r", "a")
    s.load("r", "b")
    _, commands = s.request("r", "c")  # a and b in use: it goes past the line, to the cap
    (load_c,) = loads(commands)
    assert commands == [load_c]
    d, commands = s.request("r", "d")
    assert commands == []  # at the cap (3)
    (listing,) = s(TimeAdvanced(now=30.0))
    assert isinstance(listing, ReadListing)
    s.expect(ListingReceived(listing=listing.listing, adapters=("a", "b")), ReadEngine(read=7, replica="r"))
    assert s.answer_read("r", ["o"], max_loras=1) == []  # another router's o: foreign
    s.expect(Released(ticket=a))  # idle, but 2 in use > max_loras 1 past the line: d still waits
    s.expect(landed(load_c), Grant(ticket=3, how=How.LOADED), ReadEngine(read=8, replica="r"))  # [settle]
    e, commands = s.request("r", "e")
    assert commands == []  # waits for that read
    assert s.answer_read("r", [], max_loras=4) == [
        IssueLoad(load=9, replica="r", adapter="d", path="/adapters/d"),
        IssueLoad(load=10, replica="r", adapter="e", path="/adapters/e"),
    ]
    assert s.machine.statistics().replicas["r"].unloading == ("a",)
    assert (d, e) == (4, 5)


def test_replicas_removed_clear_a_pending_settle() -> None:
    """Point 3. A removal clears a pending [settle]: the replica added back and read afresh unloads
    nothing, though it holds one over its line with one idle. Misreading (kept): that reading unloads
    a."""
    s = Scenario.reading(("r", 1), headroom=1)
    a = s.load("r", "a")
    _, commands = s.request("r", "b")
    (load_b,) = loads(commands)
    assert commands == [load_b]
    (listing,) = s(TimeAdvanced(now=30.0))
    assert isinstance(listing, ReadListing)
    s.expect(ListingReceived(listing=listing.listing, adapters=("a",)), ReadEngine(read=6, replica="r"))
    assert s.answer_read("r", ["o"]) == []
    s.expect(Released(ticket=a))
    s.expect(landed(load_b), Grant(ticket=2, how=How.LOADED), ReadEngine(read=7, replica="r"))  # pending
    s.expect(ReplicasRemoved(replicas=("r",)))  # kept: b runs, read 7 is out
    s.expect(ReplicaAdded(replica="r", model="base", limit=1), ReadListing(listing=8, replica="r"))
    s.expect(
        ListingReceived(listing=8, adapters=("a", "b")), MarkMet(replica="r"), ReadEngine(read=9, replica="r")
    )
    assert dict(s.machine.statistics().replicas["r"].held) == {"a": 0, "b": 1}
    assert s.answer_read("r", []) == []


def test_replicas_removed_reset_the_load_figures_and_max_loras() -> None:
    """Point 4. A removal resets every figure of [load] (``sampled``, ``others``, ``read_served``,
    ``seqs``, ``ran``, ``calm``) and ``max_loras`` to their first values: the replica added back
    reads as never read, and a reading that then shows 2 running with a queue gives a capacity of 2,
    not the 5 an earlier reading showed running. Misreadings: ``max_loras`` kept (3), or ``ran`` kept
    (capacity 5)."""
    s = Scenario.reading(("r", 2))
    s.load("r", "a")
    (listing,) = s(TimeAdvanced(now=30.0))
    assert isinstance(listing, ReadListing)
    s.expect(ListingReceived(listing=listing.listing, adapters=("a",)), ReadEngine(read=5, replica="r"))
    assert s.answer_read("r", ["a"], running=5, waiting=1, max_loras=3) == []
    before = s.machine.reading("r")
    assert before is not None
    assert (before.others, before.capacity, before.max_loras) == (5, 5, 3)
    s.expect(ReplicasRemoved(replicas=("r",)))  # kept: a runs
    assert s.machine.reading("r") is None
    s.expect(ReplicaAdded(replica="r", model="base", limit=2), ReadListing(listing=6, replica="r"))
    after = s.machine.reading("r")
    assert after is not None
    assert (after.running, after.waiting, after.others, after.capacity, after.max_loras) == (
        None,
        None,
        0,
        None,
        None,
    )
    s.expect(
        ListingReceived(listing=6, adapters=("a",)), MarkMet(replica="r"), ReadEngine(read=7, replica="r")
    )
    assert s.answer_read("r", ["a"], running=2, waiting=1) == []
    again = s.machine.reading("r")
    assert again is not None
    assert (again.capacity, again.max_loras) == (2, None)


def test_replicas_removed_fail_then_place_routed_requests_again_then_make_the_pins_good() -> None:
    """Point 5. At the end of ``replicas_removed``: the fails, then the routed requests set aside are
    placed again, then the pins are made good. Misreading (the pins first): x's load goes out before
    y is assigned."""
    s = Scenario.configured(read_engine=True)
    listed(s, "r", 1, "x")
    s.expect(AdapterPinned(adapter="x", path="/adapters/x", copies=1, model=None))
    y, commands = routed(s, "y")  # r is full (x pinned): y waits for r's first read
    assert commands == []
    z, commands = s.request("r", "z")
    assert commands == []  # so does z
    assert listed(s, "q", 2) == [MarkMet(replica="q"), ReadEngine(read=4, replica="q")]
    s.expect(
        ReplicasRemoved(replicas=("r",)),
        Fail(ticket=z, fault=Fault.REPLICA, message="the replica was removed while the request waited"),
        Assign(ticket=y, replica="q", placed=Placed.FREE),
        IssueLoad(load=5, replica="q", adapter="y", path="/adapters/y"),
        IssueLoad(load=6, replica="q", adapter="x", path="/adapters/x"),
    )


def test_route_placed_again_after_a_read_looks_at_refusals_again() -> None:
    """Point 6. A routed request placed again once its read is answered goes through [route]'s steps
    again, step 2 included: the adapter refused meanwhile fails it at once. Misreading (§3.1's
    "admitted afresh does not look at refusals"): it is assigned and loads."""
    s = Scenario.configured(read_engine=True)
    listed(s, "r", 1, "a")
    y, commands = routed(s, "y")  # r would evict, its first read is out: y waits
    assert commands == []
    listed(s, "q", 1)
    t, commands = s.request("q", "y")
    (load,) = loads(commands)
    assert commands == [load]
    s.expect(
        LoadFinished(load=load.load, outcome=LoadOutcome.ADAPTER_FAULT, message="rank too high"),
        Fail(ticket=t, fault=Fault.ADAPTER, message="rank too high"),
    )
    assert s.answer_read("r", []) == [Fail(ticket=y, fault=Fault.ADAPTER, message="rank too high")]


def test_route_reads_a_replica_id_once_for_a_request_even_once_it_is_a_new_replica() -> None:
    """Point 7. A placement record's ``read`` holds replica ids: r, read for the request, removed,
    forgotten and added again as a new replica, is not read again for it, and the request goes there
    at once. Misreading (replica records): it waits for the new r's first read."""
    s = Scenario.configured(read_engine=True)
    listed(s, "r", 1, "a")
    name = favouring("r", "q")
    t, commands = routed(s, name)
    assert commands == []  # waits for r's first read (2)
    assert listed(s, "q", 1, "b") == [MarkMet(replica="q"), ReadEngine(read=4, replica="q")]
    s.expect(ReplicasRemoved(replicas=("r",)))  # placed again: q would evict too, and waits for read 4
    s.expect(ReadingReceived(read=2, adapters=()))  # the abandoned read: r is forgotten
    assert "r" not in s.machine.statistics().replicas
    assert listed(s, "r", 1, "a") == [MarkMet(replica="r"), ReadEngine(read=6, replica="r")]
    assert s.answer_read("q", []) == [
        Assign(ticket=t, replica="r", placed=Placed.EVICT),
        IssueLoad(load=7, replica="r", adapter=name, path=f"/adapters/{name}"),
    ]

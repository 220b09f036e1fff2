"""[load] and [place] (SPEC.md §3.12): how busy an engine is, and where a request for an adapter should
go."""

from __future__ import annotations

from typing import Any

import pytest

from lorafleet import (
    AdapterPinned,
    AdapterStateMachine,
    Assign,
    Command,
    InvalidValueError,
    IssueLoad,
    ListingReceived,
    LoadFinished,
    LoadOutcome,
    MarkMet,
    Placed,
    Placement,
    ReadListing,
    Released,
    ReplicaAdded,
    ReplicaFailed,
    ReplicasRemoved,
    Routed,
    TicketOrderError,
)
from lorafleet._rendezvous import weight as _rendezvous

from .helpers import held, read_each, ties_go_by_weight
from scenario import Scenario, loads

# -- [load] ----------------------------------------------------------------------------------------


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
    A holder loaded to that is saturated (a request more would wait in its queue): placement spills
    past it, and ``place_hit`` passes it by."""
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
    assert s.machine.place("a") == Placement(replica="r1", placed=Placed.FREE)  # 3 others: every slot
    read_each(s, 90.0, r0={"adapters": ["a"], "running": 2, "waiting": 0})
    assert s.machine.place("a") == Placement(replica="r0", placed=Placed.HELD)  # 2 others: one is free


def test_load_a_reading_never_lowers_what_an_engine_was_seen_to_run_at_once() -> None:
    """[load] A reading may fall between two steps of the engine: one that shows fewer running, with
    requests waiting, leaves the capacity at the most an earlier reading showed running."""
    s = Scenario.reading(("r0", 2), ("r1", 2))
    s.load("r0", "a")
    read_each(s, 30.0, r0={"adapters": ["a"], "running": 4, "waiting": 1})  # full at four
    read_each(s, 60.0, r0={"adapters": ["a"], "running": 2, "waiting": 1})  # between two steps
    reading = s.machine.reading("r0")
    assert reading is not None
    assert reading.capacity == 4
    assert s.machine.place("a") == Placement(replica="r0", placed=Placed.HELD)  # 1 + 2 others: 3 of 4


def test_load_the_concurrency_setting_overrides_what_readings_show() -> None:
    """[load] With ``concurrency`` set, an engine runs that many at once, whatever a reading showed."""
    s = Scenario.reading(("r0", 2), ("r1", 2), concurrency=4)
    s.load("r0", "a")
    read_each(s, 30.0, r0={"adapters": ["a"], "running": 2, "waiting": 1})  # full at two, it says
    assert s.machine.place("a") == Placement(replica="r0", placed=Placed.HELD)  # 1 + 2 others: 3 of 4
    read_each(s, 60.0, r0={"adapters": ["a"], "running": 4, "waiting": 1})
    assert s.machine.place("a") == Placement(replica="r1", placed=Placed.FREE)  # 1 + 4 others: 5 of 4


# -- [place] ---------------------------------------------------------------------------------------


def test_place_prefers_the_least_busy_holder_then_a_free_slot() -> None:
    s = Scenario.with_replicas(("r0", 2), ("r1", 2), ("r2", 2))
    busy = s.load("r0", "a")
    s.load("r1", "a")
    s.hit("r1", "a")
    assert s.machine.place("a") == Placement(replica="r0", placed=Placed.HELD)
    s.expect(Released(ticket=busy))
    s.request("r2", "a")  # loading there, and nothing else runs on it
    assert s.machine.place("a") == Placement(replica="r0", placed=Placed.HELD)
    assert s.machine.place("a", exclude={"r0"}) == Placement(replica="r2", placed=Placed.LOADING)
    # Nobody holds b: a free slot, the least busy replica first.
    assert s.machine.place("b") == Placement(replica="r0", placed=Placed.FREE)


def test_place_a_cold_load_where_the_least_recently_used_idle_adapter_is_oldest() -> None:
    s = Scenario.with_replicas(("r0", 1), ("r1", 1))
    s.expect(Released(ticket=s.load("r0", "a")))
    s.expect(Released(ticket=s.load("r1", "b")))
    # Both are full; r0's idle adapter became idle first, so it goes.
    assert s.machine.place("c") == Placement(replica="r0", placed=Placed.EVICT)
    s.expect(Released(ticket=s.hit("r0", "a")))
    assert s.machine.place("c") == Placement(replica="r1", placed=Placed.EVICT)


def test_place_a_cold_load_where_the_victim_is_in_least_demand_before_the_oldest() -> None:
    """[place] Replicas that would evict compare their victims' demand weights first, then how long
    each has been idle: an adapter asked for often, idle longer, is spared for one asked for once."""
    s = Scenario.with_replicas(("r0", 1), ("r1", 1))
    s.expect(Released(ticket=s.load("r0", "a")))
    for _ in range(3):
        s.expect(Released(ticket=s.hit("r0", "a")))  # a: 4 requests, weight 3
    s.expect(Released(ticket=s.load("r1", "b")))  # b: 1 request, weight 1, idle since later
    assert s.machine.place("c") == Placement(replica="r1", placed=Placed.EVICT)


def test_place_a_cold_load_on_the_least_busy_before_the_victim_in_least_demand() -> None:
    """[place] Among replicas that would evict, the least busy comes first: the load and its request
    wait out that engine's queue. The victims' demand only chooses among replicas as busy."""
    s = Scenario.with_replicas(("r0", 2), ("r1", 2))
    s.expect(Released(ticket=s.load("r0", "a")))  # a: 1 request, r0's victim
    s.load("r0", "c")
    s.hit("r0", "c")  # two requests run on r0
    s.expect(Released(ticket=s.load("r1", "d")))
    for _ in range(3):
        s.expect(Released(ticket=s.hit("r1", "d")))  # d: 4 requests, r1's victim
    s.expect(Released(ticket=s.load("r1", "b")))
    assert s.machine.place("x") == Placement(replica="r1", placed=Placed.EVICT)
    assert s.machine.place("x", load={"r1": 2}) == Placement(replica="r0", placed=Placed.EVICT)


def test_place_over_the_limit_only_where_every_adapter_is_in_use() -> None:
    s = Scenario.with_replicas(("r0", 1), ("r1", 1))
    s.load("r0", "a")
    s.load("r1", "b")
    s.hit("r1", "b")
    assert s.machine.place("c") == Placement(replica="r0", placed=Placed.OVER)
    assert s.machine.place("c", load={"r0": 5.0}) == Placement(replica="r1", placed=Placed.OVER)
    assert s.machine.place("c", exclude={"r0", "r1"}) == Placement(replica=None, placed=None)


def test_place_breaks_ties_by_rendezvous_hash_the_same_way_every_time() -> None:
    s = Scenario.with_replicas(*((f"r{i}", 2) for i in range(8)))
    chosen = {name: s.machine.place(name).replica for name in ("a", "b", "c", "d", "e", "f")}
    assert len(set(chosen.values())) > 1  # different adapters spread over different replicas
    again = Scenario.with_replicas(*((f"r{i}", 2) for i in reversed(range(8))))
    assert {name: again.machine.place(name).replica for name in chosen} == chosen


def test_place_spills_past_a_busy_holder_and_prefers_over_the_limit_to_evicting() -> None:
    s = Scenario.configured(concurrency=4)  # busy at 5 in flight; no cold load past 3 in flight
    for replica in ("r0", "r1", "r2"):
        (listing,) = s(ReplicaAdded(replica=replica, model="base", limit=1))
        assert isinstance(listing, ReadListing)
        s.expect(ListingReceived(listing=listing.listing, adapters=()), MarkMet(replica=replica))
    tickets = [s.load("r0", "hot")] + [s.hit("r0", "hot") for _ in range(4)]
    assert s.machine.place("hot").placed is Placed.FREE  # five in flight on the holder: spill
    for ticket in tickets:
        s.expect(Released(ticket=ticket))
    assert s.machine.place("hot") == Placement(replica="r0", placed=Placed.HELD)
    s.load("r1", "b")
    s.expect(Released(ticket=s.load("r2", "c")))
    # r1's one adapter is in use: a load there evicts nothing; r0 and r2 would have to evict.
    assert s.machine.place("d") == Placement(replica="r1", placed=Placed.OVER)


def test_place_hit_grants_a_hit_where_place_would_and_changes_nothing_otherwise() -> None:
    s = Scenario.with_replicas(("r0", 2), ("r1", 2), ("r2", 2))
    s.expect(ReplicaAdded(replica="q", model="other", limit=2), ReadListing(listing=4, replica="q"))
    for replica in ("r0", "r1"):
        s.expect(Released(ticket=s.load(replica, "a")))
    tied = s.machine.place("a").replica  # both idle: the rendezvous weight decides
    s.ticket += 1
    assert s.machine.place_hit(s.ticket, adapter="a") == tied
    assert held(s, tied) == {"a": 1}  # type: ignore[arg-type]
    # The least busy holder is now the other one.
    other = s.machine.place("a").replica
    assert other != tied
    s.ticket += 1
    assert s.machine.place_hit(s.ticket, adapter="a") == other
    assert s.machine.statistics().grants["hit"] == 2
    assert s.machine.statistics().replicas[other].in_flight == 1  # type: ignore[index]
    s.expect(Released(ticket=s.ticket))
    s.machine.check_invariants()
    # Loading only, held only by a replica of another model, or nowhere: nothing changes.
    s.request("r2", "b")
    before = s.machine.statistics()
    assert s.machine.place("b") == Placement(replica="r2", placed=Placed.LOADING)
    assert s.machine.place_hit(s.ticket + 1, adapter="b") is None
    assert s.machine.place_hit(s.ticket + 1, adapter="a", model="other") is None
    assert s.machine.place_hit(s.ticket + 1, adapter="z") is None
    assert s.machine.statistics() == before
    assert s.machine.next_ticket == s.ticket + 1
    # A failing holder is avoided, as place avoids it.
    s.expect(ReplicaFailed(replica=other))  # type: ignore[arg-type]
    assert s.machine.place_hit(s.ticket + 1, adapter="a") == tied
    # Misuse, as hit and place would refuse it.
    with pytest.raises(TicketOrderError):
        s.machine.place_hit(s.ticket, adapter="a")
    with pytest.raises(InvalidValueError):
        s.machine.place_hit(s.ticket + 5, adapter="")
    s.machine.check_invariants()


class Searches:
    """Counts the machine's holder searches ([place]'s first choice)."""

    def __init__(self, machine: AdapterStateMachine) -> None:
        self.count = 0
        search = machine._holder

        def counted(*args: Any) -> Any:
            self.count += 1
            return search(*args)

        machine._holder = counted  # type: ignore[method-assign,assignment]


def routed(s: Scenario, adapter: str, now: float | None = None) -> list[Command]:
    return s(Routed(ticket=s.ticket, adapter=adapter, path=f"/adapters/{adapter}", now=now))


def test_place_routed_after_place_hit_searches_for_holders_once() -> None:
    """[route] A request ``place_hit`` leaves to ``Routed`` is placed from the holder search
    ``place_hit`` made: once per request, and where a fresh search would have put it."""
    s = Scenario.with_replicas(("r0", 2), ("r1", 2), concurrency=1)
    t = s.load("r0", "a")
    s.hit("r0", "a")  # a's one holder is past its concurrency: placement spills past it
    twin = Scenario.with_replicas(("r0", 2), ("r1", 2), concurrency=1)
    twin.load("r0", "a")
    twin.hit("r0", "a")
    searches = Searches(s.machine)
    s.ticket += 1
    twin.ticket += 1
    assert s.machine.place_hit(s.ticket, adapter="a") is None
    commands = routed(s, "a")
    assert searches.count == 1
    assert commands == routed(twin, "a")
    assert commands[0] == Assign(ticket=s.ticket, replica="r1", placed=Placed.FREE)
    # With no holder anywhere, too.
    s.expect(Released(ticket=t))
    searches.count = 0
    s.ticket += 1
    assert s.machine.place_hit(s.ticket, adapter="z") is None
    routed(s, "z")
    assert searches.count == 1


def test_place_routed_searches_again_where_something_moved_after_place_hit() -> None:
    """[route] ``place_hit``'s search is stale after any other event, and where the clock the request
    brings ends a holder's backoff: the request is placed on the holder then."""
    s = Scenario.with_replicas(("r0", 2), ("r1", 2), ("r2", 2), concurrency=1)
    s.expect(Released(ticket=s.load("r0", "a")))
    first = [s.hit("r0", "a"), s.hit("r0", "a")]
    others = [s.load("r1", "a"), s.hit("r1", "a")]  # as busy, and fewer served: placement's holder
    s.ticket += 1
    assert s.machine.place_hit(s.ticket, adapter="a") is None  # both past their concurrency
    for ticket in first:
        s.expect(Released(ticket=ticket))  # now r0 is idle
    assert routed(s, "a")[0] == Assign(ticket=s.ticket, replica="r0", placed=Placed.HELD)
    for ticket in [*others, s.ticket]:
        s.expect(Released(ticket=ticket))
    for replica in ("r0", "r1"):
        s.expect(ReplicaFailed(replica=replica))  # avoided for the backoff (5 s)
    s.ticket += 1
    assert s.machine.place_hit(s.ticket, adapter="a") is None  # both holders are avoided
    (assign, *_) = routed(s, "a", now=6.0)  # their backoff is over by the request's clock
    assert isinstance(assign, Assign)
    assert assign.placed is Placed.HELD, assign


def test_place_routed_searches_again_where_the_clock_it_brings_starts_a_pin() -> None:
    """[route] [pin] The clock a request brings may end a pinned adapter's refusal, and [time] loads
    the pin then: a request for it joins that load, not the one ``place_hit`` saw no holder for."""
    s = Scenario.with_replicas(("r0", 2), ("r1", 2), refusal=45.0, listing_interval=1000.0)
    (load,) = loads(s(AdapterPinned(adapter="p", path="/adapters/p")))
    s.expect(LoadFinished(load=load.load, outcome=LoadOutcome.ADAPTER_FAULT, message="No adapter found"))
    s.ticket += 1
    assert s.machine.place_hit(s.ticket, adapter="p") is None  # refused, held nowhere
    (pinned, assign) = routed(s, "p", now=50.0)
    assert isinstance(pinned, IssueLoad)
    assert pinned.adapter == "p", pinned
    assert assign == Assign(ticket=s.ticket, replica=pinned.replica, placed=Placed.LOADING)


def test_place_only_among_replicas_of_the_model_and_never_a_removed_one() -> None:
    s = Scenario.with_replicas(("r0", 2))
    s.expect(ReplicaAdded(replica="q", model="other", limit=2), ReadListing(listing=2, replica="q"))
    s.load("r0", "a")
    # q is no candidate until its first listing says what it holds.
    assert s.machine.place("a", model="other") == Placement(replica=None, placed=None)
    s.expect(ListingReceived(listing=2, adapters=()), MarkMet(replica="q"))
    assert s.machine.place("a", model="other") == Placement(replica="q", placed=Placed.FREE)
    s(ReplicasRemoved(replicas=("r0",)))
    assert s.machine.place("a", model="base") == Placement(replica=None, placed=None)


def _highest(name: str, replicas: list[str]) -> str:
    return max(replicas, key=lambda replica: _rendezvous(name, replica))


def test_place_gives_a_tie_among_many_replicas_to_the_highest_weight() -> None:
    """[place] However many replicas tie on the least cold key, a cold load goes to the candidate of
    highest rendezvous weight, computed over the UTF-8 bytes of each name (ids of three byte lengths
    here, one of two characters and three bytes)."""
    ids = [f"r{i}" for i in range(37)] + ["ré", "replica-a", "replica-b"]
    s = Scenario.with_replicas(*((replica, 2) for replica in ids))
    ties_go_by_weight(s, ids, [f"adapter-{i}" for i in range(10)] + ["é", "a" * 40])


def test_place_weighs_a_replica_added_since_and_forgets_one_removed() -> None:
    """[place] The weights cover every replica in use: one added after placements counts, one removed
    no longer does."""
    ids = [f"r{i}" for i in range(40)]
    s = Scenario.with_replicas(*((replica, 2) for replica in ids))
    names = [f"adapter-{i}" for i in range(24)]
    assert [s.machine.place(name).replica for name in names] == [_highest(name, ids) for name in names]
    s.expect(ReplicaAdded(replica="late", model="base", limit=2), ReadListing(listing=41, replica="late"))
    s.expect(ListingReceived(listing=41, adapters=()), MarkMet(replica="late"))
    wanted = [_highest(name, [*ids, "late"]) for name in names]
    assert "late" in wanted  # the new replica is the highest weight for some
    assert [s.machine.place(name).replica for name in names] == wanted
    s.expect(ReplicasRemoved(replicas=("late",)))
    assert [s.machine.place(name).replica for name in names] == [_highest(name, ids) for name in names]

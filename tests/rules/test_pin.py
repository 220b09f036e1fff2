"""[pin] (SPEC.md §3.10): pinned adapters are loaded on their copies and never evicted."""

from __future__ import annotations

from lorafleet import (
    AdapterPinned,
    AdapterUnpinned,
    Grant,
    How,
    IssueLoad,
    ListingReceived,
    LoadFinished,
    LoadOutcome,
    MarkMet,
    ReadListing,
    RefusalForgotten,
    Released,
    ReplicaAdded,
    TimeAdvanced,
)

from .helpers import held
from scenario import Scenario, landed, loads, unloads


def test_pin_loads_the_adapter_on_its_copies_and_never_evicts_it() -> None:
    s = Scenario.with_replicas(("r0", 1), ("r1", 1), ("r2", 1))
    commands = s(AdapterPinned(adapter="p", path="/adapters/p", copies=2))
    assert sorted(c.replica for c in loads(commands)) == ["r0", "r2"]  # free slots, by rendezvous hash
    for load in loads(commands):
        s.expect(LoadFinished(load=load.load, outcome=LoadOutcome.LOADED))  # no request waits: no grant
    assert s.machine.statistics().pins == {"p": 2}
    # r0 holds only p, pinned: a cold request there goes over the limit rather than evict it.
    t, commands = s.request("r0", "a")
    assert unloads(commands) == []
    s.expect(
        LoadFinished(load=loads(commands)[0].load, outcome=LoadOutcome.LOADED),
        Grant(ticket=t, how=How.LOADED),
    )
    s.expect(Released(ticket=t))
    b, commands = s.request("r0", "b")
    commands = s(landed(loads(commands)[0]))
    assert commands[0] == Grant(ticket=b, how=How.LOADED)
    assert [u.adapter for u in unloads(commands)] == ["a"]  # settling to the limit: a, never p
    # Requests use a pinned adapter like any other; releasing it leaves it pinned, not idle.
    s.expect(Released(ticket=s.hit("r2", "p")))
    assert held(s, "r2") == {"p": 0}
    # So a cold load there settles by unloading nothing: p is no victim once its requests end.
    c, commands = s.request("r2", "c")
    commands = s(landed(loads(commands)[0]))
    assert commands == [Grant(ticket=c, how=How.LOADED)]


def test_pin_is_restored_where_the_engine_lost_it_and_released_by_unpin() -> None:
    s = Scenario.with_replicas(("r0", 2), ("r1", 2))
    (load,) = loads(s(AdapterPinned(adapter="p", path="/adapters/p")))
    s.expect(LoadFinished(load=load.load, outcome=LoadOutcome.LOADED))
    home = load.replica
    # A restart loses it: the listing drops it, and the pin loads it again at once.
    s(TimeAdvanced(now=30.0))
    listings = {c.replica: c.listing for c in s.steps[-1].commands if isinstance(c, ReadListing)}
    commands = s(ListingReceived(listing=listings[home], adapters=()))
    assert [(c.replica, c.adapter) for c in loads(commands)] == [(home, "p")]
    s(LoadFinished(load=loads(commands)[0].load, outcome=LoadOutcome.LOADED))
    s.expect(AdapterUnpinned(adapter="p"))
    assert s.machine.statistics().pins == {}
    a, commands = s.request(home, "a")
    s.expect(landed(loads(commands)[0]), Grant(ticket=a, how=How.LOADED))
    b, commands = s.request(home, "b")
    commands = s(landed(loads(commands)[0]))
    assert commands[0] == Grant(ticket=b, how=How.LOADED)
    assert [u.adapter for u in unloads(commands)] == ["p"]  # idle again, and least recently used


def test_pin_waits_while_the_adapter_is_refused() -> None:
    s = Scenario.with_replicas(("r0", 2))
    (load,) = loads(s(AdapterPinned(adapter="bad", path="/adapters/bad")))
    s.expect(LoadFinished(load=load.load, outcome=LoadOutcome.ADAPTER_FAULT, message="No adapter found"))
    s.expect(TimeAdvanced(now=30.0), ReadListing(listing=3, replica="r0"))  # refused: no new load yet


def test_pin_loads_as_soon_as_its_refusal_is_forgotten() -> None:
    """[forgive] A pinned adapter waits out its refusal, unless the router says the engine may take it
    now: then its load goes out with the event."""
    s = Scenario.with_replicas(("r0", 2))
    (load,) = loads(s(AdapterPinned(adapter="bad", path="/adapters/bad")))
    s.expect(LoadFinished(load=load.load, outcome=LoadOutcome.ADAPTER_FAULT, message="No adapter found"))
    s.expect(
        RefusalForgotten(adapter="bad"), IssueLoad(load=3, replica="r0", adapter="bad", path="/adapters/bad")
    )


def test_pin_is_never_loaded_where_its_adapter_is_being_unloaded() -> None:
    """[pin] A load and an unload of one adapter on one replica never cross: a replica unloading the
    pinned adapter (here x, the victim of y's load) is no place for the pin's copy."""
    s = Scenario.with_replicas(("r0", 1), ("r1", 1))
    s.expect(Released(ticket=s.load("r1", "x")))
    s.expect(Released(ticket=s.load("r0", "w")))
    y, _ = s.request("r1", "y")  # x is y's victim
    assert s.machine.statistics().replicas["r1"].unloading == ("x",)
    s.expect(
        AdapterPinned(adapter="x", path="/adapters/x", copies=1, model=None),
        IssueLoad(load=6, replica="r0", adapter="x", path="/adapters/x"),
    )
    assert s.machine.statistics().replicas["r0"].unloading == ("w",)
    assert y == s.ticket


# -- [warm] ----------------------------------------------------------------------------------------


def warm(adapter: str, model: str | None = None) -> AdapterPinned:
    return AdapterPinned(adapter=adapter, path=f"/adapters/{adapter}", model=model, until_held=True)


def test_warm_pins_the_adapter_until_a_copy_lands_and_then_lets_it_be_evicted() -> None:
    """[warm] A pin until held loads one copy where placement says and lifts itself once it lands:
    the copy is idle, most recently used, and evicted in its turn like any other."""
    s = Scenario.with_replicas(("r0", 1))
    s.expect(Released(ticket=s.load("r0", "a")))
    (load,) = loads(s(warm("w")))  # a is idle: w evicts it
    assert s.machine.statistics().warming == {"w"}
    assert s.machine.statistics().pins == {"w": 1}
    commands = s(landed(load))
    assert [u.adapter for u in unloads(commands)] == ["a"]
    assert s.machine.statistics().warming == frozenset()
    assert s.machine.statistics().pins == {}
    assert held(s, "r0") == {"w": 0}
    _, commands = s.request("r0", "b")  # w is no pin now: b evicts it
    assert [u.adapter for u in unloads(s(landed(loads(commands)[0])))] == ["w"]


def test_warm_changes_nothing_where_the_adapter_is_held_or_pinned() -> None:
    """[warm] Where a copy is held already, or the adapter is pinned, a pin until held is no news."""
    s = Scenario.with_replicas(("r0", 2), ("r1", 2))
    s.expect(Released(ticket=s.load("r0", "a")))
    s.expect(warm("a"))
    assert s.machine.statistics().pins == {}
    assert len(loads(s(AdapterPinned(adapter="p", path="/adapters/p", copies=2)))) == 2
    s.expect(warm("p"))
    assert s.machine.statistics().pins == {"p": 2}
    assert s.machine.statistics().warming == frozenset()
    s.machine.check_invariants()


def test_warm_counts_only_copies_of_its_model() -> None:
    """[warm] A copy on a replica of another model is not the one asked for: the pin loads one on a
    replica of its model, and only that copy lifts it."""
    s = Scenario.with_replicas(("r0", 2))
    s.expect(ReplicaAdded(replica="q", model="other", limit=2), ReadListing(listing=2, replica="q"))
    s.expect(ListingReceived(listing=2, adapters=()), MarkMet(replica="q"))
    s.expect(Released(ticket=s.load("q", "w")))
    (load,) = loads(s(warm("w", model="base")))
    assert load.replica == "r0"
    _, commands = s.request("q", "v")
    (elsewhere,) = loads(s(warm("v", model="base")))
    s(landed(loads(commands)[0]))  # a copy of v lands on q, of the other model
    assert s.machine.statistics().warming == {"v", "w"}
    s(landed(load))
    s(landed(elsewhere))
    assert s.machine.statistics().pins == {}


def test_warm_is_ended_by_a_listing_that_shows_a_copy_and_replaced_by_a_pin() -> None:
    """[warm] A listing that shows a copy (another router loaded it) lifts a pin until held; a pin of
    the adapter before that makes it the caller's, which lasts."""
    s = Scenario.with_replicas(("r0", 1), listing_interval=10.0)
    t = s.load("r0", "a")  # in use: no room for w
    s.expect(warm("w"))
    assert s.machine.statistics().warming == {"w"}
    (listing,) = s(TimeAdvanced(now=10.0))
    assert isinstance(listing, ReadListing)
    s.expect(ListingReceived(listing=listing.listing, adapters=("a", "w")))
    assert s.machine.statistics().pins == {}
    assert s.machine.statistics().warming == frozenset()
    # A pin of the adapter while it is warmed is the caller's: it outlasts the copy landing.
    s.expect(Released(ticket=t))
    (load,) = loads(s(warm("v")))
    s.expect(AdapterPinned(adapter="v", path="/adapters/v"))
    assert s.machine.statistics().warming == frozenset()
    s(landed(load))
    assert s.machine.statistics().pins == {"v": 1}

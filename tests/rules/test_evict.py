"""[cold] and [evict] (SPEC.md §3.1): a request for an adapter its replica lacks loads it, and the idle
adapters in least demand go first where the load would pass the bound."""

from __future__ import annotations

from lorafleet import (
    Grant,
    How,
    IssueLoad,
    IssueUnload,
    LimitSet,
    ListingReceived,
    LoadFinished,
    LoadOutcome,
    MarkMet,
    ReadListing,
    Released,
    ReplicaAdded,
    TimeAdvanced,
    UnloadFinished,
    UnloadOutcome,
    View,
)

from .helpers import held
from scenario import Scenario, landed, loads, unloaded, unloads

# -- [cold] ----------------------------------------------------------------------------------------


def test_cold_load_without_victims_is_issued_at_once() -> None:
    s = Scenario.with_replicas(("r", 2))
    _ticket, commands = s.request("r", "a", "/lora/a")
    assert commands == [IssueLoad(load=2, replica="r", adapter="a", path="/lora/a")]


# -- [evict] ---------------------------------------------------------------------------------------


def test_evict_least_recently_used_idle_adapters_until_the_load_fits() -> None:
    """[evict] With headroom 0 the bound is the limit: a load past it unloads its victims first."""
    s = Scenario.with_replicas(("r", 3), headroom=0)
    x, y, z = s.load("r", "x"), s.load("r", "y"), s.load("r", "z")
    for t in (y, x, z):
        s.expect(Released(ticket=t))
    s.expect(LimitSet(model="base", limit=2))
    # Lowering the limit takes effect at the next load: two go, y first (least recently used),
    # before the load, which has no headroom to go into.
    _ticket, commands = s.request("r", "w")
    assert unloads(commands) == [
        IssueUnload(unload=5, replica="r", adapter="y"),
        IssueUnload(unload=6, replica="r", adapter="x"),
    ]
    assert loads(commands) == []  # the load waits for every victim's unload
    # Victims stop counting as held at once.
    assert held(s, "r") == {"z": 0}
    assert s.machine.view(["r"], "y") == View(holders=frozenset(), with_room=frozenset())
    s.expect(UnloadFinished(unload=5, outcome=UnloadOutcome.UNLOADED))
    # Whatever the outcome of the last victim's unload, the load goes out.
    s.expect(
        UnloadFinished(unload=6, outcome=UnloadOutcome.FAILED, message="boom"),
        IssueLoad(load=7, replica="r", adapter="w", path="/adapters/w"),
    )


def test_evict_ties_are_broken_by_name() -> None:
    s = Scenario.with_replicas(("r", 2), listed=False)
    # Adapters another router loaded come in one listing: equally old, so by name.
    s.expect(ListingReceived(listing=1, adapters=("zeta", "alpha")), MarkMet(replica="r"))
    ticket, commands = s.request("r", "new")
    assert unloads(commands) == []
    s.expect(
        LoadFinished(load=2, outcome=LoadOutcome.LOADED),
        Grant(ticket=ticket, how=How.LOADED),
        IssueUnload(unload=3, replica="r", adapter="alpha"),
    )


def test_evict_never_takes_an_adapter_in_use_and_goes_over_the_limit_instead() -> None:
    s = Scenario.with_replicas(("r", 1))
    s.load("r", "a")
    ticket, commands = s.request("r", "b")
    assert commands == [IssueLoad(load=3, replica="r", adapter="b", path="/adapters/b")]
    s.expect(LoadFinished(load=3, outcome=LoadOutcome.LOADED), Grant(ticket=ticket, how=How.LOADED))
    assert held(s, "r") == {"a": 1, "b": 1}
    # A later load brings the replica back under its limit once adapters are idle ([settle]).
    s.expect(Released(ticket=1))
    s.expect(Released(ticket=ticket))
    c, commands = s.request("r", "c")
    assert unloads(commands) == []
    commands = s(LoadFinished(load=loads(commands)[0].load, outcome=LoadOutcome.LOADED))
    assert commands[0] == Grant(ticket=c, how=How.LOADED)
    assert [u.adapter for u in unloads(commands)] == ["a", "b"]


def test_evict_first_only_at_the_bound_of_the_limit_plus_the_headroom() -> None:
    """[evict] Cold loads go into the headroom at once; only a load that would pass the bound (limit +
    headroom) unloads first, as many victims as it needs, and waits for them. Headroom 0: the limit."""
    s = Scenario.with_replicas(("r", 1), headroom=2)
    s.expect(Released(ticket=s.load("r", "a")))
    _, commands = s.request("r", "b")
    assert commands == [IssueLoad(load=3, replica="r", adapter="b", path="/adapters/b")]
    _, commands = s.request("r", "c")  # a, b and c: at the bound, not past it
    assert commands == [IssueLoad(load=4, replica="r", adapter="c", path="/adapters/c")]
    _, commands = s.request("r", "d")
    (unload,) = commands
    assert unload == IssueUnload(unload=5, replica="r", adapter="a")
    s.expect(unloaded(unload), IssueLoad(load=6, replica="r", adapter="d", path="/adapters/d"))
    s = Scenario.with_replicas(("r", 1), headroom=0)
    s.expect(Released(ticket=s.load("r", "a")))
    _, commands = s.request("r", "b")
    assert commands == [IssueUnload(unload=3, replica="r", adapter="a")]


def test_evict_takes_the_idle_adapter_in_least_demand_then_the_least_recently_used() -> None:
    s = Scenario.with_replicas(("r", 3))
    popular = s.load("r", "popular")
    for _ in range(3):
        s.expect(Released(ticket=s.hit("r", "popular")))
    s.expect(Released(ticket=popular))  # requested 4 times, and now the least recently used
    s.expect(Released(ticket=s.load("r", "once")))
    s.expect(Released(ticket=s.load("r", "twice")))
    s.expect(Released(ticket=s.hit("r", "twice")))
    new, commands = s.request("r", "new")
    commands = s(landed(loads(commands)[0]))
    assert commands[0] == Grant(ticket=new, how=How.LOADED)
    assert [u.adapter for u in unloads(commands)] == ["once"]  # demand 1 is below 2 and 4


def test_fault_2_an_adapter_being_unloaded_is_never_chosen_as_a_victim_again() -> None:
    s = Scenario.with_replicas(("r", 1))
    s.expect(Released(ticket=s.load("r", "a")))
    b, commands = s.request("r", "b")
    (unload,) = unloads(s(landed(loads(commands)[0])))  # b landed: a goes
    (listing,) = s(TimeAdvanced(now=30.0))
    assert isinstance(listing, ReadListing)
    s(ListingReceived(listing=listing.listing, adapters=("a", "b")))
    waiter, _ = s.request("r", "a")
    s.expect(Released(ticket=b))
    # In the seed the next load would pick a again: a second unload, a waiter never woken, and a
    # crash when the second unload closes a closed channel. Here b, idle, is the one to go.
    c, commands = s.request("r", "c")
    commands = s(landed(loads(commands)[0]))
    assert commands[0] == Grant(ticket=c, how=How.LOADED)
    assert [u.adapter for u in unloads(commands)] == ["b"]
    # The one unload of a finishes once, and the a waiter starts a's load afresh.
    (load_a,) = loads(s(unloaded(unload)))
    assert load_a.adapter == "a"
    s.expect(landed(load_a), Grant(ticket=waiter, how=How.LOADED))


def test_fault_4_an_adapter_being_loaded_is_never_unloaded() -> None:
    s = Scenario.with_replicas(("r", 1))
    _, commands = s.request("r", "a")
    (listing,) = s(TimeAdvanced(now=30.0))
    assert isinstance(listing, ReadListing)
    s(ListingReceived(listing=listing.listing, adapters=("a",)))
    # In the seed the listed-while-loading entry is the first victim: an unload that crosses the load.
    _, commands = s.request("r", "b")
    assert unloads(commands) == []


def test_evict_a_limit_set_for_one_model_leaves_the_other_models_replicas_alone() -> None:
    """[limit] ``limit_set`` is for the replicas of its model: q, of another model, keeps its limit 1."""
    s = Scenario.with_replicas(("r", 1), headroom=0)
    (cmd,) = s(ReplicaAdded(replica="q", model="other", limit=1))
    assert isinstance(cmd, ReadListing)
    s.expect(ListingReceived(listing=cmd.listing, adapters=()), MarkMet(replica="q"))
    s.expect(Released(ticket=s.load("q", "x")))
    s.expect(LimitSet(model="base", limit=3))
    _ticket, commands = s.request("q", "y")
    assert [u.adapter for u in unloads(commands)] == ["x"]  # still full at 1: x goes before y loads

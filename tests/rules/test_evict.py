"""[cold] and [evict] (SPEC.md §3.1, §3.16): a request for an adapter its replica lacks loads it at
once; past the line the load takes the room of the least recently used idle adapters, which take no
request from then on, are unloaded once it lands, and are held again where they were if it fails."""

from __future__ import annotations

from lorafleet import (
    Fail,
    Fault,
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
    """[evict] A load past the line takes as many victims as bring the count back to the line, least
    recently used first; it goes out at once, and their unloads go out once it has landed."""
    s = Scenario.with_replicas(("r", 3), headroom=0)
    x, y, z = s.load("r", "x"), s.load("r", "y"), s.load("r", "z")
    for t in (y, x, z):
        s.expect(Released(ticket=t))
    s.expect(LimitSet(model="base", limit=2))
    # Lowering the limit takes effect at the next load: two victims, y first (least recently used).
    w, commands = s.request("r", "w")
    assert commands == [IssueLoad(load=5, replica="r", adapter="w", path="/adapters/w")]
    # Victims stop counting as held at once, and no request can use them any more.
    assert held(s, "r") == {"z": 0}
    assert s.machine.statistics().replicas["r"].unloading == ("x", "y")
    assert s.machine.view(["r"], "y") == View(holders=frozenset(), with_room=frozenset())
    s.expect(
        LoadFinished(load=5, outcome=LoadOutcome.LOADED),
        Grant(ticket=w, how=How.LOADED),
        IssueUnload(unload=6, replica="r", adapter="y"),
        IssueUnload(unload=7, replica="r", adapter="x"),
    )
    # Whatever an unload's outcome, the adapter is gone.
    s.expect(UnloadFinished(unload=6, outcome=UnloadOutcome.UNLOADED))
    s.expect(UnloadFinished(unload=7, outcome=UnloadOutcome.FAILED, message="boom"))
    assert held(s, "r") == {"w": 1, "z": 0}


def test_evict_a_replica_a_listing_took_past_its_line_is_brought_back_by_its_next_load() -> None:
    """[evict] A listing may name more adapters than the line: the next cold load takes as many victims
    as bring the count back to it."""
    s = Scenario.with_replicas(("r", 2), listed=False, headroom=2)
    s.expect(ListingReceived(listing=1, adapters=("s1", "s2", "s3", "s4")), MarkMet(replica="r"))
    _, commands = s.request("r", "x")
    assert commands == [IssueLoad(load=2, replica="r", adapter="x", path="/adapters/x")]
    assert s.machine.statistics().replicas["r"].unloading == ("s1", "s2", "s3")


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


def test_evict_past_the_line_even_with_headroom_to_spare() -> None:
    """[evict] The headroom is for a replica whose adapters are all in use ([cap]): with an idle one
    to take, a load past the line takes it, whatever the headroom."""
    s = Scenario.with_replicas(("r", 1), headroom=2)
    s.expect(Released(ticket=s.load("r", "a")))
    b, commands = s.request("r", "b")
    (load,) = loads(commands)
    assert load == IssueLoad(load=3, replica="r", adapter="b", path="/adapters/b")
    assert held(s, "r") == {}
    s.expect(landed(load), Grant(ticket=b, how=How.LOADED), IssueUnload(unload=4, replica="r", adapter="a"))
    # With b in use and nothing idle, c goes over the line, into the headroom.
    _, commands = s.request("r", "c")
    assert commands == [IssueLoad(load=5, replica="r", adapter="c", path="/adapters/c")]


def test_evict_takes_the_least_recently_used_idle_adapter_whatever_its_demand() -> None:
    """[evict] The engine drops the adapter it used least recently (§3.16): so does the machine, however
    often that one was asked for."""
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
    assert [u.adapter for u in unloads(commands)] == ["popular"]


def test_evict_a_load_that_fails_evicts_nothing_its_victims_are_held_where_they_were() -> None:
    """[load-outcome] A load the engine refuses took no room there: its victims are held again, idle
    in their old places, and a request that waited for one's unload finds it held: a hit."""
    s = Scenario.with_replicas(("r", 3))
    for name in ("a", "b", "c"):
        s.expect(Released(ticket=s.load("r", name)))
    s.expect(LimitSet(model="base", limit=2))
    d, commands = s.request("r", "d")
    (load,) = commands
    assert isinstance(load, IssueLoad)
    assert s.machine.statistics().replicas["r"].unloading == ("a", "b")
    waiter, commands = s.request("r", "b")  # b is a victim: the request waits for its fate
    assert commands == []
    s.expect(Released(ticket=s.hit("r", "c")))  # c is now the most recently used
    s.expect(
        LoadFinished(load=load.load, outcome=LoadOutcome.ADAPTER_FAULT, message="bad rank"),
        Fail(ticket=d, fault=Fault.ADAPTER, message="bad rank"),
        Grant(ticket=waiter, how=How.HIT),
    )
    assert held(s, "r") == {"a": 0, "b": 1, "c": 0}
    s.expect(Released(ticket=waiter))
    # a went back in front of c, where it was: the next victim is a, then c, then b.
    _e, commands = s.request("r", "e")
    commands = s(landed(loads(commands)[0]))
    assert [u.adapter for u in unloads(commands)] == ["a", "c"]


def test_evict_a_request_for_a_victim_waits_for_its_unload_then_loads_it_afresh() -> None:
    """[evict], [wait-unload] A victim takes no request once chosen (the engine must keep it its least
    recently used): a request for it waits until its unload is answered, then is admitted afresh."""
    s = Scenario.with_replicas(("r", 1))
    s.expect(Released(ticket=s.load("r", "a")))
    b, commands = s.request("r", "b")
    (load_b,) = commands
    assert isinstance(load_b, IssueLoad)
    waiter, commands = s.request("r", "a")
    assert commands == []
    (unload_a,) = unloads(s(landed(load_b)))
    assert unload_a.adapter == "a"
    s.expect(Released(ticket=b))
    # a's unload answered: the waiter is admitted afresh, a cold load with b as its victim.
    (load_a,) = s(unloaded(unload_a))
    assert isinstance(load_a, IssueLoad)
    assert load_a.adapter == "a"
    s.expect(
        landed(load_a),
        Grant(ticket=waiter, how=How.LOADED),
        IssueUnload(unload=load_a.load + 1, replica="r", adapter="b"),
    )


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
    assert loads(commands) == commands
    assert s.machine.statistics().replicas["q"].unloading == ("x",)  # still full at 1: x is the victim

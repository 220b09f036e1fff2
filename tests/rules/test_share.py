"""[share] (SPEC.md §3.14): each of R routers fills at most its share of a replica's free slots between
listings."""

from __future__ import annotations

from lorafleet import (
    AdapterMissing,
    Grant,
    How,
    IssueLoad,
    IssueUnload,
    ListingReceived,
    MarkMet,
    Placed,
    ReadListing,
    Released,
    ReplicaAdded,
    ReplicasRemoved,
    TimeAdvanced,
    UnloadFinished,
    UnloadOutcome,
)

from scenario import Scenario, landed, loads, unloads


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


def listed(routers: int, limit: int, *names: str, headroom: int | None = None) -> Scenario:
    """A machine for one of ``routers`` routers whose replica ``r`` was listed holding ``names``."""
    s = Scenario.configured(routers=routers, headroom=headroom)
    (cmd,) = s(ReplicaAdded(replica="r", model="base", limit=limit))
    assert isinstance(cmd, ReadListing)
    s.expect(ListingReceived(listing=cmd.listing, adapters=names), MarkMet(replica="r"))
    return s


def test_share_two_routers_on_an_empty_replica_fill_two_of_four_slots_each_then_evict() -> None:
    """Past its share a load takes a victim."""
    loaded: set[str] = set()
    for router, names in (("one", "abc"), ("two", "xyz")):
        s = shared(2, ("r", 4), headroom=0)
        for name in names[:2]:
            s.expect(Released(ticket=s.load("r", name)))  # a free slot: no victim
            loaded.add(name)
        # Past its share (ceil(4 free / 2 routers) = 2) the replica is full for this router: the
        # next cold load takes a victim, so the two routers together never take it past its limit.
        _ticket, commands = s.request("r", names[2])
        assert [c.adapter for c in loads(commands)] == [names[2]], router
        assert s.machine.statistics().replicas["r"].unloading == (names[0],), router
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
    assert [c.adapter for c in loads(commands)] == ["c"]
    after = s.machine.statistics().replicas["r"]
    assert (after.queued, after.loading, after.unloading) == (0, ("c",), ("a",))


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


def test_share_a_victim_another_router_unloaded_first_counts_until_the_next_listing() -> None:
    """A victim's unload answered not_found: another router unloaded it first, to load an adapter this
    router does not see. The replica is one fuller than it looks: this router's next load takes one
    victim more."""
    s = listed(2, 2, "s1", "s2", headroom=0)
    x, commands = s.request("r", "x")
    (load,) = commands
    assert isinstance(load, IssueLoad)
    (_, first) = s(landed(load))
    assert isinstance(first, IssueUnload)
    assert first.adapter == "s1"
    s.expect(UnloadFinished(unload=first.unload, outcome=UnloadOutcome.NOT_FOUND))
    s.expect(Released(ticket=x))
    _, commands = s.request("r", "y")
    assert [c.adapter for c in loads(commands)] == ["y"]
    assert s.machine.statistics().replicas["r"].unloading == ("s2", "x")


def test_share_with_one_router_a_victim_not_found_makes_no_more_room() -> None:
    """Alone, a victim not found is only gone: the line stays the limit."""
    s = listed(1, 2, "s1", "s2", headroom=0)
    x, commands = s.request("r", "x")
    (_, first) = s(landed(loads(commands)[0]))
    assert isinstance(first, IssueUnload)
    s.expect(UnloadFinished(unload=first.unload, outcome=UnloadOutcome.NOT_FOUND))
    s.expect(Released(ticket=x))
    _, commands = s.request("r", "y")
    assert s.machine.statistics().replicas["r"].unloading == ("s2",)


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

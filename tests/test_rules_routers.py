"""[elsewhere]: what the engine says runs on a replica, from any router, is never a victim; [read-failed]:
a read that gets no answer leaves that report standing until the next listing."""

from __future__ import annotations

import pytest

from lorafleet import (
    AdapterMissing,
    Command,
    InvalidValueError,
    IssueLoad,
    IssueUnload,
    ListingFailed,
    ListingReceived,
    LoadFinished,
    LoadOutcome,
    MarkMet,
    Placed,
    Placement,
    ReadListing,
    Released,
    ReplicaAdded,
    ReplicasRemoved,
    RunningReadFailed,
    RunningReported,
    TimeAdvanced,
    UnloadFinished,
    UnloadOutcome,
)

from scenario import Scenario, loads, unloaded, unloads


def idle_pair(s: Scenario, replica: str = "r") -> None:
    """``replica`` holds a then b, both idle, a the least recently used."""
    s.expect(Released(ticket=s.load(replica, "a")))
    s.expect(Released(ticket=s.load(replica, "b")))


def test_elsewhere_an_adapter_the_engine_reports_running_is_no_victim() -> None:
    s = Scenario.with_replicas(("r", 2))
    idle_pair(s)
    s.expect(RunningReported(replica="r", adapters=("a",)))
    # a is the least recently used here, but another router runs requests on it: b goes.
    _ticket, commands = s.request("r", "c")
    assert [u.adapter for u in unloads(commands)] == ["b"]


def test_elsewhere_when_every_idle_adapter_is_reported_the_load_goes_over_the_limit() -> None:
    s = Scenario.with_replicas(("r", 2))
    idle_pair(s)
    s.expect(RunningReported(replica="r", adapters=("b", "a", "zz")))  # zz: not held here
    _ticket, commands = s.request("r", "c")
    assert [c.adapter for c in loads(commands)] == ["c"]
    assert len(commands) == 1


def test_elsewhere_the_next_report_replaces_it_and_frees_the_rest_most_recently_used() -> None:
    s = Scenario.with_replicas(("r", 2))
    idle_pair(s)
    s.expect(RunningReported(replica="r", adapters=("a",)))
    s.expect(RunningReported(replica="r", adapters=()))
    # a ran last (on the engine, for someone): b is now the least recently used.
    _ticket, commands = s.request("r", "c")
    assert [u.adapter for u in unloads(commands)] == ["b"]


def test_elsewhere_an_adapter_in_use_here_stays_in_use_when_the_report_drops_it() -> None:
    s = Scenario.with_replicas(("r", 1))
    t = s.load("r", "a")
    s.expect(RunningReported(replica="r", adapters=("a",)))
    s.expect(RunningReported(replica="r", adapters=()))
    _ticket, commands = s.request("r", "b")
    assert unloads(commands) == []  # a's request has not ended
    s.expect(Released(ticket=t))


def test_elsewhere_a_release_or_a_load_leaves_a_reported_adapter_out_of_idle() -> None:
    s = Scenario.with_replicas(("r", 2))
    s.expect(RunningReported(replica="r", adapters=("a", "b")))
    t = s.load("r", "a")
    s.expect(Released(ticket=t))
    _t, commands = s.request("r", "b")
    (load,) = loads(commands)
    s(LoadFinished(load=load.load, outcome=LoadOutcome.LOADED))
    _t, commands = s.request("r", "c")
    assert unloads(commands) == []


def test_elsewhere_a_listing_brings_in_reported_adapters_not_idle() -> None:
    s = Scenario.with_replicas(("r", 1), listed=False)
    s.expect(RunningReported(replica="r", adapters=("x",)))
    s(ListingReceived(listing=1, adapters=("x", "y")))
    # y is the only victim: x runs on the engine.
    _ticket, commands = s.request("r", "c")
    assert [u.adapter for u in unloads(commands)] == ["y"]


def test_elsewhere_placement_does_not_count_reported_adapters_as_idle() -> None:
    s = Scenario.with_replicas(("r0", 1), ("r1", 1))
    s.expect(Released(ticket=s.load("r0", "a")))
    s.expect(Released(ticket=s.load("r1", "b")))
    assert s.machine.place("c") == Placement(replica="r0", placed=Placed.EVICT)
    s.expect(RunningReported(replica="r0", adapters=("a",)))
    # a runs on r0 for another router: nothing there is idle, so a load evicts nothing (over the limit,
    # within the overflow), which placement prefers to evicting b on r1.
    assert s.machine.place("c") == Placement(replica="r0", placed=Placed.OVER)
    assert s.machine.place("c", exclude={"r0"}) == Placement(replica="r1", placed=Placed.EVICT)
    s.expect(RunningReported(replica="r1", adapters=("b",)))
    assert s.machine.place("c", exclude={"r0"}).placed is Placed.OVER


def queued_behind_a_report() -> Scenario:
    """r (limit 1, headroom 0) holds a, idle here and reported running; a request for b waits at the cap."""
    s = Scenario.configured(headroom=0)
    (listing,) = s(ReplicaAdded(replica="r", model="base", limit=1))
    assert isinstance(listing, ReadListing)
    s(ListingReceived(listing=listing.listing, adapters=()))
    s.expect(Released(ticket=s.load("r", "a")))
    s.expect(RunningReported(replica="r", adapters=("a",)))
    _ticket, commands = s.request("r", "b")
    assert commands == []
    return s


def test_elsewhere_at_the_cap_a_report_that_frees_an_adapter_admits_the_queue() -> None:
    s = queued_behind_a_report()  # a runs elsewhere: no room under the cap
    (unload,) = s(RunningReported(replica="r", adapters=()))
    assert isinstance(unload, IssueUnload)
    assert unload.adapter == "a"
    (load,) = s(UnloadFinished(unload=unload.unload, outcome=UnloadOutcome.UNLOADED))
    assert isinstance(load, IssueLoad)
    assert load.adapter == "b"


def test_elsewhere_reports_for_a_replica_not_in_use_change_nothing() -> None:
    s = Scenario.with_replicas(("r", 1))
    s.expect(Released(ticket=s.load("r", "a")))
    s.expect(RunningReported(replica="gone", adapters=("a",)))
    s.expect(RunningReported(replica="r", adapters=("a",)))
    s.expect(ReplicasRemoved(replicas=("r",)))
    s.expect(TimeAdvanced(now=1.0))
    (listing,) = s(ReplicaAdded(replica="r", model="base", limit=1))
    assert isinstance(listing, ReadListing)
    s(ListingReceived(listing=listing.listing, adapters=("a",)))
    # The report was about the engine before the removal: a is a victim again.
    _ticket, commands = s.request("r", "b")
    assert [u.adapter for u in unloads(commands)] == ["a"]


def test_elsewhere_a_report_of_the_wrong_kind_is_refused() -> None:
    s = Scenario.with_replicas(("r", 1))
    for event in (
        RunningReported(replica="", adapters=()),
        RunningReported(replica="r", adapters="a"),  # type: ignore[arg-type]
        RunningReported(replica="r", adapters=("a", "")),
        RunningReported(replica=3, adapters=(4,)),  # type: ignore[arg-type]
    ):
        with pytest.raises(InvalidValueError):
            s(event)


def list_again(s: Scenario, now: float, *adapters: str) -> list[Command]:
    """Advance to ``now``, when r's listing is due, and answer it with ``adapters``."""
    (listing,) = s(TimeAdvanced(now=now))
    assert isinstance(listing, ReadListing)
    return s(ListingReceived(listing=listing.listing, adapters=adapters))


def test_read_failed_with_no_listing_since_the_report_the_report_stands() -> None:
    s = queued_behind_a_report()
    s.expect(RunningReadFailed(replica="r", message="no answer within 5 s"))
    s.expect(RunningReadFailed(replica="r"))
    assert s.machine.reported("r") == {"a"}
    # A report after a listing: a failed read after that report changes nothing either.
    assert list_again(s, 30.0, "a") == []
    s.expect(RunningReported(replica="r", adapters=("a",)))
    s.expect(RunningReadFailed(replica="r"))


def test_read_failed_after_a_listing_ends_the_report_as_an_empty_one_would() -> None:
    s = queued_behind_a_report()
    assert list_again(s, 30.0, "a") == []  # a still runs elsewhere, as far as anyone knows
    assert s.machine.reported("r") == {"a"}
    (unload,) = s(RunningReadFailed(replica="r", message="HTTP 503"))
    assert s.machine.reported("r") == frozenset()
    assert isinstance(unload, IssueUnload)
    assert unload.adapter == "a"
    (load,) = s(unloaded(unload))
    assert isinstance(load, IssueLoad)
    assert load.adapter == "b"
    # The report is over: another failed read finds nothing to end.
    s.expect(RunningReadFailed(replica="r"))


def test_read_failed_a_failed_listing_is_no_listing() -> None:
    s = queued_behind_a_report()
    (listing,) = s(TimeAdvanced(now=30.0))
    assert isinstance(listing, ReadListing)
    s.expect(ListingFailed(listing=listing.listing, message="HTTP 500"))
    s.expect(RunningReadFailed(replica="r"))


def test_read_failed_for_a_replica_not_in_use_changes_nothing() -> None:
    s = Scenario.with_replicas(("r", 1))
    s.expect(Released(ticket=s.load("r", "a")))
    s.expect(RunningReadFailed(replica="gone"))
    s.expect(RunningReported(replica="r", adapters=("a",)))
    s.expect(ReplicasRemoved(replicas=("r",)))
    s.expect(RunningReadFailed(replica="r"))
    assert s.machine.reported("r") == s.machine.reported("gone") == frozenset()


def test_read_failed_of_the_wrong_kind_is_refused() -> None:
    s = Scenario.with_replicas(("r", 1))
    for event in (
        RunningReadFailed(replica=""),
        RunningReadFailed(replica=3),  # type: ignore[arg-type]
        RunningReadFailed(replica="r", message=None),  # type: ignore[arg-type]
    ):
        with pytest.raises(InvalidValueError):
            s(event)


# -- [share]: each of R routers fills at most its share of a replica's free slots between listings --


def shared(routers: int, *replicas: tuple[str, int], headroom: int | None = None) -> Scenario:
    """A machine for one of ``routers`` routers, knowing these (replica, limit) pairs, listed empty."""
    s = Scenario.configured(routers=routers, **({} if headroom is None else {"headroom": headroom}))
    for replica, limit in replicas:
        (cmd,) = s(ReplicaAdded(replica=replica, model="base", limit=limit))
        assert isinstance(cmd, ReadListing)
        s.expect(ListingReceived(listing=cmd.listing, adapters=()), MarkMet(replica=replica))
    return s


def test_share_two_routers_on_an_empty_replica_fill_two_of_four_slots_each_then_evict() -> None:
    held: set[str] = set()
    for router, names in (("one", "abc"), ("two", "xyz")):
        s = shared(2, ("r", 4))
        for name in names[:2]:
            s.expect(Released(ticket=s.load("r", name)))  # a free slot: no victim
            held.add(name)
        # Past its share (ceil(4 free / 2 routers) = 2) the replica is full for this router: the
        # next cold load evicts, so the two routers together never take it past its limit of 4.
        _ticket, commands = s.request("r", names[2])
        assert [u.adapter for u in unloads(commands)] == [names[0]], router
        assert loads(commands) == []  # it goes out once its victim's unload is answered
    assert len(held) == 4


def test_share_one_router_fills_every_free_slot() -> None:
    s = shared(1, ("r", 4))
    for name in "abcd":
        s.expect(Released(ticket=s.load("r", name)))
    _ticket, commands = s.request("r", "e")
    assert [u.adapter for u in unloads(commands)] == ["a"]


def test_share_rounds_up_so_three_routers_on_a_limit_of_four_fill_two_each() -> None:
    s = shared(3, ("r", 4))
    for name in "ab":
        s.expect(Released(ticket=s.load("r", name)))
    _ticket, commands = s.request("r", "c")
    assert [u.adapter for u in unloads(commands)] == ["a"]


def test_share_a_new_listing_shares_the_free_slots_it_leaves_afresh() -> None:
    s = shared(2, ("r", 6))
    for name in "abc":
        s.expect(Released(ticket=s.load("r", name)))  # 3 of 6 free slots: the share is used up
    (listing,) = s(TimeAdvanced(now=30.0))
    assert isinstance(listing, ReadListing)
    # The other router loaded x meanwhile: 4 held, 2 free slots, and this router's share is 1.
    s.expect(ListingReceived(listing=listing.listing, adapters=("a", "b", "c", "x")))
    s.expect(Released(ticket=s.load("r", "d")))
    _ticket, commands = s.request("r", "e")
    assert [u.adapter for u in unloads(commands)] == ["x"]  # listed: least recently used of all


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
    assert [u.adapter for u in unloads(commands)] == ["a"]
    after = s.machine.statistics().replicas["r"]
    assert (after.queued, after.loading) == (0, ("c",))


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
    _ticket, commands = s.request("r", "d")
    assert [u.adapter for u in unloads(commands)] == ["a"]


def listed(routers: int, limit: int, *names: str) -> Scenario:
    """A machine for one of ``routers`` routers whose replica ``r`` was listed holding ``names``."""
    s = Scenario.configured(routers=routers)
    (cmd,) = s(ReplicaAdded(replica="r", model="base", limit=limit))
    assert isinstance(cmd, ReadListing)
    s.expect(ListingReceived(listing=cmd.listing, adapters=names), MarkMet(replica="r"))
    return s


def test_share_a_victim_another_router_unloaded_first_makes_room_again() -> None:
    s = listed(2, 2, "s1", "s2")
    _ticket, commands = s.request("r", "x")
    (first,) = unloads(commands)
    assert first.adapter == "s1"
    # Not found: another router unloaded s1 first, to load an adapter this router does not see.
    # The replica is one fuller than it looks: x waits for a second victim.
    (second,) = s(UnloadFinished(unload=first.unload, outcome=UnloadOutcome.NOT_FOUND))
    assert isinstance(second, IssueUnload)
    assert second.adapter == "s2"
    (load,) = s(UnloadFinished(unload=second.unload, outcome=UnloadOutcome.UNLOADED))
    assert isinstance(load, IssueLoad)
    assert load.adapter == "x"


def test_share_with_one_router_a_victim_not_found_makes_no_more_room() -> None:
    s = listed(1, 2, "s1", "s2")
    _ticket, commands = s.request("r", "x")
    (first,) = unloads(commands)
    (load,) = s(UnloadFinished(unload=first.unload, outcome=UnloadOutcome.NOT_FOUND))
    assert isinstance(load, IssueLoad)


def test_share_an_adapter_the_engine_lost_counts_until_the_next_listing() -> None:
    s = listed(2, 2, "s1", "s2")
    s.expect(AdapterMissing(replica="r", adapter="s1"))
    # s1's slot is likely another router's now: x evicts s2 rather than take the slot.
    _ticket, commands = s.request("r", "x")
    assert [u.adapter for u in unloads(commands)] == ["s2"]


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

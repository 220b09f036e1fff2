"""One scenario per rule of the machine, named as in lorafleet/_machine.py and SPEC.md."""

from __future__ import annotations

from lorafleet import (
    AdapterMissing,
    Cancelled,
    Fail,
    Fault,
    Grant,
    How,
    IssueLoad,
    IssueUnload,
    LimitSet,
    ListingFailed,
    ListingReceived,
    LoadFinished,
    LoadOutcome,
    ReadListing,
    Released,
    ReplicaAdded,
    ReplicasRemoved,
    ReplicaStatistics,
    Requested,
    TimeAdvanced,
    UnloadFinished,
    UnloadOutcome,
    View,
)
from lorafleet._machine import REPLICA_REMOVED

from scenario import Scenario, loads, unloaded, unloads


def held(s: Scenario, replica: str) -> dict[str, int]:
    return dict(s.machine.statistics().replicas[replica].held)


def test_hit_grants_at_once_and_makes_the_adapter_most_recently_used() -> None:
    s = Scenario.with_replicas(("r", 2))
    a, b = s.load("r", "a"), s.load("r", "b")
    s.expect(Released(a))
    s.expect(Released(b))
    t = s.hit("r", "a")
    assert held(s, "r") == {"a": 1, "b": 0}
    s.expect(Released(t))
    # a was used last, so b is the one to go.
    _ticket, commands = s.request("r", "c")
    assert commands == [IssueUnload(4, "r", "b")]


def test_join_waits_for_the_one_load_and_is_granted_joined() -> None:
    s = Scenario.with_replicas(("r", 2))
    first, commands = s.request("r", "a")
    (load,) = loads(commands)
    second, commands = s.request("r", "a")
    assert commands == []
    third, commands = s.request("r", "a")
    assert commands == []
    s.expect(
        LoadFinished(load.load, LoadOutcome.LOADED),
        Grant(first, How.LOADED),
        Grant(second, How.JOINED),
        Grant(third, How.JOINED),
    )
    assert held(s, "r") == {"a": 3}


def test_wait_unload_then_the_request_is_handled_afresh() -> None:
    s = Scenario.with_replicas(("r", 1))
    a = s.load("r", "a")
    s.expect(Released(a))
    b, commands = s.request("r", "b")
    (unload,) = unloads(commands)
    assert unload.adapter == "a"
    # a is being unloaded: a request for it waits rather than loading it across the unload.
    again, commands = s.request("r", "a")
    assert commands == []
    joined, commands = s.request("r", "a")
    assert commands == []
    # b's load goes out; the waiters are handled afresh: the first starts a load of a (b is
    # loading, so no adapter is idle to make room), the second joins it.
    load_b, load_a = loads(s(unloaded(unload)))
    assert (load_b.adapter, load_a.adapter) == ("b", "a")
    s.expect(
        LoadFinished(load_a.load, LoadOutcome.LOADED), Grant(again, How.LOADED), Grant(joined, How.JOINED)
    )
    s.expect(LoadFinished(load_b.load, LoadOutcome.LOADED), Grant(b, How.LOADED))
    assert held(s, "r") == {"a": 2, "b": 1}


def test_cold_load_without_victims_is_issued_at_once() -> None:
    s = Scenario.with_replicas(("r", 2))
    _ticket, commands = s.request("r", "a", "/lora/a")
    assert commands == [IssueLoad(2, "r", "a", "/lora/a")]


def test_evict_least_recently_used_idle_adapters_until_the_load_fits() -> None:
    s = Scenario.with_replicas(("r", 3))
    x, y, z = s.load("r", "x"), s.load("r", "y"), s.load("r", "z")
    for t in (y, x, z):
        s.expect(Released(t))
    s.expect(LimitSet("base", 2))
    # Lowering the limit takes effect at the next load: two go, y first (least recently used).
    _ticket, commands = s.request("r", "w")
    assert unloads(commands) == [IssueUnload(5, "r", "y"), IssueUnload(6, "r", "x")]
    assert loads(commands) == []  # the load waits for every victim's unload
    # Victims stop counting as held at once.
    assert held(s, "r") == {"z": 0}
    assert s.machine.view(["r"], "y") == View(frozenset(), frozenset())
    s.expect(UnloadFinished(5, UnloadOutcome.UNLOADED))
    # Whatever the outcome of the last victim's unload, the load goes out.
    s.expect(UnloadFinished(6, UnloadOutcome.FAILED, "boom"), IssueLoad(7, "r", "w", "/adapters/w"))


def test_evict_ties_are_broken_by_name() -> None:
    s = Scenario.with_replicas(("r", 2), listed=False)
    # Adapters another router loaded come in one listing: equally old, so by name.
    s.expect(ListingReceived(1, ("zeta", "alpha")))
    _ticket, commands = s.request("r", "new")
    assert unloads(commands) == [IssueUnload(2, "r", "alpha")]


def test_evict_never_takes_an_adapter_in_use_and_goes_over_the_limit_instead() -> None:
    s = Scenario.with_replicas(("r", 1))
    s.load("r", "a")
    ticket, commands = s.request("r", "b")
    assert commands == [IssueLoad(3, "r", "b", "/adapters/b")]
    s.expect(LoadFinished(3, LoadOutcome.LOADED), Grant(ticket, How.LOADED))
    assert held(s, "r") == {"a": 1, "b": 1}
    # A later load brings the replica back under its limit once adapters are idle.
    s.expect(Released(1))
    s.expect(Released(ticket))
    _, commands = s.request("r", "c")
    assert [u.adapter for u in unloads(commands)] == ["a", "b"]


def test_load_outcome_already_loaded_is_a_success() -> None:
    s = Scenario.with_replicas(("r", 2))
    t, _commands = s.request("r", "a")
    s.expect(LoadFinished(2, LoadOutcome.ALREADY_LOADED, "already"), Grant(t, How.LOADED))


def test_load_outcome_failure_wakes_every_waiter_with_its_fault_and_holds_nothing() -> None:
    s = Scenario.with_replicas(("r", 2))
    t1, _ = s.request("r", "a")
    t2, _ = s.request("r", "a")
    s.expect(
        LoadFinished(2, LoadOutcome.ADAPTER_FAULT, "rank 64 > 16"),
        Fail(t1, Fault.ADAPTER, "rank 64 > 16"),
        Fail(t2, Fault.ADAPTER, "rank 64 > 16"),
    )
    assert held(s, "r") == {}
    # A request after the failure starts a new load.
    t3, commands = s.request("r", "a")
    assert commands == [IssueLoad(3, "r", "a", "/adapters/a")]
    s.expect(LoadFinished(3, LoadOutcome.REPLICA_FAULT, "timed out"), Fail(t3, Fault.REPLICA, "timed out"))


def test_unload_outcome_not_found_and_failed_both_leave_the_adapter_gone() -> None:
    s = Scenario.with_replicas(("r", 1))
    s.expect(Released(s.load("r", "a")))
    for outcome, adapter in ((UnloadOutcome.NOT_FOUND, "b"), (UnloadOutcome.FAILED, "c")):
        t, commands = s.request("r", adapter)
        (unload,) = unloads(commands)
        (load,) = loads(s(UnloadFinished(unload.unload, outcome, "x")))
        assert unload.adapter not in held(s, "r")
        s.expect(LoadFinished(load.load, LoadOutcome.LOADED), Grant(t, How.LOADED))
        s.expect(Released(t))
        assert held(s, "r") == {adapter: 0}
    stats = s.machine.statistics()
    assert stats.evictions == {("base", "failed"): 1, ("base", "not_found"): 1}


def test_release_twice_does_nothing_and_release_after_forgetting_does_nothing() -> None:
    s = Scenario.with_replicas(("r", 2))
    t = s.load("r", "a")
    s.expect(Released(t))
    s.expect(Released(t))
    assert held(s, "r") == {"a": 0}
    t2 = s.hit("r", "a")
    s.expect(ReplicasRemoved(("r",)))
    s.expect(Released(t2))


def test_release_makes_an_in_use_adapter_no_victim_until_released() -> None:
    s = Scenario.with_replicas(("r", 1))
    t = s.load("r", "a")
    _, commands = s.request("r", "b")
    assert unloads(commands) == []
    s.expect(Released(t))
    _, commands = s.request("r", "c")
    assert [u.adapter for u in unloads(commands)] == ["a"]


def test_cancel_a_waiter_the_load_goes_on_for_the_others() -> None:
    s = Scenario.with_replicas(("r", 2))
    first, _ = s.request("r", "a")
    second, _ = s.request("r", "a")
    s.expect(Cancelled(first))
    s.expect(LoadFinished(2, LoadOutcome.LOADED), Grant(second, How.JOINED))
    assert held(s, "r") == {"a": 1}


def test_cancel_every_waiter_the_issued_load_still_lands_idle() -> None:
    s = Scenario.with_replicas(("r", 2))
    first, _ = s.request("r", "a")
    s.expect(Cancelled(first))
    s.expect(LoadFinished(2, LoadOutcome.LOADED))
    assert held(s, "r") == {"a": 0}


def test_cancel_a_granted_request_releases_it() -> None:
    s = Scenario.with_replicas(("r", 2))
    t = s.load("r", "a")
    s.expect(Cancelled(t))
    assert held(s, "r") == {"a": 0}
    s.expect(Cancelled(t))  # ended: nothing more


def test_cancel_a_request_waiting_out_an_unload() -> None:
    s = Scenario.with_replicas(("r", 1))
    s.expect(Released(s.load("r", "a")))
    _, commands = s.request("r", "b")
    (unload,) = unloads(commands)
    waiter, _ = s.request("r", "a")
    s.expect(Cancelled(waiter))
    s.expect(unloaded(unload), IssueLoad(4, "r", "b", "/adapters/b"))
    assert s.machine.statistics().waiting == 1


def test_listing_is_read_when_a_replica_is_first_met_and_then_every_interval() -> None:
    s = Scenario()
    s.expect(TimeAdvanced(100.0))
    s.expect(ReplicaAdded("r", "base", 2), ReadListing(1, "r"))
    assert s.machine.next_due() == 130.0
    assert not s.machine.is_met("r")
    s.expect(ListingReceived(1, ()))
    assert s.machine.is_met("r")
    s.expect(TimeAdvanced(129.9))
    s.expect(TimeAdvanced(130.0), ReadListing(2, "r"))
    assert s.machine.next_due() == 160.0
    # Still out when due again: no second listing, the next one waits an interval more.
    s.expect(TimeAdvanced(161.0))
    assert s.machine.next_due() == 191.0


def test_listing_adds_unknown_adapters_as_least_recently_used_of_all() -> None:
    s = Scenario.with_replicas(("r", 3), listed=False)
    s.expect(ListingReceived(1, ()))
    t = s.load("r", "mine")
    s.expect(Released(t))
    s.expect(TimeAdvanced(30.0), ReadListing(3, "r"))
    s.expect(ListingReceived(3, ("mine", "theirs")))
    assert held(s, "r") == {"mine": 0, "theirs": 0}
    s.load("r", "x")
    _, commands = s.request("r", "y")
    assert [u.adapter for u in unloads(commands)] == ["theirs"]


def test_listing_drops_unlisted_idle_adapters_held_before_it_started() -> None:
    s = Scenario.with_replicas(("r", 4))
    old, _busy = s.load("r", "old"), s.load("r", "busy")
    s.expect(Released(old))
    s.expect(TimeAdvanced(30.0), ReadListing(4, "r"))
    # Loaded after the listing started: the listing is older than the load, so it stays.
    s.load("r", "new")
    s.expect(ListingReceived(4, ()))
    assert held(s, "r") == {"busy": 1, "new": 1}


def test_listing_leaves_loading_and_unloading_adapters_to_their_outcome() -> None:
    s = Scenario.with_replicas(("r", 1))
    s.expect(Released(s.load("r", "a")))
    t, commands = s.request("r", "b")
    (unload,) = unloads(commands)
    s.expect(TimeAdvanced(30.0), ReadListing(5, "r"))
    s.expect(ListingReceived(5, ("a",)))  # a's unload is in flight: not held again
    assert held(s, "r") == {}
    s.expect(unloaded(unload), IssueLoad(4, "r", "b", "/adapters/b"))
    s.expect(TimeAdvanced(60.0), ReadListing(6, "r"))
    s.expect(ListingReceived(6, ("b",)))  # b is loading: not held, not counted twice
    assert held(s, "r") == {}
    s.expect(LoadFinished(4, LoadOutcome.LOADED), Grant(t, How.LOADED))
    assert held(s, "r") == {"b": 1}


def test_listing_does_not_bring_back_what_was_dropped_after_it_started() -> None:
    s = Scenario.with_replicas(("r", 1))
    s.expect(Released(s.load("r", "a")))
    s.expect(TimeAdvanced(30.0), ReadListing(3, "r"))
    _t, commands = s.request("r", "b")
    (unload,) = unloads(commands)
    s(unloaded(unload))
    s.expect(ListingReceived(3, ("a",)))  # a was there when the listing started, gone since
    assert "a" not in held(s, "r")


def test_listing_failed_changes_nothing_but_the_replica_counts_as_met() -> None:
    s = Scenario.with_replicas(("r", 2), listed=False)
    s.load("r", "a")
    s.expect(ListingFailed(1, "timed out"))
    assert s.machine.is_met("r")
    assert held(s, "r") == {"a": 1}
    assert s.machine.next_due() == 30.0


def test_forget_drops_an_idle_adapter_the_engine_does_not_have() -> None:
    s = Scenario.with_replicas(("r", 2))
    t = s.load("r", "a")
    s.expect(AdapterMissing("r", "a"))  # in use: its requests report it too, or the listing will
    assert held(s, "r") == {"a": 1}
    s.expect(Released(t))
    s.expect(AdapterMissing("r", "a"))
    assert held(s, "r") == {}
    _, commands = s.request("r", "a")
    assert loads(commands) == [IssueLoad(3, "r", "a", "/adapters/a")]
    s.expect(AdapterMissing("r", "a"))  # loading: left to its outcome
    s.expect(AdapterMissing("nowhere", "a"))


def test_replicas_removed_fail_their_waiters_and_ignore_later_answers() -> None:
    s = Scenario.with_replicas(("r", 1), ("q", 1))
    s.expect(Released(s.load("r", "a")))
    t1, commands = s.request("r", "b")
    (unload,) = unloads(commands)
    t2, _ = s.request("r", "a")  # waits out a's unload
    _t3, commands = s.request("q", "c")
    s.expect(
        ReplicasRemoved(("r", "unknown")),
        Fail(t1, Fault.REPLICA, REPLICA_REMOVED),
        Fail(t2, Fault.REPLICA, REPLICA_REMOVED),
    )
    s.expect(unloaded(unload))  # ignored, and b's load is never issued
    assert "r" not in s.machine.statistics().replicas
    assert s.machine.statistics().replicas["q"].loading == ("c",)


def test_replicas_removed_and_added_back_keep_calls_still_in_flight() -> None:
    s = Scenario.with_replicas(("r", 2))
    t, commands = s.request("r", "a")
    (load,) = loads(commands)
    s.expect(ReplicasRemoved(("r",)), Fail(t, Fault.REPLICA, REPLICA_REMOVED))
    s.expect(ReplicaAdded("r", "base", 2), ReadListing(3, "r"))
    # The old load is still out: a new request joins it instead of crossing it.
    t2, commands = s.request("r", "a")
    assert commands == []
    s.expect(LoadFinished(load.load, LoadOutcome.LOADED), Grant(t2, How.JOINED))


def test_view_says_who_holds_and_who_has_room() -> None:
    s = Scenario.with_replicas(("full", 1), ("loading", 2), ("empty", 2))
    s.load("full", "a")
    s.request("loading", "a")
    assert s.machine.view(["full", "loading", "empty", "unmet"], "a") == View(
        holders=frozenset({"full", "loading"}), with_room=frozenset({"loading", "empty", "unmet"})
    )


def test_statistics_count_loads_evictions_grants_and_what_each_replica_holds() -> None:
    s = Scenario.with_replicas(("r", 1))
    a = s.load("r", "a")
    s.expect(Released(s.hit("r", "a")))
    s.expect(Released(a))
    _t, commands = s.request("r", "b")
    _joined, _ = s.request("r", "b")
    s(unloaded(unloads(commands)[0]))
    s(LoadFinished(4, LoadOutcome.REPLICA_FAULT, "500"))
    stats = s.machine.statistics()
    assert stats.loads == {("base", "loaded"): 1, ("base", "replica_fault"): 1}
    assert stats.evictions == {("base", "unloaded"): 1}
    assert stats.grants == {"hit": 1, "joined": 0, "loaded": 1}
    assert stats.failures == {"replica": 2}
    assert stats.replicas == {
        "r": ReplicaStatistics(model="base", limit=1, met=True, held={}, loading=(), unloading=())
    }
    assert (stats.waiting, stats.leases) == (0, 0)


def test_the_same_events_give_the_same_commands() -> None:
    def play() -> list[object]:
        s = Scenario.with_replicas(("r", 2), ("q", 1))
        for i in range(6):
            s.request("rq"[i % 2], f"a{i % 3}")
        s(TimeAdvanced(31.0))
        s(Requested(100, "q", "zz", "/p"))
        return [step.commands for step in s.steps]

    assert play() == play()


def test_hit_without_a_command_for_a_shells_fast_path() -> None:
    s = Scenario.with_replicas(("r", 2))
    t = s.load("r", "a")
    s.expect(Released(t))
    m = s.machine
    assert m.hit(m.next_ticket, "r", "a")
    assert held(s, "r") == {"a": 1}
    assert m.statistics().grants["hit"] == 1
    ticket = m.next_ticket
    before = m.statistics()
    assert not m.hit(ticket, "r", "cold")  # not held: nothing changed, the request goes the long way
    assert m.statistics() == before
    assert m.request(ticket, "r", "cold", "/c") == [IssueLoad(3, "r", "cold", "/c")]

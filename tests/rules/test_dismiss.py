"""[dismiss] (SPEC.md §3.18): an operator unloads an adapter idle on a replica; anything a request may
run on, or that is coming or going, is refused, changing nothing. And the two queries an operator's
view reads: [demand] and [refuse]'s refusal in force."""

from __future__ import annotations

import pytest

from lorafleet import (
    AdapterChanged,
    AdapterDismissed,
    AdapterPinned,
    Fail,
    Fault,
    Grant,
    How,
    InvalidValueError,
    IssueLoad,
    IssueUnload,
    LoadFinished,
    LoadOutcome,
    NotIdleError,
    RefusalForgotten,
    Released,
    ReplicasRemoved,
    TimeAdvanced,
    UnknownReplicaError,
    UnloadFinished,
    UnloadOutcome,
)

from scenario import Scenario


def test_dismiss_unloads_an_idle_adapter_at_once_and_the_next_request_loads_it_again() -> None:
    s = Scenario.with_replicas(("r", 2))
    s.expect(Released(ticket=s.load("r", "a")))  # load 2
    s.expect(AdapterDismissed(replica="r", adapter="a"), IssueUnload(unload=3, replica="r", adapter="a"))
    assert s.machine.statistics().replicas["r"].unloading == ("a",)
    t2, commands = s.request("r", "a")
    assert commands == []  # [wait-unload]
    s.expect(
        UnloadFinished(unload=3, outcome=UnloadOutcome.UNLOADED),
        IssueLoad(load=4, replica="r", adapter="a", path="/adapters/a"),
    )
    s.expect(LoadFinished(load=4, outcome=LoadOutcome.LOADED), Grant(ticket=t2, how=How.LOADED))


def test_dismiss_takes_the_named_adapter_not_the_least_recently_used_one() -> None:
    s = Scenario.with_replicas(("r", 3))
    s.expect(Released(ticket=s.load("r", "a")))
    s.expect(Released(ticket=s.load("r", "b")))
    s.expect(AdapterDismissed(replica="r", adapter="b"), IssueUnload(unload=4, replica="r", adapter="b"))
    assert dict(s.machine.statistics().replicas["r"].held) == {"a": 0}


def test_dismiss_of_an_adapter_in_use_is_refused_and_changes_nothing_until_its_request_ends() -> None:
    s = Scenario.with_replicas(("r", 2))
    t1 = s.load("r", "a")
    with pytest.raises(NotIdleError, match="1 of this router's requests run on it"):
        s(AdapterDismissed(replica="r", adapter="a"))
    assert s.machine.hit(t1 + 1, replica="r", adapter="a")  # still held, and granted
    s.ticket += 1
    s.expect(Released(ticket=t1))
    with pytest.raises(NotIdleError):
        s(AdapterDismissed(replica="r", adapter="a"))
    s.expect(Released(ticket=t1 + 1))
    s.expect(AdapterDismissed(replica="r", adapter="a"), IssueUnload(unload=3, replica="r", adapter="a"))


def test_dismiss_of_an_adapter_loading_or_being_unloaded_or_not_held_is_refused() -> None:
    s = Scenario.with_replicas(("r", 2))
    with pytest.raises(NotIdleError, match="not held there"):
        s(AdapterDismissed(replica="r", adapter="a"))
    _, (load,) = s.request("r", "a")
    assert isinstance(load, IssueLoad)
    with pytest.raises(NotIdleError, match="loading"):
        s(AdapterDismissed(replica="r", adapter="a"))
    s(LoadFinished(load=load.load, outcome=LoadOutcome.LOADED))
    s.expect(Released(ticket=s.ticket))
    s.expect(AdapterDismissed(replica="r", adapter="a"), IssueUnload(unload=3, replica="r", adapter="a"))
    with pytest.raises(NotIdleError, match="being unloaded"):
        s(AdapterDismissed(replica="r", adapter="a"))


def test_dismiss_of_a_pinned_adapter_is_refused_and_says_to_unpin_it() -> None:
    s = Scenario.with_replicas(("r", 2))
    s.expect(
        AdapterPinned(adapter="p", path="/adapters/p", copies=1, model=None),
        IssueLoad(load=2, replica="r", adapter="p", path="/adapters/p"),
    )
    s.expect(LoadFinished(load=2, outcome=LoadOutcome.LOADED))
    with pytest.raises(NotIdleError, match="pinned: unpin it first"):
        s(AdapterDismissed(replica="r", adapter="p"))


def test_dismiss_of_an_adapter_the_last_reading_names_is_refused() -> None:
    """Another router's requests may run on it: its unload could land under them."""
    s = Scenario.reading(("r", 2))
    s.expect(Released(ticket=s.load("r", "a")))
    s.list_and_read(30.0, "r", ["a"], ["a"])
    with pytest.raises(NotIdleError, match="last reading names it"):
        s(AdapterDismissed(replica="r", adapter="a"))


def test_dismiss_of_an_old_copy_of_a_changed_adapter_is_refused() -> None:
    """[renew] unloads it once its last request ends: not the operator's to take sooner."""
    s = Scenario.with_replicas(("r", 2))
    t1 = s.load("r", "a")
    s.expect(AdapterChanged(adapter="a"))
    with pytest.raises(NotIdleError):
        s(AdapterDismissed(replica="r", adapter="a"))
    s.expect(Released(ticket=t1), IssueUnload(unload=3, replica="r", adapter="a"))


def test_dismiss_of_an_old_copy_only_another_routers_requests_run_on_is_refused() -> None:
    """No request of this router runs on it, but the last reading names it: [renew] waits for a
    reading that does not, and so does the operator."""
    s = Scenario.reading(("r", 2))
    s.expect(Released(ticket=s.load("r", "a")))
    s.list_and_read(30.0, "r", ["a"], ["a"])
    s(AdapterChanged(adapter="a"))
    assert s.machine.statistics().replicas["r"].held == {"a": 0}
    with pytest.raises(NotIdleError, match="old copy"):
        s(AdapterDismissed(replica="r", adapter="a"))


def test_dismiss_on_a_replica_not_in_use_or_of_a_bad_name_is_an_error() -> None:
    s = Scenario.with_replicas(("r", 2), ("gone", 2))
    s.expect(Released(ticket=s.load("gone", "a")))
    s.expect(ReplicasRemoved(replicas=("gone",)))
    with pytest.raises(UnknownReplicaError):
        s(AdapterDismissed(replica="gone", adapter="a"))
    with pytest.raises(UnknownReplicaError):
        s(AdapterDismissed(replica="nowhere", adapter="a"))
    with pytest.raises(UnknownReplicaError):
        s(AdapterDismissed(replica="", adapter=""))  # the replica is checked first
    with pytest.raises(InvalidValueError, match="adapter name must be a non-empty str"):
        s(AdapterDismissed(replica="r", adapter=""))


def test_demand_counts_each_request_and_halves_every_half_life() -> None:
    """[demand]: a hit counts; every ``half_life`` requests all counts halve, rounding down, and a count
    that reaches 0 is forgotten. (A refused request counts too: the refusal test below.)"""
    s = Scenario.with_replicas(("r", 2), half_life=4)
    assert s.machine.demand("a") == 0
    t1 = s.load("r", "a")
    s.hit("r", "a")
    assert s.machine.demand("a") == 2
    s.expect(Released(ticket=t1))
    s.load("r", "b")
    assert (s.machine.demand("a"), s.machine.demand("b")) == (2, 1)
    s.hit("r", "a")  # the fourth request: 3 and 1 halve to 1 and 0
    assert (s.machine.demand("a"), s.machine.demand("b")) == (1, 0)


def test_refusal_is_in_force_with_the_engines_words_until_it_runs_out_or_is_forgotten() -> None:
    s = Scenario.with_replicas(("r", 2), refusal=20.0)
    assert s.machine.refusal("bad") is None
    t1, (load,) = s.request("r", "bad")
    assert isinstance(load, IssueLoad)
    s.expect(
        LoadFinished(load=load.load, outcome=LoadOutcome.ADAPTER_FAULT, message="rank too high"),
        Fail(ticket=t1, fault=Fault.ADAPTER, message="rank too high"),
    )
    refusal = s.machine.refusal("bad")
    assert refusal is not None
    assert (refusal.until, refusal.message) == (20.0, "rank too high")
    t2, commands = s.request("r", "bad")
    assert commands == [Fail(ticket=t2, fault=Fault.ADAPTER, message="rank too high")]  # no call
    assert s.machine.demand("bad") == 2  # [demand]: a refused request counts too
    s.expect(TimeAdvanced(now=20.0))
    assert s.machine.refusal("bad") is None  # run out: a request asks an engine again
    t3, (load,) = s.request("r", "bad")
    assert isinstance(load, IssueLoad)
    s.expect(
        LoadFinished(load=load.load, outcome=LoadOutcome.ADAPTER_FAULT, message="rank too high"),
        Fail(ticket=t3, fault=Fault.ADAPTER, message="rank too high"),
    )
    assert s.machine.refusal("bad") is not None
    s.expect(RefusalForgotten(adapter="bad"))
    assert s.machine.refusal("bad") is None

"""[cancel] (SPEC.md §3.3): a request given up, whether granted or still waiting."""

from __future__ import annotations

from lorafleet import (
    Cancelled,
    Grant,
    How,
    IssueLoad,
    LoadFinished,
    LoadOutcome,
    Released,
)

from .helpers import held
from scenario import Scenario, unloaded, unloads


def test_cancel_a_waiter_the_load_goes_on_for_the_others() -> None:
    s = Scenario.with_replicas(("r", 2))
    first, _ = s.request("r", "a")
    second, _ = s.request("r", "a")
    s.expect(Cancelled(ticket=first))
    s.expect(LoadFinished(load=2, outcome=LoadOutcome.LOADED), Grant(ticket=second, how=How.JOINED))
    assert held(s, "r") == {"a": 1}


def test_cancel_every_waiter_the_issued_load_still_lands_idle() -> None:
    s = Scenario.with_replicas(("r", 2))
    first, _ = s.request("r", "a")
    s.expect(Cancelled(ticket=first))
    s.expect(LoadFinished(load=2, outcome=LoadOutcome.LOADED))
    assert held(s, "r") == {"a": 0}


def test_cancel_a_granted_request_releases_it() -> None:
    s = Scenario.with_replicas(("r", 2))
    t = s.load("r", "a")
    s.expect(Cancelled(ticket=t))
    assert held(s, "r") == {"a": 0}
    s.expect(Cancelled(ticket=t))  # ended: nothing more


def test_cancel_a_request_waiting_out_an_unload() -> None:
    """With headroom 0 the load of b waits for a's unload, and a request for a waits it out too."""
    s = Scenario.with_replicas(("r", 1), headroom=0)
    s.expect(Released(ticket=s.load("r", "a")))
    _, commands = s.request("r", "b")
    (unload,) = unloads(commands)
    waiter, _ = s.request("r", "a")
    s.expect(Cancelled(ticket=waiter))
    s.expect(unloaded(unload), IssueLoad(load=4, replica="r", adapter="b", path="/adapters/b"))
    assert s.machine.statistics().waiting == 1


def test_fault_7_a_request_cancelled_before_its_load_is_issued_does_not_load() -> None:
    """Headroom 0: b's load waits for a's unload before it goes out."""
    s = Scenario.with_replicas(("r", 1), headroom=0)
    s.expect(Released(ticket=s.load("r", "a")))
    t, commands = s.request("r", "b")
    (unload,) = unloads(commands)
    s(Cancelled(ticket=t))
    s.expect(unloaded(unload))  # no IssueLoad: no one wants b any more
    assert s.machine.statistics().replicas["r"].loading == ()
    _t2, commands = s.request("r", "b")
    assert commands == [IssueLoad(load=5, replica="r", adapter="b", path="/adapters/b")]

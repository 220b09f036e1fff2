"""[cancel] (SPEC.md §3.3): a request given up, whether granted or still waiting."""

from __future__ import annotations

from lorafleet import (
    Cancelled,
    Grant,
    How,
    IssueLoad,
    IssueUnload,
    LoadFinished,
    LoadOutcome,
    Released,
)

from .helpers import held
from scenario import Scenario, landed, loads, unloaded, unloads


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
    """A request for a victim waits out its unload, and may go away meanwhile; the load goes on."""
    s = Scenario.with_replicas(("r", 1), headroom=0)
    s.expect(Released(ticket=s.load("r", "a")))
    _b, commands = s.request("r", "b")
    (load,) = loads(commands)
    waiter, commands = s.request("r", "a")  # a is b's victim
    assert commands == []
    s.expect(Cancelled(ticket=waiter))
    (unload,) = unloads(s(landed(load)))
    s.expect(unloaded(unload))  # no one to admit afresh
    assert s.machine.statistics().waiting == 0
    assert held(s, "r") == {"b": 1}


def test_fault_7_a_load_is_never_waiting_to_be_asked_for() -> None:
    """In the seed a request cancelled before its load was asked for (it waited for a victim's unload)
    still had its adapter loaded. Here no load waits for an unload: it goes out as it is decided, and
    a cancel leaves it to land idle, its victims unloaded as for any load."""
    s = Scenario.with_replicas(("r", 1), headroom=0)
    s.expect(Released(ticket=s.load("r", "a")))
    t, commands = s.request("r", "b")
    assert commands == [IssueLoad(load=3, replica="r", adapter="b", path="/adapters/b")]
    s.expect(Cancelled(ticket=t))
    s.expect(
        LoadFinished(load=3, outcome=LoadOutcome.LOADED), IssueUnload(unload=4, replica="r", adapter="a")
    )
    assert held(s, "r") == {"b": 0}

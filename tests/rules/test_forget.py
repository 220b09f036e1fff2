"""[forget] (SPEC.md §3.5): an adapter the engine says it does not have."""

from __future__ import annotations

from lorafleet import (
    AdapterMissing,
    IssueLoad,
    Released,
)

from .helpers import held
from scenario import Scenario, loads, unloads


def test_forget_drops_an_adapter_the_engine_does_not_have_in_use_or_not() -> None:
    s = Scenario.with_replicas(("r", 2))
    t = s.load("r", "a")
    s.expect(AdapterMissing(replica="r", adapter="a"))  # in use, but the engine said it is not there
    assert held(s, "r") == {}
    s.expect(Released(ticket=t))  # a dead lease: nothing to give back
    assert held(s, "r") == {}
    _, commands = s.request("r", "a")
    assert loads(commands) == [IssueLoad(load=3, replica="r", adapter="a", path="/adapters/a")]
    s.expect(AdapterMissing(replica="r", adapter="a"))  # loading: left to its outcome
    s.expect(AdapterMissing(replica="nowhere", adapter="a"))


def test_forget_with_the_ticket_of_a_request_on_an_older_copy_changes_nothing() -> None:
    s = Scenario.with_replicas(("r", 2))
    old = s.load("r", "a")
    s.expect(AdapterMissing(replica="r", adapter="a", ticket=old))  # old's copy is the one held: dropped
    new = s.load("r", "a")
    # A second request on the dropped copy reports late, while new runs on the copy loaded since.
    s.expect(AdapterMissing(replica="r", adapter="a", ticket=old))
    assert held(s, "r") == {"a": 1}
    s.expect(Released(ticket=old))
    s.expect(AdapterMissing(replica="r", adapter="a", ticket=old))  # ended: too late to tell, ignored
    assert held(s, "r") == {"a": 1}
    s.expect(AdapterMissing(replica="r", adapter="a", ticket=new))
    assert held(s, "r") == {}


def test_fault_6_forget_respects_requests_running_on_the_adapter() -> None:
    s = Scenario.with_replicas(("r", 1))
    # A late "no such model" from a request that ran on an older copy of a, reported while a new
    # request runs on a: the seed drops a, and it could then be unloaded under that request. The
    # report names its request's ticket, whose lease is on the older copy: it changes nothing.
    first = s.load("r", "a")
    s(AdapterMissing(replica="r", adapter="a", ticket=first))  # the engine lost the first copy
    s.load("r", "a")
    s(AdapterMissing(replica="r", adapter="a", ticket=first))  # late, about the first copy
    assert s.machine.statistics().replicas["r"].held == {"a": 1}
    _, commands = s.request("r", "b")
    assert unloads(commands) == []

"""[release] (SPEC.md §3.3): the end of a granted request."""

from __future__ import annotations

import lorafleet as lf
from lorafleet import (
    AdapterMissing,
    Cancelled,
    Grant,
    How,
    IssueLoad,
    IssueUnload,
    LoadFinished,
    LoadOutcome,
    Released,
    ReplicasRemoved,
)

from .helpers import held, refused, requested
from scenario import Scenario, landed, loads, unloads


def test_release_twice_does_nothing_and_release_after_forgetting_does_nothing() -> None:
    s = Scenario.with_replicas(("r", 2))
    t = s.load("r", "a")
    s.expect(Released(ticket=t))
    s.expect(Released(ticket=t))
    assert held(s, "r") == {"a": 0}
    t2 = s.hit("r", "a")
    s.expect(ReplicasRemoved(replicas=("r",)))
    s.expect(Released(ticket=t2))


def test_release_makes_an_in_use_adapter_no_victim_until_released() -> None:
    s = Scenario.with_replicas(("r", 1))
    t = s.load("r", "a")
    b, commands = s.request("r", "b")
    s.expect(landed(loads(commands)[0]), Grant(ticket=b, how=How.LOADED))  # a is in use: no victim
    s.expect(Released(ticket=t))
    c, commands = s.request("r", "c")
    commands = s(landed(loads(commands)[0]))
    assert commands[0] == Grant(ticket=c, how=How.LOADED)
    assert [u.adapter for u in unloads(commands)] == ["a"]


def test_release_of_a_ticket_never_requested_below_the_highest_does_nothing() -> None:
    """Tickets from 1 to the highest seen that are neither waiting nor leased count as ended, used
    or skipped: releasing or cancelling one does nothing; 0 and tickets above the highest are refused."""
    s = Scenario.with_replicas(("r", 2))
    s.expect(requested(5, "r", "a"), IssueLoad(load=2, replica="r", adapter="a", path="/adapters/a"))
    s.expect(Released(ticket=3))  # skipped: never requested, below the highest
    s.expect(Cancelled(ticket=4))
    refused(s, Released(ticket=5), lf.UnknownTicketError)  # still waiting: cancel it instead
    refused(s, Released(ticket=6), lf.UnknownTicketError)
    refused(s, Cancelled(ticket=0), lf.UnknownTicketError)
    s.expect(LoadFinished(load=2, outcome=LoadOutcome.LOADED), Grant(ticket=5, how=How.LOADED))
    assert held(s, "r") == {"a": 1}


def test_release_of_a_lease_on_a_dropped_adapter_does_not_make_it_idle() -> None:
    """Releasing the last lease on a dropped entry ends the lease and nothing else: the name does not
    go back to ``idle``, so it is never chosen as a victim."""
    s = Scenario.with_replicas(("r", 1))
    lost = s.load("r", "x")
    s.expect(AdapterMissing(replica="r", adapter="x"))
    other = s.load("r", "y")  # x no longer counts: nothing to settle
    s.expect(Released(ticket=lost))
    s.expect(Released(ticket=other))
    assert held(s, "r") == {"y": 0}
    t, _ = s.request("r", "w")
    s.expect(
        LoadFinished(load=4, outcome=LoadOutcome.LOADED),
        Grant(ticket=t, how=How.LOADED),
        IssueUnload(unload=5, replica="r", adapter="y"),
    )

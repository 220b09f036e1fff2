"""[join] and [wait-unload] (SPEC.md §3.1): a request for an adapter being loaded waits for that load;
one for an adapter being unloaded waits out the unload, then is handled afresh."""

from __future__ import annotations

from lorafleet import (
    Grant,
    How,
    IssueLoad,
    LoadFinished,
    LoadOutcome,
    Released,
)

from .helpers import held
from scenario import Scenario, landed, loads, unloaded, unloads

# -- [join] ----------------------------------------------------------------------------------------


def test_join_waits_for_the_one_load_and_is_granted_joined() -> None:
    s = Scenario.with_replicas(("r", 2))
    first, commands = s.request("r", "a")
    (load,) = loads(commands)
    second, commands = s.request("r", "a")
    assert commands == []
    third, commands = s.request("r", "a")
    assert commands == []
    s.expect(
        LoadFinished(load=load.load, outcome=LoadOutcome.LOADED),
        Grant(ticket=first, how=How.LOADED),
        Grant(ticket=second, how=How.JOINED),
        Grant(ticket=third, how=How.JOINED),
    )
    assert held(s, "r") == {"a": 3}


# -- [wait-unload] ---------------------------------------------------------------------------------


def test_wait_unload_then_the_request_is_handled_afresh() -> None:
    s = Scenario.with_replicas(("r", 1))
    a = s.load("r", "a")
    s.expect(Released(ticket=a))
    b, commands = s.request("r", "b")
    (load_b,) = loads(commands)
    (unload,) = unloads(s(landed(load_b)))  # [settle]: a goes once b has landed
    assert unload.adapter == "a"
    # a is being unloaded: a request for it waits rather than loading it across the unload.
    again, commands = s.request("r", "a")
    assert commands == []
    joined, commands = s.request("r", "a")
    assert commands == []
    # The waiters are handled afresh: the first starts a load of a (b is in use, so nothing is
    # idle to settle to the limit with), the second joins it.
    (load_a,) = s(unloaded(unload))
    assert isinstance(load_a, IssueLoad)
    assert load_a.adapter == "a"
    s.expect(
        landed(load_a),
        Grant(ticket=again, how=How.LOADED),
        Grant(ticket=joined, how=How.JOINED),
    )
    assert held(s, "r") == {"a": 2, "b": 1}
    s.expect(Released(ticket=b))

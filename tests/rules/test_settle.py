"""[settle] (SPEC.md §3.2): a load that went over the line (nothing idle to take as its victim) lands;
then its replica unloads the idle adapters it holds past its line."""

from __future__ import annotations

from lorafleet import (
    Fail,
    Fault,
    Grant,
    How,
    IssueLoad,
    IssueUnload,
    LoadFinished,
    LoadOutcome,
    ReadEngine,
    Released,
)

from .helpers import another_routers, held, read_now
from scenario import Scenario, landed, loads, unloads


def test_settle_a_load_that_went_over_unloads_the_excess_once_it_lands() -> None:
    """[settle] With every adapter in use a cold load takes no victim and goes over the line (no cap
    here); once it has landed, the replica unloads what is idle past its line, least recently used
    first."""
    s = Scenario.with_replicas(("r", 1))
    a = s.load("r", "a")
    b, commands = s.request("r", "b")
    assert commands == [IssueLoad(load=3, replica="r", adapter="b", path="/adapters/b")]
    assert s.machine.statistics().replicas["r"].unloading == ()  # nothing idle: no victim
    s.expect(Released(ticket=a))
    s.expect(
        LoadFinished(load=3, outcome=LoadOutcome.LOADED),
        Grant(ticket=b, how=How.LOADED),
        IssueUnload(unload=4, replica="r", adapter="a"),
    )
    assert held(s, "r") == {"b": 1}


def test_settle_a_failed_load_evicts_nothing() -> None:
    """[settle] Only a load that landed makes room: one that failed leaves what the replica held, even
    over its limit."""
    s = Scenario.with_replicas(("r", 1))
    a = s.load("r", "a")
    s.load("r", "b")  # a is in use: over the limit
    s.expect(Released(ticket=a))
    for outcome, fault in (
        (LoadOutcome.ADAPTER_FAULT, Fault.ADAPTER),
        (LoadOutcome.REPLICA_FAULT, Fault.REPLICA),
    ):
        t, commands = s.request("r", outcome.value)
        s.expect(
            LoadFinished(load=loads(commands)[0].load, outcome=outcome, message="no"),
            Fail(ticket=t, fault=fault, message="no"),
        )
        assert held(s, "r") == {"a": 0, "b": 1}


def test_settle_with_every_adapter_in_use_at_landing_waits_for_the_next_load() -> None:
    """[settle] A replica over its limit with nothing idle keeps its adapters; releases unload nothing,
    and the next load takes every adapter past the limit that is idle then as its victims ([evict])."""
    s = Scenario.with_replicas(("r", 1))
    a = s.load("r", "a")
    b = s.load("r", "b")  # a is in use: nothing to unload
    s.expect(Released(ticket=a))
    s.expect(Released(ticket=b))
    assert held(s, "r") == {"a": 0, "b": 0}
    c, _ = s.request("r", "c")
    s.expect(
        LoadFinished(load=4, outcome=LoadOutcome.LOADED),
        Grant(ticket=c, how=How.LOADED),
        IssueUnload(unload=5, replica="r", adapter="a"),
        IssueUnload(unload=6, replica="r", adapter="b"),
    )


def test_settle_counts_the_adapters_held_not_the_loads_still_out() -> None:
    """[settle] A load that has not landed does not count: it may fail, and then nothing went for it."""
    s = Scenario.with_replicas(("r", 2))
    s.expect(Released(ticket=s.load("r", "a")))
    b, _ = s.request("r", "b")
    c, _ = s.request("r", "c")
    d, _ = s.request("r", "d")  # a held, three loads out
    s.expect(LoadFinished(load=3, outcome=LoadOutcome.LOADED), Grant(ticket=b, how=How.LOADED))
    s.expect(Released(ticket=b))
    s.expect(
        LoadFinished(load=4, outcome=LoadOutcome.LOADED),
        Grant(ticket=c, how=How.LOADED),
        IssueUnload(unload=6, replica="r", adapter="a"),  # one past the limit: b stays while d is out
    )
    s.expect(
        LoadFinished(load=5, outcome=LoadOutcome.LOADED),
        Grant(ticket=d, how=How.LOADED),
        IssueUnload(unload=7, replica="r", adapter="b"),
    )


def over_where_another_router_runs() -> Scenario:
    """r (limit 1) reads its engine: another router runs there; a's request is on, b's load went over
    (the reading b waited for showed nothing idle), and a is idle by the time b lands."""
    s = Scenario.reading(("r", 1))
    a = s.load("r", "a")
    another_routers(s)
    b, commands = s.request("r", "b")
    assert commands == [ReadEngine(read=s.reads["r"], replica="r")]
    (load,) = s.answer_read("r", ["x"])
    assert isinstance(load, IssueLoad)
    s.expect(Released(ticket=a))
    commands = s(landed(load))
    assert commands == [Grant(ticket=b, how=How.LOADED), ReadEngine(read=s.reads["r"], replica="r")]
    assert held(s, "r") == {"a": 0, "b": 1}  # nothing goes before the answer
    return s


def test_settle_where_another_router_runs_waits_for_a_fresh_reading_and_unloads_on_its_answer() -> None:
    """[settle] On a replica whose last reading named another router's adapter, the excess a landed
    load leaves goes only once a fresh reading says which adapters run there."""
    s = over_where_another_router_runs()
    (unload,) = s.answer_read("r", ["x"])
    assert isinstance(unload, IssueUnload)
    assert unload.adapter == "a"


def test_settle_where_another_router_runs_unloads_when_the_read_fails_too() -> None:
    """[settle] A read that gets no answer ends the wait: the excess goes as the standing reading says."""
    s = over_where_another_router_runs()
    (unload,) = s.fail_read("r", "no answer within 5 s")
    assert isinstance(unload, IssueUnload)
    assert unload.adapter == "a"


def test_settle_waits_for_the_read_in_flight_and_sends_no_second() -> None:
    """[settle] A landed load's excess waits for the read already out, and no second read goes."""
    s = over_where_another_router_runs()
    _c, commands = s.request("r", "c")  # c waits for the same read before it takes a victim
    assert commands == []
    (unload, load) = s.answer_read("r", [])
    assert isinstance(unload, IssueUnload)  # the excess, first
    assert unload.adapter == "a"
    assert isinstance(load, IssueLoad)  # then c, with no victim: b is in use
    assert load.adapter == "c"


def test_settle_a_lone_router_unloads_at_once() -> None:
    """[settle] Where the last reading named only this router's requests, no read is awaited."""
    s = Scenario.reading(("r", 1))
    t = s.load("r", "a")
    read_now(s, "r", "a")
    s.expect(Released(ticket=t))
    ticket, commands = s.request("r", "b")
    commands = s(landed(loads(commands)[0]))
    assert commands[0] == Grant(ticket=ticket, how=How.LOADED)
    assert [u.adapter for u in unloads(commands[1:])] == ["a"]
    assert len(commands) == 2

"""Breaking the contract raises a UsageError subclass that names the mistake, and changes nothing."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest

import lorafleet as lf
from lorafleet import AdapterStateMachine, LoadOutcome, Requested, TimeAdvanced, UnloadOutcome

from scenario import Scenario, loads, unloads


def behaves_alike(a: AdapterStateMachine, b: AdapterStateMachine) -> None:
    """Two machines are alike when they report alike and answer the same events alike."""
    assert a.statistics() == b.statistics()
    assert a.next_due() == b.next_due()
    probe: list[lf.Event] = [
        Requested(ticket=1000, replica="r", adapter="a", path="/a"),
        Requested(ticket=1001, replica="r", adapter="fresh", path="/f"),
        TimeAdvanced(now=1000.0),
        lf.Cancelled(ticket=1000),
    ]
    for event in probe:
        assert a.handle(event) == b.handle(event)
    assert a.statistics() == b.statistics()


def scenario() -> Scenario:
    s = Scenario.with_replicas(("r", 2))
    s.load("r", "a")
    s.request("r", "b")
    s(TimeAdvanced(now=5.0))
    return s


CASES: list[tuple[type[lf.UsageError], str, Callable[[AdapterStateMachine], object]]] = [
    (lf.TicketOrderError, "above 2", lambda m: m.request(1, replica="r", adapter="c", path="/c")),
    (lf.TicketOrderError, "must be an int", lambda m: m.request("9", replica="r", adapter="c", path="/c")),  # type: ignore[arg-type]
    (lf.UnknownReplicaError, "'nowhere'", lambda m: m.request(9, replica="nowhere", adapter="c", path="/c")),
    (lf.InvalidValueError, "adapter name", lambda m: m.request(9, replica="r", adapter="", path="/c")),
    (lf.InvalidValueError, "adapter path", lambda m: m.request(9, replica="r", adapter="c", path="")),
    (lf.UnknownTicketError, "still waiting", lambda m: m.release(2)),
    (lf.UnknownTicketError, "no request ever had it", lambda m: m.release(77)),
    (lf.UnknownTicketError, "no request ever had it", lambda m: m.cancel(77)),
    (lf.UnknownOperationError, "load 42", lambda m: m.load_finished(42, LoadOutcome.LOADED)),
    (lf.UnknownOperationError, "load 2 ", lambda m: m.load_finished(2, LoadOutcome.LOADED)),
    (lf.UnknownOperationError, "unload 3", lambda m: m.unload_finished(3, UnloadOutcome.UNLOADED)),
    (lf.UnknownOperationError, "listing 3", lambda m: m.listing_received(3, ())),
    (lf.UnknownOperationError, "listing 1", lambda m: m.listing_failed(1)),
    (lf.InvalidValueError, "LoadOutcome", lambda m: m.load_finished(3, "loaded")),  # type: ignore[arg-type]
    (lf.InvalidValueError, "limit", lambda m: m.set_limit("base", 0)),
    (lf.InvalidValueError, "limit", lambda m: m.add_replica("q", model="base", limit=0)),
    (lf.InvalidValueError, "replica id", lambda m: m.add_replica("", model="base", limit=1)),
    (
        lf.ReplicaConflictError,
        "known with model 'base'",
        lambda m: m.add_replica("r", model="other", limit=2),
    ),
    (lf.ClockWentBackwardsError, "before 5.0", lambda m: m.advance(4.0)),
    (lf.InvalidValueError, "number", lambda m: m.advance(float("nan"))),
]


@pytest.mark.parametrize(("error", "words", "call"), CASES)
def test_usage_error_names_the_mistake_and_changes_nothing(
    error: type[lf.UsageError], words: str, call: Callable[[AdapterStateMachine], object]
) -> None:
    s = scenario()
    before = copy.deepcopy(s.machine)
    with pytest.raises(error, match=words.replace("(", r"\(")):
        call(s.machine)
    behaves_alike(s.machine, before)


def test_a_listing_naming_an_empty_adapter_is_refused_before_anything_changes() -> None:
    s = Scenario.with_replicas(("r", 2), listed=False)
    before = copy.deepcopy(s.machine)
    with pytest.raises(lf.InvalidValueError, match="non-empty"):
        s.machine.listing_received(1, ("ok", ""))
    behaves_alike(s.machine, before)


def test_engine_failures_are_events_not_exceptions() -> None:
    s = Scenario.with_replicas(("r", 1))
    s.load("r", "a")
    s(lf.Released(ticket=1))
    t, commands = s.request("r", "b")
    (unload,) = unloads(commands)
    (load,) = loads(s(lf.UnloadFinished(unload=unload.unload, outcome=UnloadOutcome.FAILED, message="500")))
    assert s(lf.LoadFinished(load=load.load, outcome=LoadOutcome.REPLICA_FAULT, message="refused")) == [
        lf.Fail(ticket=t, fault=lf.Fault.REPLICA, message="refused")
    ]


def test_bad_listing_interval_is_refused() -> None:
    with pytest.raises(lf.InvalidValueError, match="listing_interval"):
        AdapterStateMachine(listing_interval=0)


def test_hit_checks_the_ticket_and_the_replica() -> None:
    s = scenario()
    with pytest.raises(lf.TicketOrderError):
        s.machine.hit(1, replica="r", adapter="a")
    with pytest.raises(lf.UnknownReplicaError):
        s.machine.hit(99, replica="nowhere", adapter="a")

"""Breaking the contract raises a UsageError subclass that names the mistake, and changes nothing."""

from __future__ import annotations

import copy
import math
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
    # Issue 13: each field's type, the error a wrong one gets (SPEC.md §2.1), and booleans, which
    # are never integers or numbers, whatever Python's bool is.
    (lf.TicketOrderError, "above 2", lambda m: m.request(2, replica="r", adapter="c", path="/c")),
    (lf.TicketOrderError, "must be an int", lambda m: m.request(True, replica="r", adapter="c", path="/c")),
    (lf.TicketOrderError, "must be an int", lambda m: m.request(9.0, replica="r", adapter="c", path="/c")),  # type: ignore[arg-type]
    (lf.UnknownReplicaError, "replica 5", lambda m: m.request(9, replica=5, adapter="c", path="/c")),  # type: ignore[arg-type]
    (lf.UnknownReplicaError, "replica ''", lambda m: m.request(9, replica="", adapter="c", path="/c")),
    (lf.InvalidValueError, "adapter path", lambda m: m.request(9, replica="r", adapter="c", path=7)),  # type: ignore[arg-type]
    (lf.UnknownTicketError, "no request ever had it", lambda m: m.release(True)),
    (lf.UnknownTicketError, "no request ever had it", lambda m: m.release(1.0)),  # type: ignore[arg-type]
    (lf.UnknownTicketError, "no request ever had it", lambda m: m.cancel("1")),  # type: ignore[arg-type]
    (lf.UnknownTicketError, "no request ever had it", lambda m: m.release(0)),
    (lf.UnknownTicketError, "no request ever had it", lambda m: m.cancel(3)),
    (lf.UnknownOperationError, "load True", lambda m: m.load_finished(True, LoadOutcome.LOADED)),
    (lf.UnknownOperationError, "load 3.0", lambda m: m.load_finished(3.0, LoadOutcome.LOADED)),  # type: ignore[arg-type]
    (lf.UnknownOperationError, "unload '3'", lambda m: m.unload_finished("3", UnloadOutcome.UNLOADED)),  # type: ignore[arg-type]
    (lf.UnknownOperationError, "listing True", lambda m: m.listing_failed(True)),
    (lf.InvalidValueError, "message", lambda m: m.load_finished(3, LoadOutcome.LOADED, 5)),  # type: ignore[arg-type]
    (lf.InvalidValueError, "message", lambda m: m.load_finished(3, LoadOutcome.LOADED, None)),  # type: ignore[arg-type]
    (lf.InvalidValueError, "replicas must be a list", lambda m: m.handle(lf.ReplicasRemoved(replicas="r"))),  # type: ignore[arg-type]
    (lf.InvalidValueError, "replica ids", lambda m: m.remove_replicas(["r", 5])),  # type: ignore[list-item]
    (lf.InvalidValueError, "replica ids", lambda m: m.remove_replicas(["r", ""])),
    (lf.InvalidValueError, "limit", lambda m: m.add_replica("q", model="base", limit=True)),
    (lf.InvalidValueError, "limit", lambda m: m.add_replica("q", model="base", limit=2.0)),  # type: ignore[arg-type]
    (lf.InvalidValueError, "model", lambda m: m.add_replica("q", model=5, limit=2)),  # type: ignore[arg-type]
    (lf.InvalidValueError, "limit", lambda m: m.set_limit("base", True)),
    (lf.InvalidValueError, "limit", lambda m: m.set_limit("base", 2.0)),  # type: ignore[arg-type]
    (lf.InvalidValueError, "model", lambda m: m.set_limit("", 2)),
    (lf.InvalidValueError, "finite number", lambda m: m.advance(True)),
    (lf.InvalidValueError, "finite number", lambda m: m.advance("6")),  # type: ignore[arg-type]
    (lf.InvalidValueError, "finite number", lambda m: m.advance(None)),  # type: ignore[arg-type]
    (
        lf.InvalidValueError,
        "ticket must be",
        lambda m: m.adapter_missing(replica="r", adapter="a", ticket=True),
    ),
    (
        lf.InvalidValueError,
        "ticket must be",
        lambda m: m.adapter_missing(replica="r", adapter="a", ticket=1.0),  # type: ignore[arg-type]
    ),
    (lf.UnknownTicketError, "ticket 3", lambda m: m.adapter_missing(replica="r", adapter="a", ticket=3)),
    (lf.UnknownTicketError, "ticket 0", lambda m: m.adapter_missing(replica="r", adapter="a", ticket=0)),
    (lf.InvalidValueError, "replica id", lambda m: m.adapter_missing(replica=5, adapter="a")),  # type: ignore[arg-type]
    # Several faults in one event: the first check in SPEC.md §4's order names the error.
    (lf.TicketOrderError, "above 2", lambda m: m.request(1, replica="nowhere", adapter="", path="")),
    (lf.UnknownReplicaError, "'nowhere'", lambda m: m.request(9, replica="nowhere", adapter="", path="")),
    (lf.InvalidValueError, "adapter name", lambda m: m.request(9, replica="r", adapter=5, path=None)),  # type: ignore[arg-type]
    (lf.UnknownTicketError, "still waiting", lambda m: m.release(2)),
    (lf.UnknownOperationError, "load 42", lambda m: m.load_finished(42, LoadOutcome.LOADED, None)),  # type: ignore[arg-type]
    (lf.UnknownOperationError, "unload 2", lambda m: m.unload_finished(2, UnloadOutcome.UNLOADED, None)),  # type: ignore[arg-type]
    (lf.UnknownOperationError, "listing 42", lambda m: m.listing_received(42, "ab")),
    (lf.UnknownOperationError, "listing 1", lambda m: m.listing_received(1, ("",))),
    (lf.UnknownOperationError, "listing 42", lambda m: m.listing_failed(42, None)),  # type: ignore[arg-type]
    (lf.InvalidValueError, "replica id", lambda m: m.adapter_missing(replica="", adapter="a", ticket=99)),
    (lf.InvalidValueError, "adapter name", lambda m: m.adapter_missing(replica="r", adapter="", ticket=99)),
    (
        lf.InvalidValueError,
        "ticket must be",
        lambda m: m.adapter_missing(replica="nowhere", adapter="a", ticket="1"),  # type: ignore[arg-type]
    ),
    (lf.InvalidValueError, "limit", lambda m: m.add_replica("r", model="other", limit=0)),
    (lf.InvalidValueError, "model", lambda m: m.add_replica("r", model="", limit=True)),
    (lf.InvalidValueError, "replica id", lambda m: m.add_replica("", model=5, limit=0)),  # type: ignore[arg-type]
    (lf.InvalidValueError, "finite number", lambda m: m.advance(False)),
    (lf.InvalidValueError, "LoadOutcome", lambda m: m.handle(lf.LoadFinished(load=3, outcome="exploded"))),  # type: ignore[arg-type]
    (lf.InvalidValueError, "LoadOutcome", lambda m: m.load_finished(3, UnloadOutcome.UNLOADED)),  # type: ignore[arg-type]
    (lf.UnknownOperationError, "read 99", lambda m: m.reading_failed(99)),
    (lf.UnknownOperationError, "read 3 ", lambda m: m.reading_received(3, ())),  # a load's number
    (lf.UnknownOperationError, "read '3'", lambda m: m.reading_received("3", None)),  # type: ignore[arg-type]
    (lf.UnknownOperationError, "read 1 ", lambda m: m.reading_failed(1, None)),  # type: ignore[arg-type]
    (lf.TicketOrderError, "above 2", lambda m: m.route(2, adapter="c", path="/c")),
    (lf.InvalidValueError, "adapter name", lambda m: m.route(9, adapter="", path="/c")),
    (lf.InvalidValueError, "adapter path", lambda m: m.route(9, adapter="c", path=None)),  # type: ignore[arg-type]
    (lf.InvalidValueError, "model", lambda m: m.route(9, adapter="c", path="/c", model="")),
    (
        lf.InvalidValueError,
        "exclude",
        lambda m: m.handle(lf.Routed(ticket=9, adapter="c", path="/c", exclude="r")),  # type: ignore[arg-type]
    ),
    (lf.InvalidValueError, "excluded replica", lambda m: m.route(9, adapter="c", path="/c", exclude=[""])),
    (lf.InvalidValueError, "replica id", lambda m: m.served_elsewhere("", ["r"])),
    (
        lf.InvalidValueError,
        "failed must be a list",
        lambda m: m.handle(lf.ServedElsewhere(replica="r", failed="r")),  # type: ignore[arg-type]
    ),
    (lf.InvalidValueError, "failed replica ids", lambda m: m.served_elsewhere("r", ["r", 5])),  # type: ignore[list-item]
    (lf.InvalidValueError, "adapter must be", lambda m: m.forget_refusal("")),
    (lf.InvalidValueError, "adapter must be", lambda m: m.forget_refusal(5)),  # type: ignore[arg-type]
    # A routed request's clock (SPEC.md [route]): checked after the other fields, the time unmoved.
    (lf.ClockWentBackwardsError, "before 5.0", lambda m: m.route(9, adapter="c", path="/c", now=4.0)),
    (lf.InvalidValueError, "finite number or null", lambda m: m.route(9, adapter="c", path="/c", now=True)),
    (
        lf.InvalidValueError,
        "finite number or null",
        lambda m: m.route(9, adapter="c", path="/c", now=math.inf),
    ),
    (lf.TicketOrderError, "above 2", lambda m: m.route(2, adapter="c", path="/c", now=4.0)),
    (lf.InvalidValueError, "adapter name", lambda m: m.route(9, adapter="", path="/c", now=4.0)),
    (lf.InvalidValueError, "on must be a bool", lambda m: m.stand_by(0)),  # type: ignore[arg-type]
    (lf.InvalidValueError, "on must be a bool", lambda m: m.stand_by(None)),  # type: ignore[arg-type]
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
    """A failed unload of the victim b's landing let go, then a failed load of c."""
    s = Scenario.with_replicas(("r", 1), headroom=0)
    s.load("r", "a")
    s(lf.Released(ticket=1))
    t, commands = s.request("r", "b")
    (load,) = loads(commands)
    (unload,) = unloads(s(lf.LoadFinished(load=load.load, outcome=LoadOutcome.LOADED)))
    assert s(lf.UnloadFinished(unload=unload.unload, outcome=UnloadOutcome.FAILED, message="500")) == []
    s(lf.Released(ticket=t))
    t, commands = s.request("r", "c")
    (load,) = loads(commands)
    assert s(lf.LoadFinished(load=load.load, outcome=LoadOutcome.REPLICA_FAULT, message="refused")) == [
        lf.Fail(ticket=t, fault=lf.Fault.REPLICA, message="refused")
    ]


def test_bad_listing_interval_is_refused() -> None:
    with pytest.raises(lf.InvalidValueError, match="listing_interval"):
        AdapterStateMachine(listing_interval=0)


@pytest.mark.parametrize("routers", [0, -1, 1.0, True, "2", None])
def test_share_routers_not_an_int_of_at_least_1_is_refused(routers: object) -> None:
    with pytest.raises(lf.InvalidValueError, match="routers") as raised:
        AdapterStateMachine(routers=routers)  # type: ignore[arg-type]
    assert raised.value.field == "routers"


def test_hit_checks_the_ticket_and_the_replica() -> None:
    s = scenario()
    with pytest.raises(lf.TicketOrderError):
        s.machine.hit(1, replica="r", adapter="a")
    with pytest.raises(lf.UnknownReplicaError):
        s.machine.hit(99, replica="nowhere", adapter="a")

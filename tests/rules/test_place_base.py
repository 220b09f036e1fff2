"""[place-base] (SPEC.md §3.12): where a request for the base model itself goes."""

from __future__ import annotations

import pytest

from lorafleet import InvalidValueError, ReplicaAdded, ReplicaFailed, TimeAdvanced

from .helpers import read_each
from scenario import Scenario


def test_place_base_takes_the_least_busy_replica_of_the_model() -> None:
    s = Scenario.with_replicas(("r0", 2), ("r1", 2), ("r2", 2))
    s.request("r0", "a")  # a load in flight there: a request on r0
    s.request("r1", "b")
    assert s.machine.place_base("base") == "r2"
    assert s.machine.place_base("base", load={"r2": 2}) in {"r0", "r1"}  # the router's own requests
    assert s.machine.place_base("base", exclude=["r2"], load={"r0": 1}) == "r1"
    assert s.machine.place_base("other") is None


def test_place_base_equal_replicas_take_turns() -> None:
    """[place-base] Ties go round the model's replicas in id order, from the one ``turn`` names."""
    s = Scenario.with_replicas(("r1", 2), ("r0", 2), ("r2", 2))
    assert [s.machine.place_base("base", turn=t) for t in range(5)] == ["r0", "r1", "r2", "r0", "r1"]
    # An excluded replica keeps its number: the turn passes to the next one.
    assert s.machine.place_base("base", turn=1, exclude=["r1"]) == "r2"
    assert s.machine.place_base("base", turn=-1) == "r2"


def test_place_base_passes_over_an_avoided_replica_unless_the_router_knows_it_healthy() -> None:
    s = Scenario.with_replicas(("r0", 2), ("r1", 2))
    s.expect(ReplicaFailed(replica="r0", message="LoRA is off"))
    assert s.machine.place_base("base") == "r1"
    assert s.machine.place_base("base", turn=0, healthy=["r0"]) == "r0"
    s.expect(TimeAdvanced(now=5.0))  # its backoff over
    assert s.machine.place_base("base", turn=0) == "r0"


def test_place_base_needs_no_listing() -> None:
    """[place-base] A replica takes base-model requests before its first listing says what it holds."""
    s = Scenario.with_replicas(("r0", 2), ("r1", 2))
    s(ReplicaAdded(replica="r2", model="base", limit=2))
    assert not s.machine.is_met("r2")
    assert s.machine.place_base("base", load={"r0": 1, "r1": 1}) == "r2"


def test_place_base_counts_the_other_routers_requests_as_the_last_reading_showed_them() -> None:
    """[place-base] Busy is [load]'s: the engine's running and waiting, this router's own less."""
    s = Scenario.reading(("r0", 2), ("r1", 2))
    assert s.machine.place_base("base", turn=0) == "r0"
    read_each(s, 30.0, r0={"adapters": [], "running": 2, "waiting": 0})
    assert s.machine.place_base("base", turn=0) == "r1"
    assert s.machine.place_base("base", turn=0, load={"r1": 3}) == "r0"


def test_place_base_checks_its_model_and_turn() -> None:
    s = Scenario.with_replicas(("r0", 2))
    with pytest.raises(InvalidValueError, match="model"):
        s.machine.place_base("")
    with pytest.raises(InvalidValueError, match="turn"):
        s.machine.place_base("base", turn=1.0)  # type: ignore[arg-type]

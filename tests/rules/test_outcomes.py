"""[load-outcome] and [unload-outcome] (SPEC.md §3.2): what an engine's answer to a load or an unload
does; and, on the wire, which outcome an answer of vLLM's is."""

from __future__ import annotations

import json

import pytest

import lorafleet as lf
from lorafleet import (
    Fail,
    Fault,
    Grant,
    How,
    IssueLoad,
    IssueUnload,
    ListingFailed,
    ListingReceived,
    LoadFinished,
    LoadOutcome,
    ReadListing,
    Released,
    ReplicaAdded,
    ReplicasRemoved,
    ReplicaStatistics,
    TimeAdvanced,
    UnloadFinished,
    UnloadOutcome,
    vllm,
)
from lorafleet._machine import REPLICA_REMOVED

from .helpers import held, refused, requested
from scenario import Scenario, landed, loads, unloads


def worker_failed(reason: str, status: int = 500) -> bytes:
    message = (
        f"Call to add_lora method failed: Worker failed with error '{reason}', please check the stack trace "
        "above for the root cause"
    )
    return json.dumps({"error": {"message": message, "type": "InternalServerError", "code": status}}).encode()


WORKER_FAILURES = [
    ("LoRA rank 64 is greater than max_lora_rank 16.", Fault.ADAPTER),
    ("Loading lora x failed: No adapter found for /adapters/x", Fault.ADAPTER),
    ("While loading /a, expected target modules in {'q'} but received {'z'}.", Fault.ADAPTER),
    ("/adapters/x doesn't contain tensors", Fault.ADAPTER),
    ("CUDA out of memory. Tried to allocate 20.00 MiB", Fault.REPLICA),
    ("EngineCore encountered an issue.", Fault.REPLICA),
    ("RuntimeError: NCCL communicator was aborted", Fault.REPLICA),
]


# -- [load-outcome] --------------------------------------------------------------------------------


def test_load_outcome_already_loaded_is_a_success() -> None:
    s = Scenario.with_replicas(("r", 2))
    t, _commands = s.request("r", "a")
    s.expect(
        LoadFinished(load=2, outcome=LoadOutcome.ALREADY_LOADED, message="already"),
        Grant(ticket=t, how=How.LOADED),
    )


def test_load_outcome_failure_wakes_every_waiter_with_its_fault_and_holds_nothing() -> None:
    s = Scenario.with_replicas(("r", 2))
    t1, _ = s.request("r", "a")
    t2, _ = s.request("r", "a")
    s.expect(
        LoadFinished(load=2, outcome=LoadOutcome.ADAPTER_FAULT, message="rank 64 > 16"),
        Fail(ticket=t1, fault=Fault.ADAPTER, message="rank 64 > 16"),
        Fail(ticket=t2, fault=Fault.ADAPTER, message="rank 64 > 16"),
    )
    assert held(s, "r") == {}
    # A request after a replica's fault starts a new load.
    t3, commands = s.request("r", "b")
    assert commands == [IssueLoad(load=3, replica="r", adapter="b", path="/adapters/b")]
    s.expect(
        LoadFinished(load=3, outcome=LoadOutcome.REPLICA_FAULT, message="timed out"),
        Fail(ticket=t3, fault=Fault.REPLICA, message="timed out"),
    )
    _, commands = s.request("r", "b")
    assert loads(commands) == [IssueLoad(load=4, replica="r", adapter="b", path="/adapters/b")]


def test_load_outcome_failure_without_a_message_names_the_adapter_and_replica_as_they_are() -> None:
    """An empty failure message becomes ``the load of '<adapter>' on '<replica>' failed``, the names
    written as they are, whatever quotes or backslashes they hold."""
    s = Scenario.with_replicas(("o'brien", 2))
    t1, _ = s.request("o'brien", "it's")
    t2, _ = s.request("o'brien", 'say "hi"\\now')
    s.expect(
        LoadFinished(load=2, outcome=LoadOutcome.ADAPTER_FAULT, message=""),
        Fail(ticket=t1, fault=Fault.ADAPTER, message="the load of 'it's' on 'o'brien' failed"),
    )
    s.expect(
        LoadFinished(load=3, outcome=LoadOutcome.REPLICA_FAULT),
        Fail(ticket=t2, fault=Fault.REPLICA, message="the load of 'say \"hi\"\\now' on 'o'brien' failed"),
    )


def test_load_outcome_for_a_removed_replica_holds_nothing() -> None:
    """A load answered after its replica was removed is counted and nothing more: the adapter does
    not become held, not even while a running request keeps the replica, which a re-add then shows."""
    s = Scenario.with_replicas(("r", 2))
    running = s.load("r", "x")
    t, _ = s.request("r", "a")
    s.expect(ReplicasRemoved(replicas=("r",)), Fail(ticket=t, fault=Fault.REPLICA, message=REPLICA_REMOVED))
    s.expect(LoadFinished(load=3, outcome=LoadOutcome.LOADED))
    assert s.machine.statistics().loads == {("base", "loaded"): 2}
    s.expect(ReplicaAdded(replica="r", model="base", limit=2), ReadListing(listing=4, replica="r"))
    assert held(s, "r") == {"x": 1}
    assert s.machine.hit(3, replica="r", adapter="a") is False
    s.expect(requested(3, "r", "a"), IssueLoad(load=5, replica="r", adapter="a", path="/adapters/a"))
    # Once nothing keeps it, a removed replica is forgotten, and a late answer cannot reach it either.
    s.expect(ReplicasRemoved(replicas=("r",)), Fail(ticket=3, fault=Fault.REPLICA, message=REPLICA_REMOVED))
    s.expect(Released(ticket=running))
    s.expect(ListingFailed(listing=4))
    s.expect(LoadFinished(load=5, outcome=LoadOutcome.LOADED))
    s.expect(ReplicaAdded(replica="r", model="base", limit=2), ReadListing(listing=6, replica="r"))
    assert held(s, "r") == {}


def test_load_outcome_after_a_re_add_with_another_model_counts_under_the_new_model() -> None:
    """An answer is counted under the model its replica has when the answer comes."""
    s = Scenario.with_replicas(("r", 2))
    t, _ = s.request("r", "a")
    s.expect(ReplicasRemoved(replicas=("r",)), Fail(ticket=t, fault=Fault.REPLICA, message=REPLICA_REMOVED))
    s.expect(ReplicaAdded(replica="r", model="other", limit=1), ReadListing(listing=3, replica="r"))
    s.expect(LoadFinished(load=2, outcome=LoadOutcome.LOADED))  # no one waits: it lands idle
    stats = s.machine.statistics()
    assert stats.loads == {("other", "loaded"): 1}
    assert stats.replicas["r"] == ReplicaStatistics(
        model="other", limit=1, met=False, held={"a": 0}, loading=(), unloading=()
    )


def test_load_outcome_and_listing_for_a_removed_replica_are_checked_before_being_ignored() -> None:
    """Answers a removed replica's calls get are checked like any other (a message that is not a
    string, a listed name that is not one) before they are counted and ignored."""
    s = Scenario.with_replicas(("r", 2))
    t, _ = s.request("r", "a")
    s.expect(TimeAdvanced(now=30.0), ReadListing(listing=3, replica="r"))
    s.expect(ReplicasRemoved(replicas=("r",)), Fail(ticket=t, fault=Fault.REPLICA, message=REPLICA_REMOVED))
    refused(s, LoadFinished(load=2, outcome=LoadOutcome.LOADED, message=None), lf.InvalidValueError)  # type: ignore[arg-type]
    refused(s, ListingReceived(listing=3, adapters=("x", "")), lf.InvalidValueError)
    refused(s, ListingReceived(listing=3, adapters="x"), lf.InvalidValueError)  # type: ignore[arg-type]
    s.expect(ListingReceived(listing=3, adapters=("x",)))  # abandoned: accepted, nothing else
    s.expect(LoadFinished(load=2, outcome=LoadOutcome.LOADED))
    refused(s, ListingFailed(listing=3), lf.UnknownOperationError)  # answered already
    s.expect(ReplicaAdded(replica="r", model="base", limit=2), ReadListing(listing=4, replica="r"))
    assert s.machine.statistics().replicas["r"].held == {}


# -- [unload-outcome] ------------------------------------------------------------------------------


def test_unload_outcome_not_found_and_failed_both_leave_the_adapter_gone() -> None:
    s = Scenario.with_replicas(("r", 1))
    s.expect(Released(ticket=s.load("r", "a")))
    for outcome, adapter in ((UnloadOutcome.NOT_FOUND, "b"), (UnloadOutcome.FAILED, "c")):
        t, commands = s.request("r", adapter)
        (load,) = loads(commands)
        (unload,) = unloads(s(landed(load)))
        s.expect(UnloadFinished(unload=unload.unload, outcome=outcome, message="x"))
        assert held(s, "r") == {adapter: 1}
        s.expect(Released(ticket=t))
        assert held(s, "r") == {adapter: 0}
    stats = s.machine.statistics()
    assert stats.evictions == {("base", "failed"): 1, ("base", "not_found"): 1}


# -- the wire: which outcome an answer of vLLM's is, and whose fault -------------------------------


@pytest.mark.parametrize(("reason", "fault"), WORKER_FAILURES, ids=[r[:24] for r, _ in WORKER_FAILURES])
def test_a_worker_failure_is_the_adapters_fault_only_when_its_words_say_the_adapter_is_wrong(
    reason: str, fault: Fault
) -> None:
    s = Scenario.with_replicas(("r", 2))
    t, commands = s.request("r", "x")
    (load,) = loads(commands)
    event = vllm.answer_event(load, 500, worker_failed(reason))
    s.expect(event, Fail(ticket=t, fault=fault, message=event.message))


def test_an_unload_answered_not_found_by_any_vllm_is_a_success() -> None:
    s = Scenario.with_replicas(("r", 1))
    s.expect(Released(ticket=s.load("r", "a")))
    flat = {"object": "error", "message": "The lora adapter 'a' cannot be found.", "code": 400}
    _t, commands = s.request("r", "b")
    (unload,) = unloads(s(LoadFinished(load=loads(commands)[0].load, outcome=LoadOutcome.LOADED)))
    event = vllm.answer_event(unload, 400, json.dumps(flat).encode())  # vLLM 0.6 says it with a 400
    assert event.outcome is UnloadOutcome.NOT_FOUND
    s.expect(event)
    assert held(s, "r") == {"b": 1}
    assert s.machine.statistics().evictions == {("base", "not_found"): 1}


def test_a_load_that_got_no_answer_is_the_replicas_fault() -> None:
    s = Scenario.with_replicas(("r", 2))
    t, commands = s.request("r", "a")
    (load,) = loads(commands)
    event = vllm.failure_event(load, "timed out")
    s.expect(event, Fail(ticket=t, fault=Fault.REPLICA, message=event.message))
    unload = IssueUnload(unload=9, replica="r", adapter="a")
    assert vllm.failure_event(unload, "timed out").outcome is UnloadOutcome.FAILED

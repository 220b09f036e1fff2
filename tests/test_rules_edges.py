"""The edges of the rules: where a small slip in the machine would pass every scenario of test_rules.py.

Each scenario sits on one line a rule draws (what an older listing may drop, which of a removed
replica's answers still count, what the ``hit`` fast path moves, whose fault a worker's failure is)
and is named for the side of it the machine must stay on.
"""

from __future__ import annotations

import json

import pytest

from lorafleet import (
    AdapterMissing,
    Cancelled,
    Fail,
    Fault,
    Grant,
    How,
    IssueLoad,
    IssueUnload,
    LimitSet,
    ListingReceived,
    LoadFinished,
    LoadOutcome,
    ReadListing,
    Released,
    ReplicaAdded,
    ReplicasRemoved,
    TicketOrderError,
    TimeAdvanced,
    UnloadOutcome,
    vllm,
)
from lorafleet._machine import REPLICA_REMOVED

from scenario import Scenario, loads, unloaded, unloads


def held(s: Scenario, replica: str) -> dict[str, int]:
    return dict(s.machine.statistics().replicas[replica].held)


def listing_due(s: Scenario, now: float) -> ReadListing:
    (listing,) = s(TimeAdvanced(now=now))
    assert isinstance(listing, ReadListing)
    return listing


def removed(ticket: int) -> Fail:
    return Fail(ticket=ticket, fault=Fault.REPLICA, message=REPLICA_REMOVED)


# -- [listing] ----------------------------------------------------------------------------------------


def test_listing_drops_an_adapter_held_before_it_started_that_went_idle_while_it_was_out() -> None:
    s = Scenario.with_replicas(("r", 2))
    t = s.load("r", "a")
    listing = listing_due(s, 30.0)  # served while a request runs on a
    s.expect(Released(ticket=t))  # a goes idle before the answer comes
    s.expect(ListingReceived(listing=listing.listing, adapters=()))
    assert held(s, "r") == {}
    _t, commands = s.request("r", "a")
    assert loads(commands) == [IssueLoad(load=4, replica="r", adapter="a", path="/adapters/a")]


def test_listing_keeps_an_adapter_that_became_held_after_it_started_even_once_idle() -> None:
    s = Scenario.with_replicas(("r", 2))
    listing = listing_due(s, 30.0)  # served before a was loaded
    s.expect(Released(ticket=s.load("r", "a")))
    s.expect(ListingReceived(listing=listing.listing, adapters=()))
    assert held(s, "r") == {"a": 0}


def test_listing_does_not_bring_back_an_adapter_whose_unload_ended_while_it_was_out() -> None:
    s = Scenario.with_replicas(("r", 1))
    s.expect(Released(ticket=s.load("r", "a")))
    t, commands = s.request("r", "b")
    (load,) = loads(commands)
    commands = s(LoadFinished(load=load.load, outcome=LoadOutcome.LOADED))
    assert commands[0] == Grant(ticket=t, how=How.LOADED)
    (unload,) = unloads(commands)  # [settle]: a goes once b has landed
    listing = listing_due(s, 30.0)  # the engine still lists a: its unload has not gone through
    s.expect(unloaded(unload))
    s.expect(ListingReceived(listing=listing.listing, adapters=("a", "b")))
    assert held(s, "r") == {"b": 1}


def test_listing_does_not_bring_back_an_adapter_the_engine_said_it_lacks_while_it_was_out() -> None:
    s = Scenario.with_replicas(("r", 2))
    s.expect(Released(ticket=s.load("r", "a")))
    listing = listing_due(s, 30.0)
    s.expect(AdapterMissing(replica="r", adapter="a"))
    s.expect(ListingReceived(listing=listing.listing, adapters=("a",)))
    assert held(s, "r") == {}


def test_listing_additions_go_first_in_name_order_whatever_order_the_engine_lists_them() -> None:
    s = Scenario.with_replicas(("r", 4))
    s.expect(Released(ticket=s.load("r", "mine")))
    listing = listing_due(s, 30.0)
    s.expect(ListingReceived(listing=listing.listing, adapters=("zeta", "mine", "alpha")))
    s.expect(LimitSet(model="base", limit=1))
    t, commands = s.request("r", "new")
    commands = s(LoadFinished(load=loads(commands)[0].load, outcome=LoadOutcome.LOADED))
    assert commands[0] == Grant(ticket=t, how=How.LOADED)
    assert [u.adapter for u in unloads(commands)] == ["alpha", "zeta", "mine"]
    assert [u.unload for u in unloads(commands)] == [5, 6, 7]


# -- [replicas] ---------------------------------------------------------------------------------------


def test_replicas_removed_fail_their_waiters_in_ticket_order_whatever_each_waits_on() -> None:
    """Headroom 0: b's load waits for a's unload, so a request can wait on each kind of thing."""
    s = Scenario.with_replicas(("q", 1), ("r", 1), headroom=0)
    q1, _ = s.request("q", "c")  # q's load of c is out
    s.expect(Released(ticket=s.load("r", "a")))
    b1, commands = s.request("r", "b")  # a's unload goes out; b's load waits for it
    assert [u.adapter for u in unloads(commands)] == ["a"]
    a1, _ = s.request("r", "a")  # waits out a's unload
    b2, _ = s.request("r", "b")  # joins b's load, after a1 arrived
    s.expect(ReplicasRemoved(replicas=("r", "q")), removed(q1), removed(b1), removed(a1), removed(b2))
    assert s.machine.statistics().waiting == 0


def test_a_removed_replicas_late_answers_are_counted_and_do_nothing_else() -> None:
    """Headroom 0: b's load waits for a's unload, which is answered after the removal."""
    s = Scenario.with_replicas(("r", 1), headroom=0)
    s.expect(Released(ticket=s.load("r", "a")))
    t, commands = s.request("r", "b")
    (unload,) = unloads(commands)
    s.expect(ReplicasRemoved(replicas=("r",)), removed(t))
    s.expect(unloaded(unload))  # b's load is never issued
    stats = s.machine.statistics()
    assert stats.evictions == {("base", "unloaded"): 1}
    assert stats.replicas == {}
    assert (stats.waiting, stats.leases) == (0, 0)
    # Nothing was left out: the replica is forgotten, and added again it starts afresh.
    s.expect(ReplicaAdded(replica="r", model="base", limit=1), ReadListing(listing=5, replica="r"))


def test_a_removed_replica_is_kept_until_its_last_call_is_answered() -> None:
    s = Scenario.with_replicas(("r", 2))
    t1, commands = s.request("r", "a")
    t2, more = s.request("r", "b")
    (load_a,), (load_b,) = loads(commands), loads(more)
    s.expect(ReplicasRemoved(replicas=("r",)), removed(t1), removed(t2))
    s.expect(LoadFinished(load=load_a.load, outcome=LoadOutcome.LOADED))
    assert s.machine.statistics().loads == {("base", "loaded"): 1}
    # b's load is still out: the replica added back keeps it, and a request joins it.
    s.expect(ReplicaAdded(replica="r", model="base", limit=2), ReadListing(listing=4, replica="r"))
    t3, commands = s.request("r", "b")
    assert commands == []
    s.expect(LoadFinished(load=load_b.load, outcome=LoadOutcome.LOADED), Grant(ticket=t3, how=How.JOINED))
    assert held(s, "r") == {"b": 1}


def test_a_listing_asked_before_a_removal_is_ignored_after_the_replica_is_added_back() -> None:
    s = Scenario.with_replicas(("r", 2), listed=False)
    s.expect(ReplicasRemoved(replicas=("r",)))
    s.expect(ReplicaAdded(replica="r", model="base", limit=2), ReadListing(listing=2, replica="r"))
    s.expect(ListingReceived(listing=1, adapters=("old",)))
    assert not s.machine.is_met("r")
    assert held(s, "r") == {}
    s(ListingReceived(listing=2, adapters=("new",)))
    assert s.machine.is_met("r")
    assert held(s, "r") == {"new": 0}


# -- [hit], the fast path ------------------------------------------------------------------------------


def test_hit_moves_the_ticket_the_lru_order_and_the_counts_as_a_requested_hit_does() -> None:
    s = Scenario.with_replicas(("r", 2))
    a, b = s.load("r", "a"), s.load("r", "b")
    s.expect(Released(ticket=a))
    s.expect(Released(ticket=b))
    m = s.machine
    t = m.next_ticket
    assert m.hit(t, replica="r", adapter="a")
    assert m.next_ticket == t + 1
    with pytest.raises(TicketOrderError):
        m.request(t, replica="r", adapter="c", path="/adapters/c")
    stats = m.statistics()
    assert (stats.grants["hit"], stats.leases, held(s, "r")) == (1, 1, {"a": 1, "b": 0})
    # a is in use: no victim, even though it was idle longer than b.
    s.ticket = t
    s.expect(Released(ticket=t))
    # Its release makes a the most recently used: b goes first, once c has landed ([settle]).
    c, commands = s.request("r", "c")
    s.expect(
        LoadFinished(load=loads(commands)[0].load, outcome=LoadOutcome.LOADED),
        Grant(ticket=c, how=How.LOADED),
        IssueUnload(unload=5, replica="r", adapter="b"),
    )


def test_hit_is_only_for_a_held_adapter_not_one_being_loaded() -> None:
    s = Scenario.with_replicas(("r", 2))
    first, _ = s.request("r", "a")
    m = s.machine
    ticket = m.next_ticket
    assert not m.hit(ticket, replica="r", adapter="a")
    s.ticket = ticket - 1
    joined, commands = s.request("r", "a")
    assert (joined, commands) == (ticket, [])
    s.expect(
        LoadFinished(load=2, outcome=LoadOutcome.LOADED),
        Grant(ticket=first, how=How.LOADED),
        Grant(ticket=joined, how=How.JOINED),
    )
    assert m.hit(m.next_ticket, replica="r", adapter="a")
    assert held(s, "r") == {"a": 3}


def test_hit_after_a_cancel_counts_once_and_its_release_is_its_own() -> None:
    s = Scenario.with_replicas(("r", 1))
    t = s.load("r", "a")
    m = s.machine
    fast = m.next_ticket
    assert m.hit(fast, replica="r", adapter="a")
    s.ticket = fast
    s.expect(Cancelled(ticket=t))
    assert held(s, "r") == {"a": 1}
    s.expect(Released(ticket=fast))
    assert held(s, "r") == {"a": 0}
    assert m.statistics().grants == {"hit": 1, "joined": 0, "loaded": 1}


# -- the wire: whose fault a worker's failure is --------------------------------------------------------


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

"""[health], [blame] and [refuse] (SPEC.md §3.8): failing replicas, requests that make engines fail,
and adapters an engine refused."""

from __future__ import annotations

from lorafleet import (
    Fail,
    Fault,
    IssueLoad,
    ListingFailed,
    ListingReceived,
    LoadFinished,
    LoadOutcome,
    Placed,
    Placement,
    ReadListing,
    RefusalForgotten,
    ReplicaFailed,
    ServedElsewhere,
    TimeAdvanced,
)

from scenario import Scenario, loads

# -- [health] --------------------------------------------------------------------------------------


def test_health_avoids_a_failing_replica_twice_as_long_each_time_until_it_answers() -> None:
    s = Scenario.with_replicas(("r0", 2), ("r1", 2))
    assert s.machine.place("c") == Placement(replica="r1", placed=Placed.FREE)  # by rendezvous hash
    _, commands = s.request("r1", "c")
    (load,) = loads(commands)
    s.expect(
        LoadFinished(load=load.load, outcome=LoadOutcome.REPLICA_FAULT, message="refused"),
        Fail(ticket=1, fault=Fault.REPLICA, message="refused"),
    )
    assert s.machine.place("c") == Placement(replica="r0", placed=Placed.FREE)
    assert s.machine.view(["r0", "r1"], "c").with_room == {"r0"}  # answering nothing is not room
    assert s.machine.statistics().replicas["r1"].failing_until == 5.0
    s.expect(TimeAdvanced(now=5.0))
    # Back after 5 s: a candidate again (r0 wins now only because it has served fewer requests).
    assert s.machine.place("c", exclude={"r0"}) == Placement(replica="r1", placed=Placed.FREE)
    s.expect(ReplicaFailed(replica="r1", message="no answer to a completion"))
    assert s.machine.statistics().replicas["r1"].failing_until == 15.0  # 10 s this time
    s.expect(ReplicaFailed(replica="r0"))
    assert s.machine.place("c") == Placement(replica=None, placed=None)
    s.expect(
        TimeAdvanced(now=30.0), ReadListing(listing=4, replica="r0"), ReadListing(listing=5, replica="r1")
    )
    s.expect(ListingReceived(listing=5, adapters=()))  # an answer: healthy, the count starts over
    s.expect(ReplicaFailed(replica="r1"))
    assert s.machine.statistics().replicas["r1"].failing_until == 35.0
    s.expect(ListingFailed(listing=4, message="timed out"))  # r0's second failure in a row
    assert s.machine.statistics().replicas["r0"].failing_until == 40.0


# -- [blame]: a server error is the request's fault when a second replica answers it so too --------


def test_blame_a_second_replicas_server_error_is_the_requests() -> None:
    """[blame] A 5xx from the first replica a request tries is that replica's to answer for (try
    another); one from a second replica is the request's (answer it; try no more)."""
    s = Scenario.with_replicas(("r0", 2), ("r1", 2), ("r2", 2))
    blame = s.machine.blame
    assert blame("r0") is Fault.REPLICA
    assert blame("r1", ["r0"]) is Fault.REQUEST
    assert blame("r0", ["r0"]) is Fault.REPLICA  # the same replica again says nothing of the request
    assert blame("r2", ["r0", "r1"]) is Fault.REQUEST


def test_blame_only_a_replica_that_failed_what_another_served() -> None:
    """[blame] ``served_elsewhere`` is a failure of each replica that answered the request with a 5xx
    (once each, in name order), never of the one that served it nor of a replica not in use; a request
    no replica served blames none."""
    s = Scenario.with_replicas(("r0", 2), ("r1", 2), ("r2", 2))
    s.expect(ServedElsewhere(replica="r2", failed=("r1", "r0", "r1", "r2", "gone")))
    replicas = s.machine.statistics().replicas
    assert (replicas["r0"].failing_until, replicas["r1"].failing_until) == (5.0, 5.0)
    assert replicas["r2"].failing_until is None
    assert s.machine.place("a").replica == "r2"
    s.expect(ServedElsewhere(replica="r2", failed=("r1",)))  # a second failure in a row: 10 s
    assert s.machine.statistics().replicas["r1"].failing_until == 10.0
    s.expect(
        TimeAdvanced(now=30.0),
        *[ReadListing(listing=n, replica=r) for n, r in ((4, "r0"), (5, "r1"), (6, "r2"))],
    )
    s.expect(ListingReceived(listing=5, adapters=()))  # an answer: r1 is healthy again
    assert s.machine.statistics().replicas["r1"].failing_until is None


# -- [refuse] --------------------------------------------------------------------------------------


def test_refuse_an_adapter_the_engine_refused_at_once_until_its_record_expires() -> None:
    s = Scenario.with_replicas(("r", 2), ("q", 2))
    t1, _ = s.request("r", "typo")
    s.expect(
        LoadFinished(load=3, outcome=LoadOutcome.ADAPTER_FAULT, message="No adapter found at /typo"),
        Fail(ticket=t1, fault=Fault.ADAPTER, message="No adapter found at /typo"),
    )
    # Every replica would refuse it: no call, the engine's words again, on any replica.
    t2, _ = s.request("q", "typo")
    assert s.steps[-1].commands == [Fail(ticket=t2, fault=Fault.ADAPTER, message="No adapter found at /typo")]
    s.expect(
        TimeAdvanced(now=899.0), ReadListing(listing=4, replica="q"), ReadListing(listing=5, replica="r")
    )
    s.request("r", "typo")
    assert isinstance(s.steps[-1].commands[0], Fail)
    s.expect(TimeAdvanced(now=900.0))
    _, commands = s.request("r", "typo")  # the record expired: it is tried again
    assert loads(commands) == [IssueLoad(load=6, replica="r", adapter="typo", path="/adapters/typo")]


# -- [forgive] -------------------------------------------------------------------------------------


def test_forgive_a_forgotten_refusal_asks_the_engine_again_at_once() -> None:
    """The folder was fixed: the next request loads, long before the refusal would have run out."""
    s = Scenario.with_replicas(("r", 2))
    t1, _ = s.request("r", "typo")
    s.expect(
        LoadFinished(load=2, outcome=LoadOutcome.ADAPTER_FAULT, message="No adapter found at /typo"),
        Fail(ticket=t1, fault=Fault.ADAPTER, message="No adapter found at /typo"),
    )
    s.expect(RefusalForgotten(adapter="typo"))
    _, commands = s.request("r", "typo")
    assert loads(commands) == [IssueLoad(load=3, replica="r", adapter="typo", path="/adapters/typo")]


def test_forgive_names_one_adapter_or_none_for_every_one() -> None:
    """Forgetting one refusal keeps the others; null forgets them all. An adapter never refused is
    no error, and changes nothing."""
    s = Scenario.with_replicas(("r", 4))
    for name, load in (("a", 2), ("b", 3)):
        t, _ = s.request("r", name)
        s.expect(
            LoadFinished(load=load, outcome=LoadOutcome.ADAPTER_FAULT, message=f"bad {name}"),
            Fail(ticket=t, fault=Fault.ADAPTER, message=f"bad {name}"),
        )
    s.expect(RefusalForgotten(adapter="never-refused"))
    s.expect(RefusalForgotten(adapter="a"))
    t, _ = s.request("r", "b")
    assert s.steps[-1].commands == [Fail(ticket=t, fault=Fault.ADAPTER, message="bad b")]
    s.expect(RefusalForgotten(adapter=None))
    _, commands = s.request("r", "b")
    assert [load.adapter for load in loads(commands)] == ["b"]

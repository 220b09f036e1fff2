"""[place]'s promises, over random fleets: always a candidate, a holder that is not busy before a cold
load, the same answer for the same state, the answer SPEC §3.12 gives read literally (the model's
``place``), and the same answer for routers that saw the same engines in another order.

Each example builds a fleet from a random program (replicas, listings, requests, answers, releases,
failures) played on a real machine and on the model, then asks ``place`` about every adapter with
random exclusions and load figures.
"""

from __future__ import annotations

import copy

from hypothesis import given, note
from hypothesis import strategies as st

from lorafleet import (
    AdapterStateMachine,
    Command,
    Event,
    Grant,
    IssueLoad,
    IssueUnload,
    ListingReceived,
    LoadFinished,
    LoadOutcome,
    Placed,
    ReadListing,
    Released,
    ReplicaAdded,
    ReplicaFailed,
    Requested,
    UnloadFinished,
    UnloadOutcome,
)

import profiles  # noqa: F401 - registers and loads the Hypothesis profiles
from model import Model

REPLICAS = ("r0", "r1", "r2", "r3")
ADAPTERS = ("a0", "a1", "a2", "a3", "a4", "a5")

actions = st.lists(
    st.tuples(
        st.sampled_from(["request", "answer", "release", "fail"]), st.integers(0, 63), st.integers(0, 63)
    ),
    max_size=40,
)
settings_ = st.fixed_dictionaries(
    {
        "concurrency": st.one_of(st.none(), st.integers(1, 4)),
        "headroom": st.one_of(st.none(), st.integers(0, 2)),
        "overflow": st.integers(0, 2),
        "half_life": st.sampled_from([500, 2, 3]),
    }
)


def build(
    config: dict[str, int | None], limits: list[int], models: list[str], program: list[tuple[str, int, int]]
) -> tuple[AdapterStateMachine, Model]:
    """A machine that has run ``program`` against engines that do as asked, and the model beside it."""
    m = AdapterStateMachine(**config)  # type: ignore[arg-type]
    model = Model(**config)  # type: ignore[arg-type]
    out: dict[int, IssueLoad | IssueUnload] = {}
    granted: list[int] = []

    def send(event: Event) -> list[Command]:
        commands = m.handle(event)
        assert commands == model.handle(event), event
        return commands

    def take(commands: list[Command]) -> None:
        for c in commands:
            if isinstance(c, IssueLoad):
                out[c.load] = c
            elif isinstance(c, IssueUnload):
                out[c.unload] = c
            elif isinstance(c, Grant):
                granted.append(c.ticket)
            elif isinstance(c, ReadListing):
                take(send(ListingReceived(listing=c.listing, adapters=())))

    for rid, limit, of in zip(REPLICAS, limits, models, strict=True):
        take(send(ReplicaAdded(replica=rid, model=of, limit=limit)))
    for kind, a, b in program:
        if kind == "request":
            replica, adapter = REPLICAS[a % len(REPLICAS)], ADAPTERS[b % len(ADAPTERS)]
            take(send(Requested(ticket=m.next_ticket, replica=replica, adapter=adapter, path="/p")))
        elif kind == "answer" and out:
            op = sorted(out)[a % len(out)]
            call = out.pop(op)
            if isinstance(call, IssueLoad):
                take(send(LoadFinished(load=op, outcome=LoadOutcome.LOADED)))
            else:
                take(send(UnloadFinished(unload=op, outcome=UnloadOutcome.UNLOADED)))
        elif kind == "release" and granted:
            take(send(Released(ticket=granted.pop(a % len(granted)))))
        elif kind == "fail":
            take(send(ReplicaFailed(replica=REPLICAS[a % len(REPLICAS)])))
    m.check_invariants()
    return m, model


@given(
    config=settings_,
    limits=st.lists(st.integers(1, 3), min_size=4, max_size=4),
    models=st.lists(st.sampled_from(["m", "m", "n"]), min_size=4, max_size=4),
    program=actions,
    exclude=st.sets(st.sampled_from(REPLICAS)),
    load=st.dictionaries(st.sampled_from(REPLICAS), st.integers(0, 5)),
    model=st.sampled_from([None, "m", "n"]),
)
def test_placement_is_a_candidate_prefers_an_idle_holder_and_is_a_pure_function(
    config: dict[str, int | None],
    limits: list[int],
    models: list[str],
    program: list[tuple[str, int, int]],
    exclude: set[str],
    load: dict[str, int],
    model: str | None,
) -> None:
    m, oracle = build(config, limits, models, program)
    stats = m.statistics()
    before = copy.deepcopy(stats)
    avoided = {rid for rid, r in stats.replicas.items() if r.failing_until is not None}
    candidates = {
        rid
        for rid, r in stats.replicas.items()
        if rid not in exclude and rid not in avoided and (model is None or r.model == model)
    }
    for adapter in ADAPTERS:
        placement = m.place(adapter, model=model, exclude=exclude, load=load)
        note(f"{adapter}: {placement}")
        assert placement == m.place(adapter, model=model, exclude=set(exclude), load=dict(load))
        assert placement == oracle.place(adapter, model, exclude, load), "SPEC §3.12 says otherwise"
        assert m.place(adapter) == oracle.place(adapter), adapter
        if not candidates:
            assert placement.replica is None
            continue
        assert placement.replica in candidates
        holders = {
            rid
            for rid in candidates
            if adapter in stats.replicas[rid].held or adapter in stats.replicas[rid].loading
        }
        concurrency = config["concurrency"]
        idle_holders = {
            rid
            for rid in holders
            if concurrency is None or stats.replicas[rid].in_flight + load.get(rid, 0) < concurrency
        }
        if idle_holders:
            # A holder that is not busy is always preferred to a cold load.
            assert placement.placed in (Placed.HELD, Placed.LOADING)
            assert placement.replica in idle_holders
        if placement.placed in (Placed.HELD, Placed.LOADING):
            assert placement.replica in holders
    assert m.statistics() == before  # a query changes nothing


@given(
    limits=st.lists(st.integers(1, 3), min_size=4, max_size=4),
    listed=st.lists(st.sets(st.sampled_from(ADAPTERS)), min_size=4, max_size=4),
    order=st.permutations(range(4)),
)
def test_routers_that_saw_the_same_engines_in_another_order_place_alike(
    limits: list[int], listed: list[set[str]], order: list[int]
) -> None:
    """Independent routers agree without talking: the answer depends on the state, not on its history."""

    def router(sequence: list[int]) -> AdapterStateMachine:
        m = AdapterStateMachine()
        for i in sequence:
            (listing,) = m.handle(ReplicaAdded(replica=REPLICAS[i], model="m", limit=limits[i]))
            assert isinstance(listing, ReadListing)
            m.handle(ListingReceived(listing=listing.listing, adapters=tuple(sorted(listed[i]))))
        return m

    first, second = router([0, 1, 2, 3]), router(order)
    for adapter in (*ADAPTERS, "cold"):
        assert first.place(adapter) == second.place(adapter), adapter

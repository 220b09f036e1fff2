"""[share]'s promise, over random interleavings: R routers made with ``routers=R`` on one engine never
take it past the bound SPEC.md §3.14 states.

Each example plays R machines against one simulated engine (a set of adapter names) with one replica.
The routers read their listings together, from the engine as it is then, with no call out; between
listings each one's requests, answers and releases come in any order. The engine answers every call
as vLLM would: a load of a name it has is ``already_loaded``, an unload of a name it lacks
``not_found``.
"""

from __future__ import annotations

from hypothesis import given, target
from hypothesis import strategies as st

from lorafleet import (
    AdapterStateMachine,
    Command,
    Grant,
    IssueLoad,
    IssueUnload,
    ListingReceived,
    LoadFinished,
    LoadOutcome,
    ReadListing,
    Released,
    ReplicaAdded,
    Requested,
    UnloadFinished,
    UnloadOutcome,
)

import profiles  # noqa: F401 - registers and loads the Hypothesis profiles

ADAPTERS = tuple(f"a{i}" for i in range(8))
INTERVAL = 30.0

actions = st.lists(
    st.tuples(
        st.sampled_from(["request"] * 3 + ["answer"] * 3 + ["release", "listing"]),
        st.integers(0, 3),
        st.integers(0, 7),
    ),
    min_size=20,
    max_size=80,
)


class Router:
    """One router: its machine, its calls out, its granted requests."""

    def __init__(self, routers: int, headroom: int) -> None:
        self.machine = AdapterStateMachine(routers=routers, headroom=headroom, listing_interval=INTERVAL)
        self.out: dict[int, IssueLoad | IssueUnload] = {}
        self.granted: list[int] = []

    def take(self, commands: list[Command], engine: dict[str, None]) -> None:
        for c in commands:
            if isinstance(c, IssueLoad):
                self.out[c.load] = c
            elif isinstance(c, IssueUnload):
                self.out[c.unload] = c
            elif isinstance(c, Grant):
                self.granted.append(c.ticket)
            elif isinstance(c, ReadListing):
                listed = tuple(engine)
                self.take(self.machine.handle(ListingReceived(listing=c.listing, adapters=listed)), engine)

    def answer(self, index: int, engine: dict[str, None]) -> None:
        op = sorted(self.out)[index % len(self.out)]
        call = self.out.pop(op)
        if isinstance(call, IssueLoad):
            outcome = LoadOutcome.ALREADY_LOADED if call.adapter in engine else LoadOutcome.LOADED
            engine[call.adapter] = None
            self.take(self.machine.handle(LoadFinished(load=op, outcome=outcome)), engine)
        else:
            gone = UnloadOutcome.UNLOADED if call.adapter in engine else UnloadOutcome.NOT_FOUND
            engine.pop(call.adapter, None)
            self.take(self.machine.handle(UnloadFinished(unload=op, outcome=gone)), engine)


def play(routers: int, limit: int, headroom: int, program: list[tuple[str, int, int]]) -> int:
    """Play ``program`` with ``routers`` routers; raise AssertionError past the bound.

    Returns:
        The closest the engine came to the bound (0: at it), for Hypothesis to aim at.
    """
    closest = -limit - routers * (headroom + 1)
    engine: dict[str, None] = {}
    fleet = [Router(routers, headroom) for _ in range(routers)]
    for router in fleet:
        router.take(router.machine.handle(ReplicaAdded(replica="r", model="m", limit=limit)), engine)
    now = 0.0
    story: list[str] = []
    for kind, a, b in program:
        router = fleet[a % routers]
        if kind == "request":
            ticket = router.machine.next_ticket
            adapter = ADAPTERS[b % len(ADAPTERS)]
            event = Requested(ticket=ticket, replica="r", adapter=adapter, path=f"/{adapter}")
            router.take(router.machine.handle(event), engine)
        elif kind == "answer" and router.out:
            router.answer(b, engine)
        elif kind == "release" and router.granted:
            ticket = router.granted.pop(b % len(router.granted))
            router.take(router.machine.handle(Released(ticket=ticket)), engine)
        elif kind == "listing":
            # Every call is answered first: a load still out when the listings are read is in its
            # own router's count only, and the bound would rise by one for it (SPEC.md §3.14).
            for _ in range(1000):
                if not any(each.out for each in fleet):
                    break
                next(each for each in fleet if each.out).answer(b, engine)
            else:
                raise AssertionError("answering every call gives calls without end")
            now += INTERVAL
            for each in fleet:
                each.take(each.machine.advance(now), engine)
        bound = limit + routers - 1 + routers * headroom
        story.append(f"{kind} {a % routers} {b}: engine {sorted(engine)}")
        assert len(engine) <= bound, "\n".join([*story, f"bound {bound}"])
        closest = max(closest, len(engine) - bound)
    for router in fleet:
        router.machine.check_invariants()
    return closest


@given(
    routers=st.integers(2, 3),
    limit=st.integers(1, 4),
    headroom=st.integers(0, 1),
    program=actions,
)
def test_share_routers_never_take_a_replica_past_the_bound(
    routers: int, limit: int, headroom: int, program: list[tuple[str, int, int]]
) -> None:
    target(play(routers, limit, headroom, program))

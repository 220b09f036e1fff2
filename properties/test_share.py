"""[share]'s promise, over random interleavings: R routers made with ``routers=R`` on one engine never
take it past the bound SPEC.md §3.14 states.

Each example plays R machines against one simulated engine (a set of adapter names) with one replica.
The routers read their listings together, from the engine as it is then, with no call out; between
listings each one's requests, answers and releases come in any order. The engine answers every call
as vLLM would: a load of a name it has is ``already_loaded``, an unload of a name it lacks
``not_found``.

What is bounded is what the engine holds as the routers count it: with the adapters the loads out
are adding, without those the routers are removing (their victims, whose unloads go out once the
load that took their room lands, and the unloads out). The engine lists more names for as long as a
victim's or a [settle] unload has not been answered, since no load waits for one
(``SETTLE_UNLOAD_OUT``); vLLM's memory holds no more, as it drops one adapter for each it loads
(SPEC.md §3.16). The bound is ``max(c, limit + R - 1 + R * headroom)`` for ``c`` adapters at the last
listing, plus one in an interval in which some unload was answered ``not_found`` (a victim another
router had unloaded first, after the load that took its room went out: ``VICTIM_TAKEN``), or while a
router's victim is one another router has unloaded already (``VICTIM_GONE``).
"""

from __future__ import annotations

from hypothesis import example, given, target
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

# Two stories past ``limit + R - 1 + R * headroom`` on the engine itself, which the property's
# first version took for the bound (Hypothesis found them only with thousands of examples).
# Nothing is out after the last listing's answers, yet the engine holds 5 of a bound of 4: router 1
# takes a1 as the victim of a4 while router 0 takes it as the victim of a5; both loads go out at
# once, and of the two unloads of a1 that follow them the second is answered not_found (SPEC.md
# §3.14's second exception, the one place the machine knowingly goes past the bound).
VICTIM_TAKEN = (
    2,
    3,
    0,
    [
        ("request", 0, 1),
        ("request", 1, 0),
        ("listing", 0, 0),
        ("request", 0, 0),
        ("request", 0, 3),
        ("request", 0, 5),
        ("request", 1, 2),
        ("request", 1, 4),
        ("release", 0, 0),
        ("listing", 0, 0),
    ],
)
# Router 0 takes a0 as the victim of a3, and its unload of a0 is answered; router 1, which saw a0
# idle, takes it as the victim of a2 meanwhile: with a2 and a4 loading, the engine as router 1 counts
# it holds 4 of a bound of 3 before router 1's own unload of a0 (answered not_found) goes out. SPEC.md
# §3.14's second exception from the moment a0 is gone (an example kept from a run the check's first
# version failed: it allowed the exception only once the not_found answer had come).
VICTIM_GONE = (
    2,
    2,
    0,
    [
        ("request", 0, 0),
        ("request", 0, 1),
        ("request", 0, 1),
        ("request", 0, 1),
        ("request", 0, 3),
        ("listing", 0, 0),
        ("request", 1, 4),
        ("answer", 0, 0),
        ("release", 0, 0),
        *[("request", 0, 0)] * 8,
        ("request", 1, 2),
        ("answer", 0, 0),
        ("answer", 0, 0),
    ],
)
# Each router takes the other's adapter, idle as far as it knows, as the victim of its first load,
# and goes over its line with its second (headroom 1, nothing idle left); a victim's unload goes out
# once its load has landed, no load waits for it: the engine names 6 of a bound of 5 while a0 and a1
# are on their way out, 4 as the routers count it (its memory holds no more than that, SPEC §3.16).
SETTLE_UNLOAD_OUT = (
    2,
    2,
    1,
    [
        ("request", 0, 0),
        ("request", 1, 1),
        ("listing", 0, 0),
        ("request", 0, 4),
        ("answer", 0, 0),
        ("request", 0, 5),
        ("request", 1, 2),
        ("answer", 0, 1),
        ("answer", 1, 0),
        ("request", 1, 3),
        ("answer", 1, 1),
    ],
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

    def answer(self, index: int, engine: dict[str, None]) -> int:
        """Answer one call out, as the engine would; 1 for an unload answered ``not_found``, else 0."""
        op = sorted(self.out)[index % len(self.out)]
        call = self.out.pop(op)
        if isinstance(call, IssueLoad):
            outcome = LoadOutcome.ALREADY_LOADED if call.adapter in engine else LoadOutcome.LOADED
            engine[call.adapter] = None
            self.take(self.machine.handle(LoadFinished(load=op, outcome=outcome)), engine)
            return 0
        else:
            gone = UnloadOutcome.UNLOADED if call.adapter in engine else UnloadOutcome.NOT_FOUND
            engine.pop(call.adapter, None)
            self.take(self.machine.handle(UnloadFinished(unload=op, outcome=gone)), engine)
            return int(gone is UnloadOutcome.NOT_FOUND)


def check(
    routers: int,
    limit: int,
    headroom: int,
    fleet: list[Router],
    engine: dict[str, None],
    listed: int,
    taken: int,
    story: list[str],
) -> int:
    """Raise AssertionError when the engine, as the routers count it, is past SPEC.md §3.14's bound.

    Returns:
        How far it is from the bound (0: at it).
    """
    calls = [call for each in fleet for call in each.out.values()]
    adding = {call.adapter for call in calls if isinstance(call, IssueLoad)}
    # Each router's unloading: its unloads out, and its victims whose loads are out. A victim two
    # routers took makes room for one load only: the other is SPEC.md §3.14's second exception.
    unloading = [name for each in fleet for name in each.machine.statistics().replicas["r"].unloading]
    removing = set(unloading)
    counted = len((engine.keys() | adding) - removing)
    # A victim already gone from the engine was unloaded by another router first: its room is the
    # second exception's too, from then on, not only once its own unload is answered not_found.
    gone = any(name not in engine for name in removing)
    taken = max(taken, len(unloading) - len(removing), int(gone))
    bound = max(listed, limit + routers - 1 + routers * headroom) + taken
    assert counted <= bound, "\n".join(
        [*story, f"counted {counted} (adding {sorted(adding)}, removing {sorted(removing)}), bound {bound}"]
    )
    return counted - bound


def play(
    routers: int,
    limit: int,
    headroom: int,
    program: list[tuple[str, int, int]],
    held: list[int] | None = None,
) -> int:
    """Play ``program`` with ``routers`` routers; raise AssertionError past the bound.

    ``held``, if given, gets how many adapters the engine itself held after each step.

    Returns:
        The closest the engine came to the bound (0: at it), for Hypothesis to aim at.
    """
    closest = -limit - routers * (headroom + 1)
    engine: dict[str, None] = {}
    listed = 0  # what the engine held at the last listing (c)
    taken = 0  # 1 once an unload was answered not_found since the last listing
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
            taken = max(taken, router.answer(b, engine))
        elif kind == "release" and router.granted:
            ticket = router.granted.pop(b % len(router.granted))
            router.take(router.machine.handle(Released(ticket=ticket)), engine)
        elif kind == "listing":
            # Every call is answered first: a load still out when the listings are read is in its
            # own router's count only, and the bound would rise by one for it (SPEC.md §3.14).
            for _ in range(1000):
                if not any(each.out for each in fleet):
                    break
                taken = max(taken, next(each for each in fleet if each.out).answer(b, engine))
            else:
                raise AssertionError("answering every call gives calls without end")
            # The interval ends with the calls answered: what they left counts in it.
            closest = max(closest, check(routers, limit, headroom, fleet, engine, listed, taken, story))
            listed, taken = len(engine), 0
            now += INTERVAL
            for each in fleet:
                each.take(each.machine.advance(now), engine)
        story.append(f"{kind} {a % routers} {b}: engine {sorted(engine)}")
        if held is not None:
            held.append(len(engine))
        closest = max(closest, check(routers, limit, headroom, fleet, engine, listed, taken, story))
    for router in fleet:
        router.machine.check_invariants()
    return closest


@example(*VICTIM_TAKEN)
@example(*VICTIM_GONE)
@example(*SETTLE_UNLOAD_OUT)
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


def test_share_stories_past_the_engine_bound_are_at_the_counted_one() -> None:
    """Both stories take the engine itself past ``limit + R - 1 + R * headroom``; the first reaches
    the bound as counted only with its not_found allowance, the second stays under it."""
    for (routers, limit, headroom, program), closest in ((VICTIM_TAKEN, 0), (SETTLE_UNLOAD_OUT, -1)):
        held: list[int] = []
        assert play(routers, limit, headroom, program, held) == closest
        assert max(held) == limit + routers - 1 + routers * headroom + 1

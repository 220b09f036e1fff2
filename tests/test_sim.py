"""The fleet simulator: determinism, Belady's MIN, the simulated replica's rules, traces and flags."""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

import lorafleet
import lorafleet_sim as ls
from lorafleet import (
    AdapterStateMachine,
    Assign,
    Command,
    Event,
    IssueLoad,
    ListingReceived,
    LoadFinished,
    LoadOutcome,
    ReadListing,
    Released,
    ReplicaAdded,
    Requested,
    Routed,
)
from lorafleet_sim import POLICIES, VARIANTS, Fleet, Simulation, Synthetic, Workload

SIM = Path(__file__).resolve().parent.parent / "sim"
SMALL = Synthetic(adapters=30, skew=1.0, rate=30.0, service=0.5, requests=1500, replicas=4)
SMALL_FLEET = Fleet(replicas=4, memory=3, concurrency=4, load_time=0.2)


# -- determinism -------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", list(POLICIES))
def test_same_seed_same_figures(policy: str) -> None:
    first = ls.simulate(SMALL.generate(7), SMALL_FLEET, POLICIES[policy], seed=7)
    again = ls.simulate(SMALL.generate(7), SMALL_FLEET, POLICIES[policy], seed=7)
    assert first == again
    other = ls.simulate(SMALL.generate(8), SMALL_FLEET, POLICIES[policy], seed=8)
    assert other != first


def test_same_seed_same_workload_and_options_change_only_their_draws() -> None:
    assert SMALL.generate(3) == SMALL.generate(3)
    plain = SMALL.generate(3)
    shifted = Synthetic(adapters=30, skew=1.0, rate=30.0, service=0.5, requests=1500, replicas=4, shift=True)
    moved = shifted.generate(3)
    assert moved.times == plain.times
    assert moved.durations == plain.durations
    assert moved.adapters[:750] == plain.adapters[:750]
    assert moved.adapters[750:] != plain.adapters[750:]


# -- Belady's MIN against exhaustive search ----------------------------------------------------


def exhaustive(adapters: Sequence[str], capacities: Sequence[int]) -> int:
    """The fewest loads over every way of choosing what to keep, request by request."""
    best: dict[frozenset[str], int] = {frozenset(): 0}
    for name, capacity in zip(adapters, capacities, strict=True):
        after: dict[frozenset[str], int] = {}
        for held, cost in best.items():
            paid = cost + (name not in held)
            pool = sorted(held - {name})
            for size in range(min(len(pool), capacity - 1) + 1):
                for kept in itertools.combinations(pool, size):
                    state = frozenset((*kept, name))
                    if paid < after.get(state, 1 << 30):
                        after[state] = paid
        best = after
    return min(best.values())


def test_belady_matches_exhaustive_search_on_small_cases() -> None:
    rng = random.Random(10)
    for _ in range(400):
        n = rng.randint(1, 10)
        universe = "abcde"[: rng.randint(1, 5)]
        adapters = [rng.choice(universe) for _ in range(n)]
        capacities = [rng.randint(1, 3) for _ in range(n)]
        assert ls.belady_loads(adapters, capacities) == exhaustive(adapters, capacities), (
            adapters,
            capacities,
        )


def test_belady_with_fixed_capacity_is_the_textbook_figure() -> None:
    # The classic example: 3 frames, 7 faults under MIN.
    seq = list("70120304230321201701")
    assert ls.belady_loads(seq, [3] * len(seq)) == 9
    assert ls.belady_loads(["a", "b", "a"], [1, 1, 1]) == 3
    with pytest.raises(ValueError, match="below 1"):
        ls.belady_loads(["a"], [0])


# -- the simulated replica ---------------------------------------------------------------------


def run(workload: Workload, fleet: Fleet, policy: str = "round-robin") -> Simulation:
    return run_figures(workload, fleet, policy)[0]


def run_figures(workload: Workload, fleet: Fleet, policy: str) -> tuple[Simulation, ls.Figures]:
    simulation = Simulation(workload, fleet, POLICIES[policy], check=True)
    return simulation, simulation.run()


def test_replica_runs_at_most_c_first_come_first_served_after_the_load() -> None:
    w = Workload(
        times=(0.0, 0.1, 0.2, 0.3, 2.0),
        adapters=("a",) * 5,
        durations=(5.0, 6.5, 1.0, 1.0, 1.0),
        routers=(0,) * 5,
    )
    s, figures = run_figures(w, Fleet(replicas=1, memory=4, concurrency=2, load_time=1.0), "round-robin")
    # One load for all: the first three join it; two run at once, the rest wait in arrival order,
    # and a hit arriving later (t=2) does not overtake them.
    assert s.started == [1.0, 1.0, 6.0, 7.0, 7.5]
    assert figures.loads == 1
    # The last three found every slot taken: 5 + 6 + 5.5 s in the engine's queue, over 5 requests.
    assert figures.engine_waits == pytest.approx((3.3, 0.0, 0.0))


def test_reads_from_disk_go_one_at_a_time_and_no_step_runs_meanwhile() -> None:
    """vLLM reads an adapter inside its engine loop: three loads asked for at once take three load
    times, one after the other, and no request starts before the last (API.md §4.7)."""
    w = Workload(
        times=(0.0, 0.0, 0.0), adapters=("a", "b", "c"), durations=(1.0, 1.0, 1.0), routers=(0, 0, 0)
    )
    s, figures = run_figures(w, Fleet(replicas=1, memory=4, concurrency=3, load_time=0.5), "round-robin")
    assert s.started == [1.5, 1.5, 1.5]
    assert figures.loads == 3
    # a, granted at 0.5, waits for b's and c's reads; b for c's; c for none: 1.5 s over 3 requests.
    assert figures.engine_waits == pytest.approx((0.0, 0.0, 0.5))


def test_a_read_from_disk_pauses_the_requests_running() -> None:
    """b's load, 0.2 s after a's request started, pauses it for its load time."""
    w = Workload(times=(0.0, 0.7), adapters=("a", "b"), durations=(1.0, 0.1), routers=(0, 0))
    s = run(w, Fleet(replicas=1, memory=4, concurrency=3, load_time=0.5))
    assert s.started == [0.5, pytest.approx(1.2)]
    assert s.now == pytest.approx(2.0)  # b ends at 1.3; a at 2.0, not 1.5: 0.5 s paused


def test_the_engine_drops_its_least_recently_used_adapter_and_reads_it_back_when_needed() -> None:
    """Memory 2, the machine told a limit of 3: c's load drops a (used least recently) while its name
    is registered, and a's next request reads it back inside a step, dropping b in turn: two drops
    and a re-read."""
    w = Workload(
        times=(0.0, 1.0, 2.0, 3.0), adapters=("a", "b", "c", "a"), durations=(0.5,) * 4, routers=(0,) * 4
    )
    s, figures = run_figures(
        w, Fleet(replicas=1, memory=2, limit=3, concurrency=1, load_time=0.1), "round-robin"
    )
    assert (figures.loads, figures.rereads, figures.drops) == (4, 1, 2)
    assert s.started[3] == pytest.approx(3.1)  # read back before it runs
    assert figures.engine_waits == pytest.approx((0.0, 0.0, 0.1 / 4))


def test_the_batch_runs_at_most_max_loras_adapters() -> None:
    """--max-loras 1: b's request waits for a's to end though a slot is free; a's second request,
    on the adapter the batch runs, does not wait."""
    w = Workload(times=(0.0, 0.2, 0.3), adapters=("a", "b", "a"), durations=(1.0, 1.0, 1.0), routers=(0,) * 3)
    s, figures = run_figures(
        w, Fleet(replicas=1, memory=2, max_loras=1, concurrency=3, load_time=0.1), "round-robin"
    )
    assert s.started == [pytest.approx(0.1), pytest.approx(1.3), pytest.approx(0.3)]
    assert figures.engine_waits == pytest.approx((0.0, 1.0 / 3, 0.0))  # b, granted at 0.3


def test_the_limit_and_eviction_are_the_machines() -> None:
    # Limit 1: b's load evicts a (idle by then), so the third request loads a again.
    w = Workload(
        times=(0.0, 5.0, 10.0), adapters=("a", "b", "a"), durations=(1.0, 1.0, 1.0), routers=(0, 0, 0)
    )
    s, figures = run_figures(w, Fleet(replicas=1, memory=1, concurrency=1, load_time=0.5), "round-robin")
    assert figures.loads == 3
    assert s.evictions == 2
    assert s.started == [0.5, 5.5, 10.5]
    # Soft limit (no cap, the engine keeps 2): while a runs, b's load goes over the limit of 1
    # instead of waiting; b's read pauses a's start until both are read.
    w = Workload(times=(0.0, 0.1), adapters=("a", "b"), durations=(5.0, 1.0), routers=(0, 0))
    s = run(w, Fleet(replicas=1, memory=2, limit=1, concurrency=2, load_time=0.5))
    assert s.evictions == 0
    assert s.started == [1.0, 1.0]


def test_several_routers_meet_through_404s_and_listings() -> None:
    w = Synthetic(
        adapters=30, skew=1.0, rate=30.0, service=0.5, requests=2000, routers=3, replicas=4
    ).generate(2)
    s = Simulation(
        w,
        Fleet(replicas=4, memory=3, concurrency=4, load_time=0.2, routers=3, listing_interval=5.0),
        POLICIES["holders-first"],
        check=True,
    )
    figures = s.run()
    assert figures.missing > 0  # another router's eviction, seen by a forwarded request
    assert all(start >= arrival for start, arrival in zip(s.started, w.times, strict=True))


def test_routers_that_relay_to_the_first_meet_no_404s_and_wait_the_relay() -> None:
    """``relay``: the first router decides for all; a request that came to another starts no sooner
    than the relay after its arrival ([peers] in lorafleet serve)."""
    w = Synthetic(
        adapters=30, skew=1.0, rate=30.0, service=0.5, requests=2000, routers=3, replicas=4
    ).generate(2)
    fleet = Fleet(replicas=4, memory=3, concurrency=4, load_time=0.2, routers=3, listing_interval=5.0)
    relayed = attrs.evolve(fleet, relay=0.25)
    s = Simulation(w, relayed, POLICIES["holders-first"], check=True)
    figures = s.run()
    assert figures.missing == 0  # one router decides: no unload meets another's request
    assert Simulation(w, fleet, POLICIES["holders-first"], check=True).run().missing > 0  # the premise
    for start, arrival, came in zip(s.started, w.times, w.routers, strict=True):
        assert start >= arrival + (0.25 if came else 0.0)
    assert sum(came != 0 for came in w.routers) > 1000


# Router B (1) runs x for a long time on the one replica; router A (0) lists the replica at t=1 and
# t=2 (x held, idle as far as A knows), then at t=2.5 is asked for y with the replica at its limit.
UNDER_B = Workload(times=(0.0, 2.5), adapters=("x", "y"), durations=(100.0, 1.0), routers=(1, 0))
# The engine keeps 8 adapters in memory; the routers' machines hold the replica to 1 (``limit``): what
# is tested is what the machines decide, not the engine's memory.
UNDER_B_FLEET = Fleet(
    replicas=1, memory=8, limit=1, concurrency=4, load_time=0.1, routers=2, listing_interval=1.0
)


def test_without_the_running_report_a_router_unloads_under_anothers_request() -> None:
    s, figures = run_figures(UNDER_B, attrs.evolve(UNDER_B_FLEET, read_engine=False), "lorafleet")
    # A evicts x, the only adapter its listing showed, while B's request runs on it (once y's load,
    # out at once into the headroom, has landed: [settle]).
    assert s.evictions == 1
    assert figures.unloads_under_others == 1
    assert figures.unloads_under_own == 0
    assert s.started == [0.1, 2.6]


def test_with_the_running_report_it_goes_over_the_limit_instead() -> None:
    s, figures = run_figures(UNDER_B, attrs.evolve(UNDER_B_FLEET, read_engine=True), "lorafleet")
    # A's last reading named x (B's request on it): no victim, so y's load goes over the limit.
    assert s.evictions == 0
    assert figures.unloads_under_others == figures.unloads_under_own == 0
    assert figures.held_max == 2
    assert s.started == [0.1, 2.6]


@pytest.mark.parametrize("read_engine", [False, True])
def test_an_unload_under_a_routers_own_forgotten_request_is_counted_as_its_own(read_engine: bool) -> None:
    # A (0) runs x to t=10.1. Without the reading, B (1) evicts x at t=1.5 for z (its listing at t=1
    # showed x, idle for all B knows); A's listing at t=2 no longer names x, so A forgets it, lease
    # and all; A loads x again for its request at t=2.5 and evicts that copy at t=3.5 for w, under
    # its own first request, still running. With the reading B keeps x and A never forgets it.
    w = Workload(
        times=(0.0, 0.5, 1.5, 2.5, 3.5),
        adapters=("x", "y", "z", "x", "w"),
        durations=(10.0, 0.1, 0.1, 0.1, 0.1),
        routers=(0, 1, 1, 0, 0),
    )
    fleet = attrs.evolve(UNDER_B_FLEET, read_engine=read_engine)
    figures = run_figures(w, fleet, "lorafleet")[1]
    expected = 0 if read_engine else 1
    assert figures.unloads_under_others == figures.unloads_under_own == expected
    assert figures.loads == 4 + expected  # x again, without the reading


# B (1) runs w from t=0 to t=1.2 and x from t=0.05 to t=0.25. A (0) lists at t=1: w runs, so A's
# reading names another router's adapter (the replica is foreign, [reading]), and x sits idle. B runs
# x again from t=1.5 for 100 s; at t=1.6 A is asked for y with the replica (limit 1) over its limit.
AFTER_READING = Workload(
    times=(0.0, 0.05, 1.5, 1.6),
    adapters=("w", "x", "x", "y"),
    durations=(1.2, 0.1, 100.0, 1.0),
    routers=(1, 1, 1, 0),
)
AFTER_READING_FLEET = Fleet(
    replicas=1,
    memory=8,
    limit=1,
    concurrency=4,
    load_time=0.1,
    routers=2,
    listing_interval=1.0,
    read_engine=True,
)


@pytest.mark.parametrize("policy", ["lorafleet", "holders-first"])
@pytest.mark.parametrize(("read_engine", "headroom"), [(False, None), (True, None), (True, 0)])
def test_reading_before_evicting_protects_a_request_started_after_the_listing(
    policy: str, read_engine: bool, headroom: int | None
) -> None:
    fleet = attrs.evolve(AFTER_READING_FLEET, read_engine=read_engine, headroom=headroom)
    figures = run_figures(AFTER_READING, fleet, policy)[1]
    # The listing's reading at t=1 named w, not x; only a reading after t=1.5 sees B's request on x.
    # With reads, A reads before y takes a victim: w goes, x stays, and y goes over the limit.
    # Without reads, A takes x under B's request as a victim, and w as well. (No cap here, so that
    # B's x does not wait at B's own cap behind w.) The engine names 3 until the victims' unloads,
    # which go out once y has landed.
    assert figures.unloads_under_others == (0 if read_engine else 1)
    assert figures.evictions == (1 if read_engine else 2)
    assert figures.held_max == 3


@pytest.mark.parametrize("policy", ["lorafleet", "holders-first"])
def test_a_reading_that_named_no_other_router_is_not_read_again_before_evicting(policy: str) -> None:
    # B (1) loads x at t=0 and ends at t=0.2; A (0) lists at t=1 (x held, idle, nothing runs: A's
    # reading names no other router's adapter, so A is alone there as far as it knows). B runs x again
    # from t=1.5; at t=1.6 A, with headroom 0, evicts x for y at once, without reading first, under
    # B's request: a router that saw no other is never held up by reads ([read]).
    w = Workload(
        times=(0.0, 1.5, 1.6), adapters=("x", "x", "y"), durations=(0.1, 100.0, 1.0), routers=(1, 1, 0)
    )
    fleet = attrs.evolve(AFTER_READING_FLEET, headroom=0)
    s, figures = run_figures(w, fleet, policy)
    assert figures.unloads_under_others == 1
    assert s.started[2] == pytest.approx(1.6 + 0.1)  # no read before the load


class _FailingFrom(Simulation):
    """Reads fail from ``self.fail_from`` on (set before ``run``)."""

    fail_from = math.inf

    def _read_fails(self) -> bool:
        return self.now >= self.fail_from


@pytest.mark.parametrize(
    ("fail_from", "drops", "under"),
    [
        (math.inf, False, 0),  # every read answered: x named at t=2.5, so y goes over the limit
        (2.4, False, 0),  # the read before y fails: the listing's reading (x runs) stands
        (2.4, True, 1),  # ... unless a failed read drops it, as the Fleet once did
        (1.9, False, 1),  # the read after the t=2 listing fails: it drops the reading, x is fair game
    ],
)
def test_a_failed_read_keeps_the_last_reading_until_the_next_listing(
    fail_from: float, drops: bool, under: int
) -> None:
    fleet = attrs.evolve(UNDER_B_FLEET, read_engine=True, failed_read_drops=drops)
    s = _FailingFrom(UNDER_B, fleet, POLICIES["lorafleet"], check=True)
    s.fail_from = fail_from
    figures = s.run()
    assert figures.unloads_under_others == under
    assert (figures.failed_reads > 0) is (fail_from < math.inf)


def _three_routers(requests: int, seed: int, **reads: Any) -> tuple[Workload, Fleet]:
    """A small skewed workload over 4 replicas of limit 3, with 3 routers listing every 5 s."""
    w = Synthetic(
        adapters=30, skew=1.0, rate=30.0, service=0.5, requests=requests, routers=3, replicas=4
    ).generate(seed)
    fleet = Fleet(
        replicas=4, memory=3, concurrency=4, load_time=0.2, routers=3, listing_interval=5.0, **reads
    )
    return w, fleet


def test_read_failures_are_drawn_from_the_seed() -> None:
    w, fleet = _three_routers(1000, 1, read_engine=True, read_failures=0.5)
    one, two = (ls.simulate(w, fleet, POLICIES["lorafleet"], seed=1) for _ in range(2))
    assert one == two
    assert 0.4 * one.reads < one.failed_reads < 0.6 * one.reads


def test_a_read_with_latency_delays_the_request_and_samples_when_sent() -> None:
    # y's load at the limit would take a victim, so it waits for the read ([read]), cap or none.
    for headroom in (0, None):
        fleet = attrs.evolve(AFTER_READING_FLEET, read_latency=0.05, headroom=headroom)
        s, figures = run_figures(AFTER_READING, fleet, "lorafleet")
        assert figures.unloads_under_others == 0
        assert s.started[3] == pytest.approx(1.6 + 0.05 + 0.1)  # the read, then y's load


@pytest.mark.parametrize(("delay", "latency", "under_others"), [(0.0, 0.05, 1), (0.05, 0.0, 0)])
def test_a_read_samples_the_engine_read_delay_after_it_is_sent(
    delay: float, latency: float, under_others: int
) -> None:
    """B's request on w starts at 1.62, after A's read went out at 1.6 and before its answer at 1.65:
    sampled as the read is sent, the reading misses it and A takes w as y's victim under it; sampled
    0.05 s later, as an engine counts what runs when the GET reaches it, the reading names w."""
    w = attrs.evolve(
        AFTER_READING,
        times=(*AFTER_READING.times, 1.62),
        adapters=(*AFTER_READING.adapters, "w"),
        durations=(*AFTER_READING.durations, 1.0),
        routers=(*AFTER_READING.routers, 1),
    )
    fleet = attrs.evolve(AFTER_READING_FLEET, read_delay=delay, read_latency=latency)
    s, figures = run_figures(w, fleet, "lorafleet")
    assert figures.unloads_under_others == under_others
    assert s.started[3] == pytest.approx(1.6 + 0.05 + 0.1)  # the answer comes at 1.65 either way


def test_cold_requests_waiting_for_one_read_share_it() -> None:
    w = attrs.evolve(
        AFTER_READING,
        times=(*AFTER_READING.times, 1.61, 1.62),
        adapters=(*AFTER_READING.adapters, "z", "v"),
        durations=(*AFTER_READING.durations, 1.0, 1.0),
        routers=(*AFTER_READING.routers, 0, 0),
    )
    # Headroom 0: each cold load at the limit would evict first, so each waits for a reading.
    fleet = attrs.evolve(AFTER_READING_FLEET, read_latency=0.05, headroom=0)
    alone = run_figures(AFTER_READING, fleet, "lorafleet")[1]
    s, figures = run_figures(w, fleet, "lorafleet")
    assert figures.reads == alone.reads  # z and v join y's read at t=1.6
    # All three once it is answered and their loads read, one after the other: no step runs meanwhile.
    assert s.started[3:] == [pytest.approx(1.6 + 0.05 + 3 * 0.1)] * 3
    assert figures.unloads_under_others == 0


@pytest.mark.parametrize("read_engine", [True, False])
def test_one_routers_own_released_adapter_does_not_hold_its_cap_queue(read_engine: bool) -> None:
    # One router, limit 1, no headroom, listings every 10 s. x runs from t=0.1 to t=12.1, so the
    # listing's reading at t=10 names it, but only this router's request runs on it: the reading
    # stands as an empty one ([reading]). y, asked at t=11, waits at the cap; when x's request ends,
    # x is idle at once, as without reads: y loads then, not after the listing at t=20. (Concurrency
    # 1: the simulated engine's max_loras is its concurrency, so the cap stays limit + headroom, 1.)
    w = Workload(times=(0.0, 11.0), adapters=("x", "y"), durations=(12.0, 1.0), routers=(0, 0))
    fleet = Fleet(
        replicas=1,
        memory=1,
        concurrency=1,
        load_time=0.1,
        listing_interval=10.0,
        headroom=0,
        read_engine=read_engine,
    )
    s, figures = run_figures(w, fleet, "lorafleet")
    assert s.started[1] == pytest.approx(12.2)
    assert figures.held_max == 2  # y waited at the cap, then took x's room: x's name goes once y lands


@pytest.mark.parametrize("reads", [{"read_engine": False}, {"read_engine": True, "read_latency": 0.05}])
def test_several_routers_count_unloads_under_requests(reads: dict[str, Any]) -> None:
    w, fleet = _three_routers(2000, 2, **reads)
    figures = Simulation(w, fleet, POLICIES["lorafleet"], check=True).run()
    alone = Simulation(
        attrs.evolve(w, routers=(0,) * len(w)), attrs.evolve(fleet, routers=1), POLICIES["lorafleet"]
    ).run()
    assert figures.unloads_under_others > 0  # a sample misses requests started after it
    assert alone.unloads_under_others == 0
    assert alone.unloads_under_own == 0
    assert figures.requests == 2000


@pytest.mark.parametrize("policy", list(POLICIES))
def test_every_request_is_served_through_restarts_shifts_and_flash_crowds(policy: str) -> None:
    spec = Synthetic(
        adapters=30,
        skew=1.2,
        rate=30.0,
        service=0.5,
        requests=1500,
        routers=2,
        replicas=4,
        shift=True,
        flash=0.3,
        restarts=3,
    )
    w = spec.generate(5)
    s = Simulation(
        w,
        Fleet(replicas=4, memory=3, concurrency=4, load_time=0.2, routers=2, listing_interval=5.0),
        POLICIES[policy],
        check=True,
    )
    figures = s.run()
    assert figures.requests == 1500
    assert all(start >= arrival for start, arrival in zip(s.started, w.times, strict=True))
    assert figures.belady <= figures.loads + figures.failed + figures.missing


# -- the machine's settings -----------------------------------------------------------------


@pytest.mark.parametrize("tell_concurrency", [False, True])
def test_every_policy_runs_the_real_machine_with_the_fleets_settings_and_its_own(
    tell_concurrency: bool,
) -> None:
    fleet = Fleet(
        replicas=2,
        memory=3,
        concurrency=4,
        load_time=0.2,
        headroom=1,
        overflow=0,
        half_life=9,
        read_engine=False,
        tell_concurrency=tell_concurrency,
    )
    for policy in [*POLICIES.values(), *VARIANTS.values()]:
        m = fleet.machine(policy)
        assert type(m) is AdapterStateMachine
        settings = {
            "concurrency": 4 if tell_concurrency else None,
            "headroom": 1,
            "overflow": 0,
            "half_life": 9,
            "read_engine": False,
            **policy.settings,
        }
        assert (
            m._settings.concurrency,
            m._settings.headroom,
            m._settings.overflow,
            m._settings.half_life,
            m._settings.read_engine,
        ) == (
            settings["concurrency"],
            settings["headroom"],
            settings["overflow"],
            settings["half_life"],
            settings["read_engine"],
        )


def test_settings_left_unset_are_as_each_policys_routers_ship() -> None:
    """lorafleet's routers get ``Fleet()``'s settings (``FLEET_DEFAULTS``); the baselines the core's."""
    fleet = Fleet(replicas=2, memory=3, concurrency=4, load_time=0.2)
    core = AdapterStateMachine()
    for policy in [*POLICIES.values(), *VARIANTS.values()]:
        m = fleet.machine(policy)
        shipped = {
            "headroom": core._settings.headroom,
            "read_engine": core._settings.read_engine,
            "overflow": core._settings.overflow,
            "half_life": core._settings.half_life,
            "shared_interval": core._settings.shared_interval,
        }
        if policy.routes:
            shipped.update(lorafleet.FLEET_DEFAULTS)
        shipped.update({k: v for k, v in policy.settings.items() if k in shipped})
        assert (
            m._settings.headroom,
            m._settings.read_engine,
            m._settings.overflow,
            m._settings.half_life,
            m._settings.shared_interval,
        ) == (
            shipped["headroom"],
            shipped["read_engine"],
            shipped["overflow"],
            shipped["half_life"],
            shipped["shared_interval"],
        ), policy.name
        assert m._settings.concurrency is None  # a Fleet is told nothing of it; it learns from the engines
    assert lorafleet.FLEET_DEFAULTS == {"headroom": 0, "read_engine": True, "shared_interval": 0.5}
    assert fleet.machine(POLICIES["lorafleet"])._settings.headroom == 0
    assert fleet.machine(POLICIES["least-loaded"])._settings.headroom is None


def test_any_other_machine_setting_reaches_every_routers_machine() -> None:
    fleet = Fleet(replicas=4, memory=3, concurrency=4, load_time=0.2, routers=2, settings={"refusal": 7.0})
    simulation = Simulation(SMALL.generate(1), fleet, POLICIES["lorafleet"])
    assert [router.view.machine._settings.refusal for router in simulation.routers] == [7.0, 7.0]


def test_lorafleet_sends_each_request_where_the_machine_places_it() -> None:
    assigned: list[tuple[str, str]] = []
    routed: dict[tuple[int, int], str] = {}
    real = AdapterStateMachine.handle

    def handle(self: AdapterStateMachine, event: Event) -> list[Command]:
        commands = real(self, event)
        if isinstance(event, Routed):
            routed[id(self), event.ticket] = event.adapter
        assigned.extend((routed[id(self), c.ticket], c.replica) for c in commands if isinstance(c, Assign))
        return commands

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(AdapterStateMachine, "handle", handle)
        s = run(SMALL.generate(3), SMALL_FLEET, "lorafleet")
    assert len(assigned) >= len(SMALL.generate(3))
    for engine in s.engines:
        assert s.sequences[engine.index] == [a for a, replica in assigned if replica == engine.id]


def victim_after_demand(half_life: int, headroom: int | None = None) -> tuple[str, ...]:
    """The victim c's load takes after a is asked for 5 times and b once, a released first."""
    m = AdapterStateMachine(half_life=half_life, headroom=headroom)
    (listing,) = m.handle(ReplicaAdded(replica="r", model="m", limit=2))
    assert isinstance(listing, ReadListing)
    m.handle(ListingReceived(listing=listing.listing, adapters=()))
    ticket = 0
    for name, times in (("a", 5), ("b", 1)):
        for _ in range(times):
            ticket += 1
            for command in m.handle(Requested(ticket=ticket, replica="r", adapter=name, path=name)):
                if isinstance(command, IssueLoad):
                    m.handle(LoadFinished(load=command.load, outcome=LoadOutcome.LOADED))
            m.handle(Released(ticket=ticket))
    commands = m.handle(Requested(ticket=ticket + 1, replica="r", adapter="c", path="c"))
    assert [type(c) for c in commands] == [IssueLoad]
    return m.statistics().replicas["r"].unloading


@pytest.mark.parametrize("headroom", [None, 0])
def test_the_victim_is_the_least_recently_used_whatever_the_demand(headroom: int | None) -> None:
    # The engine drops what it used least recently (SPEC.md §3.16), so the machine's victim is a,
    # asked for most but released first, whatever the half-life; demand only shapes placement.
    assert victim_after_demand(lorafleet.DEFAULT_HALF_LIFE, headroom) == ("a",)
    assert victim_after_demand(1, headroom) == ("a",)


@pytest.mark.parametrize("read_engine", [False, True])
def test_the_cap_keeps_what_the_machine_holds_within_the_engines_memory(read_engine: bool) -> None:
    # Engines of memory 2, machines of limit 2 and headroom 0 (as shipped): no engine drops an adapter
    # its router holds. Without a cap, loads go past the memory while every adapter is in use, and
    # the engines drop adapters the routers count on, and read them back inside their steps.
    busy = Synthetic(adapters=40, skew=0.6, rate=20.0, service=0.5, requests=400, replicas=4)
    fleet = Fleet(replicas=4, memory=2, concurrency=4, load_time=0.2, headroom=0, read_engine=read_engine)
    uncapped = attrs.evolve(fleet, headroom=None)
    for policy in ("least-loaded", "lorafleet"):
        loose = Simulation(busy.generate(1), uncapped, POLICIES[policy]).run()
        assert loose.drops > 0
        assert loose.rereads > 0
        capped = Simulation(busy.generate(1), fleet, POLICIES[policy], check=True).run()
        assert (capped.drops, capped.rereads) == (0, 0)
        assert capped.held_max <= 3  # the line, and a victim's name until its load has landed
        assert capped.requests == 400


# -- traces and flags --------------------------------------------------------------------------


def test_the_running_reads_are_flags_and_columns(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--requests", "600", "--replicas", "2", "--adapters", "12", "--rate", "10", "--routers", "2"]
    assert ls.main([*argv, "--listing-interval", "2", "--read-engine"]) == 0
    text = capsys.readouterr().out
    assert "each reading which adapters run when the machine asks ([read])" in text
    assert "| unloads under others | under own |" in text
    assert "| in engine ms: full / batch / reads |" in text
    assert ls.main([*argv, "--read-engine", "--read-delay", "0.01", "--read-latency", "0.02"]) == 0
    assert (
        "each engine sampled 10 ms after the read was sent, readings reported 20 ms after"
        in capsys.readouterr().out
    )


def test_shared_replicas_are_listed_faster_unless_told_off() -> None:
    # Two routers on the same engines: each lists a replica the other works on every 0.5 s (as
    # shipped), and sees the other's loads sooner than at 30 s, so its engines drop fewer adapters.
    work = Synthetic(adapters=60, skew=1.0, rate=20.0, service=0.5, requests=2000, replicas=4, routers=2)
    fleet = Fleet(replicas=4, memory=4, concurrency=4, load_time=0.02, routers=2)
    shipped = Simulation(work.generate(1), fleet, POLICIES["lorafleet"], check=True).run()
    off = Simulation(work.generate(1), attrs.evolve(fleet, shared_interval=None), POLICIES["lorafleet"]).run()
    assert fleet.settings_of(POLICIES["lorafleet"])["shared_interval"] == 0.5
    assert shipped.rereads < off.rereads
    assert shipped.loads < off.loads


def _sweep_script(name: str) -> Any:
    """``sim/<name>.py``, loaded as a module: the sweep scripts are not in the package."""
    spec = importlib.util.spec_from_file_location(name, SIM / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_several_routers_sweeps_counts_and_reads(capsys: pytest.CaptureFixture[str]) -> None:
    script = _sweep_script("several_routers")
    argv = ["--requests", "600", "--replicas", "2", "--adapters", "12", "--rate", "10", "--counts", "1,2"]
    assert script.main([*argv, "--listing-interval", "2"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| lorafleet |")]
    assert [row.split(" | ")[1:3] for row in rows] == [
        [str(routers), mode] for routers in (1, 2) for mode in ("off", "read")
    ]
    assert rows[0].split(" | ")[4] == "1.000"  # one router, listings only: the exact view


def test_share_routers_runs_each_count_told_and_not(capsys: pytest.CaptureFixture[str]) -> None:
    script = _sweep_script("share_routers")
    argv = ["--requests", "600", "--replicas", "2", "--adapters", "12", "--rate", "10", "--counts", "3"]
    assert script.main([*argv, "--headroom", "0"]) == 0
    rows = [
        line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "|---" not in line
    ]
    assert [row.split(" | ")[:2] for row in rows[1:]] == [["| 1", "1"], ["| 3", "1"], ["| 3", "3"]]
    held = {tuple(row.split(" | ")[:2]): row.split(" | ")[4] for row in rows[1:]}
    # The same requests, every router told it is one of three: no more held on time-mean.
    assert float(held["| 3", "3"]) <= float(held["| 3", "1"])


def test_a_trace_file_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "trace.txt"
    rng = random.Random(1)
    lines = ["# timestamp adapter duration", ""]
    for i in range(600):
        lines.append(f"{i * 0.05:.3f} ad-{rng.randint(0, 9)} {rng.uniform(0.1, 0.6):.3f}")
    lines.insert(5, "0.000 first 0.1")  # out of order: sorted by time
    trace.write_text("\n".join(lines))
    out = tmp_path / "results.md"
    code = ls.main(
        [
            "--trace",
            str(trace),
            "--replicas",
            "3",
            "--limit",
            "2",
            "--out",
            str(out),
            "--policy",
            "least-loaded,lorafleet",
            "--policy",
            "holders-first",
        ]
    )
    assert code == 0
    text = out.read_text()
    assert "trace" in text
    assert "| lorafleet |" in text
    assert "| holders-first |" in text
    assert text in capsys.readouterr().out
    w = ls.read_trace(trace)
    assert len(w) == 601
    assert w.times == tuple(sorted(w.times))
    assert w.times[0] == 0.0


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ("0 a", "expected 'timestamp adapter duration'"),
        ("x a 1", "timestamp 'x' is not a number"),
        ("0 a nan", "finite number"),
        ("0 a 0", "duration must be above 0"),
        ("# nothing", "holds no request: it is empty"),
        ("", "holds no request: it is empty"),
        ('{"time": 1, "adapter": "a"', r"t\.txt:1: not a JSON object of the request log"),
        (
            '{"time": 1, "adapter": "a", "replica": "r", "wait": 0}',
            r"t\.txt:1: 'duration' must be .* not missing",
        ),
        ('{"time": 1, "adapter": "a", "duration": 1, "replica": "r", "wait": "x"}', r"'wait' must be"),
        ('{"time": 1, "adapter": 3, "duration": 1}', r"t\.txt:1: 'adapter' must be a name or null"),
        ('{"time": 1, "adapter": null, "duration": 1}\n[1, 2]', r"t\.txt:2: not a JSON object of the"),
        (
            '{"time": 1, "adapter": null, "duration": 1, "replica": "r"}\n'
            '{"time": 2, "adapter": "a", "duration": 1}',
            r"no request for an adapter that a replica took \(left out 1 for a base model and 1 that no",
        ),
    ],
)
def test_malformed_traces_say_where(tmp_path: Path, lines: str, message: str) -> None:
    trace = tmp_path / "t.txt"
    trace.write_text(lines + "\n")
    with pytest.raises(ls.WorkloadError, match=message):
        ls.read_trace(trace)


def _sweep_rows(text: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("| ") and "|---" not in line and not line.startswith("| replicas")
    ]


def test_a_sweep_prints_one_row_a_size_and_says_what_keeps_up(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "--requests",
        "1500",
        "--rate",
        "60",
        "--adapters",
        "60",
        "--replicas",
        "4..6",
        "--wait-target",
        "40",
    ]
    assert ls.main(argv) == 0
    text = capsys.readouterr().out
    rows = _sweep_rows(text)
    assert [row[0] for row in rows] == ["4", "5", "6"]
    assert {row[6] for row in rows} == {"lorafleet"}  # a sweep runs lorafleet unless told otherwise
    verdicts = {row[0]: row[-1] for row in rows}
    assert verdicts["4"] == "overloaded"  # 30 s of service a second on 32 slots
    assert float(rows[0][9]) >= 1 > float(rows[2][9])  # utilisation
    assert "Overloaded: replicas 4 (lorafleet): utilisation" in text
    assert verdicts["6"] == "meets the target"
    assert "The smallest: replicas " in text


def test_a_sweep_leaves_out_a_size_vllm_would_not_start(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "--requests",
        "300",
        "--rate",
        "10",
        "--max-cpu-loras",
        "4,8",
        "--max-loras",
        "8",
        "--limit",
        "8,12",
    ]
    assert ls.main(argv) == 0
    captured = capsys.readouterr()
    assert [row[1:5] for row in _sweep_rows(captured.out)] == [["8", "8", "8", "8"], ["8", "8", "8", "12"]]
    assert "left out replicas 8, max-cpu-loras 4, max-loras 8" in captured.err
    assert "--max-cpu-loras 4 is below --max-loras 8: vLLM does not start so" in captured.err
    assert (
        "limit 12 with headroom 0 and 1 router(s) may put 12 adapters on an engine of --max-cpu-loras 8"
        in (captured.err)
    )


def test_one_run_warns_of_a_limit_past_the_memory(capsys: pytest.CaptureFixture[str]) -> None:
    assert ls.main(["--requests", "300", "--rate", "10", "--limit", "9", "--policy", "lorafleet"]) == 0
    captured = capsys.readouterr()
    warning = "limit 9 with headroom 0 and 1 router(s) may put 9 adapters on an engine of --max-cpu-loras 8"
    assert warning in captured.err
    assert warning in captured.out


def test_one_run_says_when_the_fleet_cannot_keep_up(capsys: pytest.CaptureFixture[str]) -> None:
    assert ls.main(["--requests", "2000", "--rate", "300", "--policy", "lorafleet"]) == 0
    text = capsys.readouterr().out
    assert "Overloaded under lorafleet: utilisation" in text
    assert ls.main(["--requests", "2000", "--rate", "30", "--policy", "lorafleet"]) == 0
    assert "Overloaded" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--replicas", "4..2"], "the range '4..2' is empty"),
        (["--replicas", "0..2"], "--replicas: '0..2' must be at least 1"),
        (["--headroom", "0,x"], "'x' is not an integer, 'none' or a range"),
        (["--limit", "0"], "--limit: '0' must be at least 1"),
        (["--rate", "nan"], "--rate: 'nan' is not a finite number"),
        (["--rate", "-3"], "--rate: '-3' must be above 0"),
        (["--load", "-1"], "--load: '-1' must be at least 0"),
        (["--service", "inf"], "'inf' is not a finite number"),
        (["--replicas", "two"], "'two' is not an integer"),
        (["--flash", "1.5"], "must be at most 1"),
        (["--read-failures", "1.5"], "--read-failures: '1.5' must be at most 1"),
        (["--read-delay", "-0.01"], "--read-delay: '-0.01' must be at least 0"),
        (["--policy", "fastest"], "unknown policy 'fastest'"),
        (["--trace", "t.txt", "--shift"], "do not apply to --trace"),
        (["--trace", "/nonexistent/trace.txt"], "cannot read trace"),
        (["--shared-interval", "0"], "must be a positive number of seconds or 'off', not '0'"),
    ],
)
def test_flag_errors_are_clear(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        ls.main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_plot_without_matplotlib_says_how_to_get_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    real = importlib.import_module

    def missing(name: str, package: str | None = None) -> object:
        if name.startswith("matplotlib"):
            raise ImportError(f"No module named {name!r}")
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", missing)
    with pytest.raises(SystemExit) as exited:
        ls.main(["--requests", "10", "--plot", str(tmp_path / "p.png")])
    assert exited.value.code == 2
    assert "pip install 'lorafleet[plot]'" in capsys.readouterr().err
    assert not (tmp_path / "p.png").exists()


@pytest.mark.parametrize(
    "sweep",
    [[], ["--replicas", "2,3", "--wait-target", "50"]],
    ids=["memories per policy", "sizes swept"],
)
def test_plot_draws_a_png(sweep: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--plot`` with matplotlib (dev.py installs lorafleet[plot]): a run sweeps --max-cpu-loras and
    draws loads and load latency per policy; with sizes swept, it draws the sweep."""
    plot = tmp_path / "p.png"
    assert ls.main(["--requests", "200", "--seeds", "1", *sweep, "--plot", str(plot)]) == 0
    data = plot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(data) > 10_000  # axes, lines and labels, not an empty canvas
    assert str(plot) in capsys.readouterr().out


def test_the_grid_counts_a_rare_engine_drop_rather_than_rounding_it_to_nothing() -> None:
    """One drop in 100,000 requests fails the drops target, and the verdict says how many: a rate at
    two decimals would read 0.00/1k beside FAIL."""
    from lorafleet_sim._grid import Outcome, Row, verdicts

    def figures(policy: str, drops: int) -> ls.Figures:
        return ls.Figures(policy, 50_000, 300, 0, 0.01, 0.04, 0.0, 1.0, 0, 4.0, 4, 0, 0, 0, 0, 0, drops=drops)

    def drops_verdict(*ours: int) -> tuple[bool, str]:
        runs = {"lorafleet": [figures("lorafleet", d) for d in ours]}
        runs |= {n: [figures(n, 0) for _ in ours] for n in ("holders-first", "least-loaded-engine")}
        (verdict,) = [v for v in verdicts(Outcome(Row("r"), runs, {})) if v.target == "engine drops = 0"]
        return verdict.met, verdict.detail

    assert drops_verdict(0, 1) == (False, "1 in 100,000 requests (0.01/1k)")
    assert drops_verdict(0, 0) == (True, "none")

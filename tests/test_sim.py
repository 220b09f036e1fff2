"""The fleet simulator: determinism, Belady's MIN, the simulated replica's rules, traces and flags."""

from __future__ import annotations

import importlib
import itertools
import random
from collections.abc import Sequence
from pathlib import Path

import pytest

import lorafleet_sim as ls
from lorafleet import (
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
)
from lorafleet_sim import POLICIES, Fleet, ReplicaState, Simulation, Synthetic, Workload
from lorafleet_sim._placement import Demand, Placement, place
from lorafleet_sim._research import FrequencyEvictingMachine

SMALL = Synthetic(adapters=30, skew=1.0, rate=30.0, service=0.5, requests=1500, replicas=4)
SMALL_FLEET = Fleet(replicas=4, limit=3, concurrency=4, load_time=0.2)


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
    simulation = Simulation(workload, fleet, POLICIES[policy], check=True)
    simulation.run()
    return simulation


def test_replica_runs_at_most_c_first_come_first_served_after_the_load() -> None:
    w = Workload(
        times=(0.0, 0.1, 0.2, 0.3, 2.0),
        adapters=("a",) * 5,
        durations=(5.0, 6.5, 1.0, 1.0, 1.0),
        routers=(0,) * 5,
    )
    s = run(w, Fleet(replicas=1, limit=4, concurrency=2, load_time=1.0))
    # One load for all: the first three join it; two run at once, the rest wait in arrival order,
    # and a hit arriving later (t=2) does not overtake them.
    assert s.started == [1.0, 1.0, 6.0, 7.0, 7.5]
    assert s.loads == 1


def test_loads_overlap_and_take_no_request_slot() -> None:
    w = Workload(
        times=(0.0, 0.0, 0.0), adapters=("a", "b", "c"), durations=(1.0, 1.0, 1.0), routers=(0, 0, 0)
    )
    s = run(w, Fleet(replicas=1, limit=4, concurrency=3, load_time=0.5))
    assert s.started == [0.5, 0.5, 0.5]
    assert s.loads == 3


def test_the_limit_and_eviction_are_the_machines() -> None:
    # Limit 1: b's load evicts a (idle by then), so the third request loads a again.
    w = Workload(
        times=(0.0, 5.0, 10.0), adapters=("a", "b", "a"), durations=(1.0, 1.0, 1.0), routers=(0, 0, 0)
    )
    s = run(w, Fleet(replicas=1, limit=1, concurrency=1, load_time=0.5))
    assert s.loads == 3
    assert s.evictions == 2
    assert s.started == [0.5, 5.5, 10.5]
    # Soft limit: while a runs, b's load goes over the limit instead of waiting.
    w = Workload(times=(0.0, 0.1), adapters=("a", "b"), durations=(5.0, 1.0), routers=(0, 0))
    s = run(w, Fleet(replicas=1, limit=1, concurrency=2, load_time=0.5))
    assert s.evictions == 0
    assert s.started == [0.5, 0.6]


def test_several_routers_meet_through_404s_and_listings() -> None:
    w = Synthetic(
        adapters=30, skew=1.0, rate=30.0, service=0.5, requests=2000, routers=3, replicas=4
    ).generate(2)
    s = Simulation(
        w,
        Fleet(replicas=4, limit=3, concurrency=4, load_time=0.2, routers=3, listing_interval=5.0),
        POLICIES["holders-first"],
        check=True,
    )
    figures = s.run()
    assert figures.missing > 0  # another router's eviction, seen by a forwarded request
    assert all(start >= arrival for start, arrival in zip(s.started, w.times, strict=True))


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
        Fleet(replicas=4, limit=3, concurrency=4, load_time=0.2, routers=2, listing_interval=5.0),
        POLICIES[policy],
        check=True,
    )
    figures = s.run()
    assert figures.requests == 1500
    assert all(start >= arrival for start, arrival in zip(s.started, w.times, strict=True))
    assert figures.belady <= figures.loads + figures.failed + figures.missing


# -- placement ---------------------------------------------------------------------------------


def test_fnv1a64_known_answers_and_rendezvous() -> None:
    assert ls.fnv1a64(b"") == 0xCBF29CE484222325
    assert ls.fnv1a64(b"a") == 0xAF63DC4C8601EC8C
    assert ls.fnv1a64(b"foobar") == 0x85944171F73967E8
    assert ls.rendezvous("sql", "gpu-0") == ls.fnv1a64(b"sql\0gpu-0")


def replicas(rng: random.Random) -> list[ReplicaState]:
    states = []
    for i in range(rng.randint(1, 6)):
        s = ReplicaState(
            f"r{i}", i, rng.randint(1, 3), outstanding=rng.randint(0, 10), served=rng.randint(0, 50)
        )
        for name in rng.sample("abcdef", rng.randint(0, 4)):
            if rng.random() < 0.2:
                s.loading.add(name)
            else:
                s.held[name] = rng.randint(0, 2)
        s.idle = {name: rng.randint(0, 100) for name, n in sorted(s.held.items()) if not n}
        states.append(s)
    return states


def test_placement_is_a_candidate_prefers_a_free_holder_and_is_deterministic() -> None:
    rng = random.Random(4)
    settings = Placement.for_concurrency(8)
    for _ in range(2000):
        states = replicas(rng)
        demand = Demand(half_life=100, counts={n: rng.randint(0, 9) for n in "abcdef"})
        adapter = rng.choice("abcdefg")
        chosen = place(adapter, states, settings, demand)
        assert chosen in states
        assert place(adapter, list(states), settings, demand) is chosen
        free_holders = [s for s in states if s.holds(adapter) and s.outstanding < settings.busy]
        if free_holders:
            assert chosen.holds(adapter)
            assert chosen.outstanding == min(s.outstanding for s in free_holders)


def test_demand_halves_exactly() -> None:
    d = Demand(half_life=4)
    for name in "aaab":
        d.count(name)
    assert d.counts == {"a": 1}  # 3 >> 1 and 1 >> 1 (dropped)


def test_research_machine_evicts_the_least_requested_idle_adapter() -> None:
    m = FrequencyEvictingMachine(listing_interval=30.0)
    counts = {"a": 5, "b": 1}
    m.attach(lambda replica, adapter: counts.get(adapter, 0))
    (listing,) = m.handle(ReplicaAdded(replica="r", model="m", limit=2))
    assert isinstance(listing, ReadListing)
    m.handle(ListingReceived(listing=listing.listing, adapters=()))
    for ticket, name in enumerate(("a", "b"), start=1):
        (load,) = m.handle(Requested(ticket=ticket, replica="r", adapter=name, path=name))
        assert isinstance(load, IssueLoad)
        assert isinstance(m.handle(LoadFinished(load=load.load, outcome=LoadOutcome.LOADED))[0], Grant)
        m.handle(Released(ticket=ticket))
    # a is least recently used, but b is asked for less: b goes.
    commands = m.handle(Requested(ticket=3, replica="r", adapter="c", path="c"))
    assert [c.adapter for c in commands if isinstance(c, IssueUnload)] == ["b"]


# -- traces and flags --------------------------------------------------------------------------


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
        ("# nothing", "holds no request"),
    ],
)
def test_malformed_traces_say_where(tmp_path: Path, lines: str, message: str) -> None:
    trace = tmp_path / "t.txt"
    trace.write_text(lines + "\n")
    with pytest.raises(ls.WorkloadError, match=message):
        ls.read_trace(trace)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--limit", "0"], "--limit: '0' must be at least 1"),
        (["--rate", "nan"], "--rate: 'nan' is not a finite number"),
        (["--rate", "-3"], "--rate: '-3' must be above 0"),
        (["--load", "-1"], "--load: '-1' must be at least 0"),
        (["--service", "inf"], "'inf' is not a finite number"),
        (["--replicas", "two"], "'two' is not an integer"),
        (["--flash", "1.5"], "must be at most 1"),
        (["--policy", "fastest"], "unknown policy 'fastest'"),
        (["--trace", "t.txt", "--shift"], "do not apply to --trace"),
        (["--trace", "/nonexistent/trace.txt"], "cannot read trace"),
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

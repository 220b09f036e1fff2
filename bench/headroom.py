"""What the cap ([cap]) costs and saves, per headroom, on the simulator's fleets: the figures behind HEADROOM.

    .venv/bin/python bench/headroom.py [--requests 20000] [--seed 1]

Needs the simulator (``lorafleet_sim``). Each router runs the real machine with the given headroom and
routes as ``Fleet.route`` does: ``place()``, nothing excluded. The simulated engines model load time
and a replica's concurrency, not the stall past ``--max-cpu-loras`` that the cap exists to prevent, so
"held max" (the most adapters a replica held at once) is the cap's benefit and the waits are its cost.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence
from typing import Any

from lorafleet import AdapterStateMachine

FLEETS: list[dict[str, Any]] = [
    # (replicas, limit, concurrency per replica, adapters, Zipf skew, requests/s, load seconds)
    {"replicas": 3, "limit": 2, "concurrency": 8, "adapters": 24, "skew": 0.5, "rate": 30.0, "load": 0.2},
    {"replicas": 8, "limit": 4, "concurrency": 8, "adapters": 200, "skew": 1.0, "rate": 76.8, "load": 0.2},
    {"replicas": 8, "limit": 8, "concurrency": 16, "adapters": 400, "skew": 0.8, "rate": 200.0, "load": 0.5},
    {"replicas": 4, "limit": 16, "concurrency": 16, "adapters": 500, "skew": 0.8, "rate": 80.0, "load": 0.5},
    {"replicas": 8, "limit": 8, "concurrency": 8, "adapters": 200, "skew": 1.0, "rate": 76.8, "load": 0.2},
]
HEADROOMS: list[int | None] = [None, 0, 1, 2, 4]


class _Placing:
    """A router that sends each request where its machine's ``place()`` says, as ``Fleet.route`` does."""

    def __init__(self, machine: AdapterStateMachine) -> None:
        self.machine = machine
        self.everyone: tuple[str, ...] = ()

    def choose(self, adapter: str, candidates: Sequence[Any], now: float) -> Any:
        by_id = {state.id: state for state in candidates}
        if not self.everyone:
            self.everyone = tuple(by_id)  # the first request has tried nothing: every replica
        tried = [rid for rid in self.everyone if rid not in by_id]
        placement = self.machine.place(adapter, exclude=tried)
        return by_id[placement.replica] if placement.replica in by_id else candidates[0]


def _sim() -> Any:
    """The simulator's package (imported by name: it is installed from the simulator's branch)."""
    return importlib.import_module("lorafleet_sim")


def policy(headroom: int | None) -> Any:
    made: list[AdapterStateMachine] = []

    def machine(interval: float) -> AdapterStateMachine:
        made.append(AdapterStateMachine(listing_interval=interval, headroom=headroom))
        return made[-1]

    # The simulator makes each router's machine, then its chooser: the chooser takes that machine.
    return _sim().Policy(f"headroom={headroom}", lambda rng, concurrency: _Placing(made[-1]), machine=machine)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000, help="requests per run (default 20,000)")
    parser.add_argument("--seed", type=int, default=1, help="the workload's seed (default 1)")
    args = parser.parse_args()
    sim = _sim()
    for spec in FLEETS:
        print(
            f"\n{spec['replicas']} replicas, limit {spec['limit']}, {spec['concurrency']} requests at once "
            f"each, {spec['adapters']} adapters (Zipf {spec['skew']}), {spec['rate']:g}/s, "
            f"loads {spec['load'] * 1000:.0f} ms"
        )
        print(f"{'headroom':>9} {'loads':>7} {'hits':>6} {'wait mean':>10} {'wait p99':>10} {'held max':>9}")
        workload = sim.Synthetic(
            adapters=spec["adapters"],
            skew=spec["skew"],
            rate=spec["rate"],
            service=0.5,
            requests=args.requests,
            replicas=spec["replicas"],
        ).generate(args.seed)
        fleet = sim.Fleet(
            replicas=spec["replicas"],
            limit=spec["limit"],
            concurrency=spec["concurrency"],
            load_time=spec["load"],
        )
        for headroom in HEADROOMS:
            figures = sim.simulate(workload, fleet, policy(headroom))
            print(
                f"{headroom!s:>9} {figures.loads:7d} {figures.hit_rate:6.0%} "
                f"{figures.wait_mean * 1000:8.0f}ms {figures.wait_p99 * 1000:8.0f}ms {figures.held_max:9d}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

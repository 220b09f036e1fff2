"""What each headroom costs on vLLM's memory, on the simulator's fleets: the figures behind HEADROOM.

    .venv/bin/python bench/headroom.py [--requests 20000] [--seeds 2]

Needs the simulator (``lorafleet_sim``). Every fleet is one of vLLM engines of a given memory
(``--max-cpu-loras``) and batch (``--max-loras``), and lorafleet's routers are made as ``Fleet()`` makes
them but for the headroom: each headroom gets the largest limit that fits the memory with it
(``lorafleet.limit_for``: 0 gives the whole memory; None, no cap, the whole memory too). Loads count
every read of an adapter from disk, re-reads inside a step included; drops are adapters the engine
dropped from memory that the router still held.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
from typing import Any

from lorafleet import limit_for

FLEETS: list[dict[str, Any]] = [
    # replicas, engine memory and batch, concurrency per replica, adapters, Zipf skew, requests/s, load s
    {
        "replicas": 8,
        "memory": 8,
        "max_loras": 8,
        "concurrency": 8,
        "adapters": 200,
        "skew": 1.0,
        "rate": 76.8,
    },
    {
        "replicas": 8,
        "memory": 4,
        "max_loras": 4,
        "concurrency": 8,
        "adapters": 200,
        "skew": 1.0,
        "rate": 76.8,
    },
    {
        "replicas": 8,
        "memory": 8,
        "max_loras": 4,
        "concurrency": 8,
        "adapters": 200,
        "skew": 1.0,
        "rate": 51.2,
    },
    {
        "replicas": 4,
        "memory": 16,
        "max_loras": 16,
        "concurrency": 16,
        "adapters": 500,
        "skew": 0.8,
        "rate": 80.0,
    },
    {"replicas": 3, "memory": 4, "max_loras": 4, "concurrency": 8, "adapters": 24, "skew": 0.5, "rate": 30.0},
]
HEADROOMS: list[int | None] = [0, 1, 2, None]
LOAD_TIME = 0.02


def _sim() -> Any:
    """The simulator's package: an extra's, imported only when this script runs."""
    return importlib.import_module("lorafleet_sim")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000, help="requests per run (default 20,000)")
    parser.add_argument("--seeds", type=int, default=2, help="seeds to average over, from 1 (default 2)")
    args = parser.parse_args()
    sim = _sim()
    lorafleet = sim.POLICIES["lorafleet"]
    print(f"load average {os.getloadavg()[0]:.2f}; loads of {LOAD_TIME * 1000:.0f} ms stall their engine")
    for spec in FLEETS:
        print(
            f"\n{spec['replicas']} replicas of --max-cpu-loras {spec['memory']} "
            f"--max-loras {spec['max_loras']}, {spec['concurrency']} requests at once each, "
            f"{spec['adapters']} adapters (Zipf {spec['skew']}), {spec['rate']:g}/s"
        )
        print(
            f"{'headroom':>9} {'limit':>6} {'loads/1k':>9} {'re-reads':>9} {'drops':>6} "
            f"{'wait mean':>10} {'wait p99':>10}"
        )
        workloads = [
            sim.Synthetic(
                adapters=spec["adapters"],
                skew=spec["skew"],
                rate=spec["rate"],
                service=0.5,
                requests=args.requests,
                replicas=spec["replicas"],
            ).generate(seed)
            for seed in range(1, args.seeds + 1)
        ]
        for headroom in HEADROOMS:
            fleet = sim.Fleet(
                replicas=spec["replicas"],
                memory=spec["memory"],
                max_loras=spec["max_loras"],
                concurrency=spec["concurrency"],
                load_time=LOAD_TIME,
                read_latency=0.02,
                headroom=headroom,
            )
            runs = [sim.simulate(w, fleet, lorafleet, seed=s) for s, w in enumerate(workloads, start=1)]
            limit = limit_for(spec["memory"], headroom)

            def mean(key: Any, runs: list[Any] = runs) -> float:
                return statistics.fmean(key(f) for f in runs)

            print(
                f"{headroom!s:>9} {limit:6d} {mean(lambda f: f.per_1k(f.loads)):9.1f} "
                f"{mean(lambda f: f.per_1k(f.rereads)):9.1f} {mean(lambda f: f.per_1k(f.drops)):6.1f} "
                f"{mean(lambda f: f.wait_mean) * 1000:8.0f}ms {mean(lambda f: f.wait_p99) * 1000:8.0f}ms"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What in the demo's figures is placement, and what is the router's own work: lorafleet's router
beside lorafleet's placement behind the demo's own proxy, and the demo's holders-first proxy.

    .venv/bin/python bench/demo_arms.py [--seeds 1,2,3,4,5] [--out FILE] [any lorafleet demo flag]

``lorafleet demo`` compares lorafleet's router (``lorafleet serve``'s code, in the demo's process)
with proxies written in the demo that hold adapters through the same ``Fleet``. A stand-in answers a
completion at once, so an adapter stays in use for about as long as a router takes to pass the
request on and take its answer in, and a cold request waits at the cap until one goes idle: the demo's
waits for loads count each router's own work per request as well as its placement. Here a third
router takes that apart: the demo's proxy placing as the fleet does (``Fleet.route``, the placement
lorafleet's router uses), on the proxy's own request path. Each seed's stream goes through every
arm in turn (the order rotated seed by seed, each arm warmed up on the stream's start first), in
this process as the demo runs them; a run's CPU seconds are the whole process's (the stand-ins, the
client and the router share it).
"""

from __future__ import annotations

import argparse
import datetime
import io
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from lorafleet_standin import _demo as demo

ARMS: dict[str, Any] = {
    "lorafleet's router": demo.lorafleet_router,
    "lorafleet's placement, the demo's proxy": demo.placing_router,
    "holders-first, the demo's proxy": demo.holders_first_router,
}
"""Each arm's router, as the demo's ``_Serving``: a context manager that serves it on a free port."""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def figures(run: demo.Run, cpu: float) -> dict[str, float]:
    """One run's row: loads, the requests that waited for a load and how long, latency, CPU."""
    waits = run.waits()
    latencies = run.latencies()
    return {
        "loads": sum(run.loads.values()),
        "waited": len(waits),
        "wait mean": statistics.fmean(waits) if waits else 0.0,
        "wait p50": percentile(waits, 0.5),
        "wait p99": percentile(waits, 0.99),
        "latency p50": percentile(latencies, 0.5),
        "latency p99": percentile(latencies, 0.99),
        "req/s": run.rate,
        "cpu s": cpu,
    }


COLUMNS = (
    "loads",
    "waited",
    "wait mean",
    "wait p50",
    "wait p99",
    "latency p50",
    "latency p99",
    "req/s",
    "cpu s",
)
HEADS = (
    "loads",
    "requests that waited for a load",
    "their wait, mean ms",
    "p50 ms",
    "p99 ms",
    "request latency p50 ms",
    "p99 ms",
    "requests/s",
    "CPU s",
)


def cells(row: dict[str, float]) -> str:
    return " | ".join(
        f"{row[c]:.0f}" if c in ("loads", "waited", "req/s") else f"{row[c]:.1f}" for c in COLUMNS
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bench/demo_arms.py", description=__doc__.split("\n\n")[0], allow_abbrev=False
    )
    parser.add_argument("--seeds", default="1,2,3,4,5", help="the streams' seeds, comma-separated")
    parser.add_argument("--out", type=Path)
    ours, rest = parser.parse_known_args(argv)
    try:
        seeds = [int(s) for s in ours.seeds.split(",")]
    except ValueError:
        parser.error(f"--seeds: whole numbers, comma-separated, not {ours.seeds!r}")
    if any(flag == "--seed" or flag.startswith("--seed=") for flag in rest):
        parser.error("--seed: give the streams' seeds with --seeds")
    args = demo.parse(rest)
    started = time.time()
    load_before = os.getloadavg()
    rows: list[tuple[int, str, dict[str, float]]] = []
    names = list(ARMS)
    with demo.standins(args) as (root, servers, replicas):
        for k, seed in enumerate(seeds):
            args.seed = seed
            stream = demo.stream_of(args)
            warm_up = stream[: min(len(stream), 4 * args.concurrency)]
            for name in names[k % len(names) :] + names[: k % len(names)]:
                serving = ARMS[name]
                quiet = demo.Progress(len(warm_up), io.StringIO())
                demo.run_stream(args, serving, replicas, servers, root, warm_up, quiet)
                cpu = time.process_time()
                run = demo.run_stream(
                    args, serving, replicas, servers, root, stream, demo.Progress(len(stream), io.StringIO())
                )
                rows.append((seed, name, figures(run, time.process_time() - cpu)))
                print(f"seed {seed} | {name} | {cells(rows[-1][2])}", flush=True)
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    loads = (
        " / ".join(f"{x:.2f}" for x in load_before) + " → " + " / ".join(f"{x:.2f}" for x in os.getloadavg())
    )
    lines = [
        f"# The demo's arms ({when})",
        "",
        f"`bench/demo_arms.py {' '.join(argv if argv is not None else sys.argv[1:])}`: seeds "
        f"{', '.join(map(str, seeds))}; {args.replicas} stand-ins of limit {args.limit}, {args.adapters} "
        f"adapters (Zipf {args.skew:g}), {args.requests} requests, {args.concurrency} in flight, "
        f"{args.load_ms:g} ms loads, runtime {args.runtime}. {platform.machine()}, load average {loads}, "
        f"{time.time() - started:.0f} s.",
        "",
        "Medians over the seeds:",
        "",
        "| arm | " + " | ".join(HEADS) + " |",
        "|---|" + "---:|" * len(HEADS),
    ]
    for name in names:
        mine = [row for _, n, row in rows if n == name]
        lines.append(
            f"| {name} | " + cells({c: statistics.median(r[c] for r in mine) for c in COLUMNS}) + " |"
        )
    lines += [
        "",
        "Every run:",
        "",
        "| seed | arm | " + " | ".join(HEADS) + " |",
        "|---:|---|" + "---:|" * len(HEADS),
    ]
    lines += [f"| {seed} | {name} | {cells(row)} |" for seed, name, row in rows]
    text = "\n".join(lines) + "\n"
    sys.stdout.write("\n" + text)
    if ours.out is not None:
        ours.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

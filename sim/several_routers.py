"""Several routers on one fleet, with and without the running report: one markdown table.

Takes every option of ``lorafleet simulate`` (the workload, the fleet, ``--policy``, ``--seeds``,
``--read-latency``; ``--routers`` and ``--read-engine`` are what it varies) and ``--counts``, the
router counts to run. Each count runs twice on the same requests (each seed's stream is the same
whatever the count; only which router a request reaches changes): with listings only (``off``), and
with each router's machine reading which adapters run when it wants to (``read``, [read]: what
``Fleet(read_engine=True)`` does). "x exact" is a run's loads over those of one router with
listings only, whose view of the engines is exact (nothing else changes them).

    .venv/bin/python sim/several_routers.py --seeds 5 --counts 1,2,3,5 --out /tmp/routers.md
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

import attrs

from lorafleet_sim import _cli
from lorafleet_sim._sim import Figures, simulate

PROG = "sim/several_routers.py"

MODES = {"off": False, "read": True}
"""How a router reads which adapters run: ``read_engine``."""

COLUMNS = (
    "policy",
    "routers",
    "running read",
    "loads/1k",
    "x exact",
    "unloads under others /run",
    "cut",
    "under own /run",
    "reads /1k",
    "held mean",
    "held max",
    "wait mean ms",
    "wait p99 ms",
    "hit %",
    "404s /1k",
)


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    p = _cli.parser()
    p.prog = PROG
    p.add_argument(
        "--counts", type=_cli.router_counts(1), default=[1, 2, 3, 5], help="router counts (default 1,2,3,5)"
    )
    args = p.parse_args(args_list)
    names = list(dict.fromkeys(name for group in (args.policy or [["lorafleet"]]) for name in group))
    seeds = list(range(args.seed, args.seed + args.seeds))
    started = time.perf_counter()
    runs: dict[tuple[str, int, str], list[Figures]] = {}
    for routers in args.counts:
        args.routers = routers
        workloads = [_cli._workload(args, seed) for seed in seeds]
        fleet = _cli._fleet(args, args.memory)
        for name in names:
            for mode, read_engine in MODES.items():
                together = attrs.evolve(fleet, read_engine=read_engine)
                runs[name, routers, mode] = [
                    simulate(w, together, _cli.KNOWN[name], seed=s)
                    for s, w in zip(seeds, workloads, strict=True)
                ]
        sys.stderr.write(f"{PROG}: {routers} router(s) done\n")
    elapsed = time.perf_counter() - started
    text = report(args_list, args, names, runs, elapsed)
    sys.stdout.write(text)
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
    return 0


def report(
    argv: Sequence[str],
    args: argparse.Namespace,
    names: list[str],
    runs: dict[tuple[str, int, str], list[Figures]],
    elapsed: float,
) -> str:
    """The table: one row per policy, router count and running report, means over the seeds."""
    mean = _cli._mean
    lines = [
        *_cli.sweep_preamble(PROG, argv, args, len(runs), elapsed, next(iter(runs.values()))[0].requests),
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join("---" for _ in COLUMNS) + "|",
    ]
    for name in names:
        exact_runs = runs.get((name, 1, "off"))
        exact = mean([f.per_1k(f.loads) for f in exact_runs]) if exact_runs else None
        for (policy, routers, mode), figures in runs.items():
            if policy != name:
                continue
            loads = mean([f.per_1k(f.loads) for f in figures])
            under = mean([f.unloads_under_others for f in figures])
            cut = "-"
            if mode != "off":
                before = mean([f.unloads_under_others for f in runs[name, routers, "off"]])
                cut = f"{100 * (1 - under / before):.1f}%" if before else "-"
            cells = [
                name,
                str(routers),
                mode,
                f"{loads:.1f}",
                f"{loads / exact:.3f}" if exact else "-",
                f"{under:.1f}",
                cut,
                f"{mean([f.unloads_under_own for f in figures]):.1f}",
                f"{mean([f.per_1k(f.reads) for f in figures]):.1f}",
                f"{mean([f.held_mean for f in figures]):.2f}",
                str(max(f.held_max for f in figures)),
                f"{1000 * mean([f.wait_mean for f in figures]):.1f}",
                f"{1000 * mean([f.wait_p99 for f in figures]):.1f}",
                f"{100 * mean([f.hit_rate for f in figures]):.1f}",
                f"{mean([f.per_1k(f.missing) for f in figures]):.1f}",
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join([*lines, ""])


if __name__ == "__main__":
    sys.exit(main())

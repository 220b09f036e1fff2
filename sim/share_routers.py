"""Several routers with and without [share]: each router's machine made with ``routers=1`` or ``routers=R``.

Takes every option of ``lorafleet simulate`` (the workload, the fleet, ``--policy``, ``--seeds``,
``--read-engine``; ``--routers`` is what it varies) and ``--counts``, the router counts to run. Each
count runs twice on the same requests: every router's machine told it is alone (``routers=1``, the
default) and told how many routers there are (``routers=R``). "x exact" is a run's loads over those
of one router alone, whose view of the engines is exact.

    .venv/bin/python sim/share_routers.py --seeds 5 --counts 2,3,5 --headroom 2 --read-engine
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

import attrs

from lorafleet_sim import _cli
from lorafleet_sim._sim import Figures, simulate

PROG = "sim/share_routers.py"

COLUMNS = (
    "routers",
    "machine's routers",
    "loads/1k",
    "x exact",
    "held mean",
    "held max",
    "wait mean ms",
    "wait p99 ms",
    "hit %",
    "unloads under others /run",
)


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    p = _cli.parser()
    p.prog = PROG
    p.add_argument(
        "--counts", type=_cli.router_counts(2), default=[2, 3, 5], help="router counts (default 2,3,5)"
    )
    args = p.parse_args(args_list)
    name = next(iter(dict.fromkeys(n for group in (args.policy or [["lorafleet"]]) for n in group)))
    seeds = list(range(args.seed, args.seed + args.seeds))
    started = time.perf_counter()
    runs: dict[tuple[int, int], list[Figures]] = {}
    for routers in [1, *args.counts]:
        args.routers = routers
        workloads = [_cli._workload(args, seed) for seed in seeds]
        fleet = _cli._fleet(args, args.memory)
        for told in sorted({1, routers}):
            shared = attrs.evolve(fleet, settings={**fleet.settings, "routers": told})
            runs[routers, told] = [
                simulate(w, shared, _cli.KNOWN[name], seed=s) for s, w in zip(seeds, workloads, strict=True)
            ]
        sys.stderr.write(f"{PROG}: {routers} router(s) done\n")
    elapsed = time.perf_counter() - started
    mean = _cli._mean
    exact = mean([f.per_1k(f.loads) for f in runs[1, 1]])
    lines = [
        *_cli.sweep_preamble(PROG, args_list, args, len(runs), elapsed, runs[1, 1][0].requests),
        f"Policy: {name}.",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join("---" for _ in COLUMNS) + "|",
    ]
    for (routers, told), figures in runs.items():
        loads = mean([f.per_1k(f.loads) for f in figures])
        cells = [
            str(routers),
            str(told),
            f"{loads:.1f}",
            f"{loads / exact:.3f}",
            f"{mean([f.held_mean for f in figures]):.2f}",
            str(max(f.held_max for f in figures)),
            f"{1000 * mean([f.wait_mean for f in figures]):.1f}",
            f"{1000 * mean([f.wait_p99 for f in figures]):.1f}",
            f"{100 * mean([f.hit_rate for f in figures]):.1f}",
            f"{mean([f.unloads_under_others for f in figures]):.1f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    text = "\n".join([*lines, ""])
    sys.stdout.write(text)
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``lorafleet simulate``: compare routing policies on a simulated fleet that runs the real machine.

Every policy sees the same requests (a seeded synthetic stream, or a trace file); the table gives what
each cost, beside the bounds of the same run.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import platform
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

import lorafleet

from . import _sizes
from ._policies import POLICIES, VARIANTS
from ._sim import UNSET, Figures, Fleet, simulate
from ._sizes import ranges
from ._workload import Synthetic, Workload, WorkloadError, read_trace

PROG = "lorafleet simulate"
PLOT_LIMITS = (1, 2, 3, 4, 6, 8, 12, 16)
KNOWN = {**POLICIES, **VARIANTS}
SWEEP = "several (4,6,8 or 4..8) sweep every combination"


def _number(
    kind: Callable[[str], Any], what: str, low: float, *, above: bool = False
) -> Callable[[str], Any]:
    """An argparse type: a finite number of ``kind`` at least (or above) ``low``."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if value < low or (above and value == low):
            raise argparse.ArgumentTypeError(f"{text!r} must be {'above' if above else 'at least'} {low:g}")
        return value

    return parse


def _share(text: str) -> float:
    value: float = _number(float, "a number", 0.0, above=True)(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at most 1 (a share of the requests)")
    return value


def _fraction(text: str) -> float:
    value: float = _number(float, "a number", 0.0)(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at most 1 (a fraction of the reads)")
    return value


def _policies(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("no policy named")
    for name in names:
        if name not in KNOWN:
            raise argparse.ArgumentTypeError(f"unknown policy {name!r} (choose from {', '.join(KNOWN)})")
    return names


class _Parser(argparse.ArgumentParser):
    """Options that sweep sizes parse into ``<dest>_range`` lists; ``<dest>`` is their first value."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, rest = super().parse_known_args(args, namespace)
        for dest, _ in _sizes.SIZES:
            setattr(parsed, dest, getattr(parsed, f"{dest}_range")[0])
        return parsed, rest


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description=(__doc__ or "").splitlines()[0].replace("``", ""))
    positive_int = _number(int, "an integer", 1)
    positive = _number(float, "a number", 0.0, above=True)
    sizes = ranges(1)
    p.add_argument(
        "--replicas",
        dest="replicas_range",
        metavar="N",
        type=sizes,
        default=[8],
        help=f"vLLM replicas (default 8); {SWEEP}",
    )
    p.add_argument(
        "--max-cpu-loras",
        dest="memory_range",
        metavar="N",
        type=sizes,
        default=[8],
        help=(
            "adapters each engine keeps in memory, vLLM's --max-cpu-loras, for every policy (default 8); "
            f"{SWEEP}"
        ),
    )
    p.add_argument(
        "--max-loras",
        dest="max_loras_range",
        metavar="N",
        type=sizes,
        default=[8],
        help=f"distinct adapters one batch of an engine may use, vLLM's --max-loras (default 8); {SWEEP}",
    )
    p.add_argument(
        "--limit",
        dest="limit_range",
        metavar="N",
        type=sizes,
        default=[None],
        help=(
            "the limit every router's machine gives a replica (default: what fits --max-cpu-loras with "
            f"the machine's headroom and routers, lorafleet.limit_for); {SWEEP}"
        ),
    )
    p.add_argument(
        "--wait-target",
        type=_number(float, "a number of milliseconds", 0.0, above=True),
        help="a sweep names the sizes whose mean wait is at most this many ms (and that keep up)",
    )
    p.add_argument(
        "--p99-target",
        type=_number(float, "a number of milliseconds", 0.0, above=True),
        help="a sweep names the sizes whose p99 wait is at most this many ms (and that keep up)",
    )
    p.add_argument(
        "--frees",
        action="store_true",
        help="an unload frees the adapter's memory (vLLM's Python frontend, through 0.34, frees none)",
    )
    p.add_argument("--adapters", type=positive_int, default=200, help="distinct adapters (default 200)")
    p.add_argument(
        "--skew", type=_number(float, "a number", 0.0), default=1.0, help="Zipf exponent (default 1.0)"
    )
    p.add_argument("--rate", type=positive, default=76.8, help="requests per second, Poisson (default 76.8)")
    p.add_argument(
        "--concurrency",
        dest="concurrency_range",
        metavar="N",
        type=sizes,
        default=[8],
        help=f"requests a replica runs at once, vLLM's --max-num-seqs: its batch (default 8); {SWEEP}",
    )
    p.add_argument(
        "--service", type=positive, default=0.5, help="mean service seconds, exponential (default 0.5)"
    )
    p.add_argument(
        "--load",
        type=_number(float, "a number", 0.0),
        default=0.02,
        help="seconds a read of an adapter from disk takes, stalling its engine (default 0.02)",
    )
    p.add_argument("--requests", type=positive_int, default=50_000, help="requests per run (default 50000)")
    p.add_argument("--seed", type=_number(int, "an integer", 0), default=1, help="first seed (default 1)")
    p.add_argument("--seeds", type=positive_int, default=1, help="seeds to average over (default 1)")
    p.add_argument(
        "--policy",
        type=_policies,
        action="append",
        help=(
            f"policies to compare, repeatable or comma-separated (default: {', '.join(POLICIES)}; "
            f"variants with one machine setting changed: {', '.join(VARIANTS)})"
        ),
    )
    p.add_argument(
        "--routers", type=positive_int, default=1, help="routers, each with its own machine (default 1)"
    )
    p.add_argument(
        "--listing-interval", type=positive, default=30.0, help="seconds between listings (default 30)"
    )
    p.add_argument(
        "--read-engine",
        "--read-running",
        "--read-before-evicting",
        dest="read_engine",
        action=argparse.BooleanOptionalAction,
        default=UNSET,
        help=(
            "each router's machine reads what runs on an engine, from any router, when it wants to "
            "([read]), as Fleet(read_engine=True) does (default: as shipped, which is on for lorafleet "
            "and off for the baselines; --read-running and --read-before-evicting are older names)"
        ),
    )
    p.add_argument(
        "--shared-interval",
        type=_shared_interval,
        default=UNSET,
        metavar="S",
        help=(
            "seconds between two listings of a replica another router works on ([time]), or 'off' "
            f"(default: as shipped, {lorafleet.FLEET_DEFAULTS['shared_interval']:g} for lorafleet, "
            "off for the baselines)"
        ),
    )
    p.add_argument(
        "--read-latency",
        type=_number(float, "a number of seconds", 0.0),
        default=0.0,
        help="seconds from a reading's sample to its report reaching the router (default 0: at once)",
    )
    p.add_argument(
        "--relay",
        type=_number(float, "a number of seconds", 0.0),
        default=None,
        metavar="S",
        help=(
            "the first router decides for all, the others relay their requests to it in S seconds "
            "(lorafleet serve's [peers]; default: each router decides its own)"
        ),
    )
    p.add_argument(
        "--read-delay",
        type=_number(float, "a number of seconds", 0.0),
        default=0.0,
        help=(
            "seconds from a read's sending to the engine taking its sample, added to --read-latency "
            "(default 0: the sample is taken as the read is sent)"
        ),
    )
    p.add_argument(
        "--read-failures",
        type=_fraction,
        default=0.0,
        help=(
            "the fraction of readings that get no answer, drawn from the seed, each reported as "
            "RunningReadFailed as Fleet does: the last reading stands until a listing (default 0)"
        ),
    )
    p.add_argument(
        "--failed-read-drops",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="every failed reading says nothing runs, as Fleet did before [read-failed] (default: off)",
    )
    p.add_argument(
        "--headroom",
        dest="headroom_range",
        metavar="N",
        type=ranges(0, none=True),
        default=[UNSET],
        help=(
            "the machine's cap: adapters a replica may hold past its limit, or 'none' (default: as "
            f"shipped, {lorafleet.FLEET_DEFAULTS['headroom']} for lorafleet, none for the baselines); "
            f"{SWEEP}"
        ),
    )
    p.add_argument(
        "--overflow",
        type=_number(int, "an integer", 0),
        default=UNSET,
        help=f"the machine's overflow for [place] (default {lorafleet.DEFAULT_OVERFLOW})",
    )
    p.add_argument(
        "--half-life",
        type=positive_int,
        default=UNSET,
        help=(
            f"requests between halvings of the demand counts [evict] (default {lorafleet.DEFAULT_HALF_LIFE})"
        ),
    )
    p.add_argument(
        "--tell-concurrency",
        action="store_true",
        help=(
            "give every router's machine the replicas' --concurrency (Fleet(concurrency=...)); a Fleet "
            "is told nothing by default and learns it from the engines"
        ),
    )
    p.add_argument(
        "--trace",
        type=Path,
        help=(
            "requests from FILE instead: lorafleet serve's request log (--request-log), or lines "
            "'timestamp adapter duration'"
        ),
    )
    p.add_argument("--shift", action="store_true", help="popularity shifts to a new order half-way")
    p.add_argument(
        "--flash",
        type=_share,
        nargs="?",
        const=0.3,
        help="a cold adapter takes this share of requests from 40%% to 50%% of the run (default 0.3)",
    )
    p.add_argument(
        "--swing",
        type=_share,
        nargs="?",
        const=0.5,
        help="a daily swing: the rate rises and falls by this share over the run, one period (default 0.5)",
    )
    p.add_argument(
        "--bursts",
        action="store_true",
        help="Markov-modulated bursts: now and then the rate doubles for one adapter's extra requests",
    )
    p.add_argument(
        "--restarts", type=_number(int, "an integer", 0), default=0, help="replica restarts (default 0)"
    )
    p.add_argument("--out", type=Path, help="write the results, as markdown, to this file")
    p.add_argument(
        "--grid",
        action="store_true",
        help=(
            "run lorafleet as shipped against the baselines over issue 17's grid of workloads, each "
            "with --seeds seeds of --requests requests, and say which targets it met (other workload "
            "and fleet options do not apply)"
        ),
    )
    p.add_argument(
        "--plot",
        type=Path,
        help=(
            "also sweep --max-cpu-loras and plot loads and load latency per policy; with sizes swept, "
            "plot the sweep's loads/s and waits instead (matplotlib)"
        ),
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``lorafleet simulate`` with ``argv`` (without the program name); returns the exit status."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    p = parser()
    args = p.parse_args(args_list)
    if args.grid:
        from . import _grid

        command = " ".join([PROG, *(shlex.quote(a) for a in args_list)])
        text = _grid.main(args.requests, list(range(args.seed, args.seed + args.seeds)), command, _machine())
        sys.stdout.write(text)
        if args.out is not None:
            args.out.write_text(text, encoding="utf-8")
        return 0
    if args.trace is not None and (args.shift or args.flash is not None or args.swing or args.bursts):
        p.error(
            "--shift, --flash, --swing and --bursts shape the synthetic stream; they do not apply to --trace"
        )
    if _sizes.swept(args):
        return _sweep_sizes(p, args_list, args)
    refused = lorafleet.engine_refusal(args.memory, args.max_loras)
    if refused is not None:
        p.error(refused)
    pyplot = None
    if args.plot is not None:
        try:
            importlib.import_module("matplotlib")
        except ImportError:
            p.error("--plot needs matplotlib, an optional extra: pip install 'lorafleet[plot]'")
        pyplot = _pyplot()
    names = list(dict.fromkeys(name for group in (args.policy or [list(POLICIES)]) for name in group))
    seeds = list(range(args.seed, args.seed + args.seeds))
    started = time.perf_counter()
    try:
        workloads = [_workload(args, seed) for seed in seeds]
    except WorkloadError as exc:
        p.exit(2, f"{PROG}: error: {exc}\n")
    try:
        fleet = _fleet(args, args.memory)
        for name in names:
            fleet.limit_of(0, KNOWN[name])
    except ValueError as exc:
        p.exit(2, f"{PROG}: error: {exc}\n")
    (size,) = _sizes.sizes(args)
    warnings = [
        f"{name}: {why}"
        for name in names
        if (why := _sizes.overfull(size, fleet.settings_of(KNOWN[name]).get("headroom"), args.routers))
    ]
    for warning in warnings:
        sys.stderr.write(f"{PROG}: warning: {warning}\n")
    runs = {
        name: [simulate(w, fleet, KNOWN[name], seed=s) for s, w in zip(seeds, workloads, strict=True)]
        for name in names
    }
    elapsed = time.perf_counter() - started
    text = report(args_list, args, runs, elapsed, workloads[0].note, warnings)
    sys.stdout.write(text)
    if args.plot is not None:
        plot_started = time.perf_counter()
        sweep = _sweep(args, names, seeds, workloads)
        _draw(pyplot, sweep, args)
        table = sweep_table(sweep, args.plot, time.perf_counter() - plot_started)
        sys.stdout.write(table)
        text += table
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
    return 0


def _sweep_sizes(p: argparse.ArgumentParser, argv: list[str], args: argparse.Namespace) -> int:
    """Run every combination of the sizes given, each policy on the same requests; print one table."""
    pyplot = None
    if args.plot is not None:
        try:
            importlib.import_module("matplotlib")
        except ImportError:
            p.error("--plot needs matplotlib, an optional extra: pip install 'lorafleet[plot]'")
        pyplot = _pyplot()
    names = list(dict.fromkeys(name for group in (args.policy or [["lorafleet"]]) for name in group))
    seeds = list(range(args.seed, args.seed + args.seeds))
    started = time.perf_counter()
    warnings: list[str] = []
    rows: list[_sizes.Row] = []
    workloads: dict[int, list[Workload]] = {}
    for size in _sizes.sizes(args):
        refused = _sizes.refusal(size)
        if refused is not None:
            warnings.append(f"left out {size.named()}: {refused}")
            continue
        sized = argparse.Namespace(**{**vars(args), **attrs.asdict(size, recurse=False)})
        try:
            if size.replicas not in workloads:
                workloads[size.replicas] = [_workload(sized, seed) for seed in seeds]
        except WorkloadError as exc:
            p.exit(2, f"{PROG}: error: {exc}\n")
        fleet = _fleet(sized, size.memory)
        for name in names:
            try:
                fleet.limit_of(0, KNOWN[name])
            except ValueError as exc:
                warnings.append(f"left out {size.named()} ({name}): {exc}")
                continue
            headroom = fleet.settings_of(KNOWN[name]).get("headroom")
            overfull = _sizes.overfull(size, headroom, args.routers)
            if overfull is not None:
                warnings.append(f"{size.named()} ({name}): {overfull}")
            figures = tuple(
                simulate(w, fleet, KNOWN[name], seed=s)
                for s, w in zip(seeds, workloads[size.replicas], strict=True)
            )
            rows.append(_sizes.Row(size, name, figures))
        sys.stderr.write(f"sweep: {size.named()} done\n")
    for warning in warnings:
        sys.stderr.write(f"{PROG}: warning: {warning}\n")
    if not rows:
        p.exit(2, f"{PROG}: error: no size of the sweep can run (see the warnings above)\n")
    elapsed = time.perf_counter() - started
    first = next(iter(workloads.values()))[0]
    if args.trace is not None:
        workload = f"trace {args.trace} ({len(first)} requests{', ' + first.note if first.note else ''})"
    else:
        workload = (
            f"{len(first)} requests, Poisson at {args.rate:g}/s, Zipf({args.skew:g}) over {args.adapters} "
            f"adapters, service exponential mean {args.service:g} s"
        )
    lines = [
        f"## {PROG}: a sweep of {len(rows)} fleet(s)",
        "",
        f"Command: `{' '.join([PROG, *(shlex.quote(a) for a in argv)])}`",
        "",
        f"Machine: {_machine()}. Run time: {elapsed:.1f} s for {len(rows)} runs x {len(seeds)} seed(s).",
        "",
        f"Workload: {workload}; loads of {args.load:g} s, {args.routers} router(s)"
        + _reads(args, "each")
        + _settings(args)
        + f"; seeds {args.seed}..{args.seed + args.seeds - 1}, figures are means over the seeds.",
        "",
        *(f"Warning: {w}." for w in warnings),
        *([""] if warnings else []),
        *_sizes.table(rows, args.wait_target, args.p99_target),
        "Loads/s: reads of adapters from disk per second of arrivals; utilisation: seconds requests held "
        "a request slot (paused by reads included) over the fleet's slots (replicas x concurrency) "
        "while requests arrived; wait: arrival to start of service; held: adapters an engine held, "
        "time-mean and most.",
        "",
    ]
    if pyplot is not None:
        _sizes.draw(pyplot, rows, args.plot, args.wait_target)
        lines.append(f"Plot: {args.plot}.\n")
    text = "\n".join(lines)
    sys.stdout.write(text)
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
    return 0


def _workload(args: argparse.Namespace, seed: int) -> Workload:
    if args.trace is not None:
        return read_trace(
            args.trace, routers=args.routers, replicas=args.replicas, restarts=args.restarts, seed=seed
        )
    return Synthetic(
        adapters=args.adapters,
        skew=args.skew,
        rate=args.rate,
        service=args.service,
        requests=args.requests,
        routers=args.routers,
        replicas=args.replicas,
        shift=args.shift,
        flash=args.flash,
        restarts=args.restarts,
        swing=args.swing,
        bursts=args.bursts,
    ).generate(seed)


def _fleet(args: argparse.Namespace, memory: int) -> Fleet:
    return Fleet(
        replicas=args.replicas,
        memory=memory,
        max_loras=min(args.max_loras, memory),
        limit=args.limit,
        frees=args.frees,
        concurrency=args.concurrency,
        load_time=args.load,
        routers=args.routers,
        listing_interval=args.listing_interval,
        headroom=args.headroom,
        overflow=args.overflow,
        half_life=args.half_life,
        read_engine=args.read_engine,
        shared_interval=args.shared_interval,
        tell_concurrency=args.tell_concurrency,
        read_latency=args.read_latency,
        read_delay=args.read_delay,
        relay=args.relay,
        read_failures=args.read_failures,
        failed_read_drops=args.failed_read_drops,
    )


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


COLUMNS = (
    ("policy", "{}"),
    ("loads/1k", "{:.1f}"),
    ("vs least-loaded", "{}"),
    ("hit %", "{:.1f}"),
    ("wait mean ms", "{:.1f}"),
    ("wait p99 ms", "{:.1f}"),
    ("imbalance", "{:.3f}"),
    ("reloads<10s /1k", "{:.1f}"),
    ("held mean", "{:.2f}"),
    ("held max", "{}"),
    ("Belady /1k", "{:.1f}"),
    ("x Belady", "{:.3f}"),
    ("copies /1k", "{:.1f}"),
    ("404s /1k", "{:.1f}"),
    ("re-reads /1k", "{:.1f}"),
    ("drops /1k", "{:.1f}"),
    ("unloads under others", "{:.1f}"),
    ("under own", "{:.1f}"),
    ("loads/s", "{:.2f}"),
    ("utilisation", "{:.2f}"),
    ("to grant ms", "{:.1f}"),
    ("in engine ms: full / batch / reads", "{}"),
)


def rows(runs: dict[str, list[Figures]]) -> list[list[str]]:
    """One row per policy: each figure is the mean over the seeds (the max for ``held max``)."""
    least = runs.get("least-loaded")
    baseline = _mean([f.per_1k(f.loads) for f in least]) if least else None
    out: list[list[str]] = []
    for name, figures in runs.items():
        loads = _mean([f.per_1k(f.loads) for f in figures])
        versus = f"{100 * (loads / baseline - 1):+.1f}%" if baseline else "-"
        values: list[Any] = [
            name,
            loads,
            versus,
            100 * _mean([f.hit_rate for f in figures]),
            1000 * _mean([f.wait_mean for f in figures]),
            1000 * _mean([f.wait_p99 for f in figures]),
            _mean([f.imbalance for f in figures]),
            _mean([f.per_1k(f.reloads) for f in figures]),
            _mean([f.held_mean for f in figures]),
            max(f.held_max for f in figures),
            _mean([f.per_1k(f.belady) for f in figures]),
            _mean([f.belady_ratio for f in figures]),
            _mean([f.per_1k(f.copies) for f in figures]),
            _mean([f.per_1k(f.missing) for f in figures]),
            _mean([f.per_1k(f.rereads) for f in figures]),
            _mean([f.per_1k(f.drops) for f in figures]),
            _mean([f.unloads_under_others for f in figures]),
            _mean([f.unloads_under_own for f in figures]),
            _mean([f.loads_per_second for f in figures]),
            _mean([f.utilisation for f in figures]),
            1000 * _mean([f.load_wait_mean for f in figures]),
            " / ".join(f"{1000 * _mean([f.engine_waits[i] for f in figures]):.1f}" for i in range(3)),
        ]
        out.append([fmt.format(v) for (_, fmt), v in zip(COLUMNS, values, strict=True)])
    return out


def report(
    argv: Sequence[str],
    args: argparse.Namespace,
    runs: dict[str, list[Figures]],
    elapsed: float,
    note: str = "",
    warnings: Sequence[str] = (),
) -> str:
    """The results as markdown: the command, the machine, the workload, the table and what it means."""
    first = next(iter(runs.values()))
    n = first[0].requests
    compulsory = _mean([f.per_1k(f.compulsory) for f in first])
    if args.trace is not None:
        workload = f"trace {args.trace} ({n} requests{', ' + note if note else ''})"
    else:
        workload = (
            f"{n} requests, Poisson at {args.rate:g}/s, Zipf({args.skew:g}) over {args.adapters} adapters, "
            f"service exponential mean {args.service:g} s"
            + (", popularity shift half-way" if args.shift else "")
            + (f", flash crowd {args.flash:g} of requests from 40% to 50%" if args.flash is not None else "")
            + (f", a swing of {args.swing:g} over the run" if args.swing else "")
            + (", Markov-modulated bursts" if args.bursts else "")
        )
    lines = [
        f"## {PROG}: {args.replicas} replicas of --max-cpu-loras {args.memory}, {args.routers} router(s)",
        "",
        f"Command: `{' '.join([PROG, *(shlex.quote(a) for a in argv)])}`",
        "",
        f"Machine: {_machine()}. Run time: {elapsed:.1f} s for {len(runs)} policies x {len(first)} seed(s).",
        "",
        f"Workload: {workload}; {args.replicas} vLLM replicas running {args.concurrency} requests at once "
        f"of at most {args.max_loras} adapters, each keeping {args.memory} in memory"
        + (f" (every machine's limit {args.limit})" if args.limit is not None else "")
        + (", unloads freeing memory" if args.frees else "")
        + f", loads of {args.load:g} s"
        + (f", {args.restarts} replica restarts" if args.restarts else "")
        + (f", {args.routers} routers listing every {args.listing_interval:g} s" if args.routers > 1 else "")
        + (
            f", the first deciding for all, the others relaying to it in {1000 * args.relay:g} ms"
            if args.relay is not None and args.routers > 1
            else ""
        )
        + _reads(args, "each")
        + _settings(args)
        + f"; seeds {args.seed}..{args.seed + args.seeds - 1}, figures are means over the seeds.",
        "",
        *(f"Warning: {w}." for w in warnings),
        *([""] if warnings else []),
        "| " + " | ".join(name for name, _ in COLUMNS) + " |",
        "|" + "|".join("---" for _ in COLUMNS) + "|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows(runs)]
    for name, figures in runs.items():
        why = next((w for f in figures if (w := f.overloaded) is not None), None)
        if why is not None:
            lines.append("")
            lines.append(
                f"Overloaded under {name}: {why}. This fleet cannot keep up with this traffic, and its "
                "waits grow with the length of the run: add replicas or --concurrency, or sweep them "
                "(--replicas 8..12)."
            )
    lines += [
        "",
        f"Compulsory loads (distinct adapters asked for): {compulsory:.1f} /1k. Belady: MIN on each "
        "replica's own request sequence with the capacity the policy had there at each request, "
        "a lower bound for that routing; x Belady is the policy's loads over it. Loads: every read of "
        "an adapter from disk, re-reads included (an engine reading back inside a step an adapter its "
        "memory dropped while it was registered); drops: adapters an engine's memory dropped while "
        "registered. Copies: loads of an "
        "adapter another replica held. Wait: arrival to start of service. Unloads under others (own): "
        "unloads per run of an adapter another router (the unloading router) had requests running or "
        "waiting on there. Loads/s: per second of arrivals; utilisation: seconds requests held a request "
        "slot (paused by reads included) over the fleet's slots while requests arrived; to grant: arrival "
        "to the adapter's grant, the request log's wait; in engine: from the grant to the start of "
        "service, per request, of the requests that found their engine running all it could at once "
        "(full), its batch with no room for one more adapter (batch), or reading an adapter from disk "
        "first (reads: a load, or a re-read of their own adapter).",
        "",
    ]
    return "\n".join(lines)


def sweep_preamble(
    prog: str, argv: Sequence[str], args: argparse.Namespace, runs: int, elapsed: float, requests: int
) -> list[str]:
    """The lines a script sweeping the router count prints above its table: command, machine, fleet."""
    return [
        f"Command: `{' '.join([prog, *(shlex.quote(a) for a in argv)])}`",
        "",
        f"Machine: {_machine()}. Run time: {elapsed:.1f} s for {runs} runs x {args.seeds} seed(s).",
        "",
        f"Fleet: {args.replicas} replicas of --max-cpu-loras {args.memory} and --max-loras {args.max_loras} "
        f"running {args.concurrency} requests at once, "
        f"loads of {args.load:g} s, listings every {args.listing_interval:g} s"
        + _reads(args, "each router")
        + _settings(args)
        + f"; {requests} requests a run, seeds {args.seed}..{args.seed + args.seeds - 1}.",
        "",
    ]


def router_counts(least: int) -> Callable[[str], list[int]]:
    """An argparse type: a comma-separated list of router counts, each at least ``least``."""

    def parse(text: str) -> list[int]:
        try:
            counts = [int(part) for part in text.split(",") if part.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a list of router counts") from None
        if not counts or min(counts) < least:
            raise argparse.ArgumentTypeError(f"{text!r} must name router counts of at least {least}")
        return counts

    return parse


def _shared_interval(text: str) -> float | None:
    """``--shared-interval``: a positive number of seconds, or ``off``."""
    if text == "off":
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds or 'off', not {text!r}")
    return value


def _reads(args: argparse.Namespace, who: str) -> str:
    """How the routers read which adapters run, as a clause of the fleet's line (nothing: no reads)."""
    clause = (
        f", {who} reading which adapters run when the machine asks ([read])"
        if args.read_engine is True
        else ""
    )
    if args.read_delay:
        clause += f", each engine sampled {1000 * args.read_delay:g} ms after the read was sent"
    if args.read_latency:
        clause += f", readings reported {1000 * args.read_latency:g} ms after their sample"
    if args.read_failures:
        kept = "dropping" if args.failed_read_drops else "keeping"
        clause += f", {100 * args.read_failures:g} % of readings failed ({kept} the last one)"
    return clause


def _settings(args: argparse.Namespace) -> str:
    """The machine's settings that differ from what ships, as a clause of the workload line."""
    given = [
        f"{name.replace('_', '-')} {'none' if value is None else value}"
        for name in ("headroom", "overflow", "half_life")
        if (value := getattr(args, name)) is not UNSET
    ]
    if args.tell_concurrency:
        given.append(f"concurrency {args.concurrency} told")
    shipped = "; every router's machine as shipped (lorafleet's as Fleet() makes it)"
    return shipped + (", but " + ", ".join(given) if given else "")


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()} on {platform.system()}"


def _sweep(
    args: argparse.Namespace, names: list[str], seeds: list[int], workloads: list[Workload]
) -> dict[int, dict[str, tuple[float, float]]]:
    """Loads per 1,000 requests and mean load latency (ms) per policy, for each memory of the sweep."""
    limits = sorted({k for k in PLOT_LIMITS if k <= args.adapters} | {args.memory})
    sweep: dict[int, dict[str, tuple[float, float]]] = {}
    for limit in limits:
        fleet = _fleet(args, limit)
        sweep[limit] = {}
        for name in names:
            figures = [simulate(w, fleet, KNOWN[name], seed=s) for s, w in zip(seeds, workloads, strict=True)]
            sweep[limit][name] = (
                _mean([f.per_1k(f.loads) for f in figures]),
                1000 * _mean([f.load_wait_mean for f in figures]),
            )
        sys.stderr.write(f"plot: --max-cpu-loras {limit} done\n")
    return sweep


def sweep_table(sweep: dict[int, dict[str, tuple[float, float]]], path: Path, elapsed: float) -> str:
    """The plotted figures as markdown: loads/1k and the latency loads add (ms), per memory and policy."""
    names = list(next(iter(sweep.values())))
    lines = [
        "",
        f"Plot {path} ({elapsed:.1f} s): loads per 1,000 requests / mean ms that loads added to a request, "
        "by --max-cpu-loras.",
        "",
        "| max-cpu-loras | " + " | ".join(names) + " |",
        "|" + "|".join("---" for _ in range(len(names) + 1)) + "|",
    ]
    for limit, figures in sweep.items():
        cells = [f"{figures[name][0]:.1f} / {figures[name][1]:.1f}" for name in names]
        lines.append(f"| {limit} | " + " | ".join(cells) + " |")
    return "\n".join([*lines, ""])


def _pyplot() -> Any:
    matplotlib = importlib.import_module("matplotlib")
    matplotlib.use("Agg")
    return importlib.import_module("matplotlib.pyplot")


def _draw(pyplot: Any, sweep: dict[int, dict[str, tuple[float, float]]], args: argparse.Namespace) -> None:
    limits = list(sweep)
    names = list(next(iter(sweep.values())))
    figure, (loads, latency) = pyplot.subplots(1, 2, figsize=(11, 4.2))
    for name in names:
        loads.plot(limits, [sweep[k][name][0] for k in limits], marker="o", label=name)
        latency.plot(limits, [sweep[k][name][1] for k in limits], marker="o", label=name)
    loads.set(
        xlabel="--max-cpu-loras (adapters per engine)", ylabel="loads per 1,000 requests", title="Loads"
    )
    latency.set(
        xlabel="--max-cpu-loras (adapters per engine)",
        ylabel="ms per request",
        title="Latency loads add (arrival to grant, mean)",
    )
    for axes in (loads, latency):
        axes.grid(alpha=0.3)
        axes.set_xticks(limits)
    loads.legend()
    figure.suptitle(
        f"{args.replicas} replicas, C={args.concurrency}, Zipf({args.skew:g}) over {args.adapters} adapters, "
        f"{args.rate:g} req/s, load {args.load:g} s, {args.routers} router(s), seeds {args.seed}.."
        f"{args.seed + args.seeds - 1}",
        fontsize=9,
    )
    figure.tight_layout()
    figure.savefig(args.plot, dpi=110)
    pyplot.close(figure)

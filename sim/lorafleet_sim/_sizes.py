"""Sizing sweeps: ``lorafleet simulate`` over every combination of the fleet sizes it is given.

``--replicas 4..8 --max-cpu-loras 8,16`` runs each size on the same requests and prints one table a
size: loads per second and per 1,000 requests, utilisation, waits, adapters held, and in words which
sizes cannot keep up and which meet the wait target given. A size vLLM would not start (memory below
the batch) is left out with a warning naming it; one whose machines may put more adapters on an engine
than its memory holds is run, with a warning.
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

import lorafleet

from ._sim import UNSET, Figures

SIZES = (
    ("replicas", "replicas"),
    ("memory", "max-cpu-loras"),
    ("max_loras", "max-loras"),
    ("concurrency", "concurrency"),
    ("limit", "limit"),
    ("headroom", "headroom"),
)
"""The settings a sweep varies: the option's dest, and its name in the table and in messages."""


def ranges(least: int, *, none: bool = False) -> Callable[[str], list[Any]]:
    """An argparse type: whole numbers of at least ``least``, one (``8``) or several (``4,6,8``,
    ``4..8``, ``2,4..6``); with ``none``, ``none`` among them too."""

    def parse(text: str) -> list[Any]:
        values: list[Any] = []
        for part in (p.strip() for p in text.split(",")):
            if none and part.lower() == "none":
                values.append(None)
                continue
            low, dots, high = part.partition("..")
            try:
                first = int(low)
                last = int(high) if dots else first
            except ValueError:
                wanted = "an integer" + (", 'none'" if none else "")
                raise argparse.ArgumentTypeError(
                    f"{part!r} is not {wanted} or a range A..B of them"
                ) from None
            if first < least:
                raise argparse.ArgumentTypeError(f"{part!r} must be at least {least}")
            if last < first:
                raise argparse.ArgumentTypeError(f"{text!r}: the range {part!r} is empty")
            values.extend(range(first, last + 1))
        return list(dict.fromkeys(values))

    return parse


@attrs.frozen
class Size:
    """One fleet of a sweep: each setting ``SIZES`` names (``limit``: None for what fits; ``headroom``:
    UNSET as shipped, None for no cap)."""

    replicas: int
    memory: int
    max_loras: int
    concurrency: int
    limit: int | None
    headroom: Any

    def cells(self) -> list[str]:
        limit = "fits" if self.limit is None else str(self.limit)
        headroom = "shipped" if self.headroom is UNSET else "none" if self.headroom is None else self.headroom
        return [
            str(self.replicas),
            str(self.memory),
            str(self.max_loras),
            str(self.concurrency),
            limit,
            str(headroom),
        ]

    def named(self, only: Sequence[str] | None = None) -> str:
        """The size in words: every setting, or those of ``only`` (names as the table has them)."""
        return ", ".join(
            f"{name} {cell}"
            for (_, name), cell in zip(SIZES, self.cells(), strict=True)
            if only is None or name in only
        )


def sizes(args: argparse.Namespace) -> list[Size]:
    """Every combination of the sizes given, in the order given (the first varying slowest)."""
    lists = [getattr(args, f"{dest}_range") for dest, _ in SIZES]
    return [Size(*values) for values in itertools.product(*lists)]


def swept(args: argparse.Namespace) -> bool:
    """Whether any size was given more than one value."""
    return any(len(getattr(args, f"{dest}_range")) > 1 for dest, _ in SIZES)


def refusal(size: Size) -> str | None:
    """Why vLLM would not start an engine of ``size``, or None."""
    return lorafleet.engine_refusal(size.memory, size.max_loras)


def overfull(size: Size, headroom: int | None, routers: int) -> str | None:
    """A warning when the machines may put more adapters on an engine than its memory holds."""
    if size.limit is None:
        return None
    most = lorafleet.most_held(size.limit, headroom, routers)
    if most <= size.memory:
        return None
    return (
        f"limit {size.limit} with headroom {headroom} and {routers} router(s) may put {most} adapters on "
        f"an engine of --max-cpu-loras {size.memory}: past it vLLM drops adapters and reads them back "
        "inside its steps (leave --limit out for what fits)"
    )


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


COLUMNS = (
    "replicas",
    "max-cpu-loras",
    "max-loras",
    "concurrency",
    "limit",
    "headroom",
    "policy",
    "loads/s",
    "loads/1k",
    "utilisation",
    "wait mean ms",
    "wait p99 ms",
    "held mean",
    "held max",
    "verdict",
)


@attrs.frozen
class Row:
    size: Size
    policy: str
    figures: tuple[Figures, ...]

    @property
    def wait_mean(self) -> float:
        return _mean([f.wait_mean for f in self.figures])

    @property
    def wait_p99(self) -> float:
        return _mean([f.wait_p99 for f in self.figures])

    @property
    def overloaded(self) -> str | None:
        return next((why for f in self.figures if (why := f.overloaded) is not None), None)

    def meets(self, mean_ms: float | None, p99_ms: float | None) -> bool:
        return (
            self.overloaded is None
            and (mean_ms is None or 1000 * self.wait_mean <= mean_ms)
            and (p99_ms is None or 1000 * self.wait_p99 <= p99_ms)
        )

    def cells(self, mean_ms: float | None, p99_ms: float | None) -> list[str]:
        f = self.figures
        if self.overloaded is not None:
            verdict = "overloaded"
        elif mean_ms is None and p99_ms is None:
            verdict = "ok"
        else:
            verdict = "meets the target" if self.meets(mean_ms, p99_ms) else "misses the target"
        return [
            *self.size.cells(),
            self.policy,
            f"{_mean([x.loads_per_second for x in f]):.2f}",
            f"{_mean([x.per_1k(x.loads) for x in f]):.1f}",
            f"{_mean([x.utilisation for x in f]):.2f}",
            f"{1000 * self.wait_mean:.1f}",
            f"{1000 * self.wait_p99:.1f}",
            f"{_mean([x.held_mean for x in f]):.2f}",
            str(max(x.held_max for x in f)),
            verdict,
        ]


def _varying(rows: list[Row]) -> list[str]:
    """The names of the settings that differ between the rows (the first, when none does)."""
    return [name for i, (_, name) in enumerate(SIZES) if len({row.size.cells()[i] for row in rows}) > 1] or [
        SIZES[0][1]
    ]


def table(rows: list[Row], mean_ms: float | None, p99_ms: float | None) -> list[str]:
    """The sweep's table and what it means, in words, as markdown lines."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
    lines += ["| " + " | ".join(row.cells(mean_ms, p99_ms)) + " |" for row in rows]
    lines.append("")
    varying = _varying(rows)
    over = [row for row in rows if row.overloaded is not None]
    for row in over:
        lines.append(
            f"Overloaded: {row.size.named(varying)} ({row.policy}): {row.overloaded}. The fleet cannot "
            "keep up with this traffic, and its waits grow with the length of the run."
        )
    if not over:
        lines.append(
            "No size is overloaded: each kept up with the traffic (utilisation below 1, no growing queue)."
        )
    if mean_ms is not None or p99_ms is not None:
        target = " and ".join(
            text
            for text in (
                f"a mean wait of at most {mean_ms:g} ms" if mean_ms is not None else "",
                f"a p99 wait of at most {p99_ms:g} ms" if p99_ms is not None else "",
            )
            if text
        )
        meeting = [row for row in rows if row.meets(mean_ms, p99_ms)]
        if meeting:
            smallest = min(meeting, key=lambda r: (r.size.replicas, r.size.memory, r.size.concurrency))
            lines.append(
                f"Meet {target}: "
                + "; ".join(f"{r.size.named(varying)} ({r.policy})" for r in meeting)
                + f". The smallest: {smallest.size.named(varying)}."
            )
        else:
            lines.append(f"No size meets {target}.")
    lines.append("")
    return lines


def draw(pyplot: Any, rows: list[Row], path: Path, mean_ms: float | None) -> None:
    """The sweep as a figure: loads per second and mean and p99 wait, a point a size, overloaded
    sizes in red, the wait target a dashed line."""
    varying = _varying(rows)
    columns = [i for i, (_, name) in enumerate(SIZES) if name in varying]
    labels = ["/".join(row.size.cells()[i] for i in columns) for row in rows]
    x = list(range(len(rows)))
    colours = ["tab:red" if row.overloaded is not None else "tab:blue" for row in rows]
    figure, (loads, waits) = pyplot.subplots(1, 2, figsize=(max(8.0, 1.1 * len(rows) + 4), 4.5))
    loads.bar(x, [_mean([f.loads_per_second for f in row.figures]) for row in rows], color=colours)
    loads.set(ylabel="loads per second", title="Loads (red: overloaded)")
    waits.plot(x, [1000 * row.wait_mean for row in rows], marker="o", label="mean")
    waits.plot(x, [1000 * row.wait_p99 for row in rows], marker="s", label="p99")
    waits.set_yscale("log")
    if mean_ms is not None:
        waits.axhline(mean_ms, linestyle="--", color="grey", label=f"target {mean_ms:g} ms")
    waits.set(ylabel="ms from arrival to service", title="Wait")
    waits.legend()
    for axes in (loads, waits):
        axes.set_xticks(x)
        axes.set_xticklabels(labels, fontsize=8)
        axes.set_xlabel(" / ".join(varying))
        axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    pyplot.close(figure)

"""How [place]'s rendezvous weight spreads a tie: which replica comes first, over many adapters.

    .venv/bin/python bench/weights.py                     # 200,000 adapters, 1,000 replicas, every id shape
    .venv/bin/python bench/weights.py --adapters 20000 --shapes r

Every replica ties (a fleet just listed), so each adapter's first load goes to the replica of highest
weight. The script counts how often each replica is first, for the shipped weight (SPEC §3.12:
SplitMix64 of the names' FNV-1a) beside the weight it replaced (FNV-1a of adapter, zero byte, replica,
with no final mixing), over the same adapters and replicas. Issue 36's bar: no replica first less than
half, or more than twice, its share. It writes bench/weights_results.md.

Weighing 200 million pairs one at a time would take Python most of an hour, so each adapter weighs
every replica at once, as [place] weighs a large tie: the replicas' values sit in lanes of one integer
(``lorafleet._rendezvous.Lanes``, the core's own, for the shipped weight), and each step of the hash
is one operation on that integer, masked back to 64 bits a lane. The weight it replaced is weighed the
same way, from tables of FNV-1a's low-byte classes. The first adapters are weighed again one pair at a
time (``lorafleet._rendezvous.weight``), which must agree.
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import statistics
import sys
import time
from array import array
from collections.abc import Callable
from pathlib import Path

from lorafleet._rendezvous import LANE, Lanes, weight

ROOT = Path(__file__).resolve().parent.parent
MASK = (1 << 64) - 1
PRIME = 0x100000001B3
OFFSET = 0xCBF29CE484222325

SHAPES: dict[str, tuple[str, Callable[[int], str]]] = {
    "r": ("`r0` … `r999`", lambda i: f"r{i}"),
    "http": ("`http://10.0.x.y`", lambda i: f"http://10.0.{i // 250}.{i % 250}"),
    "ipport": ("`10.0.x.y:8000`", lambda i: f"10.0.{i // 250}.{i % 250}:8000"),
    "svc": ("`replica-i.pool.svc:8000`", lambda i: f"replica-{i}.pool.svc:8000"),
    "random": ("12 random letters", lambda i: "".join(random.Random(i).choices("abcdefghijklmnop", k=12))),
}


def packed(values: list[int]) -> int:
    """One integer holding ``values``, one a lane."""
    return int.from_bytes(b"".join(v.to_bytes(LANE // 8, "little") for v in values), "little")


def lanes(n: int) -> Callable[[int], array[int]]:
    """The values of ``n`` lanes, as an array."""

    def read(x: int) -> array[int]:
        words = array("Q", x.to_bytes(n * LANE // 8, "little"))
        if sys.byteorder != "little":
            words.byteswap()
        return words[:: LANE // 64]

    return read


class Fleet:
    """The replicas' ids, packed once for both weights."""

    def __init__(self, ids: list[str]) -> None:
        self.ids = ids
        n = len(ids)
        self.read = lanes(n)
        self.lanes: Lanes[int] = Lanes()
        for index, rid in enumerate(ids):
            self.lanes.add(index, rid)
        self.everyone = self.lanes.mask(range(n))
        # FNV-1a over "adapter \0 replica" from the adapter's state s is s * P**n + C_r(s & 255) over a
        # replica's n bytes (the step's XOR moves h by what its low byte fixes): one table of C_r per
        # length and low byte, built when first needed, makes each length two products and a sum.
        by_length: dict[int, list[int]] = {}
        for index, rid in enumerate(ids):
            by_length.setdefault(len(rid.encode()), []).append(index)
        self.lengths: list[tuple[int, int, int, list[int], dict[int, int]]] = []
        for length, members in sorted(by_length.items()):
            inside = set(members)
            self.lengths.append(
                (
                    pow(PRIME, length, 1 << 64),
                    packed([1 if i in inside else 0 for i in range(n)]),
                    packed([MASK if i in inside else 0 for i in range(n)]),
                    members,
                    {},
                )
            )

    def _table(self, power: int, members: list[int], tables: dict[int, int], low: int) -> int:
        found = tables.get(low)
        if found is None:
            values = [0] * len(self.ids)
            for index in members:
                h = low
                for byte in self.ids[index].encode():
                    h = ((h ^ byte) * PRIME) & MASK
                values[index] = (h - low * power) & MASK
            found = tables[low] = packed(values)
        return found

    def first_shipped(self, adapter: str) -> int:
        first = self.lanes.first(self.lanes.weights(adapter), self.everyone, lambda _: True, 1)
        assert first is not None  # a weight of exactly 0 is the one way to miss: 1 in 2**64
        return first

    def first_fnv(self, adapter: str) -> int:
        start = OFFSET
        for byte in f"{adapter}\0".encode():
            start = ((start ^ byte) * PRIME) & MASK
        total = 0
        for power, ones, mask, members, tables in self.lengths:
            table = self._table(power, members, tables, start & 255)
            total |= (((start * power) & MASK) * ones + table) & mask
        values = self.read(total)
        return values.index(max(values))


def old_weight(adapter: str, replica: str) -> int:
    h = OFFSET
    for byte in f"{adapter}\0{replica}".encode():
        h = ((h ^ byte) * PRIME) & MASK
    return h


def spread(counts: list[int], share: float) -> dict[str, float]:
    return {
        "never": sum(1 for c in counts if c == 0),
        "min": min(counts),
        "median": statistics.median(counts),
        "max": max(counts),
        "outside": sum(1 for c in counts if not share / 2 <= c <= 2 * share),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bench/weights.py", description=__doc__.split("\n")[0] if __doc__ else None
    )
    parser.add_argument("--adapters", type=int, default=200_000, help="adapter names (default 200,000)")
    parser.add_argument("--replicas", type=int, default=1_000, help="replicas, all tied (default 1,000)")
    parser.add_argument(
        "--shapes",
        default=",".join(SHAPES),
        help=f"id shapes, comma-separated (default all: {','.join(SHAPES)})",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "weights_results.md")
    args = parser.parse_args(argv)
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown or args.adapters < 1 or args.replicas < 2:
        parser.error(f"unknown shapes {unknown} (known: {', '.join(SHAPES)})" if unknown else "too few")
    share = args.adapters / args.replicas
    began, load = time.monotonic(), os.getloadavg()
    rows = []
    for key in shapes:
        label, make = SHAPES[key]
        ids = [make(i) for i in range(args.replicas)]
        if len(set(ids)) != len(ids):
            parser.error(f"shape {key}: ids repeat at {args.replicas} replicas")
        fleet = Fleet(ids)
        for name, first, exact in (
            ("FNV-1a, no mixing (before)", fleet.first_fnv, old_weight),
            ("SplitMix64 of FNV-1a (shipped)", fleet.first_shipped, weight),
        ):
            for i in range(50):  # the lanes compute the weight they stand for
                adapter = f"adapter-{i}"
                weights = [exact(adapter, r) for r in ids]
                assert first(adapter) == weights.index(max(weights)), (name, adapter)
            counts = [0] * len(ids)
            t = time.monotonic()
            for i in range(args.adapters):
                counts[first(f"adapter-{i}")] += 1
            figures = spread(counts, share)
            rows.append((label, name, figures))
            print(
                f"{label:28} {name:32} never first {figures['never']:4.0f}, min {figures['min']:5.0f}, "
                f"median {figures['median']:6.1f}, max {figures['max']:6.0f}, outside ½ to 2 shares: "
                f"{figures['outside']:4.0f}  ({time.monotonic() - t:.0f} s)",
                flush=True,
            )
    command = " ".join(["python bench/weights.py", *(argv if argv is not None else sys.argv[1:])])
    lines = [
        "# How the rendezvous weight spreads a tie",
        "",
        f"Written by `{command}` "
        f"on {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, in {time.monotonic() - began:.0f} s "
        f"(load average {load[0]:.2f} at the start).",
        "",
        f"{args.replicas:,} replicas, all tied; {args.adapters:,} adapters named `adapter-0` … : how many "
        f"adapters each replica is first for (its share: {share:g}). Issue 36's bar: none outside half to "
        "twice its share.",
        "",
        "| replica ids | weight | never first | least | median | most | outside half to twice the share |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for label, name, f in rows:
        lines.append(
            f"| {label} | {name} | {f['never']:.0f} | {f['min']:.0f} | {f['median']:g} | {f['max']:.0f} "
            f"| {f['outside']:.0f} |"
        )
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    shipped = [f for _, name, f in rows if "shipped" in name]
    return 0 if all(f["outside"] == 0 for f in shipped) else 1


if __name__ == "__main__":
    sys.exit(main())

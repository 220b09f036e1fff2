"""Why an arm of bench/peer_bench.py read what it read: its kept logs, load by load.

    .venv/bin/python bench/peer_logs.py KEEP [--arm SUBSTRING]

KEEP is a ``--keep`` folder of bench/peer_bench.py (one folder per run and arm, each with the
instrument's ``engine-N.jsonl``). Every disk read of an arm is put in one of three kinds, from all
its engines' logs together:

- **first**: the adapter's first read on any engine of the run (a fleet of one copy per adapter
  makes each of these once);
- **copy**: the adapter was in another engine's cache at that moment (placement chose a second
  copy over the one there);
- **back**: it had been in some engine's cache and was in none (a capacity miss: some drop earlier
  made it).

Each drop of an adapter from an engine's cache (a victim's included) is set beside the read it
made room for, the engine's last read before it: a drop is *hotter out* when the adapter dropped
ranks above the one read in its place in the Zipf order (peer-00 is rank 1). Per engine: its reads
by kind, and by rank band.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any


def events_of(folder: Path) -> list[tuple[float, int, dict[str, Any]]]:
    """Every engine's events of one arm and run, as (wall clock, engine, event), in time order."""
    out = []
    for log in sorted(folder.glob("engine-*.jsonl")):
        engine = int(log.stem.split("-")[1])
        for line in log.read_text().splitlines():
            if line.strip():
                event = json.loads(line)
                out.append((float(event["t"]), engine, event))
    return sorted(out, key=lambda x: x[0])


def rank(name: str) -> int:
    return int(name.rsplit("-", 1)[1]) + 1


BANDS = ((1, 2), (3, 6), (7, 99))
"""Rank bands of the Zipf(1) order over 14 adapters: about 46 %, 30 % and 24 % of the requests."""


def explain(folder: Path) -> dict[str, Any]:
    """What the arm's engines read and dropped, and why as far as the logs say."""
    events = events_of(folder)
    names: dict[tuple[int, int], str] = {}
    for _, engine, e in events:
        if "name" in e:
            names[(engine, e["id"])] = e["name"]
    resident: dict[int, set[str]] = {}
    ever: set[str] = set()
    kinds: dict[int, Counter[str]] = {}
    bands: dict[int, Counter[int]] = {}
    last_read: dict[int, str] = {}
    drops = hotter_out = 0
    for _, engine, e in events:
        name = names.get((engine, e.get("id", -1)))
        if name is None:
            continue  # vLLM's warm-up adapters
        here = resident.setdefault(engine, set())
        if e["ev"] == "read":
            others = any(name in r for k, r in resident.items() if k != engine)
            kinds.setdefault(engine, Counter())[
                "first" if name not in ever else "copy" if others else "back"
            ] += 1
            band = next(i for i, (low, high) in enumerate(BANDS) if low <= rank(name) <= high)
            bands.setdefault(engine, Counter())[band] += 1
            ever.add(name)
            here.add(name)
            last_read[engine] = name
        elif e["ev"] == "drop" and name in here:
            here.discard(name)
            drops += 1
            came = last_read.get(engine)
            hotter_out += came is not None and rank(name) < rank(came)
    total: Counter[str] = Counter()
    for counter in kinds.values():
        total.update(counter)
    return {
        "reads": total.total(),
        "kinds": dict(total),
        "per_engine": {k: dict(v) for k, v in sorted(kinds.items())},
        "bands": {k: [v.get(i, 0) for i in range(len(BANDS))] for k, v in sorted(bands.items())},
        "drops": drops,
        "hotter_out": hotter_out,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench/peer_logs.py", description=__doc__.splitlines()[0])
    parser.add_argument("keep", type=Path, help="a --keep folder of bench/peer_bench.py")
    parser.add_argument("--arm", default="", help="only the arms whose folder name has this in it")
    args = parser.parse_args(argv)
    folders = sorted(p for p in args.keep.glob("run*") if p.is_dir() and args.arm in p.name)
    if not folders:
        parser.error(f"no run folders under {args.keep}")
    bands = "/".join(f"{low}-{high}" if high < 99 else f"{low}+" for low, high in BANDS)
    print(
        f"| run and arm | reads | first / copy / back | per engine: first/copy/back, by rank {bands} "
        "| drops | hotter out |"
    )
    print("|---|---:|---|---|---:|---:|")
    for folder in folders:
        x = explain(folder)
        k = x["kinds"]
        engines = "; ".join(
            f"{e}: {c.get('first', 0)}/{c.get('copy', 0)}/{c.get('back', 0)}, "
            + "/".join(str(n) for n in x["bands"][e])
            for e, c in x["per_engine"].items()
        )
        print(
            f"| {folder.name} | {x['reads']} | {k.get('first', 0)} / {k.get('copy', 0)} / {k.get('back', 0)} "
            f"| {engines} | {x['drops']} | {x['hotter_out']} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

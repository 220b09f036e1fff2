"""What relaying to the router that decides costs a request: a hit through the leader, against the same
hit through a router that relays to it ([peers], docs/routers.md).

    .venv/bin/python bench/relay_hop.py [--rounds 400] [--out FILE]

One stand-in in this process, answering at once; two ``lorafleet serve`` processes, each told both
(``--peer``), the first up deciding. One adapter, loaded before the rounds start, so every request is
a hit. Each round sends one request to each router, one at a time, the first router first in even
rounds; the figures are each router's latencies over the rounds, and the difference of their medians
is the hop (the relaying router's own work and a loopback round trip). Each is split at the moment
the stand-in has read the request: the way there is the hop's share of the request's wait (what
``lorafleet simulate --relay`` charges), the way back its share of the answer.
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lorafleet_standin import StandInServer, VllmStandIn, make_adapters

sys.path.insert(0, str(Path(__file__).resolve().parent))
from routers_bench import Router, connect, free_ports, percentile, start_router


def timed(conn: http.client.HTTPConnection, body: str, engine: VllmStandIn) -> tuple[float, float, str]:
    """One completion: its milliseconds, those until the engine had read it, and how the router that
    decided granted it."""
    started = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    answer = conn.getresponse()
    answer.read()
    ended = time.perf_counter()
    if answer.status != 200:
        raise SystemExit(f"a request was answered {answer.status}")
    arrived = engine.calls_to("completions")[-1].at  # one request at a time: this one
    return (ended - started) * 1000, (arrived - started) * 1000, answer.getheader("x-lorafleet-how") or ""


def relaying(routers: list[Router], timeout: float = 30.0) -> None:
    """Wait until the second router says it relays to the first (its look at the peers found it)."""
    deadline = time.monotonic() + timeout
    said = f"{routers[0].url} decides, this router relays"
    while said not in "".join(routers[1].log):
        if time.monotonic() > deadline:
            raise SystemExit(
                "the second router never relayed to the first:\n" + "".join(routers[1].log)[-2000:]
            )
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/relay_hop.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    started = time.time()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="lorafleet-hop-") as tmp:
        root = Path(tmp)
        make_adapters(root, ["adapter-000"])
        standin = VllmStandIn(model="tiny", max_loras=4, max_cpu_loras=4, token_seconds=0.0)
        engine = StandInServer(standin).start()
        routers: list[Router] = []
        try:
            spec = [f"id=r0,url={engine.url},model=tiny,limit=4"]
            ports = free_ports(2)
            told = [f"--peer=http://127.0.0.1:{port}" for port in ports]
            for port in ports:
                routers.append(start_router(spec, root, None, told, port))
            relaying(routers)
            conns = [connect(r.url, 30) for r in routers]
            body = json.dumps({"model": "adapter-000", "prompt": "hi", "max_tokens": 1})
            for conn in conns:
                for _ in range(20):  # the load, and each connection warm
                    timed(conn, body, standin)
            ms: list[list[float]] = [[], []]
            there: list[list[float]] = [[], []]
            hows: list[set[str]] = [set(), set()]
            for i in range(args.rounds):
                for k in (0, 1) if i % 2 == 0 else (1, 0):
                    took, way, how = timed(conns[k], body, standin)
                    ms[k].append(took)
                    there[k].append(way)
                    hows[k].add(how)
            for conn in conns:
                conn.close()
        finally:
            for router in routers:
                router.stop()
            engine.stop()
    if hows != [{"hit"}, {"hit"}]:
        raise SystemExit(f"not every request was a hit: {hows}")
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    loads = (
        " / ".join(f"{x:.2f}" for x in load_before) + " → " + " / ".join(f"{x:.2f}" for x in os.getloadavg())
    )
    hop = statistics.median(ms[1]) - statistics.median(ms[0])
    way = statistics.median(there[1]) - statistics.median(there[0])
    lines = [
        f"# The relay's hop ({when})",
        "",
        f"`bench/relay_hop.py {' '.join(sys.argv[1:])}`: {args.rounds} rounds of a hit through each of two "
        f"`lorafleet serve` processes told of each other, on loopback. "
        f"{platform.processor() or platform.machine()}, load average {loads}, {time.time() - started:.0f} s.",
        "",
        "| router | p50 ms | p90 ms | p99 ms | to the engine: p50 ms | p90 ms | p99 ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *(
            f"| {name} | {statistics.median(v):.2f} | {percentile(v, 0.9):.2f} | {percentile(v, 0.99):.2f} "
            f"| {statistics.median(w):.2f} | {percentile(w, 0.9):.2f} | {percentile(w, 0.99):.2f} |"
            for name, v, w in (
                ("the one that decides", ms[0], there[0]),
                ("the one that relays to it", ms[1], there[1]),
            )
        ),
        "",
        f"The hop: {hop:.2f} ms on the median; {way:.2f} ms of it on the way to the engine (the "
        f"request's wait), {hop - way:.2f} ms on the way back (its answer).",
    ]
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.out is not None:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

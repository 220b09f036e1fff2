"""Replay against reality: a request log recorded by ``lorafleet serve`` in front of vLLM stand-ins,
replayed by ``lorafleet simulate`` on the same fleet, loads and mean wait side by side.

    .venv/bin/python bench/replay.py [--sizes 2x6,4x6] [--requests 1000] [--rate 20] [--out FILE]

For each fleet size (``RxM``: R replicas of ``--max-cpu-loras M`` and ``--max-loras M``, each running
``--concurrency`` requests at once, every read of an adapter from disk taking ``--load`` s and
stalling its engine, every token ``--token`` s), one open-loop stream of Poisson arrivals over
Zipf-skewed adapters, each asking for an exponentially drawn number of tokens (mean ``--tokens``),
goes over HTTP through ``lorafleet serve --request-log`` to the stand-ins, each in a process of its
own. Then the log is replayed in the simulator on the
same fleet (the command is printed). Real loads are the stand-ins' loads and re-reads from disk; the
real wait is the log's ``wait`` (arrival to the adapter's grant), which the simulator's grant wait
is compared with. Targets (issue 35): loads within 10 %, mean wait within 20 %.

The stand-ins batch no more than ``max_num_seqs``, read adapters one at a time with every step
paused meanwhile (``load_seconds``), but do not hold back a request for ``--max-loras``: sizes here
keep ``--max-loras`` at the memory, where it never binds.

``--engine vllm`` puts fresh real vLLM CPU servers behind serve instead, for every fleet and run
(started as tests/real_vllm.py starts them, ``--max-num-seqs`` the concurrency, with
bench/peer_bench.py's instrument on their ``PYTHONPATH`` and its copies of the built adapters): a
size may then say its ``--max-loras`` too (``RxM/L``), which vLLM does hold requests back for. Real
loads are every read from disk the engines made, re-reads included (peer_bench's ``count_engine``).
``--load`` and ``--token`` are then not the engine's to set: the simulator is given the load time
measured in the run, the mean ``wait`` of the log's requests that started a load (``load_time``):
from arrival to the grant, so the router's call, the engine's wait for the step under way to end
and its read from disk (its median printed beside, from the instrument) all included. The mean, not
the median: a load that meets a busy engine waits out its step (tens of ms on this CPU, against a
few ms for one that does not), and the figure compared is a mean wait. Tokens need no figure: each
request's service is its own logged ``duration - wait``.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import platform
import random
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path

import anyio
import attrs
import httpx

from lorafleet_serve import Config, ReplicaConfig, RouterServer
from lorafleet_sim import POLICIES, Fleet, read_trace, simulate
from lorafleet_standin import StandInServer, VllmStandIn

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(HERE))

from peer_bench import adapter_folders, count_engine, default_limit, instrumented, stop_all  # noqa: E402 - the real engine's bench

from real_vllm import Engine, set_up  # noqa: E402


@attrs.frozen
class Size:
    """A fleet: ``replicas`` engines of ``--max-cpu-loras memory`` and ``--max-loras max_loras``."""

    replicas: int
    memory: int
    max_loras: int

    def __str__(self) -> str:
        shown = f"{self.replicas} x {self.memory}"
        return shown if self.max_loras == self.memory else f"{shown}/{self.max_loras}"

    @property
    def slug(self) -> str:
        return str(self).replace(" ", "").replace("/", "-")


def _size(text: str) -> Size:
    """``RxM`` (``--max-loras`` M) or ``RxM/L``."""
    replicas, _, rest = text.partition("x")
    memory, slash, batch = rest.partition("/")
    try:
        size = Size(int(replicas), int(memory), int(batch if slash else memory))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not RxM or RxM/L (replicas x max-cpu-loras / max-loras)"
        ) from None
    if min(size.replicas, size.memory, size.max_loras) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: replicas, memory and max-loras must be at least 1")
    if size.max_loras > size.memory:
        raise argparse.ArgumentTypeError(f"{text!r}: vLLM wants --max-cpu-loras at least --max-loras")
    return size


@attrs.frozen
class LoadTime:
    """What the loads of a run cost the requests that started them, seconds from arrival to grant."""

    mean: float
    median: float
    loads: int


def load_time(lines: Iterable[str]) -> LoadTime | None:
    """The load time a request log shows: the ``wait`` of the answered requests that started their
    adapter's load (``how`` ``loaded``), from arrival to the grant. None: no load in it."""
    waits = []
    for line in lines:
        if line.strip():
            entry = json.loads(line)
            if entry.get("how") == "loaded" and entry.get("status") == 200 and entry.get("wait") is not None:
                waits.append(float(entry["wait"]))
    if not waits:
        return None
    return LoadTime(statistics.fmean(waits), statistics.median(waits), len(waits))


def read_seconds(lines: Iterable[str]) -> float | None:
    """The engine's own reads from disk, from bench/peer_hook's log: their median seconds (None: no
    read, or an instrument that did not time them)."""
    took = [
        float(e["seconds"])
        for e in (json.loads(line) for line in lines if line.strip())
        if e["ev"] == "read" and "seconds" in e
    ]
    return statistics.median(took) if took else None


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/replay.py", description=(__doc__ or "").split("\n\n")[0])
    p.add_argument(
        "--sizes",
        type=lambda t: [_size(s) for s in t.split(",")],
        default=[Size(2, 6, 6), Size(4, 6, 6)],
        help="fleets, RxM or (with --engine vllm) RxM/L each: replicas x max-cpu-loras / max-loras "
        "(default 2x6,4x6)",
    )
    p.add_argument(
        "--engine",
        choices=("standin", "vllm"),
        default="standin",
        help="the engines: stand-ins, or fresh real vLLM CPU servers for every fleet and run "
        "(engine/setup.sh; about a minute to start) (default standin)",
    )
    p.add_argument("--requests", type=int, default=1000, help="requests a fleet (default 1000)")
    p.add_argument("--rate", type=float, default=20.0, help="requests per second, Poisson (default 20)")
    p.add_argument("--adapters", type=int, default=60, help="distinct adapters (default 60)")
    p.add_argument("--skew", type=float, default=1.0, help="Zipf exponent (default 1.0)")
    p.add_argument("--concurrency", type=int, default=4, help="each replica's max_num_seqs (default 4)")
    p.add_argument("--tokens", type=float, default=20, help="mean tokens a completion asks for (default 20)")
    p.add_argument(
        "--token", type=float, default=0.01, help="seconds each token takes, stand-ins only (default 0.01)"
    )
    p.add_argument(
        "--load",
        type=float,
        default=0.05,
        help="seconds each read from disk takes, stand-ins only (default 0.05)",
    )
    p.add_argument("--seed", type=int, default=1, help="the stream's seed (default 1)")
    p.add_argument("--runs", type=int, default=3, help="runs of every fleet, sizes alternated (default 3)")
    p.add_argument("--out", type=Path, help="also write the results, as markdown, to this file")
    p.add_argument(
        "--logs",
        type=Path,
        help="keep the request logs (and the vLLM servers' logs) in this folder (default: a temporary one)",
    )
    args = p.parse_args(argv)
    if args.engine == "standin":
        bound = [str(size) for size in args.sizes if size.max_loras != size.memory]
        if bound:
            p.error(f"--sizes {','.join(bound)}: the stand-ins never hold a request back for --max-loras")
    return args


def stream(args: argparse.Namespace, names: Sequence[str]) -> list[tuple[float, str, int]]:
    """(arrival second, adapter, tokens) of each request, over ``names`` (Zipf-ranked in a shuffled
    order)."""
    rng = random.Random(args.seed)
    weights = [1 / (k + 1) ** args.skew for k in range(len(names))]
    names = list(names)
    rng.shuffle(names)
    at, out = 0.0, []
    for name in rng.choices(names, weights=weights, k=args.requests):
        at += rng.expovariate(args.rate)
        out.append((at, name, max(1, round(rng.expovariate(1 / args.tokens)))))
    return out


def standin(conn: Connection, memory: int, concurrency: int, load: float, token: float) -> None:
    """A stand-in in a process of its own (so that it takes no time from the router's): its URL sent
    at once, then, once told to stop, the reads from disk it did (loads and re-reads)."""
    engine = VllmStandIn(
        model="tiny",
        max_loras=memory,
        max_cpu_loras=memory,
        max_num_seqs=concurrency,
        load_seconds=load,
        token_seconds=token,
        max_model_len=100_000,
    )
    with StandInServer(engine) as server:
        conn.send(server.url)
        conn.recv()
        conn.send(len(server.app.calls_to("load")) + server.app.memory().rereads)


@attrs.define
class Engines:
    """A fleet's engines while they run: their URLs; once stopped, what they read from disk."""

    urls: list[str]
    reads: int = 0
    """Reads from disk, re-reads included."""
    read_seconds: float | None = None
    """The median of those reads' seconds, where the engine's instrument timed them."""


@contextmanager
def standins(args: argparse.Namespace, size: Size) -> Iterator[Engines]:
    spawn = multiprocessing.get_context("spawn")
    pipes, processes = [], []
    try:
        for _ in range(size.replicas):
            ours, theirs = spawn.Pipe()
            process = spawn.Process(
                target=standin, args=(theirs, size.memory, args.concurrency, args.load, args.token)
            )
            process.start()
            pipes.append(ours)
            processes.append(process)
        engines = Engines([pipe.recv() for pipe in pipes])
        yield engines
        for pipe in pipes:
            pipe.send("stop")
        engines.reads = sum(pipe.recv() for pipe in pipes)
        engines.read_seconds = args.load
    finally:
        for process in processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()


@contextmanager
def vllms(engine: Engine, args: argparse.Namespace, size: Size, folder: Path) -> Iterator[Engines]:
    """Fresh real vLLM servers, each with peer_bench's instrument logging to a file of its own."""
    logs, servers = instrumented(
        engine,
        folder,
        size.replicas,
        max_loras=size.max_loras,
        max_cpu_loras=size.memory,
        max_num_seqs=args.concurrency,
        env={},
    )
    try:
        for server in servers:
            server.start()
        for server in servers:
            server.wait_ready()
        engines = Engines([server.url for server in servers])
        yield engines
    finally:
        stop_all(servers)
    lines = [line for log in logs if log.exists() for line in log.read_text().splitlines()]
    engines.reads = sum(count_engine(log.read_text().splitlines()).reads for log in logs if log.exists())
    engines.read_seconds = read_seconds(lines)


async def record(
    args: argparse.Namespace, urls: Sequence[str], size: Size, root: Path, log: Path, names: Sequence[str]
) -> int:
    """Run the stream through ``lorafleet serve`` to the engines at ``urls``: the requests that failed."""
    standin = args.engine == "standin"
    config = Config(
        replicas=tuple(
            # The stand-ins' limit is their memory, given; the real engines' what serve makes of the
            # --max-cpu-loras and --max-loras they declare, as docs/vllm.md has a user do (a Config
            # made here is not filled in as serve's flags are: peer_bench's default_limit says it).
            ReplicaConfig(
                id=f"r{i}",
                url=url,
                model="tiny",
                limit=size.memory if standin else default_limit(size.memory)[0],
                max_cpu_loras=size.memory,
                max_loras=None if standin else size.max_loras,
            )
            for i, url in enumerate(urls)
        ),
        adapter_root=root,
        port=0,
        concurrency=args.concurrency,
        request_log=log,
    )
    errors = 0
    async with (
        RouterServer(config) as router,
        httpx.AsyncClient(
            base_url=router.url, timeout=600, limits=httpx.Limits(max_connections=None)
        ) as client,
    ):

        async def one(adapter: str, tokens: int) -> None:
            nonlocal errors
            body = {"model": adapter, "prompt": "hi", "max_tokens": tokens}
            try:
                answer = await client.post("/v1/completions", json=body)
            except httpx.HTTPError:
                errors += 1
                return
            errors += answer.status_code != 200

        start = time.perf_counter()
        async with anyio.create_task_group() as tasks:
            for at, adapter, tokens in stream(args, names):
                await anyio.sleep(max(0.0, start + at - time.perf_counter()))
                tasks.start_soon(one, adapter, tokens)
    return errors


def mean_wait(lines: Iterable[str]) -> float:
    """The mean logged ``wait`` of the requests that named an adapter and were granted it."""
    waits = [
        float(entry["wait"])
        for entry in (json.loads(line) for line in lines if line.strip())
        if entry["adapter"] and entry["wait"] is not None
    ]
    return sum(waits) / len(waits)


@attrs.frozen
class Row:
    size: Size
    run: int
    real: int
    """Reads from disk the engines did, re-reads included."""
    sim: int
    wait: float
    """Mean of the log's waits, seconds."""
    sim_wait: float
    errors: int
    loadavg: float
    command: str
    load: float
    """The load time the simulator was given, seconds."""
    measured: LoadTime | None
    """The loads' waits in the log."""
    read: float | None
    """The engines' median read from disk, seconds (None: not timed)."""
    requests: int
    seconds: float
    """How long the stream took through serve."""

    @property
    def loads_off(self) -> float:
        return self.sim / self.real - 1 if self.real else math.inf

    @property
    def wait_off(self) -> float:
        return self.sim_wait / self.wait - 1 if self.wait else math.inf


def run_one(
    args: argparse.Namespace, size: Size, run: int, tmp: Path, root: Path, names: Sequence[str]
) -> Row:
    """One fleet, one run: record the log through serve, replay it in the simulator."""
    log = (args.logs or tmp) / f"requests-{size.slug}-{run}.jsonl"
    log.unlink(missing_ok=True)
    loadavg = os.getloadavg()[0]
    if args.engine == "vllm":
        folder = (args.logs or tmp) / f"vllm-{size.slug}-{run}"
        folder.mkdir(parents=True, exist_ok=True)
        engines = vllms(args.real, args, size, folder)
    else:
        engines = standins(args, size)
    with engines as fleet:
        loadavg = os.getloadavg()[0]  # once the engines are up: a vLLM's start is not the run's load
        began = time.perf_counter()
        errors = anyio.run(record, args, fleet.urls, size, root, log, names)
        seconds = time.perf_counter() - began
    lines = log.read_text().splitlines()
    measured = load_time(lines)
    if args.engine == "standin":
        load = args.load
    elif measured is None:
        raise SystemExit(f"{log}: no request started a load, so the run shows no load time to replay with")
    else:
        load = measured.mean
    fleet_sim = Fleet(
        replicas=size.replicas,
        memory=size.memory,
        max_loras=size.max_loras,
        concurrency=args.concurrency,
        load_time=load,
        tell_concurrency=True,
    )
    figures = simulate(read_trace(log), fleet_sim, POLICIES["lorafleet"])
    command = (
        f"lorafleet simulate --trace {log.name} --replicas {size.replicas} --max-cpu-loras {size.memory} "
        f"--max-loras {size.max_loras} --concurrency {args.concurrency} --load {load:.4g} "
        "--tell-concurrency --policy lorafleet"
    )
    return Row(
        size,
        run,
        fleet.reads,
        figures.loads,
        mean_wait(lines),
        figures.load_wait_mean,
        errors,
        loadavg,
        command,
        load,
        measured,
        fleet.read_seconds,
        len(lines),
        seconds,
    )


def main(argv: list[str]) -> int:
    args = parse(argv)
    started = time.perf_counter()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="lorafleet-replay-") as tmp:
        root = Path(tmp) / "adapters"
        if args.engine == "vllm":
            args.real = set_up()
            names = adapter_folders(args.real, root, args.adapters)
        else:
            names = [f"adapter-{k:03d}" for k in range(args.adapters)]
            for name in names:
                folder = root / name
                folder.mkdir(parents=True)
                (folder / "adapter_config.json").write_text(json.dumps({"r": 8}))
                (folder / "adapter_model.safetensors").write_bytes(b"\0" * 64)
        if args.logs is not None:
            args.logs.mkdir(parents=True, exist_ok=True)
        for run in range(args.runs):
            # Sizes alternate their order run by run: neither always meets the machine first.
            for size in args.sizes if run % 2 == 0 else args.sizes[::-1]:
                rows.append(run_one(args, size, run + 1, Path(tmp), root, names))
                row = rows[-1]
                sys.stderr.write(
                    f"replay: {size} run {run + 1}: loads {row.real} vs {row.sim}, mean wait "
                    f"{1000 * row.wait:.1f} vs {1000 * row.sim_wait:.1f} ms, load average {row.loadavg:.2f}\n"
                )
    text = report(args, argv, rows, time.perf_counter() - started)
    sys.stdout.write(text)
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
    return 0


def report(args: argparse.Namespace, argv: list[str], rows: Sequence[Row], elapsed: float) -> str:
    real = args.engine == "vllm"
    if real:
        engines = (
            f"fresh real vLLM CPU servers (engine/setup.sh, model tiny) for every fleet and run, "
            f"--max-num-seqs {args.concurrency}; the simulator's load time the run's: the mean wait of "
            "the requests that started a load (their median, and the engines' median read from disk, "
            "beside it)"
        )
    else:
        engines = (
            f"stand-ins of --max-num-seqs {args.concurrency}, reads from disk of {args.load:g} s, tokens of "
            f"{args.token:g} s"
        )
    lines = [
        "## Replay against reality: lorafleet serve's request log, replayed by lorafleet simulate"
        + (" (real vLLM)" if real else ""),
        "",
        f"Command: `{' '.join(['.venv/bin/python bench/replay.py', *(shlex.quote(a) for a in argv)])}`",
        "",
        f"Machine: {os.cpu_count()} CPUs, Python {platform.python_version()}; {elapsed:.0f} s. Stream: "
        f"{args.requests} requests, Poisson at {args.rate:g}/s, Zipf({args.skew:g}) over {args.adapters} "
        f"adapters, {args.tokens:g} tokens a completion on average (exponential); {engines}.",
        "",
        "| fleet | run | loads (serve) | loads (simulate) | off by | mean wait ms (serve) | (simulate) | "
        "off by | errors | load average |"
        + (" load time ms: mean (given) | median | engine's read | stream s |" if real else ""),
        "|---|---|---|---|---|---|---|---|---|---|" + ("---|---|---|---|" if real else ""),
    ]
    for row in rows:
        line = (
            f"| {row.size} | {row.run} | {row.real} | {row.sim} | "
            f"{100 * row.loads_off:+.1f}% | {1000 * row.wait:.1f} | {1000 * row.sim_wait:.1f} | "
            f"{100 * row.wait_off:+.1f}% | {row.errors} | {row.loadavg:.2f} |"
        )
        if real:
            read = "-" if row.read is None else f"{1000 * row.read:.1f}"
            median = "-" if row.measured is None else f"{1000 * row.measured.median:.1f}"
            line += f" {1000 * row.load:.1f} | {median} | {read} | {row.seconds:.0f} |"
        lines.append(line)
    lines += [
        "",
        "Medians over the runs, simulate against serve:",
        "",
        "| fleet | loads off by | mean wait off by | loads within 10 % | mean wait within 20 % |",
        "|---|---|---|---|---|",
    ]
    met = True
    for size in args.sizes:
        mine = [row for row in rows if row.size == size]
        loads_off = statistics.median(row.loads_off for row in mine)
        wait_off = statistics.median(row.wait_off for row in mine)
        good = abs(loads_off) <= 0.10, abs(wait_off) <= 0.20
        met = met and all(good)
        lines.append(
            f"| {size} | {100 * loads_off:+.1f}% | {100 * wait_off:+.1f}% | "
            f"{'yes' if good[0] else 'NO'} | {'yes' if good[1] else 'NO'} |"
        )
    verdict = "met." if met else "NOT met."
    if real:
        verdict = f"{verdict[:-1]} here (reported, not asserted: issue 35 asserts them on the stand-ins)."
    lines += [
        "",
        "Targets (issue 35): loads within 10 %, mean wait within 20 %, on every fleet: " + verdict,
        "",
        "Each replay, as a command (on its log, kept with --logs):",
        "",
        *(f"    {row.command}" for row in rows),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

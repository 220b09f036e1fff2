"""lorafleet against vLLM's own router on the real engine: what the engines load from disk, and how fast.

    .venv/bin/python bench/peer_bench.py [--runs 3] [--lorafleet default --lorafleet limit=3,headroom=1]
        [--policies consistent_hash,round_robin,...] [--requests 240] [--adapters 14] [--out FILE]

Every arm of every run gets its own freshly started real vLLM CPU servers (``--replicas`` of them,
``--max-loras 2 --max-cpu-loras 4`` and vLLM's CPU default ``--max-num-seqs 128``, as tests/real_vllm.py
starts them; each settable), so that no arm inherits
another's cache; the arms take turns, in reverse order every other run, and every arm of a run sends
the same Zipf-skewed sequence of short completions (seeded per run), ``--concurrency`` at a time.

- **lorafleet**: ``lorafleet serve`` in front of servers with the runtime LoRA routes
  (``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``); it loads and unloads adapters itself. ``--lorafleet
  default`` is what a user gets by following docs/vllm.md: each replica declares its engine's
  ``max_cpu_loras`` and ``--concurrency`` is the servers' ``--max-num-seqs``, with no ``limit`` and no
  ``--headroom`` (serve makes the limit the whole memory, headroom 0); ``--lorafleet
  limit=N,headroom=M`` sets either by hand as well, ``concurrency=N`` gives lorafleet's by hand,
  and ``concurrency=learned`` leaves ``--concurrency`` out (lorafleet learns it from the engines'
  ``/metrics``).
- **vllm-router POLICY**: vLLM's own router (``pip install vllm-router``, in a venv of its own under
  ~/.cache/lorafleet) in front of servers that load adapters themselves the first time a request names
  them (vLLM's filesystem LoRA resolver: ``VLLM_PLUGINS=lora_filesystem_resolver`` and
  ``VLLM_LORA_RESOLVER_CACHE_DIR``; each adapter's ``base_model_name_or_path`` is the server's
  ``--model``) and drop them by the engine's own LRU within ``--max-cpu-loras``. The client sends the
  adapter's name as ``x-session-id``, the key of vllm-router's ``consistent_hash`` and
  ``sticky_least_loaded`` (its other policies ignore it).

What the engines load is counted by bench/peer_hook/sitecustomize.py, put on the servers' PYTHONPATH:
vLLM logs only a name's first load, and reads a registered adapter its cache dropped again inside a
generation step with no log line. Per arm and run: disk reads in all (by runtime load, by the resolver,
and re-reads of an id read before), the engine's drops of an adapter whose name was still registered
(for lorafleet: one it held, its victims apart: ``count_engine``), unloads that left the weights in
the engine's cache, p50 and p99 latency,
requests/s, failed requests (not 2xx, or no answer), and the load average. Writes a table and the
medians to bench/peer_results.md.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import math
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx

HERE = Path(__file__).resolve().parent
HOOK = HERE / "peer_hook"
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

from serve_bench import ended, vllm_router  # noqa: E402 - one of each for both benches

from real_vllm import MODEL, Engine, VllmServer, free_port, set_up  # noqa: E402

POLICIES = ("consistent_hash", "sticky_least_loaded", "round_robin", "power_of_two", "cache_aware", "random")
"""vllm-router's policies this bench runs; kv_aware needs the engines' KV-cache events (ZMQ) set up."""
SESSION_HEADER = "x-session-id"


# -- the workload ----------------------------------------------------------------------------------


def zipf_sequence(seed: int, adapters: Sequence[str], requests: int, exponent: float = 1.0) -> list[str]:
    """The adapters ``requests`` completions name, in order: Zipf(``exponent``) over ``adapters`` by rank.

    The first adapter is the most asked for. The same seed gives the same sequence, so every arm of a
    run sends the same requests.
    """
    rng = random.Random(seed)
    weights = [1 / (rank**exponent) for rank in range(1, len(adapters) + 1)]
    return rng.choices(list(adapters), weights=weights, k=requests)


def percentile(values: Sequence[float], share: float) -> float:
    """The nearest-rank percentile: the smallest value with at least ``share`` of them at or below it."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


@attrs.frozen
class Answer:
    adapter: str
    seconds: float
    status: int
    """The HTTP status, or 0 for no answer (a connection error, a timeout)."""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


async def _send(
    url: str, sequence: Sequence[str], concurrency: int, max_tokens: int, timeout: float
) -> list[Answer]:
    answers: list[Answer] = []
    turn = iter(enumerate(sequence))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as client:

        async def worker() -> None:
            for i, adapter in turn:
                body = {"model": adapter, "prompt": f"request {i}: hello world", "max_tokens": max_tokens}
                body["temperature"] = 0
                started = time.monotonic()
                try:
                    answer = await client.post(
                        "/v1/completions", json=body, headers={SESSION_HEADER: adapter}
                    )
                    await answer.aread()
                    status = answer.status_code
                except httpx.HTTPError:
                    status = 0
                answers.append(Answer(adapter, time.monotonic() - started, status))

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return answers


def send(url: str, sequence: Sequence[str], concurrency: int, max_tokens: int) -> list[Answer]:
    """Send the sequence's completions through ``url``, ``concurrency`` at a time, in order."""
    return asyncio.run(_send(url, sequence, concurrency, max_tokens, timeout=600))


# -- what the engine loaded: the instrument's log --------------------------------------------------


@attrs.frozen
class EngineCount:
    """One engine's loads and drops, from bench/peer_hook/sitecustomize.py's log."""

    reads: int
    """Adapters read from disk, every one."""
    load_reads: int
    """First reads of an id registered by /v1/load_lora_adapter (a router's load)."""
    resolver_reads: int
    """First reads of an id registered by a LoRA resolver (a request's first use of the name)."""
    rereads: int
    """Reads of an id read before: the cache had dropped it and a request needed it again."""
    rereads_in_step: int
    """Of those, the ones inside a generation step (all of them, in vLLM 0.32)."""
    drops: int
    """Adapters dropped from the engine's CPU cache (its LRU, or removed)."""
    held_drops: int
    """Drops of an id whose name was still registered, a router's victim's apart: for lorafleet, an
    adapter it held and meant to keep."""
    victim_drops: int
    """Drops of a router's victim: an id whose name was still registered, dropped once the load that
    chose it was on its way and unregistered after that load landed, read by nothing in between
    (lorafleet's eviction on the engine's memory, SPEC §3.16: the load makes the room)."""
    unloads: int
    """Names forgotten by /v1/unload_lora_adapter."""
    ghost_unloads: int
    """Unloads of a name whose weights were still in the engine's cache (API.md §4.5: a ghost)."""
    failed_reads: int

    @classmethod
    def total(cls, counts: Iterable[EngineCount]) -> EngineCount:
        counts = list(counts)
        fields = attrs.fields(cls)
        return cls(*(sum(getattr(c, f.name) for c in counts) for f in fields))


def victims(events: Sequence[dict[str, Any]], limit: int | None) -> dict[int, int]:
    """Which load each unload made room for: unloaded id to loaded id, for a router that unloads one
    victim once each load that needed room has landed (lorafleet, SPEC §3.16).

    A load needed room when, as it landed, ``limit`` other names were registered. An unload is paired
    with the landed load still unpaired that the engine read last before it dropped the unloaded id
    (two loads at once each drop one, in either order); with none such, or no drop, with the one
    that landed first. None: no router that evicts so (nothing paired).
    """
    if limit is None:
        return {}
    first_read: dict[int, float] = {}
    dropped: dict[int, float] = {}
    for e in events:
        if e["ev"] == "read":
            first_read.setdefault(e["id"], e["t"])
        elif e["ev"] == "drop":
            dropped.setdefault(e["id"], e["t"])
    registered: set[int] = set()
    waiting: list[int] = []
    paired: dict[int, int] = {}
    for e in events:
        if e["ev"] == "register":
            if e["via"] == "load" and len(registered - {e["id"]}) >= limit:
                waiting.append(e["id"])
            registered.add(e["id"])
        elif e["ev"] == "unregister":
            registered.discard(e["id"])
            if not waiting:
                continue
            drop = dropped.get(e["id"], -math.inf)
            before = [load for load in waiting if first_read.get(load, math.inf) <= drop]
            load = max(before, key=lambda load: first_read[load]) if before else waiting[0]
            waiting.remove(load)
            paired[e["id"]] = load
    return paired


def count_engine(lines: Iterable[str], limit: int | None = None) -> EngineCount:
    """Count one server's log (JSON lines from all its processes, sorted here by their wall clock).

    An id is held from its first read (the register event follows the engine's read) until it is
    unregistered; a drop of an id never read (vLLM's warm-up adapters) is not counted. ``limit``:
    the adapters the router in front holds on this engine, for a router that evicts as lorafleet
    does (``victims``); a held id dropped after the engine began to read the load it was unloaded
    for, and read by nothing before its unload, is that load's victim, not a held adapter lost.
    """
    events = sorted((json.loads(line) for line in lines if line.strip()), key=lambda e: float(e["t"]))
    first_read: dict[int, float] = {}
    reads_of: dict[int, list[float]] = {}
    registered: dict[int, float] = {}
    unregistered: dict[int, float] = {}
    via: dict[int, str] = {}
    for e in events:
        if e["ev"] == "read":
            first_read.setdefault(e["id"], e["t"])
            reads_of.setdefault(e["id"], []).append(e["t"])
        elif e["ev"] == "register":
            registered.setdefault(e["id"], e["t"])
            via[e["id"]] = e["via"]
        elif e["ev"] == "unregister":
            unregistered.setdefault(e["id"], e["t"])
    room_for = victims(events, limit)

    def held(lora_id: int, t: float) -> bool:
        if lora_id not in registered:
            return False
        since = min(registered[lora_id], first_read.get(lora_id, math.inf))
        return since <= t < unregistered.get(lora_id, math.inf)

    def victim(lora_id: int, t: float) -> bool:
        load = room_for.get(lora_id)
        if load is None or first_read.get(load, math.inf) > t:
            return False  # unloaded for no load, or for one the engine had not begun: held when dropped
        gone = unregistered[lora_id]
        return not any(t < read < gone for read in reads_of.get(lora_id, []))

    reads = load_reads = resolver_reads = rereads = in_step = drops = held_drops = victim_drops = 0
    unloads = ghosts = failed = 0
    seen: set[int] = set()
    resident: set[int] = set()
    for e in events:
        kind, lora_id = e["ev"], e.get("id")
        if kind == "read":
            reads += 1
            if lora_id in seen:
                rereads += 1
                in_step += bool(e.get("step"))
            elif via.get(lora_id) == "load":
                load_reads += 1
            elif via.get(lora_id) == "resolve":
                resolver_reads += 1
            seen.add(lora_id)
            resident.add(lora_id)
        elif kind == "read_failed":
            failed += 1
        elif kind == "drop" and lora_id in seen:
            drops += 1
            if held(lora_id, e["t"]):
                if victim(lora_id, e["t"]):
                    victim_drops += 1
                else:
                    held_drops += 1
            resident.discard(lora_id)
        elif kind == "unregister":
            unloads += 1
            ghosts += lora_id in resident
    return EngineCount(
        reads,
        load_reads,
        resolver_reads,
        rereads,
        in_step,
        drops,
        held_drops,
        victim_drops,
        unloads,
        ghosts,
        failed,
    )


# -- the arms --------------------------------------------------------------------------------------


@attrs.frozen
class Arm:
    """A router over fresh servers: lorafleet with what is given of its settings, or vllm-router with a
    policy."""

    kind: str
    """``lorafleet`` or ``vllm-router``."""
    policy: str = ""
    limit: int | None = None
    """lorafleet's limit per replica; None: not given, what serve makes of ``max_cpu_loras``."""
    headroom: int | None = None
    """lorafleet's --headroom; None: not given, its default."""
    learn: bool = False
    """No --concurrency: lorafleet learns the engines' from /metrics (docs/serve.md); False: the
    servers' --max-num-seqs, as docs/vllm.md says to give it, or ``concurrency``."""
    concurrency: int | None = None
    """lorafleet's --concurrency given by hand; None: as ``learn`` says."""

    def name(self) -> str:
        if self.kind == "vllm-router":
            return f"vllm-router {self.policy}"
        given = [f"{key} {value}" for key, value in (("limit", self.limit), ("headroom", self.headroom))]
        given = [g for g in given if not g.endswith(" None")] + ["concurrency learned"] * self.learn
        given += [f"concurrency {self.concurrency}"] * (self.concurrency is not None)
        return f"lorafleet {' '.join(given)}" if given else "lorafleet (defaults)"


def lorafleet_arm(spec: str) -> Arm:
    """``default``, or any of ``limit=N``, ``headroom=M`` and ``concurrency=learned`` (or ``=N``),
    comma-separated (what is left out: as in ``default``)."""
    if spec == "default":
        return Arm("lorafleet")
    given: dict[str, int] = {}
    learn = False
    for part in spec.split(","):
        key, _, value = part.partition("=")
        if key == "concurrency" and value == "learned":
            learn = True
        elif value.isdigit() and (key in ("limit", "headroom") or (key == "concurrency" and int(value) > 0)):
            given[key] = int(value)
        else:
            raise argparse.ArgumentTypeError(
                f"--lorafleet {spec!r}: say default, or limit=N,headroom=M,concurrency=learned|N "
                "(any of them)"
            )
    if learn and "concurrency" in given:
        raise argparse.ArgumentTypeError(f"--lorafleet {spec!r}: concurrency learned or given, not both")
    return Arm(
        "lorafleet",
        limit=given.get("limit"),
        headroom=given.get("headroom"),
        learn=learn,
        concurrency=given.get("concurrency"),
    )


def default_limit(memory: int) -> tuple[int, int]:
    """The limit and headroom ``lorafleet serve`` gives a replica that declares only ``max_cpu_loras``:
    the fleet's default headroom, and ``lorafleet.limit_for`` with it, as serve sizes it."""
    from lorafleet import limit_for
    from lorafleet_fleet import HEADROOM

    return limit_for(memory, HEADROOM), HEADROOM


def schedule(
    arms: Sequence[Arm], runs: int, seed: int, adapters: Sequence[str], requests: int, exponent: float
) -> list[tuple[int, Arm, list[str]]]:
    """What the bench runs, in order: (run, arm, the adapters its completions name).

    Run r (from 1) takes the arms as given when r is odd and reversed when it is even, so that no arm
    always follows the same one, and gives every arm the same sequence, seeded with ``seed + r``.
    """
    plan = []
    for run in range(1, runs + 1):
        sequence = zipf_sequence(seed + run, adapters, requests, exponent)
        for arm in arms if run % 2 else reversed(arms):
            plan.append((run, arm, sequence))
    return plan


# -- processes -------------------------------------------------------------------------------------


@contextmanager
def process(command: list[str], log: Path, ready: str, timeout: float = 120) -> Iterator[None]:
    """Run ``command`` (output to ``log``) until ``ready`` answers 200; stop it after."""
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{command[0]} exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(ready, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{command[0]} never answered {ready}:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)  # a router starts in well under a second: ask often
        yield
    finally:
        ended(proc, 15)


def stop_all(servers: Sequence[VllmServer]) -> None:
    """Stop the servers at once (each may take its 30 s)."""
    threads = [threading.Thread(target=s.stop) for s in servers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def adapter_folders(engine: Engine, root: Path, count: int) -> list[str]:
    """``count`` adapters under ``root``, copies of the built lora-0..5 in turn, named peer-00...

    Their ``base_model_name_or_path`` is the servers' ``--model``, or vLLM's filesystem resolver
    passes them over (and the request gets a 404).
    """
    names = [f"peer-{i:02d}" for i in range(count)]
    for i, name in enumerate(names):
        folder = root / name
        shutil.copytree(engine.adapter(f"lora-{i % 6}"), folder)
        config = json.loads((folder / "adapter_config.json").read_text())
        config["base_model_name_or_path"] = str(engine.build / "model")
        (folder / "adapter_config.json").write_text(json.dumps(config, indent=2))
    return names


# -- one arm, one run ------------------------------------------------------------------------------


@attrs.frozen
class Result:
    run: int
    arm: str
    engines: tuple[EngineCount, ...]
    p50: float
    p99: float
    rate: float
    failed: int
    load: tuple[float, float]
    seconds: float

    @property
    def engine(self) -> EngineCount:
        return EngineCount.total(self.engines)


def instrumented(
    engine: Engine,
    folder: Path,
    replicas: int,
    *,
    max_loras: int,
    max_cpu_loras: int,
    max_num_seqs: int,
    env: Mapping[str, str],
) -> tuple[list[Path], list[VllmServer]]:
    """``replicas`` real vLLM servers (not started) whose engines the instrument (``HOOK``) logs to
    ``folder/engine-i.jsonl``: those logs, and the servers.

    They run on this machine at once, so each computes with its share of the cores
    (``cpu_threads``), as each would have its own accelerator in a real fleet.
    """
    logs = [folder / f"engine-{i}.jsonl" for i in range(replicas)]
    threads = str(cpu_threads(replicas))
    servers = [
        VllmServer(
            engine,
            folder,
            max_loras=max_loras,
            max_cpu_loras=max_cpu_loras,
            max_num_seqs=max_num_seqs,
            env={"PYTHONPATH": str(HOOK), "LORAFLEET_PEER_LOG": str(log), "OMP_NUM_THREADS": threads, **env},
        )
        for log in logs
    ]
    return logs, servers


def cpu_threads(sharing: int) -> int:
    """The threads each of ``sharing`` vLLM CPU servers computes with: its share of the cores.

    Unset, each takes every core, and on a machine with fewer cores than their threads two busy
    servers slow each other's requests tenfold (2 cores, 8-token completions two at a time on each:
    median 1,956 ms against 193 ms with one server busy; given one thread each, 109 against 99 ms),
    which would make spreading requests over the servers look slow however it is done.
    """
    return max(1, (os.cpu_count() or 1) // max(1, sharing))


def run_arm(
    args: argparse.Namespace, engine: Engine, arm: Arm, run: int, sequence: Sequence[str], work: Path
) -> Result:
    """Fresh servers, the arm's router in front, the sequence through it; what the engines did."""
    folder = work / f"run{run}-{arm.name().replace(' ', '-').replace('(', '').replace(')', '')}"
    folder.mkdir(parents=True)
    resolver = {"VLLM_PLUGINS": "lora_filesystem_resolver", "VLLM_LORA_RESOLVER_CACHE_DIR": str(args.root)}
    logs, servers = instrumented(
        engine,
        folder,
        args.replicas,
        max_loras=args.max_loras,
        max_cpu_loras=args.max_cpu_loras,
        max_num_seqs=args.max_num_seqs,
        env=resolver if arm.kind == "vllm-router" else {},
    )
    try:
        for server in servers:
            server.start()
        for server in servers:
            server.wait_ready()
        port = free_port()
        if arm.kind == "lorafleet":
            command = [sys.executable, "-m", "lorafleet_serve", "--port", str(port)]
            for i, server in enumerate(servers):
                replica = f"id=r{i},url={server.url},model={MODEL},max_cpu_loras={args.max_cpu_loras}"
                if arm.limit is not None:
                    replica += f",limit={arm.limit}"
                command += ["--replica", replica]
            command += ["--adapters-root", str(args.root)]
            if arm.concurrency is not None:
                command += ["--concurrency", str(arm.concurrency)]
            elif not arm.learn:
                command += ["--concurrency", str(servers[0].max_num_seqs)]
            if arm.headroom is not None:
                command += ["--headroom", str(arm.headroom)]
            command += ["--request-log", str(folder / "requests.jsonl")]  # where each request's time went
        else:
            command = [str(args.router), "--host", "127.0.0.1", "--port", str(port), "--policy", arm.policy]
            command += ["--prometheus-port", str(free_port()), "--worker-urls", *(s.url for s in servers)]
        with process(command, folder / "router.log", f"http://127.0.0.1:{port}/health"):
            load_start = os.getloadavg()[0]
            began = time.monotonic()
            answers = send(f"http://127.0.0.1:{port}", sequence, args.concurrency, args.max_tokens)
            seconds = time.monotonic() - began
            load_end = os.getloadavg()[0]
    finally:
        stop_all(servers)
    ok = [a.seconds for a in answers if a.ok]
    held = None
    if arm.kind == "lorafleet":
        held = arm.limit if arm.limit is not None else default_limit(args.max_cpu_loras)[0]
    engines = tuple(count_engine(log.read_text().splitlines() if log.exists() else [], held) for log in logs)
    return Result(
        run,
        arm.name(),
        engines,
        percentile(ok, 0.5),
        percentile(ok, 0.99),
        len(ok) / seconds,
        sum(not a.ok for a in answers),
        (load_start, load_end),
        seconds,
    )


# -- the report ------------------------------------------------------------------------------------

HEADER = (
    "| run | arm | disk loads (per replica) | by load / resolver | re-reads | drops of a held adapter "
    "| victims dropped | ghost unloads | p50 s | p99 s | req/s | failed | load avg | s |"
)
RULE = "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"


def row(r: Result) -> str:
    e = r.engine
    split = "/".join(str(c.reads) for c in r.engines)
    return (
        f"| {r.run} | {r.arm} | {e.reads} ({split}) | {e.load_reads} / {e.resolver_reads} | {e.rereads} "
        f"| {e.held_drops} | {e.victim_drops} | {e.ghost_unloads} of {e.unloads} | {r.p50:.2f} "
        f"| {r.p99:.2f} | {r.rate:.2f} | {r.failed} | {r.load[0]:.1f} → {r.load[1]:.1f} | {r.seconds:.0f} |"
    )


def medians(results: Sequence[Result], arms: Sequence[str]) -> list[str]:
    lines = [
        "| arm | runs | disk loads | re-reads | drops of a held adapter | victims dropped | ghost unloads "
        "| p50 s | p99 s | req/s | failed |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for arm in arms:
        mine = [r for r in results if r.arm == arm]
        if not mine:
            continue

        def med(values: Iterable[float]) -> float:
            return statistics.median(list(values))

        lines.append(
            f"| {arm} | {len(mine)} | {med(r.engine.reads for r in mine):g} "
            f"| {med(r.engine.rereads for r in mine):g} | {med(r.engine.held_drops for r in mine):g} "
            f"| {med(r.engine.victim_drops for r in mine):g} "
            f"| {med(r.engine.ghost_unloads for r in mine):g} | {med(r.p50 for r in mine):.2f} "
            f"| {med(r.p99 for r in mine):.2f} | {med(r.rate for r in mine):.2f} "
            f"| {med(r.failed for r in mine):g} |"
        )
    return lines


def machine() -> str:
    memory = next(
        (
            line.split()[1]
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal")
        ),
        "?",
    )
    return (
        f"{platform.machine()}, {os.cpu_count()} cores, "
        f"{int(memory) // 2**20 if memory.isdigit() else '?'} GiB, Python {platform.python_version()}"
    )


def report(
    args: argparse.Namespace,
    command: str,
    results: Sequence[Result],
    arms: Sequence[str],
    notes: Sequence[str],
    loads: tuple[str, str],
) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# lorafleet against vllm-router on the real vLLM",
        "",
        f"Written by `{command}` on {now}: {machine()}; vLLM CPU build (engine/setup.sh), model `{MODEL}`.",
        f"Load average (1, 5, 15 min) at the start: {loads[0]}; at the end: {loads[1]}.",
        "",
        f"{args.replicas} vLLM servers per arm and run, started afresh (`--max-loras {args.max_loras} "
        f"--max-cpu-loras {args.max_cpu_loras} --max-num-seqs {args.max_num_seqs}`); "
        f"{args.adapters} adapters; {args.requests} completions "
        f"(Zipf({args.exponent:g}), seed {args.seed} + run, the same for every arm of a run), "
        f"{args.concurrency} in flight, max_tokens {args.max_tokens}, temperature 0. The arms took turns, "
        "in reverse order every other run.",
        "",
        *(f"- {note}" for note in notes),
        "",
        "Disk loads are every adapter read from disk that the engines made (counted by "
        "bench/peer_hook/sitecustomize.py: vLLM logs only a name's first load): first reads by a "
        "router's load or by vLLM's LoRA resolver, and re-reads of an id the engine's cache had dropped "
        "(read inside a generation step). A drop of a held adapter: the engine dropped from its CPU "
        "cache an adapter whose name was still registered (for lorafleet, one it held), a victim's "
        "apart. Victims dropped: lorafleet's victims, dropped by the engine as the load that chose them "
        "was read and unloaded once it landed (SPEC §3.16: by design; `count_engine` pairs each unload "
        "with a load that needed room). Ghost unloads: "
        "unloads whose weights the engine still kept. Latencies are of the requests answered 2xx; "
        "req/s is those over the run's seconds.",
        "",
        "## Medians",
        "",
        *medians(results, arms),
        "",
        "## Every run",
        "",
        HEADER,
        RULE,
        *(row(r) for r in results),
        "",
    ]
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bench/peer_bench.py", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="alternating runs of every arm (default 3)")
    parser.add_argument(
        "--lorafleet",
        type=lorafleet_arm,
        action="append",
        metavar="SPEC",
        help="a lorafleet arm: default (max_cpu_loras declared, --concurrency the servers' "
        "--max-num-seqs, the rest serve's defaults), or any of limit=N,headroom=M,concurrency=learned|N "
        "as well; repeat for more (default: default)",
    )
    parser.add_argument(
        "--policies",
        default=",".join(POLICIES),
        help="vllm-router's policies, an arm each, comma-separated, or empty for none "
        f"(default {','.join(POLICIES)})",
    )
    parser.add_argument("--replicas", type=int, default=2, help="vLLM servers per arm (default 2)")
    parser.add_argument("--max-loras", type=int, default=2, help="the servers' --max-loras (default 2)")
    parser.add_argument(
        "--max-cpu-loras", type=int, default=4, help="the servers' --max-cpu-loras (default 4)"
    )
    parser.add_argument(
        "--max-num-seqs",
        type=int,
        default=128,
        help="the servers' --max-num-seqs: the requests each runs at once (default 128, vLLM's on a CPU)",
    )
    parser.add_argument("--adapters", type=int, default=14, help="adapters (default 14)")
    parser.add_argument("--requests", type=int, default=240, help="completions per arm and run (default 240)")
    parser.add_argument("--exponent", type=float, default=1.0, help="the Zipf skew (default 1.0)")
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight (default 4)")
    parser.add_argument("--max-tokens", type=int, default=8, help="max_tokens of each completion (default 8)")
    parser.add_argument(
        "--seed", type=int, default=1, help="run r's sequence is seeded with SEED + r (default 1)"
    )
    parser.add_argument(
        "--keep", type=Path, help="keep the servers' logs, the instrument's and lorafleet's request log here"
    )
    parser.add_argument("--out", type=Path, default=HERE / "peer_results.md")
    return parser


def main(argv: list[str]) -> int:
    parse = parser()
    args = parse.parse_args(argv)
    policies = [p for p in args.policies.split(",") if p]
    unknown = [p for p in policies if p not in (*POLICIES, "kv_aware")]
    if unknown:
        parse.error(f"--policies: vllm-router has no {unknown}")
    lorafleet_arms = args.lorafleet or [Arm("lorafleet")]

    notes = []
    arms = list(dict.fromkeys(lorafleet_arms))
    if policies:
        args.router, said = vllm_router()
        print(said, flush=True)
        notes.append(said)
        if args.router is None:
            notes.append(f"vllm-router arms skipped: {', '.join(policies)}")
        else:
            arms += [Arm("vllm-router", policy=p) for p in policies]
    if any(a.kind == "lorafleet" and a.limit is None for a in arms):
        limit, headroom = default_limit(args.max_cpu_loras)
        notes.append(
            f"lorafleet (defaults): every replica declares max_cpu_loras={args.max_cpu_loras} "
            "(docs/vllm.md), with no limit and no --headroom; serve makes its limit "
            f"{limit} and the headroom {headroom}. --concurrency is the servers' --max-num-seqs"
        )
    engine = set_up()
    command = "python bench/peer_bench.py " + " ".join(argv)
    loads = (" ".join(Path("/proc/loadavg").read_text().split()[:3]), "")
    work = args.keep or Path(tempfile.mkdtemp(prefix="lorafleet-peer-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    args.root = work / "adapters"
    names = adapter_folders(engine, args.root, args.adapters) if not args.root.exists() else None
    names = names or sorted(p.name for p in args.root.iterdir())
    results: list[Result] = []
    print(HEADER + "\n" + RULE, flush=True)
    try:
        for run, arm, sequence in schedule(arms, args.runs, args.seed, names, args.requests, args.exponent):
            try:
                results.append(run_arm(args, engine, arm, run, sequence, work))
            except RuntimeError as e:  # a server or router that would not start: say so, go on
                notes.append(f"run {run}, {arm.name()}: did not run: {str(e).splitlines()[0]}")
                print(notes[-1], flush=True)
                continue
            print(row(results[-1]), flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
        loads = (loads[0], " ".join(Path("/proc/loadavg").read_text().split()[:3]))
        text = report(args, command, results, [a.name() for a in arms], notes, loads)
        args.out.write_text(text, encoding="utf-8")
    print("\n".join(medians(results, [a.name() for a in arms])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

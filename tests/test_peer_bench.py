"""What decides bench/peer_bench.py's figures: the instrument, its log's counting, the workload, percentiles.

The bench itself runs for an hour on the real engine; nothing here starts a vLLM. The instrument
(bench/peer_hook/sitecustomize.py) is run over a stand-in ``vllm`` package with the same class and
method names as vLLM 0.32's, in a process of its own, as the servers run it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from bench_scripts import load

BENCH = Path(__file__).resolve().parent.parent / "bench"


peer = load("peer_bench")


def log(*events: dict[str, object]) -> list[str]:
    return [json.dumps({"pid": 1, **e}) for e in events]


# -- counting the log ------------------------------------------------------------------------------


def test_first_reads_by_load_and_by_resolver_and_rereads_apart() -> None:
    count = peer.count_engine(
        log(
            {"t": 1.0, "ev": "read", "id": 1, "name": "a", "step": False},
            {"t": 1.1, "ev": "register", "id": 1, "name": "a", "via": "load"},
            {"t": 2.0, "ev": "read", "id": 2, "name": "b", "step": False},
            {"t": 2.1, "ev": "register", "id": 2, "name": "b", "via": "resolve"},
            {"t": 3.0, "ev": "drop", "id": 1, "how": "lru", "step": False},
            {"t": 4.0, "ev": "read", "id": 1, "name": "a", "step": True},
            {"t": 5.0, "ev": "drop", "id": 2, "how": "lru", "step": True},
            {"t": 6.0, "ev": "read", "id": 2, "name": "b", "step": False},
            {"t": 7.0, "ev": "read_failed", "id": 3, "name": "c", "step": False},
        )
    )
    assert count == peer.EngineCount(
        reads=4,
        load_reads=1,
        resolver_reads=1,
        rereads=2,
        rereads_in_step=1,
        drops=2,
        held_drops=2,
        victim_drops=0,
        unloads=0,
        ghost_unloads=0,
        failed_reads=1,
    )


def test_a_drop_after_the_unload_is_no_held_adapter_and_the_unload_left_a_ghost() -> None:
    count = peer.count_engine(
        log(
            {"t": 1.0, "ev": "read", "id": 1, "name": "a", "step": False},
            {"t": 1.1, "ev": "register", "id": 1, "name": "a", "via": "load"},
            {"t": 2.0, "ev": "unregister", "id": 1, "name": "a"},  # the weights stay in the cache
            {"t": 3.0, "ev": "drop", "id": 1, "how": "lru", "step": False},
            {"t": 4.0, "ev": "read", "id": 2, "name": "b", "step": False},
            {"t": 4.1, "ev": "register", "id": 2, "name": "b", "via": "load"},
            {"t": 5.0, "ev": "drop", "id": 2, "how": "lru", "step": False},
            {"t": 6.0, "ev": "unregister", "id": 2, "name": "b"},  # dropped already: no ghost
        )
    )
    assert (count.drops, count.held_drops, count.unloads, count.ghost_unloads) == (2, 1, 2, 1)


def load_with_room(t: float, lora_id: int, name: str, victim: int | None) -> list[dict[str, object]]:
    """A load read at ``t``, the engine's LRU dropping ``victim`` as it comes in, registered after."""
    events: list[dict[str, object]] = [{"t": t, "ev": "read", "id": lora_id, "name": name, "step": False}]
    if victim is not None:
        events.append({"t": t + 0.01, "ev": "drop", "id": victim, "how": "lru", "step": False})
    events.append({"t": t + 0.02, "ev": "register", "id": lora_id, "name": name, "via": "load"})
    return events


def full(limit: int) -> list[dict[str, object]]:
    """An engine holding ``limit`` adapters, ids 1 up, loaded while there was room."""
    return [e for i in range(1, limit + 1) for e in load_with_room(float(i), i, f"a{i}", None)]


def unload(t: float, lora_id: int) -> dict[str, object]:
    return {"t": t, "ev": "unregister", "id": lora_id, "name": f"a{lora_id}"}


def test_the_victim_of_a_load_dropped_as_it_comes_in_and_unloaded_once_it_lands_is_no_held_drop() -> None:
    events = [*full(2), *load_with_room(10.0, 3, "a3", victim=1), unload(10.1, 1)]
    count = peer.count_engine(log(*events), limit=2)
    assert (count.drops, count.held_drops, count.victim_drops, count.ghost_unloads) == (1, 0, 1, 0)
    # Behind a router that does not evict so (limit None: vllm-router), the same drop is of a held name.
    assert peer.count_engine(log(*events)).held_drops == 1


def test_two_loads_at_once_each_with_its_victim_unloaded_after_both_landed() -> None:
    first, second = load_with_room(10.0, 5, "a5", victim=1), load_with_room(10.015, 6, "a6", victim=2)
    events = [*full(4), *first, *second, unload(10.2, 1), unload(10.3, 2)]
    assert peer.victims(sorted(events, key=lambda e: float(str(e["t"]))), 4) == {1: 5, 2: 6}
    count = peer.count_engine(log(*events), limit=4)
    assert (count.held_drops, count.victim_drops) == (0, 2)
    # The unloads may reach the engine in the other order: each still goes with the load it made room for.
    swapped = [*full(4), *first, *second, unload(10.2, 2), unload(10.3, 1)]
    assert peer.victims(sorted(swapped, key=lambda e: float(str(e["t"]))), 4) == {1: 5, 2: 6}
    count = peer.count_engine(log(*swapped), limit=4)
    assert (count.held_drops, count.victim_drops) == (0, 2)


def test_an_adapter_the_engine_drops_in_place_of_the_victim_is_a_held_drop_and_the_victim_a_ghost() -> None:
    # The router chose 1 for 3's room; the engine dropped 2, which the router later evicts for 4.
    events = [
        *full(2),
        *load_with_room(10.0, 3, "a3", victim=2),
        unload(10.1, 1),  # the weights of 1 are still in the cache: a ghost
        *load_with_room(20.0, 4, "a4", victim=1),
        unload(20.1, 2),
    ]
    count = peer.count_engine(log(*events), limit=2)
    assert peer.victims(sorted(events, key=lambda e: float(str(e["t"]))), 2) == {1: 3, 2: 4}
    assert (count.held_drops, count.victim_drops, count.ghost_unloads) == (1, 0, 1)


def test_a_dropped_adapter_read_again_before_its_unload_was_held() -> None:
    events = [
        *full(2),
        *load_with_room(10.0, 3, "a3", victim=1),
        {"t": 10.05, "ev": "read", "id": 1, "name": "a1", "step": True},
        unload(10.1, 1),
    ]
    count = peer.count_engine(log(*events), limit=2)
    assert (count.held_drops, count.victim_drops, count.rereads) == (1, 0, 1)


def test_loads_into_room_need_no_victim_and_pair_with_no_unload() -> None:
    events = [*full(3), unload(5.0, 2), *load_with_room(10.0, 4, "a4", victim=None)]
    assert peer.victims(sorted(events, key=lambda e: float(str(e["t"]))), 3) == {}
    assert peer.victims(sorted(events, key=lambda e: float(str(e["t"]))), None) == {}


def test_held_from_the_engines_read_though_the_frontend_writes_register_after_it() -> None:
    count = peer.count_engine(
        log(
            {"t": 1.0, "ev": "read", "id": 1, "name": "a", "step": False},
            {"t": 1.5, "ev": "drop", "id": 1, "how": "lru", "step": False},
            {"t": 2.0, "ev": "register", "id": 1, "name": "a", "via": "load"},
        )
    )
    assert count.held_drops == 1


def test_lines_are_taken_in_wall_clock_order_and_warm_up_drops_are_not_counted() -> None:
    lines = log(
        {"t": 3.0, "ev": "read", "id": 1, "name": "a", "step": True},
        {"t": 1.0, "ev": "read", "id": 1, "name": "a", "step": False},
        {"t": 0.5, "ev": "drop", "id": 99, "how": "all", "step": False},  # a dummy adapter, never read
        {"t": 2.0, "ev": "drop", "id": 1, "how": "lru", "step": False},
    )
    count = peer.count_engine([*lines, ""])
    assert (count.reads, count.rereads, count.rereads_in_step, count.drops) == (2, 1, 1, 1)


def test_counts_add_up_over_replicas() -> None:
    one = peer.EngineCount(1, 1, 0, 0, 0, 2, 1, 1, 3, 1, 0)
    two = peer.EngineCount(4, 0, 3, 1, 1, 0, 0, 2, 0, 0, 1)
    assert peer.EngineCount.total([one, two]) == peer.EngineCount(5, 1, 3, 1, 1, 2, 1, 3, 3, 1, 1)


# -- the workload, the arms, the figures -----------------------------------------------------------

NAMES = [f"peer-{i:02d}" for i in range(14)]


def test_the_zipf_sequence_is_seeded_and_skewed() -> None:
    a = peer.zipf_sequence(2, NAMES, 240)
    assert a == peer.zipf_sequence(2, NAMES, 240)
    assert a != peer.zipf_sequence(3, NAMES, 240)
    assert len(a) == 240
    assert set(a) <= set(NAMES)
    assert a.count("peer-00") > a.count("peer-01") > a.count("peer-13")


def test_every_arm_of_a_run_sends_the_same_sequence_and_the_order_turns() -> None:
    arms = [peer.Arm("lorafleet"), peer.Arm("vllm-router", policy="consistent_hash"), peer.Arm("x")]
    plan = peer.schedule(arms, 3, 1, NAMES, 50, 1.0)
    assert [(run, arm) for run, arm, _ in plan] == [
        *((1, arm) for arm in arms),
        *((2, arm) for arm in reversed(arms)),
        *((3, arm) for arm in arms),
    ]
    for run in (1, 2, 3):
        sequences = [sequence for r, _, sequence in plan if r == run]
        assert sequences == [peer.zipf_sequence(1 + run, NAMES, 50)] * len(arms)
    assert plan[0][2] != plan[3][2]


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(100, 0, -1)]
    assert peer.percentile(values, 0.5) == 50
    assert peer.percentile(values, 0.99) == 99
    assert peer.percentile(values, 1.0) == 100
    assert peer.percentile([float(v) for v in range(1, 241)], 0.99) == 238
    assert peer.percentile([7.0], 0.99) == 7


def test_lorafleet_arms_are_named_by_what_is_given() -> None:
    assert peer.lorafleet_arm("default") == peer.Arm("lorafleet")
    assert peer.lorafleet_arm("limit=4,headroom=0") == peer.Arm("lorafleet", limit=4, headroom=0)
    assert peer.lorafleet_arm("headroom=1") == peer.Arm("lorafleet", headroom=1)
    assert peer.Arm("lorafleet").name() == "lorafleet (defaults)"
    assert peer.Arm("lorafleet", limit=4, headroom=0).name() == "lorafleet limit 4 headroom 0"
    assert peer.lorafleet_arm("concurrency=learned") == peer.Arm("lorafleet", learn=True)
    assert peer.lorafleet_arm("headroom=1,concurrency=learned").name() == (
        "lorafleet headroom 1 concurrency learned"
    )
    assert peer.lorafleet_arm("concurrency=8") == peer.Arm("lorafleet", concurrency=8)
    assert peer.lorafleet_arm("concurrency=8").name() == "lorafleet concurrency 8"
    for spec in (
        "limit=four",
        "cap=2",
        "4",
        "concurrency=0",
        "concurrency=00",
        "concurrency=learned,concurrency=2",
    ):
        with pytest.raises(argparse.ArgumentTypeError):
            peer.lorafleet_arm(spec)


def test_the_report_gives_the_medians_of_each_arm() -> None:
    def result(run: int, arm: str, reads: int, p50: float) -> object:
        count = peer.EngineCount(reads, reads, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        return peer.Result(run, arm, (count,), p50, 2 * p50, 1.0, 0, (1.0, 2.0), 60.0)

    results = [
        result(1, "a", 10, 1.0),
        result(2, "a", 30, 3.0),
        result(3, "a", 20, 9.0),
        result(1, "b", 5, 1.0),
    ]
    table = peer.medians(results, ["a", "b", "c"])
    assert table[2] == "| a | 3 | 20 | 0 | 0 | 0 | 0 | 3.00 | 6.00 | 1.00 | 0 |"
    assert table[3].startswith("| b | 1 | 5 |")
    assert len(table) == 4  # an arm that never ran has no row
    assert peer.row(results[0]).startswith("| 1 | a | 10 (10) | 10 / 0 |")


def test_the_servers_batch_is_vllms_cpu_default_unless_given_and_the_report_names_it() -> None:
    assert peer.parser().parse_args([]).max_num_seqs == 128
    args = peer.parser().parse_args(["--max-num-seqs", "2"])
    page = peer.report(args, "bench/peer_bench.py --max-num-seqs 2", [], [], [], ("1 1 1", "2 2 2"))
    assert "--max-cpu-loras 4 --max-num-seqs 2`" in page


def test_an_instrumented_server_logs_through_the_hook_with_the_arms_own_environment(tmp_path: Path) -> None:
    engine = peer.Engine(tmp_path / "venv", tmp_path / "build", 0.0)
    logs, servers = peer.instrumented(
        engine,
        tmp_path,
        2,
        max_loras=2,
        max_cpu_loras=4,
        max_num_seqs=2,
        env={"VLLM_PLUGINS": "lora_filesystem_resolver"},
    )
    assert logs == [tmp_path / "engine-0.jsonl", tmp_path / "engine-1.jsonl"]
    for server, log in zip(servers, logs, strict=True):
        assert server.env == {
            "PYTHONPATH": str(peer.HOOK),
            "LORAFLEET_PEER_LOG": str(log),
            "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // 2)),
            "VLLM_PLUGINS": "lora_filesystem_resolver",
        }
        assert (server.max_loras, server.max_cpu_loras, server.max_num_seqs) == (2, 4, 2)


def test_each_server_computes_with_its_share_of_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(peer.os, "cpu_count", lambda: 8)
    assert [peer.cpu_threads(n) for n in (1, 2, 3, 8, 16)] == [8, 4, 2, 1, 1]
    monkeypatch.setattr(peer.os, "cpu_count", lambda: None)
    assert peer.cpu_threads(2) == 1


# -- the instrument --------------------------------------------------------------------------------

FAKE_VLLM = {
    "vllm/__init__.py": "",
    "vllm/lora/__init__.py": "",
    "vllm/lora/model_manager.py": """
        class _Cache:
            def __init__(self):
                self.cache = {}

        class LoRAModelManager:
            def __init__(self, capacity):
                self.capacity = capacity
                self._registered_adapters = _Cache()

            def _add_adapter(self, lora_id):
                self._registered_adapters.cache[lora_id] = True
                while len(self._registered_adapters.cache) > self.capacity:
                    del self._registered_adapters.cache[next(iter(self._registered_adapters.cache))]

            def remove_adapter(self, lora_id):
                return self._registered_adapters.cache.pop(lora_id, None) is not None

            def remove_all_adapters(self):
                self._registered_adapters.cache.clear()

        class LRUCacheLoRAModelManager(LoRAModelManager):
            def remove_oldest_adapter(self):
                del self._registered_adapters.cache[next(iter(self._registered_adapters.cache))]
                return "removed"
    """,
    "vllm/lora/worker_manager.py": """
        class WorkerLoRAManager:
            def _load_adapter(self, request):
                if request.lora_name == "missing":
                    raise FileNotFoundError(request.lora_path)
                return ("model", request.lora_int_id)

        class LRUCacheWorkerLoRAManager(WorkerLoRAManager):
            def _apply_adapters(self, requests):
                return [self._load_adapter(r) for r in requests]
    """,
    "vllm/entrypoints/__init__.py": "",
    "vllm/entrypoints/openai/__init__.py": "",
    "vllm/entrypoints/openai/models/__init__.py": "",
    "vllm/entrypoints/openai/models/serving.py": """
        class LoRARequest:
            def __init__(self, name, lora_int_id):
                self.lora_name, self.lora_int_id, self.lora_path = name, lora_int_id, "/adapters/" + name

        class OpenAIServingModels:
            def __init__(self):
                self.lora_requests = {}

            async def load_lora_adapter(self, request, base_model_name=None):
                if request.lora_name == "bad":
                    return {"error": "refused"}
                self.lora_requests[request.lora_name] = LoRARequest(request.lora_name, 7)
                return "Success: LoRA adapter added successfully."

            async def unload_lora_adapter(self, request):
                del self.lora_requests[request.lora_name]
                return "Success: removed."

            async def resolve_lora(self, lora_name):
                if lora_name not in self.lora_requests:
                    self.lora_requests[lora_name] = LoRARequest(lora_name, 8)
                return self.lora_requests[lora_name]
    """,
}

DRIVE = """
    import asyncio, types
    from vllm.lora.worker_manager import LRUCacheWorkerLoRAManager
    from vllm.lora.model_manager import LRUCacheLoRAModelManager
    from vllm.entrypoints.openai.models.serving import OpenAIServingModels

    def request(name, lora_int_id):
        return types.SimpleNamespace(lora_name=name, lora_int_id=lora_int_id, lora_path="/adapters/" + name)

    worker = LRUCacheWorkerLoRAManager()
    print(worker._load_adapter(request("a", 1)))
    print(worker._apply_adapters([request("a", 1)]))
    try:
        worker._load_adapter(request("missing", 2))
    except FileNotFoundError as e:
        print("raised", e)
    cache = LRUCacheLoRAModelManager(2)
    for lora_id in (1, 2, 3):
        cache._add_adapter(lora_id)
    print(cache.remove_oldest_adapter(), cache.remove_adapter(3), cache.remove_adapter(3))
    models = OpenAIServingModels()

    async def frontend():
        print(await models.load_lora_adapter(types.SimpleNamespace(lora_name="x")))
        print(await models.load_lora_adapter(types.SimpleNamespace(lora_name="bad")))
        print(await models.unload_lora_adapter(types.SimpleNamespace(lora_name="x")))
        print((await models.resolve_lora("y")).lora_int_id, (await models.resolve_lora("y")).lora_int_id)

    asyncio.run(frontend())
"""


def drive(tmp_path: Path, instrumented: bool) -> tuple[str, list[dict[str, object]]]:
    for name, text in FAKE_VLLM.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text))
    out = tmp_path / "peer.jsonl"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LORAFLEET_PEER_LOG")}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(BENCH / "peer_hook"), str(tmp_path)] if instrumented else [str(tmp_path)]
    )
    if instrumented:
        env["LORAFLEET_PEER_LOG"] = str(out)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(DRIVE)], capture_output=True, text=True, env=env, check=True
    )
    lines = out.read_text().splitlines() if out.exists() else []
    return done.stdout, [json.loads(line) for line in lines]


def test_the_instrument_logs_reads_drops_and_names_and_changes_no_answer(tmp_path: Path) -> None:
    plain, nothing = drive(tmp_path, instrumented=False)
    assert nothing == []
    answers, events = drive(tmp_path, instrumented=True)
    assert answers == plain
    assert "raised /adapters/missing" in answers
    assert {e["pid"] for e in events} == {events[0]["pid"]}
    assert all(isinstance(e["t"], float) for e in events)
    reads = [e for e in events if e["ev"] == "read"]
    assert all(isinstance(e.pop("seconds"), float) for e in reads)  # each read timed
    assert [{k: v for k, v in e.items() if k not in ("t", "pid")} for e in events] == [
        {"ev": "read", "id": 1, "name": "a", "path": "/adapters/a", "step": False, "inplace": False},
        {"ev": "read", "id": 1, "name": "a", "path": "/adapters/a", "step": True, "inplace": False},
        {"ev": "read_failed", "error": "FileNotFoundError", "id": 2, "name": "missing"}
        | {"path": "/adapters/missing", "step": False, "inplace": False},
        {"ev": "drop", "id": 1, "how": "overflow", "step": False},  # the third insert past capacity 2
        {"ev": "drop", "id": 2, "how": "lru", "step": False},
        {"ev": "drop", "id": 3, "how": "remove", "step": False},
        {"ev": "register", "name": "x", "id": 7, "path": "/adapters/x", "via": "load"},
        {"ev": "unregister", "name": "x", "id": 7},
        {"ev": "register", "name": "y", "id": 8, "path": "/adapters/y", "via": "resolve"},
    ]


# -- bench/peer_logs.py: why an arm read what it read ---------------------------------------------


def test_peer_logs_tells_first_reads_copies_and_reads_back_and_drops_of_a_hotter_adapter(
    tmp_path: Path,
) -> None:
    logs = load("peer_logs")

    def read(t: float, lora_id: int, name: str) -> dict[str, object]:
        return {"t": t, "ev": "read", "id": lora_id, "name": name, "step": False}

    def drop(t: float, lora_id: int) -> dict[str, object]:
        return {"t": t, "ev": "drop", "id": lora_id, "how": "lru", "step": False}

    folder = tmp_path / "run1-lorafleet-defaults"
    folder.mkdir()
    zero = [
        read(1.0, 1, "peer-00"),
        read(2.0, 2, "peer-09"),
        drop(2.1, 1),  # rank 1 out for rank 10: hotter out
        read(5.0, 3, "peer-00"),  # back: in no cache when read
        drop(5.1, 2),
        {"t": 0.5, "ev": "drop", "id": 99, "how": "all", "step": False},  # warm-up: no name, not counted
    ]
    one = [read(3.0, 1, "peer-09")]  # a copy: engine 0 holds it at 3.0
    (folder / "engine-0.jsonl").write_text("\n".join(log(*zero)) + "\n")
    (folder / "engine-1.jsonl").write_text("\n".join(log(*one)) + "\n")
    found = logs.explain(folder)
    assert found["kinds"] == {"first": 2, "back": 1, "copy": 1}
    assert found["per_engine"] == {0: {"first": 2, "back": 1}, 1: {"copy": 1}}
    assert found["bands"] == {0: [2, 0, 1], 1: [0, 0, 1]}
    assert (found["drops"], found["hotter_out"]) == (2, 1)
    assert logs.main([str(tmp_path)]) == 0

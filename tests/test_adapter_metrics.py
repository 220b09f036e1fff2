"""Per-adapter counts over real HTTP against the stand-in, under asyncio and trio: the snapshot
(``Fleet.adapter_statistics``), the ``lorafleet_adapter_*`` families, their bound, and through
``lorafleet serve``'s ``/metrics``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import anyio
import httpx
import pytest
from prometheus_client import CollectorRegistry

from lorafleet import How
from lorafleet_fleet import (
    OTHER_ADAPTERS,
    WAIT_BUCKETS,
    AdapterError,
    Fleet,
    InvalidValueError,
    PrometheusMetrics,
    Replica,
    ReplicaError,
)
from lorafleet_serve import Config, ReplicaConfig, RouterServer
from lorafleet_standin import StandInServer

from conftest import calls_reach, eventually, quiet, settled

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_task_left_running")]

FAMILIES = ("requests", "grants", "refusals", "loads", "evictions", "wait_seconds")


def calls(server: StandInServer, route: str) -> Counter[str]:
    """The stand-in's calls to ``route`` (load or unload), by adapter."""
    return Counter(c.body["lora_name"] for c in server.app.calls_to(route))


def samples(registry: CollectorRegistry, family: str) -> dict[tuple[tuple[str, str], ...], float]:
    """One scrape of ``lorafleet_adapter_<family>``: each sample's (name, labels) to its value."""
    found = {}
    for metric in registry.collect():
        if metric.name == f"lorafleet_adapter_{family}":
            for sample in metric.samples:
                found[(("", sample.name), *sorted(sample.labels.items()))] = sample.value
    return found


def by_adapter(registry: CollectorRegistry, name: str, **labels: str) -> dict[str, float]:
    """Sample ``name`` (with ``labels``) of one scrape, by its ``adapter`` label."""
    out = {}
    for metric in registry.collect():
        for sample in metric.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                out[sample.labels["adapter"]] = sample.value
    return out


async def test_counts_per_adapter_after_a_known_sequence(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    standin = serve()
    registry = CollectorRegistry()
    replica = Replica("r0", standin.url, "tiny", 2)
    adapters = {
        **{n: str(adapter_dir / n) for n in ("a0", "a1", "a2", "a3")},
        "big": str(adapter_dir / "rank64"),
    }
    async with fleet_type(
        replicas=[replica], adapters=adapters, metrics=PrometheusMetrics(registry), headroom=0
    ) as fleet:
        async with fleet.route("a0") as lease:
            assert lease.how is How.LOADED
        async with fleet.route("a0") as lease:
            assert lease.how is How.HIT
        # Three requests for a cold a1 while its load hangs: one load, two join it.
        standin.app.hang("load")
        hows: list[How] = []

        async def one() -> None:
            async with fleet.route("a1") as lease:
                hows.append(lease.how)

        async with anyio.create_task_group() as tasks:
            for _ in range(3):
                tasks.start_soon(one)
            await calls_reach(standin, "load", 2)
            await eventually(lambda: fleet.statistics().waiting == 3)
            standin.app.release()
        assert sorted(hows) == [How.JOINED, How.JOINED, How.LOADED]
        async with fleet.route("a2"):  # limit 2: evicts an idle adapter
            pass
        for _ in range(2):  # refused by the engine, then at once without a call
            with pytest.raises(AdapterError):
                await fleet.route("big")
        with pytest.raises(AdapterError):  # not among the adapters: no request for anyone
            await fleet.route("nope")
        async with fleet.acquire(replica, "a3", adapters["a3"]) as held:  # a scheduler's own acquire
            assert held.how is How.LOADED
        async with fleet.acquire(replica, "a3", adapters["a3"]) as held:
            assert held.how is How.HIT
        quiet(fleet)
        # A victim's unload goes out once the load that took its room has landed: after the grant.
        await eventually(lambda: settled(fleet))

        stats = fleet.adapter_statistics()
        loads, unloads = calls(standin, "load"), calls(standin, "unload")
        assert list(stats.adapters) == ["a1", "a0", "a3", "big", "a2"]  # most requested first, ties by name
        expected = {  # requests, hits, joined, loaded, refused
            "a0": (2, 1, 0, 1, 0),
            "a1": (3, 0, 2, 1, 0),
            "a2": (1, 0, 0, 1, 0),
            "a3": (2, 1, 0, 1, 0),
            "big": (2, 0, 0, 0, 2),
        }
        for name, counts in stats.adapters.items():
            assert (counts.requests, counts.hits, counts.joined, counts.loaded, counts.refused) == expected[
                name
            ]
            succeeded = loads[name] if name != "big" else 0
            assert counts.loads == {
                "loaded": succeeded,
                "already_loaded": 0,
                "adapter_fault": loads[name] - succeeded,
                "replica_fault": 0,
            }
            assert counts.evictions == {"unloaded": unloads[name], "not_found": 0, "failed": 0}
            assert counts.waits == counts.joined + counts.loaded == counts.wait_buckets[-1]
            assert len(counts.wait_buckets) == len(WAIT_BUCKETS) + 1
            assert list(counts.wait_buckets) == sorted(counts.wait_buckets)  # cumulative
            assert (counts.wait_seconds > 0) == (counts.waits > 0)
        assert loads == {"a0": 1, "a1": 1, "a2": 1, "a3": 1, "big": 1}
        assert sum(unloads.values()) >= 2  # a2 and a3 each made room on a replica of limit 2
        assert stats.rest_adapters == 0
        assert stats.rest.requests == 0

        # The machine's own counts, per model and fleet-wide, are the sums of the adapters'.
        machine = fleet.statistics()
        assert sum(c.loads["loaded"] for c in stats.adapters.values()) == machine.loads[("tiny", "loaded")]
        assert (
            sum(c.evictions["unloaded"] for c in stats.adapters.values())
            == machine.evictions[("tiny", "unloaded")]
        )
        for how, granted in (
            (How.HIT, [c.hits for c in stats.adapters.values()]),
            (How.JOINED, [c.joined for c in stats.adapters.values()]),
            (How.LOADED, [c.loaded for c in stats.adapters.values()]),
        ):
            assert sum(granted) == machine.grants.get(how.value, 0), how
        assert sum(c.refused for c in stats.adapters.values()) == machine.failures["adapter"]

        # The top two, and the rest summed.
        top = fleet.adapter_statistics(top=2)
        assert list(top.adapters) == ["a1", "a0"]
        assert top.rest_adapters == 3
        assert (top.rest.requests, top.rest.refused, top.rest.loaded) == (5, 2, 2)
        with pytest.raises(InvalidValueError):
            fleet.adapter_statistics(top=-1)

        # Prometheus: the first scrape shows every adapter's whole count (20 by default > 5 adapters).
        requests = by_adapter(registry, "lorafleet_adapter_requests_total")
        assert requests == {**{n: float(c.requests) for n, c in stats.adapters.items()}, OTHER_ADAPTERS: 0.0}
        assert by_adapter(registry, "lorafleet_adapter_grants_total", how="joined") == {
            **{n: float(c.joined) for n, c in stats.adapters.items()},
            OTHER_ADAPTERS: 0.0,
        }
        assert by_adapter(registry, "lorafleet_adapter_refusals_total")["big"] == 2
        assert by_adapter(registry, "lorafleet_adapter_loads_total", outcome="adapter_fault")["big"] == 1
        assert by_adapter(registry, "lorafleet_adapter_evictions_total", outcome="unloaded") == {
            **{n: float(unloads[n]) for n in stats.adapters},
            OTHER_ADAPTERS: 0.0,
        }
        assert by_adapter(registry, "lorafleet_adapter_wait_seconds_count")["a1"] == 3
        assert by_adapter(registry, "lorafleet_adapter_wait_seconds_bucket", le="+Inf")["a0"] == 1
        assert by_adapter(registry, "lorafleet_adapter_wait_seconds_sum")["a1"] == pytest.approx(
            stats.adapters["a1"].wait_seconds
        )


async def test_at_most_top_plus_one_label_values_and_the_counts_add_up(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    servers = [serve(), serve()]
    registry = CollectorRegistry()
    names = [f"x{i:03}" for i in range(500)]
    adapters = dict.fromkeys(names, str(adapter_dir / "a0"))  # one folder, 500 names: the engine loads each
    reps = [Replica(f"r{i}", s.url, "tiny", 100) for i, s in enumerate(servers)]
    async with fleet_type(
        replicas=reps, adapters=adapters, metrics=PrometheusMetrics(registry, top_adapters=20)
    ) as fleet:

        async def ask(name: str, times: int) -> None:
            for _ in range(times):
                async with fleet.route(name):
                    pass

        async with anyio.create_task_group() as tasks:  # 8 at a time, each name in one task
            chunks = [names[i::8] for i in range(8)]
            for chunk in chunks:

                async def run(chunk: list[str] = chunk) -> None:
                    for name in chunk:
                        await ask(name, 3 if name < "x020" else 1)

                tasks.start_soon(run)
        quiet(fleet)
        machine = fleet.statistics()

        first = {family: samples(registry, family) for family in FAMILIES}
        for family, found in first.items():
            values = {dict(key[1:])["adapter"] for key in found}
            assert len(values) == 21, (family, len(values))
        assert set(by_adapter(registry, "lorafleet_adapter_requests_total")) == {*names[:20], OTHER_ADAPTERS}
        requests = by_adapter(registry, "lorafleet_adapter_requests_total")
        assert requests[OTHER_ADAPTERS] == 480
        assert sum(requests.values()) == 540
        # Summed over the label values, each family is the fleet's own count.
        loads = by_adapter(registry, "lorafleet_adapter_loads_total", outcome="loaded")
        assert sum(loads.values()) == machine.loads[("tiny", "loaded")] >= 500
        evictions = by_adapter(registry, "lorafleet_adapter_evictions_total", outcome="unloaded")
        assert sum(evictions.values()) == machine.evictions[("tiny", "unloaded")] > 0  # 500 on 200 slots
        for how in How:
            granted = by_adapter(registry, "lorafleet_adapter_grants_total", how=how.value)
            assert sum(granted.values()) == machine.grants.get(how.value, 0)
        waits = by_adapter(registry, "lorafleet_adapter_wait_seconds_count")
        assert sum(waits.values()) == machine.grants["loaded"] + machine.grants.get("joined", 0)

        # x499 becomes the most requested: it takes x000's place (a tie among the rest goes to the
        # greater name), and counts from now on; what it did until now stays in the sum.
        await ask("x499", 25)
        second = by_adapter(registry, "lorafleet_adapter_requests_total")
        assert set(second) == {*names[1:20], "x499", OTHER_ADAPTERS}
        assert second["x499"] == 0
        assert second[OTHER_ADAPTERS] == 480 + 25
        await ask("x499", 1)
        third = by_adapter(registry, "lorafleet_adapter_requests_total")
        assert third["x499"] == 1
        assert third[OTHER_ADAPTERS] == 505
        # No exported series ever went down: each is a counter to Prometheus.
        for family in FAMILIES:
            now = samples(registry, family)
            for key, value in first[family].items():
                if key in now:
                    assert now[key] >= value, (key, value, now[key])
        quiet(fleet)


async def test_adapter_families_through_serve_metrics(
    serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    standin = serve()
    config = Config(
        replicas=(ReplicaConfig(id="r0", url=standin.url, model="tiny", limit=2),),
        adapter_root=adapter_dir,
        port=0,
        shutdown_timeout=1.0,
        metrics_adapters=2,
    )
    async with (
        RouterServer(config, environ={}) as server,
        httpx.AsyncClient(base_url=server.url, timeout=30) as client,
    ):
        for model, times in (("a0", 3), ("a1", 2), ("a2", 1)):
            for _ in range(times):
                answer = await client.post(
                    "/v1/completions", json={"model": model, "prompt": "hi", "max_tokens": 2}
                )
                assert answer.status_code == 200, answer.text
        await eventually(lambda: server.fleet.statistics().leases == 0)
        text = (await client.get("/metrics")).text
    lines = [line for line in text.splitlines() if line.startswith("lorafleet_adapter_requests_total")]
    assert sorted(lines) == [
        'lorafleet_adapter_requests_total{adapter="_other"} 1.0',
        'lorafleet_adapter_requests_total{adapter="a0"} 3.0',
        'lorafleet_adapter_requests_total{adapter="a1"} 2.0',
    ]
    assert 'lorafleet_adapter_grants_total{adapter="a0",how="hit"} 2.0' in text
    assert 'lorafleet_adapter_loads_total{adapter="_other",outcome="loaded"} 1.0' in text
    assert 'lorafleet_adapter_wait_seconds_count{adapter="a1"} 1.0' in text


async def test_top_adapters_must_be_a_count() -> None:
    for bad in (-1, 1.5, "3", None):
        with pytest.raises(InvalidValueError):
            PrometheusMetrics(CollectorRegistry(), top_adapters=bad)  # type: ignore[arg-type]


async def test_serve_reads_metrics_adapters_from_the_file_and_the_flag(
    tmp_path: Path, adapter_dir: Path
) -> None:
    from lorafleet_serve import ConfigError, read_toml
    from lorafleet_serve._main import config_of, parser

    path = tmp_path / "router.toml"
    path.write_text(
        f'[server]\nmetrics_adapters = 5\n[adapters]\nroot = "{adapter_dir}"\n'
        '[[replicas]]\nid = "r0"\nurl = "http://127.0.0.1:9"\nmodel = "tiny"\nlimit = 2\n'
    )
    assert read_toml(path)["metrics_adapters"] == 5
    assert config_of(parser().parse_args(["--config", str(path)])).metrics_adapters == 5
    assert (
        config_of(parser().parse_args(["--config", str(path), "--metrics-adapters", "0"])).metrics_adapters
        == 0
    )
    path.write_text(path.read_text().replace("= 5", "= -1"))
    with pytest.raises(ConfigError, match=r"server\.metrics_adapters must be at least 0, not -1"):
        config_of(parser().parse_args(["--config", str(path)]))


async def test_a_load_given_up_on_counts_as_the_machine_counts_it(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    """A load still out to a replica's old server when its id moves to a new one is answered as failed."""
    old, new = serve(), serve()
    old.app.hang("load")
    path = str(adapter_dir / "a0")
    try:
        async with fleet_type() as fleet:
            failed: list[BaseException] = []

            async def first() -> None:
                try:
                    async with fleet.acquire(Replica("r0", old.url, "tiny", 2), "a0", path):
                        pass
                except ReplicaError as exc:
                    failed.append(exc)

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(first)
                await calls_reach(old, "load", 1)
                async with fleet.acquire(Replica("r0", new.url, "tiny", 2), "a0", path) as lease:
                    assert lease.how is How.LOADED
            assert len(failed) == 1
            quiet(fleet)
            counts = fleet.adapter_statistics().adapters["a0"]
            machine = fleet.statistics().loads
            assert counts.loads == {"loaded": 1, "already_loaded": 0, "adapter_fault": 0, "replica_fault": 1}
            assert machine == {("tiny", "loaded"): 1, ("tiny", "replica_fault"): 1}
            assert (counts.requests, counts.loaded) == (2, 1)
    finally:
        old.app.release()

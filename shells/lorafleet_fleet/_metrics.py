"""Metrics: the machine's own counts, read when scraped, and the load latency only the shell can know."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any, Protocol

from lorafleet import Fault, How, Placed, Statistics

from ._adapter_counts import (
    LOAD_OUTCOMES,
    OTHER_ADAPTERS,
    TOP_ADAPTERS,
    UNLOAD_OUTCOMES,
    WAIT_BUCKETS,
    AdapterExport,
    Tallies,
)
from ._types import _invalid

ENGINE_READS = ("read", "absent", "failed")
"""How a read of an engine can end (``Fleet.engine_reads``)."""

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry


class Watched(Protocol):
    """What ``PrometheusMetrics`` reads of a fleet (``lorafleet_fleet.Fleet``) each time it collects."""

    _tallies: Tallies

    def statistics(self) -> Statistics: ...

    def placements(self) -> dict[str, int]: ...

    def engine_reads(self) -> dict[str, int]: ...


class PrometheusMetrics:
    """Exports a fleet's counts with prometheus-client (install lorafleet[prometheus]).

    Counters:

    - ``lorafleet_grants_total{how}``: requests granted their adapter, by hit, joined, loaded;
    - ``lorafleet_placements_total{placed}``: placements ``Fleet.route`` acted on, by what the request
      found: held, loading, free (a free slot), evict, over (past the limit), wait (at the cap);
    - ``lorafleet_failures_total{fault}``: requests failed, by adapter or replica fault;
    - ``lorafleet_loads_total{model,outcome}`` and ``lorafleet_load_seconds{model}`` (a histogram);
    - ``lorafleet_evictions_total{model,outcome}``;
    - ``lorafleet_engine_reads_total{outcome}``: reads of the engines, by read, absent (answered
      without the gauge) and failed (see ``Fleet.engine_reads``).

    Gauges, per replica in use: ``lorafleet_adapters_held{replica}``, ``lorafleet_adapters_in_use``,
    ``lorafleet_adapters_limit`` (what it may hold: the limit; past it only while all are in use, by
    the headroom), ``lorafleet_requests_in_flight`` (this router's, waiting or granted) and
    ``lorafleet_replica_healthy`` (0 while placement avoids it after a failure).

    Per adapter, for the ``top_adapters`` most requested and the rest summed under
    ``adapter="_other"`` (so at most ``top_adapters + 1`` label values a family, however many
    adapters there are; see ``AdapterExport`` for how an adapter enters and leaves the top):
    ``lorafleet_adapter_requests_total{adapter}``, ``lorafleet_adapter_grants_total{adapter,how}``,
    ``lorafleet_adapter_refusals_total{adapter}`` (failed as the adapter's fault),
    ``lorafleet_adapter_loads_total{adapter,outcome}``,
    ``lorafleet_adapter_evictions_total{adapter,outcome}`` and the histogram
    ``lorafleet_adapter_wait_seconds{adapter}``: from a request to its grant, for the requests
    granted by a load (joined or loaded).

    Everything but the latency is read from the fleet when Prometheus scrapes, so nothing is counted
    twice and a request's path pays nothing for it. One exporter may watch several fleets: it gives
    their sums (a replica is healthy if every fleet finds it so). Scrape from the fleet's event loop
    (the router's own ``/metrics`` route), not from another thread.

    Args:
        registry: where to register (prometheus-client's default registry when None).
        prefix: the metric names' prefix.
        top_adapters: adapters with a label value of their own in the per-adapter families.
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        prefix: str = "lorafleet",
        *,
        top_adapters: int = TOP_ADAPTERS,
    ) -> None:
        from prometheus_client import REGISTRY, Histogram

        if type(top_adapters) is not int or top_adapters < 0:
            raise _invalid("top_adapters", top_adapters, "top_adapters must be an int of at least 0")
        registry = registry if registry is not None else REGISTRY
        self._fleets: list[Watched] = []
        registry.register(_FleetCollector(self._fleets, prefix, AdapterExport(top_adapters)))
        self._latency = Histogram(
            f"{prefix}_load_seconds",
            "How long a load took, from the call to its answer",
            ["model"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
            registry=registry,
        )

    def watch(self, fleet: Watched) -> None:
        self._fleets.append(fleet)

    def load_took(self, model: str, seconds: float) -> None:
        self._latency.labels(model=model).observe(seconds)


class _FleetCollector:
    """Reads the watched fleets at each scrape and exports their counts and per-replica figures."""

    def __init__(self, fleets: list[Watched], prefix: str, adapters: AdapterExport) -> None:
        self._fleets = fleets
        self._prefix = prefix
        self._adapters = adapters

    def describe(self) -> list[Any]:
        return [*self._families().values(), *self._adapter_families().values()]

    def collect(self) -> list[Any]:
        grants: Counter[str] = Counter(dict.fromkeys((how.value for how in How), 0))
        placements: Counter[str] = Counter(dict.fromkeys((placed.value for placed in Placed), 0))
        failures: Counter[str] = Counter(dict.fromkeys((fault.value for fault in Fault), 0))
        loads: Counter[tuple[str, str]] = Counter()
        evictions: Counter[tuple[str, str]] = Counter()
        engine_reads: Counter[str] = Counter(dict.fromkeys(ENGINE_READS, 0))
        held: Counter[str] = Counter()
        in_use: Counter[str] = Counter()
        in_flight: Counter[str] = Counter()
        limit: dict[str, int] = {}
        healthy: dict[str, bool] = {}
        for fleet in self._fleets:
            snapshot = fleet.statistics()
            grants.update(snapshot.grants)
            placements.update(fleet.placements())
            failures.update(snapshot.failures)
            loads.update(snapshot.loads)
            evictions.update(snapshot.evictions)
            engine_reads.update(fleet.engine_reads())
            for rid, replica in snapshot.replicas.items():
                held[rid] += len(replica.held)
                in_use[rid] += sum(1 for uses in replica.held.values() if uses)
                in_flight[rid] += replica.in_flight
                limit[rid] = max(limit.get(rid, 0), replica.limit)
                healthy[rid] = healthy.get(rid, True) and replica.failing_until is None
        families = self._families()
        for how, count in grants.items():
            families["grants"].add_metric([how], count)
        for placed, count in placements.items():
            families["placements"].add_metric([placed], count)
        for fault, count in failures.items():
            families["failures"].add_metric([fault], count)
        for (model, outcome), count in sorted(loads.items()):
            families["loads"].add_metric([model, outcome], count)
        for (model, outcome), count in sorted(evictions.items()):
            families["evictions"].add_metric([model, outcome], count)
        for outcome, count in engine_reads.items():
            families["engine_reads"].add_metric([outcome], count)
        for rid in sorted(healthy):
            families["held"].add_metric([rid], held[rid])
            families["in_use"].add_metric([rid], in_use[rid])
            families["limit"].add_metric([rid], limit[rid])
            families["in_flight"].add_metric([rid], in_flight[rid])
            families["healthy"].add_metric([rid], 1 if healthy[rid] else 0)
        return [*families.values(), *self._collect_adapters()]

    def _collect_adapters(self) -> list[Any]:
        shown, rest = self._adapters.collect([fleet._tallies for fleet in self._fleets])
        families = self._adapter_families()
        bounds = [*(repr(float(bound)) for bound in WAIT_BUCKETS), "+Inf"]
        for adapter, counts in (*shown.items(), (OTHER_ADAPTERS, rest)):
            families["requests"].add_metric([adapter], counts.requests)
            families["refusals"].add_metric([adapter], counts.refused)
            for how, count in (
                (How.HIT, counts.hits),
                (How.JOINED, counts.joined),
                (How.LOADED, counts.loaded),
            ):
                families["grants"].add_metric([adapter, how.value], count)
            for outcome in LOAD_OUTCOMES:
                families["loads"].add_metric([adapter, outcome], counts.loads[outcome])
            for outcome in UNLOAD_OUTCOMES:
                families["evictions"].add_metric([adapter, outcome], counts.evictions[outcome])
            families["wait"].add_metric(
                [adapter], list(zip(bounds, counts.wait_buckets, strict=True)), counts.wait_seconds
            )
        return list(families.values())

    def _adapter_families(self) -> dict[str, Any]:
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

        prefix = f"{self._prefix}_adapter"
        return {
            "requests": CounterMetricFamily(
                f"{prefix}_requests",
                f"Requests for an adapter (the most requested; the rest as {OTHER_ADAPTERS})",
                labels=["adapter"],
            ),
            "grants": CounterMetricFamily(
                f"{prefix}_grants", "Requests granted an adapter, by how", labels=["adapter", "how"]
            ),
            "refusals": CounterMetricFamily(
                f"{prefix}_refusals",
                "Requests failed as the adapter's fault (the engine refused it)",
                labels=["adapter"],
            ),
            "loads": CounterMetricFamily(
                f"{prefix}_loads", "Loads of an adapter, by outcome", labels=["adapter", "outcome"]
            ),
            "evictions": CounterMetricFamily(
                f"{prefix}_evictions",
                "Unloads of an adapter to make room, by outcome",
                labels=["adapter", "outcome"],
            ),
            "wait": HistogramMetricFamily(
                f"{prefix}_wait_seconds",
                "From a request to its grant, for requests granted by a load (joined or loaded)",
                labels=["adapter"],
            ),
        }

    def _families(self) -> dict[str, Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        prefix = self._prefix
        return {
            "grants": CounterMetricFamily(
                f"{prefix}_grants", "Requests granted their adapter, by how", labels=["how"]
            ),
            "placements": CounterMetricFamily(
                f"{prefix}_placements",
                "Placements route() acted on, by what the request found on the replica",
                labels=["placed"],
            ),
            "failures": CounterMetricFamily(
                f"{prefix}_failures", "Requests failed, by whose fault", labels=["fault"]
            ),
            "loads": CounterMetricFamily(
                f"{prefix}_loads", "Adapter loads, by model and outcome", labels=["model", "outcome"]
            ),
            "evictions": CounterMetricFamily(
                f"{prefix}_evictions", "Adapters unloaded to make room", labels=["model", "outcome"]
            ),
            "engine_reads": CounterMetricFamily(
                f"{prefix}_engine_reads", "Reads of the engines' /metrics, by outcome", labels=["outcome"]
            ),
            "held": GaugeMetricFamily(
                f"{prefix}_adapters_held", "Adapters a replica holds", labels=["replica"]
            ),
            "in_use": GaugeMetricFamily(
                f"{prefix}_adapters_in_use",
                "Adapters a replica holds that requests are running on",
                labels=["replica"],
            ),
            "limit": GaugeMetricFamily(
                f"{prefix}_adapters_limit",
                "Adapters a replica may hold (past it only while all are in use, by the headroom)",
                labels=["replica"],
            ),
            "in_flight": GaugeMetricFamily(
                f"{prefix}_requests_in_flight",
                "This router's requests on a replica, waiting or granted",
                labels=["replica"],
            ),
            "healthy": GaugeMetricFamily(
                f"{prefix}_replica_healthy",
                "1 while placement uses the replica, 0 while it avoids it after a failure",
                labels=["replica"],
            ),
        }

"""Metrics: the machine's own counts, read when scraped, and the load latency only the shell can know."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from lorafleet import How, Statistics

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry


class FleetMetrics(Protocol):
    """What a fleet gives its metrics: a way to read its counts, and how long each load took."""

    def watch(self, statistics: Callable[[], Statistics]) -> None:
        """The fleet's ``statistics``, to read whenever its counts are wanted (called by ``Fleet()``)."""

    def load_took(self, model: str, seconds: float) -> None:
        """A load on a replica of ``model`` was answered (or failed, or timed out) after ``seconds``."""


class PrometheusMetrics:
    """Exports a fleet's counts with prometheus-client (install lorafleet[prometheus]).

    - ``lorafleet_grants_total{how}``: requests granted their adapter, by hit, joined, loaded;
    - ``lorafleet_loads_total{model,outcome}`` and ``lorafleet_load_seconds{model}`` (a histogram);
    - ``lorafleet_evictions_total{model,outcome}``.

    The counts are the machine's own (``Fleet.statistics()``), read when Prometheus scrapes, so nothing
    is counted twice and a request's path pays nothing for them. One exporter may watch several fleets:
    it gives their sums.

    Args:
        registry: where to register (prometheus-client's default registry when None).
        prefix: the metric names' prefix.
    """

    def __init__(self, registry: CollectorRegistry | None = None, prefix: str = "lorafleet") -> None:
        from prometheus_client import REGISTRY, Histogram

        registry = registry if registry is not None else REGISTRY
        self._sources: list[Callable[[], Statistics]] = []
        registry.register(_StatisticsCollector(self._sources, prefix))
        self._latency = Histogram(
            f"{prefix}_load_seconds",
            "How long a load took, from the call to its answer",
            ["model"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
            registry=registry,
        )

    def watch(self, statistics: Callable[[], Statistics]) -> None:
        self._sources.append(statistics)

    def load_took(self, model: str, seconds: float) -> None:
        self._latency.labels(model=model).observe(seconds)


class _StatisticsCollector:
    """Reads the watched fleets' statistics at each scrape and exports their counts as counters."""

    def __init__(self, sources: list[Callable[[], Statistics]], prefix: str) -> None:
        self._sources = sources
        self._prefix = prefix

    def describe(self) -> list[Any]:
        return self._families()

    def collect(self) -> list[Any]:
        grants: Counter[str] = Counter(dict.fromkeys((how.value for how in How), 0))
        loads: Counter[tuple[str, str]] = Counter()
        evictions: Counter[tuple[str, str]] = Counter()
        for statistics in self._sources:
            snapshot = statistics()
            grants.update(snapshot.grants)
            loads.update(snapshot.loads)
            evictions.update(snapshot.evictions)
        families = self._families()
        for how, count in grants.items():
            families[0].add_metric([how], count)
        for (model, outcome), count in sorted(loads.items()):
            families[1].add_metric([model, outcome], count)
        for (model, outcome), count in sorted(evictions.items()):
            families[2].add_metric([model, outcome], count)
        return families

    def _families(self) -> list[Any]:
        from prometheus_client.core import CounterMetricFamily

        prefix = self._prefix
        return [
            CounterMetricFamily(f"{prefix}_grants", "Requests granted their adapter, by how", labels=["how"]),
            CounterMetricFamily(
                f"{prefix}_loads", "Adapter loads, by model and outcome", labels=["model", "outcome"]
            ),
            CounterMetricFamily(
                f"{prefix}_evictions", "Adapters unloaded to make room", labels=["model", "outcome"]
            ),
        ]

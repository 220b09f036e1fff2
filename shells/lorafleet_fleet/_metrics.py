"""What the fleet counts, and an optional Prometheus exporter for it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from lorafleet import How

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry


class FleetMetrics(Protocol):
    """Receives the fleet's counts; the fleet calls it on every grant, load and eviction."""

    def grant(self, how: How) -> None: ...

    def load(self, model: str, outcome: str, seconds: float) -> None: ...

    def eviction(self, model: str, outcome: str) -> None: ...


class PrometheusMetrics:
    """Exports the fleet's counts with prometheus-client (install lorafleet[prometheus]).

    - ``lorafleet_grants_total{how}``: requests granted their adapter, by hit, joined, loaded;
    - ``lorafleet_loads_total{model,outcome}`` and ``lorafleet_load_seconds{model}`` (a histogram);
    - ``lorafleet_evictions_total{model,outcome}``.

    Args:
        registry: where to register (prometheus-client's default registry when None).
        prefix: the metric names' prefix.
    """

    def __init__(self, registry: CollectorRegistry | None = None, prefix: str = "lorafleet") -> None:
        from prometheus_client import REGISTRY, Counter, Histogram

        registry = registry if registry is not None else REGISTRY
        # Grants are on every request's path: a plain count here, read when Prometheus scrapes,
        # costs a dict update where a Counter would take a lock.
        self._grants = dict.fromkeys(How, 0)
        registry.register(_GrantCollector(self._grants, f"{prefix}_grants"))
        self._loads = Counter(
            f"{prefix}_loads", "Adapter loads, by model and outcome", ["model", "outcome"], registry=registry
        )
        self._evictions = Counter(
            f"{prefix}_evictions", "Adapters unloaded to make room", ["model", "outcome"], registry=registry
        )
        self._latency = Histogram(
            f"{prefix}_load_seconds",
            "How long a load took, from the call to its answer",
            ["model"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
            registry=registry,
        )

    def grant(self, how: How) -> None:
        self._grants[how] += 1

    def load(self, model: str, outcome: str, seconds: float) -> None:
        self._loads.labels(model=model, outcome=outcome).inc()
        self._latency.labels(model=model).observe(seconds)

    def eviction(self, model: str, outcome: str) -> None:
        self._evictions.labels(model=model, outcome=outcome).inc()


class _GrantCollector:
    """Exports the grant counts as the counter ``<prefix>_grants_total{how}``."""

    def __init__(self, counts: dict[How, int], name: str) -> None:
        self._counts = counts
        self._name = name

    def describe(self) -> list[Any]:
        return list(self.collect())

    def collect(self) -> list[Any]:
        from prometheus_client.core import CounterMetricFamily

        family = CounterMetricFamily(self._name, "Requests granted their adapter, by how", labels=["how"])
        for how, count in self._counts.items():
            family.add_metric([how.value], count)
        return [family]

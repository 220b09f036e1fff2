"""What the fleet counts, and an optional Prometheus exporter for it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

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
        grants = Counter(
            f"{prefix}_grants", "Requests granted their adapter, by how", ["how"], registry=registry
        )
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
        # Bound once: a grant is on every request's path, and .labels() is a lock and a dict lookup.
        self._grants = {how: grants.labels(how=how.value) for how in How}

    def grant(self, how: How) -> None:
        self._grants[how].inc()

    def load(self, model: str, outcome: str, seconds: float) -> None:
        self._loads.labels(model=model, outcome=outcome).inc()
        self._latency.labels(model=model).observe(seconds)

    def eviction(self, model: str, outcome: str) -> None:
        self._evictions.labels(model=model, outcome=outcome).inc()

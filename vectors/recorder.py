"""A machine that writes down every event, hit and query it answers, as conformance vector steps.

Tooling for vectors/generate.py: the core ships only ``lorafleet.vectors.replay``. Every event goes
through ``handle`` (the machine's methods are spellings of it), so recording ``handle``, ``hit`` and
the queries records everything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lorafleet import (
    AdapterStateMachine,
    Command,
    Event,
    Fault,
    Placement,
    Reading,
    Refusal,
    Statistics,
    UsageError,
    View,
)
from lorafleet._json import (
    encode,
    encode_placement,
    encode_reading,
    encode_refusal,
    encode_statistics,
    encode_view,
)
from lorafleet.vectors import FORMAT


class Recorder(AdapterStateMachine):
    """An AdapterStateMachine that keeps every step it answers, ready to write as a vector."""

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self.config = {"listing_interval": 30.0, **config}
        self.steps: list[dict[str, Any]] = []
        self.handled: list[Event] = []
        """The events handled without a usage error, in order (vectors/generate.py's shadows)."""

    def vector(self, name: str, description: str, rules: Iterable[str]) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "name": name,
            "description": description,
            "rules": sorted(set(rules)),
            "config": self.config,
            "steps": self.steps,
        }

    def handle(self, event: Event) -> list[Command]:
        try:
            commands = super().handle(event)
        except UsageError as exc:
            self.steps.append({"event": encode(event), "error": type(exc).__name__})
            raise
        self.steps.append({"event": encode(event), "commands": [encode(c) for c in commands]})
        self.handled.append(event)
        return commands

    def hit(self, ticket: int, *, replica: str, adapter: str) -> bool:
        args = {"ticket": ticket, "replica": replica, "adapter": adapter}
        try:
            result = super().hit(ticket, replica=replica, adapter=adapter)
        except UsageError as exc:
            self.steps.append({"hit": args, "error": type(exc).__name__})
            raise
        self.steps.append({"hit": args, "result": result})
        return result

    def view(self, replicas: Iterable[str], adapter: str) -> View:
        ids = list(replicas)
        result = super().view(ids, adapter)
        self.steps.append(
            {"query": "view", "replicas": ids, "adapter": adapter, "result": encode_view(result)}
        )
        return result

    def statistics(self) -> Statistics:
        result = super().statistics()
        self.steps.append({"query": "statistics", "result": encode_statistics(result)})
        return result

    def place(
        self,
        adapter: str,
        *,
        model: str | None = None,
        exclude: Iterable[str] = (),
        load: Mapping[str, float] | None = None,
    ) -> Placement:
        skip = sorted(exclude)
        result = super().place(adapter, model=model, exclude=skip, load=load)
        step: dict[str, Any] = {"query": "place", "adapter": adapter}
        if model is not None:
            step["model"] = model
        if skip:
            step["exclude"] = skip
        if load:
            step["load"] = dict(sorted(load.items()))
        step["result"] = encode_placement(result)
        self.steps.append(step)
        return result

    def place_base(
        self,
        model: str,
        *,
        exclude: Iterable[str] = (),
        load: Mapping[str, float] | None = None,
        turn: int = 0,
        healthy: Iterable[str] = (),
    ) -> str | None:
        skip, ok = sorted(exclude), sorted(healthy)
        result = super().place_base(model, exclude=skip, load=load, turn=turn, healthy=ok)
        step: dict[str, Any] = {"query": "place_base", "model": model}
        if skip:
            step["exclude"] = skip
        if load:
            step["load"] = dict(sorted(load.items()))
        if turn:
            step["turn"] = turn
        if ok:
            step["healthy"] = ok
        step["result"] = result
        self.steps.append(step)
        return result

    def next_due(self) -> float | None:
        result = super().next_due()
        self.steps.append({"query": "next_due", "result": result})
        return result

    def is_met(self, replica: str) -> bool:
        result = super().is_met(replica)
        self.steps.append({"query": "is_met", "replica": replica, "result": result})
        return result

    def named(self, replica: str) -> frozenset[str]:
        result = super().named(replica)
        self.steps.append({"query": "named", "replica": replica, "result": sorted(result)})
        return result

    def blame(self, replica: str, failed: Iterable[str] = ()) -> Fault:  # type: ignore[override]
        ids = list(failed)
        result = AdapterStateMachine.blame(replica, ids)
        self.steps.append({"query": "blame", "replica": replica, "failed": ids, "result": result.value})
        return result

    def reading(self, replica: str) -> Reading | None:
        result = super().reading(replica)
        self.steps.append({"query": "reading", "replica": replica, "result": encode_reading(result)})
        return result

    def demand(self, adapter: str) -> int:
        result = super().demand(adapter)
        self.steps.append({"query": "demand", "adapter": adapter, "result": result})
        return result

    def refusal(self, adapter: str) -> Refusal | None:
        result = super().refusal(adapter)
        self.steps.append({"query": "refusal", "adapter": adapter, "result": encode_refusal(result)})
        return result

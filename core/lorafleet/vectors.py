"""Conformance vectors: record a machine's run as JSON, and replay one against a machine.

A vector (format ``lorafleet-vector/1``; the schema is vectors/schema.json) is a name, a description,
the rule identifiers it exercises (SPEC.md), the machine's configuration and its steps. A step is one of:

- ``{"event": E, "commands": [C, ...]}``: handling E gives exactly these commands, in this order;
- ``{"event": E, "error": "UnknownTicketError"}``: E breaks the contract: the machine raises that
  usage error and changes nothing;
- ``{"query": "view", "replicas": [...], "adapter": "a", "result": {...}}``, and likewise
  ``"statistics"`` (no arguments), ``"next_due"`` and ``"is_met"`` (``"replica"``): what the machine
  answers at that point.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from . import _errors
from ._commands import Command
from ._events import (
    AdapterMissing,
    Cancelled,
    Event,
    LimitSet,
    ListingFailed,
    ListingReceived,
    LoadFinished,
    Released,
    ReplicaAdded,
    ReplicasRemoved,
    Requested,
    TimeAdvanced,
    UnloadFinished,
)
from ._json import decode, encode, encode_statistics, encode_view
from ._machine import DEFAULT_LISTING_INTERVAL, AdapterStateMachine
from ._snapshots import Statistics, View
from ._values import LoadOutcome, UnloadOutcome

FORMAT = "lorafleet-vector/1"


class Recorder(AdapterStateMachine):
    """An AdapterStateMachine that writes down every call it answers, as vector steps."""

    def __init__(self, *, listing_interval: float = DEFAULT_LISTING_INTERVAL) -> None:
        super().__init__(listing_interval=listing_interval)
        self.listing_interval = listing_interval
        self.steps: list[dict[str, Any]] = []
        self._inside = False

    def vector(self, name: str, description: str, rules: Iterable[str]) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "name": name,
            "description": description,
            "rules": sorted(set(rules)),
            "config": {"listing_interval": self.listing_interval},
            "steps": self.steps,
        }

    def _record(self, event: Event, call: Callable[[], list[Command]]) -> list[Command]:
        if self._inside:
            return call()
        self._inside = True
        try:
            commands = call()
        except _errors.UsageError as exc:
            self.steps.append({"event": encode(event), "error": type(exc).__name__})
            raise
        finally:
            self._inside = False
        self.steps.append({"event": encode(event), "commands": [encode(c) for c in commands]})
        return commands

    def handle(self, event: Event) -> list[Command]:
        return self._record(event, lambda: super(Recorder, self).handle(event))

    def request(self, ticket: int, replica: str, adapter: str, path: str) -> list[Command]:
        event = Requested(ticket, replica, adapter, path)
        return self._record(event, lambda: super(Recorder, self).request(ticket, replica, adapter, path))

    def release(self, ticket: int) -> list[Command]:
        return self._record(Released(ticket), lambda: super(Recorder, self).release(ticket))

    def cancel(self, ticket: int) -> list[Command]:
        return self._record(Cancelled(ticket), lambda: super(Recorder, self).cancel(ticket))

    def load_finished(self, load: int, outcome: LoadOutcome, message: str = "") -> list[Command]:
        event = LoadFinished(load, outcome, message)
        return self._record(event, lambda: super(Recorder, self).load_finished(load, outcome, message))

    def unload_finished(self, unload: int, outcome: UnloadOutcome, message: str = "") -> list[Command]:
        event = UnloadFinished(unload, outcome, message)
        return self._record(event, lambda: super(Recorder, self).unload_finished(unload, outcome, message))

    def listing_received(self, listing: int, adapters: Iterable[str]) -> list[Command]:
        names = tuple(adapters)
        event = ListingReceived(listing, names)
        return self._record(event, lambda: super(Recorder, self).listing_received(listing, names))

    def listing_failed(self, listing: int, message: str = "") -> list[Command]:
        event = ListingFailed(listing, message)
        return self._record(event, lambda: super(Recorder, self).listing_failed(listing, message))

    def adapter_missing(self, replica: str, adapter: str) -> list[Command]:
        event = AdapterMissing(replica, adapter)
        return self._record(event, lambda: super(Recorder, self).adapter_missing(replica, adapter))

    def add_replica(self, replica: str, model: str, limit: int) -> list[Command]:
        event = ReplicaAdded(replica, model, limit)
        return self._record(event, lambda: super(Recorder, self).add_replica(replica, model, limit))

    def remove_replicas(self, replicas: Iterable[str]) -> list[Command]:
        ids = tuple(replicas)
        return self._record(ReplicasRemoved(ids), lambda: super(Recorder, self).remove_replicas(ids))

    def set_limit(self, model: str, limit: int) -> list[Command]:
        return self._record(LimitSet(model, limit), lambda: super(Recorder, self).set_limit(model, limit))

    def advance(self, now: float) -> list[Command]:
        return self._record(TimeAdvanced(now), lambda: super(Recorder, self).advance(now))

    def view(self, replicas: Iterable[str], adapter: str) -> View:
        ids = list(replicas)
        result = super().view(ids, adapter)
        if not self._inside:
            self.steps.append(
                {"query": "view", "replicas": ids, "adapter": adapter, "result": encode_view(result)}
            )
        return result

    def statistics(self) -> Statistics:
        result = super().statistics()
        if not self._inside:
            self.steps.append({"query": "statistics", "result": encode_statistics(result)})
        return result

    def next_due(self) -> float | None:
        result = super().next_due()
        if not self._inside:
            self.steps.append({"query": "next_due", "result": result})
        return result

    def is_met(self, replica: str) -> bool:
        result = super().is_met(replica)
        if not self._inside:
            self.steps.append({"query": "is_met", "replica": replica, "result": result})
        return result


def replay(vector: dict[str, Any], machine: AdapterStateMachine | None = None) -> list[str]:
    """Run ``vector`` against a fresh machine (or ``machine``); return the differences, empty if none.

    Each difference names the step (counting from 0), what the vector expected and what came.
    """
    if vector.get("format") != FORMAT:
        return [f"not a {FORMAT} vector: format {vector.get('format')!r}"]
    if machine is None:
        machine = AdapterStateMachine(listing_interval=vector["config"]["listing_interval"])
    problems: list[str] = []
    for index, step in enumerate(vector["steps"]):
        where = f"step {index}"
        if "query" in step:
            got = _query(machine, step)
            if got != step["result"]:
                problems.append(
                    f"{where}: {step['query']} expected {_dump(step['result'])}, got {_dump(got)}"
                )
            continue
        event = decode(step["event"])
        try:
            commands = [encode(c) for c in machine.handle(event)]
        except _errors.UsageError as exc:
            if step.get("error") != type(exc).__name__:
                problems.append(f"{where}: {_dump(step['event'])} raised {type(exc).__name__}: {exc}")
            continue
        if "error" in step:
            problems.append(
                f"{where}: {_dump(step['event'])} should raise {step['error']}, gave {_dump(commands)}"
            )
        elif commands != step["commands"]:
            problems.append(
                f"{where}: {_dump(step['event'])}\n"
                f"    expected {_dump(step['commands'])}\n"
                f"    got      {_dump(commands)}"
            )
        if problems:
            break  # later steps only repeat the first difference
    return problems


def _query(machine: AdapterStateMachine, step: dict[str, Any]) -> Any:
    match step["query"]:
        case "view":
            return encode_view(machine.view(step["replicas"], step["adapter"]))
        case "statistics":
            return encode_statistics(machine.statistics())
        case "next_due":
            return machine.next_due()
        case "is_met":
            return machine.is_met(step["replica"])
    raise ValueError(f"unknown query {step['query']!r}")


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True)

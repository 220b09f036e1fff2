"""Conformance vectors: replay a recorded run of the machine against a machine.

A vector (format ``lorafleet-vector/2``; the schema is vectors/schema.json) is a name, a description,
the rule identifiers it exercises (SPEC.md), the machine's configuration and its steps. A step is one of:

- ``{"event": E, "commands": [C, ...]}``: handling E gives exactly these commands, in this order;
- ``{"event": E, "error": "UnknownTicketError"}``: E breaks the contract: the machine raises that
  usage error and changes nothing;
- ``{"hit": {"ticket": T, "replica": R, "adapter": A}, "result": true}``: the ``hit`` shortcut answers
  this (or ``"error"``, as for an event);
- ``{"query": "view", "replicas": [...], "adapter": "a", "result": {...}}``, and likewise
  ``"statistics"`` (no arguments), ``"next_due"``, ``"is_met"``, ``"named"`` and ``"reading"``
  (``"replica"``), ``"demand"`` and ``"refusal"`` (``"adapter"``), ``"blame"`` (``"replica"``, ``"failed"``),
  ``"place"`` (``"adapter"``, and optionally ``"model"``, ``"exclude"``, ``"load"``) and
  ``"place_base"`` (``"model"``, and optionally ``"exclude"``, ``"load"``, ``"turn"``, ``"healthy"``):
  what the machine answers at that point.

Format ``lorafleet-vector/1`` is still replayed. It differs only in a query's name: its ``"reported"``
is ``"named"`` (SPEC.md 6.3), a name a ``/2`` vector may not use.
"""

from __future__ import annotations

import json
from typing import Any

from . import _errors
from ._json import (
    decode,
    encode,
    encode_placement,
    encode_reading,
    encode_refusal,
    encode_statistics,
    encode_view,
)
from ._machine import AdapterStateMachine

FORMAT = "lorafleet-vector/2"
"""The format vectors are written in."""

OLD_QUERIES = {"lorafleet-vector/1": {"reported": "named"}}
"""The older formats still replayed, each with its names of queries ``FORMAT`` renamed, old to new."""
_RETIRED = {old: (format_, new) for format_, names in OLD_QUERIES.items() for old, new in names.items()}


def replay(vector: dict[str, Any], machine: AdapterStateMachine | None = None) -> list[str]:
    """Run ``vector`` against a fresh machine (or ``machine``); return the differences, empty if none.

    Each difference names the step (counting from 0), what the vector expected and what came.
    """
    format_ = vector.get("format")
    if format_ != FORMAT and format_ not in OLD_QUERIES:
        return [f"not a {' or '.join([FORMAT, *OLD_QUERIES])} vector: format {format_!r}"]
    renamed = OLD_QUERIES.get(format_, {})
    if machine is None:
        machine = AdapterStateMachine(**vector["config"])
    problems: list[str] = []
    for index, step in enumerate(vector["steps"]):
        where = f"step {index}"
        if "query" in step:
            if step["query"] in renamed:
                step = {**step, "query": renamed[step["query"]]}
            elif step["query"] in _RETIRED:
                old_format, new = _RETIRED[step["query"]]
                problems.append(
                    f"{where}: {format_} has no query {step['query']!r}, the {old_format} name of {new!r}"
                )
                break
            got = _query(machine, step)
            if got != step["result"]:
                problems.append(
                    f"{where}: {step['query']} expected {_dump(step['result'])}, got {_dump(got)}"
                )
            continue
        if "hit" in step:
            problems.extend(_replay_hit(machine, step, where))
            if problems:
                break
            continue
        event = decode(step["event"])
        before = _observed(machine) if "error" in step else None
        try:
            commands = [encode(c) for c in machine.handle(event)]
        except _errors.UsageError as exc:
            if step.get("error") != type(exc).__name__:
                problems.append(f"{where}: {_dump(step['event'])} raised {type(exc).__name__}: {exc}")
            elif _observed(machine) != before:
                problems.append(
                    f"{where}: {_dump(step['event'])} raised {type(exc).__name__} but changed the machine"
                )
            if problems:
                break
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


def _replay_hit(machine: AdapterStateMachine, step: dict[str, Any], where: str) -> list[str]:
    args = step["hit"]
    try:
        got = machine.hit(args["ticket"], replica=args["replica"], adapter=args["adapter"])
    except _errors.UsageError as exc:
        if step.get("error") != type(exc).__name__:
            return [f"{where}: hit {_dump(args)} raised {type(exc).__name__}: {exc}"]
        return []
    if "error" in step:
        return [f"{where}: hit {_dump(args)} should raise {step['error']}, gave {got}"]
    if got != step["result"]:
        return [f"{where}: hit {_dump(args)} expected {step['result']}, got {got}"]
    return []


def _observed(machine: AdapterStateMachine) -> tuple[Any, Any]:
    """What SPEC.md 4.2 compares before and after a refused step."""
    return encode_statistics(machine.statistics()), machine.next_due()


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
        case "named":
            return sorted(machine.named(step["replica"]))
        case "reading":
            return encode_reading(machine.reading(step["replica"]))
        case "demand":
            return machine.demand(step["adapter"])
        case "refusal":
            return encode_refusal(machine.refusal(step["adapter"]))
        case "blame":
            return machine.blame(step["replica"], step["failed"]).value
        case "place":
            placement = machine.place(
                step["adapter"],
                model=step.get("model"),
                exclude=step.get("exclude", ()),
                load=step.get("load"),
            )
            return encode_placement(placement)
        case "place_base":
            return machine.place_base(
                step["model"],
                exclude=step.get("exclude", ()),
                load=step.get("load"),
                turn=step.get("turn", 0),
                healthy=step.get("healthy", ()),
            )
    raise ValueError(f"unknown query {step['query']!r}")


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True)

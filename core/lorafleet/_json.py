"""Events, commands and snapshots as plain JSON values, for traces and conformance vectors.

An event or command is an object whose ``type`` is its class name in snake case (``requested``,
``issue_load``) and whose other keys are its fields; enumerations are their string values and tuples
are arrays. Nothing is Python-specific, so any language can read and write them.
"""

from __future__ import annotations

import enum
import re
from typing import Any, get_args, get_type_hints

import attrs

from ._commands import Command
from ._events import Event
from ._snapshots import Placement, Reading, Refusal, Statistics, View

# Derived from the unions, so that an event or command added there cannot be missed here.
EVENTS: tuple[type[Any], ...] = get_args(Event)
COMMANDS: tuple[type[Any], ...] = get_args(Command)


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


_BY_TYPE: dict[str, type[Any]] = {snake(cls.__name__): cls for cls in EVENTS + COMMANDS}


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def encode(value: Event | Command) -> dict[str, Any]:
    """An event or a command as a JSON object."""
    out: dict[str, Any] = {"type": snake(type(value).__name__)}
    for field in attrs.fields(type(value)):
        plain = _plain(getattr(value, field.name))
        if not (field.metadata.get("omit_default") and plain == field.default):
            out[field.name] = plain
    return out


def decode(data: dict[str, Any]) -> Any:
    """The event or command a JSON object from ``encode`` stands for.

    Raises:
        ValueError: an unknown ``type`` or a missing field.
    """
    cls = _BY_TYPE.get(data.get("type", ""))
    if cls is None:
        raise ValueError(f"unknown event or command type {data.get('type')!r}")
    hints = get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for field in attrs.fields(cls):
        if field.name not in data:
            if field.default is attrs.NOTHING:
                raise ValueError(f"{data['type']} needs {field.name!r}")
            continue
        raw = data[field.name]
        hint = hints[field.name]
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            try:
                kwargs[field.name] = hint(raw)
            except ValueError:
                kwargs[field.name] = raw  # not of the kind: the machine refuses it with InvalidValueError
        elif isinstance(raw, list):
            kwargs[field.name] = tuple(raw)
        else:
            kwargs[field.name] = raw
    return cls(**kwargs)


def encode_statistics(stats: Statistics) -> dict[str, Any]:
    """A statistics snapshot as JSON: pairs become ``model/outcome`` keys, everything sorted."""
    return {
        "loads": {f"{model}/{outcome}": n for (model, outcome), n in stats.loads.items()},
        "evictions": {f"{model}/{outcome}": n for (model, outcome), n in stats.evictions.items()},
        "grants": dict(stats.grants),
        "failures": dict(stats.failures),
        "replicas": {
            rid: {
                "model": r.model,
                "limit": r.limit,
                "met": r.met,
                "held": dict(r.held),
                "loading": list(r.loading),
                "unloading": list(r.unloading),
                "queued": r.queued,
                "in_flight": r.in_flight,
                "failing_until": r.failing_until,
            }
            for rid, r in stats.replicas.items()
        },
        "waiting": stats.waiting,
        "leases": stats.leases,
        "pins": dict(stats.pins),
        # Left out while empty, as the field it counts is ([warm]).
        **({"warming": sorted(stats.warming)} if stats.warming else {}),
    }


def encode_view(view: View) -> dict[str, Any]:
    return {"holders": sorted(view.holders), "with_room": sorted(view.with_room)}


def encode_reading(reading: Reading | None) -> dict[str, Any] | None:
    if reading is None:
        return None
    fields = attrs.asdict(reading, recurse=False)
    return {**fields, "adapters": sorted(reading.adapters)}


def encode_refusal(refusal: Refusal | None) -> dict[str, Any] | None:
    return None if refusal is None else {"until": refusal.until, "message": refusal.message}


def encode_placement(placement: Placement) -> dict[str, Any]:
    return {"replica": placement.replica, "placed": _plain(placement.placed)}

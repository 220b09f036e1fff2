"""The fields of the events (SPEC.md §2.1): which values each may take, and the InvalidValueError a
wrong one raises. The handlers check a ticket, an operation or a replica in use themselves, first."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs

from . import _events as ev
from ._errors import InvalidValueError
from ._values import LoadOutcome, UnloadOutcome


def _is_finite(value: float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def is_number(value: Any) -> bool:
    if type(value) is bool or not isinstance(value, int | float):
        return False
    return isinstance(value, int) or not math.isnan(value)


def invalid(field: str, value: Any, what: str) -> InvalidValueError:
    return InvalidValueError(f"{what}, not {value!r}", field=field, value=value)


def _is_name(value: Any) -> bool:
    return type(value) is str and value != ""


def _is_list(value: Any) -> bool:
    return isinstance(value, tuple | list)


@attrs.frozen
class _Kind:
    """A kind of field (§2.1): which values are of it, and what a wrong one's InvalidValueError says.

    ``what`` and ``items`` may name the field as ``{field}``. A list of names has ``items``, what a
    wrong item's error says (the list was right: the error names the item).
    """

    ok: Callable[[Any], bool]
    what: str
    items: str | None = None

    def error(self, field: str, value: Any) -> InvalidValueError:
        return invalid(field, value, self.what.format(field=field))


ADAPTER = _Kind(_is_name, "adapter name must be a non-empty str")
_PATH = _Kind(_is_name, "adapter path must be a non-empty str")
_REPLICA = _Kind(_is_name, "replica id must be a non-empty str")
MODEL = _Kind(_is_name, "model must be a non-empty str")
_ADAPTER_OR_NONE = _Kind(lambda v: v is None or _is_name(v), "adapter must be a non-empty str or absent")
_MODEL_OR_NONE = _Kind(lambda v: v is None or _is_name(v), "model must be a non-empty str or absent")
_BOOL = _Kind(lambda v: type(v) is bool, "{field} must be a bool")
_TICKET_OR_NONE = _Kind(lambda v: v is None or type(v) is int, "ticket must be an int or absent")
_AT_LEAST_1 = _Kind(lambda v: type(v) is int and v >= 1, "{field} must be an int of at least 1")
_AT_LEAST_0_OR_NONE = _Kind(
    lambda v: v is None or (type(v) is int and v >= 0), "{field} must be an int of at least 0, or null"
)
_TEXT = _Kind(lambda v: type(v) is str, "{field} must be a str")
_NOW = _Kind(lambda v: is_number(v) and _is_finite(v), "{field} must be a finite number")
_NOW_OR_NONE = _Kind(
    lambda v: v is None or (is_number(v) and _is_finite(v)), "{field} must be a finite number or null"
)
_LOAD_OUTCOME = _Kind(lambda v: isinstance(v, LoadOutcome), "{field} must be a LoadOutcome")
_UNLOAD_OUTCOME = _Kind(lambda v: isinstance(v, UnloadOutcome), "{field} must be an UnloadOutcome")
_LISTED = _Kind(
    _is_list, "adapters must be a list of adapter names", "listed adapter names must be non-empty strs"
)
_READ_NAMES = _Kind(
    lambda v: v is None or _is_list(v),
    "adapters must be a list of adapter names, or null",
    "the adapter names of a reading must be non-empty strs",
)
_REMOVED = _Kind(_is_list, "replicas must be a list of replica ids", "replica ids must be non-empty strs")
_FAILED = _Kind(_is_list, "failed must be a list of replica ids", "failed replica ids must be non-empty strs")
_EXCLUDED = _Kind(
    _is_list, "exclude must be a list of replica ids", "excluded replica ids must be non-empty strs"
)

_FIELDS: dict[type, tuple[tuple[str, _Kind], ...]] = {
    ev.ReplicaAdded: (("replica", _REPLICA), ("model", MODEL), ("limit", _AT_LEAST_1)),
    ev.ReplicasRemoved: (("replicas", _REMOVED),),
    ev.LimitSet: (("model", MODEL), ("limit", _AT_LEAST_1)),
    ev.TimeAdvanced: (("now", _NOW),),
    ev.StandingBy: (("on", _BOOL),),
    ev.Requested: (("adapter", ADAPTER), ("path", _PATH)),
    ev.Released: (),
    ev.Cancelled: (),
    ev.LoadFinished: (("outcome", _LOAD_OUTCOME), ("message", _TEXT)),
    ev.UnloadFinished: (("outcome", _UNLOAD_OUTCOME), ("message", _TEXT)),
    ev.ListingReceived: (("adapters", _LISTED),),
    ev.ListingFailed: (("message", _TEXT),),
    ev.AdapterMissing: (("replica", _REPLICA), ("adapter", ADAPTER), ("ticket", _TICKET_OR_NONE)),
    ev.ReplicaFailed: (("replica", _REPLICA), ("message", _TEXT)),
    ev.ServedElsewhere: (("replica", _REPLICA), ("failed", _FAILED)),
    ev.AdapterPinned: (
        ("adapter", ADAPTER),
        ("path", _PATH),
        ("copies", _AT_LEAST_1),
        ("model", _MODEL_OR_NONE),
        ("until_held", _BOOL),
    ),
    ev.AdapterUnpinned: (("adapter", ADAPTER),),
    ev.RefusalForgotten: (("adapter", _ADAPTER_OR_NONE),),
    ev.Routed: (
        ("adapter", ADAPTER),
        ("path", _PATH),
        ("model", _MODEL_OR_NONE),
        ("exclude", _EXCLUDED),
        ("now", _NOW_OR_NONE),
    ),
    ev.ReadingReceived: (
        ("adapters", _READ_NAMES),
        ("running", _AT_LEAST_0_OR_NONE),
        ("waiting", _AT_LEAST_0_OR_NONE),
        ("max_loras", _AT_LEAST_0_OR_NONE),
    ),
    ev.ReadingFailed: (("message", _TEXT),),
    ev.AdapterChanged: (("adapter", ADAPTER),),
    ev.AdapterDismissed: (("adapter", ADAPTER),),
}
"""SPEC.md §2.1, the fields whose wrong values are an InvalidValueError: each event's, in its order.

A field that names a ticket, an operation, or (in ``requested``) a replica in use is the handler's
to check, first (its wrong values get other errors, §4); these come after it.
"""


def check_fields(event: ev.Event) -> None:
    """Raise the InvalidValueError of ``event``'s first field not of its kind (SPEC.md §2.1)."""
    fields = _FIELDS.get(type(event))
    if fields is None:  # a subclass of an event
        fields = next(f for cls, f in _FIELDS.items() if isinstance(event, cls))
    for field, kind in fields:
        value = getattr(event, field)
        if not kind.ok(value):
            raise kind.error(field, value)
        if kind.items is not None and value is not None:
            for item in value:
                if type(item) is not str or not item:
                    raise invalid(field, item, kind.items.format(field=field))


__all__ = ["ADAPTER", "MODEL", "check_fields", "invalid", "is_number"]

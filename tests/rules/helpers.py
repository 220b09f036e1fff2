"""Helpers the rule tests share: what a replica holds, events refused, engines read."""

from __future__ import annotations

from typing import Any

import pytest

import lorafleet as lf
from lorafleet import (
    Command,
    Event,
    ListingReceived,
    ReadEngine,
    ReadListing,
    Released,
    Requested,
    Routed,
    TimeAdvanced,
)
from lorafleet._rendezvous import weight

from scenario import Scenario


def ties_go_by_weight(s: Scenario, ids: list[str], names: list[str]) -> None:
    """Every one of ``ids`` tied on a free slot: each adapter of ``names`` goes to the replica of highest
    rendezvous weight, and past the first five (excluded) to the sixth."""
    for name in names:
        by_weight = sorted(ids, key=lambda replica: weight(name, replica), reverse=True)
        assert s.machine.place(name) == lf.Placement(replica=by_weight[0], placed=lf.Placed.FREE)
        skip = set(by_weight[:5])
        assert s.machine.place(name, exclude=skip) == lf.Placement(
            replica=by_weight[5], placed=lf.Placed.FREE
        )


def held(s: Scenario, replica: str) -> dict[str, int]:
    return dict(s.machine.statistics().replicas[replica].held)


def victims(s: Scenario, replica: str) -> tuple[str, ...]:
    """What ``replica`` is unloading, in name order: its victims whose loads are out among them."""
    return s.machine.statistics().replicas[replica].unloading


def refused(s: Scenario, event: Event, error: type[lf.UsageError]) -> None:
    """Feed ``event`` and expect it refused with ``error``, before anything changed."""
    before = s.machine.statistics(), s.machine.next_due()
    with pytest.raises(error):
        s(event)
    assert (s.machine.statistics(), s.machine.next_due()) == before


def requested(ticket: int, replica: str, adapter: str) -> Requested:
    return Requested(ticket=ticket, replica=replica, adapter=adapter, path=f"/adapters/{adapter}")


def idle_pair(s: Scenario, replica: str = "r") -> None:
    """``replica`` holds a then b, both idle, a the least recently used."""
    s.expect(Released(ticket=s.load(replica, "a")))
    s.expect(Released(ticket=s.load(replica, "b")))


def read_now(s: Scenario, replica: str, *running: str, now: float = 30.0) -> None:
    """List ``replica`` again (nothing changed) and read its engine: ``running`` run there."""
    held = s.machine.statistics().replicas[replica].held
    s.list_and_read(now, replica, held, running)


def read_each(s: Scenario, now: float, **readings: dict[str, Any]) -> None:
    """Advance to ``now``, when every replica's listing is due, list each as holding what it holds, and
    answer the read that follows with ``readings[replica]`` (``adapters``, ``running``, ``waiting``,
    ``max_loras``), running nothing when not given; each answer gives no command."""
    for listing in s(TimeAdvanced(now=now)):
        assert isinstance(listing, ReadListing), listing
        held = tuple(s.machine.statistics().replicas[listing.replica].held)
        read = s(ListingReceived(listing=listing.listing, adapters=held))
        assert read == [ReadEngine(read=s.reads[listing.replica], replica=listing.replica)], read
        assert s.answer_read(listing.replica, **readings.get(listing.replica, {})) == []


def another_routers(s: Scenario, now: float = 30.0) -> None:
    """Read every replica as running ``x``, an adapter of another router's: each reading is foreign."""
    read_each(s, now, **{replica: {"adapters": ["x"]} for replica in s.machine.statistics().replicas})


def routed(s: Scenario, adapter: str, **extra: object) -> tuple[int, list[Command]]:
    s.ticket += 1
    return s.ticket, s(Routed(ticket=s.ticket, adapter=adapter, path=f"/adapters/{adapter}", **extra))  # type: ignore[arg-type]

"""The properties catch planted bugs: each subclass breaks one rule, and the ci run must fail on it.

Shrinking is skipped (finding is what is checked, not the shortest story), so each run is short.
"""

from __future__ import annotations

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from lorafleet import AdapterStateMachine, Command, ListingReceived, Requested

from fleet_model import FleetModel


class EvictsBusyAdapters(AdapterStateMachine):
    """Forgets to take an adapter off the idle list when a request starts using it."""

    def _requested(self, event: Requested) -> list[Command]:
        commands = super()._requested(event)
        rep = self._replicas[event.replica]
        if event.adapter in rep.held and event.adapter not in rep.idle:
            rep.idle[event.adapter] = 0
        return commands


class ListingReaddsUnloading(AdapterStateMachine):
    """The seed's fault 1: a listing brings back an adapter whose unload is still in flight."""

    def _listing_received(self, event: ListingReceived) -> list[Command]:
        op = self._ops.get(event.listing)
        rep = getattr(op, "replica", None)
        if rep is None:
            return super()._listing_received(event)
        unloading, rep.unloading = rep.unloading, {}
        try:
            return super()._listing_received(event)
        finally:
            for name, unload in unloading.items():
                rep.unloading[name] = unload


class LoadsTwice(AdapterStateMachine):
    """Starts a second load of an adapter already being loaded instead of joining it."""

    def _admit(self, ticket: int, rep: object, adapter: str, path: str) -> list[Command]:
        loading = rep.loading  # type: ignore[attr-defined]
        if adapter in loading:
            return self._start_load(ticket, rep, adapter, path)  # type: ignore[arg-type]
        return super()._admit(ticket, rep, adapter, path)  # type: ignore[arg-type]


@pytest.mark.parametrize("planted", [EvictsBusyAdapters, ListingReaddsUnloading, LoadsTwice])
def test_the_properties_find_a_planted_bug(planted: type[AdapterStateMachine]) -> None:
    class Broken(FleetModel):
        factory = planted

    with pytest.raises(AssertionError):
        run_state_machine_as_test(
            Broken, settings=settings(settings.default, phases=[Phase.generate], print_blob=False)
        )


def test_the_properties_pass_on_the_real_machine_under_the_same_settings() -> None:
    run_state_machine_as_test(FleetModel, settings=settings(settings.default, phases=[Phase.generate]))

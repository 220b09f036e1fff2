"""The properties catch planted bugs: each subclass breaks one rule, and the ci run must fail on it.

Shrinking is skipped (finding is what is checked, not the shortest story), so each run is short. The
two bugs issue 8 found (the old rules), and a cancel that abandons a load others joined (issue 37),
are planted twice: once against the whole properties, and once with the model left out, to show that
what the world itself says must hold (liveness, no unload under a running request, a load's waiters
answered by the load) finds them on its own. properties/mutants.py plants many more, one run each.

The properties themselves pass under the same settings: that is TestFleet, in the same ci run. The
planted runs take the ci profile whatever profile is loaded: under dev's random 100 examples a bug can
go unfound now and then, and a test that asserts finding must not depend on the draw.
"""

from __future__ import annotations

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from lorafleet import AdapterStateMachine, Command, Fault, ListingReceived, ReplicasRemoved, Requested
from lorafleet._state import Load

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

    def _admit(
        self, ticket: int, rep: object, adapter: str, path: str, *, fresh: bool = True
    ) -> list[Command]:
        loading = rep.loading  # type: ignore[attr-defined]
        # Not at the cap: there the second load would queue its ticket again, and admitting the
        # queue would never end (a hang the test cannot tell from a slow run).
        if adapter in loading and not self._at_cap(rep):  # type: ignore[arg-type]
            return self._start_load(ticket, rep, adapter, path)  # type: ignore[arg-type]
        return super()._admit(ticket, rep, adapter, path, fresh=fresh)  # type: ignore[arg-type]


class HitKeepsTheTicket(AdapterStateMachine):
    """The fast path grants without recording its ticket as the highest seen."""

    def hit(self, ticket: int, *, replica: str, adapter: str) -> bool:
        last = self._last_ticket
        granted = super().hit(ticket, replica=replica, adapter=adapter)
        self._last_ticket = last
        return granted


class ListingDropsNewerCopies(AdapterStateMachine):
    """A listing drops what it does not name even if the adapter became held after it started."""

    def _listing_received(self, event: ListingReceived) -> list[Command]:
        op = self._ops.get(event.listing)
        if op is not None and hasattr(op, "started"):
            op.started = self._logical + 1
        return super()._listing_received(event)


class KeepsLostAdaptersInUse(AdapterStateMachine):
    """The old [forget] and [listing] (issue 8, 1): an adapter the engine lost stays held while a
    request runs on it, so overlapping requests keep getting hits for it and it is never loaded."""

    def _drop(self, rep: object, name: str) -> None:
        if rep.held[name].in_use:  # type: ignore[attr-defined]
            return  # only [listing] and [forget] drop an adapter in use
        super()._drop(rep, name)  # type: ignore[arg-type]


class ForgetsRunningAdaptersOnRemoval(AdapterStateMachine):
    """The old removal (issue 8, 2): adapters requests run on are forgotten with the replica, so once
    it is added back a listing holds them idle and a cold request unloads them under those requests."""

    def _replicas_removed(self, event: ReplicasRemoved) -> list[Command]:
        for replica in event.replicas:
            rep = self._replicas.get(replica)
            if rep is not None and not rep.removed:
                for name in list(rep.held):
                    self._drop(rep, name)
        return super()._replicas_removed(event)


class CancelAbandonsTheLoad(AdapterStateMachine):
    """A cancel of the request that started a load fails the requests that joined it, as if the load
    went with its starter (round 1's properties caught it; none did since)."""

    def _cancelled(self, ticket: int) -> list[Command]:
        load = self._waiting.get(ticket)
        commands = super()._cancelled(ticket)
        if isinstance(load, Load) and load.starter is None:  # it was the starter, or had gone
            for joined in load.waiters:
                del self._waiting[joined]
                commands.append(self._fail(joined, load.replica, Fault.REPLICA, "the load was abandoned"))
            load.waiters.clear()
        return commands


PLANTED = [
    (EvictsBusyAdapters, True),
    (ListingReaddsUnloading, True),
    (LoadsTwice, True),
    (HitKeepsTheTicket, True),
    (ListingDropsNewerCopies, True),
    (KeepsLostAdaptersInUse, True),
    (KeepsLostAdaptersInUse, False),
    (ForgetsRunningAdaptersOnRemoval, True),
    (ForgetsRunningAdaptersOnRemoval, False),
    (CancelAbandonsTheLoad, True),
    (CancelAbandonsTheLoad, False),
]


@pytest.mark.parametrize(
    ("planted", "with_model"),
    PLANTED,
    ids=[f"{p.__name__}{'' if m else '-without-the-model'}" for p, m in PLANTED],
)
def test_the_properties_find_a_planted_bug(planted: type[AdapterStateMachine], with_model: bool) -> None:
    class Broken(FleetModel):
        factory = planted

    Broken.with_model = with_model
    with pytest.raises(AssertionError):
        run_state_machine_as_test(
            Broken, settings=settings(settings.get_profile("ci"), phases=[Phase.generate], print_blob=False)
        )

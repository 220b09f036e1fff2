"""The methods that spell ``AdapterStateMachine.handle``, one per event: ``m.request(...)`` is
``m.handle(Requested(...))``. ``release``, which has a path of its own, is the machine's."""

from __future__ import annotations

from collections.abc import Iterable

from . import _events as events
from ._commands import Command
from ._events import Event
from ._values import LoadOutcome, UnloadOutcome


class Spellings:
    """``handle`` spelt per event, for ``AdapterStateMachine``."""

    def handle(self, event: Event) -> list[Command]:
        raise NotImplementedError  # the machine's

    def request(self, ticket: int, *, replica: str, adapter: str, path: str) -> list[Command]:
        """``handle(Requested(...))``: a request wants ``adapter`` on ``replica``."""
        return self.handle(events.Requested(ticket=ticket, replica=replica, adapter=adapter, path=path))

    def cancel(self, ticket: int) -> list[Command]:
        """``handle(Cancelled(...))``: the request went away."""
        return self.handle(events.Cancelled(ticket=ticket))

    def load_finished(self, load: int, outcome: LoadOutcome, message: str = "") -> list[Command]:
        """``handle(LoadFinished(...))``: the engine answered a load."""
        return self.handle(events.LoadFinished(load=load, outcome=outcome, message=message))

    def unload_finished(self, unload: int, outcome: UnloadOutcome, message: str = "") -> list[Command]:
        """``handle(UnloadFinished(...))``: the engine answered an unload."""
        return self.handle(events.UnloadFinished(unload=unload, outcome=outcome, message=message))

    def listing_received(self, listing: int, adapters: Iterable[str]) -> list[Command]:
        """``handle(ListingReceived(...))``: the replica's listing named ``adapters``."""
        names = adapters if isinstance(adapters, str) else tuple(adapters)
        return self.handle(events.ListingReceived(listing=listing, adapters=names))  # type: ignore[arg-type]

    def listing_failed(self, listing: int, message: str = "") -> list[Command]:
        """``handle(ListingFailed(...))``: the replica's listing could not be read."""
        return self.handle(events.ListingFailed(listing=listing, message=message))

    def adapter_missing(self, *, replica: str, adapter: str, ticket: int | None = None) -> list[Command]:
        """``handle(AdapterMissing(...))``: the replica said it does not have ``adapter``."""
        return self.handle(events.AdapterMissing(replica=replica, adapter=adapter, ticket=ticket))

    def replica_failed(self, replica: str, message: str = "") -> list[Command]:
        """``handle(ReplicaFailed(...))``: the router saw ``replica`` fail."""
        return self.handle(events.ReplicaFailed(replica=replica, message=message))

    def served_elsewhere(self, replica: str, failed: Iterable[str]) -> list[Command]:
        """``handle(ServedElsewhere(...))``: ``replica`` served what ``failed`` answered with a 5xx."""
        names = failed if isinstance(failed, str) else tuple(failed)
        return self.handle(events.ServedElsewhere(replica=replica, failed=names))  # type: ignore[arg-type]

    def pin(
        self, adapter: str, *, path: str, copies: int = 1, model: str | None = None, until_held: bool = False
    ) -> list[Command]:
        """``handle(AdapterPinned(...))``: keep ``adapter`` loaded on ``copies`` replicas (until one
        holds it: ``until_held``, [warm])."""
        return self.handle(
            events.AdapterPinned(
                adapter=adapter, path=path, copies=copies, model=model, until_held=until_held
            )
        )

    def unpin(self, adapter: str) -> list[Command]:
        """``handle(AdapterUnpinned(...))``: ``adapter`` may be evicted again."""
        return self.handle(events.AdapterUnpinned(adapter=adapter))

    def forget_refusal(self, adapter: str | None = None) -> list[Command]:
        """``handle(RefusalForgotten(...))``: the engine may take ``adapter`` now (None: every adapter)."""
        return self.handle(events.RefusalForgotten(adapter=adapter))

    def adapter_changed(self, adapter: str) -> list[Command]:
        """``handle(AdapterChanged(...))``: the files behind ``adapter`` changed."""
        return self.handle(events.AdapterChanged(adapter=adapter))

    def dismiss(self, replica: str, adapter: str) -> list[Command]:
        """``handle(AdapterDismissed(...))``: an operator asks ``replica`` to unload idle ``adapter``."""
        return self.handle(events.AdapterDismissed(replica=replica, adapter=adapter))

    def route(
        self,
        ticket: int,
        *,
        adapter: str,
        path: str,
        model: str | None = None,
        exclude: Iterable[str] = (),
        now: float | None = None,
    ) -> list[Command]:
        """``handle(Routed(...))``: a request wants ``adapter`` wherever placement puts it (at ``now``)."""
        skip = exclude if isinstance(exclude, str) else tuple(exclude)
        return self.handle(
            events.Routed(ticket=ticket, adapter=adapter, path=path, model=model, exclude=skip, now=now)  # type: ignore[arg-type]
        )

    def reading_received(
        self,
        read: int,
        adapters: Iterable[str] | None,
        *,
        running: int | None = None,
        waiting: int | None = None,
        max_loras: int | None = None,
    ) -> list[Command]:
        """``handle(ReadingReceived(...))``: the engine's figures, ``adapters`` None without the gauge."""
        names = adapters if adapters is None or isinstance(adapters, str) else tuple(adapters)
        event = events.ReadingReceived(
            read=read,
            adapters=names,  # type: ignore[arg-type]
            running=running,
            waiting=waiting,
            max_loras=max_loras,
        )
        return self.handle(event)

    def reading_failed(self, read: int, message: str = "") -> list[Command]:
        """``handle(ReadingFailed(...))``: the read of an engine got no usable answer."""
        return self.handle(events.ReadingFailed(read=read, message=message))

    def add_replica(self, replica: str, *, model: str, limit: int) -> list[Command]:
        """``handle(ReplicaAdded(...))``: the router will use ``replica``."""
        return self.handle(events.ReplicaAdded(replica=replica, model=model, limit=limit))

    def remove_replicas(self, replicas: Iterable[str]) -> list[Command]:
        """``handle(ReplicasRemoved(...))``: the router no longer uses these replicas."""
        ids = replicas if isinstance(replicas, str) else tuple(replicas)
        return self.handle(events.ReplicasRemoved(replicas=ids))  # type: ignore[arg-type]

    def set_limit(self, model: str, limit: int) -> list[Command]:
        """``handle(LimitSet(...))``: every replica of ``model`` may hold ``limit`` adapters."""
        return self.handle(events.LimitSet(model=model, limit=limit))

    def advance(self, now: float) -> list[Command]:
        """``handle(TimeAdvanced(...))``: the shell's clock reads ``now``."""
        return self.handle(events.TimeAdvanced(now=now))

    def stand_by(self, on: bool = True) -> list[Command]:
        """``handle(StandingBy(...))``: another router decides for this one (``on``), or no more."""
        return self.handle(events.StandingBy(on=on))

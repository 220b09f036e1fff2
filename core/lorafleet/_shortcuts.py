"""A shell's shortcuts into ``AdapterStateMachine`` for the warm request, which take no event object:
``hit`` and ``place_hit`` ([place] then [hit]) grant a request with no command, and ``release`` ends
one. Each is exactly the event it stands for; ``place_hit`` keeps the holder search of a request it
leaves to ``Routed``, which [route] then places from rather than search again."""

from __future__ import annotations

from collections.abc import Container, Mapping

from ._commands import Command
from ._events import Event, Released
from ._fields import ADAPTER
from ._state import Held, Parked, Replica, Route, Settings


class Shortcuts:
    """The warm request's way into ``AdapterStateMachine``: the state they change is the machine's."""

    _clock: float
    _settings: Settings
    _replicas: dict[str, Replica]
    _last_ticket: int
    _direct: bool
    _parked: dict[str, Parked]
    _found: tuple[int, str, str | None, float, Replica | None] | None
    _avoiding: float

    def handle(self, event: Event) -> list[Command]:
        raise NotImplementedError  # the machine's

    def _released(self, ticket: int) -> list[Command]:
        raise NotImplementedError  # the machine's ([release])

    def _replica_for(self, ticket: int, replica: str) -> Replica:
        raise NotImplementedError  # the machine's

    def _check_ticket(self, ticket: int) -> None:
        raise NotImplementedError  # the machine's

    def _hit(self, ticket: int, rep: Replica, held: Held) -> None:
        raise NotImplementedError  # the machine's ([hit])

    def _holder(
        self, adapter: str, model: str | None, skip: Container[str], extra: Mapping[str, float] | None
    ) -> Replica | None:
        raise NotImplementedError  # the machine's ([place])

    def _stale(self, rep: Replica, coming: int = 0) -> bool:
        raise NotImplementedError  # the machine's ([read])

    def release(self, ticket: int) -> list[Command]:
        """``handle(Released(...))``: the request is done with its adapter (straight to [release],
        unless a subclass sees every event through ``handle``)."""
        if self._direct and not self._parked:
            self._found = None
            return self._released(ticket)
        return self.handle(Released(ticket=ticket))

    def hit(self, ticket: int, *, replica: str, adapter: str) -> bool:
        """``requested`` for a shell's fast path: True when it was a [hit], granted without a command.

        Returns False, having changed nothing, when the replica does not hold the adapter: then
        send ``Requested`` with the same ticket. A hit records the ticket and counts a hit grant,
        exactly as the ``Grant`` of a ``Requested`` would.

        Raises:
            UsageError: as ``Requested`` would for the ticket, the replica or the adapter name.
        """
        rep = self._replicas.get(replica) if type(replica) is str else None
        if rep is None or rep.removed or type(ticket) is not int or ticket <= self._last_ticket:
            rep = self._replica_for(ticket, replica)  # raises the error Requested would
        if type(adapter) is not str or not adapter:
            raise ADAPTER.error("adapter", adapter)
        held = rep.held.get(adapter)
        if held is None or (rep.unloading and adapter in rep.unloading):
            return False  # not held, or an old copy ([renew])
        self._found = None
        self._hit(ticket, rep, held)
        return True

    def place_hit(self, ticket: int, *, adapter: str, model: str | None = None) -> str | None:
        """[place] then [hit] in one call, for a shell's fast path: the replica granted, or None.

        When placement (nothing excluded, no load reported) would send a request for ``adapter`` to a
        replica that holds it, the request is granted there, exactly as ``hit(ticket, replica=...,
        adapter=adapter)`` with ``place(adapter, model=model)``'s replica would, and that replica's
        id is returned. Otherwise nothing changes and it returns None: then send ``Routed``. It
        returns None too where ``Routed`` would read the replica after the grant ([read]: a stale
        one), so that the read goes out.

        Raises:
            UsageError: as ``hit`` would for the ticket, and ``place`` for the adapter name.
        """
        if type(adapter) is not str or not adapter:
            raise ADAPTER.error("adapter", adapter)
        if type(ticket) is not int or ticket <= self._last_ticket:
            self._check_ticket(ticket)
        rep = self._holder(adapter, model, (), None)
        if rep is not None:
            # Granted at once unless placement may spill past a holder at its concurrency, Routed
            # must read a stale one, or the holder is loading it (the request joins): _saturated
            # and _stale, read in place, as every routed hit asks.
            settings = self._settings
            seqs = settings.concurrency if settings.concurrency is not None else rep.seqs
            held = rep.held.get(adapter)
            if (
                held is not None
                and (seqs is None or rep.in_flight + rep.others < seqs)
                and not (settings.read_engine and self._stale(rep, coming=1))
            ):
                self._found = None
                self._hit(ticket, rep, held)
                return rep.id
        self._found = (ticket, adapter, model, self._clock, rep)  # the Routed to come places from it
        return None

    def _found_for(self, found: tuple[int, str, str | None, float, Replica | None], route: Route) -> bool:
        """Whether ``place_hit``'s holder search is ``route``'s own and still true: the same request,
        nothing excluded, and no backoff over since (nothing else moved: ``handle`` drops the search
        after any other event, and [time] gave no command)."""
        ticket, adapter, model, searched, _ = found
        if ticket != route.ticket or adapter != route.adapter or model != route.model or route.exclude:
            return False
        return self._clock == searched or self._avoiding <= searched

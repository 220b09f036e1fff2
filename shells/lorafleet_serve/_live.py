"""Replicas that change while the router runs: names re-resolved, and the configuration file watched.

A ``Discovery`` holds the replicas one ``[[discover]]`` entry resolved to last. A resolution that
fails (no answer in time, SERVFAIL, REFUSED, a network error) changes nothing: the last replicas
stand, and it says so in one line (again only once it resolves, or fails otherwise). An answer is
believed, an empty one too (no records, or no such name): those replicas drain, as any removed
replica does (requests running there end as ever, nothing new goes there).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import attrs

from lorafleet_fleet import Replica

from . import _dns
from ._config import DiscoverConfig
from ._readiness import Origin

log = logging.getLogger("lorafleet.serve")

RESOLVE_TIMEOUT = 2.0
"""Seconds one DNS question (or getaddrinfo) may take before the resolution counts as failed."""


class Discovery:
    """One ``[[discover]]`` entry and the replicas it resolved to last.

    Args:
        index: the entry's place among ``discover``, for messages.
        key: the replicas' API key, read from the entry's ``api_key_env``.
    """

    def __init__(self, entry: DiscoverConfig, index: int, key: str | None) -> None:
        self.entry = entry
        self.index = index
        self.key = key
        self.replicas: list[Replica] = []
        self.failure: str | None = None
        """What the last resolution's failure said; None after one that worked."""
        self._resolver = _dns.parse_server(entry.resolver) if entry.resolver is not None else None

    @property
    def label(self) -> str:
        return self.entry.label(self.index)

    @property
    def origin(self) -> Origin:
        return Origin(self.label, self.entry.api_key_env)

    def same_as(self, entry: DiscoverConfig, key: str | None) -> bool:
        """Whether ``entry`` (with its key) resolves to the replicas this does."""
        return attrs.evolve(entry, interval=self.entry.interval) == self.entry and key == self.key

    async def resolve(self) -> bool:
        """Resolve the name again: True when the replicas changed (a failure changes nothing)."""
        try:
            found = await self._addresses()
        except _dns.DnsError as exc:
            message = str(exc)
            if message != self.failure:
                log.warning(
                    "%s: cannot resolve it: %s; its %d replicas stand",
                    self.label,
                    message,
                    len(self.replicas),
                )
            self.failure = message
            return False
        if self.failure is not None:
            log.info("%s: resolves again", self.label)
            self.failure = None
        entry = self.entry
        replicas = [
            Replica(
                id=_dns.host_port(address, port),
                url=f"http://{_dns.host_port(address, port)}",
                model=entry.model,
                limit=entry.resolved_limit,
                api_key=self.key,
            )
            for address, port in sorted(set(found), key=lambda a: (a[0], a[1]))
        ]
        changed = replicas != self.replicas
        self.replicas = replicas
        return changed

    async def _addresses(self) -> list[tuple[str, int]]:
        entry = self.entry
        if entry.srv:
            servers, names = self._servers_and_names()
            return await _dns.services(servers, names, RESOLVE_TIMEOUT) or []
        assert entry.port is not None
        if self._resolver is None:
            found = await _dns.system_addresses(entry.dns, entry.port, RESOLVE_TIMEOUT)
        else:
            found = await _dns.addresses([self._resolver], [entry.dns], RESOLVE_TIMEOUT) or []
        return [(address, entry.port) for address in found]

    def _servers_and_names(self) -> tuple[list[tuple[str, int]], list[str]]:
        if self._resolver is not None:
            return [self._resolver], [self.entry.dns]  # a resolver named: the name as given
        system = _dns.SystemResolver.read()
        return list(system.servers), system.candidates(self.entry.dns)


def file_state(path: Path) -> tuple[str, int, int, int, int] | None:
    """What tells that the file at ``path`` changed: the file it resolves to (a Kubernetes ConfigMap
    changes by swapping a symlink), its inode, modification time and size; None when it is not there."""
    try:
        target = os.path.realpath(path)
        stat = os.stat(target)
    except OSError:
        return None
    return target, stat.st_dev, stat.st_ino, stat.st_mtime_ns, stat.st_size


def changes_line(added: tuple[str, ...], removed: tuple[str, ...], changed: tuple[str, ...]) -> str:
    """The one log line a change of the replicas makes."""
    parts = [
        f"{what} {', '.join(ids)}"
        for what, ids in (("added", added), ("removed", removed), ("changed", changed))
        if ids
    ]
    return "replicas: " + "; ".join(parts)

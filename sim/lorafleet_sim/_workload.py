"""Request streams: a seeded synthetic workload, or a user's trace file.

A workload is fixed before any policy runs, so every policy in a run sees the same requests: the
same arrival times, adapters, service times, routers and replica restarts.
"""

from __future__ import annotations

import bisect
import json
import math
import random
from pathlib import Path
from typing import Any

import attrs


class WorkloadError(ValueError):
    """A workload cannot be made: a bad option or a malformed trace line."""


@attrs.frozen
class Workload:
    """The requests of one run, in arrival order, and the replica restarts that happen during it.

    The four request tuples run in parallel: request ``i`` arrives at ``times[i]`` at router
    ``routers[i]``, wants ``adapters[i]`` and keeps a request slot for ``durations[i]`` seconds.
    """

    times: tuple[float, ...]
    adapters: tuple[str, ...]
    durations: tuple[float, ...]
    routers: tuple[int, ...]
    restarts: tuple[tuple[float, int], ...] = ()
    """(time, replica index) of each restart, in time order."""
    note: str = ""
    """What reading it left out, said beside its figures (a request log's base-model requests)."""

    def __len__(self) -> int:
        return len(self.times)

    @property
    def distinct(self) -> int:
        """Distinct adapters asked for: the compulsory loads of any routing."""
        return len(set(self.adapters))


@attrs.frozen
class Synthetic:
    """A Poisson stream of requests over Zipf-skewed adapters (issue 10's model).

    Args:
        adapters: how many adapters there are.
        skew: the Zipf exponent: the adapter of popularity rank ``k`` (from 1) is asked for in
            proportion to ``1 / k ** skew``. Ranks map to adapters through a seeded permutation.
        rate: requests per second (Poisson arrivals).
        service: mean seconds a request keeps a slot (exponentially distributed).
        requests: how many requests.
        routers: how many routers share the stream (each request goes to one, uniformly).
        replicas: how many replicas (restarts pick among them).
        shift: from the middle of the stream on, ranks map through a second permutation.
        flash: for the window from 40 % to 50 % of the stream, this share of requests goes to the
            least popular adapter (a cold one); None for no flash crowd.
        restarts: how many replica restarts, evenly spaced over the stream, each a seeded replica.
        swing: a daily swing: the rate follows ``rate * (1 + swing * sin(2 pi t / T))`` over one
            period ``T`` as long as the run (``requests / rate`` seconds); None for a steady rate.
        bursts: Markov-modulated bursts: calm spells (exponential, mean ``BURST_CALM`` s) and bursts
            (mean ``BURST_LENGTH`` s) alternate; in a burst the rate doubles and the extra half of the
            requests goes to one adapter drawn for that burst, and the calm rate is such that the mean
            stays ``rate``.
    """

    adapters: int
    skew: float
    rate: float
    service: float
    requests: int
    routers: int = 1
    replicas: int = 1
    shift: bool = False
    flash: float | None = None
    restarts: int = 0
    swing: float | None = None
    bursts: bool = False

    def generate(self, seed: int) -> Workload:
        """The stream for ``seed``; the same seed always gives the same stream."""
        # One generator per kind of draw, so that turning an option on (a shift, a flash crowd)
        # changes only what that option is about, not every other draw after it.
        arrivals = random.Random(f"{seed}:arrivals")
        choices = random.Random(f"{seed}:adapters")
        services = random.Random(f"{seed}:services")
        routing = random.Random(f"{seed}:routers")
        shuffles = random.Random(f"{seed}:permutations")
        width = len(str(self.adapters - 1))
        names = [f"adapter-{i:0{width}d}" for i in range(self.adapters)]
        first = names[:]
        shuffles.shuffle(first)
        second = names[:]
        shuffles.shuffle(second)
        cumulative: list[float] = []
        total = 0.0
        for k in range(1, self.adapters + 1):
            total += k**-self.skew
            cumulative.append(total)
        n = self.requests
        half = n // 2
        flash_from, flash_to = (int(n * 0.4), int(n * 0.5)) if self.flash is not None else (0, 0)
        flash = self.flash or 0.0
        times: list[float] = []
        adapters: list[str] = []
        now = 0.0
        last = self.adapters - 1
        spells = _Spells(random.Random(f"{seed}:bursts"), names) if self.bursts else None
        swing = self.swing or 0.0
        period = n / self.rate
        calm = self.rate / (1 + BURST_LENGTH / (BURST_CALM + BURST_LENGTH)) if spells else self.rate
        # Thinning (Lewis and Shedler): candidates at the highest rate, each kept with the rate's share.
        highest = calm * (1 + swing) * (2 if spells else 1)
        for i in range(n):
            while True:
                now += arrivals.expovariate(highest)
                here = calm * (1 + swing * math.sin(2 * math.pi * now / period))
                burst = spells.burst_at(now) if spells else None
                if burst is not None:
                    here *= 2
                if here >= highest or arrivals.random() * highest < here:
                    break
            times.append(now)
            ranking = second if self.shift and i >= half else first
            if burst is not None and choices.random() < 0.5:
                adapters.append(burst)
            elif flash_from <= i < flash_to and choices.random() < flash:
                adapters.append(ranking[last])
            else:
                rank = bisect.bisect_right(cumulative, choices.random() * total)
                adapters.append(ranking[min(rank, last)])
        durations = tuple(services.expovariate(1.0 / self.service) for _ in range(n))
        routers = tuple(routing.randrange(self.routers) for _ in range(n)) if self.routers > 1 else (0,) * n
        places = random.Random(f"{seed}:restarts")
        end = times[-1] if times else 0.0
        restarts = tuple(
            (end * (j + 1) / (self.restarts + 1), places.randrange(self.replicas))
            for j in range(self.restarts)
        )
        return Workload(tuple(times), tuple(adapters), durations, routers, restarts)


BURST_CALM = 30.0
"""Mean seconds between two bursts (``Synthetic.bursts``)."""
BURST_LENGTH = 10.0
"""Mean seconds a burst lasts."""


class _Spells:
    """Calm spells and bursts, alternating, drawn as time goes on: each burst with its adapter."""

    def __init__(self, rng: random.Random, names: list[str]) -> None:
        self.rng = rng
        self.names = names
        self.ends = rng.expovariate(1 / BURST_CALM)
        self.burst: str | None = None

    def burst_at(self, now: float) -> str | None:
        """The adapter of the burst under way at ``now`` (times only rise), or None when calm."""
        while now >= self.ends:
            if self.burst is None:
                self.burst = self.names[self.rng.randrange(len(self.names))]
                self.ends += self.rng.expovariate(1 / BURST_LENGTH)
            else:
                self.burst = None
                self.ends += self.rng.expovariate(1 / BURST_CALM)
        return self.burst


def read_trace(
    path: Path, *, routers: int = 1, replicas: int = 1, restarts: int = 0, seed: int = 1
) -> Workload:
    """A workload from a trace file: ``lorafleet serve``'s request log, or lines ``timestamp adapter
    duration``.

    The request log (JSON lines, docs/serve.md) is told by its first line, an object. Each request
    that named an adapter and was granted it on a replica is one request here: it arrives at its
    ``time`` and keeps its slot for ``duration - wait`` seconds (from the grant to its last byte).
    Requests for a base model and those refused before a replica took them (an unknown adapter, a
    bad body) are left out, and counted in ``Workload.note``.

    In the plain format, timestamps and durations are seconds; blank lines and lines starting with
    ``#`` are skipped. Either way lines may come in any order (they are sorted by time, keeping file
    order among equal times). Routers and restarts are drawn from ``seed`` as for a synthetic stream.

    Raises:
        WorkloadError: the file cannot be read, a line is malformed (the message names it), or it
            holds no request.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkloadError(f"cannot read trace {str(path)!r}: {exc}") from None
    lines = [(n, line.strip()) for n, line in enumerate(text.splitlines(), start=1)]
    lines = [(n, line) for n, line in lines if line and not line.startswith("#")]
    if not lines:
        raise WorkloadError(f"trace {str(path)!r} holds no request: it is empty")
    note = ""
    if lines[0][1].startswith("{"):
        rows, note = _request_log(path, lines)
    else:
        rows = _plain(path, lines)
    rows.sort()
    start = rows[0][0]
    times = tuple(at - start for at, _, _, _ in rows)
    choose = random.Random(f"{seed}:routers")
    router_of = tuple(choose.randrange(routers) for _ in rows) if routers > 1 else (0,) * len(rows)
    places = random.Random(f"{seed}:restarts")
    end = times[-1]
    restart_at = tuple((end * (j + 1) / (restarts + 1), places.randrange(replicas)) for j in range(restarts))
    return Workload(
        times,
        tuple(adapter for _, _, adapter, _ in rows),
        tuple(duration for _, _, _, duration in rows),
        router_of,
        restart_at,
        note,
    )


def _plain(path: Path, lines: list[tuple[int, str]]) -> list[tuple[float, int, str, float]]:
    rows: list[tuple[float, int, str, float]] = []
    for number, stripped in lines:
        fields = stripped.split()
        where = f"{path}:{number}"
        if len(fields) != 3:
            raise WorkloadError(f"{where}: expected 'timestamp adapter duration', got {stripped!r}")
        at = _number(fields[0], "timestamp", where)
        duration = _number(fields[2], "duration", where)
        if duration <= 0:
            raise WorkloadError(f"{where}: duration must be above 0, not {fields[2]!r}")
        rows.append((at, number, fields[1], duration))
    return rows


SHORTEST = 1e-6
"""The least service a request of a request log keeps (one whose wait took all its duration)."""


def _request_log(path: Path, lines: list[tuple[int, str]]) -> tuple[list[tuple[float, int, str, float]], str]:
    """The requests of ``lorafleet serve``'s request log, and a note on those left out."""
    rows: list[tuple[float, int, str, float]] = []
    bases = refused = 0
    for number, stripped in lines:
        where = f"{path}:{number}"
        try:
            entry = json.loads(stripped)
        except ValueError as exc:
            raise WorkloadError(f"{where}: not a JSON object of the request log ({exc})") from None
        if not isinstance(entry, dict):
            raise WorkloadError(f"{where}: not a JSON object of the request log, but {stripped[:60]!r}")
        at = _field(entry, "time", where)
        duration = _field(entry, "duration", where)
        adapter = entry.get("adapter")
        if adapter is not None and (not isinstance(adapter, str) or not adapter):
            raise WorkloadError(f"{where}: 'adapter' must be a name or null, not {adapter!r}")
        if entry.get("replica") is None:
            refused += 1  # no replica took it (a bad body, an unknown name): it cost the fleet nothing
            continue
        if adapter is None or entry.get("wait") is None:
            bases += 1
            continue
        wait = _field(entry, "wait", where)
        rows.append((at, number, adapter, max(duration - wait, SHORTEST)))
    skipped = []
    if bases:
        skipped.append(f"{bases} for a base model")
    if refused:
        skipped.append(f"{refused} that no replica took")
    note = f"left out {' and '.join(skipped)}" if skipped else ""
    if not rows:
        raise WorkloadError(
            f"trace {str(path)!r} holds no request for an adapter that a replica took"
            + (f" ({note})" if note else "")
        )
    return rows, note


def _field(entry: dict[str, Any], name: str, where: str) -> float:
    value = entry.get(name)
    if (type(value) is int or type(value) is float) and math.isfinite(value) and value >= 0:
        return float(value)
    shown = "missing" if name not in entry else repr(value)
    raise WorkloadError(f"{where}: {name!r} must be a finite number of seconds, at least 0, not {shown}")


def _number(text: str, what: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise WorkloadError(f"{where}: {what} {text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise WorkloadError(f"{where}: {what} must be a finite number of seconds, at least 0, not {text!r}")
    return value

"""Time to first token and request duration, per adapter and per ``how``, as Prometheus histograms.

- ``lorafleet_serve_time_to_first_token_seconds{adapter,how}``: streamed requests answered 200, from
  arrival to the first byte of the stream relayed;
- ``lorafleet_serve_request_duration_seconds{adapter,how}``: requests a replica took, from arrival to
  the last byte relayed (or the end).

``how`` is how the adapter was granted: ``hit``, ``joined``, ``loaded``, or ``base`` for a base model's
request (whose ``adapter`` is ``_base``). The adapters are bounded as the fleet's per-adapter families
are (``PrometheusMetrics(top_adapters=...)``, ``server.metrics_adapters``): at each scrape the most
requested adapters since the fleet began (``Fleet.adapter_statistics``) each get a label value, and
every other adapter's requests from then on are summed under ``adapter="_other"``. An adapter counts
from the scrape that gave it its label; one that loses it stops being exported. Every series is a
counter that never goes down. So at most ``3 x (top + 1) + 1`` label pairs, 28 series each.

A request pays a dictionary look-up and a few additions; the histograms are made when scraped.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Collection
from typing import Any

from lorafleet_fleet import OTHER_ADAPTERS

TTFT_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Upper bounds, in seconds, of the time-to-first-token histogram's buckets."""
DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""Upper bounds, in seconds, of the request-duration histogram's buckets."""
BASE = "_base"
"""The ``adapter`` label of base-model requests."""

_TTFT_SUM = len(TTFT_BUCKETS) + 1
_DURATION = _TTFT_SUM + 1
_DURATION_SUM = _DURATION + len(DURATION_BUCKETS) + 1
_WIDTH = _DURATION_SUM + 1


class Latency:
    """The two histograms, counted as requests end and exported when Prometheus scrapes.

    Args:
        top: the adapters that have a label value of their own now (called at each scrape).
    """

    def __init__(self, top: Callable[[], Collection[str]]) -> None:
        self._top = top
        self._members: dict[str, dict[str, list[int]]] = {}
        """Adapter (with a label of its own, ``_other`` and ``_base``) to how to its counts."""
        self._other: dict[str, list[int]] = {}
        self._members[OTHER_ADAPTERS] = self._other
        self._members[BASE] = {}

    def observe(self, adapter: str | None, how: str, ttft: float | None, duration: float) -> None:
        """A request ended: for ``adapter`` (None: a base model's), granted ``how``; ``ttft`` is None for
        a request that was not streamed, or whose stream never began."""
        hows = self._members.get(adapter if adapter is not None else BASE)
        if hows is None or adapter == OTHER_ADAPTERS:
            hows = self._other
        counts = hows.get(how)
        if counts is None:
            counts = hows[how] = [0] * _WIDTH
        if ttft is not None:
            counts[bisect.bisect_left(TTFT_BUCKETS, ttft)] += 1
            counts[_TTFT_SUM] += round(ttft * 1e6)
        counts[_DURATION + bisect.bisect_left(DURATION_BUCKETS, duration)] += 1
        counts[_DURATION_SUM] += round(duration * 1e6)

    def _rank(self) -> None:
        """Give the adapters in the top now their label values, and take them from the others."""
        top = set(self._top())
        top.discard(OTHER_ADAPTERS)
        top.discard(BASE)
        members = self._members
        for name in [n for n in members if n not in top and n not in (OTHER_ADAPTERS, BASE)]:
            del members[name]
        for name in top:
            members.setdefault(name, {})

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> list[Any]:
        from prometheus_client.core import HistogramMetricFamily

        self._rank()
        ttft = HistogramMetricFamily(
            "lorafleet_serve_time_to_first_token_seconds",
            "Streamed requests answered 200, from arrival to the first byte of the stream relayed",
            labels=["adapter", "how"],
        )
        duration = HistogramMetricFamily(
            "lorafleet_serve_request_duration_seconds",
            "Requests a replica took, from arrival to the last byte relayed",
            labels=["adapter", "how"],
        )
        ttft_bounds = [*(repr(b) for b in TTFT_BUCKETS), "+Inf"]
        duration_bounds = [*(repr(b) for b in DURATION_BUCKETS), "+Inf"]
        for adapter in sorted(self._members):
            for how, counts in sorted(self._members[adapter].items()):
                first = list(itertools.accumulate(counts[:_TTFT_SUM]))
                if first[-1]:
                    buckets = list(zip(ttft_bounds, first, strict=True))
                    ttft.add_metric([adapter, how], buckets, counts[_TTFT_SUM] / 1e6)
                whole = list(itertools.accumulate(counts[_DURATION:_DURATION_SUM]))
                buckets = list(zip(duration_bounds, whole, strict=True))
                duration.add_metric([adapter, how], buckets, counts[_DURATION_SUM] / 1e6)
        return [ttft, duration]
